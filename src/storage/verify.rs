//! Serving only batches that check out.
//!
//! Fetches are zero-copy: the bytes go from the page cache to the socket with sendfile, so no
//! read path looks at them. Bytes this process wrote are right by construction (their CRC was
//! computed from them at produce time). Bytes that came from disk and that no recovery scan
//! checked are not: a segment trusted at open (sealed before the last open, or every segment
//! after a clean shutdown) may have rotted since. So the log keeps, per such segment, the WAL
//! byte ranges not yet checked in this process; a read plan that touches them is checked
//! first, batch by batch, against the index entries (CRC32C of the bytes, and the header's
//! offset, length and record count), on glommio's blocking thread through a mapping (which
//! also brings the range into the page cache for the sendfile that follows, and copies
//! nothing). Each byte is checked at most once per process.
//!
//! A batch that fails is **never served and never dropped**. Its offsets are remembered as
//! corrupt: a read that reaches it stops just before it, and a read that starts in it fails
//! with `StorageError::Corrupt` (`CorruptData` to clients, with the batch's offsets), so a
//! consumer sees exactly where the damage is and may skip it deliberately. Everything before
//! and after it is served, and appends go on. The files are left as they are for an
//! operator. Found batches are logged and counted.
//!
//! Closed segments whose seal was recorded (below `sealed` in `recovery-point`, see
//! `storage::log::seal`) are complete: their fdatasyncs were done before the record. So
//! such a segment whose index chains (see `open::looks_sealed`) is never cut by recovery,
//! whatever a scan finds in it; recovery checks it with [`check_segment`] instead, and marks
//! what fails as corrupt in the same way.

use std::fs::File;
use std::ops::Range;
use std::rc::Rc;

use crate::protocol::record::{self, BatchHeader, HEADER_LEN};
use crate::storage::index::IndexEntry;

/// How a stored batch disagrees with its index entry.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Mismatch {
    #[error("the segment file ends before the batch does")]
    Short,
    #[error("bad header: {0}")]
    Header(String),
    #[error("header says offset {header}, index says {index}")]
    Offset { header: u64, index: u64 },
    #[error("header says {header} bytes, index says {index}")]
    Length { header: u64, index: u64 },
    #[error("header says {header} records, index says {index}")]
    Records { header: u64, index: u64 },
    #[error("crc32c of the bytes is {actual:#010x}, index says {expected:#010x}")]
    Crc { expected: u32, actual: u32 },
    #[error("index max timestamp {index} but the running maximum is {running}")]
    Timestamp { index: u64, running: u64 },
}

/// Checks one batch's bytes against its index entry.
pub fn check_batch(bytes: &[u8], entry: &IndexEntry) -> Result<BatchHeader, Mismatch> {
    if bytes.len() < entry.length as usize || bytes.len() < HEADER_LEN {
        return Err(Mismatch::Short);
    }
    let unlimited = crate::limits::Limits {
        max_key_bytes: u64::MAX,
        max_payload_bytes: u64::MAX,
    };
    let header =
        BatchHeader::decode(bytes, &unlimited).map_err(|e| Mismatch::Header(e.to_string()))?;
    if header.offset != entry.offset {
        return Err(Mismatch::Offset {
            header: header.offset,
            index: entry.offset,
        });
    }
    if header.batch_len() as u64 != u64::from(entry.length) {
        return Err(Mismatch::Length {
            header: header.batch_len() as u64,
            index: entry.length.into(),
        });
    }
    // The control bit is part of the count on both sides (`index::CONTROL_BIT`).
    if crate::storage::index::stored_records(header.record_count) != Some(entry.records) {
        return Err(Mismatch::Records {
            header: header.record_count.into(),
            index: entry.records.into(),
        });
    }
    let actual = record::batch_crc(&bytes[..entry.length as usize]);
    if actual != entry.crc {
        return Err(Mismatch::Crc {
            expected: entry.crc,
            actual,
        });
    }
    Ok(header)
}

/// Checks every batch of a closed segment (`wal`: its whole file) against its entries, the
/// running maximum timestamp included (a `Timestamp` mismatch leaves the bytes intact; the
/// caller decides). Returns the entries that fail, with why.
pub fn check_segment(wal: &[u8], entries: &[IndexEntry]) -> Vec<(IndexEntry, Mismatch)> {
    let mut bad = Vec::new();
    let mut running = 0u64;
    for entry in entries {
        let start = (entry.position as usize).min(wal.len());
        match check_batch(&wal[start..], entry) {
            Ok(header) => {
                running = running.max(header.timestamp_ns);
                if entry.max_timestamp_ns != running {
                    bad.push((
                        *entry,
                        Mismatch::Timestamp {
                            index: entry.max_timestamp_ns,
                            running,
                        },
                    ));
                }
            }
            Err(mismatch) => {
                // Go on with the index's own maximum: the next batches are judged alone.
                running = running.max(entry.max_timestamp_ns);
                bad.push((*entry, mismatch));
            }
        }
    }
    bad
}

