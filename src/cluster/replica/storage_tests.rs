//! The replica's Raft storage on real files: entries read back as appended (across a
//! reopen), a conflicting tail cut, a follower refusing a batch at another offset, and a
//! raft-rs `RawNode` electing itself and committing a batch over it.

use std::time::Duration;

use raft::eraftpb::{ConfChange, ConfChangeType, Entry, EntryType};
use raft::{Config, GetEntriesContext, RawNode, Storage};

use super::*;
use crate::protocol::record::{BatchHeader, encode_batch};
use crate::storage::{FsyncPolicy, LogConfig};

use crate::on_executor::run;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        segment_age: Duration::from_secs(3600),
        index_entries: 4,
        fsync: FsyncPolicy::Always,
        ..LogConfig::default()
    }
}

async fn open(dir: &std::path::Path) -> ReplicaStorage {
    let log = PartitionLog::open_raft(dir, config(), 1).await.unwrap();
    ReplicaStorage::open(log).unwrap()
}

/// A client's batch of `records` records carrying `offset` in its header.
fn batch(offset: u64, tag: u8, records: u32) -> Bytes {
    let mut bytes = encode_batch(1_000, b"k", &[tag; 16], records);
    let mut header = BatchHeader::decode(&bytes, &Default::default()).unwrap();
    header.offset = offset;
    header.encode(&mut bytes);
    Bytes::from(bytes)
}

fn normal(index: u64, term: u64, data: Bytes) -> Entry {
    Entry {
        index,
        term,
        data,
        ..Default::default()
    }
}

fn conf_change(index: u64, term: u64) -> Entry {
    let mut cc = ConfChange::default();
    cc.set_change_type(ConfChangeType::AddNode);
    cc.node_id = 2;
    let mut entry = Entry {
        index,
        term,
        context: Bytes::from_static(b"proposal 7"),
        data: Bytes::from(protobuf::Message::write_to_bytes(&cc).unwrap()),
        ..Default::default()
    };
    entry.set_entry_type(EntryType::EntryConfChange);
    entry
}

/// The log of the tests: a new leader's empty entry (1, term 1, offset 0), a batch of 2
/// records (2, term 1, offsets 1..3), a configuration change (3, term 2, offset 3), a
/// batch (4, term 2, offset 4).
fn entries() -> Vec<Entry> {
    vec![
        normal(1, 1, Bytes::new()),
        normal(2, 1, batch(1, 0xa, 2)),
        conf_change(3, 2),
        normal(4, 2, batch(4, 0xb, 1)),
    ]
}

fn read_all(storage: &ReplicaStorage) -> Vec<Entry> {
    let (first, last) = (
        storage.first_index().unwrap(),
        storage.last_index().unwrap(),
    );
    let context = GetEntriesContext::empty(false);
    storage.entries(first, last + 1, None, context).unwrap()
}

#[test]
fn entries_read_back_as_appended_and_after_a_reopen() {
    run(async || {
        let dir = tempfile::tempdir().unwrap();
        let storage = open(dir.path()).await;
        assert_eq!(
            (
                storage.first_index().unwrap(),
                storage.last_index().unwrap()
            ),
            (1, 0)
        );
        storage.append(&entries()).await.unwrap();
        assert_eq!(read_all(&storage), entries());
        assert_eq!(storage.term(0).unwrap(), 0);
        assert_eq!(storage.term(2).unwrap(), 1);
        assert_eq!(storage.term(3).unwrap(), 2);
        assert!(storage.term(5).is_err(), "past the log");
        // Raft's own entries took an offset each but are never served to a reader.
        let log = storage.log();
        assert_eq!(log.next_offset(), 5);
        let served: Vec<u64> = log
            .read(0, 1 << 20)
            .unwrap()
            .iter()
            .map(|b| b.entry.offset)
            .collect();
        assert_eq!(served, [1]);
        // At least one entry, whatever the size limit.
        let one = storage
            .entries(1, 5, 1, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(one.len(), 1);

        drop(storage);
        log.close().await.unwrap();
        let reopened = open(dir.path()).await;
        assert_eq!(read_all(&reopened), entries());
        assert_eq!(reopened.term(4).unwrap(), 2);
    });
}

#[test]
fn readers_stop_at_the_commit_cap_and_a_cut_keeps_it() {
    run(async || {
        let dir = tempfile::tempdir().unwrap();
        let storage = open(dir.path()).await;
        storage.append(&entries()).await.unwrap();
        let log = storage.log();
        assert_eq!(log.high_watermark(), 5, "no cap before a driver sets one");
        log.set_commit_cap(3);
        assert_eq!(log.high_watermark(), 3);
        let served: Vec<u64> = log
            .read(0, 1 << 20)
            .unwrap()
            .iter()
            .map(|b| b.entry.offset)
            .collect();
        assert_eq!(served, [1], "the batch at 4 is not committed");
        // A cut of the uncommitted tail keeps the cap on the reopened log.
        storage
            .append(&[normal(4, 3, batch(4, 0xc, 1))])
            .await
            .unwrap();
        assert_eq!(storage.log().commit_cap(), Some(3));
        storage.log().set_commit_cap(4);
        assert_eq!(storage.log().high_watermark(), 4);
    });
}

#[test]
fn a_commit_cap_moving_back_is_a_bug_that_stops() {
    run(async || {
        let dir = tempfile::tempdir().unwrap();
        let storage = open(dir.path()).await;
        storage.append(&entries()).await.unwrap();
        let log = storage.log();
        log.set_commit_cap(4);
        let back = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| log.set_commit_cap(2)));
        let message = back.unwrap_err();
        let message = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(message.contains("the commit only grows"), "{message}");
        assert_eq!(log.high_watermark(), 4, "unchanged");
    });
}

