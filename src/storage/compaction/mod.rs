//! Key compaction: closed segments are rewritten keeping, for each key, only its newest
//! batch (batches without a key, and control batches, `index::CONTROL_BIT`, are always
//! kept, flag included).
//!
//! # What a compacted segment looks like
//!
//! Offsets are never renumbered: a kept batch keeps its bytes exactly (header with its
//! offset, timestamp, key, payload) and therefore its CRC. The segment keeps its name (its
//! base offset) and always keeps its **last** batch, so it still ends where the next segment
//! begins (`open` checks that segments continue each other exactly) and the log's end offset
//! never moves. Readers skip the gaps: [`Index::find_offset`] answers an offset inside a gap
//! with the next batch after it. The index is rebuilt: positions are new, and the running
//! maximum timestamp is recomputed over the kept batches only, so that it is exactly what the
//! recovery scanner would rebuild from the WAL.
//!
//! Which batches are superseded is decided by a map from key to the newest offset that
//! carries it, built over every visible batch of the partition (closed and active
//! segments). A batch is dropped only when the map proves a newer batch with the same key
//! exists, so a map that runs out of room (`key_map_bytes_max`) makes a pass keep more, never
//! lose anything: new keys stop being added, known keys keep being updated.
//!
//! Every batch read is checked against its index entry (CRC, offset, length) before anything
//! is decided; a corrupt batch stops the pass with [`StorageError::Corrupt`] and leaves the
//! segment as it was. The rewritten files are read back and checked the same way before
//! they replace anything.
//!
//! # Crash safety: the file dance
//!
//! For a segment with base offset `B`, the pass:
//!
//! 1. writes `B.wal.cleaning` and `B.idx.cleaning`, fdatasyncs both, reads them back;
//! 2. renames `B.wal.cleaning` -> `B.wal.swap`, then `B.idx.cleaning` -> `B.idx.swap`, and
//!    fsyncs the directory: the existence of `B.idx.swap` is the **commit point**;
//! 3. renames `B.wal.swap` -> `B.wal`, then `B.idx.swap` -> `B.idx` (each replacing the old
//!    file atomically), and fsyncs the directory.
//!
//! Opening a partition first finishes or undoes an interrupted pass ([`finish_interrupted`]),
//! deciding only by which names exist:
//!
//! | found                                   | meaning                    | action                      |
//! |-----------------------------------------|----------------------------|-----------------------------|
//! | `*.cleaning` only                       | died in step 1             | delete them                 |
//! | `B.wal.swap`, `B.idx.cleaning`          | died inside step 2         | delete both                 |
//! | `B.idx.swap`, and `B.wal.cleaning`      | step 2 reordered by the fs | delete both                 |
//! | `B.idx.swap` (with or without `B.wal.swap`) | committed              | finish step 3               |
//!
//! In every row the segment is either entirely old or entirely new: a `kill -9` or a power
//! loss at any instant never leaves neither, nor a new WAL with an old index. (HermitMQ's
//! compaction deletes its own output; this one never deletes what it has not replaced.)
//! Old files that readers still hold open (a sendfile in progress, a cached descriptor) stay
//! readable until closed: a rename replaces the name, not the inode.
//!
//! # Scheduling
//!
//! The owner core runs passes in a low-share task queue and the pass yields between reads,
//! so produce and fetch keep their latency. One pass per partition at a time. What the
//! broker triggers on is the *dirty ratio*: the share of closed-segment bytes written since
//! the last pass (`compacted-to`, persisted), which are the only bytes that can hold keys the
//! last pass did not already deduplicate.
//!
//! # Files
//!
//! This file holds the pass and its bookkeeping, and the recovery of an interrupted pass;
//! [`rewrite`] the file dance for one segment; [`batches`] the reading of segments.
//!
//! [`Index::find_offset`]: crate::storage::index::Index::find_offset

mod batches;
mod rewrite;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use tracing::{error, warn};

use crate::storage::fs::{sync_dir, write_file_durable};
use crate::storage::segment::{self, FileId, idx_path, wal_path};

