//! Idempotent producers, sans-IO: per partition, each producer id's epoch and its last few
//! batches (first and last sequence → base offset), as Kafka keeps them.
//!
//! - A batch whose sequences equal a remembered one is a retry: it is answered with the
//!   original batch's base offset and not stored again.
//! - A batch must start right after the producer's last sequence (wrapping at i32::MAX);
//!   anything else is OUT_OF_ORDER_SEQUENCE (45), except the first batch of an epoch, which
//!   must start at 0.
//! - A newer epoch fences the older one: batches of an older epoch get
//!   INVALID_PRODUCER_EPOCH (47).
//!
//! **A remembered batch is a claim about the log**, and the log can take it back: a write
//! that fails (disk full, EIO, a short write) rolls back every batch not yet written, and
//! their offsets are handed out again. So a batch is remembered with the ticket it was
//! staged with until the log says it is stored ([`Settlement`]); [`ProducerTable::settle`]
//! asks, and forgets a lost batch and every later one of its producer, as if they had never
//! arrived. A retry of a batch still in flight is answered with the original's ticket, so it
//! is acknowledged exactly when (and only if) the original is. docs/KAFKA.md has the table
//! of failures.
//!
//! **Recovery.** Every stored RecordBatch header carries producer id, epoch, base sequence
//! and last offset delta, so the table is rebuilt after a restart by feeding each stored
//! Kafka batch of the partition, in offset order, to [`ProducerTable::record`] as stored
//! (the segments holding the last [`BATCHES_KEPT`] batches per producer are enough).
//! Nothing else is persisted.

use std::collections::{BTreeMap, VecDeque};

/// Batches remembered per producer per partition (Kafka's 5, which is also the most
/// in-flight requests an idempotent producer may have).
pub const BATCHES_KEPT: usize = 5;

/// A batch's idempotence fields (from its RecordBatch header).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub producer_id: i64,
    pub epoch: i16,
    pub first_sequence: i32,
    pub last_sequence: i32,
}

/// What to do with a produced batch. `T` is the log's ticket for a staged batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict<T> {
    /// Store it; then call [`ProducerTable::record`] with its base offset and ticket.
    Append,
    /// A retry of a remembered batch: answer with this base offset, store nothing. `staged`
    /// is the original's ticket while the log has not yet said it is stored: the retry is
    /// acknowledged when that ticket is, and fails if it fails.
    Duplicate { base_offset: u64, staged: Option<T> },
}

/// Where a remembered batch stands in the log, as the log answers for its ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settlement {
    /// Acknowledged per the fsync policy: it stays in the log.
    Stored,
    /// Staged, not yet acknowledged, not lost.
    Pending,
    /// Rolled back (its write failed) or fenced: it will never be acknowledged.
    Lost,
}

/// Why a batch is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SequenceError {
    #[error("producer {producer_id}: sequence {got}, expected {expected}")]
    OutOfOrder {
        producer_id: i64,
        got: i32,
        expected: i32,
    },
    #[error("producer {producer_id}: epoch {got} is older than {current}")]
    Fenced {
        producer_id: i64,
        got: i16,
        current: i16,
    },
    #[error(
        "producer {producer_id}: batch {index} of a multi-batch request repeats a stored batch"
    )]
    RepeatInRun { producer_id: i64, index: usize },
    #[error("producer table holds {max} producers")]
    Full { max: usize },
}

/// One remembered batch.
#[derive(Debug, Clone, Copy)]
struct Remembered<T> {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: u64,
    /// The ticket it was staged with, until the log says it is stored (`None` after).
    staged: Option<T>,
}

#[derive(Debug, Clone)]
struct ProducerState<T> {
    epoch: i16,
    /// Oldest first, in offset order.
    batches: VecDeque<Remembered<T>>,
    /// The last sequence of the newest batch of this epoch no longer remembered: what the
    /// next batch follows when every remembered one was lost.
    forgotten_last_sequence: Option<i32>,
}

