//! The recovery scanner, fed segments as a crash, a torn write or bit rot could leave them.
//!
//! Two kinds of input: raw `.wal` and `.idx` bytes, and segments built from valid batches
//! and then damaged (bit flips, truncation, lost index slots).
//!
//! Properties of every verdict: kept batches tile the kept prefix of the WAL, each is a valid
//! batch whose entry has the CRC of its bytes; a batch whose index slot holds an entry is
//! kept only if that entry matches it exactly (so never when the CRC disagrees); offsets
//! only grow, and a batch without an entry continues its predecessor exactly; the counts
//! agree with the entries; scanning the verdict again finds nothing to repair; memory is
//! bounded by the WAL's size. For damaged built segments: a batch whose entry survived is
//! never kept with bytes other than the ones written.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagurus::limits::Limits;
use pagurus::protocol::record;
use pagurus::storage::index::{ENTRY_LEN, IndexEntry};
use pagurus::storage::recovery::{ScanOutcome, scan_segment};
use pagurus_fuzz::{measure, small_limits};

/// Bit flips applied to a built segment at most: CRC32C detects every error of up to 3 bits
/// in batches this short, so a flipped batch that is kept is a scanner bug, not bad luck.
const FLIPS_MAX: usize = 3;

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let limits = small_limits();
    if input.u8() % 2 == 0 {
        let base = input.u64();
        let has_idx = input.u8() % 4 != 0;
        let idx_len = usize::from(input.u16());
        let idx = input.take(idx_len);
        let wal = input.0;
        let idx = has_idx.then_some(idx);
        check(base, wal, idx, &limits);
    } else {
        built(&mut input, &limits);
    }
});

/// Cuts fields off the fuzz input; short input reads as zeros.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, tail) = self.0.split_at(n.min(self.0.len()));
        self.0 = tail;
        head
    }
    fn u8(&mut self) -> u8 {
        self.take(1).first().copied().unwrap_or(0)
    }
    fn u16(&mut self) -> u16 {
        u16::from(self.u8()) << 8 | u16::from(self.u8())
    }
    fn u64(&mut self) -> u64 {
        let mut out = [0u8; 8];
        let bytes = self.take(8);
        out[..bytes.len()].copy_from_slice(bytes);
        u64::from_be_bytes(out)
    }
}

fn check(base: u64, wal: &[u8], idx: Option<&[u8]>, limits: &Limits) -> ScanOutcome {
    let (out, allocated) = measure(|| scan_segment(base, wal, idx, limits));
    // One 32-byte entry per batch of at least 29 bytes, in a vector that at most doubles.
    assert!(
        allocated <= 1024 + 4 * wal.len(),
        "scanning {} bytes allocated {allocated}",
        wal.len()
    );
    let idx = idx.unwrap_or(&[]);
    let slot = |i: usize| -> Option<IndexEntry> {
        let bytes = idx.get(i * ENTRY_LEN..(i + 1) * ENTRY_LEN)?;
        (!IndexEntry::is_empty_slot(bytes)).then(|| IndexEntry::decode(bytes))
    };

    assert!(out.wal_len_valid <= wal.len() as u64);
    // The walk ends at a cut, or at the end of the file after a run of zeros (pre-extended
    // space), never both.
    assert_eq!(
        out.cut.is_none(),
        out.wal_len_valid + out.zero_tail_bytes == wal.len() as u64
    );
    assert!(
        wal[out.wal_len_valid as usize..][..out.zero_tail_bytes as usize]
            .iter()
            .all(|&b| b == 0),
        "a zero tail is zeros"
    );
    let mut position = 0u64;
    let mut expected = base;
    let mut max_timestamp_ns = 0;
    let mut rebuilt = 0;
    for (i, entry) in out.entries.iter().enumerate() {
        assert_eq!(
            u64::from(entry.position),
            position,
            "kept batches tile the WAL"
        );
        let batch = &wal[entry.position as usize..entry.end_position() as usize];
        let header = record::check(batch, limits).expect("kept batches are valid");
        assert_eq!(header.batch_len(), batch.len());
        assert_eq!(
            entry.crc,
            record::batch_crc(batch),
            "entry CRC is the bytes' CRC"
        );
        assert_eq!(entry.offset, header.offset);
        assert_eq!(u64::from(entry.records), header.records());
        max_timestamp_ns = max_timestamp_ns.max(header.timestamp_ns);
        assert_eq!(entry.max_timestamp_ns, max_timestamp_ns);
        assert!(entry.offset >= expected, "offsets only grow");
        match slot(i) {
            Some(stored) => assert_eq!(stored, *entry, "kept a batch its entry disagrees with"),
            None => {
                assert_eq!(entry.offset, expected, "a rebuilt entry continues exactly");
                rebuilt += 1;
            }
        }
        // A control batch (its header's count carries the control bit) takes one offset.
        let next = entry.offset.checked_add(u64::from(entry.offsets()));
        expected = next.expect("kept batches' offsets fit u64");
        position = entry.end_position();
    }
    assert_eq!(position, out.wal_len_valid);
    assert_eq!(expected, out.next_offset);
    assert_eq!(rebuilt, out.entries_rebuilt);
    let slots = idx.len() / ENTRY_LEN;
    let dropped = (out.entries.len()..slots)
        .filter(|&i| slot(i).is_some())
        .count();
    assert_eq!(dropped, out.entries_dropped);

    // The repaired segment is clean: recovery reaches a fixed point in one pass.
    let kept = &wal[..out.wal_len_valid as usize];
    let mut rewritten = vec![0u8; out.entries.len() * ENTRY_LEN];
    for (entry, bytes) in out.entries.iter().zip(rewritten.chunks_mut(ENTRY_LEN)) {
        entry.encode(bytes);
    }
    let again = scan_segment(base, kept, Some(&rewritten), limits);
    assert!(again.is_clean(kept.len() as u64), "{again:?}");
    assert_eq!(again.entries, out.entries);
    out
}