/// What a log knows about the integrity of bytes it did not write itself.
#[derive(Debug, Default)]
pub struct Checks {
    /// Segment base offset -> WAL byte ranges not yet checked in this process (sorted,
    /// disjoint). A segment absent here needs no check.
    unchecked: Vec<(u64, Vec<Range<u64>>)>,
    /// Offset ranges of batches found damaged, sorted by start.
    corrupt: Vec<Range<u64>>,
}

impl Checks {
    /// Bytes `0..size_bytes` of segment `base` came from disk unchecked.
    pub fn trust(&mut self, base: u64, size_bytes: u64) {
        if size_bytes > 0 {
            let whole: Range<u64> = 0..size_bytes;
            self.unchecked.push((base, Vec::from([whole])));
            self.unchecked.sort_unstable_by_key(|(b, _)| *b);
        }
    }

    /// Remembers a damaged batch; false if it was known already.
    pub fn mark_corrupt(&mut self, entry: &IndexEntry) -> bool {
        let range = entry.offset..entry.next_offset();
        let at = self.corrupt.partition_point(|r| r.start < range.start);
        if self.corrupt.get(at).is_some_and(|r| r.start == range.start) {
            return false;
        }
        self.corrupt.insert(at, range);
        true
    }

    /// Damaged batches known, as offset ranges.
    pub fn corrupt(&self) -> &[Range<u64>] {
        &self.corrupt
    }

    /// The first damaged batch that overlaps `offsets`, if any.
    pub fn first_corrupt_in(&self, offsets: Range<u64>) -> Option<Range<u64>> {
        let at = self.corrupt.partition_point(|r| r.end <= offsets.start);
        self.corrupt
            .get(at)
            .filter(|r| r.start < offsets.end)
            .cloned()
    }

    /// Indexes (into `batches`) of the batches of segment `base` that touch unchecked bytes.
    pub fn unchecked_batches(&self, base: u64, batches: &[IndexEntry]) -> Vec<usize> {
        let Some((_, ranges)) = self.unchecked.iter().find(|(b, _)| *b == base) else {
            return Vec::new();
        };
        (0..batches.len())
            .filter(|&i| {
                let (start, end) = (u64::from(batches[i].position), batches[i].end_position());
                ranges.iter().any(|r| r.start < end && start < r.end)
            })
            .collect()
    }

    /// Segment `base` was replaced by one this process wrote and read back (compaction):
    /// nothing in it is unchecked.
    pub fn replaced(&mut self, base: u64) {
        self.unchecked.retain(|(b, _)| *b != base);
    }

    /// Bytes `range` of segment `base` have been checked.
    pub fn checked(&mut self, base: u64, range: Range<u64>) {
        let Some(at) = self.unchecked.iter().position(|(b, _)| *b == base) else {
            return;
        };
        let ranges = &mut self.unchecked[at].1;
        let mut left = Vec::with_capacity(ranges.len() + 1);
        for r in ranges.drain(..) {
            if r.end <= range.start || range.end <= r.start {
                left.push(r);
                continue;
            }
            if r.start < range.start {
                left.push(r.start..range.start);
            }
            if range.end < r.end {
                left.push(range.end..r.end);
            }
        }
        if left.is_empty() {
            self.unchecked.remove(at);
        } else {
            self.unchecked[at].1 = left;
        }
    }
}