impl<T> ProducerState<T> {
    fn new(epoch: i16) -> Self {
        ProducerState {
            epoch,
            batches: VecDeque::new(),
            forgotten_last_sequence: None,
        }
    }

    /// The sequence the producer's next new batch must start at.
    fn expected_sequence(&self) -> i32 {
        let last = self
            .batches
            .back()
            .map(|b| b.last_sequence)
            .or(self.forgotten_last_sequence);
        last.map_or(0, next_sequence)
    }
}

/// The idempotence state of one partition.
#[derive(Debug, Clone)]
pub struct ProducerTable<T> {
    producers: BTreeMap<i64, ProducerState<T>>,
    producers_max: usize,
}

impl<T: Copy> ProducerTable<T> {
    pub fn new(producers_max: usize) -> ProducerTable<T> {
        ProducerTable {
            producers: BTreeMap::new(),
            producers_max,
        }
    }

    /// Decides about a produced batch before it is stored. Call [`ProducerTable::settle`]
    /// for its producer first, so that no lost batch is taken for stored.
    pub fn check(&self, batch: &ProducerBatch) -> Result<Verdict<T>, SequenceError> {
        let Some(state) = self.producers.get(&batch.producer_id) else {
            if self.producers.len() >= self.producers_max {
                return Err(SequenceError::Full {
                    max: self.producers_max,
                });
            }
            return first_of_epoch(batch);
        };
        if let Some(verdict) = other_epoch(batch, state.epoch) {
            return verdict;
        }
        if let Some(b) = state.batches.iter().find(|b| {
            b.first_sequence == batch.first_sequence && b.last_sequence == batch.last_sequence
        }) {
            return Ok(Verdict::Duplicate {
                base_offset: b.base_offset,
                staged: b.staged,
            });
        }
        starts_at(batch, state.expected_sequence())
    }

    /// Decides about the batches of one request, in order, as if each earlier one had been
    /// appended: a retry is answered only when it is the request's only batch (a request
    /// mixing retries and new batches is out of order).
    pub fn check_run(&self, batches: &[ProducerBatch]) -> Result<Verdict<T>, SequenceError> {
        for (index, batch) in batches.iter().enumerate() {
            let earlier = batches[..index]
                .iter()
                .rev()
                .find(|b| b.producer_id == batch.producer_id);
            let verdict = match earlier {
                Some(previous) => follows(previous, batch)?,
                None => self.check(batch)?,
            };
            if let Verdict::Duplicate { .. } = verdict
                && batches.len() > 1
            {
                return Err(SequenceError::RepeatInRun {
                    producer_id: batch.producer_id,
                    index,
                });
            }
            if batches.len() == 1 {
                return Ok(verdict);
            }
        }
        Ok(Verdict::Append)
    }

    /// Remembers a batch: staged, with the log's `ticket` for it (after produce), or stored
    /// (`None`: replaying the log at recovery).
    pub fn record(&mut self, batch: &ProducerBatch, base_offset: u64, staged: Option<T>) {
        let state = self
            .producers
            .entry(batch.producer_id)
            .or_insert_with(|| ProducerState::new(batch.epoch));
        if batch.epoch != state.epoch {
            *state = ProducerState::new(batch.epoch);
        }
        if state.batches.len() == BATCHES_KEPT {
            let oldest = state.batches.pop_front().expect("BATCHES_KEPT > 0");
            state.forgotten_last_sequence = Some(oldest.last_sequence);
        }
        state.batches.push_back(Remembered {
            first_sequence: batch.first_sequence,
            last_sequence: batch.last_sequence,
            base_offset,
            staged,
        });
    }

