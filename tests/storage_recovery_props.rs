//! Crash recovery on real files: a property test over random append sequences, crashes and
//! damage, and deterministic tests of the cases the issue names.
//!
//! # The property
//!
//! Each case appends random batches in two sessions, "crashing" after each (the
//! `PartitionLog` is dropped without `close()`, like kill -9: the files stay as the page cache
//! has them and there is no clean-shutdown marker), damages the files, and reopens:
//!
//! 1. open with `fsync = always`, append the K *durable* batches, crash;
//! 2. reopen with `fsync = never` (nothing may be lost yet), append M more (acknowledged, not
//!    durable), crash;
//! 3. damage the files once: truncate a `.wal` and/or an `.idx`, flip one bit, zero-fill a
//!    tail, or delete an `.idx`; the damage is drawn from the whole directory or only from the
//!    "unsynced" bytes, those written after the K-th batch;
//! 4. reopen (`always`) and check that the log is exactly a prefix of what was appended
//!    (offsets contiguous from 0, every key, payload and record count as appended), that every
//!    read passes its CRC, and that damage to unsynced bytes only kept all K durable batches.
//!    From the damaged byte the test also knows how many batches the scanner rules of
//!    `storage::recovery` keep (the batches before the first one the damage touched, or all
//!    of them when an index file is cut short or deleted: the entries past its end are
//!    rebuilt from the WAL), and checks
//!    that number exactly; a segment cut in the middle must send the later ones to
//!    `quarantine/`, none may vanish, and a second recovery must not move any;
//! 5. crash and reopen again: recovery is idempotent; append one batch and read it back; crash
//!    and reopen; close cleanly and reopen: the contents never change.
//!
//! # Segments sealed before the last open
//!
//! `storage::open` trusts a segment below the `recovery-point` (sealed, and so fsynced,
//! before the last open) after a cheap check (its `.idx` exists and the `.wal` ends where its
//! last entry does) instead of scanning it: a crash cannot change such a segment. Damage
//! there is bit rot, not a crash, and the property treats it so:
//!
//! - truncations and deleted indexes fail the cheap check, so the segment is scanned and the
//!   property above holds in full;
//! - a flipped or zeroed `.wal` byte passes it: recovery may cut the log before the damaged
//!   batch (if it scanned) or keep everything, in which case each damaged batch must fail its
//!   CRC on read (`StorageError::Corrupt`) and every other batch must read back intact;
//! - a flipped or zeroed `.idx` byte fails the cheap check when it breaks the chain of
//!   entries (offsets, positions, lengths, timestamps), and a read checks each batch's
//!   header against its entry; `index_rot_in_a_trusted_segment_is_caught` tests it. The
//!   property's exact count of kept batches does not model which of the two catches it, so
//!   "whole directory" damage of index bytes is drawn only from segments at or above the
//!   recovery point.
//!
//! A closed segment (every one but the last) is complete by construction, so recovery never
//! cuts one whose index still chains: it checks its batches and reports those that fail as
//! corrupt on read (`storage::verify`). The property accepts that outcome for WAL damage to
//! any closed segment, and for index damage to one (whether the chain still holds after it
//! is not modelled).
//!
//! One more combination is left out of the property: a `.wal` cut at a batch boundary
//! together with an `.idx` of the same (not last) segment cut at or before the matching
//! slot. The two files then agree and the segment looks whole but short; recovery sees the
//! offset gap before the next segment and quarantines the segments after it
//! (`wal_and_index_cut_at_the_same_batch_is_a_gap_and_quarantined` tests it), which the
//! property's model does not predict.
//!
//! The number of cases is read from `PAGURUS_PROPTEST_CASES` (default 1000).

use std::cell::RefCell;
use std::fs;
use std::os::unix::fs::FileExt;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use glommio::{LocalExecutor, LocalExecutorBuilder};
use pagurus::protocol::record::{self, BatchHeader, HEADER_LEN, encode_batch};
use pagurus::storage::index::{ENTRY_LEN, IndexEntry};
use pagurus::storage::open::{CLEAN_MARKER, QUARANTINE_DIR, RECOVERY_POINT};
use pagurus::storage::segment::{idx_path, parse_file_name, wal_path};
use pagurus::storage::{FsyncPolicy, LogConfig, PartitionLog, StorageError, StoredBatch};
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

// ---------------------------------------------------------------------------------------
// Harness

