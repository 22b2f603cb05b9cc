//! Cuts on real files: across segments, refused cuts, and a crash after every step.

use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use super::{Step, TruncateRefusal, apply, plan, truncate_closed};
use crate::protocol::record::{BatchHeader, batch_crc, encode_batch};
use crate::storage::open::QUARANTINE_DIR;
use crate::storage::{FsyncPolicy, LogConfig, PartitionLog, StorageError};

use crate::on_executor::run;

fn config(fsync: FsyncPolicy) -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        segment_age: Duration::from_secs(3600),
        index_entries: 64,
        fsync,
        ..LogConfig::default()
    }
}

/// (base offset, records, payload) of each batch appended, in order.
type Appended = Vec<(u64, u32, Vec<u8>)>;

/// Appends `count` batches of 1 to 3 records; `tag` tells their payloads apart.
async fn append(log: &Rc<PartitionLog>, count: u32, tag: u8, appended: &mut Appended) {
    for i in 0..count {
        let records = 1 + i % 3;
        let payload = vec![tag; 40 + (i as usize % 5) * 30];
        let batch = encode_batch(u64::from(i), b"k", &payload, records);
        let ack = log.append(&batch, Some(batch_crc(&batch))).await.unwrap();
        assert_eq!(ack.next_offset - ack.base_offset, u64::from(records));
        appended.push((ack.base_offset, records, payload));
    }
}

/// The log holds exactly `expected`, in order, and ends where it does.
fn check(log: &PartitionLog, expected: &[(u64, u32, Vec<u8>)]) {
    let mut seen = 0;
    let mut offset = log.log_start_offset();
    while offset < log.high_watermark() {
        for batch in log.read(offset, 1 << 20).unwrap() {
            let header = BatchHeader::decode(&batch.bytes, &Default::default()).unwrap();
            let (base, records, payload) = &expected[seen];
            assert_eq!((header.offset, header.record_count), (*base, *records));
            assert!(batch.bytes.ends_with(payload), "batch at {base}");
            offset = batch.entry.next_offset();
            seen += 1;
        }
    }
    assert_eq!(seen, expected.len(), "batches in the log");
    let end = expected
        .last()
        .map_or(0, |(base, records, _)| base + u64::from(*records));
    assert_eq!(log.next_offset(), end);
}

/// Offsets to cut at: a batch in a closed segment, a segment's base, a batch in the active
/// segment. Each is a batch's first offset.
fn cuts(log: &PartitionLog, appended: &Appended) -> Vec<u64> {
    let segments = log.segments();
    assert!(segments.len() >= 4, "small segments rolled: {segments:?}");
    let inside_closed = appended
        .iter()
        .map(|b| b.0)
        .find(|&o| o > segments[1].0 && o < segments[2].0)
        .unwrap();
    let last_batch = appended.last().unwrap().0;
    vec![last_batch, segments[2].0, inside_closed]
}

#[test]
fn cuts_drop_the_tail_across_segments_and_appends_continue() {
    for fsync in [FsyncPolicy::Always, FsyncPolicy::Never] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        run(async move || {
            let mut log = PartitionLog::open(&path, config(fsync)).await.unwrap();
            let mut appended = Appended::new();
            append(&log, 150, 1, &mut appended).await;
            for (round, cut) in cuts(&log, &appended).into_iter().enumerate() {
                log = log.truncate_to(cut).await.unwrap();
                appended.retain(|b| b.0 < cut);
                check(&log, &appended);
                append(&log, 20, 10 + round as u8, &mut appended).await;
                assert_eq!(
                    appended[appended.len() - 20].0,
                    cut,
                    "offsets go on from the cut"
                );
                check(&log, &appended);
                log.close().await.unwrap();
                log = PartitionLog::open(&path, config(fsync)).await.unwrap();
                check(&log, &appended);
            }
            // At the end: nothing to drop, and the log stays as it was.
            let end = log.next_offset();
            log = log.truncate_to(end).await.unwrap();
            check(&log, &appended);
            // At the start: everything goes, and the log starts again there.
            log = log.truncate_to(0).await.unwrap();
            check(&log, &[]);
            append(&log, 3, 99, &mut Appended::new()).await;
            assert_eq!(log.next_offset(), 1 + 2 + 3);
        });
    }
}

