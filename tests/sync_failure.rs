//! A failed fdatasync under `fsync = always` while a later commit round is in flight: the
//! round whose fdatasync failed and every round issued after it are refused (the partition
//! is fenced), even the later round whose own fdatasync, on descriptors of its own,
//! succeeded. The failure comes from powerfs: after `SIGUSR2`, the next fsync of an `.idx`
//! is answered EIO 1.5 s later (ample for a loaded machine); meanwhile the next round is written and its fdatasyncs
//! issued (its `.wal` one succeeds at once, its `.idx` one right after the failure). Opened
//! again in the same process, the log ends at the last acknowledged batch: the fence cut
//! the batches of the failed rounds (their pages may live on in the page cache after a real
//! write-back error). Needs root and /dev/fuse (as CI has).

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::powerfs::{Mode, PowerFs};
use glommio::LocalExecutorBuilder;
use pagurus::protocol::record::encode_batch;
use pagurus::storage::{AppendAck, FsyncPolicy, LogConfig, PartitionLog, StorageError};

/// What the log thread saw, for the test thread to check.
struct Seen {
    durable_before: u64,
    writes_before: u64,
    writes_after: u64,
    overlapped_rounds: u64,
    syncs_applied_after: u64,
    high_watermark_after: u64,
    /// Where the log ends when opened again in the same process (no power cut).
    reopened_next_offset: u64,
    first: Result<AppendAck, StorageError>,
    second: Result<AppendAck, StorageError>,
}