/// Runs `f` on a fresh glommio executor (for the deterministic tests).
fn run<T: Send + 'static>(f: impl AsyncFnOnce() -> T + Send + 'static) -> T {
    LocalExecutorBuilder::default()
        .spawn(move || async move { f().await })
        .expect("executor")
        .join()
        .expect("executor ran")
}

thread_local! {
    static EXECUTOR: RefCell<Option<LocalExecutor>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's glommio executor, made on first use and reused by every case:
/// glommio 0.9 leaks an eventfd per executor, so an executor per case would run into a
/// 1024-descriptor limit before 1000 cases.
fn run_local<T>(f: impl Future<Output = T>) -> T {
    EXECUTOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let executor =
            slot.get_or_insert_with(|| LocalExecutorBuilder::default().make().expect("executor"));
        match catch_unwind(AssertUnwindSafe(|| executor.run(f))) {
            Ok(t) => t,
            Err(panic) => {
                // Start the next case on a clean executor.
                *slot = None;
                resume_unwind(panic)
            }
        }
    })
}

/// `return Err(format!(...))` unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

type Outcome<T = ()> = Result<T, String>;

fn config(segment_bytes: u64, index_entries: u32, fsync: FsyncPolicy) -> LogConfig {
    LogConfig {
        segment_bytes,
        segment_age: Duration::from_secs(3600),
        index_entries,
        fsync,
        ..LogConfig::default()
    }
}

async fn open(path: &Path, config: &LogConfig, what: &str) -> Outcome<Rc<PartitionLog>> {
    PartitionLog::open(path, config.clone())
        .await
        .map_err(|e| format!("{what}: open failed: {e}"))
}

/// Simulates kill -9: drops the log without `close()`, once no I/O task holds it any more, so
/// that the next open is the only user of the files.
async fn crash(log: Rc<PartitionLog>) {
    while Rc::strong_count(&log) > 1 {
        glommio::executor().yield_now().await;
    }
    drop(log);
}

/// One batch as the producer sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Batch {
    /// 0 asks the broker to set it.
    timestamp_ns: u64,
    key: Vec<u8>,
    payload: Vec<u8>,
    record_count: u32,
}

impl Batch {
    fn new(i: usize) -> Batch {
        Batch {
            timestamp_ns: 1000 + i as u64,
            key: format!("key-{i}").into_bytes(),
            payload: vec![i as u8; 40 + i % 50],
            record_count: (i % 4) as u32,
        }
    }

    fn encode(&self) -> Vec<u8> {
        encode_batch(
            self.timestamp_ns,
            &self.key,
            &self.payload,
            self.record_count,
        )
    }

    fn len(&self) -> u64 {
        (HEADER_LEN + self.key.len() + self.payload.len()) as u64
    }

    fn offsets(&self) -> u64 {
        u64::from(self.record_count.max(1))
    }
}

/// Offset of every batch of `batches` appended to an empty log.
fn offsets_of(batches: &[Batch]) -> Vec<u64> {
    batches
        .iter()
        .scan(0, |next, b| {
            let offset = *next;
            *next += b.offsets();
            Some(offset)
        })
        .collect()
}

/// Appends `batches` and checks the offsets they get continue `*next`.
async fn append_all(log: &Rc<PartitionLog>, batches: &[Batch], next: &mut u64) -> Outcome {
    for (i, batch) in batches.iter().enumerate() {
        let bytes = batch.encode();
        let ack = log
            .append(&bytes, Some(record::batch_crc(&bytes)))
            .await
            .map_err(|e| format!("append {i} failed: {e}"))?;
        ensure!(
            ack.base_offset == *next && ack.next_offset == *next + batch.offsets(),
            "append {i}: ack {ack:?}, expected base offset {next}"
        );
        *next = ack.next_offset;
    }
    Ok(())
}

