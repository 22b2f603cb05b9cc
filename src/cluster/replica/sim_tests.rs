//! Three replicas of one partition, each a raft-rs `RawNode` over its own partition log on
//! real files, driven in one thread with messages passed in memory: batches proposed on
//! the leader land at the same offsets on every replica; a leader cut off with a batch
//! only it appended is replaced, and when it comes back its divergent tail is cut and it
//! ends with the same log as the others.

use std::path::{Path, PathBuf};
use std::time::Duration;

use bytes::Bytes;
use raft::eraftpb::{Entry, Message};
use raft::{Config, GetEntriesContext, Storage};

use super::driver::{ProposeError, ReplicaDriver};
use super::storage::ReplicaStorage;
use crate::protocol::record::encode_batch;
use crate::storage::log::PartitionLog;
use crate::storage::{FsyncPolicy, LogConfig};

use crate::on_executor::run;

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

/// A client's batch of 2 records, its payload `tag`; the leader gives it its offsets.
fn batch(tag: u8) -> Vec<u8> {
    encode_batch(1_000, b"k", &[tag; 24], 2)
}

struct Replica {
    dir: PathBuf,
    driver: Option<ReplicaDriver>,
}

impl Replica {
    async fn start(dir: &Path, id: u64, new: bool) -> ReplicaDriver {
        let log = PartitionLog::open_raft(dir, log_config(), 1).await.unwrap();
        let storage = ReplicaStorage::open(log).unwrap();
        if new {
            storage.initialize(&[1, 2, 3]).unwrap();
        }
        let config = Config {
            election_tick: 10,
            heartbeat_tick: 2,
            pre_vote: true,
            check_quorum: true,
            ..Config::default()
        };
        ReplicaDriver::new(id, storage, &config).unwrap()
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
            let driver = Replica::start(&dir, id, true).await;
            replicas.push(Replica {
                dir,
                driver: Some(driver),
            });
        }
        Sim {
            replicas,
            in_flight: Vec::new(),
            cut: Vec::new(),
        }
    }

    fn node(&mut self, id: u64) -> &mut ReplicaDriver {
        self.replicas[id as usize - 1]
            .driver
            .as_mut()
            .expect("running")
    }

    fn leader(&self) -> Option<u64> {
        let running = self.replicas.iter().enumerate();
        running
            .filter(|(_, r)| r.driver.as_ref().is_some_and(ReplicaDriver::is_leader))
            .map(|(i, _)| i as u64 + 1)
            .next()
    }

    /// Delivers what is in flight, ticks everyone once, and handles every replica's
    /// `Ready` (each persists before it sends what depends on it).
    async fn round(&mut self) {
        for message in std::mem::take(&mut self.in_flight) {
            if self.cut.contains(&message.to) || self.cut.contains(&message.from) {
                continue;
            }
            if let Some(driver) = self.replicas[message.to as usize - 1].driver.as_mut() {
                let _ = driver.step(message);
            }
        }
        for replica in &mut self.replicas {
            let Some(driver) = replica.driver.as_mut() else {
                continue;
            };
            driver.tick();
            driver.handle_ready().await.unwrap();
            self.in_flight.extend(driver.take_messages());
        }
    }

    async fn until_leader(&mut self, not: Option<u64>) -> u64 {
        for _ in 0..200 {
            self.round().await;
            if let Some(leader) = self.leader().filter(|l| Some(*l) != not) {
                return leader;
            }
        }
        panic!("no leader within 200 rounds");
    }

    /// Proposes `count` batches on `leader` in one go (raft-rs holds them unpersisted
    /// until the round); their offsets follow each other.
    async fn propose(&mut self, leader: u64, tags: std::ops::Range<u8>) {
        let node = self.node(leader);
        let mut expected = None;
        for tag in tags {
            let proposal = node.propose(&batch(tag)).unwrap();
            let (offset, next) = (proposal.base_offset, proposal.next_offset);
            if let Some(expected) = expected {
                assert_eq!(offset, expected, "contiguous offsets");
            }
            expected = Some(next);
        }
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
        (entries, node.committed())
    }

    async fn settle(&mut self) {
        for _ in 0..30 {
            self.round().await;
        }
    }
}

/// What readers of replica `id` are served: each batch's offset and bytes.
fn served(sim: &mut Sim, id: u64) -> Vec<(u64, Bytes)> {
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
        for tags in [0..1, 1..6, 6..12] {
            sim.propose(first, tags).await;
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
        sim.propose(first, 0xee..0xef).await;
        let (tail, _) = sim.log_of(first);
        assert_eq!(
            tail.len(),
            reference.len() + 1,
            "appended on the old leader only"
        );
        // Uncommitted, it is not served, not even by the replica that holds it.
        assert_eq!(served(&mut sim, first).len(), 12);
        let second = sim.until_leader(Some(first)).await;
        // The cut-off leader steps down within an election timeout or two (check-quorum)
        // and proposes nothing more.
        for _ in 0..40 {
            if !sim.node(first).is_leader() {
                break;
            }
            sim.round().await;
        }
        let refused = sim.node(first).propose(&batch(1));
        assert!(
            matches!(refused, Err(ProposeError::NotLeader { .. })),
            "{refused:?}"
        );
        for tags in [20..22, 22..25] {
            sim.propose(second, tags).await;
        }
        // The old leader stops (as a kill would) and comes back from its files.
        let dir = sim.replicas[first as usize - 1].dir.clone();
        let old = sim.replicas[first as usize - 1].driver.take().unwrap();
        let log = old.store().log();
        drop(old);
        log.close().await.unwrap();
        sim.cut.clear();
        let back = Replica::start(&dir, first, false).await;
        sim.replicas[first as usize - 1].driver = Some(back);
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
        let on_second = served(&mut sim, second);
        assert_eq!(on_second.len(), 12 + 5);
        let end = sim.node(second).store().log().next_offset();
        for id in 1..=3 {
            assert_eq!(served(&mut sim, id), on_second, "replica {id}");
            assert_eq!(
                sim.node(id).high_watermark(),
                end,
                "replica {id}: all committed"
            );
        }
    });
}
