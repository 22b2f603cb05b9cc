//! The owner's half of a fetch: a read plan of the partition's log from the offset
//! asked, long-polling until data comes, the deadline passes or the broker stops; the
//! caller's core sends the planned bytes from its own descriptor (zero-copy).

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use tracing::warn;

use crate::metrics::counters::Metrics;
use crate::shard::calls::{Fetch, Run, SendPlan};
use crate::shard::{Shard, ShardError};
use crate::storage::{PartitionLog, StorageError};

impl Shard {
    async fn fetch_local(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait_ms: u32,
    ) -> Result<SendPlan, ShardError> {
        let log = self.owned_log(topic, partition)?;
        self.check_reads(topic, partition)?;
        let wait = Duration::from_millis(max_wait_ms.into()).min(self.config.fetch_wait_max);
        let deadline = Instant::now() + wait;
        loop {
            let plan = log
                .read_plan(offset, u64::from(max_bytes.max(1)))
                .inspect_err(|e| self.note_corrupt(&log, e))?;
            let now = Instant::now();
            if !plan.is_empty() || now >= deadline || self.shutdown.is_requested() {
                let (plan, read) = if plan.is_empty() {
                    (plan, false)
                } else {
                    let (checked, found) = log.check_plan(plan).await;
                    Metrics::add(&self.metrics.corrupt_batches_detected, found);
                    checked.inspect_err(|e| self.note_corrupt(&log, e))?
                };
                let active_base = log.segments().last().map_or(0, |s| s.0);
                let records = plan.batches.iter().map(|b| u64::from(b.records)).sum();
                log.count_read(records, plan.length);
                let next_offset = plan.next_offset().unwrap_or(offset);
                return Ok(SendPlan {
                    wal_path: crate::storage::segment::wal_path(
                        log.dir(),
                        plan.segment_base_offset,
                    ),
                    file_id: plan.file_id,
                    position: plan.position,
                    length: plan.length,
                    batches: plan.batches,
                    records,
                    next_offset,
                    high_watermark: plan.high_watermark,
                    log_start_offset: plan.log_start_offset,
                    // Just read for the check, or in the active segment: in the page cache.
                    hot: read || plan.segment_base_offset == active_base,
                });
            }
            // Wake on new data, at the deadline, or at shutdown, whichever comes first.
            let changed = log.changed();
            let timer = glommio::timer::sleep(deadline - now);
            let stop = self.shutdown.wait();
            changed.or(timer).or(stop).await;
        }
    }

    fn note_corrupt(&self, log: &PartitionLog, error: &StorageError) {
        if let StorageError::Corrupt {
            offset,
            next_offset,
        } = error
        {
            warn!(dir = %log.dir().display(), offset, next_offset, "fetch refused: it starts at a corrupt batch");
        }
    }
}

impl Run for Fetch {
    async fn run(self, shard: &Rc<Shard>) -> Result<SendPlan, ShardError> {
        shard
            .fetch_local(
                &self.topic,
                self.partition,
                self.offset,
                self.max_bytes,
                self.max_wait_ms,
            )
            .await
    }
}