/// Checks the given batches (in file order) of a segment file on glommio's blocking thread.
/// The range is mapped and populated with `MADV_POPULATE_READ` first, which reports a read
/// error as an error (a plain access would raise SIGBUS) and leaves the pages in the page
/// cache for the sendfile that follows; no byte is copied to user space. One verdict per
/// batch; a read error is not a verdict (the disk may answer next time).
pub async fn check_on_blocking_thread(
    file: &Rc<File>,
    batches: Vec<IndexEntry>,
) -> std::io::Result<Vec<Result<(), Mismatch>>> {
    let (Some(first), Some(last)) = (batches.first(), batches.last()) else {
        return Ok(Vec::new());
    };
    let start = u64::from(first.position);
    let file_len = file.metadata()?.len();
    let end = last.end_position().min(file_len).max(start);
    // A descriptor of its own for the blocking thread; it closes when the job ends.
    let file = file.try_clone()?;
    glommio::executor()
        .spawn_blocking(move || {
            let len = usize::try_from(end - start).expect("a plan fits memory");
            let map = if len == 0 {
                None
            } else {
                // SAFETY: segment bytes below the high watermark are never truncated or
                // rewritten in place while the broker runs; the length is within the file.
                let map = unsafe {
                    memmap2::MmapOptions::new()
                        .offset(start)
                        .len(len)
                        .map(&file)?
                };
                match map.advise(memmap2::Advice::PopulateRead) {
                    Ok(()) => {}
                    // A kernel older than 5.14: read through the mapping.
                    Err(e) if e.raw_os_error() == Some(nix::libc::EINVAL) => {}
                    Err(e) => return Err(e),
                }
                Some(map)
            };
            let bytes: &[u8] = map.as_deref().unwrap_or(&[]);
            Ok(batches
                .iter()
                .map(|entry| {
                    let at = usize::try_from(u64::from(entry.position) - start).expect("in map");
                    check_batch(bytes.get(at..).unwrap_or(&[]), entry).map(|_| ())
                })
                .collect())
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record::{encode_batch, set_offset};

    fn stored(
        offset: u64,
        ts: u64,
        payload: &[u8],
        position: u32,
        max_ts: u64,
    ) -> (Vec<u8>, IndexEntry) {
        let mut batch = encode_batch(ts, b"k", payload, 2);
        set_offset(&mut batch, offset);
        let entry = IndexEntry {
            offset,
            max_timestamp_ns: max_ts,
            position,
            length: batch.len() as u32,
            records: 2,
            crc: record::batch_crc(&batch),
            format: record::BatchFormat::Native,
        };
        (batch, entry)
    }

    #[test]
    fn every_field_and_bit_is_checked() {
        let (batch, entry) = stored(10, 5, b"payload", 0, 5);
        assert!(check_batch(&batch, &entry).is_ok());
        for byte in 0..batch.len() {
            for bit in 0..8 {
                let mut bad = batch.clone();
                bad[byte] ^= 1 << bit;
                assert!(check_batch(&bad, &entry).is_err(), "byte {byte} bit {bit}");
            }
        }
        assert_eq!(check_batch(&batch[..20], &entry), Err(Mismatch::Short));
        let wrong = IndexEntry {
            records: 3,
            ..entry
        };
        assert!(matches!(
            check_batch(&batch, &wrong),
            Err(Mismatch::Records { .. })
        ));
    }

    #[test]
    fn a_segment_check_names_each_bad_batch() {
        let (a, ea) = stored(0, 9, b"one", 0, 9);
        let (b, eb) = stored(2, 3, b"two", a.len() as u32, 9);
        let (c, ec) = stored(4, 1, b"six", (a.len() + b.len()) as u32, 9);
        let mut wal = [a, b, c].concat();
        assert!(check_segment(&wal, &[ea, eb, ec]).is_empty());
        let last = wal.len() - 1;
        wal[last] ^= 1;
        let bad = check_segment(&wal, &[ea, eb, ec]);
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].0, ec);
        let lying = IndexEntry {
            max_timestamp_ns: 10,
            ..eb
        };
        wal[last] ^= 1;
        let bad = check_segment(&wal, &[ea, lying, ec]);
        assert!(matches!(bad[0].1, Mismatch::Timestamp { .. }));
    }

    #[test]
    fn checked_ranges_are_subtracted() {
        let mut checks = Checks::default();
        checks.trust(100, 1000);
        let e = |position: u32, length: u32| IndexEntry {
            offset: 0,
            max_timestamp_ns: 0,
            position,
            length,
            records: 1,
            crc: 0,
            format: record::BatchFormat::Native,
        };
        let batches = [e(0, 100), e(100, 100), e(200, 800)];
        assert_eq!(checks.unchecked_batches(100, &batches), vec![0, 1, 2]);
        assert!(checks.unchecked_batches(7, &batches).is_empty());
        checks.checked(100, 100..200);
        assert_eq!(checks.unchecked_batches(100, &batches), vec![0, 2]);
        checks.checked(100, 0..100);
        checks.checked(100, 200..1000);
        assert!(checks.unchecked_batches(100, &batches).is_empty());
        assert!(
            checks.unchecked.is_empty(),
            "a fully checked segment is forgotten"
        );

        let bad = IndexEntry {
            offset: 7,
            records: 3,
            ..e(0, 29)
        };
        assert!(checks.mark_corrupt(&bad));
        assert!(!checks.mark_corrupt(&bad));
        assert_eq!(checks.first_corrupt_in(0..7), None);
        assert_eq!(checks.first_corrupt_in(0..8), Some(7..10));
        assert_eq!(checks.first_corrupt_in(9..20), Some(7..10));
        assert_eq!(checks.first_corrupt_in(10..20), None);
    }
}
