//! The index journal: under `fsync = always`, copies of the index entries that are not yet
//! durable in the `.idx`, kept in the active `.wal` itself, so that one `fdatasync` of the
//! `.wal` makes a commit round durable: its batches, and the CRCs recovery needs to tell
//! them from torn ones.
//!
//! # Why
//!
//! A round used to fdatasync the `.wal` and the `.idx`. The `.idx` must be durable because
//! recovery checks every batch after a power cut against the CRC in its entry: a torn batch
//! in pre-extended space reads as a valid header over zeros (`storage::recovery`). Two
//! fdatasyncs are two device flushes, which the block layer runs one after the other: on the
//! machines measured, a round of two took about twice as long as one (docs/LATENCY.md).
//! POSIX promises nothing about one file's data after an fsync of another, so the entries
//! cannot simply ride on the `.wal`'s flush; a copy of them inside the `.wal` can.
//!
//! # Layout
//!
//! The active `.wal` is extended (sparsely, when it becomes active) to hold a *region* of
//! [`SLOTS`] slots of [`SLOT_BYTES`] at a position `J` right past the segment's size limit
//! ([`region_at`]); the region is the file's last bytes. A round that writes batches then writes
//! one *record* into the next slot (alternating) and fdatasyncs the `.wal` alone. A record
//! holds the entries of every batch written since the last entry known durable in the
//! `.idx`, so the newest whole record covers everything acknowledged that the `.idx` may
//! not. Alternating matters: a record being written, torn by a power cut, never damages the
//! one before it, which covers every acknowledged batch. (Only one journaled round is in
//! flight at a time: `storage::log::rounds`.)
//!
//! Record layout (little-endian, like the index):
//!
//! | bytes | field | meaning |
//! |---|---|---|
//! | 0..8 | magic | `PGRSIDXJ` |
//! | 8..16 | sequence | one more than the record before; the newest whole record wins |
//! | 16..20 | first | index slot of the first entry |
//! | 20..24 | count | entries that follow, at most [`ENTRIES_MAX`] |
//! | 24..28 | crc | CRC32C of bytes 0..24 and the entries |
//! | 28..32 | reserved | zero |
//! | 32.. | entries | `count` index entries, 32 bytes each (`storage::index`) |
//!
//! # What recovery does with it
//!
//! The scanner ([`find`]) takes the newest record that is whole, and uses its entries for
//! the slots the `.idx` lacks (empty or past its end). An entry from the journal is trusted
//! exactly as one from the `.idx`: the batch must match it, CRC included, or the walk stops.
//! So the journal can only vouch for batches whose bytes are exactly what was written. The
//! region is the end of the log only if the walk reaches it through zeros; a `.wal` whose
//! last bytes merely look like records (a sealed segment's payload) is walked as batches.
//! Repairs write the rebuilt entries into the `.idx` and sync it before the `.wal` is cut
//! (which removes the region), and a roll or close syncs the `.idx` before trimming it off.

use std::cell::{Cell, RefCell};

use crate::storage::index::{ENTRY_LEN, IndexEntry};

/// Bytes of one slot.
pub const SLOT_BYTES: u64 = 16 * 1024;
/// Slots in the region, written alternately.
pub const SLOTS: u64 = 2;
/// Bytes of the region at the end of an active `.wal`.
pub const REGION_BYTES: u64 = SLOT_BYTES * SLOTS;
const MAGIC: [u8; 8] = *b"PGRSIDXJ";
const HEADER_LEN: usize = 32;
/// Entries one record holds at most. A round that would need more syncs the `.idx` too.
pub const ENTRIES_MAX: usize = (SLOT_BYTES as usize - HEADER_LEN) / ENTRY_LEN;

/// Where the region of an active segment goes: right past the segment's size limit (or
/// what it already holds, if that is more), on a slot boundary. Batches end below it, but
/// for one larger than the limit in an empty segment (a segment takes any one batch): that
/// round writes over the region and syncs the `.idx` too, and the segment rolls after it.
pub fn region_at(segment_bytes: u64, size_bytes: u64) -> u64 {
    segment_bytes.max(size_bytes).next_multiple_of(SLOT_BYTES)
}

