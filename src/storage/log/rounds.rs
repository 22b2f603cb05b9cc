//! Overlapping commit rounds under `fsync = always`.
//!
//! A round writes the pending buffer and fdatasyncs `.wal` and `.idx`. With one round at a
//! time, a batch staged while a round's fdatasync is in flight waited for the rest of that
//! round and then a whole round of its own (docs/LATENCY.md, (a)). Here the I/O task starts
//! the next round (write, then fdatasync) as soon as [`OVERLAP_MIN_PENDING_BYTES`] are
//! staged, while up to [`ROUNDS_IN_FLIGHT_MAX`] rounds are in flight, and applies their
//! results strictly in the order it issued them ([`Rounds`]):
//!
//! - a round's batches are acknowledged once its own fdatasync **and** that of every round
//!   issued before it have succeeded;
//! - a failed fdatasync fences the partition: that round and every later one fail, even a
//!   later round whose own fdatasync succeeded.
//!
//! # Why each slot has descriptors of its own
//!
//! The kernel reports a write-back error once per open file description: the first
//! `fdatasync` (or `sync_file_range` wait) on that description after the error returns it,
//! and every later one on the same description returns success. With two fdatasyncs in
//! flight on one description, the error about round N's pages can be returned to round
//! N+1's call, and round N's call, finishing a moment later, reports success. Issue order
//! does not help there: round N would be acknowledged over lost pages. So each slot
//! fdatasyncs through its own pair of descriptors (`segment::Writer::sync_files`, opened
//! with the writer before anything is written), and every descriptor sees every error
//! since its own previous fdatasync. Then a round's success covers everything written
//! before it was issued, the rounds before it included, and a round's failure may be about
//! any of them: the in-order rule above is the conservative reading of both.
//!
//! A slot is free again when its round has been applied, which happens in issue order, so
//! slots are used round-robin. The I/O task holds the I/O turn from the first round it
//! starts until nothing is in flight, so rolls, `close` and interval syncs (which fdatasync
//! through slot 0) never overlap a round; a roll waits until the rounds drain.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use tracing::warn;

use super::PartitionLog;
use super::journal::RoundSync;
use crate::storage::StorageError;
use crate::storage::segment::SyncFiles;

/// Commit rounds in flight at most, per partition. Each slot costs two descriptors per
/// active segment. Three lets two rounds wait behind a running device flush, so both ride
/// the next one (the block layer merges pending flushes).
pub(crate) const ROUNDS_IN_FLIGHT_MAX: usize = 3;

/// A round starts while others are in flight only once this much is pending. What overlap
/// saves is the write and data write-back of the next round, which run during the flush
/// in flight; for a few small batches that is little, and an extra round costs a whole
/// write and fdatasync pair (on a loaded 2-CPU VM, half-load latency doubled when every
/// staged batch started a round of its own: docs/LATENCY.md, (f)). Smaller batches wait
/// for the next round to finish, as in plain group commit.
pub(crate) const OVERLAP_MIN_PENDING_BYTES: usize = 64 * 1024;

/// One round issued and not yet applied.
#[derive(Debug)]
struct Round {
    slot: usize,
    /// Everything below this offset was written before the round's fdatasync was issued.
    target: u64,
    issued: Instant,
    /// Entries of the active `.idx` written when it was issued: durable once its
    /// fdatasync succeeds, if that synced the `.idx` too.
    idx_entries: usize,
    /// Its fdatasync's result, once it finished.
    outcome: Option<Result<(), String>>,
}

/// What applying finished rounds in issue order decides.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Applied {
    /// These rounds, and every one before them, succeeded: `offset` is durable.
    Durable { offset: u64, rounds: u64 },
    /// This round failed: it and every later round fail.
    Failed { reason: String },
}

/// The rounds in flight, in issue order (sans-IO: the I/O task feeds it).
#[derive(Debug, Default)]
pub(super) struct Rounds {
    queue: VecDeque<Round>,
    next_slot: usize,
    /// A round failed: later rounds are drained and their results ignored.
    failed: bool,
}

