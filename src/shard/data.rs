//! The data path: produce, fetch plans, list offsets, partition states and metadata,
//! wherever the partition lives.
//!
//! A produce is two-phase so that a front-end can keep many in flight on one connection in
//! request order: [`Shard::start_produce`] stages the batches (local owner) or sends the
//! call (remote owner) before the next request is read, and [`Shard::finish_produce`]
//! waits for the acknowledgement. The append's metrics (batches, records and bytes in, bad
//! batches) are counted once, by [`staging`](crate::shard::staging), on the core that owns
//! the partition.

use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use tracing::warn;

use crate::metrics::counters::Metrics;
use crate::protocol::native::{OffsetSpec, ProduceBatches};
use crate::protocol::record::{self, BatchParts};
use crate::shard::admin::check_partition;
use crate::shard::calls::{
    Fetch, ListOffsets, PartitionState, PartitionStates, Produce, Produced, Run, SendPlan,
};
use crate::shard::idempotence::{IdempotentBatch, Settle};
use crate::shard::mesh::InFlight;
use crate::shard::placement::Place;
use crate::shard::staging::{stage_all, stage_kafka_admitted, stage_one};
use crate::shard::topics::TopicMeta;
use crate::shard::used::UsedTopics;
use crate::shard::{Hop, Shard, ShardError};
use crate::storage::{PartitionLog, Ticket};

/// Partitions asked of one place, and where each goes in the answer.
type Asked = (Vec<(String, u32)>, Vec<usize>);

/// Batches to append, as a front-end has them.
#[derive(Clone, Copy)]
pub enum Batches<'a> {
    /// Validated `(crc, batch)` pairs (CRCs checked), as a native produce request holds them.
    Checked(ProduceBatches<'a>),
    /// One batch whose CRC the broker computes (HermitMQ v1 sends none).
    Single(&'a [u8]),
    /// Kafka RecordBatches where they arrived, each with the pagurus header made for it,
    /// with the idempotence fields of each when the producer is idempotent (checked and
    /// remembered on the owner, `shard::idempotence`).
    Kafka {
        batches: &'a [KafkaBatch<'a>],
        producers: &'a [IdempotentBatch],
    },
}

/// A Kafka RecordBatch v2 whose CRC the front-end checked, still in the request it came in,
/// and the header it is stored under (empty key, the RecordBatch as payload): storage copies
/// the two into the log one after the other, so the RecordBatch is copied once.
#[derive(Debug, Clone, Copy)]
pub struct KafkaBatch<'a> {
    pub header: [u8; record::HEADER_LEN],
    pub record_batch: &'a [u8],
}

impl<'a> KafkaBatch<'a> {
    pub fn parts(&self) -> BatchParts<'_> {
        BatchParts {
            head: &self.header,
            tail: self.record_batch,
        }
    }
}

/// The stored batches of a Kafka produce, as staging takes them.
pub(crate) fn kafka_parts<'b>(
    batches: &'b [KafkaBatch<'_>],
) -> impl Iterator<Item = BatchParts<'b>> + Clone {
    batches.iter().map(KafkaBatch::parts)
}

/// `(crc, batch)` pairs as the mesh and [`Produce`] carry them (a copy: the batches cross
/// to another core), the CRC fields unset (`BatchSource::Kafka`).
fn kafka_pairs(batches: &[KafkaBatch<'_>]) -> Bytes {
    let bytes = batches.iter().map(|b| 4 + b.parts().len()).sum();
    let mut pairs = Vec::with_capacity(bytes);
    for batch in batches {
        pairs.extend_from_slice(&[0; 4]);
        pairs.extend_from_slice(&batch.header);
        pairs.extend_from_slice(batch.record_batch);
    }
    pairs.into()
}

/// Who checked the `(crc, batch)` pairs of a produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchSource {
    /// A client's request: each pair's CRC is the producer's, checked when staged.
    Client,
    /// The Kafka front-end, around RecordBatches whose CRC it checked: staged as Kafka
    /// format with no further pass over their bytes; the pairs' CRC fields are not set.
    Kafka,
}

/// A produce started by [`Shard::start_produce`] and not yet acknowledged.
pub struct ProduceInFlight {
    /// When its batches reached the shard: the start of `pagurus_produce_ack_duration_seconds`.
    started: Instant,
    state: InFlightState,
}

/// Where a produce in flight waits.
enum InFlightState {
    /// Staged on this core; acknowledged once `last` is committed.
    Local {
        log: Rc<PartitionLog>,
        base_offset: u64,
        last: Ticket,
        /// An idempotent producer's batches, settled once the commit ends.
        settle: Option<Settle>,
    },
    /// Sent to the owner core; dropping it forgets the call.
    Remote(InFlight<Produce>),
    /// Proposed to a replicated partition's Raft group on this core, its leader.
    Replicated(crate::shard::replicated::ReplicatedProduce),
}

