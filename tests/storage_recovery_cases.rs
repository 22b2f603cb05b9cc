//! Crash recovery on real files: the deterministic cases (the property test is in
//! `storage_recovery_props.rs`, whose header explains the rules both hold).

#[macro_use]
mod recovery_harness;

use std::path::Path;

use pagurus::storage::FsyncPolicy;
use recovery_harness::*;

// ---------------------------------------------------------------------------------------
// Deterministic cases

fn small_config(fsync: FsyncPolicy) -> LogConfig {
    config(1024, 8, fsync)
}

/// Appends `n` batches `Batch::new(0..n)` under `fsync = always`, then crashes.
async fn durable_log(path: &Path, n: usize) -> Vec<Batch> {
    let batches: Vec<Batch> = (0..n).map(Batch::new).collect();
    let log = open(path, &small_config(FsyncPolicy::Always), "open")
        .await
        .unwrap();
    append_all(&log, &batches, &mut 0).await.unwrap();
    assert!(log.segments().len() >= 3, "the segments must have rolled");
    crash(log).await;
    batches
}

#[test]
fn zero_filled_wal_without_index_recovers_to_an_empty_writable_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    fs::create_dir(&path).unwrap();
    // What a power loss can leave of a new segment: the size extended, no data, no index.
    fs::write(wal_path(&path, 0), vec![0u8; 4096]).unwrap();
    run(async move || {
        let config = small_config(FsyncPolicy::Always);
        let log = open(&path, &config, "open").await.unwrap();
        assert_eq!(log.segments(), vec![(0, 0)]);
        assert_eq!(log.high_watermark(), 0);
        assert!(
            check_log(&log, &[], 4096, &[], "recovered")
                .unwrap()
                .is_empty()
        );
        assert!(log.read_plan(0, 4096).unwrap().is_empty());
        // The zeros are cut: no data is left in the file (under `always` the active segment
        // is then extended, sparsely, to hold its index journal's region at the end).
        let wal = fs::File::open(wal_path(&path, 0)).unwrap();
        assert_eq!(
            nix::unistd::lseek(&wal, 0, nix::unistd::Whence::SeekData),
            Err(nix::errno::Errno::ENXIO),
            "the zero fill was cut"
        );
        assert!(idx_path(&path, 0).exists(), "the index is rebuilt");

        let batch = Batch::new(1);
        append_all(&log, std::slice::from_ref(&batch), &mut 0)
            .await
            .unwrap();
        let expected = [batch];
        check_log(&log, &expected, 4096, &[], "appended").unwrap();
        crash(log).await;
        let log = open(&path, &config, "reopen").await.unwrap();
        assert_eq!(
            check_log(&log, &expected, 4096, &[], "reopened")
                .unwrap()
                .len(),
            1
        );
    });
}

#[test]
fn deleted_index_is_rebuilt_and_every_batch_is_kept() {
    for clean_close in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        run(async move || {
            let config = small_config(FsyncPolicy::Always);
            let batches = durable_log(&path, 40).await;
            if clean_close {
                let log = open(&path, &config, "open").await.unwrap();
                log.close().await.unwrap();
                drop(log);
                assert!(path.join(CLEAN_MARKER).exists());
            }
            let bases = wal_bases(&path);
            let victims = [bases[0], bases[bases.len() / 2], *bases.last().unwrap()];
            let originals: Vec<Vec<u8>> = victims
                .iter()
                .map(|&base| read_file(&idx_path(&path, base)))
                .collect();
            for &base in &victims {
                fs::remove_file(idx_path(&path, base)).unwrap();
            }

            let log = open(&path, &config, "reopen").await.unwrap();
            let stored = check_log(&log, &batches, 1000, &[], "rebuilt").unwrap();
            assert_eq!(stored.len(), batches.len(), "clean close: {clean_close}");
            for (&base, original) in victims.iter().zip(&originals) {
                let rebuilt = read_file(&idx_path(&path, base));
                // The active index is extended (sparsely) to its capacity again, and before
                // a clean close it was too: compare the entries.
                let entries = original
                    .chunks_exact(ENTRY_LEN)
                    .take_while(|slot| !IndexEntry::is_empty_slot(slot))
                    .count()
                    * ENTRY_LEN;
                assert!(entries > 0);
                assert_eq!(
                    &rebuilt[..entries],
                    &original[..entries],
                    "index {base} rebuilt differently (clean close: {clean_close})"
                );
                if base != *victims.last().unwrap() {
                    assert_eq!(
                        rebuilt.len(),
                        entries,
                        "a sealed index holds its entries only"
                    );
                }
            }

            let extra = Batch::new(99);
            let mut next = log.next_offset();
            append_all(&log, std::slice::from_ref(&extra), &mut next)
                .await
                .unwrap();
            let mut expected = batches.clone();
            expected.push(extra);
            check_log(&log, &expected, 1000, &[], "appended").unwrap();
            crash(log).await;
            let log = open(&path, &config, "reopen").await.unwrap();
            check_log(&log, &expected, 1000, &[], "reopened").unwrap();
        });
    }
}

