//! Key compaction on real files: what a pass keeps, and that every state a crash can leave
//! behind in the middle of a pass opens to either the old segment or the new one.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use glommio::LocalExecutorBuilder;
use pagurus::protocol::record::{self, BatchHeader, HEADER_LEN, encode_batch};
use pagurus::storage::{CompactionLimits, FsyncPolicy, LogConfig, PartitionLog};

fn run<T: Send + 'static>(f: impl AsyncFnOnce() -> T + Send + 'static) -> T {
    LocalExecutorBuilder::default()
        .spawn(move || async move { f().await })
        .expect("executor")
        .join()
        .expect("executor ran")
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        segment_age: Duration::from_secs(3600),
        index_entries: 64,
        fsync: FsyncPolicy::Always,
        ..LogConfig::default()
    }
}

/// A batch as read back: (offset, key, payload, crc).
type Seen = (u64, Vec<u8>, Vec<u8>, u32);

/// Every batch a reader sees, walking from the log start with the public read API.
fn read_all(log: &PartitionLog) -> Vec<Seen> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.high_watermark() {
        let batches = log.read(offset, 64 * 1024).expect("read");
        assert!(
            !batches.is_empty(),
            "a read below the watermark returns data"
        );
        for b in batches {
            let header = BatchHeader::decode(&b.bytes, &Default::default()).unwrap();
            assert_eq!(
                header.offset, b.entry.offset,
                "offsets are never renumbered"
            );
            assert_eq!(record::batch_crc(&b.bytes), b.entry.crc);
            let key_end = HEADER_LEN + header.key_len as usize;
            out.push((
                b.entry.offset,
                b.bytes[HEADER_LEN..key_end].to_vec(),
                b.bytes[key_end..].to_vec(),
                b.entry.crc,
            ));
            offset = b.entry.next_offset();
        }
    }
    out
}

/// Appends `rounds` rounds of updates to `keys` keys (plus an unkeyed batch every 7th),
/// returning every appended batch.
async fn fill(log: &Rc<PartitionLog>, keys: usize, rounds: usize) -> Vec<Seen> {
    let mut appended = Vec::new();
    for round in 0..rounds {
        for k in 0..keys {
            let key = if (round * keys + k) % 7 == 3 {
                Vec::new()
            } else {
                format!("key-{k}").into_bytes()
            };
            let payload = format!("value {round} of {k}").into_bytes();
            let batch = encode_batch(1_000 + (round * keys + k) as u64, &key, &payload, 1);
            let ack = log.append(&batch, None).await.expect("append");
            let mut stored = batch.clone();
            record::set_offset(&mut stored, ack.base_offset);
            appended.push((ack.base_offset, key, payload, record::batch_crc(&stored)));
        }
    }
    appended
}

/// What a correct pass must leave, given what was appended and the segments as they were:
/// a batch survives if it has no key, is the newest with its key, is the last batch of its
/// segment, or lives in the active segment (never compacted).
fn expected_after(appended: &[Seen], segments: &[(u64, u64)]) -> Vec<Seen> {
    let newest: HashMap<&[u8], u64> = appended
        .iter()
        .filter(|b| !b.1.is_empty())
        .map(|b| (b.1.as_slice(), b.0))
        .collect();
    let active_base = segments.last().unwrap().0;
    let mut last_of_segment = Vec::new();
    for w in segments.windows(2) {
        // The last batch of a closed segment is the one ending at the next base.
        last_of_segment.push(w[1].0 - 1);
    }
    appended
        .iter()
        .filter(|b| {
            b.1.is_empty()
                || newest[b.1.as_slice()] == b.0
                || b.0 >= active_base
                || last_of_segment.contains(&b.0)
        })
        .cloned()
        .collect()
}