/// Where the slot for record `sequence` starts.
pub fn slot_at(region_at: u64, sequence: u64) -> u64 {
    region_at + (sequence % SLOTS) * SLOT_BYTES
}

/// Encodes a record of `entries` (slots `first..`) into `out` (cleared first).
pub fn encode(
    sequence: u64,
    first: u32,
    entries: impl ExactSizeIterator<Item = IndexEntry>,
    out: &mut Vec<u8>,
) {
    let count = entries.len();
    assert!(count <= ENTRIES_MAX, "a record fits its slot");
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&sequence.to_le_bytes());
    out.extend_from_slice(&first.to_le_bytes());
    out.extend_from_slice(&(count as u32).to_le_bytes());
    out.extend_from_slice(&[0; 8]); // crc, reserved
    for entry in entries {
        let at = out.len();
        out.resize(at + ENTRY_LEN, 0);
        entry.encode(&mut out[at..]);
    }
    assert_eq!(
        out.len(),
        HEADER_LEN + count * ENTRY_LEN,
        "as many entries as said"
    );
    let crc = record_crc(out);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    debug_assert!(out.len() as u64 <= SLOT_BYTES);
    debug_assert_eq!(
        decode(out).map(|r| (r.sequence, r.entries.len())),
        Some((sequence, count)),
        "a record reads back as written"
    );
}

fn record_crc(record: &[u8]) -> u32 {
    let crc = crc32c::crc32c(&record[..24]);
    crc32c::crc32c_append(crc, &record[HEADER_LEN..])
}

/// One whole record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub sequence: u64,
    /// Index slot of `entries[0]`.
    pub first: u32,
    pub entries: Vec<IndexEntry>,
}

impl Record {
    /// The entry this record holds for index slot `slot`, if any.
    pub fn entry(&self, slot: usize) -> Option<IndexEntry> {
        let i = slot.checked_sub(self.first as usize)?;
        self.entries.get(i).copied()
    }
}

/// Reads the record at the start of `slot`, if one is there whole.
pub fn decode(slot: &[u8]) -> Option<Record> {
    if slot.len() < HEADER_LEN || slot[..8] != MAGIC {
        return None;
    }
    let u32_at = |at: usize| u32::from_le_bytes(slot[at..at + 4].try_into().expect("4"));
    let count = u32_at(20) as usize;
    if count > ENTRIES_MAX {
        return None;
    }
    let end = HEADER_LEN + count * ENTRY_LEN;
    if slot.len() < end || record_crc(&slot[..end]) != u32_at(24) {
        return None;
    }
    Some(Record {
        sequence: u64::from_le_bytes(slot[8..16].try_into().expect("8")),
        first: u32_at(16),
        entries: slot[HEADER_LEN..end]
            .chunks_exact(ENTRY_LEN)
            .map(IndexEntry::decode)
            .collect(),
    })
}

/// The journal a `.wal`'s last [`REGION_BYTES`] may hold: where the region starts, and its
/// newest whole record. `None` when no slot holds a whole record.
pub fn find(wal: &[u8]) -> Option<(u64, Record)> {
    let region = wal.len().checked_sub(REGION_BYTES as usize)?;
    let newest = (0..SLOTS as usize)
        .filter_map(|i| {
            let at = region + i * SLOT_BYTES as usize;
            decode(&wal[at..at + SLOT_BYTES as usize])
        })
        .max_by_key(|r| r.sequence)?;
    Some((region as u64, newest))
}

/// The journal of the active segment's writer.
#[derive(Debug)]
pub struct Journal {
    /// Where the region starts; the `.wal` is `region_at + REGION_BYTES` long while the
    /// segment is active.
    pub region_at: u64,
    /// The next record's sequence (its slot alternates with it).
    pub sequence: Cell<u64>,
    /// Index entries, from slot 0, that an fdatasync of the `.idx` made durable: a record
    /// holds the entries from here on.
    pub idx_synced: Cell<usize>,
    /// The record being encoded, reused.
    pub buf: RefCell<Vec<u8>>,
}