/// One partition in a metadata answer.
#[derive(Debug, Clone)]
pub struct PartitionInfo {
    /// Its leader.
    pub owner: Place,
    /// Every replica, the leader first.
    pub replicas: Vec<Place>,
    /// `None` when its owner no longer has it (deleted meanwhile).
    pub state: Option<PartitionState>,
}

/// One topic in a metadata answer; `meta` is `None` for a topic that does not exist.
#[derive(Debug, Clone)]
pub struct TopicInfo {
    pub name: String,
    pub meta: Option<Rc<TopicMeta>>,
    pub partitions: Vec<PartitionInfo>,
}

/// What every core serves: its topics with their partitions' owners and offsets, and the
/// shard port of each core of this node (0 when it has none).
#[derive(Debug, Clone)]
pub struct Metadata {
    pub core_ports: Vec<u16>,
    pub topics: Vec<TopicInfo>,
}

impl Shard {
    /// Starts a produce: the topic is created on demand, then the batches are staged here
    /// (offsets assigned, the write kicked off) or sent to the owner core, in the order of
    /// the calls. Wait for the acknowledgement with [`Shard::finish_produce`].
    pub async fn start_produce(
        self: &Rc<Self>,
        used: &UsedTopics,
        topic: &[u8],
        partition: u32,
        batches: Batches<'_>,
    ) -> Result<ProduceInFlight, ShardError> {
        let started = Instant::now();
        let meta = self.topic_used(used, topic).await?;
        check_partition(&meta, partition)?;
        let core = match self.hop(self.placement().owner(&meta.name, partition))? {
            Hop::Here => None,
            Hop::Core(core) => Some(core),
        };
        let Some(core) = core else {
            if let Some(replica) = self.replicated(&meta.name, partition) {
                let proposed = self
                    .propose_produce(replica, &meta.name, partition, batches)
                    .await?;
                return Ok(ProduceInFlight {
                    started,
                    state: InFlightState::Replicated(proposed),
                });
            }
            let Some(log) = self.local_log(&meta.name, partition) else {
                return Err(ShardError::TopicBeingDeleted {
                    topic: meta.name.clone(),
                });
            };
            let mut settle = None;
            let (base_offset, last) = match batches {
                Batches::Checked(batches) => stage_all(&log, batches, &self.metrics).await?,
                Batches::Kafka {
                    batches,
                    producers: [],
                } => {
                    stage_kafka_admitted(&log, kafka_parts(batches), &self.metrics, || Ok(()))
                        .await?
                }
                Batches::Kafka { batches, producers } => {
                    let parts = kafka_parts(batches);
                    let (base_offset, last, staged) = self
                        .stage_idempotent(&log, &meta.name, partition, parts, producers)
                        .await?;
                    settle = Some(staged);
                    (base_offset, last)
                }
                Batches::Single(batch) => stage_one(&log, batch, &self.metrics).await?,
            };
            // The write and fsync start now, even while the connection waits on something
            // else (a long poll ahead of this produce).
            log.kick();
            return Ok(ProduceInFlight {
                started,
                state: InFlightState::Local {
                    log,
                    base_offset,
                    last,
                    settle,
                },
            });
        };
        let call = match batches {
            Batches::Checked(batches) => Produce {
                topic: meta.name.clone(),
                partition,
                count: batches.count,
                batches: Bytes::copy_from_slice(batches.as_bytes()),
                source: BatchSource::Client,
                producers: Vec::new(),
            },
            Batches::Kafka { batches, producers } => Produce {
                topic: meta.name.clone(),
                partition,
                count: u32::try_from(batches.len())
                    .expect("a request's batches are counted in u32"),
                batches: kafka_pairs(batches),
                source: BatchSource::Kafka,
                producers: producers.to_vec(),
            },
            Batches::Single(batch) => {
                // The mesh carries (crc, batch) pairs, like a native request.
                let mut bytes = Vec::with_capacity(4 + batch.len());
                bytes.extend_from_slice(&record::batch_crc(batch).to_be_bytes());
                bytes.extend_from_slice(batch);
                Produce {
                    topic: meta.name.clone(),
                    partition,
                    count: 1,
                    batches: bytes.into(),
                    source: BatchSource::Client,
                    producers: Vec::new(),
                }
            }
        };
        Metrics::inc(&self.metrics.mesh_calls);
        Metrics::inc(&self.metrics.mesh_produces);
        let in_flight = self.mesh.start(core, call).await?;
        Ok(ProduceInFlight {
            started,
            state: InFlightState::Remote(in_flight),
        })
    }