use crate::storage::{PartitionLog, StorageError};
use batches::{close, open_reader};

/// File recording the offset below which the last pass deduplicated everything.
pub const COMPACTED_TO: &str = "compacted-to";

/// Reads go in runs of at most this many bytes (one batch may exceed it).
const READ_RUN_BYTES_MAX: u64 = 1024 * 1024;
/// The rewritten WAL is written in pieces of about this size.
const WRITE_CHUNK_BYTES: usize = 1024 * 1024;
/// Index entries copied out of the mapped index per borrow of the log state.
const ENTRIES_PER_STEP: usize = 4096;
/// Bookkeeping a key costs in the map beyond its bytes (hash slot, box, offset).
const KEY_OVERHEAD_BYTES: usize = 48;

/// Bounds on one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompactionLimits {
    /// Memory the key map may use (key bytes plus bookkeeping).
    pub key_map_bytes_max: usize,
}

impl Default for CompactionLimits {
    fn default() -> Self {
        CompactionLimits {
            key_map_bytes_max: 64 * 1024 * 1024,
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactionOutcome {
    /// Closed segments looked at.
    pub segments_examined: usize,
    /// Closed segments replaced by a smaller copy.
    pub segments_rewritten: usize,
    /// Batches dropped because a newer batch has the same key.
    pub batches_removed: u64,
    /// Sizes of the rewritten segments before and after.
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Distinct keys the map held.
    pub keys: usize,
    /// The map hit `key_map_bytes_max`: some superseded batches were kept this time.
    pub key_map_full: bool,
    pub duration: Duration,
}

/// The steps of a pass a crash test can stop the process at (`PAGURUS_TEST_CRASH_AT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The `.cleaning` files are written and synced.
    Written,
    /// `B.wal.swap` exists, `B.idx.swap` does not yet.
    WalSwapped,
    /// The commit point is durable.
    Committed,
    /// The new WAL replaced the old one; the old index is still in place.
    WalInstalled,
    /// Both files replaced and the directory synced.
    Installed,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Written => "compaction-written",
            Step::WalSwapped => "compaction-wal-swapped",
            Step::Committed => "compaction-committed",
            Step::WalInstalled => "compaction-wal-installed",
            Step::Installed => "compaction-installed",
        }
    }
}

/// Test hook: with `PAGURUS_TEST_CRASH_AT=<step name>` in its environment the broker aborts
/// (no destructors, no flush: as abrupt as `kill -9`) when a pass reaches that step.
/// Crash tests use it to stop a pass between exactly the steps recovery must handle.
fn crash_point(step: Step) {
    static AT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let at = AT.get_or_init(|| std::env::var("PAGURUS_TEST_CRASH_AT").ok());
    if at.as_deref() == Some(step.name()) {
        error!(
            step = step.name(),
            "PAGURUS_TEST_CRASH_AT reached: aborting"
        );
        std::process::abort();
    }
}

fn cleaning_paths(dir: &Path, base: u64) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{base:020}.wal.cleaning")),
        dir.join(format!("{base:020}.idx.cleaning")),
    )
}

fn swap_paths(dir: &Path, base: u64) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{base:020}.wal.swap")),
        dir.join(format!("{base:020}.idx.swap")),
    )
}

/// Finishes or undoes a pass that a crash interrupted (see the module docs); called by
/// `open` before it lists segments. Returns how many segments it touched.
pub fn finish_interrupted(dir: &Path) -> Result<usize, StorageError> {
    let mut bases = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))? {
        let entry = entry.map_err(|e| StorageError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        for ext in ["wal.cleaning", "idx.cleaning", "wal.swap", "idx.swap"] {
            if let Some(base) = segment::parse_file_name(name, ext) {
                bases.push(base);
            }
        }
    }
    bases.sort_unstable();
    bases.dedup();
    for &base in &bases {
        let (wal_cleaning, idx_cleaning) = cleaning_paths(dir, base);
        let (wal_swap, idx_swap) = swap_paths(dir, base);
        let committed = idx_swap.exists() && !wal_cleaning.exists();
        if committed {
            if wal_swap.exists() {
                rename(&wal_swap, &wal_path(dir, base))?;
            }
            rename(&idx_swap, &idx_path(dir, base))?;
            warn!(dir = %dir.display(), base, "finished a compaction a crash interrupted after its commit point");
        } else {
            for path in [&wal_cleaning, &idx_cleaning, &wal_swap, &idx_swap] {
                remove_if_exists(path)?;
            }
            warn!(dir = %dir.display(), base, "undid a compaction a crash interrupted before its commit point; the segment is as it was");
        }
    }
    if !bases.is_empty() {
        sync_dir(dir)?;
    }
    Ok(bases.len())
}

