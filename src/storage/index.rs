//! The segment index: fixed-size 32-byte entries, one per batch, in a file mapped with
//! memmap2.
//!
//! Entry layout (little-endian, the native order of x86-64 and aarch64):
//!
//! | bytes  | field          | meaning                                                    |
//! |--------|----------------|------------------------------------------------------------|
//! | 0..8   | offset         | offset of the batch's first record                         |
//! | 8..16  | max_timestamp  | largest batch timestamp in the segment up to this batch    |
//! | 16..20 | position       | byte position of the batch in the `.wal` file              |
//! | 20..24 | length         | batch length in bytes (header + key + payload); never 0. The top bit is the batch's format: 1 when the payload is a Kafka RecordBatch ([`BatchFormat`]) |
//! | 24..28 | records        | offsets the batch takes (record count, 0 read as 1). The top bit marks a *control* batch (Raft's own entries, [`CONTROL_BIT`]): one offset, never served |
//! | 28..32 | crc            | CRC32C of the whole batch as stored                        |
//!
//! `max_timestamp` is a running maximum so that it is monotonic and binary-searchable even
//! though producers set timestamps freely; "first batch at or after T" is the first entry
//! whose running maximum reaches T. A slot whose `length` is 0 is empty: the active index
//! file is extended sparsely to its capacity, so unused slots read as zeros.

use std::fs::File;

use memmap2::{Advice, Mmap, MmapMut};

pub use crate::protocol::record::BatchFormat;

/// The bit of the stored `length` field that marks a Kafka-format batch.
const KAFKA_FORMAT_BIT: u32 = 1 << 31;

/// The bit of the stored `records` field (and of a stored batch header's record count)
/// that marks a control batch: an entry of Raft's own (an empty entry at an election, a
/// configuration change), which takes one offset and is never served to a reader
/// (`docs/REPLICATION.md`). Staging refuses a client's batch with this bit set in its
/// record count, so it is never set for one.
pub const CONTROL_BIT: u32 = 1 << 31;

/// The record count a control batch's header carries: one offset, and the control bit.
pub const CONTROL_RECORD_COUNT: u32 = CONTROL_BIT | 1;

/// The `records` field of the entry of a stored batch whose header carries
/// `record_count`: the offsets it takes (0 read as 1), or [`CONTROL_RECORD_COUNT`] as it is
/// for a control batch. `None` for a header no broker stores (the control bit with a count
/// other than 1).
pub fn stored_records(record_count: u32) -> Option<u32> {
    match record_count {
        CONTROL_RECORD_COUNT => Some(CONTROL_RECORD_COUNT),
        count if count & CONTROL_BIT != 0 => None,
        count => Some(count.max(1)),
    }
}

/// Bytes per index entry.
pub const ENTRY_LEN: usize = 32;

/// One index entry. See the module docs for the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexEntry {
    pub offset: u64,
    pub max_timestamp_ns: u64,
    pub position: u32,
    pub length: u32,
    /// As stored: the offsets the batch takes, or [`CONTROL_RECORD_COUNT`] for a control
    /// batch. Kept raw so that decoding an entry costs what it did before control batches
    /// (read plans decode hundreds per call); [`IndexEntry::offsets`] and
    /// [`IndexEntry::is_control`] read it.
    pub records: u32,
    pub crc: u32,
    /// What the payload is; stored in the top bit of `length`.
    pub format: BatchFormat,
}

impl IndexEntry {
    /// Offset after the last record of this batch.
    pub fn next_offset(&self) -> u64 {
        self.offset + u64::from(self.offsets())
    }

    /// Offsets the batch takes (1 for a control batch).
    pub fn offsets(&self) -> u32 {
        self.records & !CONTROL_BIT
    }

    /// A control batch (see [`CONTROL_BIT`]), never served to readers.
    pub fn is_control(&self) -> bool {
        self.records & CONTROL_BIT != 0
    }