    /// True when [`Shard::finish_produce`] would not wait.
    pub fn produce_ready(&self, produce: &ProduceInFlight) -> bool {
        match &produce.state {
            InFlightState::Local { log, last, .. } => log.is_committed(last).unwrap_or(true),
            InFlightState::Remote(in_flight) => self.mesh.is_answered(in_flight),
            InFlightState::Replicated(proposed) => proposed.is_done(),
        }
    }

    /// Waits until a started produce is acknowledged (durable under `fsync = always`).
    pub async fn finish_produce(&self, produce: ProduceInFlight) -> Result<Produced, ShardError> {
        let produced = match produce.state {
            InFlightState::Local {
                log,
                base_offset,
                last,
                settle,
            } => {
                let committed = log.commit(last).await;
                if let Some(settle) = settle {
                    settle.settle(&log);
                }
                committed?;
                Produced {
                    base_offset,
                    next_offset: last.end_offset,
                }
            }
            InFlightState::Remote(in_flight) => self.mesh.finish(in_flight).await?,
            InFlightState::Replicated(proposed) => proposed.acknowledged().await?,
        };
        crate::metrics::io::record_produce_ack(produce.started.elapsed());
        Ok(produced)
    }

    /// Both halves of a produce.
    pub async fn produce(
        self: &Rc<Self>,
        used: &UsedTopics,
        topic: &[u8],
        partition: u32,
        batches: Batches<'_>,
    ) -> Result<Produced, ShardError> {
        let started = self.start_produce(used, topic, partition, batches).await?;
        self.finish_produce(started).await
    }

    /// A read plan for `fetch`, from the partition's owner, long-polling up to its
    /// `max_wait_ms`. The topic is created on demand. The bytes are sent by the caller's
    /// core from its own descriptor of the segment file (zero-copy).
    pub async fn fetch(
        self: &Rc<Self>,
        used: &UsedTopics,
        fetch: Fetch,
    ) -> Result<SendPlan, ShardError> {
        let meta = self.topic_used(used, fetch.topic.as_bytes()).await?;
        check_partition(&meta, fetch.partition)?;
        let owner = self.placement().owner(&meta.name, fetch.partition);
        self.route(owner, fetch).await
    }

    /// The earliest, latest, or first-at-a-timestamp offset of a partition. A topic the
    /// connection used that was deleted since is refused, as its fetches are (a group member
    /// placing itself after a rebalance is told so, not just "unknown topic"); a topic it
    /// lists counts as used.
    pub async fn list_offsets(
        self: &Rc<Self>,
        used: &UsedTopics,
        topic: &[u8],
        partition: u32,
        spec: OffsetSpec,
    ) -> Result<u64, ShardError> {
        used.check(self, topic)?;
        let topic = self.valid_name(topic, "topic")?.to_string();
        self.known_partition(&topic, partition)?;
        used.record(self, topic.as_bytes());
        let owner = self.placement().owner(&topic, partition);
        let call = ListOffsets {
            topic,
            partition,
            spec,
        };
        self.route(owner, call).await
    }

    /// The state of one partition, wherever it lives.
    pub async fn partition_state(
        self: &Rc<Self>,
        topic: &str,
        partition: u32,
    ) -> Result<PartitionState, ShardError> {
        let owner = self.placement().owner(topic, partition);
        let call = PartitionStates {
            partitions: vec![(topic.to_string(), partition)],
        };
        let mut states = self.route(owner, call).await?;
        match states.pop().flatten() {
            Some(state) => Ok(state),
            None => Err(self
                .owned_log(topic, partition)
                .err()
                .unwrap_or_else(|| self.unknown_topic(topic))),
        }
    }

    /// The states of many partitions: one call per owner, all at once. In the order asked;
    /// `None` for a partition its owner does not have (or did not answer).
    pub async fn partition_states(
        self: &Rc<Self>,
        partitions: &[(String, u32)],
    ) -> Vec<Option<PartitionState>> {
        // For each place: the partitions it owns, and where each goes in the answer.
        let mut by_place: HashMap<Place, Asked> = HashMap::new();
        for (at, (topic, partition)) in partitions.iter().enumerate() {
            let owner = self.placement().owner(topic, *partition);
            // Another node's partition has no state here (until nodes ask each other).
            if owner.node != self.here().node {
                continue;
            }
            let entry = by_place.entry(owner).or_default();
            entry.0.push((topic.clone(), *partition));
            entry.1.push(at);
        }
        let mut places = Vec::with_capacity(by_place.len());
        let mut calls = Vec::with_capacity(by_place.len());
        for (place, (asked, at)) in by_place {
            calls.push((place, PartitionStates { partitions: asked }));
            places.push(at);
        }
        let mut out = vec![None; partitions.len()];
        for (reply, at) in self.on_places(calls).await.into_iter().zip(places) {
            match reply {
                Ok(states) => {
                    for (state, at) in states.into_iter().zip(at) {
                        out[at] = state;
                    }
                }
                Err(failure) => warn!(error = %failure, "partition states not answered"),
            }
        }
        out
    }

