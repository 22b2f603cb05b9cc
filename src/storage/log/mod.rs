//! The partition log: an ordered list of segments, the last one active, with offsets
//! assigned on append, group commit, and read plans.
//!
//! # Group commit
//!
//! An append is *staged* synchronously: validated, given its offsets, copied into the
//! partition's pending buffer, and indexed in the mapped `.idx`. It is then *committed*:
//! the appender waits until the durability watermark its policy asks for covers it. One
//! I/O task at a time (spawned on demand, never owned by an appender, so a client that
//! disconnects mid-flush cannot cancel it) writes the whole pending buffer with one
//! io_uring write and, under `fsync = always`, one `fdatasync` of the `.wal` and one of the
//! `.idx` issued together. Under `always`, once enough is staged while a round's fdatasync
//! is in flight, it starts the next round at once, up to [`rounds::ROUNDS_IN_FLIGHT_MAX`] in flight,
//! and results are applied in issue order ([`rounds`]); otherwise everything staged while a
//! round is in flight rides on the next one. Either way N concurrent producers share
//! fsyncs.
//!
//! # Watermarks
//!
//! `next_offset >= written_offset >= durable_offset`: staged, in the page cache, on disk.
//! Readers see offsets below the *high watermark*: `durable_offset` under `always` (a
//! consumer never sees a batch that a crash could take back), `written_offset` otherwise.
//!
//! # Failures
//!
//! A failed or short write (disk full, EIO) rolls back everything not yet written: its
//! index entries are cleared, offsets are handed out again, and the waiting appenders get
//! an error. Writing resumes with the next append. A failed `fdatasync` *fences* the
//! partition: after it, the kernel may have dropped dirty pages, so nothing written since
//! the last good sync can be trusted; every later append and wait fails until a restart
//! runs recovery.
//!
//! # Lifecycle
//!
//! A log is `Open`, `Rolling` (staging waits for a new segment), `Closing` (staging is
//! refused; close settles what was staged), `Closed` or `Fenced`; see [`state::Lifecycle`].
//! Who may write the files (the I/O task while it has rounds to run, or an explicit sync or
//! close) is marked by an `IoTurn`, which clears itself however the rounds end.
//!
//! # Files
//!
//! - this file: the log's types, opening, and what it reports;
//! - [`stage`]: validating and staging batches, and waiting for their commit;
//! - [`io`]: the I/O task (group commit, fsync, rolls, rollbacks, fencing), sync and close;
//! - [`rounds`]: overlapping commit rounds under `always`, applied in issue order;
//! - [`journal`]: single-flush rounds under `always`, their index entries in the `.wal`;
//! - [`seal`]: a rolled segment's fdatasyncs, off the path of the next segment's batches;
//! - [`spare`]: the next segment's files, made ahead of the roll;
//! - [`read`]: read plans and reads;
//! - [`buffers`]: write buffers, recycled per core;
//! - [`maintenance`]: the narrow API compaction and retention change the segments through;
//! - [`raft`]: the Raft numbering of a replicated partition's batches (lookups, rolls);
//! - [`truncate`]: cutting the log back to an offset (closes, cuts the files, reopens);
//! - [`state`] and [`segments`]: the state and segment list those keep consistent.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};

use glommio::io::Directory;

use crate::storage::raft_index::Numbering;
use crate::storage::verify::Checks;
use crate::storage::watch::Watch;
use crate::storage::{FsyncPolicy, LogConfig, StorageError, open};

mod buffers;
#[cfg(test)]
mod control_tests;
mod inline;
mod io;
mod journal;
mod maintenance;
mod prealloc;
pub mod raft;
mod read;
mod rounds;
mod seal;
mod segments;
mod spare;
mod stage;
mod start;
mod state;
#[cfg(test)]
mod tests;
mod truncate;
mod writeback;

pub use read::{ReadPlan, StoredBatch, read_planned};
pub(crate) use rounds::ROUNDS_IN_FLIGHT_MAX;
pub(crate) use segments::SegmentList;
pub use start::LOG_START_FILE;
pub(crate) use start::read as start_floor;

/// Counters of one partition log's I/O, for metrics and benches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogStats {
    /// Batches staged.
    pub batches: u64,
    /// Records of the batches staged.
    pub records: u64,
    /// Bytes of the batches staged.
    pub bytes: u64,
    /// Records handed to readers in read plans (see [`PartitionLog::count_read`]).
    pub records_read: u64,
    /// Bytes handed to readers in read plans.
    pub bytes_read: u64,
    /// Writes of the pending buffer (one per group-commit round).
    pub writes: u64,
    /// fdatasync rounds (each covers both files).
    pub syncs: u64,
    /// Rounds whose fdatasync was issued while an earlier round's was still in flight
    /// (`always`; see [`rounds`]).
    pub overlapped_rounds: u64,
    /// Rounds made durable by one fdatasync of the `.wal`, their index entries in its
    /// journal (`always`; see [`crate::storage::index_journal`]).
    pub journaled_rounds: u64,
}

