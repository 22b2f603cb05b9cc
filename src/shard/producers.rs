//! Idempotent producers, sans-IO: per partition, each producer id's epoch and its last few
//! batches (first and last sequence → base offset), as Kafka keeps them.
//!
//! - A batch whose sequences equal a remembered one is a retry: it is answered with the
//!   original base offset and not stored again.
//! - A batch must start right after the producer's last sequence (wrapping at i32::MAX);
//!   anything else is OUT_OF_ORDER_SEQUENCE (45), except the first batch of an epoch, which
//!   must start at 0.
//! - A newer epoch fences the older one: batches of an older epoch get
//!   INVALID_PRODUCER_EPOCH (47).
//!
//! **Recovery.** Every stored RecordBatch header carries producer id, epoch, base sequence
//! and last offset delta, so the table is rebuilt after a restart by feeding each stored
//! Kafka batch of the partition, in offset order, to [`ProducerTable::record`] (the
//! segments holding the last [`BATCHES_KEPT`] batches per producer are enough; older
//! segments can be skipped once every producer seen has five). Nothing else is persisted.

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

/// What to do with a produced batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Store it; then call [`ProducerTable::record`] with its base offset.
    Append,
    /// A retry of a stored batch: answer with this base offset, store nothing.
    Duplicate { base_offset: u64 },
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
    #[error("producer table holds {max} producers")]
    Full { max: usize },
}

