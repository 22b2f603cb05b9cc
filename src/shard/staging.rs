//! Staging a produce's batches on the owner core: validated, given offsets and copied into
//! the partition's pending buffer by the log, with the append's metrics (batches, records and
//! bytes in, bad batches) counted once, here.

use std::rc::Rc;

use crate::metrics::counters::Metrics;
use crate::protocol::native::ProduceBatches;
use crate::protocol::record::{BatchParts, BatchTrust};
use crate::shard::ShardError;
use crate::storage::{PartitionLog, StorageError, Ticket};

/// Stages one batch whose CRC the broker computes (HermitMQ v1), counting it like
/// [`stage_all`].
pub(crate) async fn stage_one(
    log: &Rc<PartitionLog>,
    batch: &[u8],
    metrics: &Metrics,
) -> Result<(u64, Ticket), ShardError> {
    let ticket = log.stage(batch, None).await.inspect_err(|e| {
        if matches!(e, StorageError::BadBatch(_)) {
            Metrics::inc(&metrics.bad_batches);
        }
    })?;
    Metrics::inc(&metrics.batches_in);
    Metrics::add(&metrics.records_in, ticket.end_offset - ticket.base_offset);
    Metrics::add(&metrics.bytes_in, batch.len() as u64);
    Ok((ticket.base_offset, ticket))
}

/// Stages every batch of a client's produce request on `log` as one contiguous run (all
/// validated, CRCs included, before any is staged: a request is stored whole or not at all,
/// so a client retrying an error never duplicates part of it). Returns the first offset and
/// the last batch's ticket; committing it commits them all.
pub async fn stage_all(
    log: &Rc<PartitionLog>,
    batches: ProduceBatches<'_>,
    metrics: &Metrics,
) -> Result<(u64, Ticket), ShardError> {
    let staged = if batches.count == 1 {
        let (crc, batch) = batches.iter().next().expect("one batch");
        log.stage(batch, Some(crc))
            .await
            .map(|t| (t.base_offset, t))
    } else {
        log.stage_many(
            batches
                .iter()
                .map(|(crc, batch)| (BatchTrust::ProducerCrc(crc), BatchParts::whole(batch))),
        )
        .await
    };
    let staged = staged.map_err(|e| Staging::Storage(e).counted(metrics))?;
    let bytes = batches.as_bytes().len() as u64 - 4 * u64::from(batches.count);
    count_staged(metrics, batches.count, bytes, &staged);
    Ok(staged)
}

/// [`stage_all`] of Kafka RecordBatches whose CRCs the front-end checked (each with the
/// header it made for it), with `admit` asked right before they are staged (see
/// [`PartitionLog::stage_many_admitted`]): a refusal stages nothing.
pub async fn stage_kafka_admitted<'b>(
    log: &Rc<PartitionLog>,
    batches: impl Iterator<Item = BatchParts<'b>> + Clone,
    metrics: &Metrics,
    mut admit: impl FnMut() -> Result<(), ShardError>,
) -> Result<(u64, Ticket), ShardError> {
    let staged = log
        .stage_many_admitted(
            batches
                .clone()
                .map(|batch| (BatchTrust::KafkaChecked, batch)),
            || admit().map_err(Staging::Refused),
        )
        .await
        .map_err(|e| e.counted(metrics))?;
    let (count, bytes) = batches.fold((0u32, 0u64), |(n, bytes), b| {
        (n + 1, bytes + b.len() as u64)
    });
    count_staged(metrics, count, bytes, &staged);
    Ok(staged)
}

/// Why staging a request failed: the storage refused it, or the caller's admission did.
enum Staging {
    Storage(StorageError),
    Refused(ShardError),
}

impl From<StorageError> for Staging {
    fn from(e: StorageError) -> Staging {
        Staging::Storage(e)
    }
}

impl Staging {
    /// The failure to answer, counting a bad batch.
    fn counted(self, metrics: &Metrics) -> ShardError {
        match self {
            Staging::Storage(e) => {
                if matches!(e, StorageError::BadBatch(_)) {
                    Metrics::inc(&metrics.bad_batches);
                }
                e.into()
            }
            Staging::Refused(failure) => failure,
        }
    }
}

/// The append's metrics, once, on the owner core.
fn count_staged(metrics: &Metrics, batches: u32, bytes: u64, staged: &(u64, Ticket)) {
    Metrics::add(&metrics.batches_in, u64::from(batches));
    Metrics::add(&metrics.records_in, staged.1.end_offset - staged.0);
    Metrics::add(&metrics.bytes_in, bytes);
}
