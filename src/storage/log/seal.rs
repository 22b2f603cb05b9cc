//! Sealing a rolled segment off the path of new batches.
//!
//! A roll trims the old segment's files to their contents (the index to its entries, the
//! WAL to its batches), creates the next segment, and lets staging go on into it at once.
//! The old segment's fdatasyncs run meanwhile as a task of their own, the *seal*: its data
//! under `never` and `interval`, where nothing made it durable yet, and the trims under
//! every policy (there it also gives back the space reserved past the WAL's end that the
//! segment did not fill, `super::spare`). When they are done, the seal moves `recovery-point`'s `sealed` base to the
//! next segment (`storage::open`): from then on a crash cannot cut the old segment.
//!
//! Before, the roll waited for those fdatasyncs. Under `never` at the maximum rate that is
//! most of a segment's bytes still dirty, up to a second and a half on a disk slower than
//! the ingest, and every ack of the partition waited with it (docs/LATENCY.md, (h)).
//!
//! Seals run one after the other: each one waits for the seal before it, so `sealed` only
//! moves up, one segment at a time. A roll does not wait for them unless
//! [`SEALS_PENDING_MAX`] are pending (a disk that stays slower than the ingest: back-pressure,
//! and a bound on the dirty data of a partition). Whatever makes later offsets durable
//! waits for every pending seal first (`sync_written`: the `interval` sync, and close), so
//! the durable watermark never passes a segment whose seal is not done. Under `always` the old segment's batches were
//! durable before the roll (its rounds synced them); its seal only makes the trims durable.
//!
//! # A crash while a seal runs
//!
//! | when | on disk | the next open |
//! |---|---|---|
//! | `kill -9` (the page cache survives) | both segments whole; `sealed` at or below the old segment | scans the old segment (clean), fdatasyncs it, then writes the new recovery point |
//! | power cut before the fdatasyncs are done | the old segment's tail may be torn or gone, its index long or short; `sealed` at or below it | scans it and cuts it at the first bad batch, as it does the active segment; the segments after a cut are quarantined |
//! | power cut after them, before `recovery-point` is replaced | the old segment whole; `sealed` at or below it | scans it: clean |
//! | power cut later | the old segment whole; `sealed` above it | checks it, and never cuts it |
//!
//! Nothing acknowledged under `always` is in the first two rows: its batches were durable
//! before the roll. A failed fdatasync fences the log, as a failed commit round does.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use glommio::io::BufferedFile;
use glommio::task::JoinHandle;
use tracing::{info, warn};

use super::PartitionLog;
use crate::storage::StorageError;
use crate::storage::open::{self, RecoveryPoint};

/// The write handles of a closed segment whose seal is to run.
pub(super) struct SealFiles {
    pub(super) base_offset: u64,
    pub(super) wal: Rc<BufferedFile>,
    pub(super) idx: Rc<BufferedFile>,
    /// The WAL's length, when blocks may be reserved past it (`super::spare`).
    pub(super) reserved_past: Option<u64>,
}

impl SealFiles {
    /// Gives back the WAL's reserved blocks past its end, if any (a same-size truncate
    /// frees them; the bytes do not change), then fdatasyncs both files, together.
    pub(super) async fn finish(&self) -> std::io::Result<()> {
        if let Some(len) = self.reserved_past {
            self.wal.truncate(len).await?;
        }
        let (wal, idx) =
            futures_lite::future::zip(self.wal.fdatasync(), self.idx.fdatasync()).await;
        wal.and(idx).map_err(Into::into)
    }
}

/// Seals started and not finished, at most, before a roll waits for them. At the default
/// segment size that is 1 GiB of a partition's data on its way to the disk.
pub(super) const SEALS_PENDING_MAX: usize = 4;