#[test]
fn compaction_keeps_the_newest_batch_per_key_with_original_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open(&path, config()).await.unwrap();
        let appended = fill(&log, 10, 40).await;
        let segments = log.segments();
        assert!(segments.len() > 5, "2 KiB segments must have rolled");
        assert_eq!(read_all(&log), appended);
        let bytes_before: u64 = segments.iter().map(|s| s.1).sum();
        assert!(log.dirty_ratio() > 0.99, "nothing was compacted yet");

        let outcome = log.compact(&CompactionLimits::default()).await.unwrap();
        let expected = expected_after(&appended, &segments);
        assert_eq!(read_all(&log), expected);
        assert_eq!(outcome.segments_examined, segments.len() - 1);
        assert_eq!(
            outcome.batches_removed as usize,
            appended.len() - expected.len()
        );
        assert!(outcome.segments_rewritten > 0);
        assert!(outcome.bytes_after < outcome.bytes_before);
        assert_eq!(outcome.keys, 10);
        assert!(!outcome.key_map_full);
        let bytes_after: u64 = log.segments().iter().map(|s| s.1).sum();
        assert_eq!(
            bytes_before - bytes_after,
            outcome.bytes_before - outcome.bytes_after
        );
        assert_eq!(
            log.dirty_ratio(),
            0.0,
            "the pass covered every closed segment"
        );
        // Same segment names, same end offset; the log start stays at the first base.
        assert_eq!(
            log.segments().iter().map(|s| s.0).collect::<Vec<_>>(),
            segments.iter().map(|s| s.0).collect::<Vec<_>>()
        );
        assert_eq!(log.log_start_offset(), 0);
        // An offset inside a gap reads the next kept batch.
        let first_kept = expected[0].0;
        let gap_probe = (0..first_kept).next();
        if let Some(probe) = gap_probe {
            assert_eq!(log.read(probe, 1).unwrap()[0].entry.offset, first_kept);
        }
        // Nothing left to drop: a second pass rewrites nothing.
        let again = log.compact(&CompactionLimits::default()).await.unwrap();
        assert_eq!(again.segments_rewritten, 0);
        assert_eq!(read_all(&log), expected);

        // The log takes appends, and a clean reopen and a crash reopen (no close: the
        // recovery scan walks the compacted segments, gaps vouched for by their index)
        // both serve the same batches.
        let more = fill(&log, 3, 1).await;
        let mut expected_now = expected.clone();
        expected_now.extend(more);
        assert_eq!(read_all(&log), expected_now);
        log.close().await.unwrap();
        drop(log);
        let log = PartitionLog::open(&path, config()).await.unwrap();
        assert_eq!(read_all(&log), expected_now);
        drop(log);
        std::fs::remove_file(path.join("recovery-point")).unwrap();
        let log = PartitionLog::open(&path, config()).await.unwrap();
        assert_eq!(
            read_all(&log),
            expected_now,
            "a full recovery scan keeps it all"
        );
        assert!(
            !path.join("quarantine").exists(),
            "nothing was taken for damage"
        );
    });
}

#[test]
fn a_small_key_map_keeps_more_but_never_loses_a_newest_batch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let log = PartitionLog::open(&path, config()).await.unwrap();
        let appended = fill(&log, 40, 10).await;
        let full_expected = expected_after(&appended, &log.segments());
        let outcome = log
            .compact(&CompactionLimits {
                key_map_bytes_max: 10 * 60,
            })
            .await
            .unwrap();
        assert!(outcome.key_map_full);
        assert!(outcome.keys < 40);
        let kept = read_all(&log);
        // Everything a full pass keeps is kept, plus some superseded batches.
        for b in &full_expected {
            assert!(kept.contains(b), "batch at {} lost", b.0);
        }
        assert!(kept.len() > full_expected.len());
        assert!(
            kept.len() < appended.len(),
            "the keys it knew were compacted"
        );
        assert!(
            log.dirty_ratio() > 0.0,
            "a partial pass does not mark the log clean"
        );
        // Unbounded, the next pass finishes the job.
        log.compact(&CompactionLimits::default()).await.unwrap();
        assert_eq!(read_all(&log), full_expected);
    });
}

