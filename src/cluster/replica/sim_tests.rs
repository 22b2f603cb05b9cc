//! Three replicas of one partition, each a raft-rs `RawNode` over its own partition log on
//! real files, driven in one thread with messages passed in memory: batches proposed on
//! the leader land at the same offsets on every replica; a leader cut off with a batch
//! only it appended is replaced, and when it comes back its divergent tail is cut and it
//! ends with the same log as the others.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use raft::eraftpb::{Entry, Message};
use raft::{Config, GetEntriesContext, RawNode, StateRole, Storage};

use super::storage::ReplicaStorage;
use crate::protocol::record::{BatchHeader, encode_batch};
use crate::storage::log::PartitionLog;
use crate::storage::{FsyncPolicy, LogConfig};

fn run<T: Send + 'static>(f: impl AsyncFnOnce() -> T + Send + 'static) -> T {
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move { f().await })
        .unwrap()
        .join()
        .unwrap()
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        segment_age: Duration::from_secs(3600),
        // Small segments: the replicas roll (and write `.raft` files) as they go.
        index_entries: 8,
        fsync: FsyncPolicy::Always,
        ..LogConfig::default()
    }
}

/// A client's batch of 2 records carrying `offset`, its payload `tag`.
fn batch(offset: u64, tag: u8) -> Vec<u8> {
    let mut bytes = encode_batch(1_000, b"k", &[tag; 24], 2);
    let mut header = BatchHeader::decode(&bytes, &Default::default()).unwrap();
    header.offset = offset;
    header.encode(&mut bytes);
    bytes
}

struct Replica {
    dir: PathBuf,
    node: Option<RawNode<ReplicaStorage>>,
}

impl Replica {
    async fn start(dir: &Path, id: u64, new: bool) -> RawNode<ReplicaStorage> {
        let log = PartitionLog::open_raft(dir, log_config(), 1).await.unwrap();
        let storage = ReplicaStorage::open(log).unwrap();
        if new {
            storage.initialize(&[1, 2, 3]).unwrap();
        }
        let config = Config {
            id,
            election_tick: 10,
            heartbeat_tick: 2,
            pre_vote: true,
            check_quorum: true,
            // Entries are applied by nobody here: a restart replays from the commit.
            applied: storage.initial_state().unwrap().hard_state.commit,
            ..Config::default()
        };
        let logger = crate::cluster::raft_log::logger(1, id);
        RawNode::new(&config, storage, &logger).unwrap()
    }
}

struct Sim {
    replicas: Vec<Replica>,
    in_flight: Vec<Message>,
    /// Replicas whose messages are lost (cut off), both ways.
    cut: Vec<u64>,
}

impl Sim {
    async fn new(root: &Path) -> Sim {
        let mut replicas = Vec::new();
        for id in 1..=3 {
            let dir = root.join(format!("r{id}"));
            let node = Replica::start(&dir, id, true).await;
            replicas.push(Replica {
                dir,
                node: Some(node),
            });
        }
        Sim {
            replicas,
            in_flight: Vec::new(),
            cut: Vec::new(),
        }
    }

    fn node(&mut self, id: u64) -> &mut RawNode<ReplicaStorage> {
        self.replicas[id as usize - 1]
            .node
            .as_mut()
            .expect("running")
    }

    fn leader(&self) -> Option<u64> {
        self.replicas
            .iter()
            .filter_map(|r| r.node.as_ref())
            .find(|n| n.raft.state == StateRole::Leader)
            .map(|n| n.raft.id)
    }

    /// Delivers what is in flight, ticks everyone once, and handles every replica's
    /// `Ready` (persisting before the messages that depend on it are sent).
    async fn round(&mut self) {
        for message in std::mem::take(&mut self.in_flight) {
            if self.cut.contains(&message.to) || self.cut.contains(&message.from) {
                continue;
            }
            if let Some(node) = self.replicas[message.to as usize - 1].node.as_mut() {
                let _ = node.step(message);
            }
        }
        for i in 0..self.replicas.len() {
            let Some(node) = self.replicas[i].node.as_mut() else {
                continue;
            };
            node.tick();
            let mut sent = Vec::new();
            while node.has_ready() {
                let mut ready = node.ready();
                sent.extend(ready.take_messages());
                node.store().append(ready.entries()).await.unwrap();
                if let Some(hard) = ready.hs() {
                    node.store().set_state(hard, None).unwrap();
                }
                sent.extend(ready.take_persisted_messages());
                let mut light = node.advance(ready);
                if let Some(commit) = light.commit_index() {
                    let mut hard = node.store().initial_state().unwrap().hard_state;
                    hard.commit = commit;
                    node.store().set_state(&hard, None).unwrap();
                }
                sent.extend(light.take_messages());
                node.advance_apply();
            }
            self.in_flight.extend(sent);
        }
    }