impl Rounds {
    /// A new I/O turn: nothing is in flight since the last one ended, and a failure then
    /// was answered then (its log is fenced).
    pub(super) fn begin_turn(&mut self) {
        assert!(
            self.queue.is_empty(),
            "an I/O turn ends with no round in flight"
        );
        self.failed = false;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub(super) fn is_full(&self) -> bool {
        self.queue.len() == ROUNDS_IN_FLIGHT_MAX
    }

    /// The offset the newest round in flight makes durable.
    pub(super) fn issued_to(&self) -> Option<u64> {
        self.queue.back().map(|r| r.target)
    }

    /// Records a round whose fdatasync is about to be issued; returns its slot.
    pub(super) fn issue(&mut self, target: u64, idx_entries: usize, now: Instant) -> usize {
        assert!(!self.is_full(), "a round issued with every slot in flight");
        assert!(
            self.issued_to().is_none_or(|to| to < target),
            "each round covers more than the one before"
        );
        let slot = self.next_slot;
        self.next_slot = (slot + 1) % ROUNDS_IN_FLIGHT_MAX;
        self.queue.push_back(Round {
            slot,
            target,
            issued: now,
            idx_entries,
            outcome: None,
        });
        slot
    }

    /// Records the result of the fdatasync in flight on `slot`; returns when it was issued,
    /// and the `.idx` entries it covered.
    pub(super) fn finish(&mut self, slot: usize, outcome: Result<(), String>) -> (Instant, usize) {
        let round = self
            .queue
            .iter_mut()
            .find(|r| r.slot == slot && r.outcome.is_none())
            .expect("a round in flight on that slot");
        round.outcome = Some(outcome);
        (round.issued, round.idx_entries)
    }

    /// Pops the finished rounds at the front, in issue order, and says what they decide;
    /// `None` when the oldest round is still in flight (or nothing is left to decide).
    /// Call until `None`: successes before a failure come out first.
    pub(super) fn apply(&mut self) -> Option<Applied> {
        let mut durable: Option<(u64, u64)> = None;
        while let Some(front) = self.queue.front() {
            match &front.outcome {
                None => break,
                Some(_) if self.failed => {
                    self.queue.pop_front();
                }
                Some(Ok(())) => {
                    let rounds = durable.map_or(0, |(_, n)| n) + 1;
                    durable = Some((front.target, rounds));
                    self.queue.pop_front();
                }
                Some(Err(_)) if durable.is_some() => break,
                Some(Err(reason)) => {
                    let reason = reason.clone();
                    self.queue.pop_front();
                    self.failed = true;
                    return Some(Applied::Failed { reason });
                }
            }
        }
        durable.map(|(offset, rounds)| Applied::Durable { offset, rounds })
    }
}

/// The fdatasync futures of the rounds in flight, one per slot. Boxed once for the I/O
/// task's life and refilled in place, so a round allocates nothing here.
pub(super) struct SyncSlots<F> {
    futures: Vec<Pin<Box<Option<F>>>>,
}

impl<F: Future<Output = std::io::Result<bool>>> SyncSlots<F> {
    pub(super) fn new() -> Self {
        SyncSlots {
            futures: (0..ROUNDS_IN_FLIGHT_MAX).map(|_| Box::pin(None)).collect(),
        }
    }

    fn start(&mut self, slot: usize, future: F) {
        debug_assert!(self.futures[slot].is_none(), "slot {slot} is busy");
        self.futures[slot].as_mut().set(Some(future));
    }

    /// Polls every fdatasync in flight: the first that finished, with its slot.
    fn poll_finished(&mut self, cx: &mut Context<'_>) -> Poll<(usize, std::io::Result<bool>)> {
        for (slot, future) in self.futures.iter_mut().enumerate() {
            if let Some(running) = future.as_mut().as_pin_mut()
                && let Poll::Ready(outcome) = running.poll(cx)
            {
                future.as_mut().set(None);
                return Poll::Ready((slot, outcome));
            }
        }
        Poll::Pending
    }