impl Journal {
    pub fn new(region_at: u64) -> Journal {
        Journal {
            region_at,
            sequence: Cell::new(0),
            idx_synced: Cell::new(0),
            buf: RefCell::new(Vec::new()),
        }
    }

    /// An fdatasync of the `.idx` issued when it held `entries` entries succeeded.
    pub fn idx_synced_to(&self, entries: usize) {
        self.idx_synced.set(self.idx_synced.get().max(entries));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: u64) -> IndexEntry {
        IndexEntry {
            offset: 100 + i,
            max_timestamp_ns: 7,
            position: (i * 50) as u32,
            length: 50,
            records: 1,
            crc: 0xdead_0000 + i as u32,
            format: Default::default(),
        }
    }

    fn region_with(records: &[(u64, &[IndexEntry])]) -> Vec<u8> {
        let mut wal = vec![0u8; 4096 + REGION_BYTES as usize];
        let mut buf = Vec::new();
        for &(sequence, entries) in records {
            encode(sequence, 3, entries.iter().copied(), &mut buf);
            let at = slot_at(4096, sequence) as usize;
            wal[at..at + buf.len()].copy_from_slice(&buf);
        }
        wal
    }

    #[test]
    fn the_newest_whole_record_is_found() {
        let old: Vec<_> = (0..2).map(entry).collect();
        let new: Vec<_> = (0..3).map(entry).collect();
        let wal = region_with(&[(4, &old), (5, &new)]);
        let (at, record) = find(&wal).expect("a journal");
        assert_eq!(at, 4096);
        assert_eq!(record.sequence, 5);
        assert_eq!(record.entry(5), Some(entry(2)));
        assert_eq!(record.entry(2), None, "before its first slot");
        assert_eq!(record.entry(6), None, "past its entries");
    }

    #[test]
    fn a_torn_record_leaves_the_one_before() {
        let old: Vec<_> = (0..2).map(entry).collect();
        let new: Vec<_> = (0..3).map(entry).collect();
        let mut wal = region_with(&[(4, &old), (5, &new)]);
        // A byte of the newest record's last entry never made it.
        let at = slot_at(4096, 5) as usize + HEADER_LEN + 2 * ENTRY_LEN + 9;
        wal[at] ^= 0xff;
        let (_, record) = find(&wal).expect("a journal");
        assert_eq!(record.sequence, 4);
        assert_eq!(record.entries, old);
    }

    #[test]
    fn zeros_hold_no_journal() {
        assert_eq!(find(&vec![0u8; 3 * REGION_BYTES as usize]), None);
        assert_eq!(find(&[0u8; 100]), None, "shorter than a region");
    }

    #[test]
    fn a_record_claiming_more_than_a_slot_is_refused() {
        let mut buf = Vec::new();
        encode(1, 0, [entry(0)].into_iter(), &mut buf);
        buf[20..24].copy_from_slice(&(ENTRIES_MAX as u32 + 1).to_le_bytes());
        assert_eq!(decode(&buf), None);
    }

    #[test]
    fn a_full_record_fits_its_slot() {
        let entries: Vec<_> = (0..ENTRIES_MAX as u64).map(entry).collect();
        let mut buf = Vec::new();
        encode(9, 0, entries.iter().copied(), &mut buf);
        assert!(buf.len() as u64 <= SLOT_BYTES);
        assert_eq!(decode(&buf).expect("whole").entries.len(), ENTRIES_MAX);
    }

    #[test]
    fn the_region_lies_past_the_segment_limit() {
        assert_eq!(region_at(1 << 20, 0), 1 << 20);
        assert_eq!(
            region_at(1 << 20, 3 << 20),
            3 << 20,
            "a segment over its limit"
        );
        assert_eq!(region_at(1000, 0), SLOT_BYTES);
    }
}