/// Checks that `got` is `want`, stored at `offset`.
fn check_batch(got: &StoredBatch, want: &Batch, offset: u64) -> Outcome {
    let header = BatchHeader::decode(&got.bytes, &Default::default())
        .map_err(|e| format!("bad header: {e}"))?;
    ensure!(
        got.entry.offset == offset && header.offset == offset,
        "entry offset {} and header offset {}, expected {offset}",
        got.entry.offset,
        header.offset
    );
    ensure!(
        header.batch_len() == got.bytes.len() && got.entry.length as usize == got.bytes.len(),
        "length: header {}, entry {}, bytes {}",
        header.batch_len(),
        got.entry.length,
        got.bytes.len()
    );
    ensure!(
        record::key_of(&got.bytes, &header) == &want.key[..],
        "key differs"
    );
    ensure!(
        record::payload_of(&got.bytes, &header) == &want.payload[..],
        "payload differs"
    );
    ensure!(
        header.record_count == want.record_count && u64::from(got.entry.records) == want.offsets(),
        "record count {} (entry {}), expected {}",
        header.record_count,
        got.entry.records,
        want.record_count
    );
    ensure!(
        want.timestamp_ns == 0 || header.timestamp_ns == want.timestamp_ns,
        "timestamp {}, expected {}",
        header.timestamp_ns,
        want.timestamp_ns
    );
    Ok(())
}

/// Reads the log from its start to the high watermark, `max_bytes` at a time, and checks that
/// it holds exactly the first n batches of `appended` at offsets 0, 1, ..., with no gap and
/// nothing else, and that every read passes its CRC, except that reading a batch numbered in
/// `corrupt` must fail with `StorageError::Corrupt`. Returns the batches read.
fn check_log(
    log: &PartitionLog,
    appended: &[Batch],
    max_bytes: u64,
    corrupt: &[usize],
    what: &str,
) -> Outcome<Vec<StoredBatch>> {
    let fail = |e: String| format!("{what}: {e}");
    ensure!(
        log.log_start_offset() == 0,
        "{what}: log start offset is {}, expected 0",
        log.log_start_offset()
    );
    let high_watermark = log.high_watermark();
    ensure!(
        log.next_offset() == high_watermark,
        "{what}: next offset {} but high watermark {high_watermark}",
        log.next_offset()
    );
    let mut out = Vec::new();
    let (mut offset, mut i) = (0u64, 0usize);
    while offset < high_watermark {
        ensure!(
            i < appended.len(),
            "{what}: the log goes on to offset {high_watermark} after the {} appended batches \
             (offset {offset})",
            appended.len()
        );
        if corrupt.contains(&i) {
            match log.read(offset, 1) {
                Err(StorageError::Corrupt { offset: at, .. }) if at == offset => {}
                Err(e) => return Err(fail(format!("damaged batch {i}: read gave {e}"))),
                Ok(b) => {
                    return Err(fail(format!(
                        "damaged batch {i} at offset {offset} was read back: {:?}",
                        b.first().map(|b| b.entry)
                    )));
                }
            }
            offset += appended[i].offsets();
            i += 1;
            continue;
        }
        let limit = if corrupt.is_empty() { max_bytes } else { 1 };
        let batches = log
            .read(offset, limit)
            .map_err(|e| fail(format!("read at offset {offset} (batch {i}) failed: {e}")))?;
        ensure!(
            !batches.is_empty(),
            "{what}: read at offset {offset} below the high watermark returned nothing"
        );
        for got in batches {
            ensure!(
                i < appended.len(),
                "{what}: a batch at offset {offset} after all appended ones"
            );
            check_batch(&got, &appended[i], offset).map_err(|e| fail(format!("batch {i}: {e}")))?;
            offset += appended[i].offsets();
            i += 1;
            out.push(got);
        }
    }
    ensure!(
        offset == high_watermark,
        "{what}: the batches read end at offset {offset}, the high watermark is {high_watermark}"
    );
    Ok(out)
}

/// Base offsets of the segments (`.wal` files) directly in `dir`, sorted.
fn wal_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| parse_file_name(e.ok()?.file_name().to_str()?, "wal"))
            .collect(),
        Err(_) => Vec::new(),
    };
    bases.sort_unstable();
    bases
}

/// Base offsets of the segments moved to `quarantine/` (one directory per event, or directly
/// in it), sorted.
fn quarantined_bases(partition: &Path) -> Vec<u64> {
    let quarantine = partition.join(QUARANTINE_DIR);
    let mut bases = wal_bases(&quarantine);
    if let Ok(entries) = fs::read_dir(&quarantine) {
        for entry in entries.flatten() {
            if entry.path().is_dir() {
                bases.extend(wal_bases(&entry.path()));
            }
        }
    }
    bases.sort_unstable();
    bases
}