/// One batch as written, before any damage.
struct Written {
    bytes: Vec<u8>,
    entry: IndexEntry,
}

fn built(input: &mut Input<'_>, limits: &Limits) {
    let base = match input.u8() % 4 {
        0 => u64::MAX - u64::from(input.u16()),
        _ => u64::from(input.u16()),
    };
    let count = usize::from(input.u8() % 8);
    let mut written: Vec<Written> = Vec::new();
    let mut wal = Vec::new();
    let mut offset = Some(base);
    let mut max_ts = 0;
    for _ in 0..count {
        let Some(this) = offset else { break };
        let key_len = usize::from(input.u8() % 8);
        let key = input.take(key_len).to_vec();
        let payload_len = usize::from(input.u8() % 64);
        let payload = input.take(payload_len).to_vec();
        let ts = u64::from(input.u16());
        let records = u32::from(input.u8());
        let mut bytes = record::encode_batch(ts, &key, &payload, records);
        record::set_offset(&mut bytes, this);
        let header = record::check(&bytes, limits).expect("built batches are valid");
        max_ts = max_ts.max(ts);
        let entry = IndexEntry {
            offset: this,
            max_timestamp_ns: max_ts,
            position: wal.len() as u32,
            length: bytes.len() as u32,
            records: header.records() as u32,
            crc: record::batch_crc(&bytes),
            format: record::format_of(&bytes, &header),
        };
        wal.extend_from_slice(&bytes);
        offset = this.checked_add(header.records());
        written.push(Written { bytes, entry });
    }
    // Which entries made it to the index, and how much empty capacity follows.
    let present = input.u8();
    let spare = usize::from(input.u8() % 4);
    let mut idx = vec![0u8; (written.len() + spare) * ENTRY_LEN];
    for (i, w) in written.iter().enumerate() {
        if present & (1 << i) != 0 {
            w.entry.encode(&mut idx[i * ENTRY_LEN..(i + 1) * ENTRY_LEN]);
        }
    }
    let idx_before = idx.clone();

    let mut damaged = false;
    let flips = usize::from(input.u8()) % (FLIPS_MAX + 1);
    for _ in 0..flips {
        let at = usize::from(input.u16());
        let bit = input.u8() % 8;
        let in_idx = input.u8() % 4 == 0;
        let target = if in_idx { &mut idx } else { &mut wal };
        if !target.is_empty() {
            let at = at % target.len();
            target[at] ^= 1 << bit;
            damaged = true;
        }
    }
    let wal_cut = match input.u8() % 4 {
        0 => usize::from(input.u16()).min(wal.len()),
        _ => wal.len(),
    };
    let idx_cut = match input.u8() % 4 {
        0 => usize::from(input.u16()).min(idx.len()),
        _ => idx.len(),
    };
    damaged |= wal_cut < wal.len() || idx_cut < idx.len();
    let has_idx = input.u8() % 8 != 0;
    let idx = has_idx.then_some(&idx[..idx_cut]);
    let out = check(base, &wal[..wal_cut], idx, limits);

    for (i, entry) in out.entries.iter().enumerate() {
        let original = written.get(i).expect("no more batches kept than written");
        let slot = idx_before.get(i * ENTRY_LEN..(i + 1) * ENTRY_LEN);
        let entry_survived = idx.is_some_and(|idx| {
            idx.get(i * ENTRY_LEN..(i + 1) * ENTRY_LEN) == slot
                && !IndexEntry::is_empty_slot(slot.expect("in range"))
        });
        if entry_survived {
            assert_eq!(*entry, original.entry);
            let kept = &wal[entry.position as usize..entry.end_position() as usize];
            assert_eq!(
                kept, original.bytes,
                "kept a damaged batch its entry vouched for"
            );
        }
    }
    // Undamaged and without an offset overflow, everything written is kept up to the first
    // batch whose entry is absent from an index file that has its slot: an empty slot inside
    // the file is an entry that never became durable, and its batch is cut (`Unindexed`).
    // Slots past the end of the file (or no file) are rebuilt.
    if !damaged && offset.is_some() {
        let first_absent = (0..written.len()).find(|&i| has_idx && present & (1 << i) == 0);
        let kept = first_absent.unwrap_or(written.len());
        assert_eq!(out.cut.is_none(), first_absent.is_none());
        assert_eq!(out.entries.len(), kept);
        for (entry, w) in out.entries.iter().zip(&written) {
            assert_eq!(*entry, w.entry);
        }
    }
}