    /// Byte position after this batch in the `.wal`.
    pub fn end_position(&self) -> u64 {
        u64::from(self.position) + u64::from(self.length)
    }

    pub fn encode(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.offset.to_le_bytes());
        out[8..16].copy_from_slice(&self.max_timestamp_ns.to_le_bytes());
        out[16..20].copy_from_slice(&self.position.to_le_bytes());
        debug_assert!(
            self.length < KAFKA_FORMAT_BIT,
            "limits keep a batch under 2 GiB"
        );
        let length = match self.format {
            BatchFormat::Native => self.length,
            BatchFormat::Kafka => self.length | KAFKA_FORMAT_BIT,
        };
        out[20..24].copy_from_slice(&length.to_le_bytes());
        out[24..28].copy_from_slice(&self.records.to_le_bytes());
        out[28..32].copy_from_slice(&self.crc.to_le_bytes());
    }

    pub fn decode(buf: &[u8]) -> IndexEntry {
        let u64_at = |at: usize| u64::from_le_bytes(buf[at..at + 8].try_into().expect("8"));
        let u32_at = |at: usize| u32::from_le_bytes(buf[at..at + 4].try_into().expect("4"));
        IndexEntry {
            offset: u64_at(0),
            max_timestamp_ns: u64_at(8),
            position: u32_at(16),
            length: u32_at(20) & !KAFKA_FORMAT_BIT,
            records: u32_at(24),
            crc: u32_at(28),
            format: if u32_at(20) & KAFKA_FORMAT_BIT != 0 {
                BatchFormat::Kafka
            } else {
                BatchFormat::Native
            },
        }
    }

    /// An empty (never written) slot.
    pub fn is_empty_slot(buf: &[u8]) -> bool {
        buf[20..24] == [0, 0, 0, 0]
    }
}

enum Map {
    /// Nothing mapped (zero-length file).
    None,
    Writable(MmapMut),
    ReadOnly(Mmap),
}

/// The mapped index of one segment: `len` valid entries out of `capacity` slots.
pub struct Index {
    map: Map,
    len: usize,
    capacity: usize,
    /// Slots in pages already faulted in for writing (see [`Index::reserve`]).
    reserved: usize,
}

/// Memory pages are at least this big on every platform pagurus runs on; reserving in steps
/// of it keeps `madvise` calls to one per 128 entries.
const RESERVE_STEP_BYTES: usize = 4096;

impl Index {
    /// Maps `file` (already sized to `capacity * ENTRY_LEN` bytes) for appending, with the
    /// first `len` entries already valid.
    pub fn writable(file: &File, len: usize) -> std::io::Result<Index> {
        let file_len = usize::try_from(file.metadata()?.len()).unwrap_or(usize::MAX);
        let capacity = file_len / ENTRY_LEN;
        assert!(len <= capacity, "index len {len} over capacity {capacity}");
        let map = if capacity == 0 {
            Map::None
        } else {
            // SAFETY: the file belongs to this partition's owner core, which is the only
            // writer; nothing else truncates it while it is mapped.
            Map::Writable(unsafe { MmapMut::map_mut(file)? })
        };
        Ok(Index {
            map,
            len,
            capacity,
            reserved: 0,
        })
    }

    /// Maps a sealed index read-only; every slot is a valid entry.
    pub fn sealed(file: &File) -> std::io::Result<Index> {
        let file_len = usize::try_from(file.metadata()?.len()).unwrap_or(usize::MAX);
        let len = file_len / ENTRY_LEN;
        let map = if len == 0 {
            Map::None
        } else {
            // SAFETY: sealed index files are immutable; see `writable`.
            Map::ReadOnly(unsafe { Mmap::map(file)? })
        };
        Ok(Index {
            map,
            len,
            capacity: len,
            reserved: 0,
        })
    }

    /// An index with nothing mapped, held while the file under a mapping is being cut.
    pub fn empty() -> Index {
        Index {
            map: Map::None,
            len: 0,
            capacity: 0,
            reserved: 0,
        }
    }

