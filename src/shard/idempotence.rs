//! Idempotent Kafka producers on the partition's owner: each produced batch with a producer
//! id is checked against the partition's [`ProducerTable`] and remembered once staged, under
//! a per-partition lock so that a check and the staging it allows are never interleaved
//! with another request's (staging can wait for a segment roll).
//!
//! A partition's table is built on its first idempotent produce since the start, from the
//! Kafka batches stored in its last two segments (each RecordBatch header carries producer
//! id, epoch and sequences), so a retry that crosses a broker restart is still recognised.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use tracing::{info, warn};

use crate::protocol::kafka::batch;
use crate::protocol::native::{ErrorCode, ProduceBatches};
use crate::protocol::record::{self, BatchFormat};
use crate::shard::data::stage_all;
use crate::shard::producers::{ProducerBatch, ProducerTable, SequenceError, Verdict};
use crate::shard::{Failure, Shard};
use crate::storage::{PartitionLog, Ticket};

/// Producers one partition remembers at most.
pub const PRODUCERS_PER_PARTITION_MAX: usize = 10_000;
/// Bytes read per step while rebuilding a table from the log.
const REBUILD_READ_BYTES: u64 = 1 << 20;

/// One produced batch's idempotence fields and the offsets it takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdempotentBatch {
    pub producer: ProducerBatch,
    pub offsets: u64,
}

/// One partition's table and the lock held from check to record.
struct Partition {
    table: RefCell<ProducerTable>,
    lock: glommio::sync::Semaphore,
}

/// The tables of the partitions this core owns, made on first use.
#[derive(Default)]
pub struct Producers {
    partitions: RefCell<HashMap<(String, u32), Rc<Partition>>>,
}

impl Producers {
    /// Forgets a deleted topic's tables.
    pub fn forget_topic(&self, topic: &str) {
        self.partitions.borrow_mut().retain(|(t, _), _| t != topic);
    }
}

impl Shard {
    /// Stages an idempotent producer's batches: retries of remembered batches are answered
    /// with their offsets and not stored again; out-of-sequence batches and older epochs
    /// are refused; the rest are staged as one run and remembered.
    pub(crate) async fn stage_idempotent(
        &self,
        log: &Rc<PartitionLog>,
        topic: &str,
        partition: u32,
        batches: ProduceBatches<'_>,
        producers: &[IdempotentBatch],
    ) -> Result<(u64, Ticket), Failure> {
        let state = self.producer_table(log, topic, partition);
        let _held = state
            .lock
            .acquire_permit(1)
            .await
            .map_err(|_| Failure::new(ErrorCode::ShuttingDown, "producer table closed"))?;
        // A request's batches against a copy, in order: each must follow the previous.
        let mut trial = state.table.borrow().clone();
        let mut duplicate = None;
        for (i, b) in producers.iter().enumerate() {
            match trial.check(&b.producer).map_err(sequence_failure)? {
                Verdict::Duplicate { base_offset } if producers.len() == 1 => {
                    duplicate = Some((base_offset, base_offset + b.offsets));
                }
                Verdict::Duplicate { .. } => {
                    return Err(Failure::new(
                        ErrorCode::OutOfOrderSequence,
                        format!("batch {i} of a multi-batch request repeats a stored batch"),
                    ));
                }
                Verdict::Append => trial.record(&b.producer, 0),
            }
        }
        if let Some((base, end)) = duplicate {
            return Ok((base, log.ticket_for_staged(base, end)));
        }
        let (base_offset, last) = stage_all(log, batches, &self.metrics).await?;
        let mut table = state.table.borrow_mut();
        let mut at = base_offset;
        for b in producers {
            table.record(&b.producer, at);
            at += b.offsets;
        }
        Ok((base_offset, last))
    }

    fn producer_table(&self, log: &PartitionLog, topic: &str, partition: u32) -> Rc<Partition> {
        let key = (topic.to_string(), partition);
        if let Some(p) = self.producers.partitions.borrow().get(&key) {
            return Rc::clone(p);
        }
        let table = rebuild(log);
        let p = Rc::new(Partition {
            table: RefCell::new(table),
            lock: glommio::sync::Semaphore::new(1),
        });
        self.producers
            .partitions
            .borrow_mut()
            .insert(key, Rc::clone(&p));
        p
    }
}

fn sequence_failure(e: SequenceError) -> Failure {
    let code = match e {
        SequenceError::OutOfOrder { .. } => ErrorCode::OutOfOrderSequence,
        SequenceError::Fenced { .. } => ErrorCode::ProducerFenced,
        SequenceError::Full { .. } => ErrorCode::ProducerLimit,
    };
    Failure::new(code, e.to_string())
}

/// The table as the log's last two segments leave it: every stored Kafka batch with a
/// producer id, in offset order. Reads synchronously (once per partition per start).
fn rebuild(log: &PartitionLog) -> ProducerTable {
    let mut table = ProducerTable::new(PRODUCERS_PER_PARTITION_MAX);
    let segments = log.segments();
    let from = segments
        .len()
        .checked_sub(2)
        .map_or(log.log_start_offset(), |i| segments[i].0)
        .max(log.log_start_offset());
    let end = log.high_watermark();
    let mut offset = from;
    let mut batches = 0u64;
    while offset < end {
        let read = match log.read(offset, REBUILD_READ_BYTES) {
            Ok(read) if !read.is_empty() => read,
            Ok(_) => break,
            Err(error) => {
                warn!(dir = %log.dir().display(), offset, %error, "idempotent producers: log not read past here");
                break;
            }
        };
        for stored in &read {
            offset = stored.entry.next_offset();
            if stored.entry.format != BatchFormat::Kafka {
                continue;
            }
            let payload = &stored.bytes[record::HEADER_LEN..];
            let Ok(info) = batch::peek(payload, u64::MAX) else {
                continue;
            };
            if info.idempotent() {
                let producer = ProducerBatch {
                    producer_id: info.producer_id,
                    epoch: info.producer_epoch,
                    first_sequence: info.base_sequence,
                    last_sequence: info.last_sequence(),
                };
                table.record(&producer, stored.entry.offset);
                batches += 1;
            }
        }
    }
    if batches > 0 {
        info!(dir = %log.dir().display(), batches, "idempotent producers rebuilt from the log");
    }
    table
}
