//! The I/O side of a partition log: the long-lived I/O task that runs group-commit rounds
//! (one write of the pending buffer, one fdatasync of `.wal` and `.idx`; under `always`
//! several rounds overlap, see [`super::rounds`]), segment rolls, rollbacks of failed
//! writes, fencing after a failed sync, and the explicit `sync` and `close`.
//!
//! The I/O turn, an [`IoTurn`], marks who may write the active segment's files: the I/O
//! task (from its first round until nothing is in flight), an interval sync, or close.

use std::cell::Cell;
use std::rc::Rc;
use std::time::Instant;

use tracing::{info, warn};

use super::inline::{self, RingWrite, Route};
use super::journal::sync_round;
use super::rounds::{OVERLAP_MIN_PENDING_BYTES, Rounds, SyncSlots};
use super::seal::SealFiles;
use super::{PENDING_CAPACITY_MIN_BYTES, PartitionLog, buffers};
use crate::storage::watch::Watch;
use crate::storage::{FsyncPolicy, StorageError, open};

#[derive(Default)]
pub(super) struct IoSignal {
    pub(super) watch: Watch,
    /// The log was dropped: the I/O task ends.
    dropped: Cell<bool>,
    /// The I/O task has rounds in flight and waits with a slot free: wake it for anything
    /// staged (see [`super::rounds`]).
    pub(super) accepting: Cell<bool>,
}

impl IoSignal {
    /// The log is gone: wake the I/O task so it ends.
    pub(super) fn end(&self) {
        self.dropped.set(true);
        self.watch.notify_all();
    }
}

/// The I/O turn. Dropping it (however the rounds ended: done, failed, or an early return)
/// frees the turn and wakes everyone waiting on the log's progress.
pub(super) struct IoTurn<'a> {
    log: &'a PartitionLog,
}

impl Drop for IoTurn<'_> {
    fn drop(&mut self) {
        debug_assert!(self.log.io_busy.get());
        self.log.io_busy.set(false);
        self.log.progress.notify_all();
    }
}

impl PartitionLog {
    /// The partition's I/O task: one per log for its whole life, woken by [`Self::kick`].
    /// It is never owned by an appender, so a client that disconnects mid-flush cannot
    /// cancel a write; and being long-lived, it costs no task allocation per round. It holds
    /// the log only weakly between rounds, and ends when the log is dropped, closed or
    /// fenced.
    pub(super) fn start_io_task(self: &Rc<Self>) {
        let log = Rc::downgrade(self);
        let signal = Rc::clone(&self.io_signal);
        glommio::spawn_local(async move {
            // Made once, on the first round under `always`, and kept for the task's life so
            // a round allocates nothing.
            let mut rounds = None;
            loop {
                let woken = signal.watch.changed();
                {
                    let Some(log) = log.upgrade() else { return };
                    if log.state.borrow().is_terminal() {
                        return;
                    }
                    if log.has_io_work()
                        && let Some(turn) = log.try_io_turn()
                    {
                        let round = if log.config.fsync == FsyncPolicy::Always {
                            let (slots, rounds) =
                                rounds.get_or_insert_with(|| (SyncSlots::new(), Rounds::default()));
                            log.commit_rounds(slots, rounds, sync_round).await
                        } else {
                            log.run_io().await
                        };
                        drop(turn);
                        if let Err(error) = round {
                            warn!(dir = %log.dir.display(), %error, "partition write failed");
                            // Whatever failed, let the rest of the core run before the next
                            // round: a round that fails at once must not spin.
                            futures_lite::future::yield_now().await;
                        }
                        continue;
                    }
                }
                if signal.dropped.get() {
                    return;
                }
                woken.await;
            }
        })
        .detach();
    }

