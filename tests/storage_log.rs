//! The partition log on real files: append, read back, roll, restart, recover.

use std::rc::Rc;
use std::time::Duration;

use glommio::LocalExecutorBuilder;
use pagurus::protocol::record::{self, BatchHeader, encode_batch};
use pagurus::storage::{FsyncPolicy, LogConfig, PartitionLog, StorageError};

fn run<T: Send + 'static>(f: impl AsyncFnOnce() -> T + Send + 'static) -> T {
    LocalExecutorBuilder::default()
        .spawn(move || async move { f().await })
        .expect("executor")
        .join()
        .expect("executor ran")
}

fn config(fsync: FsyncPolicy) -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        segment_age: Duration::from_secs(3600),
        index_entries: 64,
        fsync,
        ..LogConfig::default()
    }
}

#[test]
fn append_read_roll_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open(&path, config(FsyncPolicy::Always))
            .await
            .unwrap();
        let mut expected = Vec::new();
        let mut next = 0;
        for i in 0..200u32 {
            let payload = vec![i as u8; 50 + (i as usize % 7) * 20];
            let batch = encode_batch(
                1000 + u64::from(i),
                format!("k{i}").as_bytes(),
                &payload,
                i % 3,
            );
            let ack = log
                .append(&batch, Some(record::batch_crc(&batch)))
                .await
                .unwrap();
            assert_eq!(ack.base_offset, next);
            next = ack.next_offset;
            expected.push((ack.base_offset, payload));
        }
        assert!(log.segments().len() > 5, "4 KiB segments must have rolled");
        assert_eq!(log.high_watermark(), log.next_offset());
        check_all(&log, &expected);
        log.close().await.unwrap();

        let log = PartitionLog::open(&path, config(FsyncPolicy::Always))
            .await
            .unwrap();
        check_all(&log, &expected);
        let ack = log
            .append(&encode_batch(0, b"", b"after", 1), None)
            .await
            .unwrap();
        assert_eq!(ack.base_offset, next, "offsets continue after a restart");
        // Timestamp lookup: batch i carries 1000 + i.
        assert_eq!(log.offset_for_timestamp(1000), Some(0));
        assert_eq!(log.offset_for_timestamp(1010), Some(expected[10].0));
    });
}

fn check_all(log: &Rc<PartitionLog>, expected: &[(u64, Vec<u8>)]) {
    let mut offset = log.log_start_offset();
    let mut seen = 0;
    while offset < log.high_watermark() {
        for batch in log.read(offset, 1000).unwrap() {
            let header = BatchHeader::decode(&batch.bytes, &Default::default()).unwrap();
            assert_eq!(header.offset, expected[seen].0);
            assert_eq!(
                record::payload_of(&batch.bytes, &header),
                &expected[seen].1[..]
            );
            offset = batch.entry.next_offset();
            seen += 1;
        }
    }
    assert_eq!(seen, expected.len());
}

#[test]
fn bad_crc_and_oversized_batches_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open(&path, config(FsyncPolicy::Never))
            .await
            .unwrap();
        let batch = encode_batch(0, b"k", b"v", 1);
        let err = log
            .append(&batch, Some(record::batch_crc(&batch) ^ 1))
            .await
            .unwrap_err();
        assert!(matches!(
            err,
            StorageError::BadBatch(record::RecordError::CrcMismatch { .. })
        ));
        let mut long = batch.clone();
        long.push(0);
        assert!(matches!(
            log.append(&long, None).await.unwrap_err(),
            StorageError::BatchLength { .. }
        ));
        assert_eq!(log.next_offset(), 0, "nothing was stored");
        assert_eq!(log.append(&batch, None).await.unwrap().base_offset, 0);
    });
}

#[test]
fn group_commit_acknowledges_concurrent_appenders() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open(&path, config(FsyncPolicy::Always))
            .await
            .unwrap();
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let log = log.clone();
                glommio::spawn_local(async move {
                    let mut offsets = Vec::new();
                    for i in 0..20u8 {
                        let batch = encode_batch(0, &[t], &[i; 40], 1);
                        offsets.push(log.append(&batch, None).await.unwrap().base_offset);
                    }
                    offsets
                })
            })
            .collect();
        let mut all = Vec::new();
        for task in tasks {
            all.extend(task.await);
        }
        all.sort_unstable();
        assert_eq!(
            all,
            (0..320).collect::<Vec<u64>>(),
            "every offset given exactly once"
        );
        assert_eq!(log.high_watermark(), 320);
    });
}

#[test]
fn out_of_range_reads_are_errors_and_the_tail_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open(&path, config(FsyncPolicy::Always))
            .await
            .unwrap();
        log.append(&encode_batch(0, b"", b"x", 5), None)
            .await
            .unwrap();
        assert!(log.read_plan(5, 100).unwrap().is_empty());
        assert!(matches!(
            log.read_plan(6, 100),
            Err(StorageError::OffsetOutOfRange {
                requested: 6,
                earliest: 0,
                latest: 5
            })
        ));
        // An offset inside a batch finds the batch that holds it.
        assert_eq!(log.read_plan(3, 100).unwrap().batches[0].offset, 0);
    });
}
