//! Control batches on real files (in replicated partitions' logs, the only ones that take
//! them): never served, kept through a reopen, a rebuild of the index from the `.wal`, and
//! compaction; a client's batch cannot pose as one.

use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use super::PartitionLog;
use crate::protocol::record::{BatchHeader, encode_batch};
use crate::storage::open::CLEAN_MARKER;
use crate::storage::segment::idx_path;
use crate::storage::{CompactionLimits, FsyncPolicy, LogConfig, StorageError};

use crate::on_executor::run;

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 1 << 20,
        segment_age: Duration::from_secs(3600),
        index_entries: 64,
        fsync: FsyncPolicy::Always,
        ..LogConfig::default()
    }
}

/// Appends a client batch of `records` records whose payload is `tag` repeated.
async fn client(log: &Rc<PartitionLog>, key: &[u8], tag: u8, records: u32) -> u64 {
    let batch = encode_batch(1_000 + u64::from(tag), key, &[tag; 20], records);
    log.append(&batch, None).await.unwrap().base_offset
}

/// What readers see from `offset` on, plan by plan: (first offset, payload's first byte)
/// of each batch, and the offsets each plan started at.
fn served(log: &PartitionLog, mut offset: u64) -> (Vec<(u64, u8)>, Vec<u64>) {
    let (mut batches, mut starts) = (Vec::new(), Vec::new());
    loop {
        let read = log.read(offset, 1 << 20).unwrap();
        let Some(last) = read.last() else { break };
        starts.push(read[0].entry.offset);
        offset = last.entry.next_offset();
        for batch in &read {
            assert!(!batch.entry.is_control(), "a control batch was served");
            let header = BatchHeader::decode(&batch.bytes, &Default::default()).unwrap();
            batches.push((header.offset, *batch.bytes.last().unwrap()));
        }
    }
    (batches, starts)
}

/// The log of every test: a (0..2), control (2), b (3), control (4), control (5),
/// c (6..9), and a control at the end (9).
async fn fill(log: &Rc<PartitionLog>) {
    assert_eq!(client(log, b"", 0xa, 2).await, 0);
    assert_eq!(log.append_control(b"conf").await.unwrap().base_offset, 2);
    assert_eq!(client(log, b"", 0xb, 1).await, 3);
    let ack = log.append_control(b"").await.unwrap();
    assert_eq!((ack.base_offset, ack.next_offset), (4, 5));
    log.append_control(b"x").await.unwrap();
    assert_eq!(client(log, b"", 0xc, 3).await, 6);
    log.append_control(b"tail").await.unwrap();
}

fn check_served(log: &PartitionLog) {
    assert_eq!(log.high_watermark(), 10);
    let (batches, starts) = served(log, 0);
    assert_eq!(batches, [(0, 0xa), (3, 0xb), (6, 0xc)]);
    // Each plan stops before a control batch; the next starts after it.
    assert_eq!(starts, [0, 3, 6]);
    // A read from a control batch's offset starts at the next client batch.
    assert_eq!(served(log, 2).0[0], (3, 0xb));
    assert_eq!(served(log, 4).0[0], (6, 0xc));
    // Below the high watermark, only a control batch: an empty plan, not an error.
    assert!(log.read_plan(9, 1 << 20).unwrap().is_empty());
    // Time lookups never land on a control batch.
    assert_eq!(log.offset_for_timestamp(1_000 + 0xb), Some(3));
    assert_eq!(log.offset_for_timestamp(1_000 + 0xc), Some(6));
    assert_eq!(log.offset_for_timestamp(1_000 + 0xd), None);
}

#[test]
fn control_batches_are_never_served_and_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open_raft(&path, config(), 1).await.unwrap();
        fill(&log).await;
        check_served(&log);
        log.close().await.unwrap();
        let log = PartitionLog::open_raft(&path, config(), 1).await.unwrap();
        check_served(&log);
        log.close().await.unwrap();
    });
}