#[test]
fn clean_close_then_reopen_skips_the_scan_and_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let config = small_config(FsyncPolicy::Always);
        let batches = durable_log(&path, 30).await;
        let log = open(&path, &config, "open").await.unwrap();
        let active = *wal_bases(&path).last().unwrap();
        log.close().await.unwrap();
        drop(log);
        assert!(path.join(CLEAN_MARKER).exists());
        let entries = fs::metadata(idx_path(&path, active)).unwrap().len();
        assert_eq!(entries % ENTRY_LEN as u64, 0);
        assert!(
            entries > 0 && entries < u64::from(config.index_entries) * ENTRY_LEN as u64,
            "close trims the active index to its entries"
        );

        let log = open(&path, &config, "clean reopen").await.unwrap();
        assert!(
            !path.join(CLEAN_MARKER).exists(),
            "the marker is consumed, so a later crash is not mistaken for a clean stop"
        );
        check_log(&log, &batches, 1000, &[], "clean reopen").unwrap();
        log.close().await.unwrap();
        drop(log);

        // Show that the clean start does not scan: damage the last batch's payload after a
        // clean close. A scan would cut it (the active segment is above the recovery point);
        // a trusted start keeps it, and the read path's CRC check catches it.
        let last = batches.len() - 1;
        let wal = wal_path(&path, active);
        let wal_len = fs::metadata(&wal).unwrap().len();
        flip_bit(&wal, wal_len - 1, 0);
        let log = open(&path, &config, "reopen after damage").await.unwrap();
        assert_eq!(
            log.next_offset(),
            offsets_of(&batches)[last] + batches[last].offsets()
        );
        check_log(&log, &batches, 1000, &[last], "trusted").unwrap();
        crash(log).await;
        // Without the marker, recovery scans the active segment and cuts the damaged batch.
        let log = open(&path, &config, "reopen after a crash").await.unwrap();
        let stored = check_log(&log, &batches, 1000, &[], "scanned").unwrap();
        assert_eq!(stored.len(), last);
        // Its bytes are gone, and the offset is handed out again.
        let extra = Batch::new(77);
        let mut next = offsets_of(&batches)[last];
        append_all(&log, std::slice::from_ref(&extra), &mut next)
            .await
            .unwrap();
        let mut expected = batches[..last].to_vec();
        expected.push(extra);
        check_log(&log, &expected, 1000, &[], "appended").unwrap();
    });
}

/// Index entries carry no checksum of their own, and a segment sealed before the last open
/// is trusted after a cheap check of its index. A flipped bit in the offset field of an
/// entry (1 becomes 17) breaks the chain of offsets: recovery scans the segment, and either
/// cuts the log before the damaged entry or, if it kept it, the read fails as corrupt.
#[test]
fn index_rot_in_a_trusted_segment_is_caught() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let config = small_config(FsyncPolicy::Always);
        // Batch 0 takes one offset, so batch 1 is at offset 1, in the first segment.
        let batches = durable_log(&path, 20).await;
        let log = open(&path, &config, "open").await.unwrap();
        crash(log).await;
        let recovery_point = read_recovery_point(&path).opened;
        assert!(recovery_point > 0, "segment 0 is below the recovery point");
        // Slot 1, offset field (bytes 0..8, little-endian): 1 becomes 17.
        flip_bit(&idx_path(&path, 0), ENTRY_LEN as u64, 4);
        let log = open(&path, &config, "reopen").await.unwrap();
        // Either recovery cuts the log before batch 1, or reading batch 1 is an error.
        let cut = log.next_offset() == 1;
        let corrupt: &[usize] = if cut { &[] } else { &[1] };
        check_log(&log, &batches, 1000, corrupt, "after index rot").unwrap();
    });
}

