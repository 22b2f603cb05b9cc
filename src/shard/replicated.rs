//! Replicated partitions as the shard sees them (docs/REPLICATION.md): the partition's
//! log is its Raft log, driven by this node's replica on the partition's core. The shard
//! opens the log; the cluster's [`ReplicaHost`] (set by the server on every core of a
//! cluster node) starts the replica around it. A produce on the leader is validated here
//! whole, proposed batch by batch (the leader gives the offsets), and acknowledged once a
//! majority holds it: the commit passed its last batch with the leader's term still there.
//! Readers stop at the high watermark, which is the commit (the log's commit cap).
//!
//! Not built yet: idempotent producers on a replicated partition (refused, so no
//! duplicate is ever acknowledged as deduplicated), retention and compaction of its log
//! (skipped: they would renumber Raft entries below followers that may still need them).

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use futures_lite::future::BoxedLocal;

use crate::metrics::counters::Metrics;
use crate::protocol::native::ProduceBatches;
use crate::protocol::record::{BatchParts, BatchTrust};
use crate::shard::calls::{Produce, Produced};
use crate::shard::data::{BatchSource, Batches, kafka_parts};
use crate::shard::placement::ReplicaSet;
use crate::shard::{Shard, ShardError};
use crate::storage::PartitionLog;

/// How long a produce waits for a majority of the replicas before it is answered
/// [`ShardError::NotReplicated`] (Kafka's REQUEST_TIMED_OUT, retriable).
pub const REPLICATION_TIMEOUT: Duration = Duration::from_secs(10);

/// A batch proposed on the leader: the offsets it takes on every replica, and the Raft
/// entry it is (acknowledged once the commit reaches `index` with `term` still there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proposal {
    pub base_offset: u64,
    pub next_offset: u64,
    pub index: u64,
    pub term: u64,
}

/// What became of a proposal, as this replica knows now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Not committed yet.
    Pending,
    /// Committed: held durably by a majority, and below the high watermark.
    Committed,
    /// Another leader's entry took its index: it will never be committed.
    Lost,
}

/// Starts this node's replicas (the cluster's replica host on this core).
pub trait ReplicaHost {
    /// Starts the replica of `set`'s group over `log` (opened with
    /// `PartitionLog::open_raft`) on this core.
    fn start(
        &self,
        topic: &str,
        partition: u32,
        set: &ReplicaSet,
        log: Rc<PartitionLog>,
    ) -> Result<Rc<dyn Replicated>, ShardError>;
}

/// This node's running replica of one replicated partition.
pub trait Replicated {
    /// The partition's log now (cutting a divergent tail reopens it).
    fn log(&self) -> Rc<PartitionLog>;
    /// Proposes validated batches (stored format) as the leader, in order, with nothing
    /// between them; the first batch's offset and the last one's proposal.
    fn propose(&self, batches: Vec<Vec<u8>>) -> BoxedLocal<Result<(u64, Proposal), ShardError>>;
    fn outcome(&self, proposal: &Proposal) -> Outcome;
    /// Whether reads may be served here: this replica leads and its high watermark is the
    /// group's (see `ReplicaDriver::serves_reads`).
    fn serves_reads(&self) -> bool;
    /// Resolves once the commit or the leadership moved (or at once when stopped).
    fn changed(&self) -> BoxedLocal<()>;
    /// Stops the replica (its topic was deleted, or the broker stops).
    fn stop(&self);
}

/// A replicated produce proposed and not yet acknowledged.
pub(crate) struct ReplicatedProduce {
    pub replica: Rc<dyn Replicated>,
    pub topic: String,
    pub partition: u32,
    pub base_offset: u64,
    pub last: Proposal,
}

impl Shard {
    /// This core's replica of `topic`'s `partition`, when it is replicated and here.
    pub(crate) fn replicated(&self, topic: &str, partition: u32) -> Option<Rc<dyn Replicated>> {
        self.replicas
            .borrow()
            .get(&(topic.to_string(), partition))
            .cloned()
    }

    /// Starts this core's replica of a replicated partition over its log.
    pub(crate) fn start_replica(
        &self,
        topic: &str,
        partition: u32,
        set: &ReplicaSet,
        log: Rc<PartitionLog>,
    ) -> Result<(), ShardError> {
        let Some(host) = self.replica_host.get() else {
            return Err(ShardError::internal(format!(
                "{topic}/{partition} is replicated but this core has no replica host"
            )));
        };
        let replica = host.start(topic, partition, set, log)?;
        self.replicas
            .borrow_mut()
            .insert((topic.to_string(), partition), replica);
        Ok(())
    }

    /// Stops the replicas of `topic` on this core.
    pub(crate) fn stop_replicas(&self, topic: &str) {
        let mut replicas = self.replicas.borrow_mut();
        replicas.retain(|(name, _), replica| {
            let keep = name != topic;
            if !keep {
                replica.stop();
            }
            keep
        });
    }

    /// Stops every replica of this core (the broker stops).
    pub(crate) fn stop_all_replicas(&self) {
        for replica in self.replicas.borrow().values() {
            replica.stop();
        }
    }

