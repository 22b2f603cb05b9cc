//! Crash recovery: the segment scanner.
//!
//! The scanner is sans-IO: it reads a segment's `.wal` bytes and its `.idx` bytes (if the
//! file exists) and decides how much of the segment is good. The partition log applies the
//! verdict to the files (truncate the WAL, rewrite the index) and logs what was cut.
//!
//! # What can be on disk after a crash
//!
//! Appends stage the index entry in the mapped `.idx` first and then write the batch to the
//! `.wal`; under `fsync = always` a batch is acknowledged only after an `fdatasync` of both
//! files, or of the `.wal` alone with a copy of the entry in its index journal
//! (`storage::index_journal`). So, for the last segment written before a crash:
//!
//! - **kill -9 of the broker**: both files live in the page cache, which survives the
//!   process. The index may hold entries for batches whose WAL write never started (they were
//!   staged, never acknowledged): their slots point past the WAL end and are dropped.
//! - **power loss**: the kernel may have written back any subset of dirty pages. The WAL may
//!   end in a torn batch (a header whose payload never made it, or a tail of zeros where the
//!   file size was extended before the data blocks were written, or where the WAL was
//!   pre-extended with zeros); the index may be shorter or longer than the WAL. Nothing past the last `fdatasync` was acknowledged under
//!   `always`, so cutting there loses nothing that was promised.
//! - **bit rot or a bad sector**: a batch whose bytes no longer match the CRC in its entry.
//!
//! # The rules
//!
//! Batches are walked from position 0. A batch is kept when its header is sane (magic,
//! key/payload sizes within limits, the whole batch inside the file), its offset continues
//! the previous batch's (`base_offset` for the first), and:
//!
//! - its index slot holds an entry that agrees with it exactly (offset, position, length,
//!   record count, running max timestamp, and the CRC32C of the bytes); or
//!   An exact entry also vouches for a jump in offsets (compaction leaves gaps); or
//! - its index slot lies past the end of the `.idx` (the file is short, or was deleted):
//!   the entry is rebuilt from the WAL. The CRC cannot be checked against anything here; a
//!   structurally valid batch that continues the offsets is trusted.
//!
//! Under `always` an empty or missing slot may be held by the `.wal`'s index journal
//! (`storage::index_journal`): the copy of the entry that a commit round made durable with
//! its batch, through one fdatasync of the `.wal`. Such an entry counts as the slot's: the
//! batch is kept if it agrees exactly (and the entry is rebuilt into the `.idx`), and cut
//! (`Unindexed`) if not, since then the round that wrote the entry never completed.
//!
//! A slot *inside* the `.idx` that reads as empty is different: the file reached that slot
//! (it is extended to its capacity when the segment becomes active), but the entry never
//! became durable, so no sync ever covered the batch and it was never promised under any
//! policy (after kill -9 the page cache holds both files; every sync syncs both). Such a
//! batch is cut (`Unindexed`): after a power cut its bytes may be torn, a valid header over
//! zeros from a pre-extended WAL (`storage::log::prealloc`), and only its entry's CRC could
//! tell.
//!
//! The walk stops at the first batch that fails; everything from there on is cut. A slot
//! that holds an entry which disagrees with its batch stops the walk too: the two disagree,
//! so one of them is damaged, and serving the batch could serve corrupt data. Index entries
//! past the last kept batch are dropped. Zeros from the last kept batch to the end of the
//! file (or to the journal's region) are pre-extended space: the log ends there, with no
//! cut (`zero_tail_bytes`, which counts the region too).

use crate::limits::Limits;
use crate::protocol::record::{self, RecordError};
use crate::storage::index::{ENTRY_LEN, IndexEntry, stored_records};
use crate::storage::index_journal;

