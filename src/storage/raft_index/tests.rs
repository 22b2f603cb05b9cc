//! Raft index bases on real files: numbering across rolls and reopens, plain partitions
//! unchanged, damage refused, crashes around a roll, retention and truncation.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use super::{FILE_LEN, decode, encode, raft_path};
use crate::protocol::record::encode_batch;
use crate::storage::segment::{idx_path, wal_path};
use crate::storage::{FsyncPolicy, LogConfig, PartitionLog, Retention, StorageError};

use crate::on_executor::run;

/// Small segments, so a few dozen batches roll several times.
fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        segment_age: Duration::from_secs(3600),
        index_entries: 64,
        fsync: FsyncPolicy::Always,
        ..LogConfig::default()
    }
}

/// Appends `count` batches of 1 to 3 records, every fifth a control batch; returns each
/// batch's first offset, in order (its Raft index is `first_index` plus its position).
async fn append(log: &Rc<PartitionLog>, count: u32, offsets: &mut Vec<u64>) {
    for i in 0..count {
        let ack = if i % 5 == 4 {
            log.append_control(b"conf").await.unwrap()
        } else {
            let batch = encode_batch(u64::from(i) + 1, b"k", &[i as u8; 60], 1 + i % 3);
            log.append(&batch, None).await.unwrap()
        };
        offsets.push(ack.base_offset);
    }
}

/// Every lookup agrees with `offsets` (batch `n` has Raft index `first + n`).
fn check_numbering(log: &PartitionLog, first: u64, offsets: &[u64]) {
    assert!(log.is_raft_indexed());
    let last = first + offsets.len() as u64 - 1;
    assert_eq!(log.raft_range(), Some((first, last)));
    assert_eq!(log.next_raft_index(), Some(last + 1));
    for (n, &offset) in offsets.iter().enumerate() {
        let index = first + n as u64;
        let found = log.offset_of_raft_index(index).unwrap();
        assert_eq!(
            (found.index, found.offset),
            (index, offset),
            "index {index}"
        );
        assert_eq!(log.raft_index_of(offset), Some(index), "offset {offset}");
        // Every offset inside the batch belongs to it.
        assert_eq!(log.raft_index_of(found.next_offset - 1), Some(index));
    }
    assert_eq!(log.offset_of_raft_index(first.wrapping_sub(1)), None);
    assert_eq!(log.offset_of_raft_index(last + 1), None);
    assert_eq!(log.raft_index_of(log.next_offset()), None);
}

/// (segment base, Raft base in its file) of every segment in `dir`.
fn raft_files(dir: &Path) -> Vec<(u64, u64)> {
    let mut found: Vec<(u64, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            let base = crate::storage::segment::parse_file_name(&name, "raft")?;
            Some((
                base,
                decode(&std::fs::read(dir.join(&name)).unwrap()).unwrap(),
            ))
        })
        .collect();
    found.sort_unstable();
    found
}

fn segment_bases(log: &PartitionLog) -> Vec<u64> {
    log.segments().iter().map(|s| s.0).collect()
}