    /// The first fdatasync that finished, without waiting. (Polling a new one also submits
    /// it: glommio queues the operation when its future first runs.)
    async fn finished_now(&mut self) -> Option<(usize, std::io::Result<bool>)> {
        std::future::poll_fn(|cx| match self.poll_finished(cx) {
            Poll::Ready(finished) => Poll::Ready(Some(finished)),
            Poll::Pending => Poll::Ready(None),
        })
        .await
    }
}

/// What the I/O task waits for between rounds.
enum Event {
    Synced(usize, std::io::Result<bool>),
    Staged,
}

impl PartitionLog {
    /// Runs overlapping commit rounds until nothing is pending or in flight (then rolls, if
    /// asked). The caller holds the I/O turn, and `rounds` (empty between turns, kept so
    /// its queue is not allocated again on every turn). `make` is [`super::journal::sync_round`]
    /// (passed in so the future's type can be named by the caller's `SyncSlots`).
    pub(super) async fn commit_rounds<F>(
        &self,
        slots: &mut SyncSlots<F>,
        rounds: &mut Rounds,
        make: impl Fn(SyncFiles, RoundSync) -> F,
    ) -> Result<(), StorageError>
    where
        F: Future<Output = std::io::Result<bool>>,
    {
        rounds.begin_turn();
        let mut write_failed = None;
        loop {
            while let Some((slot, outcome)) = slots.finished_now().await {
                self.finish_round(rounds, slot, outcome);
            }
            if write_failed.is_none() && self.round_wanted(rounds) {
                match self.write_applying(rounds, slots).await {
                    Ok(()) => self.issue_round(rounds, slots, &make),
                    // Rolled back; the rounds in flight still get their answers.
                    Err(error) => write_failed = Some(error),
                }
                continue;
            }
            if rounds.is_empty() {
                let fenced = self.state.borrow().fence_error();
                if fenced.is_some() {
                    // Nothing is in flight any more: the batches of the failed rounds go.
                    self.cut_to_durable().await;
                }
                if let Some(error) = write_failed.take().or(fenced) {
                    return Err(error);
                }
                if self.state.borrow().is_rolling() {
                    self.roll().await?;
                    // Appenders waiting for the roll stage into the new segment now.
                    self.progress.notify_all();
                    continue;
                }
                return Ok(());
            }
            let accepting = write_failed.is_none() && self.may_start(rounds);
            match self.next_event(slots, accepting).await {
                Event::Synced(slot, outcome) => self.finish_round(rounds, slot, outcome),
                Event::Staged => {}
            }
        }
    }

    /// A round may start: a slot is free, and the log is neither fenced nor waiting to roll
    /// (the roll writes and syncs what is pending once the rounds in flight are done).
    fn may_start(&self, rounds: &Rounds) -> bool {
        let st = self.state.borrow();
        st.check_io().is_ok() && !st.is_rolling() && !rounds.is_full()
    }

    /// A round may start and has work: bytes pending (enough of them to overlap a round in
    /// flight), or written and not yet covered.
    fn round_wanted(&self, rounds: &Rounds) -> bool {
        if !self.may_start(rounds) {
            return false;
        }
        let st = self.state.borrow();
        let covered = rounds.issued_to().unwrap_or(st.durable_offset);
        let pending = if rounds.is_empty() {
            !st.pending.is_empty()
        } else {
            st.pending.len() >= OVERLAP_MIN_PENDING_BYTES
        };
        pending || st.written_offset > covered
    }

    /// Writes the pending buffer, applying rounds whose fdatasync finishes meanwhile, so
    /// their appenders need not wait for the write.
    async fn write_applying<F>(
        &self,
        rounds: &mut Rounds,
        slots: &mut SyncSlots<F>,
    ) -> Result<(), StorageError>
    where
        F: Future<Output = std::io::Result<bool>>,
    {
        let mut write = std::pin::pin!(self.write_pending());
        std::future::poll_fn(|cx| {
            while let Poll::Ready((slot, outcome)) = slots.poll_finished(cx) {
                self.finish_round(rounds, slot, outcome);
            }
            write.as_mut().poll(cx)
        })
        .await
    }

    /// Issues the fdatasync of a round covering everything written: of the `.wal` alone
    /// when the round can use the index journal ([`super::journal`]), else of both files.
    fn issue_round<F>(
        &self,
        rounds: &mut Rounds,
        slots: &mut SyncSlots<F>,
        make: &impl Fn(SyncFiles, RoundSync) -> F,
    ) where
        F: Future<Output = std::io::Result<bool>>,
    {
        {
            let st = self.state.borrow();
            let covered = rounds.issued_to().unwrap_or(st.durable_offset);
            if st.check_io().is_err() || st.written_offset <= covered {
                return;
            }
        }
        let how = self.journal_round(rounds.is_empty());
        let (slot, files) = {
            let st = self.state.borrow();
            if !rounds.is_empty() {
                self.bump(|s| s.overlapped_rounds += 1);
            }
            let wal_only = !matches!(how, RoundSync::Both);
            if wal_only {
                self.bump(|s| s.journaled_rounds += 1);
            }
            crate::metrics::io::record_commit_round(wal_only);
            let idx_entries = self.written_entries();
            let slot = rounds.issue(st.written_offset, idx_entries, Instant::now());
            let files = st.active_writer().sync_files.get(slot).cloned();
            (
                slot,
                files.expect("the active segment has a descriptor pair per slot"),
            )
        };
        slots.start(slot, make(files, how));
    }