/// A crash state: its name, the files written over the old ones, and whether the segment
/// must open as the new one.
type CrashState<'a> = (&'static str, Vec<(String, &'a Vec<u8>)>, bool);

/// The files of a partition directory, by name, but the spare next segment (made in the
/// background by the live log, and no part of the dance).
fn snapshot_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .filter(|e| !e.file_name().to_string_lossy().starts_with("next-segment."))
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn write_files(dir: &Path, files: &BTreeMap<String, Vec<u8>>) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

/// Every state the file dance can leave after a crash (see `storage::compaction`), built
/// from the real files before and after a pass, opens to exactly the old batches or exactly
/// the new ones, and leaves no temporary file behind.
#[test]
fn every_crash_state_of_the_file_dance_opens_to_old_or_new() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let (old_files, new_files, old_batches, new_batches, base) = run({
        let path = path.clone();
        async move || {
            let log = PartitionLog::open(&path, config()).await.unwrap();
            fill(&log, 5, 30).await;
            log.close().await.unwrap();
            drop(log);
            let old_files = snapshot_files(&path);
            let log = PartitionLog::open(&path, config()).await.unwrap();
            let old_batches = read_all(&log);
            let outcome = log.compact(&CompactionLimits::default()).await.unwrap();
            assert!(outcome.segments_rewritten >= 2);
            let new_batches = read_all(&log);
            log.close().await.unwrap();
            drop(log);
            let new_files = snapshot_files(&path);
            // The first segment that changed is the one whose dance is replayed below.
            let base = (0..)
                .map(|i: u64| format!("{i:020}.wal"))
                .find(|n| old_files.get(n) != new_files.get(n))
                .unwrap();
            (old_files, new_files, old_batches, new_batches, base)
        }
    });
    let stem = base.strip_suffix(".wal").unwrap().to_string();
    let (wal, idx) = (format!("{stem}.wal"), format!("{stem}.idx"));
    // Only this segment is mid-dance: everything else is as before the pass.
    // (name, files written over the old ones, does the segment open as the new one?)
    let states: Vec<CrashState> = vec![
        (
            "written",
            vec![
                (format!("{wal}.cleaning"), &new_files[&wal]),
                (format!("{idx}.cleaning"), &new_files[&idx]),
            ],
            false,
        ),
        (
            "half written",
            vec![(format!("{wal}.cleaning"), &new_files[&wal])],
            false,
        ),
        (
            "wal swapped",
            vec![
                (format!("{wal}.swap"), &new_files[&wal]),
                (format!("{idx}.cleaning"), &new_files[&idx]),
            ],
            false,
        ),
        (
            "idx swap reordered before wal swap",
            vec![
                (format!("{wal}.cleaning"), &new_files[&wal]),
                (format!("{idx}.swap"), &new_files[&idx]),
            ],
            false,
        ),
        (
            "committed",
            vec![
                (format!("{wal}.swap"), &new_files[&wal]),
                (format!("{idx}.swap"), &new_files[&idx]),
            ],
            true,
        ),
        (
            "wal installed",
            vec![
                (wal.clone(), &new_files[&wal]),
                (format!("{idx}.swap"), &new_files[&idx]),
            ],
            true,
        ),
    ];
    for (name, extra, expect_new) in states {
        let case: PathBuf = dir.path().join(format!("case-{}", name.replace(' ', "-")));
        let mut files = old_files.clone();
        files.remove("clean-shutdown");
        for (file, bytes) in extra {
            files.insert(file, bytes.clone());
        }
        write_files(&case, &files);
        let expected_first_segment: Vec<Seen> = {
            let src = if expect_new {
                &new_batches
            } else {
                &old_batches
            };
            src.clone()
        };
        let (seen, leftovers) = run({
            let case = case.clone();
            async move || {
                let log = PartitionLog::open(&case, config()).await.unwrap();
                let seen = read_all(&log);
                drop(log);
                let leftovers: Vec<String> = snapshot_files(&case)
                    .into_keys()
                    .filter(|n| n.ends_with(".cleaning") || n.ends_with(".swap"))
                    .collect();
                (seen, leftovers)
            }
        });
        assert!(leftovers.is_empty(), "{name}: left {leftovers:?}");
        assert!(!case.join("quarantine").exists(), "{name}: quarantined");
        // Segments other than the replayed one are old; the replayed one is old or new.
        let seg_range = {
            let start: u64 = stem.parse().unwrap();
            let end = old_batches
                .iter()
                .filter(|b| b.0 >= start)
                .map(|b| b.0)
                .find(|&o| old_files.contains_key(&format!("{o:020}.wal")) && o > start)
                .unwrap_or(u64::MAX);
            start..end
        };
        let want: Vec<Seen> = old_batches
            .iter()
            .filter(|b| !seg_range.contains(&b.0))
            .chain(
                expected_first_segment
                    .iter()
                    .filter(|b| seg_range.contains(&b.0)),
            )
            .map(|b| (b.0, b.clone()))
            .collect::<BTreeMap<u64, Seen>>()
            .into_values()
            .collect();
        assert_eq!(seen, want, "{name}");
    }
}
