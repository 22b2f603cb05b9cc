//! Key compaction: closed segments are rewritten keeping, for each key, only its newest
//! batch (batches without a key are always kept).
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
//! [`Index::find_offset`]: crate::storage::index::Index::find_offset

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use glommio::io::BufferedFile;
use tracing::{error, info, warn};

use crate::limits::Limits;
use crate::protocol::record::{self, BatchHeader, HEADER_LEN};
use crate::storage::index::{ENTRY_LEN, IndexEntry};
use crate::storage::open::sync_dir;
use crate::storage::segment::{self, FileId, Segment, idx_path, wal_path};
use crate::storage::{PartitionLog, StorageError};

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
    let tmp = dir.join(format!("{COMPACTED_TO}.tmp"));
    let path = dir.join(COMPACTED_TO);
    let mut file = fs::File::create(&tmp).map_err(|e| StorageError::io(&tmp, e))?;
    writeln!(file, "{offset}")
        .and_then(|()| file.sync_data())
        .map_err(|e| StorageError::io(&tmp, e))?;
    rename(&tmp, &path)?;
    sync_dir(dir)
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
        let st = self.state.borrow();
        let closed = &st.segments[..st.segments.len().saturating_sub(1)];
        let total: u64 = closed.iter().map(|s| s.size_bytes).sum();
        if total == 0 {
            return 0.0;
        }
        let dirty: u64 = closed
            .iter()
            .filter(|s| s.next_offset > clean_to)
            .map(|s| s.size_bytes)
            .sum();
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
                    map.note(key, entry.offset)
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
        let st = self.state.borrow();
        st.check_writable()?;
        let last = st.segments.len() - 1;
        Ok(st
            .segments
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
            .collect())
    }

    fn segment_next_offset(&self, base_offset: u64) -> u64 {
        let st = self.state.borrow();
        st.segments
            .iter()
            .find(|s| s.base_offset == base_offset)
            .map_or(0, |s| s.next_offset)
    }

    /// Copies entries `from..` (at most [`ENTRIES_PER_STEP`]) of the segment, if it is still
    /// the one the pass snapshotted.
    fn entries_of(
        &self,
        snap: &Snapshot,
        from: usize,
        out: &mut Vec<IndexEntry>,
    ) -> Result<(), StorageError> {
        out.clear();
        let st = self.state.borrow();
        st.check_writable()?;
        let segment = st
            .segments
            .iter()
            .find(|s| s.base_offset == snap.base_offset && s.file_id == snap.file_id)
            .ok_or(StorageError::Closed)?;
        let to = (from + ENTRIES_PER_STEP).min(snap.entries);
        out.extend((from..to).map(|i| segment.entry(i)));
        Ok(())
    }

    /// Reads every batch of a snapshotted segment in order, checks it against its index
    /// entry, and hands it (entry, key) to `visit`.
    async fn for_each_batch(
        &self,
        file: &BufferedFile,
        snap: &Snapshot,
        limits: &Limits,
        mut visit: impl FnMut(&IndexEntry, &[u8]),
    ) -> Result<(), StorageError> {
        let mut runs = Runs::new(self, file, snap);
        while let Some(run) = runs.next().await? {
            for (entry, batch) in run.batches() {
                let header = check_batch(entry, batch, limits)?;
                visit(entry, key_of(&header, batch));
            }
        }
        Ok(())
    }

    /// Rewrites one closed segment without its superseded batches. Returns (bytes before,
    /// bytes after, batches removed), or `None` when nothing in it is superseded.
    async fn rewrite(
        self: &Rc<Self>,
        snap: &Snapshot,
        map: &KeyMap,
        limits: &Limits,
    ) -> Result<Option<(u64, u64, u64)>, StorageError> {
        let dir = self.dir().to_path_buf();
        let base = snap.base_offset;
        let wal = wal_path(&dir, base);
        let last_offset = self.last_entry_offset(snap)?;

        // A read-only look first: most segments of a settled log have nothing to drop.
        let reader = open_reader(&wal).await?;
        let mut droppable = 0u64;
        let scan = self
            .for_each_batch(&reader, snap, limits, |entry, key| {
                if entry.offset != last_offset && map.superseded(key, entry.offset) {
                    droppable += 1;
                }
            })
            .await;
        if let Err(e) = scan {
            close(reader).await;
            return Err(e);
        }
        if droppable == 0 {
            close(reader).await;
            return Ok(None);
        }

        let (wal_cleaning, idx_cleaning) = cleaning_paths(&dir, base);
        remove_if_exists(&wal_cleaning)?;
        remove_if_exists(&idx_cleaning)?;
        let written = self
            .write_aside(
                &reader,
                snap,
                map,
                limits,
                last_offset,
                &wal_cleaning,
                &idx_cleaning,
            )
            .await;
        close(reader).await;
        let (kept, size_after) = match written {
            Ok(done) => done,
            Err(e) => {
                remove_if_exists(&wal_cleaning)?;
                remove_if_exists(&idx_cleaning)?;
                return Err(e);
            }
        };
        crash_point(Step::Written);

        // Step 2, the commit point. Nothing awaits between the check and the renames, so
        // no other task of this core (topic deletion, close) can slip in between.
        let size_before = {
            let st = self.state.borrow();
            let still_ours = st.check_writable().is_ok()
                && st.segments[..st.segments.len() - 1]
                    .iter()
                    .any(|s| s.base_offset == base && s.file_id == snap.file_id);
            if !still_ours {
                drop(st);
                remove_if_exists(&wal_cleaning)?;
                remove_if_exists(&idx_cleaning)?;
                return Err(StorageError::Closed);
            }
            let (wal_swap, idx_swap) = swap_paths(&dir, base);
            rename(&wal_cleaning, &wal_swap)?;
            crash_point(Step::WalSwapped);
            rename(&idx_cleaning, &idx_swap)?;
            st.segments
                .iter()
                .find(|s| s.base_offset == base)
                .map_or(0, |s| s.size_bytes)
        };
        self.sync_directory().await?;
        crash_point(Step::Committed);

        // Step 3: install. Again no await between the check, the renames and the swap of
        // the in-memory segment, so readers see either the old segment or the new one.
        {
            let mut st = self.state.borrow_mut();
            let (wal_swap, idx_swap) = swap_paths(&dir, base);
            let Some(i) = st
                .segments
                .iter()
                .position(|s| s.base_offset == base && s.file_id == snap.file_id)
                .filter(|_| st.check_writable().is_ok())
            else {
                // Closed or deleted after the commit point: the next open finishes the
                // swap from the names on disk (if the directory still exists).
                return Err(StorageError::Closed);
            };
            rename(&wal_swap, &wal)?;
            crash_point(Step::WalInstalled);
            rename(&idx_swap, &idx_path(&dir, base))?;
            let replacement = Segment::open_sealed(&dir, base)?;
            assert_eq!(
                (replacement.entries(), replacement.size_bytes),
                (kept, size_after),
                "the installed segment is the one written aside"
            );
            assert_eq!(
                replacement.next_offset, st.segments[i].next_offset,
                "compaction keeps a segment's end offset"
            );
            st.segments[i] = replacement;
            self.checks.borrow_mut().replaced(base);
        }
        self.sync_directory().await?;
        crash_point(Step::Installed);
        let removed = droppable;
        info!(dir = %dir.display(), base, bytes_before = size_before, bytes_after = size_after, batches_removed = removed, "compacted a segment");
        Ok(Some((size_before, size_after, removed)))
    }

    fn last_entry_offset(&self, snap: &Snapshot) -> Result<u64, StorageError> {
        let st = self.state.borrow();
        st.segments
            .iter()
            .find(|s| s.base_offset == snap.base_offset && s.file_id == snap.file_id)
            .and_then(Segment::last_entry)
            .map(|e| e.offset)
            .ok_or(StorageError::Closed)
    }

    /// Step 1: writes the kept batches and their new index to the `.cleaning` files, syncs
    /// them, and reads them back. Returns (entries kept, WAL bytes).
    #[allow(clippy::too_many_arguments)]
    async fn write_aside(
        &self,
        reader: &BufferedFile,
        snap: &Snapshot,
        map: &KeyMap,
        limits: &Limits,
        last_offset: u64,
        wal_cleaning: &Path,
        idx_cleaning: &Path,
    ) -> Result<(usize, u64), StorageError> {
        let wal_out = create(wal_cleaning).await?;
        let idx_out = create(idx_cleaning).await?;
        let mut pending = Vec::with_capacity(WRITE_CHUNK_BYTES);
        let mut index = Vec::new();
        let mut new_entries = Vec::new();
        // Bytes of the new WAL already handed to the kernel; `pending` follows them.
        let mut written = 0u64;
        let mut max_timestamp_ns = 0u64;
        let copied = async {
            let mut runs = Runs::new(self, reader, snap);
            while let Some(run) = runs.next().await? {
                for (entry, batch) in run.batches() {
                    let header = check_batch(entry, batch, limits)?;
                    if entry.offset != last_offset
                        && map.superseded(key_of(&header, batch), entry.offset)
                    {
                        continue;
                    }
                    max_timestamp_ns = max_timestamp_ns.max(header.timestamp_ns);
                    let position = written + pending.len() as u64;
                    let kept = IndexEntry {
                        offset: entry.offset,
                        max_timestamp_ns,
                        position: u32::try_from(position).expect("a rewrite only shrinks"),
                        length: entry.length,
                        records: entry.records,
                        crc: entry.crc,
                    };
                    let mut slot = [0u8; ENTRY_LEN];
                    kept.encode(&mut slot);
                    index.extend_from_slice(&slot);
                    new_entries.push(kept);
                    pending.extend_from_slice(batch);
                }
                if pending.len() >= WRITE_CHUNK_BYTES {
                    let len = pending.len() as u64;
                    let chunk =
                        std::mem::replace(&mut pending, Vec::with_capacity(WRITE_CHUNK_BYTES));
                    write_all(&wal_out, wal_cleaning, chunk, written).await?;
                    written += len;
                }
            }
            let len = pending.len() as u64;
            write_all(
                &wal_out,
                wal_cleaning,
                std::mem::take(&mut pending),
                written,
            )
            .await?;
            written += len;
            write_all(&idx_out, idx_cleaning, std::mem::take(&mut index), 0).await?;
            wal_out
                .fdatasync()
                .await
                .map_err(|e| StorageError::io(wal_cleaning, e.into()))?;
            idx_out
                .fdatasync()
                .await
                .map_err(|e| StorageError::io(idx_cleaning, e.into()))
        }
        .await;
        close(wal_out).await;
        close(idx_out).await;
        copied?;
        assert_eq!(
            written,
            index_end(&new_entries),
            "WAL and index agree on the size"
        );

        // Read back what was written and check it as a reader would: the new files must
        // serve exactly the kept batches.
        let check = open_reader(wal_cleaning).await?;
        let first = new_entries.first().expect("a segment keeps its last batch");
        let back = read_exact(&check, wal_cleaning, first, 0, written).await;
        close(check).await;
        let back = back?;
        for entry in &new_entries {
            let batch = &back[entry.position as usize..entry.end_position() as usize];
            check_batch(entry, batch, limits)?;
        }
        let idx_back = fs::read(idx_cleaning).map_err(|e| StorageError::io(idx_cleaning, e))?;
        assert_eq!(idx_back.len(), new_entries.len() * ENTRY_LEN);
        for (slot, entry) in idx_back.chunks_exact(ENTRY_LEN).zip(&new_entries) {
            assert_eq!(
                IndexEntry::decode(slot),
                *entry,
                "index read back as written"
            );
        }
        Ok((new_entries.len(), written))
    }

    async fn sync_directory(&self) -> Result<(), StorageError> {
        self.directory
            .sync()
            .await
            .map_err(|e| StorageError::io(self.dir(), e.into()))
    }
}