fn rename(from: &Path, to: &Path) -> Result<(), StorageError> {
    fs::rename(from, to).map_err(|e| StorageError::io(from, e))
}

fn remove_if_exists(path: &Path) -> Result<(), StorageError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(StorageError::io(path, e)),
    }
}

/// Reads the persisted clean point: 0 (everything dirty) when missing or unreadable.
pub fn read_compacted_to(dir: &Path) -> u64 {
    fs::read_to_string(dir.join(COMPACTED_TO))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

fn write_compacted_to(dir: &Path, offset: u64) -> Result<(), StorageError> {
    write_file_durable(dir, COMPACTED_TO, format!("{offset}\n").as_bytes())
}

/// Per-log compaction bookkeeping.
pub(crate) struct CompactionState {
    /// One pass at a time.
    pub(crate) lock: glommio::sync::Semaphore,
    /// Offsets below this were deduplicated by the last complete pass.
    pub(crate) compacted_to: std::cell::Cell<u64>,
    pub(crate) last_pass: std::cell::Cell<Instant>,
}

impl CompactionState {
    pub(crate) fn new(dir: &Path) -> CompactionState {
        CompactionState {
            lock: glommio::sync::Semaphore::new(1),
            compacted_to: std::cell::Cell::new(read_compacted_to(dir)),
            last_pass: std::cell::Cell::new(Instant::now()),
        }
    }
}

/// A segment as the pass saw it when it started.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    base_offset: u64,
    file_id: FileId,
    /// Entries to read (all of a closed segment; those below the high watermark of the
    /// active one).
    entries: usize,
    closed: bool,
}

/// The key map: key -> newest offset carrying it.
struct KeyMap {
    newest: HashMap<Box<[u8]>, u64>,
    bytes: usize,
    bytes_max: usize,
    full: bool,
}

impl KeyMap {
    fn note(&mut self, key: &[u8], offset: u64) {
        if key.is_empty() {
            return;
        }
        if let Some(newest) = self.newest.get_mut(key) {
            debug_assert!(offset > *newest, "batches are visited in offset order");
            *newest = offset;
            return;
        }
        let cost = key.len() + KEY_OVERHEAD_BYTES;
        if self.bytes + cost > self.bytes_max {
            self.full = true;
            return;
        }
        self.bytes += cost;
        self.newest.insert(key.into(), offset);
    }

    /// True when a newer batch than the one at `offset` carries `key`.
    fn superseded(&self, key: &[u8], offset: u64) -> bool {
        !key.is_empty() && self.newest.get(key).is_some_and(|&newest| newest > offset)
    }
}

impl PartitionLog {
    /// Share of closed-segment bytes written since the last compaction pass (0 with no
    /// closed segment): what the background trigger compares with its threshold.
    pub fn dirty_ratio(&self) -> f64 {
        let clean_to = self.compaction.compacted_to.get();
        let (total, dirty) = self.with_segments(|segments| {
            let closed = segments.closed();
            let total: u64 = closed.iter().map(|s| s.size_bytes).sum();
            let dirty: u64 = closed
                .iter()
                .filter(|s| s.next_offset > clean_to)
                .map(|s| s.size_bytes)
                .sum();
            (total, dirty)
        });
        if total == 0 {
            return 0.0;
        }
        dirty as f64 / total as f64
    }

