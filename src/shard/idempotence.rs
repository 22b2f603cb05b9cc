//! Idempotent Kafka producers on the partition's owner: each produced batch with a producer
//! id is checked against the partition's [`ProducerTable`] and remembered once staged, under
//! a per-partition lock so that a check and the staging it allows are never interleaved
//! with another request's (staging can wait for a segment roll).
//!
//! A partition's table is built on its first idempotent produce since the start, from the
//! Kafka batches stored in its last two segments (each RecordBatch header carries producer
//! id, epoch and sequences), so a retry that crosses a broker restart is still recognised.
//! The build reads only those headers, on the blocking pool, after the storage checked the
//! batches (`check_plan`, also on its blocking thread): a cold segment never stalls the
//! executor, and the first produce waits for it under the partition's lock.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use tracing::{info, warn};

use crate::metrics::counters::Metrics;
use crate::protocol::kafka::batch;
use crate::protocol::native::{ErrorCode, ProduceBatches};
use crate::protocol::record::{self, BatchFormat};
use crate::shard::data::{BatchSource, stage_all};
use crate::shard::producers::{ProducerBatch, ProducerTable, SequenceError, Verdict};
use crate::shard::{Failure, Shard};
use crate::storage::index::IndexEntry;
use crate::storage::{PartitionLog, StorageError, Ticket};

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

/// Bytes read of each stored Kafka batch to rebuild a table: its pagurus header and the
/// RecordBatch header.
const STORED_HEADERS_LEN: usize = record::HEADER_LEN + batch::HEADER_LEN;

/// One partition's table (`None` until built from the log, under the lock) and the lock
/// held from check to record.
struct Partition {
    table: RefCell<Option<ProducerTable>>,
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
        let state = self.producer_partition(topic, partition);
        let _held = state
            .lock
            .acquire_permit(1)
            .await
            .map_err(|_| Failure::new(ErrorCode::ShuttingDown, "producer table closed"))?;
        if state.table.borrow().is_none() {
            let table = rebuild(log, &self.metrics).await;
            *state.table.borrow_mut() = Some(table);
        }
        // A request's batches against a copy, in order: each must follow the previous.
        let mut trial = state.table.borrow().clone().expect("built above");
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
        let (base_offset, last) =
            stage_all(log, batches, BatchSource::Kafka, &self.metrics).await?;
        let mut guard = state.table.borrow_mut();
        let table = guard.as_mut().expect("built above");
        let mut at = base_offset;
        for b in producers {
            table.record(&b.producer, at);
            at += b.offsets;
        }
        Ok((base_offset, last))
    }

    /// The partition's entry, made (with no table yet) on first use.
    fn producer_partition(&self, topic: &str, partition: u32) -> Rc<Partition> {
        let key = (topic.to_string(), partition);
        let mut partitions = self.producers.partitions.borrow_mut();
        let entry = partitions.entry(key).or_insert_with(|| {
            Rc::new(Partition {
                table: RefCell::new(None),
                lock: glommio::sync::Semaphore::new(1),
            })
        });
        Rc::clone(entry)
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
/// producer id, in offset order. Each step plans up to `REBUILD_READ_BYTES` of batches,
/// has the storage check them (on its blocking thread; a damaged batch is skipped, as it
/// is never served), then reads the headers of the Kafka ones on the blocking pool.
async fn rebuild(log: &PartitionLog, metrics: &Metrics) -> ProducerTable {
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
        let planned = match log.read_plan(offset, REBUILD_READ_BYTES) {
            Ok(plan) if plan.is_empty() => break,
            Ok(plan) => {
                let (checked, found) = log.check_plan(plan).await;
                Metrics::add(&metrics.corrupt_batches_detected, found);
                checked.map(|(plan, _)| plan)
            }
            Err(error) => Err(error),
        };
        let plan = match planned {
            Ok(plan) => plan,
            Err(StorageError::Corrupt { next_offset, .. }) if next_offset > offset => {
                offset = next_offset;
                continue;
            }
            Err(error) => {
                warn!(dir = %log.dir().display(), offset, %error, "idempotent producers: log not read past here");
                break;
            }
        };
        offset = plan.next_offset().expect("a plan that was not empty");
        let kafka: Vec<IndexEntry> = plan
            .batches
            .iter()
            .filter(|e| e.format == BatchFormat::Kafka)
            .copied()
            .collect();
        let headers = match read_headers(&plan.file, &kafka).await {
            Ok(headers) => headers,
            Err(error) => {
                warn!(dir = %log.dir().display(), offset, %error, "idempotent producers: log not read past here");
                break;
            }
        };
        for (entry, headers) in kafka.iter().zip(headers) {
            let Ok(info) = batch::peek(&headers[record::HEADER_LEN..], u64::MAX) else {
                continue;
            };
            if info.idempotent() {
                let producer = ProducerBatch {
                    producer_id: info.producer_id,
                    epoch: info.producer_epoch,
                    first_sequence: info.base_sequence,
                    last_sequence: info.last_sequence(),
                };
                table.record(&producer, entry.offset);
                batches += 1;
            }
        }
    }
    if batches > 0 {
        info!(dir = %log.dir().display(), batches, "idempotent producers rebuilt from the log");
    }
    table
}

/// The stored and RecordBatch headers of `entries` (stored Kafka batches of `file`), read
/// on the blocking pool: a cold segment must not stall the executor.
async fn read_headers(
    file: &Rc<File>,
    entries: &[IndexEntry],
) -> std::io::Result<Vec<[u8; STORED_HEADERS_LEN]>> {
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    // A descriptor of its own for the job, which runs on even if this future is dropped.
    let file = file.try_clone()?;
    let positions: Vec<u64> = entries.iter().map(|e| u64::from(e.position)).collect();
    glommio::executor()
        .spawn_blocking(move || {
            positions
                .iter()
                .map(|&position| {
                    let mut headers = [0u8; STORED_HEADERS_LEN];
                    file.read_exact_at(&mut headers, position).map(|()| headers)
                })
                .collect()
        })
        .await
}
