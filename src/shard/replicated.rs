//! Replicated partitions as the shard sees them (docs/REPLICATION.md): the partition's
//! log is its Raft log, driven by this node's replica on the partition's core. The shard
//! opens the log; the cluster's [`ReplicaHost`] (set by the server on every core of a
//! cluster node) starts the replica around it. A produce on the leader is validated here
//! whole, proposed batch by batch (the leader gives the offsets), and acknowledged once a
//! majority holds it: the commit passed its last batch with the leader's term still there.
//! Readers stop at the high watermark, which is the commit (the log's commit cap).
//!
//! Idempotent Kafka producers: the leader keeps the partition's producer table, built
//! from its log in each term it leads in (the log is replicated, and a new leader's log
//! holds every acknowledged batch, so a retry after a failover is still recognised); it
//! waits until the leader has committed in its term, when its log's committed prefix is
//! the group's. A batch is remembered with its proposal and settled against the outcome.
//!
//! Not built yet: retention and compaction of a replicated log (skipped: they would
//! renumber Raft entries below followers that may still need them).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use futures_lite::future::BoxedLocal;

use crate::metrics::counters::Metrics;
use crate::protocol::native::ProduceBatches;
use crate::protocol::record::{BatchParts, BatchTrust};
use crate::shard::calls::{Produce, Produced};
use crate::shard::data::{BatchSource, Batches, kafka_parts};
use crate::shard::idempotence::{IdempotentBatch, rebuild};
use crate::shard::placement::ReplicaSet;
use crate::shard::producers::{ProducerBatch, ProducerTable, Settlement, Verdict};
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
    /// between them; each batch's proposal.
    fn propose(&self, batches: Vec<Vec<u8>>) -> BoxedLocal<Result<Vec<Proposal>, ShardError>>;
    /// The term this replica is in (a leader's: the term it leads in).
    fn term(&self) -> u64;
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
    pub next_offset: u64,
    /// The proposal whose commit acknowledges the produce; `None` for an idempotent
    /// producer's retry of a batch already stored.
    pub last: Option<Proposal>,
}

/// Idempotent producers of the replicated partitions a core leads, by partition.
#[derive(Default)]
pub(crate) struct ReplicatedProducers {
    partitions: RefCell<HashMap<(String, u32), Rc<LeaderTable>>>,
}

impl ReplicatedProducers {
    pub(crate) fn forget_topic(&self, topic: &str) {
        self.partitions.borrow_mut().retain(|(t, _), _| t != topic);
    }

    fn of(&self, topic: &str, partition: u32) -> Rc<LeaderTable> {
        let key = (topic.to_string(), partition);
        let mut partitions = self.partitions.borrow_mut();
        Rc::clone(partitions.entry(key).or_insert_with(|| {
            Rc::new(LeaderTable {
                term: Cell::new(0),
                table: RefCell::new(None),
                lock: glommio::sync::Semaphore::new(1),
            })
        }))
    }
}