    /// Asks the log (`status`) about each of a producer's batches not yet known stored, in
    /// offset order: a stored one is settled; at the first lost one, it and every later
    /// batch of the producer are forgotten (a failed write takes back everything after it
    /// too), so the producer's next batch must start where the lost one did.
    pub fn settle(&mut self, producer_id: i64, mut status: impl FnMut(&T) -> Settlement) {
        let Some(state) = self.producers.get_mut(&producer_id) else {
            return;
        };
        for i in 0..state.batches.len() {
            let Some(ticket) = state.batches[i].staged else {
                continue;
            };
            match status(&ticket) {
                Settlement::Stored => state.batches[i].staged = None,
                Settlement::Pending => {}
                Settlement::Lost => {
                    state.batches.truncate(i);
                    break;
                }
            }
        }
    }

    /// The producers with a batch not yet known stored.
    pub fn unsettled(&self) -> impl Iterator<Item = i64> + '_ {
        self.producers
            .iter()
            .filter(|(_, s)| s.batches.iter().any(|b| b.staged.is_some()))
            .map(|(&id, _)| id)
    }

    /// The epoch currently accepted for a producer.
    pub fn epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|s| s.epoch)
    }
}

/// `batch` right after `previous` of the same producer in one request.
fn follows<T>(
    previous: &ProducerBatch,
    batch: &ProducerBatch,
) -> Result<Verdict<T>, SequenceError> {
    if let Some(verdict) = other_epoch(batch, previous.epoch) {
        return verdict;
    }
    starts_at(batch, next_sequence(previous.last_sequence))
}

/// The verdict on a batch whose epoch is not `current`: fenced if older, the first of its
/// epoch if newer; `None` for the current epoch.
fn other_epoch<T>(
    batch: &ProducerBatch,
    current: i16,
) -> Option<Result<Verdict<T>, SequenceError>> {
    match batch.epoch.cmp(&current) {
        std::cmp::Ordering::Less => Some(Err(SequenceError::Fenced {
            producer_id: batch.producer_id,
            got: batch.epoch,
            current,
        })),
        std::cmp::Ordering::Greater => Some(first_of_epoch(batch)),
        std::cmp::Ordering::Equal => None,
    }
}

fn first_of_epoch<T>(batch: &ProducerBatch) -> Result<Verdict<T>, SequenceError> {
    starts_at(batch, 0)
}

/// Append if `batch` starts at `expected`, else out of order.
fn starts_at<T>(batch: &ProducerBatch, expected: i32) -> Result<Verdict<T>, SequenceError> {
    if batch.first_sequence != expected {
        return Err(SequenceError::OutOfOrder {
            producer_id: batch.producer_id,
            got: batch.first_sequence,
            expected,
        });
    }
    Ok(Verdict::Append)
}

