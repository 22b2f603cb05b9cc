//! ListOffsets by timestamp, to the record (`docs/KAFKA.md`, "ListOffsets by timestamp"),
//! for the Kafka and native front-ends alike.
//!
//! The partition's index keeps one maximum timestamp per batch, so the owner answers the
//! first offset of the first batch whose newest record is at or after the time. Kafka
//! answers the first *record* at or after it, which may be in the middle of that batch.
//! So, when that batch is a RecordBatch (its records carry their own timestamps), its bytes
//! are read (inline from the active segment, on the blocking pool otherwise, like a fetch's
//! conversion) and its records' timestamps looked at. A native batch carries one timestamp
//! for all its records: its first offset is the answer. A compressed RecordBatch is not
//! opened (the broker never decompresses producers' data): its first offset too.

use std::rc::Rc;

use tracing::{debug, warn};

use crate::protocol::kafka::timestamps::{self, SeekError};
use crate::protocol::native::OffsetSpec;
use crate::protocol::record::{self, BatchFormat};
use crate::server::sendfile::{open_segment, read_range};
use crate::shard::calls::Fetch;
use crate::shard::used::UsedTopics;
use crate::shard::{Shard, ShardError};

/// The offset `spec` names in a partition: as `Shard::list_offsets`, and for a timestamp the
/// first record at or after it.
pub async fn list_offsets(
    shard: &Rc<Shard>,
    used: &UsedTopics,
    topic: &[u8],
    partition: u32,
    spec: OffsetSpec,
) -> Result<u64, ShardError> {
    let offset = shard.list_offsets(used, topic, partition, spec).await?;
    let OffsetSpec::Timestamp(at_ns) = spec else {
        return Ok(offset);
    };
    match within_batch(shard, topic, partition, offset, at_ns).await {
        Ok(found) => Ok(found),
        // The batch's first offset is still at or before every record at or after the time
        // (a consumer reads a few records too many): answered, with a log line and a metric.
        Err(error) => {
            crate::metrics::counters::Metrics::inc(&shard.metrics.time_seeks_by_batch);
            warn!(offset, %error, "time seek answered with the batch's first offset");
            Ok(offset)
        }
    }
}

impl From<ShardError> for InsideError {
    fn from(failure: ShardError) -> Self {
        InsideError::Shard(failure)
    }
}

/// Why a batch was not looked inside.
#[derive(Debug, thiserror::Error)]
enum InsideError {
    #[error(transparent)]
    Shard(ShardError),
    #[error("reading the batch: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Batch(#[from] SeekError),
}

async fn within_batch(
    shard: &Rc<Shard>,
    topic: &[u8],
    partition: u32,
    offset: u64,
    at_ns: u64,
) -> Result<u64, InsideError> {
    let topic = std::str::from_utf8(topic).map_err(|_| ShardError::InvalidName {
        what: "topic",
        reason: "not UTF-8".into(),
    })?;
    // The plan of the one batch at `offset` (never waits: no long poll), from its owner;
    // straight to the owner, so a topic deleted meanwhile is not created again.
    let call = Fetch {
        topic: topic.to_string(),
        partition,
        offset,
        max_bytes: 1,
        max_wait_ms: 0,
    };
    let plan = shard
        .route(shard.placement().owner(topic, partition), call)
        .await?;
    let Some(entry) = plan.batches.first() else {
        return Ok(offset); // the end of the log: nothing is at or after the time
    };
    if entry.offset != offset || entry.format != BatchFormat::Kafka {
        return Ok(offset);
    }
    let file = open_segment(&plan.wal_path, plan.file_id)?;
    let header = record::HEADER_LEN as u64;
    let length = u64::from(entry.length).saturating_sub(header);
    let bytes = read_range(&file, u64::from(entry.position) + header, length, plan.hot).await?;
    // Record timestamps are ms; a time between two ms is after the earlier one.
    let at_ms = i64::try_from(at_ns.div_ceil(1_000_000)).unwrap_or(i64::MAX);
    let found = match timestamps::first_at_or_after(&bytes, at_ms, length) {
        Ok(Some(delta)) => offset + u64::try_from(delta).unwrap_or(0),
        // The index said the batch's newest record is at or after the time; its records
        // disagree (a producer's max timestamp is its own claim): the next batch.
        Ok(None) => entry.next_offset(),
        Err(SeekError::Compressed(codec)) => {
            debug!(
                offset,
                ?codec,
                "time seek inside a compressed batch: its first offset"
            );
            offset
        }
        Err(error) => return Err(error.into()),
    };
    Ok(found.min(entry.next_offset()))
}