/// One partition's table, for the term it was built in, and the lock held from check to
/// record.
struct LeaderTable {
    term: Cell<u64>,
    table: RefCell<Option<ProducerTable<Proposal>>>,
    lock: glommio::sync::Semaphore,
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
        let (stored, producers) = match batches {
            Batches::Checked(batches) => (checked(&log, batches)?, &[][..]),
            Batches::Single(batch) => (
                vec![check(&log, BatchParts::whole(batch), BatchTrust::Built)?],
                &[][..],
            ),
            Batches::Kafka { batches, producers } => {
                let stored = kafka_parts(batches)
                    .map(|parts| check(&log, parts, BatchTrust::KafkaChecked))
                    .collect::<Result<_, _>>()?;
                (stored, producers)
            }
        };
        self.propose_stored(replica, topic, partition, stored, producers)
            .await
    }

    /// [`Shard::propose_produce`] for a produce another core sent here.
    pub(crate) async fn propose_remote(
        &self,
        replica: Rc<dyn Replicated>,
        produce: &Produce,
    ) -> Result<ReplicatedProduce, ShardError> {
        let log = replica.log();
        let limits = self.config.log.limits;
        let batches = ProduceBatches::from_validated(produce.count, &produce.batches, limits);
        let stored = match produce.source {
            BatchSource::Client => checked(&log, batches)?,
            BatchSource::Kafka => batches
                .iter()
                .map(|(_, batch)| check(&log, BatchParts::whole(batch), BatchTrust::KafkaChecked))
                .collect::<Result<_, _>>()?,
        };
        let (topic, partition) = (&produce.topic, produce.partition);
        self.propose_stored(replica, topic, partition, stored, &produce.producers)
            .await
    }

    /// Proposes checked batches: an idempotent producer's through its table, any other
    /// as they are.
    async fn propose_stored(
        &self,
        replica: Rc<dyn Replicated>,
        topic: &str,
        partition: u32,
        stored: Vec<Vec<u8>>,
        producers: &[IdempotentBatch],
    ) -> Result<ReplicatedProduce, ShardError> {
        if !producers.is_empty() {
            return self
                .propose_idempotent(replica, topic, partition, stored, producers)
                .await;
        }
        let proposed = self.propose_all(replica, topic, partition, stored).await?;
        Ok(proposed.produce)
    }

    /// Proposes an idempotent producer's batches: a retry of a remembered batch is
    /// answered with its offsets (once its proposal commits) and not proposed again;
    /// out-of-sequence batches and older epochs are refused.
    async fn propose_idempotent(
        &self,
        replica: Rc<dyn Replicated>,
        topic: &str,
        partition: u32,
        stored: Vec<Vec<u8>>,
        producers: &[IdempotentBatch],
    ) -> Result<ReplicatedProduce, ShardError> {
        let state = self.replicated_producers.of(topic, partition);
        let _held = state
            .lock
            .acquire_permit(1)
            .await
            .map_err(|_| ShardError::shutting_down("producer table closed"))?;
        // A table from another term may miss what the last leader stored: built again,
        // once this leader's committed prefix is the group's.
        if state.term.get() != replica.term() || state.table.borrow().is_none() {
            self.check_reads(topic, partition)?;
            let table = rebuild(&replica.log(), &self.metrics).await;
            *state.table.borrow_mut() = Some(table);
            state.term.set(replica.term());
        }
        let run: Vec<ProducerBatch> = producers.iter().map(|b| b.producer).collect();
        let verdict = {
            let mut guard = state.table.borrow_mut();
            let table = guard.as_mut().expect("built above");
            for b in &run {
                table.settle(b.producer_id, |p| match replica.outcome(p) {
                    Outcome::Committed => Settlement::Stored,
                    Outcome::Pending => Settlement::Pending,
                    Outcome::Lost => Settlement::Lost,
                });
            }
            table.check_run(&run).map_err(ShardError::Sequence)?
        };
        if let Verdict::Duplicate {
            base_offset,
            staged,
        } = verdict
        {
            return Ok(ReplicatedProduce {
                replica,
                topic: topic.to_string(),
                partition,
                base_offset,
                next_offset: base_offset + producers[0].offsets,
                last: staged,
            });
        }
        let produce = self.propose_all(replica, topic, partition, stored).await?;
        let mut guard = state.table.borrow_mut();
        let table = guard.as_mut().expect("built above");
        for (b, proposal) in producers.iter().zip(&produce.proposals) {
            table.record(&b.producer, proposal.base_offset, Some(*proposal));
        }
        Ok(produce.produce)
    }

    async fn propose_all(
        &self,
        replica: Rc<dyn Replicated>,
        topic: &str,
        partition: u32,
        stored: Vec<Vec<u8>>,
    ) -> Result<Proposed, ShardError> {
        let (count, bytes) = (
            stored.len() as u64,
            stored.iter().map(|b| b.len() as u64).sum(),
        );
        let proposals = replica.propose(stored).await?;
        let (Some(first), Some(last)) = (proposals.first().copied(), proposals.last().copied())
        else {
            return Err(ShardError::malformed("a produce with no batch"));
        };
        Metrics::add(&self.metrics.batches_in, count);
        Metrics::add(
            &self.metrics.records_in,
            last.next_offset - first.base_offset,
        );
        Metrics::add(&self.metrics.bytes_in, bytes);
        let produce = ReplicatedProduce {
            replica,
            topic: topic.to_string(),
            partition,
            base_offset: first.base_offset,
            next_offset: last.next_offset,
            last: Some(last),
        };
        Ok(Proposed { produce, proposals })
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

/// A produce proposed, and each of its batches' proposals.
struct Proposed {
    produce: ReplicatedProduce,
    proposals: Vec<Proposal>,
}

impl ReplicatedProduce {
    pub(crate) fn is_done(&self) -> bool {
        self.last
            .is_none_or(|last| self.replica.outcome(&last) != Outcome::Pending)
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
            let Some(last) = self.last else {
                return Ok(self.produced());
            };
            match self.replica.outcome(&last) {
                Outcome::Committed => return Ok(self.produced()),
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

    fn produced(&self) -> Produced {
        Produced {
            base_offset: self.base_offset,
            next_offset: self.next_offset,
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
