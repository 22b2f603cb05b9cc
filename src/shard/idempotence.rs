//! Idempotent Kafka producers on the partition's owner: each produced batch with a producer
//! id is checked against the partition's [`ProducerTable`] and remembered once staged, under
//! a per-partition lock so that a check and the staging it allows are never interleaved
//! with another request's (staging can wait for a segment roll).
//!
//! A remembered batch keeps its log ticket until the log says it is stored; before each
//! check the producer's batches are settled against the log, and each commit settles its
//! own as soon as it ends, so a batch whose write failed is forgotten (with every later one
//! of its producer) and its retry is stored again rather than answered with offsets that
//! other batches now hold. The check is repeated right before staging (a write can fail
//! while staging waits for a roll). docs/KAFKA.md, "Idempotent producers and failed
//! writes", has the table.
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
use crate::protocol::record::{self, BatchFormat, BatchParts};
use crate::shard::producers::{ProducerBatch, ProducerTable, SequenceError, Settlement, Verdict};
use crate::shard::staging::stage_kafka_admitted;
use crate::shard::{Shard, ShardError};
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

type Table = ProducerTable<Ticket>;

/// One partition's table (`None` until built from the log, under the lock) and the lock
/// held from check to record.
struct Partition {
    table: RefCell<Option<Table>>,
    lock: glommio::sync::Semaphore,
}

impl Partition {
    /// Settles `producers`' batches against `log` (see [`ProducerTable::settle`]).
    fn settle(&self, log: &PartitionLog, producers: impl Iterator<Item = i64>) {
        let mut guard = self.table.borrow_mut();
        let Some(table) = guard.as_mut() else { return };
        for producer_id in producers {
            table.settle(producer_id, |ticket| settlement(log, ticket));
        }
    }
}

/// What the log says of a staged batch.
fn settlement(log: &PartitionLog, ticket: &Ticket) -> Settlement {
    match log.is_committed(ticket) {
        Ok(true) => Settlement::Stored,
        Ok(false) => Settlement::Pending,
        // Rolled back, or the partition fenced: recovery at the next start keeps only what
        // was acknowledged, and rebuilds the table from it.
        Err(_) => Settlement::Lost,
    }
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

/// Settles an idempotent produce's batches once its commit has ended, whichever way: held
/// by the produce in flight, used by [`Settle::settle`].
pub struct Settle {
    partition: Rc<Partition>,
    producer_ids: Vec<i64>,
}

impl Settle {
    pub fn settle(self, log: &PartitionLog) {
        self.partition.settle(log, self.producer_ids.into_iter());
    }
}

impl Shard {
    /// Stages an idempotent producer's batches: retries of remembered batches are answered
    /// with their offsets (and the original's ticket while it is in flight) and not stored
    /// again; out-of-sequence batches and older epochs are refused; the rest are staged as
    /// one run and remembered with their tickets.
    pub(crate) async fn stage_idempotent<'b>(
        &self,
        log: &Rc<PartitionLog>,
        topic: &str,
        partition: u32,
        batches: impl Iterator<Item = BatchParts<'b>> + Clone,
        producers: &[IdempotentBatch],
    ) -> Result<(u64, Ticket, Settle), ShardError> {
        let state = self.producer_partition(topic, partition);
        let _held = state
            .lock
            .acquire_permit(1)
            .await
            .map_err(|_| ShardError::shutting_down("producer table closed"))?;
        if state.table.borrow().is_none() {
            let table = rebuild(log, &self.metrics).await;
            *state.table.borrow_mut() = Some(table);
        }
        let run: Vec<ProducerBatch> = producers.iter().map(|b| b.producer).collect();
        let mut producer_ids: Vec<i64> = run.iter().map(|b| b.producer_id).collect();
        producer_ids.dedup();
        let settle = Settle {
            partition: Rc::clone(&state),
            producer_ids,
        };
        let check = || {
            state.settle(log, settle.producer_ids.iter().copied());
            let guard = state.table.borrow();
            guard
                .as_ref()
                .expect("built above")
                .check_run(&run)
                .map_err(sequence_failure)
        };
        if let Verdict::Duplicate {
            base_offset,
            staged,
        } = check()?
        {
            let end = base_offset + producers[0].offsets;
            let ticket = staged.unwrap_or_else(|| log.ticket_for_staged(base_offset, end));
            return Ok((base_offset, ticket, settle));
        }
        // Under the lock nothing else records a batch, so the verdict can only have turned
        // into a refusal (a batch this run follows was lost meanwhile), never a retry.
        let admit = || match check()? {
            Verdict::Append => Ok(()),
            Verdict::Duplicate { .. } => {
                debug_assert!(false, "a retry appeared under the partition's lock");
                // Answered as an out-of-order batch, which the producer resolves itself.
                Err(ShardError::Sequence(SequenceError::RepeatInRun {
                    producer_id: producers[0].producer.producer_id,
                    index: 0,
                }))
            }
        };
        let (base_offset, last) = stage_kafka_admitted(log, batches, &self.metrics, admit).await?;
        let mut guard = state.table.borrow_mut();
        let table = guard.as_mut().expect("built above");
        let mut at = base_offset;
        for b in producers {
            let ticket = log.ticket_within(&last, at, at + b.offsets);
            table.record(&b.producer, at, Some(ticket));
            at += b.offsets;
        }
        debug_assert_eq!(at, last.end_offset, "the run's batches cover its offsets");
        Ok((base_offset, last, settle))
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

fn sequence_failure(e: SequenceError) -> ShardError {
    ShardError::Sequence(e)
}

/// The table as the log's last two segments leave it: every stored Kafka batch with a
/// producer id, in offset order. Each step plans up to `REBUILD_READ_BYTES` of batches,
/// has the storage check them (on its blocking thread; a damaged batch is skipped, as it
/// is never served), then reads the headers of the Kafka ones on the blocking pool.
pub(crate) async fn rebuild<T: Copy>(log: &PartitionLog, metrics: &Metrics) -> ProducerTable<T> {
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
                table.record(&producer, entry.offset, None);
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