    /// Validates a produce's batches whole, then proposes them in order as the leader.
    pub(crate) async fn propose_produce(
        &self,
        replica: Rc<dyn Replicated>,
        topic: &str,
        partition: u32,
        batches: Batches<'_>,
    ) -> Result<ReplicatedProduce, ShardError> {
        let log = replica.log();
        let stored = match batches {
            Batches::Checked(batches) => checked(&log, batches)?,
            Batches::Single(batch) => {
                vec![check(&log, BatchParts::whole(batch), BatchTrust::Built)?]
            }
            Batches::Kafka {
                batches,
                producers: [],
            } => kafka_parts(batches)
                .map(|parts| check(&log, parts, BatchTrust::KafkaChecked))
                .collect::<Result<_, _>>()?,
            Batches::Kafka { .. } => return Err(idempotence_refused(topic, partition)),
        };
        self.propose_all(replica, topic, partition, stored).await
    }

    /// [`Shard::propose_produce`] for a produce another core sent here.
    pub(crate) async fn propose_remote(
        &self,
        replica: Rc<dyn Replicated>,
        produce: &Produce,
    ) -> Result<ReplicatedProduce, ShardError> {
        let log = replica.log();
        if !produce.producers.is_empty() {
            return Err(idempotence_refused(&produce.topic, produce.partition));
        }
        let limits = self.config.log.limits;
        let batches = ProduceBatches::from_validated(produce.count, &produce.batches, limits);
        let stored = match produce.source {
            BatchSource::Client => checked(&log, batches)?,
            BatchSource::Kafka => batches
                .iter()
                .map(|(_, batch)| check(&log, BatchParts::whole(batch), BatchTrust::KafkaChecked))
                .collect::<Result<_, _>>()?,
        };
        self.propose_all(replica, &produce.topic, produce.partition, stored)
            .await
    }

    async fn propose_all(
        &self,
        replica: Rc<dyn Replicated>,
        topic: &str,
        partition: u32,
        stored: Vec<Vec<u8>>,
    ) -> Result<ReplicatedProduce, ShardError> {
        if stored.is_empty() {
            return Err(ShardError::malformed("a produce with no batch"));
        }
        let (count, bytes) = (
            stored.len() as u64,
            stored.iter().map(|b| b.len() as u64).sum(),
        );
        let (base_offset, last) = replica.propose(stored).await?;
        Metrics::add(&self.metrics.batches_in, count);
        Metrics::add(&self.metrics.records_in, last.next_offset - base_offset);
        Metrics::add(&self.metrics.bytes_in, bytes);
        Ok(ReplicatedProduce {
            replica,
            topic: topic.to_string(),
            partition,
            base_offset,
            last,
        })
    }
}

impl Shard {
    /// Refuses a read of a replicated partition this core's replica may not serve (not the
    /// leader, or a new one that has not committed in its term): the client asks again.
    pub(crate) fn check_reads(&self, topic: &str, partition: u32) -> Result<(), ShardError> {
        match self.replicated(topic, partition) {
            Some(replica) if !replica.serves_reads() => Err(ShardError::NotLeader {
                topic: topic.to_string(),
                partition,
                leader: String::from("not ready: no commit in its term yet, or not the leader"),
            }),
            _ => Ok(()),
        }
    }
}

impl ReplicatedProduce {
    pub(crate) fn is_done(&self) -> bool {
        self.replica.outcome(&self.last) != Outcome::Pending
    }

    /// Waits until a majority holds the produce's last batch (and so every batch before
    /// it), at most [`REPLICATION_TIMEOUT`]; never answers a success it cannot stand by.
    pub(crate) async fn acknowledged(self) -> Result<Produced, ShardError> {
        let deadline = Instant::now() + REPLICATION_TIMEOUT;
        loop {
            let refused = |reason: &str| ShardError::NotReplicated {
                topic: self.topic.clone(),
                partition: self.partition,
                reason: reason.to_string(),
            };
            match self.replica.outcome(&self.last) {
                Outcome::Committed => {
                    return Ok(Produced {
                        base_offset: self.base_offset,
                        next_offset: self.last.next_offset,
                    });
                }
                Outcome::Lost => {
                    return Err(refused(
                        "the leader changed before a majority held the batch",
                    ));
                }
                Outcome::Pending => {}
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(refused(&format!(
                    "not held by a majority of the replicas within {} s",
                    REPLICATION_TIMEOUT.as_secs()
                )));
            }
            let changed = self.replica.changed();
            changed
                .or(async move { glommio::timer::sleep(deadline - now).await })
                .await;
        }
    }
}

/// A client's `(crc, batch)` pairs, each checked against its CRC, as stored bytes.
fn checked(log: &PartitionLog, batches: ProduceBatches<'_>) -> Result<Vec<Vec<u8>>, ShardError> {
    batches
        .iter()
        .map(|(crc, batch)| check(log, BatchParts::whole(batch), BatchTrust::ProducerCrc(crc)))
        .collect()
}

fn check(
    log: &PartitionLog,
    batch: BatchParts<'_>,
    trust: BatchTrust,
) -> Result<Vec<u8>, ShardError> {
    log.check_batch(batch, trust)?;
    let mut bytes = Vec::with_capacity(batch.len());
    bytes.extend_from_slice(batch.head);
    bytes.extend_from_slice(batch.tail);
    Ok(bytes)
}

fn idempotence_refused(topic: &str, partition: u32) -> ShardError {
    ShardError::invalid_config(format!(
        "{topic}/{partition} is replicated: idempotent producers are not taken on replicated partitions yet (produce with enable.idempotence=false)"
    ))
}