/// Reads a snapshotted segment in runs of consecutive batches, one read per run.
struct Runs<'a> {
    log: &'a PartitionLog,
    file: &'a BufferedFile,
    path: PathBuf,
    snap: &'a Snapshot,
    /// Entries copied from the index, and the first of them not yet read.
    entries: Vec<IndexEntry>,
    next: usize,
    /// Entries of the segment copied so far.
    copied: usize,
}

/// Consecutive batches and their bytes.
struct Run {
    entries: Vec<IndexEntry>,
    start: u64,
    bytes: glommio::io::ReadResult,
}

impl Run {
    fn batches(&self) -> impl Iterator<Item = (&IndexEntry, &[u8])> {
        self.entries.iter().map(|entry| {
            let at = usize::try_from(u64::from(entry.position) - self.start).expect("in run");
            (entry, &self.bytes[at..at + entry.length as usize])
        })
    }
}

impl<'a> Runs<'a> {
    fn new(log: &'a PartitionLog, file: &'a BufferedFile, snap: &'a Snapshot) -> Runs<'a> {
        Runs {
            log,
            file,
            path: wal_path(log.dir(), snap.base_offset),
            snap,
            entries: Vec::with_capacity(ENTRIES_PER_STEP),
            next: 0,
            copied: 0,
        }
    }

    async fn next(&mut self) -> Result<Option<Run>, StorageError> {
        // Yield between reads: a pass runs beside produce and fetch on this core.
        glommio::yield_if_needed().await;
        if self.next == self.entries.len() {
            if self.copied == self.snap.entries {
                return Ok(None);
            }
            self.log
                .entries_of(self.snap, self.copied, &mut self.entries)?;
            self.copied += self.entries.len();
            self.next = 0;
        }
        let first = self.next;
        let start = u64::from(self.entries[first].position);
        let mut end = first + 1;
        while end < self.entries.len()
            && self.entries[end].end_position() - start <= READ_RUN_BYTES_MAX
        {
            end += 1;
        }
        self.next = end;
        let run_len = self.entries[end - 1].end_position() - start;
        let bytes = read_exact(self.file, &self.path, &self.entries[first], start, run_len).await?;
        Ok(Some(Run {
            entries: self.entries[first..end].to_vec(),
            start,
            bytes,
        }))
    }
}

/// The key of a checked batch.
fn key_of<'b>(header: &BatchHeader, batch: &'b [u8]) -> &'b [u8] {
    &batch[HEADER_LEN..HEADER_LEN + header.key_len as usize]
}