#[test]
fn refused_cuts_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open(&path, config(FsyncPolicy::Always))
            .await
            .unwrap();
        let mut appended = Appended::new();
        append(&log, 60, 1, &mut appended).await;
        log.delete_records_before(Some(appended[5].0))
            .await
            .unwrap();
        let (multi, multi_records) = appended[6..]
            .iter()
            .find(|b| b.1 > 1)
            .map(|b| (b.0, b.1))
            .unwrap();
        let end = log.next_offset();
        let refusal = |result: Result<Rc<PartitionLog>, StorageError>| match result {
            Err(StorageError::Truncate { reason, .. }) => reason,
            other => panic!("not refused: {:?}", other.map(|l| l.next_offset())),
        };
        assert_eq!(
            refusal(log.truncate_to(multi + 1).await),
            TruncateRefusal::NotABatchStart {
                batch_offset: multi,
                batch_next: multi + u64::from(multi_records),
            }
        );
        assert_eq!(
            refusal(log.truncate_to(end + 1).await),
            TruncateRefusal::PastEnd { next_offset: end }
        );
        assert_eq!(
            refusal(log.truncate_to(appended[4].0).await),
            TruncateRefusal::BelowLogStart {
                log_start: appended[5].0
            }
        );
        // Still open, still whole.
        append(&log, 1, 2, &mut appended).await;
        appended.drain(..5);
        check(&log, &appended);
        // The file-level cut refuses a directory that is not closed cleanly.
        let open_dir = refusal_of(truncate_closed(&path, appended[10].0));
        assert_eq!(open_dir, TruncateRefusal::NotClosedCleanly);
    });
}

fn refusal_of(result: Result<(), StorageError>) -> TruncateRefusal {
    match result {
        Err(StorageError::Truncate { reason, .. }) => reason,
        other => panic!("not refused: {other:?}"),
    }
}

/// Copies the partition directory `from` into `to` (files only: a partition has no
/// subdirectories before a quarantine).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        assert!(entry.file_type().unwrap().is_file());
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Stops a cut after each of its steps (every step is durable before the next begins, so
/// that is what a crash between steps leaves), opens the log, and checks the crash table's
/// promise: a prefix of the log at least as long as the cut, nothing quarantined, and a
/// second cut finishes the job. Then the same for a wrong order of the steps, which the
/// check must catch.
#[test]
fn a_crash_after_any_step_leaves_a_prefix_and_a_second_cut_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().to_path_buf();
    run(async move || {
        let original = root.join("original");
        let log = PartitionLog::open(&original, config(FsyncPolicy::Always))
            .await
            .unwrap();
        let mut appended = Appended::new();
        append(&log, 150, 1, &mut appended).await;
        let cut = cuts(&log, &appended)[2];
        log.close().await.unwrap();
        let steps = plan(&original, cut).unwrap();
        assert!(
            steps
                .iter()
                .filter(|s| matches!(s, Step::DeleteSegment { .. }))
                .count()
                >= 2
        );
        for done in 0..=steps.len() {
            let copy = root.join(format!("crash-{done}"));
            copy_dir(&original, &copy);
            apply(&copy, &steps[..done]).unwrap();
            let problem = crash_problem(&copy, cut, &appended).await;
            assert_eq!(problem, None, "crash after {done} of {steps:?}");
        }
        // A broken cut: the later segments deleted oldest first. A crash after the first
        // deletion leaves a gap, which the next open quarantines.
        let mut broken = steps.clone();
        let deletes: Vec<usize> = (0..broken.len())
            .filter(|&i| matches!(broken[i], Step::DeleteSegment { .. }))
            .collect();
        broken[deletes[0]..=deletes[deletes.len() - 1]].reverse();
        let copy = root.join("broken");
        copy_dir(&original, &copy);
        apply(&copy, &broken[..=deletes[0]]).unwrap();
        let problem = crash_problem(&copy, cut, &appended).await;
        assert!(
            problem.as_deref().is_some_and(|p| p.contains("quarantine")),
            "{problem:?}"
        );
    });
}

/// What is wrong with the log in `dir` after a crash during a cut at `cut`, if anything;
/// finishes the cut when nothing is.
async fn crash_problem(dir: &Path, cut: u64, appended: &Appended) -> Option<String> {
    let log = PartitionLog::open(dir, config(FsyncPolicy::Always))
        .await
        .unwrap();
    if dir.join(QUARANTINE_DIR).exists() {
        return Some("segments were quarantined".into());
    }
    let end = log.next_offset();
    if end < cut {
        return Some(format!("the log ends at {end}, before the cut at {cut}"));
    }
    let prefix: Appended = appended.iter().filter(|b| b.0 < end).cloned().collect();
    check(&log, &prefix);
    log.close().await.unwrap();
    truncate_closed(dir, cut).unwrap();
    let log = PartitionLog::open(dir, config(FsyncPolicy::Always))
        .await
        .unwrap();
    let kept: Appended = appended.iter().filter(|b| b.0 < cut).cloned().collect();
    check(&log, &kept);
    log.close().await.unwrap();
    None
}