    /// Metadata of the topics named (every topic when `names` is empty).
    pub async fn metadata(self: &Rc<Self>, names: Vec<String>) -> Metadata {
        let names = if names.is_empty() {
            self.topic_names()
        } else {
            names
        };
        let core_ports = self
            .local_places()
            .into_iter()
            .map(|place| {
                let address = self.placement().address(place);
                address.and_then(|a| a.shard_port).unwrap_or(0)
            })
            .collect();
        let mut asked = Vec::new();
        let mut topics: Vec<TopicInfo> = Vec::with_capacity(names.len());
        for name in names {
            let meta = self.topic(&name);
            let mut partitions = Vec::new();
            if let Some(meta) = &meta {
                for partition in 0..meta.partitions {
                    asked.push((name.clone(), partition));
                    partitions.push(PartitionInfo {
                        owner: self.placement().owner(&name, partition),
                        replicas: self.placement().replicas(&name, partition),
                        state: None,
                    });
                }
            }
            topics.push(TopicInfo {
                name,
                meta,
                partitions,
            });
        }
        let mut states = self.partition_states(&asked).await.into_iter();
        for topic in &mut topics {
            for partition in &mut topic.partitions {
                partition.state = states.next().flatten();
            }
        }
        Metadata { core_ports, topics }
    }
}

impl Run for Produce {
    async fn run(self, shard: &Rc<Shard>) -> Result<Produced, ShardError> {
        if let Some(replica) = shard.replicated(&self.topic, self.partition) {
            let proposed = shard.propose_remote(replica, &self).await?;
            return proposed.acknowledged().await;
        }
        let (log, base_offset, last, settle) = shard.stage_produce(&self).await?;
        let committed = log.commit(last).await;
        if let Some(settle) = settle {
            settle.settle(&log);
        }
        committed?;
        Ok(Produced {
            base_offset,
            next_offset: last.end_offset,
        })
    }
}

impl Shard {
    /// The owner's first half of a remote produce: stages it, counting its metrics.
    pub(crate) async fn stage_produce(
        &self,
        produce: &Produce,
    ) -> Result<(Rc<PartitionLog>, u64, Ticket, Option<Settle>), ShardError> {
        let log = self.owned_log(&produce.topic, produce.partition)?;
        let limits = self.config.log.limits;
        let batches = ProduceBatches::from_validated(produce.count, &produce.batches, limits);
        let parts = batches.iter().map(|(_, batch)| BatchParts::whole(batch));
        if produce.source == BatchSource::Client {
            let (base_offset, last) = stage_all(&log, batches, &self.metrics).await?;
            return Ok((log, base_offset, last, None));
        }
        if produce.producers.is_empty() {
            let (base_offset, last) =
                stage_kafka_admitted(&log, parts, &self.metrics, || Ok(())).await?;
            return Ok((log, base_offset, last, None));
        }
        let (base_offset, last, settle) = self
            .stage_idempotent(
                &log,
                &produce.topic,
                produce.partition,
                parts,
                &produce.producers,
            )
            .await?;
        Ok((log, base_offset, last, Some(settle)))
    }
}

impl Run for ListOffsets {
    async fn run(self, shard: &Rc<Shard>) -> Result<u64, ShardError> {
        let log = shard.owned_log(&self.topic, self.partition)?;
        shard.check_reads(&self.topic, self.partition)?;
        Ok(match self.spec {
            OffsetSpec::Earliest => log.log_start_offset(),
            OffsetSpec::Latest => log.high_watermark(),
            OffsetSpec::Timestamp(ts) => log
                .offset_for_timestamp(ts)
                .unwrap_or_else(|| log.high_watermark()),
        })
    }
}

impl Run for PartitionStates {
    async fn run(self, shard: &Rc<Shard>) -> Result<Vec<Option<PartitionState>>, ShardError> {
        Ok(self
            .partitions
            .iter()
            .map(|(topic, partition)| {
                shard
                    .local_log(topic, *partition)
                    .map(|log| PartitionState {
                        log_start_offset: log.log_start_offset(),
                        high_watermark: log.high_watermark(),
                        size_bytes: log.segments().iter().map(|(_, size)| size).sum(),
                    })
            })
            .collect())
    }
}