/// A scan that rebuilds the index from the `.wal` (its `.idx` cut short, no clean
/// shutdown) finds the control flag in the stored headers.
#[test]
fn a_rebuilt_index_keeps_the_control_flag() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open_raft(&path, config(), 1).await.unwrap();
        fill(&log).await;
        log.close().await.unwrap();
        cut_index(&path, 0);
        let log = PartitionLog::open_raft(&path, config(), 1).await.unwrap();
        check_served(&log);
        log.close().await.unwrap();
    });
}

/// Cuts the `.idx` of segment `base` to nothing and removes the clean-shutdown marker,
/// as a crash that lost the index would leave it.
fn cut_index(dir: &Path, base: u64) {
    std::fs::remove_file(dir.join(CLEAN_MARKER)).unwrap();
    let idx = std::fs::OpenOptions::new()
        .write(true)
        .open(idx_path(dir, base))
        .unwrap();
    idx.set_len(0).unwrap();
}

#[test]
fn a_client_batch_cannot_carry_the_control_bit() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open_raft(&path, config(), 1).await.unwrap();
        let batch = encode_batch(1, b"", b"x", crate::storage::index::CONTROL_RECORD_COUNT);
        let refused = log.append(&batch, None).await;
        assert!(
            matches!(refused, Err(StorageError::RecordCount { record_count }) if record_count == 0x8000_0001),
            "{refused:?}"
        );
        assert_eq!(log.next_offset(), 0, "nothing was staged");
        log.close().await.unwrap();
        // A plain partition takes no control batch: its reads never look for one.
        let plain = PartitionLog::open(path.with_extension("plain"), config())
            .await
            .unwrap();
        assert!(matches!(
            plain.append_control(b"conf").await,
            Err(StorageError::NotReplicated)
        ));
        assert_eq!(plain.next_offset(), 0);
        plain.close().await.unwrap();
        let log = PartitionLog::open_raft(&path, config(), 1).await.unwrap();
        // A control payload over the limit is refused before it is copied.
        let big = vec![0u8; log.config().limits.max_payload_bytes as usize + 1];
        assert!(matches!(
            log.append_control(&big).await,
            Err(StorageError::BadBatch(_))
        ));
        log.close().await.unwrap();
    });
}

/// Compaction drops superseded client batches but keeps every control batch, flag and
/// all, even between two batches of one key.
#[test]
fn compaction_keeps_control_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let config = LogConfig {
            segment_bytes: 200,
            ..config()
        };
        let log = PartitionLog::open_raft(&path, config.clone(), 1)
            .await
            .unwrap();
        client(&log, b"k", 1, 1).await;
        log.append_control(b"c1").await.unwrap();
        client(&log, b"k", 2, 1).await;
        log.append_control(b"c2").await.unwrap();
        for tag in 3..12 {
            client(&log, b"k", tag, 1).await;
        }
        let outcome = log.compact(&CompactionLimits::default()).await.unwrap();
        assert!(outcome.batches_removed > 0, "{outcome:?}");
        let (batches, _) = served(&log, 0);
        let offsets: Vec<u64> = batches.iter().map(|b| b.0).collect();
        assert!(
            !offsets.contains(&0),
            "superseded batch 0 kept: {offsets:?}"
        );
        // The control batches are still there, at their offsets.
        let controls: Vec<u64> = log.with_segments(|segments| {
            segments
                .all()
                .iter()
                .flat_map(|s| (0..s.entries()).map(move |i| s.entry(i)))
                .filter(|e| e.is_control())
                .map(|e| e.offset)
                .collect()
        });
        assert_eq!(controls, [1, 3]);
        log.close().await.unwrap();
        let log = PartitionLog::open_raft(&path, config, 1).await.unwrap();
        assert_eq!(served(&log, 0).0, batches);
        log.close().await.unwrap();
    });
}