    fn bytes(&self) -> &[u8] {
        match &self.map {
            Map::None => &[],
            Map::Writable(m) => &m[..],
            Map::ReadOnly(m) => &m[..],
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn is_full(&self) -> bool {
        self.len == self.capacity
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn get(&self, i: usize) -> IndexEntry {
        assert!(i < self.len, "index entry {i} out of {}", self.len);
        IndexEntry::decode(&self.bytes()[i * ENTRY_LEN..(i + 1) * ENTRY_LEN])
    }

    pub fn last(&self) -> Option<IndexEntry> {
        self.len.checked_sub(1).map(|i| self.get(i))
    }

    /// Makes sure the next `extra` slots can be written through the mapping. The active index
    /// is sparse: the first write into a page of a hole makes the file system allocate it, and
    /// on a full file system that write would kill the process with SIGBUS. So the pages are
    /// faulted in for writing here first (`MADV_POPULATE_WRITE`, Linux 5.14), which reports a
    /// failed allocation as an error instead: `StorageFull`, and nothing is staged.
    pub fn reserve(&mut self, extra: usize) -> std::io::Result<()> {
        let needed = self.len + extra;
        if needed <= self.reserved {
            return Ok(());
        }
        let Map::Writable(map) = &self.map else {
            return Ok(()); // `push` refuses a sealed index anyway
        };
        let start = (self.reserved * ENTRY_LEN) / RESERVE_STEP_BYTES * RESERVE_STEP_BYTES;
        let end = (needed * ENTRY_LEN)
            .next_multiple_of(RESERVE_STEP_BYTES)
            .min(map.len());
        match map.advise_range(Advice::PopulateWrite, start, end - start) {
            Ok(()) => {}
            // EFAULT: the fault would have raised SIGBUS, i.e. the page could not be
            // allocated (ENOSPC, EDQUOT; EIO is possible but far rarer).
            Err(e) if e.raw_os_error() == Some(nix::libc::EFAULT) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::StorageFull,
                    "no space for the next index page",
                ));
            }
            // EINVAL: a kernel older than 5.14; writes fault pages in as before.
            Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => {}
            Err(e) => return Err(e),
        }
        self.reserved = (end / ENTRY_LEN).min(self.capacity);
        Ok(())
    }

    /// Keeps `ahead` slots past the entries faulted in for writing, topping up once fewer
    /// than half of them are left. True when it faulted in new pages: they are dirty zeros
    /// that an fdatasync will give blocks to (see `storage::log::prealloc`).
    pub fn reserve_ahead(&mut self, ahead: usize) -> std::io::Result<bool> {
        let ahead = ahead.min(self.capacity.saturating_sub(self.len));
        if self.reserved >= self.len + ahead / 2 || self.reserved >= self.capacity {
            return Ok(false);
        }
        let before = self.reserved;
        self.reserve(ahead)?;
        Ok(self.reserved > before)
    }

    /// Appends an entry. The caller checked `!is_full()` and reserved the slot.
    pub fn push(&mut self, entry: &IndexEntry) {
        assert!(entry.length > 0, "an entry's length is never 0");
        let at = self.len * ENTRY_LEN;
        match &mut self.map {
            Map::Writable(m) => entry.encode(&mut m[at..at + ENTRY_LEN]),
            _ => panic!("push on a sealed or empty index"),
        }
        self.len += 1;
        debug_assert_eq!(self.get(self.len - 1), *entry);
    }

    /// Forgets entries from `len` on and zeroes their slots (after a failed write).
    pub fn truncate(&mut self, len: usize) {
        assert!(len <= self.len);
        // Zeroing writes only into pages that held entries, which stay reserved.
        if let Map::Writable(m) = &mut self.map {
            m[len * ENTRY_LEN..self.len * ENTRY_LEN].fill(0);
        }
        self.len = len;
    }