/// What a committed append reports back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendAck {
    /// Offset given to the batch's first record.
    pub base_offset: u64,
    /// Offset after its last record.
    pub next_offset: u64,
}

/// A staged batch, to be passed to [`PartitionLog::commit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a staged batch is acknowledged only after commit"]
pub struct Ticket {
    pub base_offset: u64,
    pub end_offset: u64,
    /// Number of write failures before this batch was staged (see `Rollbacks::lost`).
    epoch: u64,
}

pub struct PartitionLog {
    /// The log itself, for the tasks it starts (a seal holds the log until it is done).
    me: Weak<PartitionLog>,
    dir: PathBuf,
    directory: Directory,
    /// The partition directory, for the blocking jobs that write in it (see
    /// [`crate::storage::fs::write_file_durable_in`]).
    dir_file: std::fs::File,
    config: LogConfig,
    state: RefCell<state::State>,
    /// An I/O round is in flight (see [`io::IoTurn`]).
    io_busy: Cell<bool>,
    stats: Cell<LogStats>,
    /// Wakes appenders waiting for a watermark, and readers long-polling for new data.
    progress: Watch,
    /// Wakes the I/O task; shared with it so the task need not hold the log.
    io_signal: Rc<io::IoSignal>,
    pub(super) compaction: crate::storage::compaction::CompactionState,
    /// Bytes from disk not yet checked, and batches found damaged (see [`crate::storage::verify`]).
    checks: RefCell<Checks>,
    /// Write-out of the active WAL under `never` and `interval` (see [`writeback`]).
    writeback: writeback::Writeback,
    /// Pre-extension of the active segment under `always` (see [`prealloc`]).
    prealloc: prealloc::Prealloc,
    /// The seal of the segment rolled last (see [`seal`]).
    seal: seal::Seal,
    /// The next segment's files (see [`spare`]).
    spare: Rc<Cell<spare::Spare>>,
    /// How each active segment writes (sync slots, index journal).
    writer_setup: crate::storage::segment::WriterSetup,
    /// The log start a client moved it to (see [`start`]), 0 if none.
    start_floor: Cell<u64>,
    /// A replicated partition's Raft commit, as the end offset of the last committed batch:
    /// readers stop there ([`PartitionLog::set_commit_cap`]). `None`: no cap.
    commit_cap: Cell<Option<u64>>,
    /// Serializes moves of the start.
    start_lock: glommio::sync::Semaphore,
}

impl Drop for PartitionLog {
    fn drop(&mut self) {
        self.io_signal.end();
    }
}

/// A flush of the pending buffer starts with at least this much room, so small batches do
/// not grow it a few bytes at a time.
const PENDING_CAPACITY_MIN_BYTES: usize = 64 * 1024;

impl PartitionLog {
    /// Opens (recovering if needed) or creates the partition log in `dir`, a partition that
    /// is not replicated (a directory with Raft index files is refused: see
    /// [`PartitionLog::open_raft`]).
    pub async fn open(
        dir: impl AsRef<Path>,
        config: LogConfig,
    ) -> Result<Rc<PartitionLog>, StorageError> {
        Self::open_numbered(dir.as_ref(), config, Numbering::Offsets).await
    }

    /// Opens (recovering if needed) or creates the log of a replicated partition in `dir`:
    /// every segment records the Raft index of its first batch (`storage::raft_index`);
    /// a new log's first batch gets `first_index`. See [`raft`] for the lookups.
    pub async fn open_raft(
        dir: impl AsRef<Path>,
        config: LogConfig,
        first_index: u64,
    ) -> Result<Rc<PartitionLog>, StorageError> {
        Self::open_numbered(dir.as_ref(), config, Numbering::Raft { first_index }).await
    }