impl SequenceError {
    /// Kafka's error code.
    pub fn kafka_code(&self) -> i16 {
        match self {
            SequenceError::OutOfOrder { .. } => 45,
            SequenceError::Fenced { .. } => 47,
            // Kafka has no such bound; POLICY_VIOLATION says the request broke a broker rule.
            SequenceError::Full { .. } => 44,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct ProducerState {
    epoch: i16,
    /// (first sequence, last sequence, base offset), oldest first.
    batches: VecDeque<(i32, i32, u64)>,
}

/// The idempotence state of one partition.
#[derive(Debug, Clone)]
pub struct ProducerTable {
    producers: BTreeMap<i64, ProducerState>,
    producers_max: usize,
}

impl ProducerTable {
    pub fn new(producers_max: usize) -> ProducerTable {
        ProducerTable {
            producers: BTreeMap::new(),
            producers_max,
        }
    }

    /// Decides about a produced batch before it is stored.
    pub fn check(&self, batch: &ProducerBatch) -> Result<Verdict, SequenceError> {
        let Some(state) = self.producers.get(&batch.producer_id) else {
            if self.producers.len() >= self.producers_max {
                return Err(SequenceError::Full {
                    max: self.producers_max,
                });
            }
            return first_of_epoch(batch);
        };
        if batch.epoch < state.epoch {
            return Err(SequenceError::Fenced {
                producer_id: batch.producer_id,
                got: batch.epoch,
                current: state.epoch,
            });
        }
        if batch.epoch > state.epoch {
            return first_of_epoch(batch);
        }
        if let Some(&(_, _, base_offset)) = state
            .batches
            .iter()
            .find(|(first, last, _)| *first == batch.first_sequence && *last == batch.last_sequence)
        {
            return Ok(Verdict::Duplicate { base_offset });
        }
        let last = state.batches.back().map_or(-1, |(_, last, _)| *last);
        let expected = next_sequence(last);
        if batch.first_sequence != expected {
            return Err(SequenceError::OutOfOrder {
                producer_id: batch.producer_id,
                got: batch.first_sequence,
                expected,
            });
        }
        Ok(Verdict::Append)
    }

    /// Remembers a stored batch (after produce, or while replaying the log at recovery).
    pub fn record(&mut self, batch: &ProducerBatch, base_offset: u64) {
        let state = self.producers.entry(batch.producer_id).or_default();
        if batch.epoch != state.epoch {
            state.epoch = batch.epoch;
            state.batches.clear();
        }
        if state.batches.len() == BATCHES_KEPT {
            state.batches.pop_front();
        }
        state
            .batches
            .push_back((batch.first_sequence, batch.last_sequence, base_offset));
    }

    /// The epoch currently accepted for a producer.
    pub fn epoch(&self, producer_id: i64) -> Option<i16> {
        self.producers.get(&producer_id).map(|s| s.epoch)
    }
}

fn first_of_epoch(batch: &ProducerBatch) -> Result<Verdict, SequenceError> {
    if batch.first_sequence != 0 {
        return Err(SequenceError::OutOfOrder {
            producer_id: batch.producer_id,
            got: batch.first_sequence,
            expected: 0,
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
    fn produce(
        table: &mut ProducerTable,
        next: &mut u64,
        b: ProducerBatch,
    ) -> Result<u64, SequenceError> {
        match table.check(&b)? {
            Verdict::Duplicate { base_offset } => Ok(base_offset),
            Verdict::Append => {
                let base = *next;
                *next += (b.last_sequence - b.first_sequence + 1) as u64;
                table.record(&b, base);
                Ok(base)
            }
        }
    }

    #[test]
    fn retries_get_their_original_offset_and_gaps_are_refused() {
        let mut table = ProducerTable::new(10);
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
        assert_eq!(
            produce(&mut table, &mut next, batch(0, 9, 1))
                .unwrap_err()
                .kafka_code(),
            45
        );
    }

    #[test]
    fn only_the_last_five_batches_are_remembered() {
        let mut table = ProducerTable::new(10);
        let mut next = 0;
        for i in 0..6 {
            produce(&mut table, &mut next, batch(0, i, 1)).unwrap();
        }
        // The first batch has been forgotten: its retry is now out of order.
        assert!(matches!(
            table.check(&batch(0, 0, 1)),
            Err(SequenceError::OutOfOrder { .. })
        ));
        assert_eq!(
            table.check(&batch(0, 1, 1)),
            Ok(Verdict::Duplicate { base_offset: 1 })
        );
    }

    #[test]
    fn newer_epoch_fences_the_older_and_starts_at_zero() {
        let mut table = ProducerTable::new(10);
        let mut next = 0;
        produce(&mut table, &mut next, batch(0, 0, 2)).unwrap();
        assert!(matches!(
            table.check(&batch(1, 2, 1)),
            Err(SequenceError::OutOfOrder { expected: 0, .. })
        ));
        produce(&mut table, &mut next, batch(1, 0, 1)).unwrap();
        assert_eq!(table.epoch(9), Some(1));
        let fenced = table.check(&batch(0, 2, 1)).unwrap_err();
        assert_eq!(fenced.kafka_code(), 47);
    }

    #[test]
    fn sequences_wrap_and_the_table_is_bounded() {
        let mut table = ProducerTable::new(1);
        let wrap = ProducerBatch {
            producer_id: 9,
            epoch: 0,
            first_sequence: i32::MAX - 1,
            last_sequence: i32::MAX,
        };
        table.record(&wrap, 0);
        assert_eq!(table.check(&batch(0, 0, 1)), Ok(Verdict::Append));
        let other = ProducerBatch {
            producer_id: 10,
            ..batch(0, 0, 1)
        };
        assert_eq!(table.check(&other), Err(SequenceError::Full { max: 1 }));
    }

    #[test]
    fn replaying_stored_batches_rebuilds_the_same_answers() {
        let mut live = ProducerTable::new(10);
        let mut next = 0;
        let mut log = Vec::new();
        for (epoch, first, len) in [(0, 0, 2), (0, 2, 3), (1, 0, 1), (1, 1, 4)] {
            let b = batch(epoch, first, len);
            let base = produce(&mut live, &mut next, b).unwrap();
            log.push((b, base));
        }
        let mut rebuilt = ProducerTable::new(10);
        for (b, base) in &log {
            rebuilt.record(b, *base);
        }
        for (b, _) in &log {
            assert_eq!(live.check(b), rebuilt.check(b));
        }
        assert_eq!(
            rebuilt.check(&batch(1, 1, 4)),
            Ok(Verdict::Duplicate { base_offset: 6 })
        );
    }
}