    /// Index of the entry whose batch holds `offset`, among the first `limit` entries.
    pub fn find_offset(&self, offset: u64, limit: usize) -> Option<usize> {
        let limit = limit.min(self.len);
        // First entry whose batch ends after `offset`; it holds `offset` unless `offset` falls
        // in a gap left by compaction, in which case it is the next batch after the gap.
        let i = partition_point(limit, |i| self.get(i).next_offset() <= offset);
        (i < limit).then_some(i)
    }

    /// Number of entries whose batch starts below `offset` (readers stop at the high
    /// watermark).
    pub fn entries_below(&self, offset: u64) -> usize {
        partition_point(self.len, |i| self.get(i).offset < offset)
    }

    /// Index of the first entry whose running maximum timestamp is at or after `ts`.
    pub fn find_timestamp(&self, timestamp_ns: u64, limit: usize) -> Option<usize> {
        let limit = limit.min(self.len);
        let i = partition_point(limit, |i| self.get(i).max_timestamp_ns < timestamp_ns);
        (i < limit).then_some(i)
    }
}

/// First `i` in `0..n` for which `pred(i)` is false, given that `pred` is true on a prefix.
fn partition_point(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_round_trip() {
        let e = IndexEntry {
            offset: 1 << 40,
            max_timestamp_ns: 99,
            position: 7,
            length: 29,
            records: 3,
            crc: 0xdead_beef,
            format: BatchFormat::Kafka,
        };
        let mut buf = [0u8; ENTRY_LEN];
        e.encode(&mut buf);
        assert_eq!(IndexEntry::decode(&buf), e);
        assert!(!IndexEntry::is_empty_slot(&buf));
        assert!(IndexEntry::is_empty_slot(&[0u8; ENTRY_LEN]));
        // A control entry: one offset, the flag in the top bit of `records`.
        let control = IndexEntry {
            records: CONTROL_RECORD_COUNT,
            format: BatchFormat::Native,
            ..e
        };
        control.encode(&mut buf);
        assert_eq!(buf[24..28], CONTROL_RECORD_COUNT.to_le_bytes());
        assert_eq!(IndexEntry::decode(&buf), control);
        assert!(control.is_control() && !e.is_control());
        assert_eq!(
            (control.offsets(), control.next_offset()),
            (1, e.offset + 1)
        );
        assert_eq!(
            stored_records(CONTROL_RECORD_COUNT),
            Some(CONTROL_RECORD_COUNT)
        );
        assert_eq!(stored_records(0), Some(1));
        assert_eq!(stored_records(CONTROL_BIT | 2), None);
    }

    #[test]
    fn lookups_agree_with_linear_scan() {
        let dir = tempfile::tempdir().unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(dir.path().join("i.idx"))
            .unwrap();
        file.set_len(64 * ENTRY_LEN as u64).unwrap();
        let mut index = Index::writable(&file, 0).unwrap();
        let (mut offset, mut position, mut max_ts) = (100u64, 0u32, 0u64);
        let timestamps = [5u64, 3, 9, 9, 2, 20, 11, 30];
        for (i, &ts) in timestamps.iter().enumerate() {
            max_ts = max_ts.max(ts);
            let records = (i as u32 % 3) + 1;
            index.push(&IndexEntry {
                offset,
                max_timestamp_ns: max_ts,
                position,
                length: 40,
                records,
                crc: 0,
                format: BatchFormat::Native,
            });
            offset += u64::from(records);
            position += 40;
        }
        for probe in 0..offset + 3 {
            let linear = (0..index.len()).find(|&i| index.get(i).next_offset() > probe);
            assert_eq!(
                index.find_offset(probe, index.len()),
                linear,
                "offset {probe}"
            );
        }
        for ts in 0..35 {
            let linear = (0..index.len()).find(|&i| index.get(i).max_timestamp_ns >= ts);
            assert_eq!(index.find_timestamp(ts, index.len()), linear, "ts {ts}");
        }
        // A limit hides entries past it (readers stop at the high watermark).
        assert_eq!(index.find_offset(101, 1), None);
        assert_eq!(index.find_offset(100, 1), Some(0));
    }
}