/// Why the scan stopped before the end of the WAL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CutReason {
    /// The file ends inside a header or a batch.
    TornBatch { position: u64 },
    /// A header failed validation (bad magic, oversized key or payload).
    BadHeader { position: u64, error: RecordError },
    /// The control bit (`index::CONTROL_BIT`) with a count other than 1: no broker stores
    /// such a header.
    BadRecordCount { position: u64, record_count: u32 },
    /// The batch's offset does not continue the previous one.
    OffsetGap {
        position: u64,
        expected: u64,
        found: u64,
    },
    /// The index entry and the WAL bytes disagree (CRC, position, length, offset...).
    IndexMismatch { position: u64, offset: u64 },
    /// The batch would not fit an index entry's 32-bit position.
    SegmentTooLarge { position: u64 },
    /// The batch's records would run past the largest offset: no broker wrote it.
    OffsetOverflow { position: u64, offset: u64 },
    /// The batch's index slot is inside the index file but empty: the entry never became
    /// durable, so the batch was never promised, and its bytes cannot be checked.
    Unindexed { position: u64, offset: u64 },
}

/// The scanner's verdict on one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOutcome {
    /// The entries of every kept batch, in order: the index as it must be.
    pub entries: Vec<IndexEntry>,
    /// Bytes of the WAL that are kept; the file is truncated to this.
    pub wal_len_valid: u64,
    /// Offset after the last kept batch (`base_offset` if none).
    pub next_offset: u64,
    /// Why the walk stopped early, if it did.
    pub cut: Option<CutReason>,
    /// Entries rebuilt from the WAL because the index lacked them.
    pub entries_rebuilt: usize,
    /// Non-empty index slots past the last kept batch that were dropped.
    pub entries_dropped: usize,
    /// Zeros after the last kept batch (pre-extended space): cut from the file, but no
    /// batch was there.
    pub zero_tail_bytes: u64,
}

/// An index slot as the scanner finds it.
enum Slot {
    Entry(IndexEntry),
    /// Empty or missing in the `.idx`, held by the `.wal`'s index journal
    /// (`storage::index_journal`): a round made it durable with its batch.
    Journal(IndexEntry),
    /// Inside the file, all zeros: the entry never reached the disk.
    Empty,
    /// Past the end of the file (or no file): the index was lost or cut short.
    Missing,
}

impl ScanOutcome {
    /// True when nothing but pre-extended zeros is cut: no batch or entry was lost.
    pub fn is_whole(&self) -> bool {
        self.cut.is_none() && self.entries_rebuilt == 0 && self.entries_dropped == 0
    }

    /// True when the files need no change at all.
    pub fn is_clean(&self, wal_len: u64) -> bool {
        self.cut.is_none()
            && self.entries_rebuilt == 0
            && self.entries_dropped == 0
            && self.wal_len_valid == wal_len
    }
}

/// Scans one segment. `idx` is `None` when the index file does not exist.
pub fn scan_segment(
    base_offset: u64,
    wal: &[u8],
    idx: Option<&[u8]>,
    limits: &Limits,
) -> ScanOutcome {
    scan_sparse_segment(base_offset, wal, idx, 0..0, limits)
}

