//! Each core's background tasks: retention and age-based rolls, interval syncs.

use std::rc::Rc;
use std::time::Duration;

use tracing::{info, warn};

use crate::shard::Shard;

/// How often each core applies retention and age-based rolls.
const RETENTION_EVERY: Duration = Duration::from_secs(1);

/// Applies retention to the partitions this core owns, in a low-share task queue so it
/// never competes with produce and fetch for the core.
pub(super) async fn background_retention(shard: Rc<Shard>) {
    let queue = glommio::executor().create_task_queue(
        glommio::Shares::Static(50),
        glommio::Latency::NotImportant,
        "retention",
    );
    let task = glommio::spawn_local_into(
        async move {
            while !shard.shutdown.is_requested() {
                glommio::timer::sleep(RETENTION_EVERY).await;
                for (meta, partition, log) in shard.local_partitions() {
                    log.roll_if_aged(meta.log_config(&shard.config.log).segment_age)
                        .await;
                    let retention = meta.retention();
                    // A replicated partition's old segments hold Raft entries a follower
                    // may still need, until segment snapshots are built: kept.
                    if log.is_raft_indexed()
                        || retention == crate::storage::Retention::default()
                            && !log.has_segment_below_start()
                    {
                        continue;
                    }
                    match log.enforce_retention(&retention).await {
                        Ok(outcome) if outcome.segments_deleted > 0 => {
                            crate::metrics::counters::Metrics::add(
                                &shard.metrics.retention_bytes_deleted,
                                outcome.bytes_deleted,
                            );
                            info!(topic = %meta.name, partition, deleted = outcome.segments_deleted, bytes = outcome.bytes_deleted, log_start = outcome.log_start_offset, "retention applied");
                        }
                        Ok(_) => {}
                        Err(error) => {
                            warn!(topic = %meta.name, partition, %error, "retention failed")
                        }
                    }
                }
            }
        },
        queue,
    );
    if let Ok(task) = task {
        task.await;
    }
}

/// Under `fsync = interval(ms)`, makes written data durable at least every interval.
pub(super) async fn background_sync(shard: Rc<Shard>) {
    let every = Duration::from_millis(10);
    while !shard.shutdown.is_requested() {
        glommio::timer::sleep(every).await;
        for log in shard.local_logs().into_iter().chain(shard.offsets.logs()) {
            if let crate::storage::FsyncPolicy::Interval(interval) = log.config().fsync
                && log.sync_due(interval)
                && let Err(error) = log.sync().await
            {
                warn!(dir = %log.dir().display(), %error, "interval sync failed");
            }
        }
    }
}