    async fn until_leader(&mut self, not: Option<u64>) -> u64 {
        for _ in 0..200 {
            self.round().await;
            if let Some(leader) = self.leader().filter(|l| Some(*l) != not) {
                // Its own entry of the new term persisted: proposals land after it.
                self.round().await;
                return leader;
            }
        }
        panic!("no leader within 200 rounds");
    }

    /// Proposes a batch on `leader` at the offset its log ends at (it has nothing
    /// unpersisted between rounds).
    async fn propose(&mut self, leader: u64, tag: u8) {
        let node = self.node(leader);
        let offset = node.store().log().next_offset();
        node.propose(Vec::new(), batch(offset, tag)).unwrap();
        self.round().await;
    }

    /// Every entry replica `id` holds, and its commit index.
    fn log_of(&mut self, id: u64) -> (Vec<Entry>, u64) {
        let node = self.node(id);
        let store = node.store();
        let (first, last) = (store.first_index().unwrap(), store.last_index().unwrap());
        let entries = store
            .entries(first, last + 1, None, GetEntriesContext::empty(false))
            .unwrap();
        (entries, node.raft.raft_log.committed)
    }

    async fn settle(&mut self) {
        for _ in 0..30 {
            self.round().await;
        }
    }
}

fn data(entries: &[Entry]) -> Vec<Bytes> {
    entries.iter().map(|e| e.data.clone()).collect()
}

#[test]
fn three_replicas_agree_and_a_returning_leader_loses_its_divergent_tail() {
    run(async || {
        let root = tempfile::tempdir().unwrap();
        let mut sim = Sim::new(root.path()).await;
        let first = sim.until_leader(None).await;
        for tag in 0..12 {
            sim.propose(first, tag).await;
        }
        sim.settle().await;
        let (reference, committed) = sim.log_of(first);
        assert_eq!(committed, reference.last().unwrap().index);
        for id in 1..=3 {
            assert_eq!(
                sim.log_of(id),
                (reference.clone(), committed),
                "replica {id}"
            );
        }

        // The leader is cut off, then appends a batch nobody else gets: never committed.
        sim.cut = vec![first];
        sim.propose(first, 0xee).await;
        let (tail, _) = sim.log_of(first);
        assert_eq!(
            tail.len(),
            reference.len() + 1,
            "appended on the old leader only"
        );
        let second = sim.until_leader(Some(first)).await;
        for tag in 20..25 {
            sim.propose(second, tag).await;
        }
        // The old leader stops (as a kill would) and comes back from its files.
        let dir = sim.replicas[first as usize - 1].dir.clone();
        let old = sim.replicas[first as usize - 1].node.take().unwrap();
        let log = old.store().log();
        drop(old);
        log.close().await.unwrap();
        sim.cut.clear();
        let back = Replica::start(&dir, first, false).await;
        sim.replicas[first as usize - 1].node = Some(back);
        sim.settle().await;

        let (agreed, committed) = sim.log_of(second);
        assert!(!data(&agreed).iter().any(|d| d.ends_with(&[0xee; 4])));
        for id in 1..=3 {
            let (entries, commit) = sim.log_of(id);
            assert_eq!(
                data(&entries),
                data(&agreed),
                "replica {id}: the same batches"
            );
            assert_eq!(entries, agreed, "replica {id}: the same indices and terms");
            assert_eq!(commit, committed, "replica {id}");
        }
        // Readers of every replica see the same batches at the same offsets.
        let served = |sim: &mut Sim, id: u64| -> Vec<(u64, Bytes)> {
            let log = sim.node(id).store().log();
            let mut out = Vec::new();
            let mut offset = 0;
            loop {
                let read = log.read(offset, 1 << 20).unwrap();
                let Some(last) = read.last() else { break };
                offset = last.entry.next_offset();
                out.extend(read.iter().map(|b| (b.entry.offset, b.bytes.clone())));
            }
            out
        };
        let on_second = served(&mut sim, second);
        assert_eq!(on_second.len(), 12 + 5);
        for id in 1..=3 {
            assert_eq!(served(&mut sim, id), on_second, "replica {id}");
        }
    });
}