fn next_sequence(last: i32) -> i32 {
    if last == i32::MAX { 0 } else { last + 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(epoch: i16, first: i32, len: i32) -> ProducerBatch {
        ProducerBatch {
            producer_id: 9,
            epoch,
            first_sequence: first,
            last_sequence: first + len - 1,
        }
    }

    /// Produces through the table as the front-end would; returns the answered offset.
    /// The tests' tickets: the batch's base offset.
    type Table = ProducerTable<u64>;

    /// The verdict on a retry of a batch stored at `base_offset`.
    fn stored_at(base_offset: u64) -> Result<Verdict<u64>, SequenceError> {
        Ok(Verdict::Duplicate {
            base_offset,
            staged: None,
        })
    }

    fn produce(table: &mut Table, next: &mut u64, b: ProducerBatch) -> Result<u64, SequenceError> {
        match table.check(&b)? {
            Verdict::Duplicate { base_offset, .. } => Ok(base_offset),
            Verdict::Append => {
                let base = *next;
                *next += (b.last_sequence - b.first_sequence + 1) as u64;
                table.record(&b, base, None);
                Ok(base)
            }
        }
    }

    #[test]
    fn retries_get_their_original_offset_and_gaps_are_refused() {
        let mut table = Table::new(10);
        let mut next = 100;
        assert_eq!(produce(&mut table, &mut next, batch(0, 0, 3)), Ok(100));
        assert_eq!(produce(&mut table, &mut next, batch(0, 3, 2)), Ok(103));
        assert_eq!(produce(&mut table, &mut next, batch(0, 0, 3)), Ok(100));
        assert_eq!(produce(&mut table, &mut next, batch(0, 3, 2)), Ok(103));
        assert_eq!(next, 105);
        assert_eq!(
            produce(&mut table, &mut next, batch(0, 9, 1)),
            Err(SequenceError::OutOfOrder {
                producer_id: 9,
                got: 9,
                expected: 5
            })
        );
        assert!(matches!(
            produce(&mut table, &mut next, batch(0, 9, 1)),
            Err(SequenceError::OutOfOrder { .. })
        ));
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut table = Table::new(10);
        let mut next = 0;
        for i in 0..6 {
            produce(&mut table, &mut next, batch(0, i, 1)).unwrap();
        }
        // The first batch has been forgotten: its retry is now out of order.
        assert!(matches!(
            table.check(&batch(0, 0, 1)),
            Err(SequenceError::OutOfOrder { .. })
        ));
        assert_eq!(table.check(&batch(0, 1, 1)), stored_at(1));
    }

    #[test]
    fn newer_epoch_fences_the_older_and_starts_at_zero() {
        let mut table = Table::new(10);
        let mut next = 0;
        produce(&mut table, &mut next, batch(0, 0, 2)).unwrap();
        assert!(matches!(
            table.check(&batch(1, 2, 1)),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        produce(&mut table, &mut next, batch(1, 0, 1)).unwrap();
        assert_eq!(table.epoch(9), Some(1));
        let fenced = table.check(&batch(0, 2, 1)).unwrap_err();
        assert!(matches!(fenced, SequenceError::Fenced { .. }), "{fenced:?}");
    }

    #[test]
    fn sequences_wrap_and_the_table_is_bounded() {
        let mut table = Table::new(1);
        let wrap = ProducerBatch {
            producer_id: 9,
            epoch: 0,
            first_sequence: i32::MAX - 1,
            last_sequence: i32::MAX,
        };
        table.record(&wrap, 0, None);
        assert_eq!(table.check(&batch(0, 0, 1)), Ok(Verdict::Append));
        let other = ProducerBatch {
            producer_id: 10,
            ..batch(0, 0, 1)
        };
        assert_eq!(table.check(&other), Err(SequenceError::Full { max: 1 }));
    }

    #[test]
    fn replaying_stored_batches_rebuilds_the_same_answers() {
        let mut live = Table::new(10);
        let mut next = 0;
        let mut log = Vec::new();
        for (epoch, first, len) in [(0, 0, 2), (0, 2, 3), (1, 0, 1), (1, 1, 4)] {
            let b = batch(epoch, first, len);
            let base = produce(&mut live, &mut next, b).unwrap();
            log.push((b, base));
        }
        let mut rebuilt = Table::new(10);
        for (b, base) in &log {
            rebuilt.record(b, *base, None);
        }
        for (b, _) in &log {
            assert_eq!(live.check(b), rebuilt.check(b));
        }
        assert_eq!(rebuilt.check(&batch(1, 1, 4)), stored_at(6));
    }

    /// Stages a new batch as the shard does: remembered with its ticket (its base offset).
    fn stage(table: &mut Table, next: &mut u64, b: ProducerBatch) -> u64 {
        assert_eq!(table.check(&b), Ok(Verdict::Append));
        let base = *next;
        *next += (b.last_sequence - b.first_sequence + 1) as u64;
        table.record(&b, base, Some(base));
        base
    }

    #[test]
    fn a_retry_of_a_batch_in_flight_gets_the_original_ticket() {
        let mut table = Table::new(10);
        let mut next = 100;
        stage(&mut table, &mut next, batch(0, 0, 3));
        assert_eq!(
            table.check(&batch(0, 0, 3)),
            Ok(Verdict::Duplicate {
                base_offset: 100,
                staged: Some(100)
            })
        );
        table.settle(9, |_| Settlement::Stored);
        assert_eq!(table.check(&batch(0, 0, 3)), stored_at(100));
    }

    #[test]
    fn a_lost_batch_and_every_later_one_are_forgotten() {
        // The failure behind issue 36: batches staged, their write rolled back, their offsets
        // handed to other batches; the retries must be stored again, not answered with the
        // offsets they lost.
        let mut table = Table::new(10);
        let mut next = 0;
        stage(&mut table, &mut next, batch(0, 0, 2));
        table.settle(9, |_| Settlement::Stored);
        let lost_at = stage(&mut table, &mut next, batch(0, 2, 2));
        stage(&mut table, &mut next, batch(0, 4, 2));
        table.settle(9, |&ticket| {
            if ticket >= lost_at {
                Settlement::Lost
            } else {
                Settlement::Stored
            }
        });
        assert_eq!(table.check(&batch(0, 2, 2)), Ok(Verdict::Append));
        assert!(matches!(
            table.check(&batch(0, 4, 2)),
            Err(SequenceError::OutOfOrder { expected: 2, .. })
        ));
        assert_eq!(table.check(&batch(0, 0, 2)), stored_at(0));
        assert_eq!(table.unsettled().count(), 0);
    }

    #[test]
    fn losing_every_remembered_batch_still_knows_the_next_sequence() {
        let mut table = Table::new(10);
        let mut next = 0;
        for i in 0..BATCHES_KEPT as i32 {
            stage(&mut table, &mut next, batch(0, i, 1));
        }
        table.settle(9, |_| Settlement::Stored);
        for i in 0..BATCHES_KEPT as i32 {
            stage(&mut table, &mut next, batch(0, 5 + i, 1));
        }
        table.settle(9, |_| Settlement::Lost);
        assert_eq!(table.check(&batch(0, 5, 1)), Ok(Verdict::Append));
        assert!(matches!(
            table.check(&batch(0, 0, 1)),
            Err(SequenceError::OutOfOrder { expected: 5, .. })
        ));
    }

    #[test]
    fn a_pending_batch_keeps_its_place_and_later_losses_are_found() {
        let mut table = Table::new(10);
        let mut next = 0;
        stage(&mut table, &mut next, batch(0, 0, 1));
        stage(&mut table, &mut next, batch(0, 1, 1));
        table.settle(9, |&t| {
            if t == 0 {
                Settlement::Pending
            } else {
                Settlement::Lost
            }
        });
        assert_eq!(table.unsettled().collect::<Vec<_>>(), vec![9]);
        assert_eq!(table.check(&batch(0, 1, 1)), Ok(Verdict::Append));
    }

    #[test]
    fn a_run_checks_each_batch_after_the_one_before() {
        let mut table = Table::new(10);
        let mut next = 0;
        produce(&mut table, &mut next, batch(0, 0, 2)).unwrap();
        assert_eq!(
            table.check_run(&[batch(0, 2, 2), batch(0, 4, 1)]),
            Ok(Verdict::Append)
        );
        assert!(matches!(
            table.check_run(&[batch(0, 2, 2), batch(0, 5, 1)]),
            Err(SequenceError::OutOfOrder { expected: 4, .. })
        ));
        assert!(matches!(
            table.check_run(&[batch(0, 0, 2), batch(0, 2, 1)]),
            Err(SequenceError::RepeatInRun { index: 0, .. })
        ));
        assert!(matches!(
            table.check_run(&[batch(1, 0, 2), batch(0, 2, 1)]),
            Err(SequenceError::Fenced { .. })
        ));
        assert_eq!(table.check_run(&[batch(0, 0, 2)]), stored_at(0));
    }
}