fn read_file(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn write_at(path: &Path, bytes: &[u8], at: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.write_all_at(bytes, at))
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn truncate(path: &Path, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .unwrap_or_else(|e| panic!("truncating {}: {e}", path.display()));
}

fn flip_bit(path: &Path, at: u64, bit: u8) {
    let mut byte = [0u8];
    fs::File::open(path)
        .and_then(|f| f.read_exact_at(&mut byte, at))
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    byte[0] ^= 1 << bit;
    write_at(path, &byte, at);
}

// ---------------------------------------------------------------------------------------
// The scenario

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Region {
    /// Any byte of any segment file (see the module docs for index bytes).
    Anywhere,
    /// Only bytes written after the K durable batches.
    Unsynced,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ext {
    Wal,
    Idx,
}

/// A segment and a byte in it, chosen among the eligible ones by remainder once the layout
/// is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pick {
    segment: u64,
    byte: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Damage {
    None,
    /// Truncate a `.wal`, an `.idx`, or both (of the same or of different segments).
    Truncate {
        wal: Option<Pick>,
        idx: Option<Pick>,
    },
    FlipBit {
        ext: Ext,
        at: Pick,
        bit: u8,
    },
    /// Zero every byte from the picked one to the end of the file.
    ZeroTail {
        ext: Ext,
        at: Pick,
    },
    DeleteIdx {
        segment: u64,
    },
}

#[derive(Clone, Debug)]
struct Scenario {
    segment_bytes: u64,
    index_entries: u32,
    durable: Vec<Batch>,
    volatile: Vec<Batch>,
    region: Region,
    damage: Damage,
    read_max_bytes: u64,
}

fn batch_strategy() -> impl Strategy<Value = Batch> {
    (
        prop_oneof![Just(0u64), 1u64..1 << 62],
        vec(any::<u8>(), 0..=40),
        vec(any::<u8>(), 0..=300),
        0u32..=5,
    )
        .prop_map(|(timestamp_ns, key, payload, record_count)| Batch {
            timestamp_ns,
            key,
            payload,
            record_count,
        })
}

fn pick() -> impl Strategy<Value = Pick> {
    (0u64..64, 0u64..1 << 20).prop_map(|(segment, byte)| Pick { segment, byte })
}

fn ext() -> impl Strategy<Value = Ext> {
    prop_oneof![Just(Ext::Wal), Just(Ext::Idx)]
}

fn damage_strategy() -> impl Strategy<Value = Damage> {
    prop_oneof![
        1 => Just(Damage::None),
        3 => (pick(), pick(), 0u8..3).prop_map(|(w, i, which)| Damage::Truncate {
            wal: (which != 1).then_some(w),
            idx: (which != 0).then_some(i),
        }),
        3 => (ext(), pick(), 0u8..8).prop_map(|(ext, at, bit)| Damage::FlipBit { ext, at, bit }),
        2 => (ext(), pick()).prop_map(|(ext, at)| Damage::ZeroTail { ext, at }),
        1 => (0u64..64).prop_map(|segment| Damage::DeleteIdx { segment }),
    ]
}

fn scenario_strategy() -> impl Strategy<Value = Scenario> {
    (
        // Small segments and indexes, so that segments roll often.
        prop_oneof![512u64..=1024, 512u64..=4096],
        prop_oneof![4u32..=8, 4u32..=64],
        vec(batch_strategy(), 0..=16),
        vec(batch_strategy(), 0..=16),
        prop_oneof![Just(Region::Anywhere), Just(Region::Unsynced)],
        damage_strategy(),
        1u64..=4096,
    )
        .prop_map(
            |(segment_bytes, index_entries, durable, volatile, region, damage, read_max_bytes)| {
                Scenario {
                    segment_bytes,
                    index_entries,
                    durable,
                    volatile,
                    region,
                    damage,
                    read_max_bytes,
                }
            },
        )
}

// ---------------------------------------------------------------------------------------
// The layout on disk before the damage, and what the damage must cost

/// One segment as the second crash left it.
#[derive(Debug)]
struct SegmentLayout {
    base: u64,
    wal_len: u64,
    idx_len: u64,
    /// Numbers (in append order) of the batches it holds.
    batches: Vec<usize>,
}

#[derive(Debug)]
struct Layout {
    dir: PathBuf,
    segments: Vec<SegmentLayout>,
    /// Per batch: segment number, WAL position, length.
    placement: Vec<(usize, u64, u64)>,
    /// Where the unsynced bytes start: segment number, `.wal` and `.idx` byte positions.
    unsynced: (usize, u64, u64),
    /// Number of the first segment at or above the recovery point: the ones below were sealed
    /// before the last open, and recovery only checks them cheaply.
    first_scanned: usize,
}

impl Layout {
    fn new(dir: &Path, bases: &[u64], appended: &[Batch], durable: usize) -> Outcome<Layout> {
        let mut segments: Vec<SegmentLayout> = bases
            .iter()
            .map(|&base| SegmentLayout {
                base,
                wal_len: fs::metadata(wal_path(dir, base)).map_or(0, |m| m.len()),
                idx_len: fs::metadata(idx_path(dir, base)).map_or(0, |m| m.len()),
                batches: Vec::new(),
            })
            .collect();
        let mut placement = Vec::with_capacity(appended.len());
        let mut position = 0u64;
        let mut current = 0usize;
        for (i, (batch, offset)) in appended.iter().zip(offsets_of(appended)).enumerate() {
            let segment = bases.partition_point(|&b| b <= offset) - 1;
            if segment != current {
                current = segment;
                position = 0;
            }
            placement.push((segment, position, batch.len()));
            segments[segment].batches.push(i);
            position += batch.len();
        }
        for s in &segments {
            let end = s
                .batches
                .last()
                .map_or(0, |&b| placement[b].1 + placement[b].2);
            ensure!(
                end == s.wal_len,
                "layout: segment {} holds {} WAL bytes, the appends put {end} there",
                s.base,
                s.wal_len
            );
        }
        let unsynced = match durable.checked_sub(1) {
            None => (0, 0, 0),
            Some(last) => {
                let (segment, position, length) = placement[last];
                let entries = segments[segment]
                    .batches
                    .iter()
                    .filter(|&&b| b <= last)
                    .count();
                (segment, position + length, (entries * ENTRY_LEN) as u64)
            }
        };
        let recovery_point: u64 = fs::read_to_string(dir.join(RECOVERY_POINT))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or("layout: no recovery point")?;
        let first_scanned = bases.partition_point(|&b| b < recovery_point);
        // The second open made the segment holding the last durable batch active.
        ensure!(
            first_scanned == unsynced.0 && bases[first_scanned] == recovery_point,
            "layout: recovery point {recovery_point}, segments {bases:?}, the last durable batch \
             is in segment number {}",
            unsynced.0
        );
        Ok(Layout {
            dir: dir.to_path_buf(),
            segments,
            placement,
            unsynced,
            first_scanned,
        })
    }

    fn total(&self) -> usize {
        self.placement.len()
    }

    fn path(&self, segment: usize, ext: Ext) -> PathBuf {
        let base = self.segments[segment].base;
        match ext {
            Ext::Wal => wal_path(&self.dir, base),
            Ext::Idx => idx_path(&self.dir, base),
        }
    }

    /// Resolves a pick to a segment number and a byte of its `ext` file in the region, or
    /// `None` if the region holds no byte of such a file. `content` damage (a changed byte,
    /// not a cut) to an index is drawn only from segments recovery scans.
    fn resolve(&self, region: Region, ext: Ext, pick: Pick, content: bool) -> Option<(usize, u64)> {
        let first = match region {
            Region::Unsynced => self.unsynced.0,
            Region::Anywhere if content && ext == Ext::Idx => self.first_scanned,
            Region::Anywhere => 0,
        };
        let segment = first + pick.segment as usize % (self.segments.len() - first);
        let s = &self.segments[segment];
        let lo = match (region, ext) {
            (Region::Unsynced, Ext::Wal) if segment == first => self.unsynced.1,
            (Region::Unsynced, Ext::Idx) if segment == first => self.unsynced.2,
            _ => 0,
        };
        let hi = match ext {
            Ext::Wal => s.wal_len,
            // The active index is sparse up to its capacity: aim at the entries and two empty
            // slots after them, not at kilobytes of zeros.
            Ext::Idx => s.idx_len.min(((s.batches.len() + 2) * ENTRY_LEN) as u64),
        };
        (lo < hi).then(|| (segment, lo + pick.byte % (hi - lo)))
    }

    /// Number of the first batch of `segment` whose bytes reach past WAL position `p`.
    fn batch_at_wal(&self, segment: usize, p: u64) -> usize {
        self.segments[segment]
            .batches
            .iter()
            .copied()
            .find(|&b| self.placement[b].1 + self.placement[b].2 > p)
            .expect("a WAL position inside the file is inside a batch")
    }

    /// Number of the batch whose index slot holds `.idx` byte `p`, if there is one.
    fn batch_at_idx(&self, segment: usize, p: u64) -> Option<usize> {
        self.segments[segment]
            .batches
            .get(p as usize / ENTRY_LEN)
            .copied()
    }

    /// WAL byte range of batch `b`.
    fn range(&self, b: usize) -> std::ops::Range<usize> {
        let (_, position, length) = self.placement[b];
        position as usize..(position + length) as usize
    }
}

/// What the damage did and what recovery must make of it.
#[derive(Debug, Default)]
struct Applied {
    description: Vec<String>,
    /// Exactly this many batches survive a scan of the damaged segment.
    keep: usize,
    /// Batches damaged in a closed segment or one below the recovery point (bit rot): recovery
    /// may cut before the first, or keep everything and report each as corrupt on read.
    rot: Vec<usize>,
    /// A batch whose entry changed in a closed segment: recovery may cut before it, or keep
    /// everything and either refuse it as corrupt (its CRC, offset, length or record count
    /// disagree) or serve it intact (its bytes still match: only its timestamp changed).
    index_rot: Option<usize>,
}

/// How many batches survive when `.idx` slot `p / 32` of `segment` changes from `before` to
/// `after`, the slots after it being intact or empty: all of them if the slot is unchanged
/// or lies past the last batch (it is dropped); else the batches before it. A slot that now
/// reads as empty cuts there too: inside the file, an empty slot is an entry that never
/// became durable (`storage::recovery`, `Unindexed`).
fn keep_after_slot_change(
    layout: &Layout,
    segment: usize,
    p: u64,
    before: &[u8],
    after: &[u8],
) -> usize {
    match layout.batch_at_idx(segment, p) {
        Some(batch) if before != after => batch,
        _ => layout.total(),
    }
}

fn apply(layout: &Layout, region: Region, damage: Damage) -> Applied {
    let mut applied = Applied::default();
    let mut describe = |path: &Path, what: String| {
        let name = path.file_name().unwrap().to_string_lossy();
        applied.description.push(format!("{what} {name}"));
    };
    let mut keep = layout.total();
    let mut changed_wal: Option<(usize, Vec<usize>)> = None;
    let mut changed_idx: Option<usize> = None;
    match damage {
        Damage::None => {}
        Damage::Truncate { wal, idx } => {
            let wal = wal.and_then(|w| layout.resolve(region, Ext::Wal, w, false));
            let mut idx = idx.and_then(|i| layout.resolve(region, Ext::Idx, i, false));
            if let (Some((ws, p)), Some((is, q))) = (wal, idx) {
                // The one combination left out (see the module docs): both files of a segment
                // that is not the last cut so that they agree.
                let at_boundary = layout.segments[ws]
                    .batches
                    .iter()
                    .any(|&b| layout.range(b).end as u64 == p);
                let slots_before = layout.segments[ws]
                    .batches
                    .iter()
                    .filter(|&&b| (layout.range(b).end as u64) <= p)
                    .count();
                if ws == is
                    && ws + 1 < layout.segments.len()
                    && (p == 0 || at_boundary)
                    && q as usize / ENTRY_LEN <= slots_before
                {
                    idx = None;
                }
            }
            if let Some((segment, p)) = wal {
                let path = layout.path(segment, Ext::Wal);
                truncate(&path, p);
                describe(&path, format!("truncated to {p} bytes:"));
                keep = layout.batch_at_wal(segment, p);
            }
            if let Some((segment, p)) = idx {
                let path = layout.path(segment, Ext::Idx);
                truncate(&path, p);
                describe(&path, format!("truncated to {p} bytes:"));
                // The missing entries are rebuilt from the intact WAL.
            }
        }
        Damage::FlipBit { ext, at, bit } => {
            if let Some((segment, p)) = layout.resolve(region, ext, at, true) {
                let path = layout.path(segment, ext);
                let before = read_file(&path);
                flip_bit(&path, p, bit);
                describe(
                    &path,
                    format!(
                        "flipped bit {bit} of byte {p} ({:#04x}) of",
                        before[p as usize]
                    ),
                );
                keep = match ext {
                    Ext::Wal => {
                        let b = layout.batch_at_wal(segment, p);
                        changed_wal = Some((segment, vec![b]));
                        b
                    }
                    Ext::Idx => {
                        changed_idx = Some(segment);
                        let slot = p as usize / ENTRY_LEN * ENTRY_LEN;
                        let old = &before[slot..slot + ENTRY_LEN];
                        let mut new = old.to_vec();
                        new[p as usize - slot] ^= 1 << bit;
                        keep_after_slot_change(layout, segment, p, old, &new)
                    }
                };
            }
        }
        Damage::ZeroTail { ext, at } => {
            if let Some((segment, p)) = layout.resolve(region, ext, at, true) {
                let path = layout.path(segment, ext);
                let before = read_file(&path);
                let len = before.len() - p as usize;
                write_at(&path, &vec![0u8; len], p);
                describe(&path, format!("zeroed bytes {p}.. ({len} bytes) of"));
                keep = match ext {
                    Ext::Wal => {
                        // Only batches with a byte that really changed are damaged.
                        let changed: Vec<usize> = layout.segments[segment]
                            .batches
                            .iter()
                            .copied()
                            .filter(|&b| {
                                let r = layout.range(b);
                                r.end > p as usize
                                    && before[r.start.max(p as usize)..r.end]
                                        .iter()
                                        .any(|&x| x != 0)
                            })
                            .collect();
                        let first = changed.first().copied().unwrap_or(layout.total());
                        changed_wal = Some((segment, changed));
                        first
                    }
                    Ext::Idx => {
                        changed_idx = Some(segment);
                        let slot = p as usize / ENTRY_LEN * ENTRY_LEN;
                        let old = &before[slot..slot + ENTRY_LEN];
                        let mut new = old.to_vec();
                        new[p as usize - slot..].fill(0);
                        keep_after_slot_change(layout, segment, p, old, &new)
                    }
                };
            }
        }
        Damage::DeleteIdx { segment } => {
            // Under `Unsynced`, only an index that holds no durable entry.
            let first = match region {
                Region::Anywhere => 0,
                Region::Unsynced if layout.unsynced.1 == 0 => layout.unsynced.0,
                Region::Unsynced => layout.unsynced.0 + 1,
            };
            if first < layout.segments.len() {
                let segment = first + segment as usize % (layout.segments.len() - first);
                let path = layout.path(segment, Ext::Idx);
                fs::remove_file(&path)
                    .unwrap_or_else(|e| panic!("removing {}: {e}", path.display()));
                describe(&path, "deleted".to_string());
            }
        }
    }
    applied.keep = keep;
    // A closed segment (not the last) whose index still chains is never cut: what fails its
    // check is served as corrupt instead. Whether the chain still holds after index damage
    // the model does not work out, so either outcome is accepted for it.
    let closed = |segment: usize| segment + 1 < layout.segments.len();
    if let Some((segment, changed)) = changed_wal
        && (segment < layout.first_scanned || closed(segment))
    {
        applied.rot = changed;
    }
    if let Some(segment) = changed_idx
        && closed(segment)
        && keep < layout.total()
    {
        applied.index_rot = Some(keep);
    }
    applied
}

// ---------------------------------------------------------------------------------------
// The property

async fn crash_damage_recover(path: PathBuf, s: Scenario) -> Outcome {
    let always = config(s.segment_bytes, s.index_entries, FsyncPolicy::Always);
    let never = config(s.segment_bytes, s.index_entries, FsyncPolicy::Never);
    let appended: Vec<Batch> = s.durable.iter().chain(&s.volatile).cloned().collect();
    let max_bytes = s.read_max_bytes;
    let mut next = 0u64;

    // 1. The durable batches, then kill -9.
    let log = open(&path, &always, "first open").await?;
    append_all(&log, &s.durable, &mut next).await?;
    crash(log).await;

    // 2. A crash without damage loses nothing; then the volatile batches, and kill -9.
    let log = open(&path, &never, "second open").await?;
    let stored = check_log(&log, &appended, max_bytes, &[], "after the first crash")?;
    ensure!(
        stored.len() == s.durable.len(),
        "after the first crash: {} of {} durable batches left",
        stored.len(),
        s.durable.len()
    );
    append_all(&log, &s.volatile, &mut next).await?;
    let bases: Vec<u64> = log.segments().iter().map(|&(base, _)| base).collect();
    crash(log).await;
    ensure!(
        wal_bases(&path) == bases,
        "segment files {:?} differ from the log's segments {bases:?}",
        wal_bases(&path)
    );

    // 3. Damage.
    let layout = Layout::new(&path, &bases, &appended, s.durable.len())?;
    let applied = apply(&layout, s.region, s.damage);
    let context = format!("damage {:?}", applied.description);

    // 4. Recover.
    let log = open(&path, &always, &context).await?;
    // Bit rot in a trusted segment: recovery either cut the log before it, or kept it all and
    // reads must report the damaged batches as corrupt.
    let kept_all = log.next_offset() == next;
    let corrupt: Vec<usize> = match (kept_all, applied.index_rot) {
        (false, _) => Vec::new(),
        (true, None) => applied.rot.clone(),
        (true, Some(b)) => {
            let at = offsets_of(&appended)[b];
            match log.read(at, 1) {
                Err(StorageError::Corrupt { .. }) => vec![b],
                _ => Vec::new(),
            }
        }
    };
    let corrupt = corrupt.as_slice();
    let what = format!("recovery after {context}");
    let stored = check_log(&log, &appended, max_bytes, corrupt, &what)?;
    let kept = stored.len() + corrupt.len();
    if s.region == Region::Unsynced {
        ensure!(
            kept >= s.durable.len(),
            "{context}: only unsynced bytes were damaged, yet {kept} of {} durable batches are left",
            s.durable.len()
        );
    }
    let expected_kept = if kept_all && (!applied.rot.is_empty() || applied.index_rot.is_some()) {
        appended.len()
    } else {
        applied.keep
    };
    ensure!(
        kept == expected_kept,
        "{context}: {kept} of {} batches kept, the scanner rules keep {expected_kept}",
        appended.len()
    );
    // Nothing is silently dropped: a segment is either served or in quarantine, and only
    // segments after the cut are quarantined.
    let live = wal_bases(&path);
    let quarantined = quarantined_bases(&path);
    for &base in &bases {
        ensure!(
            live.contains(&base) != quarantined.contains(&base),
            "{context}: segment {base} is in neither or both of the partition and quarantine \
             (live {live:?}, quarantined {quarantined:?})"
        );
    }
    if let (Some(&last_live), Some(&first_quarantined)) = (live.last(), quarantined.first()) {
        ensure!(
            last_live < first_quarantined,
            "{context}: quarantined segment {first_quarantined} is below live {last_live}"
        );
    }
    crash(log).await;

    // 5. Recovery is idempotent; the log is writable; a clean stop keeps everything.
    let log = open(&path, &always, "reopen after recovery").await?;
    let what = format!("second recovery after {context}");
    let again = check_log(&log, &appended, max_bytes, corrupt, &what)?;
    ensure!(
        again == stored,
        "{context}: a second recovery changed the log ({} batches read, then {})",
        stored.len(),
        again.len()
    );
    ensure!(
        wal_bases(&path) == live && quarantined_bases(&path) == quarantined,
        "{context}: a second recovery moved segments"
    );
    let extra = Batch {
        timestamp_ns: 7,
        key: b"after".to_vec(),
        payload: b"recovery".to_vec(),
        record_count: 2,
    };
    let mut expected: Vec<Batch> = appended[..kept].to_vec();
    expected.push(extra.clone());
    let mut next = log.next_offset();
    append_all(&log, std::slice::from_ref(&extra), &mut next).await?;
    let what = format!("append after recovery from {context}");
    let with_extra = check_log(&log, &expected, max_bytes, corrupt, &what)?;
    ensure!(
        with_extra.len() == stored.len() + 1,
        "{what}: the new batch is not readable"
    );
    crash(log).await;

    let log = open(&path, &always, "reopen after the append").await?;
    let what = format!("crash after the append, after {context}");
    let after = check_log(&log, &expected, max_bytes, corrupt, &what)?;
    ensure!(after == with_extra, "{what}: the log changed");
    log.close()
        .await
        .map_err(|e| format!("{context}: close failed: {e}"))?;
    drop(log);
    ensure!(path.join(CLEAN_MARKER).exists(), "close wrote no marker");
    let log = open(&path, &always, "reopen after close").await?;
    let what = format!("clean restart after {context}");
    let last = check_log(&log, &expected, max_bytes, corrupt, &what)?;
    ensure!(last == with_extra, "{what}: the log changed");
    Ok(())
}

fn cases() -> u32 {
    std::env::var("PAGURUS_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn recovery_keeps_a_prefix_and_every_durable_batch(s in scenario_strategy()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        run_local(crash_damage_recover(path, s)).map_err(TestCaseError::fail)?;
    }
}

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
        assert_eq!(fs::metadata(wal_path(&path, 0)).unwrap().len(), 0);
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
        let recovery_point: u64 = fs::read_to_string(path.join(RECOVERY_POINT))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
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
