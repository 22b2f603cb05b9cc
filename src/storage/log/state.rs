//! The mutable state of a partition log: watermarks, the pending buffer, the lifecycle and
//! the record of failed writes. Only the log's own modules change it.

use std::collections::VecDeque;
use std::time::Instant;

use crate::storage::StorageError;
use crate::storage::log::segments::SegmentList;
use crate::storage::segment::Writer;

/// Where a partition log is in its life. Each state says what staging and the I/O task may
/// do; the transitions are the methods of [`State`].
///
/// ```text
///   Open <-> Rolling --+--> Closing --> Closed
///     |         |      |
///     +---------+------+--> Fenced
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lifecycle {
    /// Staging is accepted.
    Open,
    /// A batch did not fit the active segment (or the segment grew old): staging waits
    /// until the I/O task has rolled to a new segment, then goes back to `Open`.
    Rolling,
    /// [`PartitionLog::close`] has begun: staging is refused with `Closed`, and close
    /// writes and syncs what was staged before.
    ///
    /// [`PartitionLog::close`]: crate::storage::PartitionLog::close
    Closing,
    /// Closed; nothing is written again. Terminal.
    Closed,
    /// An fdatasync or a roll failed (see the module docs of `log`): every later append and
    /// wait fails until a restart runs recovery. Terminal.
    Fenced(String),
}

/// Failed writes remembered for tickets staged before them (see [`Rollbacks::lost`]).
const ROLLBACKS_KEPT: usize = 64;

/// The writes that failed: for each, the offset everything from which was rolled back.
/// Only the last [`ROLLBACKS_KEPT`] are kept, so a disk that stays full while producers
/// retry does not grow the log's memory.
#[derive(Debug, Default)]
pub(crate) struct Rollbacks {
    /// (first offset rolled back, error), oldest first.
    recent: VecDeque<(u64, std::io::ErrorKind)>,
    /// Failures ever; a ticket's epoch is this count when it was staged.
    count: u64,
}

impl Rollbacks {
    pub(crate) fn epoch(&self) -> u64 {
        self.count
    }

    pub(crate) fn push(&mut self, from_offset: u64, kind: std::io::ErrorKind) {
        debug_assert!(
            self.recent
                .back()
                .is_none_or(|&(from, _)| from <= from_offset),
            "the written watermark never moves back"
        );
        if self.recent.len() == ROLLBACKS_KEPT {
            self.recent.pop_front();
        }
        self.recent.push_back((from_offset, kind));
        self.count += 1;
    }

    /// The error that lost a batch staged at `epoch` and ending at `end_offset`, if a write
    /// failed after it was staged and before it was written. The first failure after its
    /// staging decides: watermarks only grow, so a batch that ended at or below that
    /// failure's offset had been written.
    ///
    /// A batch staged more than [`ROLLBACKS_KEPT`] failures ago cannot be told apart any
    /// more; it is reported lost (a client then retries a batch that may be stored: a
    /// duplicate at worst, never a false acknowledgement).
    pub(crate) fn lost(&self, epoch: u64, end_offset: u64) -> Option<std::io::ErrorKind> {
        if epoch >= self.count {
            return None;
        }
        let first_kept = self.count - self.recent.len() as u64;
        let Some(at) = epoch.checked_sub(first_kept) else {
            return self.recent.front().map(|&(_, kind)| kind);
        };
        let (from, kind) = self.recent[usize::try_from(at).expect("at most ROLLBACKS_KEPT")];
        (end_offset > from).then_some(kind)
    }

    /// Failures remembered now (at most [`ROLLBACKS_KEPT`]).
    #[cfg(test)]
    pub(crate) fn kept(&self) -> usize {
        self.recent.len()
    }
}

pub(crate) struct State {
    /// Segments in offset order; the last one is the active segment.
    pub(super) segments: SegmentList,
    /// `next_offset >= written_offset >= durable_offset` (see [`State::assert_watermarks`]).
    pub(super) next_offset: u64,
    pub(super) written_offset: u64,
    pub(super) durable_offset: u64,
    /// Staged bytes not yet handed to the kernel; they belong to the active segment from
    /// WAL position `pending_position` on.
    pub(super) pending: Vec<u8>,
    pub(super) pending_position: u64,
    /// Batches in `pending`: the size of the next group-commit round, for metrics.
    pub(super) pending_batches: u64,
    pub(super) lifecycle: Lifecycle,
    pub(super) rollbacks: Rollbacks,
    pub(super) last_sync: Instant,
}

impl State {
    pub(super) fn new(segments: SegmentList, pending_capacity: usize) -> State {
        let next_offset = segments.active().next_offset;
        let pending_position = segments.active().size_bytes;
        State {
            segments,
            next_offset,
            written_offset: next_offset,
            durable_offset: next_offset,
            pending: Vec::with_capacity(pending_capacity),
            pending_position,
            pending_batches: 0,
            lifecycle: Lifecycle::Open,
            rollbacks: Rollbacks::default(),
            last_sync: Instant::now(),
        }
    }

    /// Staged, written, durable: each a prefix of the one before, and the active segment
    /// ends where staging does.
    fn watermarks_ordered(&self) -> bool {
        self.next_offset >= self.written_offset
            && self.written_offset >= self.durable_offset
            && self.next_offset == self.segments.active().next_offset
    }

