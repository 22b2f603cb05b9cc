//! Compaction on the shard: on-demand passes (the native `Compact` request, routed to the
//! partition's owner) and the background trigger, which runs in a low-share task queue so
//! that produce and fetch on the same core keep their latency while a pass reads and
//! rewrites segments.
//!
//! A partition is compacted in the background when both hold: its dirty ratio (the share of
//! closed-segment bytes written since its last pass) is at least `--compact-dirty-ratio`,
//! and its last pass is at least `--compact-interval-ms` old. The offsets store's internal
//! logs are compacted by the same rule: the newest commit per (group, topic, partition) key
//! is all a replay needs.

use std::rc::Rc;
use std::time::Duration;

use tracing::{info, warn};

use crate::metrics::counters::Metrics;
use crate::shard::calls::{Compact, Run};
use crate::shard::topics::Cleanup;
use crate::shard::{Shard, ShardError};
use crate::storage::{CompactionOutcome, PartitionLog};

/// How often the background task looks for partitions to compact.
const CHECK_EVERY: Duration = Duration::from_secs(1);

impl Shard {
    /// Runs a compaction pass on a partition of a `cleanup = compact` topic now, on its
    /// owner core, and answers when it is done.
    pub async fn compact(
        self: &Rc<Self>,
        topic: &[u8],
        partition: u32,
    ) -> Result<CompactionOutcome, ShardError> {
        let topic = self.valid_name(topic, "topic")?;
        // No topic is created on demand for this: compacting a typo should fail.
        let Some(meta) = self.topic(topic) else {
            return Err(self.unknown_topic(topic));
        };
        if partition >= meta.partitions {
            return Err(ShardError::UnknownPartition {
                topic: topic.to_string(),
                partition,
                partitions: meta.partitions,
            });
        }
        if meta.cleanup != Cleanup::Compact {
            return Err(ShardError::invalid_config(format!(
                "topic {topic} has cleanup = delete; only cleanup = compact topics are compacted"
            )));
        }
        if self.placement().replica_set(topic, partition).is_some() {
            return Err(ShardError::invalid_config(format!(
                "{topic}/{partition} is replicated: its log is not compacted until segment snapshots are built"
            )));
        }
        let call = Compact {
            topic: topic.to_string(),
            partition,
        };
        self.route(self.placement().owner(topic, partition), call)
            .await
    }

    /// The owner's half of [`Shard::compact`].
    async fn compact_local(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<CompactionOutcome, ShardError> {
        let log = self.owned_log(topic, partition)?;
        self.run_pass(&log, topic, partition, "requested").await
    }

    async fn run_pass(
        &self,
        log: &Rc<PartitionLog>,
        topic: &str,
        partition: u32,
        why: &'static str,
    ) -> Result<CompactionOutcome, ShardError> {
        let dirty_ratio = log.dirty_ratio();
        match log.compact(&self.config.compaction.limits).await {
            Ok(outcome) => {
                let m = &self.metrics;
                Metrics::inc(&m.compactions);
                Metrics::add(&m.compaction_bytes_before, outcome.bytes_before);
                Metrics::add(&m.compaction_bytes_after, outcome.bytes_after);
                Metrics::add(&m.compaction_batches_removed, outcome.batches_removed);
                info!(
                    topic,
                    partition,
                    why,
                    dirty_ratio,
                    segments_examined = outcome.segments_examined,
                    segments_rewritten = outcome.segments_rewritten,
                    batches_removed = outcome.batches_removed,
                    bytes_before = outcome.bytes_before,
                    bytes_after = outcome.bytes_after,
                    keys = outcome.keys,
                    key_map_full = outcome.key_map_full,
                    duration_ms = outcome.duration.as_millis() as u64,
                    "compaction pass done"
                );
                Ok(outcome)
            }
            Err(error) => {
                Metrics::inc(&self.metrics.compaction_failures);
                warn!(topic, partition, why, %error, "compaction pass failed; the segments are as they were");
                Err(ShardError::from(error))
            }
        }
    }
}

/// The background trigger (see the module docs), in its own low-share task queue.
pub async fn background_compaction(shard: Rc<Shard>) {
    let queue = glommio::executor().create_task_queue(
        glommio::Shares::Static(25),
        glommio::Latency::NotImportant,
        "compaction",
    );
    let task = glommio::spawn_local_into(
        async move {
            let settings = shard.config.compaction;
            while !shard.shutdown.is_requested() {
                glommio::timer::sleep(CHECK_EVERY).await;
                let partitions = shard
                    .local_partitions()
                    .into_iter()
                    // Compacting a replicated log would renumber its Raft entries: not
                    // until segment snapshots are built.
                    .filter(|(meta, _, log)| {
                        meta.cleanup == Cleanup::Compact && !log.is_raft_indexed()
                    })
                    .map(|(meta, partition, log)| (meta.name.clone(), partition, log));
                let offsets = shard
                    .offsets
                    .logs()
                    .into_iter()
                    .map(|log| ("__offsets".to_string(), 0, log));
                for (topic, partition, log) in partitions.chain(offsets).collect::<Vec<_>>() {
                    if shard.shutdown.is_requested() {
                        break;
                    }
                    if log.last_compaction().elapsed() >= settings.interval_min
                        && log.dirty_ratio() >= settings.dirty_ratio_min
                    {
                        let _ = shard.run_pass(&log, &topic, partition, "dirty").await;
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

impl Run for Compact {
    async fn run(self, shard: &Rc<Shard>) -> Result<CompactionOutcome, ShardError> {
        shard.compact_local(&self.topic, self.partition).await
    }
}
