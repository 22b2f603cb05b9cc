//! This core's metrics snapshot, taken on the core it describes (a scrape asks every core
//! for one over the mesh: `server::scrape`).

use std::rc::Rc;

use crate::metrics::snapshot::{CommittedOffset, CoreSnapshot, PartitionSnapshot};
use crate::shard::calls::{MetricsSnapshot, Run};
use crate::shard::{Shard, ShardError};

/// This core's metrics: its counters, storage I/O, the partitions it owns and the committed
/// offsets in its shards. Runs on the core it describes.
pub fn collect(shard: &Shard) -> CoreSnapshot {
    let partitions = shard
        .local_partitions()
        .into_iter()
        .map(|(meta, partition, log)| {
            let stats = log.stats();
            let segments = log.segments();
            PartitionSnapshot {
                topic: meta.name.clone(),
                partition,
                log_start_offset: log.log_start_offset(),
                log_end_offset: log.high_watermark(),
                size_bytes: segments.iter().map(|(_, size)| size).sum(),
                segments: segments.len() as u64,
                batches_in: stats.batches,
                records_in: stats.records,
                bytes_in: stats.bytes,
                records_out: stats.records_read,
                bytes_out: stats.bytes_read,
            }
        })
        .collect();
    let committed = shard
        .offsets
        .entries(None)
        .into_iter()
        .map(|(group, topic, partition, c)| CommittedOffset {
            group,
            topic,
            partition,
            offset: c.offset,
        })
        .collect();
    CoreSnapshot {
        core: shard.core,
        counters: shard.metrics.snapshot(),
        requests: shard.metrics.request_counts.snapshot(),
        io: crate::metrics::io::snapshot(),
        partitions,
        committed,
    }
}

impl Run for MetricsSnapshot {
    async fn run(self, shard: &Rc<Shard>) -> Result<Box<CoreSnapshot>, ShardError> {
        Ok(Box::new(collect(shard)))
    }
}