    pub(crate) async fn open_numbered(
        dir: &Path,
        config: LogConfig,
        numbering: Numbering,
    ) -> Result<Rc<PartitionLog>, StorageError> {
        config.validate()?;
        let dir = dir.to_path_buf();
        let (segments, checks, point) = open::open_segments(&dir, &config, numbering).await?;
        let directory = Directory::open(&dir)
            .await
            .map_err(|e| StorageError::io(&dir, e.into()))?;
        let state = state::State::new(SegmentList::new(segments), PENDING_CAPACITY_MIN_BYTES);
        let dir_file = std::fs::File::open(&dir).map_err(|e| StorageError::io(&dir, e))?;
        let compaction = crate::storage::compaction::CompactionState::new(&dir);
        let writer_setup = config.writer_setup(&dir);
        let start_floor = start::read(&dir);
        let log = Rc::new_cyclic(|me| PartitionLog {
            me: me.clone(),
            dir,
            directory,
            dir_file,
            config,
            state: RefCell::new(state),
            io_busy: Cell::new(false),
            stats: Cell::new(LogStats::default()),
            progress: Watch::default(),
            io_signal: Rc::new(io::IoSignal::default()),
            compaction,
            checks: RefCell::new(checks),
            writeback: writeback::Writeback::default(),
            prealloc: prealloc::Prealloc::default(),
            seal: seal::Seal::new(point),
            spare: Rc::new(Cell::new(spare::Spare::Absent)),
            writer_setup,
            start_floor: Cell::new(start_floor),
            commit_cap: Cell::new(None),
            start_lock: glommio::sync::Semaphore::new(1),
        });
        // A start past the end (the data it followed lost in a power cut under a lax fsync
        // policy) would hide records appended from now on: the end is the start then.
        let next = log.next_offset();
        if log.start_floor.get() > next {
            tracing::warn!(dir = %log.dir.display(), start = log.start_floor.get(), next, "log start past the log's end; moved back to the end");
            log.start_floor.set(next);
        }
        log.prealloc.enable_for(&log.dir, log.config.fsync);
        log.start_io_task();
        let written_to = log.state.borrow().pending_position;
        log.pre_extend(written_to, 0);
        Ok(log)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn stats(&self) -> LogStats {
        self.stats.get()
    }

    /// Counts what a reader was handed (a fetch's read plan), for per-partition metrics.
    pub fn count_read(&self, records: u64, bytes: u64) {
        self.bump(|s| {
            s.records_read += records;
            s.bytes_read += bytes;
        });
    }

    fn bump(&self, f: impl FnOnce(&mut LogStats)) {
        let mut stats = self.stats.get();
        f(&mut stats);
        self.stats.set(stats);
    }

    /// Offsets below this are visible to readers: what is acknowledged per the fsync
    /// policy, and in a replicated partition no further than the Raft commit.
    pub fn high_watermark(&self) -> u64 {
        let st = self.state.borrow();
        let acknowledged = match self.config.fsync {
            FsyncPolicy::Always => st.durable_offset,
            _ => st.written_offset,
        };
        match self.commit_cap.get() {
            Some(cap) => acknowledged.min(cap),
            None => acknowledged,
        }
    }

    /// A replica's driver: readers (fetches, time lookups, compaction, moves of the start)
    /// go no further than `offset`, the end of the last committed batch, from now on; long
    /// polls are woken. The commit only grows, and never past the log's end.
    pub fn set_commit_cap(&self, offset: u64) {
        let old = self.commit_cap.get();
        assert!(
            old.is_none_or(|old| offset >= old),
            "the commit only grows: {offset} after {old:?}"
        );
        assert!(offset <= self.next_offset(), "committed past the log's end");
        if old != Some(offset) {
            self.commit_cap.set(Some(offset));
            self.progress.notify_all();
        }
    }

    /// The cap [`PartitionLog::set_commit_cap`] set, if any.
    pub fn commit_cap(&self) -> Option<u64> {
        self.commit_cap.get()
    }

    /// First offset still in the log: the base of the oldest segment, or the start a
    /// client moved it to ([`start`]) if that is later. (Compaction may have removed the
    /// segment's first batches; readers asking for them get the next batch.)
    pub fn log_start_offset(&self) -> u64 {
        let oldest = self.state.borrow().segments.oldest().base_offset;
        oldest.max(self.start_floor.get())
    }

    /// Offset the next append will get.
    pub fn next_offset(&self) -> u64 {
        self.state.borrow().next_offset
    }

    /// Resolves when the high watermark may have moved (or a write failed).
    pub fn changed(&self) -> crate::storage::watch::Changed<'_> {
        self.progress.changed()
    }

    /// Batches found damaged so far (at recovery or on read), each counted once.
    pub fn corrupt_batches(&self) -> u64 {
        self.checks.borrow().corrupt().len() as u64
    }

    /// Base offsets and sizes of the segments, oldest first.
    pub fn segments(&self) -> Vec<(u64, u64)> {
        let st = self.state.borrow();
        st.segments
            .all()
            .iter()
            .map(|s| (s.base_offset, s.size_bytes))
            .collect()
    }
}