    /// The I/O turn, if no round is in flight.
    fn try_io_turn(&self) -> Option<IoTurn<'_>> {
        if self.io_busy.replace(true) {
            return None;
        }
        Some(IoTurn { log: self })
    }

    /// Waits for the I/O turn.
    async fn io_turn(&self) -> IoTurn<'_> {
        loop {
            let changed = self.progress.changed();
            if let Some(turn) = self.try_io_turn() {
                return turn;
            }
            changed.await;
        }
    }

    /// Starts the I/O task unless it is running or there is nothing to do; under `always`,
    /// also wakes it while it has rounds in flight and a slot free, once enough is staged
    /// to start an overlapping round at once. Callers that stage batches and answer later (a
    /// connection whose writer is busy with an earlier request) kick right after staging,
    /// so the write and fsync start at once.
    pub fn kick(self: &Rc<Self>) {
        let wake = if self.io_busy.get() {
            self.io_signal.accepting.get()
                && self.state.borrow().pending.len() >= OVERLAP_MIN_PENDING_BYTES
        } else {
            self.has_io_work()
        };
        if wake {
            self.io_signal.watch.notify_all();
        }
    }

    fn has_io_work(&self) -> bool {
        let st = self.state.borrow();
        if st.check_io().is_err() {
            return false;
        }
        !st.pending.is_empty()
            || st.is_rolling()
            || (self.config.fsync == FsyncPolicy::Always && st.durable_offset < st.written_offset)
    }

    /// One round of I/O under `never` and `interval` (`always` runs [`Self::commit_rounds`]):
    /// write what is pending, sync if the policy says so, roll if asked.
    async fn run_io(&self) -> Result<(), StorageError> {
        let sync = match self.config.fsync {
            FsyncPolicy::Always => true,
            FsyncPolicy::Interval(every) => self.state.borrow().last_sync.elapsed() >= every,
            FsyncPolicy::Never => false,
        };
        self.write_pending().await?;
        if self.config.fsync != FsyncPolicy::Always {
            // Acknowledged once written: wake the appenders now, not after the sync.
            self.progress.notify_all();
        }
        if sync {
            self.sync_written().await?;
        }
        if self.state.borrow().is_rolling() {
            self.roll().await?;
        }
        Ok(())
    }

    /// Hands the pending buffer to the kernel with one write.
    pub(super) async fn write_pending(&self) -> Result<(), StorageError> {
        // Never write where a pre-extension job is still zeroing (see `prealloc`).
        self.wait_prealloc(|| {
            let st = self.state.borrow();
            st.pending_position + st.pending.len() as u64
        })
        .await;
        let (buf, position, end_offset, wal, batches) = {
            let mut st = self.state.borrow_mut();
            st.check_io()?;
            if st.pending.is_empty() {
                return Ok(());
            }
            let capacity = st.pending.len().max(PENDING_CAPACITY_MIN_BYTES);
            let buf = std::mem::replace(&mut st.pending, buffers::take(capacity));
            let batches = std::mem::take(&mut st.pending_batches);
            let position = st.pending_position;
            st.pending_position += buf.len() as u64;
            let wal = st.active_writer().wal.clone();
            // Everything staged so far is in `buf`, so it ends at `next_offset`; batches staged
            // while the write is in flight start at the new `pending_position`.
            debug_assert!(
                st.next_offset > st.written_offset,
                "pending bytes hold offsets"
            );
            (buf, position, st.next_offset, wal, batches)
        };
        let len = buf.len();
        let wal_busy = self.pre_extending() || self.writing_back();
        let result = match inline::route(len, wal_busy) {
            Route::Inline => {
                let result = inline::write(&wal, &buf, position);
                buffers::give(buf);
                result.map_err(Into::into)
            }
            Route::Ring => {
                let _in_flight = RingWrite::start();
                let (result, buf) = wal.write_at_reuse(buf, position).await;
                buffers::give(buf);
                result
            }
        };
        match result {
            Ok(written) if written == len => {
                let mut st = self.state.borrow_mut();
                assert!(
                    end_offset >= st.written_offset,
                    "writes land in offset order"
                );
                st.written_offset = end_offset;
                st.assert_watermarks();
                self.bump(|s| s.writes += 1);
                crate::metrics::io::record_write_round(batches);
                drop(st);
                let written_to = position + len as u64;
                if self.config.fsync == FsyncPolicy::Always {
                    self.pre_extend(written_to, len as u64);
                } else {
                    self.write_back(written_to);
                }
                if written_to >= self.config.segment_bytes / 2 {
                    // Half full: the roll's files are made ahead (see `spare`).
                    self.make_spare();
                }
                Ok(())
            }
            outcome => {
                let error = match outcome {
                    Ok(written) => std::io::Error::new(
                        std::io::ErrorKind::StorageFull,
                        format!("short write: {written} of {len} bytes"),
                    ),
                    Err(e) => e.into(),
                };
                self.roll_back_unwritten(position, error.kind());
                // Cut whatever part of the write did land, so the file ends where the log does.
                self.cut_wal(&wal, position).await;
                Err(StorageError::io(&self.dir, error))
            }
        }
    }

    /// Forgets every batch at or after WAL position `position` of the active segment: they
    /// were never written, their appenders get an error, and their offsets are reused.
    fn roll_back_unwritten(&self, position: u64, kind: std::io::ErrorKind) {
        let mut st = self.state.borrow_mut();
        let written = st.written_offset;
        let active = st.segments.active_mut();
        let keep = (0..active.index.len())
            .find(|&i| u64::from(active.index.get(i).position) >= position)
            .unwrap_or(active.index.len());
        active.index.truncate(keep);
        active.size_bytes = position;
        active.next_offset = written;
        st.next_offset = written;
        st.pending.clear();
        st.pending_batches = 0;
        st.pending_position = position;
        // Whatever asked for a roll re-checks against the smaller segment.
        st.roll_settled();
        st.rollbacks.push(written, kind);
        st.assert_watermarks();
        warn!(dir = %self.dir.display(), from_offset = written, ?kind, "write failed; unwritten batches rolled back");
    }

    /// Truncates the active `.wal` at `position` (a failed write's start, or the durable
    /// watermark after a failed sync); true if it did. With an index journal, the cut takes
    /// the journal's region with it, which may hold the only durable copy of acknowledged
    /// batches' entries: so the `.idx` is synced first, and the region is made again after.
    /// If the `.idx` cannot be synced, the `.wal` is left as it is and the log fenced: the
    /// next open judges the files.
    async fn cut_wal(&self, wal: &glommio::io::BufferedFile, position: u64) -> bool {
        let (idx, region_at, idx_entries) = {
            let st = self.state.borrow();
            let writer = st.active_writer();
            let entries = st.segments.active().index.len();
            (
                Rc::clone(&writer.idx),
                writer.journal.as_ref().map(|j| j.region_at),
                entries,
            )
        };
        if region_at.is_some() {
            if let Err(error) = idx.fdatasync().await {
                let reason = format!("index fdatasync failed: {error}");
                warn!(dir = %self.dir.display(), %reason, "partition fenced; the WAL is not cut");
                self.state.borrow_mut().fence(reason);
                return false;
            }
            self.idx_synced_to(idx_entries.min(self.written_entries()));
        }
        if let Err(error) = wal.truncate(position).await {
            warn!(dir = %self.dir.display(), %error, "could not cut the WAL");
            return false;
        }
        self.prealloc_cut(position);
        if let Some(region_at) = region_at
            && let Err(error) =
                crate::storage::segment::make_region(wal, &self.dir, position, region_at).await
        {
            // Rounds then write records past the end of the file, which recovery does not
            // find where it looks; so they sync the .idx too: fence rather than risk it.
            let reason = format!("index journal region not made again: {error}");
            warn!(dir = %self.dir.display(), %reason, "partition fenced");
            self.state.borrow_mut().fence(reason);
        }
        true
    }

    /// After a failed fdatasync under `always`, with no write in flight: cuts the active
    /// segment back to the durable watermark (WAL truncated, index entries zeroed), so that
    /// the next open cannot recover the batches whose sync failed. After a failed
    /// write-back the kernel may keep their pages in the page cache, clean and readable,
    /// and no later fdatasync reports the error again (the open-time sync included):
    /// recovery would keep them, serve them, and acknowledge batches on top of bytes that
    /// are not on the disk, all lost at the next power cut. Truncation drops those pages.
    /// Best effort: the partition is fenced either way. (Under `interval` and `never` the
    /// written batches were acknowledged already, and stay.)
    pub(super) async fn cut_to_durable(&self) {
        if self.config.fsync != FsyncPolicy::Always {
            return;
        }
        self.wait_prealloc(|| u64::MAX).await;
        let (wal, position) = {
            let mut st = self.state.borrow_mut();
            let durable = st.durable_offset;
            let active = st.segments.active_mut();
            let index = &mut active.index;
            let keep = index.entries_below(durable);
            let position = if keep < index.len() {
                u64::from(index.get(keep).position)
            } else {
                index.last().map_or(0, |e| e.end_position())
            };
            index.truncate(keep);
            let Some(writer) = active.writer.as_ref() else {
                return;
            };
            (Rc::clone(&writer.wal), position)
        };
        if self.cut_wal(&wal, position).await {
            warn!(dir = %self.dir.display(), wal_bytes = position, "cut back to the durable watermark");
        }
    }

    /// fdatasyncs the active `.wal` and `.idx` together, covering everything written. The
    /// seal of the segment before goes first: the durable watermark covers its batches too.
    async fn sync_written(&self) -> Result<(), StorageError> {
        self.settle_seal().await?;
        let idx_behind = self.idx_behind_journal();
        let (target, writer_wal, writer_idx) = {
            let st = self.state.borrow();
            st.check_io()?;
            if st.durable_offset >= st.written_offset && !idx_behind {
                return Ok(());
            }
            let writer = st.active_writer();
            (st.written_offset, writer.wal.clone(), writer.idx.clone())
        };
        let idx_entries = self.written_entries();
        let started = Instant::now();
        let (wal, idx) =
            futures_lite::future::zip(writer_wal.fdatasync(), writer_idx.fdatasync()).await;
        crate::metrics::io::record_fsync(started.elapsed(), wal.is_ok() && idx.is_ok());
        if let Err(e) = wal.and(idx) {
            let reason = format!("fdatasync failed: {e}");
            warn!(dir = %self.dir.display(), %reason, "partition fenced");
            self.state.borrow_mut().fence(reason.clone());
            self.cut_to_durable().await;
            return Err(StorageError::Fenced { reason });
        }
        self.idx_synced_to(idx_entries);
        let mut st = self.state.borrow_mut();
        st.durable_offset = st.durable_offset.max(target);
        st.assert_watermarks();
        self.bump(|s| s.syncs += 1);
        st.last_sync = Instant::now();
        Ok(())
    }

    /// Closes the active segment and starts a new one; the old segment's fdatasyncs run
    /// behind, as its seal ([`super::seal`]). Runs inside the I/O task, with no round in
    /// flight.
    pub(super) async fn roll(&self) -> Result<(), StorageError> {
        // Staging waits while the log is `Rolling` (and is refused once it is `Closing`),
        // so after this write the active segment is complete.
        self.write_pending().await?;
        let always = self.config.fsync == FsyncPolicy::Always;
        if always {
            // Usually a no-op: the rounds synced what they wrote.
            self.sync_written().await?;
        }
        // Seals run behind, up to a bound (back-pressure from a disk slower than the ingest).
        let started = Instant::now();
        if self.seals_pending() >= super::seal::SEALS_PENDING_MAX {
            self.settle_seal().await?;
        }
        let seal_wait = started.elapsed();
        let base = {
            let mut st = self.state.borrow_mut();
            assert!(st.pending.is_empty(), "roll with pending bytes");
            if st.segments.active().size_bytes == 0 {
                // A failed write emptied the segment again: it has room for anything.
                st.roll_settled();
                return Ok(());
            }
            assert_eq!(
                st.written_offset, st.next_offset,
                "a closed segment is written whole"
            );
            assert!(
                !always || st.durable_offset == st.next_offset,
                "under always a closed segment is durable"
            );
            st.next_offset
        };
        // Taken while nothing can be staged: the new segment numbers on from here.
        let raft_base = self.rolled_raft_base();
        let trimmed = self.trim_active_files().await;
        if trimmed.is_ok() {
            self.state.borrow_mut().segments.active_mut().seal();
        }
        let created = match trimmed {
            Ok(files) => self
                .next_segment(base, raft_base)
                .await
                .map(|created| (created, files)),
            Err(e) => Err(e),
        };
        let created = match created {
            Ok((created, files)) => {
                self.start_seal(files, base);
                created
            }
            Err(error) => {
                // The old segment is closed and no new one is writable: nothing can be
                // appended until a restart reopens the log.
                let reason = format!("segment roll failed: {error}");
                warn!(dir = %self.dir.display(), %reason, "partition fenced");
                self.state.borrow_mut().fence(reason);
                return Err(error);
            }
        };
        let mut st = self.state.borrow_mut();
        st.segments.push_active(created);
        st.pending_position = 0;
        st.roll_settled();
        st.assert_watermarks();
        drop(st);
        self.pre_extend(0, 0);
        info!(
            dir = %self.dir.display(),
            base_offset = base,
            seal_wait_ms = seal_wait.as_millis() as u64,
            roll_ms = started.elapsed().as_millis() as u64,
            "segment rolled"
        );
        Ok(())
    }

    /// Trims the active segment's index to its entries and its WAL to its batches (cutting
    /// pre-extended zeros), so the next open finds the files exactly as long as the entries
    /// say once the returned files are fdatasynced. Staging must already be stopped (the
    /// log is rolling or closing).
    async fn trim_active_files(&self) -> Result<SealFiles, StorageError> {
        self.wait_prealloc(|| u64::MAX).await;
        assert!(
            !self.idx_behind_journal(),
            "the .idx is synced before the trim cuts the index journal off"
        );
        let reserves = self.reserves_wal_space();
        let (files, size, file_len) = {
            let mut st = self.state.borrow_mut();
            let active = st.segments.active_mut();
            active.trim_index()?;
            let size = active.size_bytes;
            let file_len = active
                .reader()
                .metadata()
                .map_err(|e| StorageError::io(&self.dir, e))?
                .len();
            let writer = active
                .writer
                .as_ref()
                .expect("the active segment is writable");
            let files = SealFiles {
                base_offset: active.base_offset,
                wal: Rc::clone(&writer.wal),
                idx: Rc::clone(&writer.idx),
                reserved_past: reserves.then_some(size),
            };
            (files, size, file_len)
        };
        if file_len > size {
            let io = |e: glommio::GlommioError<()>| StorageError::io(&self.dir, e.into());
            files.wal.truncate(size).await.map_err(io)?;
            self.prealloc_cut(size);
        }
        Ok(files)
    }

    /// fsyncs the partition directory (new, renamed and removed segment files).
    pub(crate) async fn sync_dir(&self) -> Result<(), StorageError> {
        self.directory
            .sync()
            .await
            .map_err(|e| StorageError::io(&self.dir, e.into()))
    }

    /// Closes the active segment if it holds data and is older than `age` (the topic's
    /// current segment age: its retention may have been altered since the log opened), so
    /// that retention can delete it even when the partition receives little.
    pub async fn roll_if_aged(self: &Rc<Self>, age: std::time::Duration) {
        let aged = {
            let mut st = self.state.borrow_mut();
            let active = st.segments.active();
            let aged = st.check_open().is_ok()
                && active.size_bytes > 0
                && active.opened_at.elapsed() >= age.min(self.config.segment_age);
            aged && st.request_roll()
        };
        while aged && self.state.borrow().is_rolling() {
            self.wait_for_roll().await;
        }
    }

    /// True when written data has waited longer than `interval` for an fsync.
    pub fn sync_due(&self, interval: std::time::Duration) -> bool {
        let st = self.state.borrow();
        st.durable_offset < st.next_offset && st.last_sync.elapsed() >= interval
    }

    /// Makes everything written durable now (the `interval` policy's timer calls this).
    pub async fn sync(self: &Rc<Self>) -> Result<(), StorageError> {
        let _turn = self.io_turn().await;
        self.write_pending().await?;
        self.sync_written().await
    }

    /// Closes the log: refuses every later stage (with `Closed`), writes and syncs what was
    /// staged before, trims the active index to its entries and writes the clean-shutdown
    /// marker, so the next open skips the recovery scan. Every staged batch gets its answer:
    /// acknowledged, or an error if the final write or sync fails. The log is closed
    /// afterwards either way, and its I/O task ends.
    pub async fn close(self: &Rc<Self>) -> Result<(), StorageError> {
        self.state.borrow_mut().begin_close()?;
        // Appenders waiting for a roll re-check, and get `Closed`.
        self.progress.notify_all();
        let turn = self.io_turn().await;
        let settled = self.settle_and_seal().await;
        self.state.borrow_mut().finish_close();
        drop(turn);
        // The I/O task sees the log closed and ends.
        self.io_signal.watch.notify_all();
        settled
    }

    async fn settle_and_seal(&self) -> Result<(), StorageError> {
        self.write_pending().await?;
        self.sync_written().await?;
        let files = self.trim_active_files().await?;
        files
            .finish()
            .await
            .map_err(|e| StorageError::io(&self.dir, e))?;
        open::write_clean_marker(&self.dir)?;
        self.sync_dir().await
    }
}