/// [`scan_segment`], told that the WAL's bytes in `known_zeros` read as zeros (a hole:
/// an active WAL is extended sparsely to its index journal's region, hundreds of MiB past
/// the batches), so the check for a zero tail need not read them.
pub fn scan_sparse_segment(
    base_offset: u64,
    wal: &[u8],
    idx: Option<&[u8]>,
    known_zeros: std::ops::Range<usize>,
    limits: &Limits,
) -> ScanOutcome {
    let zeros = |from: usize, to: usize| {
        let (a, b) = (
            known_zeros.start.clamp(from, to),
            known_zeros.end.clamp(from, to),
        );
        wal[from..a].iter().all(|&b| b == 0) && wal[b..to].iter().all(|&b| b == 0)
    };
    let idx = idx.unwrap_or(&[]);
    let slots = idx.len() / ENTRY_LEN;
    let idx_slot = |i: usize| -> Slot {
        if i >= slots {
            return Slot::Missing;
        }
        let bytes = &idx[i * ENTRY_LEN..(i + 1) * ENTRY_LEN];
        if IndexEntry::is_empty_slot(bytes) {
            Slot::Empty
        } else {
            Slot::Entry(IndexEntry::decode(bytes))
        }
    };
    let journal = index_journal::find(wal);
    let slot = |i: usize| -> Slot {
        match (idx_slot(i), &journal) {
            (Slot::Empty | Slot::Missing, Some((_, record))) if record.entry(i).is_some() => {
                Slot::Journal(record.entry(i).expect("checked"))
            }
            (found, _) => found,
        }
    };
    // The log ends at zeros that run to the end of the file, or to the journal's region.
    let zeros_end = |position: usize| match &journal {
        Some((region, _)) if position <= *region as usize => *region as usize,
        _ => wal.len(),
    };

    let mut entries = Vec::new();
    let mut position = 0usize;
    let mut expected = base_offset;
    let mut max_timestamp_ns = 0u64;
    let mut entries_rebuilt = 0;
    let mut cut = None;

    while position < wal.len() {
        let at = position as u64;
        if zeros(position, zeros_end(position)) {
            // Pre-extended space (or a torn write's zeros) past the last batch: the end of
            // the log, not a damaged batch.
            break;
        }
        let header = match record::check(&wal[position..], limits) {
            Ok(header) => header,
            Err(RecordError::Incomplete { .. }) => {
                cut = Some(CutReason::TornBatch { position: at });
                break;
            }
            Err(error) => {
                cut = Some(CutReason::BadHeader {
                    position: at,
                    error,
                });
                break;
            }
        };
        let len = header.batch_len();
        let gap = CutReason::OffsetGap {
            position: at,
            expected,
            found: header.offset,
        };
        if header.offset < expected {
            cut = Some(gap);
            break;
        }
        // A control batch's count carries the control bit (`index::CONTROL_BIT`).
        let Some(records) = stored_records(header.record_count) else {
            cut = Some(CutReason::BadRecordCount {
                position: at,
                record_count: header.record_count,
            });
            break;
        };
        let control = records & crate::storage::index::CONTROL_BIT != 0;
        let offsets = records & !crate::storage::index::CONTROL_BIT;
        if header.offset.checked_add(u64::from(offsets)).is_none() {
            cut = Some(CutReason::OffsetOverflow {
                position: at,
                offset: header.offset,
            });
            break;
        }
        let (Ok(position32), Ok(length32)) = (u32::try_from(position), u32::try_from(len)) else {
            cut = Some(CutReason::SegmentTooLarge { position: at });
            break;
        };
        let batch = &wal[position..position + len];
        max_timestamp_ns = max_timestamp_ns.max(header.timestamp_ns);
        let format = if control {
            record::BatchFormat::Native
        } else {
            record::format_of(batch, &header)
        };
        let entry = IndexEntry {
            offset: header.offset,
            max_timestamp_ns,
            position: position32,
            length: length32,
            records,
            crc: record::batch_crc(batch),
            format,
        };
        match slot(entries.len()) {
            // Compaction leaves offset gaps inside a segment; an entry that matches the bytes
            // exactly, CRC included, vouches for the jump.
            Slot::Entry(stored) if stored == entry => {}
            Slot::Journal(stored) if stored == entry => entries_rebuilt += 1,
            Slot::Entry(_) => {
                cut = Some(CutReason::IndexMismatch {
                    position: at,
                    offset: header.offset,
                });
                break;
            }
            // The index file reaches this slot but the entry never became durable, so no
            // sync covered the batch either: it was never promised. Its bytes may be torn
            // (a valid header over zeros), which nothing here could tell.
            // The journal's round wrote a different batch here: its write never completed,
            // so the round was never acknowledged.
            Slot::Journal(_) | Slot::Empty => {
                cut = Some(CutReason::Unindexed {
                    position: at,
                    offset: header.offset,
                });
                break;
            }
            Slot::Missing if header.offset != expected => {
                cut = Some(gap);
                break;
            }
            Slot::Missing => entries_rebuilt += 1,
        }
        entries.push(entry);
        position += len;
        expected = entry.next_offset();
    }

    let entries_dropped = (entries.len()..slots)
        .filter(|&i| matches!(idx_slot(i), Slot::Entry(_)))
        .count();
    let zero_tail_bytes = if cut.is_none() {
        (wal.len() - position) as u64
    } else {
        0
    };
    ScanOutcome {
        wal_len_valid: position as u64,
        zero_tail_bytes,
        next_offset: expected,
        cut,
        entries_rebuilt,
        entries_dropped,
        entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record::{encode_batch, set_offset};

    fn segment(batches: &[(&[u8], u32)], base: u64) -> (Vec<u8>, Vec<u8>) {
        let (mut wal, mut idx) = (Vec::new(), Vec::new());
        let mut offset = base;
        let mut max_ts = 0;
        for (i, (payload, count)) in batches.iter().enumerate() {
            let ts = 10 + i as u64;
            let mut batch = encode_batch(ts, b"", payload, *count);
            set_offset(&mut batch, offset);
            max_ts = u64::max(max_ts, ts);
            let entry = IndexEntry {
                offset,
                max_timestamp_ns: max_ts,
                position: wal.len() as u32,
                length: batch.len() as u32,
                records: (*count).max(1),
                crc: record::batch_crc(&batch),
                format: record::BatchFormat::Native,
            };
            let mut slot = [0u8; ENTRY_LEN];
            entry.encode(&mut slot);
            idx.extend_from_slice(&slot);
            wal.extend_from_slice(&batch);
            offset = offset.wrapping_add(u64::from(entry.offsets()));
        }
        (wal, idx)
    }

    #[test]
    fn clean_segment_is_kept_whole() {
        let (wal, idx) = segment(&[(b"a", 1), (b"bb", 5), (b"", 0)], 1000);
        let out = scan_segment(1000, &wal, Some(&idx), &Limits::default());
        assert!(out.is_clean(wal.len() as u64));
        assert_eq!(out.next_offset, 1007);
        assert_eq!(out.entries.len(), 3);
    }

    #[test]
    fn zero_filled_segment_recovers_empty() {
        // HermitMQ reads a zeroed 4 KiB tail as a record; pagurus must not.
        let out = scan_segment(0, &[0u8; 4096], None, &Limits::default());
        assert_eq!(out.wal_len_valid, 0);
        assert_eq!(out.next_offset, 0);
        assert!(out.entries.is_empty());
        assert_eq!(out.cut, None);
        assert_eq!(out.zero_tail_bytes, 4096);
    }

    #[test]
    fn pre_extended_zeros_end_the_log_without_a_cut() {
        let (mut wal, mut idx) = segment(&[(b"one", 1), (b"two", 1)], 0);
        let batches = wal.len();
        wal.resize(batches + 8192, 0);
        idx.resize(64 * ENTRY_LEN, 0);
        let out = scan_segment(0, &wal, Some(&idx), &Limits::default());
        assert_eq!(out.entries.len(), 2);
        assert_eq!(out.cut, None);
        assert!(out.is_whole());
        assert!(
            !out.is_clean(wal.len() as u64),
            "the zeros are cut from the file"
        );
        assert_eq!(out.wal_len_valid, batches as u64);
        assert_eq!(out.zero_tail_bytes, 8192);
        // A zero byte that is followed by anything else is no zero tail.
        wal[batches + 100] = 1;
        let out = scan_segment(0, &wal, Some(&idx), &Limits::default());
        assert!(matches!(out.cut, Some(CutReason::BadHeader { .. })));
        assert_eq!(out.zero_tail_bytes, 0);
    }

    /// A control batch's header (count `0x8000_0001`) rebuilds a control entry of one
    /// offset; any other count with the control bit is cut: no broker stores it.
    #[test]
    fn the_control_bit_in_a_header() {
        use crate::storage::index::CONTROL_RECORD_COUNT;
        let (wal, _) = segment(&[(b"a", 2), (b"conf", CONTROL_RECORD_COUNT), (b"b", 1)], 5);
        let out = scan_segment(5, &wal, None, &Limits::default());
        assert_eq!(out.cut, None);
        let offsets: Vec<(u64, bool)> = out
            .entries
            .iter()
            .map(|e| (e.offset, e.is_control()))
            .collect();
        assert_eq!(offsets, [(5, false), (7, true), (8, false)]);
        assert_eq!(out.next_offset, 9);
        let (wal, _) = segment(&[(b"a", 2), (b"x", CONTROL_RECORD_COUNT + 1)], 5);
        let out = scan_segment(5, &wal, None, &Limits::default());
        assert_eq!(out.entries.len(), 1);
        assert!(
            matches!(out.cut, Some(CutReason::BadRecordCount { record_count, .. }) if record_count == CONTROL_RECORD_COUNT + 1),
            "{:?}",
            out.cut
        );
    }

    #[test]
    fn torn_batch_over_zeros_with_an_empty_slot_is_cut() {
        // A power cut kept the page with the header and lost the next one (pre-extended
        // zeros), and the index page was not written back: the slot reads as empty.
        let payload = vec![0xabu8; 6000];
        let (wal, idx) = segment(&[(b"one", 1), (&payload, 1)], 0);
        let mut torn = wal.clone();
        torn[4096..].fill(0);
        torn.resize(wal.len() + 4096, 0);
        let mut idx = idx[..ENTRY_LEN].to_vec();
        idx.resize(64 * ENTRY_LEN, 0);
        let out = scan_segment(0, &torn, Some(&idx), &Limits::default());
        assert_eq!(out.entries.len(), 1);
        assert_eq!(
            out.cut,
            Some(CutReason::Unindexed {
                position: 32,
                offset: 1
            })
        );
        // The same batch intact is cut too: its entry was never durable.
        let out = scan_segment(0, &wal, Some(&idx), &Limits::default());
        assert_eq!(out.entries.len(), 1);
        // Past the end of a short index it is rebuilt, as for a lost index file.
        let out = scan_segment(0, &wal, Some(&idx[..ENTRY_LEN]), &Limits::default());
        assert_eq!(out.entries.len(), 2);
        assert_eq!(out.entries_rebuilt, 1);
    }

    /// `wal` extended with zeros and an index journal region holding one record of
    /// `entries` from slot `first` (as a round under `always` leaves it).
    fn with_journal(wal: &[u8], first: u32, entries: &[IndexEntry]) -> Vec<u8> {
        let region = index_journal::region_at(8192, 0);
        let mut out = wal.to_vec();
        out.resize((region + index_journal::REGION_BYTES) as usize, 0);
        let mut record = Vec::new();
        index_journal::encode(7, first, entries.iter().copied(), &mut record);
        let at = index_journal::slot_at(region, 7) as usize;
        out[at..at + record.len()].copy_from_slice(&record);
        out
    }

    fn entries_of(idx: &[u8]) -> Vec<IndexEntry> {
        idx.chunks_exact(ENTRY_LEN)
            .map(IndexEntry::decode)
            .collect()
    }

    #[test]
    fn the_journal_vouches_for_batches_whose_entries_never_reached_the_idx() {
        let (wal, idx) = segment(&[(b"one", 1), (b"two", 1), (b"three", 2)], 0);
        let journaled = with_journal(&wal, 1, &entries_of(&idx)[1..]);
        let mut durable = idx[..ENTRY_LEN].to_vec();
        durable.resize(64 * ENTRY_LEN, 0);
        let out = scan_segment(0, &journaled, Some(&durable), &Limits::default());
        assert_eq!(out.entries, entries_of(&idx));
        assert_eq!((out.cut, out.entries_rebuilt), (None, 2));
        assert_eq!(out.wal_len_valid, wal.len() as u64);
        assert_eq!(out.zero_tail_bytes, (journaled.len() - wal.len()) as u64);
        // Without the journal the same files lose the two batches.
        let out = scan_segment(0, &wal, Some(&durable), &Limits::default());
        assert_eq!(out.entries.len(), 1);
    }

    #[test]
    fn a_batch_that_disagrees_with_its_journal_entry_is_cut() {
        let (wal, idx) = segment(&[(b"one", 1), (b"two", 1), (b"three", 2)], 0);
        let mut journaled = with_journal(&wal, 1, &entries_of(&idx)[1..]);
        // The last batch's payload never made it to the disk.
        let last = wal.len() - 5;
        journaled[last..wal.len()].fill(0);
        let mut durable = idx[..ENTRY_LEN].to_vec();
        durable.resize(64 * ENTRY_LEN, 0);
        let out = scan_segment(0, &journaled, Some(&durable), &Limits::default());
        assert_eq!(out.entries, entries_of(&idx)[..2]);
        assert!(matches!(
            out.cut,
            Some(CutReason::Unindexed { offset: 2, .. })
        ));
    }

    #[test]
    fn bytes_that_look_like_a_journal_inside_a_batch_are_walked_as_the_batch() {
        // A sealed segment whose last payload happens to end in a valid journal region.
        let region = with_journal(&[], 0, &[]);
        let (wal, idx) = segment(&[(b"one", 1), (&region, 1)], 0);
        assert!(index_journal::find(&wal).is_some());
        let out = scan_segment(0, &wal, Some(&idx), &Limits::default());
        assert!(out.is_clean(wal.len() as u64));
        assert_eq!(out.entries.len(), 2);
    }

    #[test]
    fn torn_tail_is_cut_and_extra_entries_dropped() {
        let (wal, idx) = segment(&[(b"one", 1), (b"two", 1)], 0);
        let torn = &wal[..wal.len() - 1];
        let out = scan_segment(0, torn, Some(&idx), &Limits::default());
        assert_eq!(out.entries.len(), 1);
        assert_eq!(out.entries_dropped, 1);
        assert_eq!(out.cut, Some(CutReason::TornBatch { position: 32 }));
    }

    #[test]
    fn missing_index_is_rebuilt() {
        let (wal, idx) = segment(&[(b"one", 1), (b"two", 2)], 5);
        let out = scan_segment(5, &wal, None, &Limits::default());
        assert_eq!(out.entries_rebuilt, 2);
        assert_eq!(out.wal_len_valid, wal.len() as u64);
        let rebuilt: Vec<u8> = out
            .entries
            .iter()
            .flat_map(|e| {
                let mut b = [0u8; ENTRY_LEN];
                e.encode(&mut b);
                b
            })
            .collect();
        assert_eq!(rebuilt, idx);
    }

    #[test]
    fn flipped_payload_bit_is_caught_by_crc() {
        let (mut wal, idx) = segment(&[(b"one", 1), (b"two", 1), (b"six", 1)], 0);
        let last = wal.len() - 1;
        wal[last - 33] ^= 0x10; // inside the second batch's payload
        let out = scan_segment(0, &wal, Some(&idx), &Limits::default());
        assert_eq!(out.entries.len(), 1);
        assert!(matches!(
            out.cut,
            Some(CutReason::IndexMismatch { offset: 1, .. })
        ));
    }

    #[test]
    fn offsets_past_the_largest_are_cut() {
        // Found by fuzzing: `next_offset` overflowed (a panic in debug builds, a wrap to small
        // offsets in release ones).
        let base = u64::MAX - 1;
        let (wal, idx) = segment(&[(b"one", 1), (b"two", 5)], base);
        for idx in [None, Some(&idx[..])] {
            let out = scan_segment(base, &wal, idx, &Limits::default());
            assert_eq!(out.entries.len(), 1);
            assert_eq!(out.next_offset, u64::MAX);
            assert_eq!(
                out.cut,
                Some(CutReason::OffsetOverflow {
                    position: 32,
                    offset: u64::MAX
                })
            );
        }
    }

    #[test]
    fn offset_gap_is_cut() {
        let (wal, idx) = segment(&[(b"one", 1)], 7);
        let out = scan_segment(8, &wal, Some(&idx), &Limits::default());
        assert!(matches!(
            out.cut,
            Some(CutReason::OffsetGap {
                expected: 8,
                found: 7,
                ..
            })
        ));
        // A jump forward is a gap unless an exact index entry vouches for it.
        let out = scan_segment(3, &wal, None, &Limits::default());
        assert!(matches!(
            out.cut,
            Some(CutReason::OffsetGap { expected: 3, .. })
        ));
        let out = scan_segment(3, &wal, Some(&idx), &Limits::default());
        assert_eq!(out.cut, None);
    }
}