#[test]
fn a_conflicting_tail_is_cut_from_the_log_and_the_epochs() {
    run(async || {
        let dir = tempfile::tempdir().unwrap();
        let storage = open(dir.path()).await;
        storage.append(&entries()).await.unwrap();
        // A leader of term 3 replaces entries 3 and 4 with one batch at offset 3.
        let replacing = vec![normal(3, 3, batch(3, 0xc, 3))];
        storage.append(&replacing).await.unwrap();
        let mut expected = entries()[..2].to_vec();
        expected.extend(replacing);
        assert_eq!(read_all(&storage), expected);
        assert_eq!(storage.term(3).unwrap(), 3);
        assert_eq!(storage.last_index().unwrap(), 3);
        assert_eq!(storage.log().next_offset(), 6);
        // The cut epoch 2 is gone from the file: a reopen agrees.
        let log = storage.log();
        drop(storage);
        log.close().await.unwrap();
        let reopened = open(dir.path()).await;
        assert_eq!(read_all(&reopened), expected);
        let epochs = LeaderEpochs::load(dir.path()).unwrap();
        let kept: Vec<u64> = epochs.entries().iter().map(|e| e.epoch).collect();
        assert_eq!(kept, [1, 3]);
    });
}

#[test]
fn a_batch_at_another_offset_or_an_older_term_is_refused() {
    run(async || {
        let dir = tempfile::tempdir().unwrap();
        let storage = open(dir.path()).await;
        storage.append(&entries()[..2]).await.unwrap();
        // The next offset is 3; a leader's batch claiming 7 means the logs disagree.
        let wrong = storage.append(&[normal(3, 1, batch(7, 0xd, 1))]).await;
        assert!(
            matches!(&wrong, Err(ReplicaError::BadEntry { index: 3, .. })),
            "{wrong:?}"
        );
        // Nothing of it was written.
        assert_eq!(storage.log().next_offset(), 3);
        assert_eq!(storage.last_index().unwrap(), 2);
        let gap = storage.append(&[normal(9, 1, batch(3, 0xd, 1))]).await;
        assert!(matches!(
            gap,
            Err(ReplicaError::NotContiguous { first: 9, .. })
        ));
        storage
            .append(&[normal(3, 4, batch(3, 0xe, 1))])
            .await
            .unwrap();
        let older = storage.append(&[normal(4, 2, batch(4, 0xe, 1))]).await;
        assert!(matches!(older, Err(ReplicaError::TermMovedBack { .. })));
    });
}

#[test]
fn a_raw_node_elects_itself_and_commits_a_batch_over_the_log() {
    run(async || {
        let dir = tempfile::tempdir().unwrap();
        let storage = open(dir.path()).await;
        storage.initialize(&[1]).unwrap();
        let config = Config {
            id: 1,
            election_tick: 10,
            heartbeat_tick: 2,
            ..Config::default()
        };
        let logger = crate::cluster::raft_log::logger(1, 1);
        let mut node = RawNode::new(&config, storage, &logger).unwrap();
        node.campaign().unwrap();
        let mut committed = Vec::new();
        let mut proposed = false;
        for _ in 0..10 {
            if (node.raft.state == raft::StateRole::Leader)
                && !proposed
                && node.store().log().next_offset() == 1
            {
                // The leader's empty entry took offset 0: the batch lands at 1.
                node.propose(Vec::new(), batch(1, 0xf, 3).to_vec()).unwrap();
                proposed = true;
            }
            if !node.has_ready() {
                continue;
            }
            let mut ready = node.ready();
            node.store().append(ready.entries()).await.unwrap();
            if let Some(hard) = ready.hs() {
                node.store().set_state(hard, None).unwrap();
            }
            committed.extend(ready.take_committed_entries());
            let mut light = node.advance(ready);
            if let Some(commit) = light.commit_index() {
                let mut hard = node.store().initial_state().unwrap().hard_state;
                hard.commit = commit;
                node.store().set_state(&hard, None).unwrap();
            }
            committed.extend(light.take_committed_entries());
            node.advance_apply();
        }
        assert!((node.raft.state == raft::StateRole::Leader));
        let data: Vec<&Bytes> = committed.iter().map(|e| &e.data).collect();
        assert_eq!(committed.len(), 2, "{committed:?}");
        assert!(data[0].is_empty(), "the leader's own entry first");
        assert_eq!(*data[1], batch(1, 0xf, 3));
        // The committed batch is in the log at its offset, and served to readers.
        let log = node.store().log();
        let served = log.read(0, 1 << 20).unwrap();
        assert_eq!(served.len(), 1);
        assert_eq!(served[0].entry.offset, 1);
        assert_eq!(served[0].entry.records, 3);
        let kept = ReplicaRaftState::open(dir.path()).unwrap();
        assert_eq!(kept.hard_state().commit, 2);
        assert_eq!(kept.hard_state().term, 1);
    });
}

#[test]
fn a_control_payload_round_trips_and_a_bad_one_is_refused() {
    let entry = conf_change(3, 2);
    let mut decoded = Entry::default();
    decode_control(&encode_control(&entry), &mut decoded).unwrap();
    assert_eq!(decoded.get_entry_type(), EntryType::EntryConfChange);
    assert_eq!(
        (decoded.context.clone(), decoded.data.clone()),
        (entry.context.clone(), entry.data.clone())
    );
    let mut bytes = encode_control(&entry);
    bytes[0] = 9;
    assert!(decode_control(&bytes, &mut decoded).is_err());
    let bytes = encode_control(&entry);
    assert!(decode_control(&bytes[..3], &mut decoded).is_err());
    let mut lying = bytes.clone();
    lying[1..5].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(decode_control(&lying, &mut decoded).is_err());
}