/// Where sealing stands for one log.
pub(super) struct Seal {
    /// The seal of the last segment rolled, until someone waits for it. It waits for the
    /// seals before it, so waiting for it waits for them all.
    running: RefCell<Option<JoinHandle<Result<(), StorageError>>>>,
    /// Seals started and not finished.
    pending: Rc<Cell<usize>>,
    /// What `recovery-point` says now.
    point: Cell<RecoveryPoint>,
}

impl Seal {
    /// `point`: the recovery point the open wrote.
    pub(super) fn new(point: RecoveryPoint) -> Seal {
        Seal {
            running: RefCell::new(None),
            pending: Rc::new(Cell::new(0)),
            point: Cell::new(point),
        }
    }
}

impl PartitionLog {
    /// Seals started and not finished.
    pub(super) fn seals_pending(&self) -> usize {
        self.seal.pending.get()
    }

    /// Starts the seal of the segment just closed, whose next segment begins at
    /// `next_base`. It waits for the seal before it, if that one still runs.
    pub(super) fn start_seal(&self, files: SealFiles, next_base: u64) {
        assert!(
            files.base_offset < next_base,
            "a sealed segment holds batches"
        );
        let log = self
            .me
            .upgrade()
            .expect("a log rolls only while it is alive");
        let previous = self.seal.running.borrow_mut().take();
        let pending = Rc::clone(&self.seal.pending);
        pending.set(pending.get() + 1);
        let job = glommio::spawn_local(async move {
            let sealed = match previous {
                Some(previous) => match outcome(previous.await) {
                    // A failed seal fenced the log: nothing after it is sealed.
                    Ok(()) => log.seal(files, next_base).await,
                    Err(error) => Err(error),
                },
                None => log.seal(files, next_base).await,
            };
            pending.set(pending.get() - 1);
            sealed
        })
        .detach();
        *self.seal.running.borrow_mut() = Some(job);
    }

    async fn seal(&self, files: SealFiles, next_base: u64) -> Result<(), StorageError> {
        let started = std::time::Instant::now();
        // The next segment's files may have been renamed into place with no fsync of the
        // directory (`super::spare`): that fsync makes them durable before anything counts
        // on them.
        let synced = match files.finish().await {
            Ok(()) => self.sync_dir().await,
            Err(error) => Err(StorageError::io(&self.dir, error)),
        };
        if let Err(error) = synced {
            let reason = format!("sealing segment {} failed: {error}", files.base_offset);
            warn!(dir = %self.dir.display(), %reason, "partition fenced");
            self.state.borrow_mut().fence(reason.clone());
            self.progress.notify_all();
            self.io_signal.watch.notify_all();
            return Err(StorageError::Fenced { reason });
        }
        let point = RecoveryPoint {
            opened: self.seal.point.get().opened,
            sealed: next_base,
        };
        let written = match self.dir_file.try_clone() {
            Ok(dir) => {
                glommio::executor()
                    .spawn_blocking(move || open::write_recovery_point_in(&dir, point))
                    .await
            }
            Err(error) => Err(error),
        };
        info!(
            dir = %self.dir.display(),
            base_offset = files.base_offset,
            seal_ms = started.elapsed().as_millis() as u64,
            "segment sealed"
        );
        match written {
            Ok(()) => self.seal.point.set(point),
            // Not fatal: the next start after a crash scans this segment, which is whole.
            Err(error) => {
                warn!(dir = %self.dir.display(), %error, "recovery point not moved after a seal")
            }
        }
        Ok(())
    }

    /// Waits for the seal in flight, if any, and returns its outcome (a failed seal has
    /// fenced the log).
    pub(super) async fn settle_seal(&self) -> Result<(), StorageError> {
        let running = self.seal.running.borrow_mut().take();
        let Some(job) = running else {
            return Ok(());
        };
        outcome(job.await)
    }
}

/// A seal task's result: `None` if it was cancelled (its executor is ending).
fn outcome(joined: Option<Result<(), StorageError>>) -> Result<(), StorageError> {
    joined.unwrap_or_else(|| {
        Err(StorageError::Fenced {
            reason: "a segment's seal task was cancelled".into(),
        })
    })
}