#[test]
fn a_round_after_a_failed_sync_fails_even_if_its_own_sync_succeeded() {
    let root = tempfile::tempdir().unwrap();
    let mut fs = PowerFs::mount_in(root.path(), Mode::Strict);
    let path = fs.mount.join("p");
    let (ready, wait_ready) = mpsc::channel::<()>();
    let (armed, wait_armed) = mpsc::channel::<()>();
    let log_thread = LocalExecutorBuilder::default()
        .spawn(move || async move {
            let config = LogConfig {
                fsync: FsyncPolicy::Always,
                // Small enough that the pre-extension job at open zeroes the whole segment
                // and faults in more index slots than the test uses: no job runs after it,
                // so the armed failure hits a round.
                segment_bytes: 1 << 20,
                // Two-file rounds: the first round is one that fdatasyncs the `.idx`, where
                // the failure is armed. (With the index journal a round alone fdatasyncs
                // the `.wal` only, and a held `.wal` fsync would also hold the next
                // round's write, which FUSE serialises on the inode lock.)
                index_journal: false,
                ..LogConfig::default()
            };
            let log = PartitionLog::open(&path, config.clone()).await.unwrap();
            let batch = encode_batch(0, b"", &[7u8; 100], 1);
            for _ in 0..5 {
                log.append(&batch, None).await.unwrap();
            }
            log.settle_pre_extension().await;
            let durable_before = log.high_watermark();
            let writes_before = log.stats().writes;
            ready.send(()).unwrap();
            wait_armed.recv_timeout(Duration::from_secs(60)).unwrap();
            let first = glommio::spawn_local({
                let (log, batch) = (log.clone(), batch.clone());
                async move { log.append(&batch, None).await }
            });
            // The first round is written, so its fdatasyncs are issued (same step); the
            // `.idx` one is held.
            let deadline = Instant::now() + Duration::from_secs(10);
            while log.stats().writes == writes_before {
                assert!(
                    Instant::now() < deadline,
                    "the first round was never written"
                );
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
            // Big enough to start a round while another is in flight.
            let big = encode_batch(0, b"", &vec![8u8; 100 << 10], 1);
            let second = log.append(&big, None).await;
            let first = first.await;
            // The I/O turn comes free once no round is in flight: the second round's
            // fdatasync has finished by then (the sync itself is refused: fenced).
            let syncs_before = log.stats().syncs;
            assert!(matches!(log.sync().await, Err(StorageError::Fenced { .. })));
            let syncs_applied_after = log.stats().syncs - syncs_before;
            let stats = log.stats();
            let high_watermark_after = log.high_watermark();
            // A restart without a power cut: recovery reads what the page cache holds.
            drop(log);
            let reopened = PartitionLog::open(&path, config).await.unwrap();
            let reopened_next_offset = reopened.next_offset();
            reopened.close().await.unwrap();
            Seen {
                durable_before,
                writes_before,
                writes_after: stats.writes,
                overlapped_rounds: stats.overlapped_rounds,
                syncs_applied_after,
                high_watermark_after,
                reopened_next_offset,
                first,
                second,
            }
        })
        .unwrap();
    wait_ready.recv_timeout(Duration::from_secs(60)).unwrap();
    fs.arm_fsync_failure();
    armed.send(()).unwrap();
    let seen = log_thread.join().unwrap();
    fs.unmount();
    assert!(
        matches!(seen.first, Err(StorageError::Fenced { .. })),
        "the round whose fdatasync failed: {:?}",
        seen.first
    );
    assert_eq!(
        (seen.writes_after, seen.overlapped_rounds),
        (seen.writes_before + 2, 1),
        "the second round is written, and its fdatasync issued, while the first one's is in flight"
    );
    assert!(
        matches!(seen.second, Err(StorageError::Fenced { .. })),
        "a round issued after a failed one is refused, though its own fdatasync succeeded: {:?}",
        seen.second
    );
    assert_eq!(
        (seen.high_watermark_after, seen.syncs_applied_after),
        (seen.durable_before, 0),
        "nothing after the failure becomes durable or visible, once every round has finished"
    );
    // After a failed write-back the kernel may keep the lost pages in the page cache,
    // clean and readable, and no later fdatasync reports the error again: batches whose
    // sync failed must not be found by the next open (it would serve them, and acknowledge
    // batches on top of bytes that are not on the disk).
    assert_eq!(
        seen.reopened_next_offset, seen.durable_before,
        "the batches whose rounds failed are cut, not recovered from the page cache"
    );
}

/// A round alone syncs the `.wal` alone, its index entries in the `.wal`'s index journal
/// (`storage::index_journal`). When that fdatasync fails, the round is refused and the
/// partition fenced, and the cut back to the durable watermark (which truncates the `.wal`,
/// and so the journal's region with it) keeps every acknowledged batch: after a power cut,
/// the next open finds exactly them.
#[test]
fn a_journaled_round_whose_fdatasync_fails_is_fenced_and_keeps_what_was_acknowledged() {
    let root = tempfile::tempdir().unwrap();
    let mut fs = PowerFs::mount_failing(root.path(), Mode::Strict, Some(".wal"));
    let path = fs.mount.join("p");
    let config = LogConfig {
        fsync: FsyncPolicy::Always,
        // The pre-extension job at open zeroes the whole segment: no job of its own
        // fsyncs the `.wal` after the failure is armed.
        segment_bytes: 1 << 20,
        ..LogConfig::default()
    };
    let (ready, wait_ready) = mpsc::channel::<()>();
    let (armed, wait_armed) = mpsc::channel::<()>();
    let first_life = LocalExecutorBuilder::default()
        .spawn({
            let (path, config) = (path.clone(), config.clone());
            move || async move {
                let log = PartitionLog::open(&path, config).await.unwrap();
                let batch = encode_batch(0, b"", &[7u8; 100], 1);
                for _ in 0..5 {
                    log.append(&batch, None).await.unwrap();
                }
                log.settle_pre_extension().await;
                let journaled = log.stats().journaled_rounds;
                ready.send(()).unwrap();
                wait_armed.recv_timeout(Duration::from_secs(60)).unwrap();
                let failed = log.append(&batch, None).await;
                (journaled, failed, log.high_watermark())
            }
        })
        .unwrap();
    wait_ready.recv_timeout(Duration::from_secs(60)).unwrap();
    fs.arm_fsync_failure();
    armed.send(()).unwrap();
    let (journaled, failed, high_watermark) = first_life.join().unwrap();
    let report = fs.power_cut();
    fs.remount();
    let reopened_next_offset = LocalExecutorBuilder::default()
        .spawn(move || async move {
            let log = PartitionLog::open(&path, config).await.unwrap();
            let next = log.next_offset();
            log.close().await.unwrap();
            next
        })
        .unwrap()
        .join()
        .unwrap();
    fs.unmount();
    assert_eq!(journaled, 5, "each round alone synced the .wal alone");
    assert!(
        matches!(failed, Err(StorageError::Fenced { .. })),
        "the round whose fdatasync failed: {failed:?}"
    );
    assert_eq!(high_watermark, 5, "nothing after the failure is visible");
    assert_eq!(
        reopened_next_offset, 5,
        "after the cut and a power cut ({report}), exactly the acknowledged batches"
    );
}