fn index_end(entries: &[IndexEntry]) -> u64 {
    entries.last().map_or(0, IndexEntry::end_position)
}

/// Checks a batch read from a segment against its index entry: the same checks a reader
/// makes (sane header, the offset and length the entry says, the CRC it stores).
fn check_batch(
    entry: &IndexEntry,
    batch: &[u8],
    limits: &Limits,
) -> Result<BatchHeader, StorageError> {
    let corrupt = || StorageError::Corrupt {
        offset: entry.offset,
        next_offset: entry.next_offset(),
    };
    let header = record::check(batch, limits).map_err(|_| corrupt())?;
    if header.offset != entry.offset
        || header.batch_len() != batch.len()
        || record::batch_crc(batch) != entry.crc
    {
        return Err(corrupt());
    }
    Ok(header)
}

async fn open_reader(path: &Path) -> Result<BufferedFile, StorageError> {
    BufferedFile::open(path)
        .await
        .map_err(|e| StorageError::io(path, e.into()))
}

async fn create(path: &Path) -> Result<BufferedFile, StorageError> {
    glommio::io::OpenOptions::new()
        .write(true)
        .create_new(true)
        .buffered_open(path)
        .await
        .map_err(|e| StorageError::io(path, e.into()))
}

async fn close(file: BufferedFile) {
    let _ = file.close().await;
}

async fn read_exact(
    file: &BufferedFile,
    path: &Path,
    first: &IndexEntry,
    position: u64,
    len: u64,
) -> Result<glommio::io::ReadResult, StorageError> {
    let len_usize = usize::try_from(len).expect("runs fit memory");
    let bytes = file
        .read_at(position, len_usize)
        .await
        .map_err(|e| StorageError::io(path, e.into()))?;
    if bytes.len() != len_usize {
        // The index points past the end of the WAL: the segment is damaged.
        error!(path = %path.display(), position, len, got = bytes.len(), "segment shorter than its index");
        return Err(StorageError::Corrupt {
            offset: first.offset,
            next_offset: first.next_offset(),
        });
    }
    Ok(bytes)
}

async fn write_all(
    file: &BufferedFile,
    path: &Path,
    buf: Vec<u8>,
    position: u64,
) -> Result<(), StorageError> {
    let len = buf.len();
    let written = file
        .write_at(buf, position)
        .await
        .map_err(|e| StorageError::io(path, e.into()))?;
    if written != len {
        return Err(StorageError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!("short write: {written} of {len} bytes"),
            ),
        ));
    }
    Ok(())
}