/// A `.wal` and an `.idx` of a segment that is not the last, both cut at the same batch
/// boundary: the files agree and the scan finds nothing wrong in them, but the next segment
/// no longer continues this one. Recovery quarantines the segments after the gap, so the log
/// stays an exact prefix.
#[test]
fn wal_and_index_cut_at_the_same_batch_is_a_gap_and_quarantined() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run(async move || {
        let config = small_config(FsyncPolicy::Always);
        let batches = durable_log(&path, 20).await;
        // Keep batch 0 of segment 0: cut its WAL after it, and its index after its entry.
        truncate(&wal_path(&path, 0), batches[0].len());
        truncate(&idx_path(&path, 0), ENTRY_LEN as u64);
        let log = open(&path, &config, "reopen").await.unwrap();
        check_log(&log, &batches, 1000, &[], "after the cut").unwrap();
    });
}

/// What a power cut in the middle of a seal (`storage::log::seal`) can leave under `never`:
/// the last closed segment's files look sealed (the index trimmed to its entries, the WAL as
/// long as they say), but the page holding its last batch's payload never reached the disk,
/// and `recovery-point` does not yet vouch for the segment. Recovery must treat it as it
/// treats the active segment: cut it at the torn batch and quarantine the segment after it,
/// so the log is an exact prefix with nothing corrupt in it. The same damage in a segment
/// whose seal was recorded is rot: that batch is refused as corrupt, and nothing is cut.
#[test]
fn a_torn_closed_segment_is_cut_unless_its_seal_was_recorded() {
    for recorded in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        run(async move || {
            let config = small_config(FsyncPolicy::Never);
            let batches: Vec<Batch> = (0..40).map(Batch::new).collect();
            let log = open(&path, &config, "open").await.unwrap();
            append_all(&log, &batches, &mut 0).await.unwrap();
            // `crash` waits for the seal task, which holds the log until it is done.
            crash(log).await;
            let bases = wal_bases(&path);
            assert!(bases.len() >= 3, "the segments must have rolled: {bases:?}");
            let (torn, active) = (bases[bases.len() - 2], bases[bases.len() - 1]);
            let point = read_recovery_point(&path);
            assert_eq!(
                (point.opened, point.sealed),
                (0, active),
                "each seal moves `sealed` up to the segment after it"
            );
            if !recorded {
                // The cut came before the last seal wrote the recovery point.
                fs::write(path.join(RECOVERY_POINT), format!("0 {torn}\n")).unwrap();
            }
            // The torn segment's last batch, and where it sits in the WAL.
            let offsets = offsets_of(&batches);
            let last = offsets.iter().rposition(|&o| o < active).unwrap();
            let first = offsets.iter().position(|&o| o >= torn).unwrap();
            let position: u64 = batches[first..last].iter().map(Batch::len).sum();
            let header = pagurus::protocol::record::HEADER_LEN as u64;
            let zeros = vec![0u8; (batches[last].len() - header) as usize];
            write_at(&wal_path(&path, torn), &zeros, position + header);

            let log = open(&path, &config, "reopen").await.unwrap();
            if recorded {
                check_log(&log, &batches, 4096, &[last], "seal recorded").unwrap();
                assert!(quarantined_bases(&path).is_empty());
            } else {
                check_log(&log, &batches[..last], 4096, &[], "seal not recorded").unwrap();
                assert_eq!(log.next_offset(), offsets[last], "cut at the torn batch");
                assert_eq!(quarantined_bases(&path), vec![active]);
            }
        });
    }
}