#[test]
fn the_file_round_trips_and_damage_is_named() {
    let bytes = encode(1 << 40);
    assert_eq!(bytes.len(), FILE_LEN);
    assert_eq!(decode(&bytes), Ok(1 << 40));
    let mut flipped = bytes;
    flipped[9] ^= 1;
    assert_eq!(decode(&flipped), Err("CRC mismatch".to_string()));
    assert_eq!(decode(&bytes[..19]), Err("19 bytes, not 20".to_string()));
    let mut other = bytes;
    other[4] = 2;
    let crc = crc32c::crc32c(&other[..16]);
    other[16..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(decode(&other), Err("unknown version 2".to_string()));
}

#[test]
fn every_segment_of_a_raft_indexed_log_records_its_first_index() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let p = path.clone();
    let (offsets, bases) = run(async move || {
        let log = PartitionLog::open_raft(&p, config(), 100).await.unwrap();
        assert_eq!(log.raft_range(), None, "nothing appended yet");
        assert_eq!(log.next_raft_index(), Some(100));
        let mut offsets = Vec::new();
        append(&log, 40, &mut offsets).await;
        check_numbering(&log, 100, &offsets);
        for n in 0..offsets.len() {
            let found = log.offset_of_raft_index(100 + n as u64).unwrap();
            assert_eq!(found.control, n % 5 == 4, "index {}", 100 + n);
        }
        let bases = segment_bases(&log);
        assert!(bases.len() >= 4, "the log rolled: {bases:?}");
        log.close().await.unwrap();
        // The first index only matters for a new log: the files say.
        let log = PartitionLog::open_raft(&p, config(), 7).await.unwrap();
        check_numbering(&log, 100, &offsets);
        log.close().await.unwrap();
        (offsets, bases)
    });
    // One file per segment, each the Raft index of the segment's first batch.
    let expected: Vec<(u64, u64)> = bases
        .iter()
        .map(|&base| {
            let n = offsets.iter().position(|&o| o == base).unwrap();
            (base, 100 + n as u64)
        })
        .collect();
    assert_eq!(raft_files(&path), expected);
    // Opened as a plain partition it is refused, naming a file, and nothing changes.
    let p = path.clone();
    let refused = run(async move || PartitionLog::open(&p, config()).await.err());
    match refused {
        Some(StorageError::Damaged { path: file, reason }) => {
            assert_eq!(file, raft_path(&path, 0));
            assert!(reason.contains("opened as a plain one"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(raft_files(&path), expected);
}

#[test]
fn a_plain_partition_has_no_raft_files_and_opens_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let p = path.clone();
    run(async move || {
        let log = PartitionLog::open(&p, config()).await.unwrap();
        let mut offsets = Vec::new();
        // Client batches only: a plain log takes no control batch.
        for i in 0..30u32 {
            let batch = encode_batch(u64::from(i) + 1, b"k", &[i as u8; 60], 1);
            offsets.push(log.append(&batch, None).await.unwrap().base_offset);
        }
        let bases = segment_bases(&log);
        assert!(bases.len() >= 3);
        assert!(!log.is_raft_indexed());
        assert_eq!(log.raft_range(), None);
        assert_eq!(log.raft_index_of(0), None);
        assert_eq!(log.offset_of_raft_index(0), None);
        log.close().await.unwrap();
        assert!(raft_files(&p).is_empty());
        let log = PartitionLog::open(&p, config()).await.unwrap();
        assert_eq!(segment_bases(&log), bases);
        let read = log.read(offsets[1], 1 << 20).unwrap();
        assert_eq!(read[0].entry.offset, offsets[1]);
        assert_eq!(log.next_offset(), offsets.last().unwrap() + 1);
        log.close().await.unwrap();
    });
}

/// Makes a raft-indexed log of 40 batches from index 100, closed; returns its offsets and
/// segment bases.
fn closed_raft_log(path: &Path) -> (Vec<u64>, Vec<u64>) {
    let p = path.to_path_buf();
    run(async move || {
        let log = PartitionLog::open_raft(&p, config(), 100).await.unwrap();
        let mut offsets = Vec::new();
        append(&log, 40, &mut offsets).await;
        let bases = segment_bases(&log);
        log.close().await.unwrap();
        (offsets, bases)
    })
}

fn open_raft_err(path: &Path) -> StorageError {
    let p = path.to_path_buf();
    run(async move || PartitionLog::open_raft(&p, config(), 100).await.err()).unwrap()
}

#[test]
fn a_missing_or_damaged_raft_file_is_refused_never_guessed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let (_, bases) = closed_raft_log(&path);
    let middle = raft_path(&path, bases[2]);
    let good = std::fs::read(&middle).unwrap();

    std::fs::remove_file(&middle).unwrap();
    match open_raft_err(&path) {
        StorageError::Damaged { path: file, reason } => {
            assert_eq!(file, middle);
            assert!(reason.contains("missing"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // The segment was not touched meanwhile.
    assert!(wal_path(&path, bases[2]).exists());

    let mut damaged = good.clone();
    damaged[12] ^= 0x40;
    std::fs::write(&middle, &damaged).unwrap();
    match open_raft_err(&path) {
        StorageError::Damaged { path: file, reason } => {
            assert_eq!(file, middle);
            assert!(reason.contains("CRC"), "{reason}");
        }
        other => panic!("{other:?}"),
    }

    // A base that overlaps the previous segment's indices (a file from elsewhere).
    std::fs::write(&middle, encode(100)).unwrap();
    match open_raft_err(&path) {
        StorageError::Damaged { path: file, reason } => {
            assert_eq!(file, middle);
            assert!(reason.contains("inside the previous segment"), "{reason}");
        }
        other => panic!("{other:?}"),
    }

    std::fs::write(&middle, &good).unwrap();
    let p = path.clone();
    run(async move || {
        let log = PartitionLog::open_raft(&p, config(), 100).await.unwrap();
        assert_eq!(log.raft_range(), Some((100, 139)));
        log.close().await.unwrap();
    });
}

/// A crash after a roll's `.raft` became durable but before the segment's files were
/// named (or in the middle of naming them) leaves orphans; the next open removes them,
/// and the next roll writes the file again.
#[test]
fn a_crash_between_the_raft_file_and_the_segment_leaves_orphans_that_go() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let (mut offsets, bases) = closed_raft_log(&path);
    let end = offsets.last().unwrap() + 1;
    // What the crash left: the next segment's `.raft`, its index renamed from the spare,
    // no `.wal`; and a temp file of an interrupted write.
    std::fs::write(raft_path(&path, end), encode(140)).unwrap();
    std::fs::write(idx_path(&path, end), [0u8; 64]).unwrap();
    let tmp = PathBuf::from(format!("{}.tmp", raft_path(&path, end + 5).display()));
    std::fs::write(&tmp, encode(9)).unwrap();
    std::fs::remove_file(path.join(crate::storage::open::CLEAN_MARKER)).unwrap();
    let p = path.clone();
    run(async move || {
        let log = PartitionLog::open_raft(&p, config(), 100).await.unwrap();
        assert_eq!(segment_bases(&log), bases);
        check_numbering(&log, 100, &offsets);
        assert!(!raft_path(&p, end).exists() && !idx_path(&p, end).exists());
        assert!(!tmp.exists());
        // Appending on rolls into new segments, each numbered on.
        append(&log, 20, &mut offsets).await;
        check_numbering(&log, 100, &offsets);
        let bases = segment_bases(&log);
        assert!(bases.len() > 7, "the appends rolled: {bases:?}");
        log.close().await.unwrap();
        let files: Vec<u64> = raft_files(&p).iter().map(|f| f.0).collect();
        assert_eq!(files, bases, "one file per segment");
    });
}

/// kill -9 style: the log is dropped without a close, and the last segment's `.wal` loses
/// its tail; the scan cuts the segment and the numbering ends at the batches it kept.
#[test]
fn recovery_cuts_keep_the_numbering() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let p = path.clone();
    let (offsets, last_base, first_len) = run(async move || {
        let log = PartitionLog::open_raft(&p, config(), 1).await.unwrap();
        let mut offsets = Vec::new();
        append(&log, 33, &mut offsets).await;
        let last_base = *segment_bases(&log).last().unwrap();
        let n = offsets.iter().position(|&o| o == last_base).unwrap();
        let first_len = log.offset_of_raft_index(1 + n as u64).unwrap().length;
        drop(log);
        (offsets, last_base, first_len)
    });
    let kept = offsets.iter().filter(|&&o| o < last_base).count() + 1;
    assert!(
        kept < offsets.len(),
        "the last segment holds two batches or more"
    );
    // Cut the `.wal` inside its second batch.
    let wal = wal_path(&path, last_base);
    let file = std::fs::OpenOptions::new().write(true).open(&wal).unwrap();
    file.set_len(u64::from(first_len) + 10).unwrap();
    drop(file);
    let p = path.clone();
    run(async move || {
        let log = PartitionLog::open_raft(&p, config(), 1).await.unwrap();
        check_numbering(&log, 1, &offsets[..kept]);
        log.close().await.unwrap();
    });
}

#[test]
fn retention_removes_raft_files_with_their_segments() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let (offsets, bases) = closed_raft_log(&path);
    let p = path.clone();
    run(async move || {
        let log = PartitionLog::open_raft(&p, config(), 100).await.unwrap();
        let retention = Retention {
            bytes_max: Some(1500),
            age_max: None,
        };
        let outcome = log.enforce_retention(&retention).await.unwrap();
        assert!(outcome.segments_deleted >= 1, "{outcome:?}");
        let left = segment_bases(&log);
        assert_eq!(left[..], bases[outcome.segments_deleted..]);
        let first = offsets.iter().position(|&o| o == left[0]).unwrap();
        check_numbering(&log, 100 + first as u64, &offsets[first..]);
        let files: Vec<u64> = raft_files(&p).iter().map(|f| f.0).collect();
        assert_eq!(files, left, "one file per segment left");
        log.close().await.unwrap();
        let log = PartitionLog::open_raft(&p, config(), 100).await.unwrap();
        check_numbering(&log, 100 + first as u64, &offsets[first..]);
        log.close().await.unwrap();
    });
}

#[test]
fn truncation_keeps_the_numbering_and_drops_later_raft_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let (mut offsets, bases) = closed_raft_log(&path);
    let p = path.clone();
    run(async move || {
        let log = PartitionLog::open_raft(&p, config(), 100).await.unwrap();
        // Cut at the third batch of the second segment.
        let n = offsets.iter().position(|&o| o == bases[1]).unwrap() + 2;
        let log = log.truncate_to(offsets[n]).await.unwrap();
        offsets.truncate(n);
        check_numbering(&log, 100, &offsets);
        let files: Vec<u64> = raft_files(&p).iter().map(|f| f.0).collect();
        assert_eq!(files, bases[..2]);
        // New batches number on from the cut, across new rolls.
        append(&log, 25, &mut offsets).await;
        check_numbering(&log, 100, &offsets);
        log.close().await.unwrap();
        let log = PartitionLog::open_raft(&p, config(), 100).await.unwrap();
        check_numbering(&log, 100, &offsets);
        log.close().await.unwrap();
    });
}

/// A crash after any durable step of a truncation of a replicated partition (and, inside a
/// segment's deletion, after its `.wal` and `.idx` went but before its `.raft` did) leaves
/// a log that opens with its numbering whole: a prefix of what was appended, numbered as
/// before, one `.raft` per segment.
#[test]
fn a_crash_during_a_truncation_leaves_a_numbered_prefix() {
    use crate::storage::truncate::{Step, apply, plan};
    let dir = tempfile::tempdir().unwrap();
    let original = dir.path().join("original");
    let (offsets, bases) = closed_raft_log(&original);
    let n = offsets.iter().position(|&o| o == bases[1]).unwrap() + 1;
    let cut = offsets[n];
    let steps = plan(&original, cut).unwrap();
    let mut cases: Vec<(usize, Option<u64>)> = (0..=steps.len()).map(|d| (d, None)).collect();
    // Inside each deletion: the segment's own files gone, its `.raft` not yet.
    for (i, step) in steps.iter().enumerate() {
        if let Step::DeleteSegment { base_offset } = step {
            cases.push((i, Some(*base_offset)));
        }
    }
    for (done, half_deleted) in cases {
        let copy = dir.path().join(format!("crash-{done}-{half_deleted:?}"));
        std::fs::create_dir(&copy).unwrap();
        for entry in std::fs::read_dir(&original).unwrap() {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_file() {
                std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
            }
        }
        apply(&copy, &steps[..done]).unwrap();
        if let Some(base) = half_deleted {
            std::fs::remove_file(wal_path(&copy, base)).unwrap();
            std::fs::remove_file(idx_path(&copy, base)).unwrap();
        }
        let offsets = offsets.clone();
        let case = format!("crash after {done} steps, half deleted {half_deleted:?}");
        run(async move || {
            let log = PartitionLog::open_raft(&copy, config(), 100)
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            let end = log.next_offset();
            assert!(end >= cut, "{case}: the log ends at {end}");
            let kept = offsets.iter().filter(|&&o| o < end).count();
            check_numbering(&log, 100, &offsets[..kept]);
            let files: Vec<u64> = raft_files(&copy).iter().map(|f| f.0).collect();
            assert_eq!(files, segment_bases(&log), "{case}");
            log.close().await.unwrap();
        });
    }
}