    /// Waits until a round's fdatasync finishes, or (`accepting`: another round may start)
    /// until something is staged ([`PartitionLog::kick`]).
    async fn next_event<F>(&self, slots: &mut SyncSlots<F>, accepting: bool) -> Event
    where
        F: Future<Output = std::io::Result<bool>>,
    {
        let mut staged = self.io_signal.watch.changed();
        self.io_signal.accepting.set(accepting);
        let event = std::future::poll_fn(|cx| {
            if let Poll::Ready((slot, outcome)) = slots.poll_finished(cx) {
                return Poll::Ready(Event::Synced(slot, outcome));
            }
            if accepting && Pin::new(&mut staged).poll(cx).is_ready() {
                return Poll::Ready(Event::Staged);
            }
            Poll::Pending
        })
        .await;
        self.io_signal.accepting.set(false);
        event
    }

    /// Records a finished fdatasync and applies what the rounds decide, in issue order.
    fn finish_round(&self, rounds: &mut Rounds, slot: usize, outcome: std::io::Result<bool>) {
        let ok = outcome.is_ok();
        let idx_synced = matches!(outcome, Ok(true));
        let (issued, idx_entries) =
            rounds.finish(slot, outcome.map(|_| ()).map_err(|e| e.to_string()));
        crate::metrics::io::record_fsync(issued.elapsed(), ok);
        if idx_synced {
            self.idx_synced_to(idx_entries);
        }
        while let Some(applied) = rounds.apply() {
            let mut st = self.state.borrow_mut();
            match applied {
                Applied::Durable { offset, rounds: n } => {
                    st.durable_offset = st.durable_offset.max(offset);
                    st.assert_watermarks();
                    st.last_sync = Instant::now();
                    drop(st);
                    self.bump(|s| s.syncs += n);
                }
                Applied::Failed { reason } => {
                    let reason = format!("fdatasync failed: {reason}");
                    warn!(dir = %self.dir.display(), %reason, "partition fenced");
                    st.fence(reason);
                }
            }
            self.progress.notify_all();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Instant {
        Instant::now()
    }

    #[test]
    fn rounds_apply_in_issue_order_whatever_order_they_finish_in() {
        let mut rounds = Rounds::default();
        let a = rounds.issue(10, 0, now());
        let b = rounds.issue(20, 0, now());
        let c = rounds.issue(30, 0, now());
        assert!(rounds.is_full());
        assert_eq!((a, b, c), (0, 1, 2));
        rounds.finish(c, Ok(()));
        rounds.finish(b, Ok(()));
        assert_eq!(rounds.apply(), None, "the oldest round is still in flight");
        rounds.finish(a, Ok(()));
        assert_eq!(
            rounds.apply(),
            Some(Applied::Durable {
                offset: 30,
                rounds: 3
            })
        );
        assert_eq!(rounds.apply(), None);
        assert!(rounds.is_empty());
        // Slots come back in order.
        assert_eq!(rounds.issue(40, 0, now()), 0);
    }

    #[test]
    fn a_later_success_acknowledges_nothing_when_an_earlier_round_failed() {
        let mut rounds = Rounds::default();
        let a = rounds.issue(10, 0, now());
        let b = rounds.issue(20, 0, now());
        let c = rounds.issue(30, 0, now());
        rounds.finish(b, Ok(()));
        assert_eq!(rounds.apply(), None);
        rounds.finish(a, Err("EIO".into()));
        assert_eq!(
            rounds.apply(),
            Some(Applied::Failed {
                reason: "EIO".into()
            })
        );
        assert_eq!(
            rounds.apply(),
            None,
            "b succeeded, but after a failed round"
        );
        rounds.finish(c, Ok(()));
        assert_eq!(rounds.apply(), None, "nor does c count");
        assert!(rounds.is_empty());
    }

    #[test]
    fn successes_before_a_failure_are_applied_first() {
        let mut rounds = Rounds::default();
        let a = rounds.issue(10, 0, now());
        let b = rounds.issue(20, 0, now());
        let c = rounds.issue(30, 0, now());
        rounds.finish(c, Ok(()));
        rounds.finish(b, Err("EIO".into()));
        rounds.finish(a, Ok(()));
        assert_eq!(
            rounds.apply(),
            Some(Applied::Durable {
                offset: 10,
                rounds: 1
            })
        );
        assert_eq!(
            rounds.apply(),
            Some(Applied::Failed {
                reason: "EIO".into()
            })
        );
        assert_eq!(rounds.apply(), None);
        assert!(rounds.is_empty());
    }

    #[test]
    #[should_panic(expected = "each round covers more")]
    fn a_round_must_cover_more_than_the_one_before() {
        let mut rounds = Rounds::default();
        rounds.issue(10, 0, now());
        rounds.issue(10, 0, now());
    }
}