    /// Checks the watermarks after an I/O step (once per round: cheap enough for every
    /// build).
    pub(super) fn assert_watermarks(&self) {
        assert!(
            self.watermarks_ordered(),
            "watermarks out of order: next {} written {} durable {} active segment ends {}",
            self.next_offset,
            self.written_offset,
            self.durable_offset,
            self.segments.active().next_offset
        );
    }

    /// Checks the watermarks after staging (per batch: debug builds only).
    #[inline]
    pub(super) fn debug_assert_watermarks(&self) {
        debug_assert!(self.watermarks_ordered(), "watermarks out of order");
    }

    /// Ok while batches may be staged (or are about to be, after a roll).
    pub(crate) fn check_open(&self) -> Result<(), StorageError> {
        match &self.lifecycle {
            Lifecycle::Open | Lifecycle::Rolling => Ok(()),
            Lifecycle::Closing | Lifecycle::Closed => Err(StorageError::Closed),
            Lifecycle::Fenced(reason) => Err(fenced(reason)),
        }
    }

    /// Ok while the I/O task (or close) may still write and sync.
    pub(super) fn check_io(&self) -> Result<(), StorageError> {
        match &self.lifecycle {
            Lifecycle::Open | Lifecycle::Rolling | Lifecycle::Closing => Ok(()),
            Lifecycle::Closed => Err(StorageError::Closed),
            Lifecycle::Fenced(reason) => Err(fenced(reason)),
        }
    }

    /// The fence's error, if the partition is fenced.
    pub(super) fn fence_error(&self) -> Option<StorageError> {
        match &self.lifecycle {
            Lifecycle::Fenced(reason) => Some(fenced(reason)),
            _ => None,
        }
    }

    /// Nothing will ever be written again.
    pub(super) fn is_terminal(&self) -> bool {
        matches!(self.lifecycle, Lifecycle::Closed | Lifecycle::Fenced(_))
    }

    pub(super) fn is_rolling(&self) -> bool {
        self.lifecycle == Lifecycle::Rolling
    }

    /// Open -> Rolling. False (and nothing changes) unless the log is open or rolling.
    pub(super) fn request_roll(&mut self) -> bool {
        match self.lifecycle {
            Lifecycle::Open | Lifecycle::Rolling => {
                self.lifecycle = Lifecycle::Rolling;
                true
            }
            _ => false,
        }
    }

    /// Rolling -> Open: the roll is done, or no longer needed. Other states stay.
    pub(super) fn roll_settled(&mut self) {
        if self.lifecycle == Lifecycle::Rolling {
            self.lifecycle = Lifecycle::Open;
        }
    }

    /// Open or Rolling -> Closing: staging is refused from now on.
    pub(super) fn begin_close(&mut self) -> Result<(), StorageError> {
        self.check_open()?;
        self.lifecycle = Lifecycle::Closing;
        Ok(())
    }

    /// Closing -> Closed (a fence stays).
    pub(super) fn finish_close(&mut self) {
        debug_assert!(matches!(
            self.lifecycle,
            Lifecycle::Closing | Lifecycle::Fenced(_)
        ));
        if self.lifecycle == Lifecycle::Closing {
            // Close wrote the pending buffer, or a failed write rolled it back. (A fence
            // may leave batches pending: their appenders get `Fenced`.)
            debug_assert!(self.pending.is_empty(), "close settles every staged batch");
            self.lifecycle = Lifecycle::Closed;
        }
    }

    /// Any state -> Fenced (the first reason is kept).
    pub(super) fn fence(&mut self, reason: String) {
        if !matches!(self.lifecycle, Lifecycle::Fenced(_)) {
            self.lifecycle = Lifecycle::Fenced(reason);
        }
    }

    pub(super) fn active_writer(&self) -> &Writer {
        self.segments
            .active()
            .writer
            .as_ref()
            .expect("the active segment is writable")
    }
}

fn fenced(reason: &str) -> StorageError {
    StorageError::Fenced {
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::ErrorKind;

    #[test]
    fn rollbacks_stay_bounded_and_decide_recent_tickets_exactly() {
        let mut rollbacks = Rollbacks::default();
        // Staged at epoch 0, ending at offset 10: written before a failure at 10 rolled
        // back what followed.
        let early = (rollbacks.epoch(), 10);
        rollbacks.push(10, ErrorKind::StorageFull);
        let lost = (rollbacks.epoch(), 12);
        rollbacks.push(10, ErrorKind::StorageFull);
        assert_eq!(rollbacks.lost(early.0, early.1), None);
        assert_eq!(rollbacks.lost(lost.0, lost.1), Some(ErrorKind::StorageFull));
        // A disk that stays full while producers retry: far more failures than are kept.
        for _ in 0..10_000 {
            rollbacks.push(10, ErrorKind::StorageFull);
        }
        assert_eq!(rollbacks.kept(), ROLLBACKS_KEPT);
        assert_eq!(rollbacks.epoch(), 10_002);
        // A ticket staged after the last failure is not lost; one staged just before it is
        // decided exactly; one older than what is kept is reported lost, never acked.
        assert_eq!(rollbacks.lost(rollbacks.epoch(), 11), None);
        assert_eq!(rollbacks.lost(rollbacks.epoch() - 1, 10), None);
        assert_eq!(
            rollbacks.lost(rollbacks.epoch() - 1, 11),
            Some(ErrorKind::StorageFull)
        );
        assert_eq!(
            rollbacks.lost(early.0, early.1),
            Some(ErrorKind::StorageFull)
        );
    }
}