    /// When the last pass ended (or the log was opened).
    pub fn last_compaction(&self) -> Instant {
        self.compaction.last_pass.get()
    }

    /// Runs one compaction pass over the closed segments; see the module docs.
    pub async fn compact(
        self: &Rc<Self>,
        limits: &CompactionLimits,
    ) -> Result<CompactionOutcome, StorageError> {
        let _one_at_a_time = self
            .compaction
            .lock
            .acquire_permit(1)
            .await
            .map_err(|_| StorageError::Closed)?;
        let started = Instant::now();
        let result = self.compact_locked(limits).await;
        self.compaction.last_pass.set(Instant::now());
        let mut outcome = result?;
        outcome.duration = started.elapsed();
        Ok(outcome)
    }

    async fn compact_locked(
        self: &Rc<Self>,
        limits: &CompactionLimits,
    ) -> Result<CompactionOutcome, StorageError> {
        let snapshots = self.snapshot()?;
        let mut outcome = CompactionOutcome {
            segments_examined: snapshots.iter().filter(|s| s.closed).count(),
            ..CompactionOutcome::default()
        };
        if outcome.segments_examined == 0 {
            return Ok(outcome);
        }
        let log_limits = self.config().limits;

        // Pass 1: the newest offset of every key, over everything readers can see.
        let mut map = KeyMap {
            newest: HashMap::new(),
            bytes: 0,
            bytes_max: limits.key_map_bytes_max,
            full: false,
        };
        for snap in &snapshots {
            let file = open_reader(&wal_path(self.dir(), snap.base_offset)).await?;
            let result = self
                .for_each_batch(&file, snap, &log_limits, |entry, key| {
                    // Raft's own entries carry no client key and are always kept.
                    if !entry.is_control() {
                        map.note(key, entry.offset)
                    }
                })
                .await;
            close(file).await;
            result?;
        }
        outcome.keys = map.newest.len();
        outcome.key_map_full = map.full;
        if map.full {
            warn!(dir = %self.dir().display(), keys = map.newest.len(), bytes_max = limits.key_map_bytes_max, "compaction key map full: some superseded batches are kept this pass");
        }

        // Pass 2: rewrite each closed segment that has something to drop.
        let mut compacted_to = self.compaction.compacted_to.get();
        for snap in snapshots.iter().filter(|s| s.closed) {
            if let Some((before, after, removed)) = self.rewrite(snap, &map, &log_limits).await? {
                outcome.segments_rewritten += 1;
                outcome.bytes_before += before;
                outcome.bytes_after += after;
                outcome.batches_removed += removed;
            }
            compacted_to = compacted_to.max(self.segment_next_offset(snap.base_offset));
            glommio::yield_if_needed().await;
        }
        if !map.full && compacted_to > self.compaction.compacted_to.get() {
            // Two fsyncs: on the blocking thread, not on the core that serves produce.
            let dir = self.dir().to_path_buf();
            glommio::executor()
                .spawn_blocking(move || write_compacted_to(&dir, compacted_to))
                .await?;
            self.compaction.compacted_to.set(compacted_to);
        }
        Ok(outcome)
    }

    /// The segments a pass reads, as they are now.
    fn snapshot(&self) -> Result<Vec<Snapshot>, StorageError> {
        let high_watermark = self.high_watermark();
        self.with_open_segments(|segments| {
            let last = segments.all().len() - 1;
            segments
                .all()
                .iter()
                .enumerate()
                .map(|(i, s)| Snapshot {
                    base_offset: s.base_offset,
                    file_id: s.file_id,
                    entries: if i < last {
                        s.entries()
                    } else {
                        s.index().entries_below(high_watermark)
                    },
                    closed: i < last,
                })
                .collect()
        })
    }

    fn segment_next_offset(&self, base_offset: u64) -> u64 {
        self.with_segments(|segments| {
            segments
                .all()
                .iter()
                .find(|s| s.base_offset == base_offset)
                .map_or(0, |s| s.next_offset)
        })
    }
}
