//! Per-core state: the topics this core knows, the partitions it owns, its end of the mesh,
//! and the request handlers that run where the data lives.
//!
//! - [`routing`]: which core owns a partition (FNV-1a).
//! - [`mesh`]: calls and answers between cores.
//! - [`topics`]: topic metadata, its files, and the controller's create/delete.
//! - [`offsets`]: consumer group offsets in 256 shards of internal logs.
//! - [`groups`]: consumer group membership, one sans-IO state machine for every protocol.
//! - [`producers`]: idempotent producers' sequences per partition, sans-IO.

pub mod compaction;
pub mod groups;
pub mod mesh;
pub mod offsets;
pub mod producers;
pub mod routing;
pub mod topics;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::FutureExt;
use tracing::{info, warn};

use crate::config::BrokerConfig;
use crate::limits::validate_name;
use crate::protocol::native::{ErrorCode, OffsetSpec, ProduceBatches, TopicSettings};
use crate::server::metrics::Metrics;
use crate::shard::mesh::{Answer, Call, Mesh, SendPlan};
use crate::shard::topics::TopicMeta;
use crate::storage::watch::Watch;
use crate::storage::{PartitionLog, StorageError};

/// The controller: the core that creates and deletes topics.
pub const CONTROLLER_CORE: usize = 0;

/// An error answer: a code for the client, a message for humans, and for
/// `OffsetOutOfRange` the range that is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub code: ErrorCode,
    pub message: String,
    pub range: Option<(u64, u64)>,
}

impl Failure {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            range: None,
        }
    }
}

impl From<StorageError> for Failure {
    fn from(e: StorageError) -> Failure {
        let code = match &e {
            StorageError::BadBatch(record) => record.into(),
            StorageError::BatchLength { .. } => ErrorCode::Malformed,
            StorageError::OffsetOutOfRange {
                earliest, latest, ..
            } => {
                return Failure {
                    code: ErrorCode::OffsetOutOfRange,
                    message: e.to_string(),
                    range: Some((*earliest, *latest)),
                };
            }
            StorageError::Fenced { .. } => ErrorCode::Fenced,
            StorageError::Corrupt {
                offset,
                next_offset,
            } => {
                // The damaged batch's offsets, so a consumer knows what it would skip.
                return Failure {
                    code: ErrorCode::CorruptData,
                    message: e.to_string(),
                    range: Some((*offset, *next_offset)),
                };
            }
            StorageError::Closed => ErrorCode::ShuttingDown,
            StorageError::Config { .. } => ErrorCode::InvalidConfig,
            _ if kind_of(&e) == Some(std::io::ErrorKind::StorageFull) => ErrorCode::StorageFull,
            _ => ErrorCode::StorageError,
        };
        Failure::new(code, e.to_string())
    }
}

fn kind_of(e: &StorageError) -> Option<std::io::ErrorKind> {
    match e {
        StorageError::WriteFailed { kind } => Some(*kind),
        StorageError::Io { source, .. } => Some(source.kind()),
        _ => None,
    }
}

/// Set once when the broker is asked to stop; every core watches it.
#[derive(Default)]
pub struct Shutdown {
    requested: std::cell::Cell<bool>,
    watch: Watch,
}

impl Shutdown {
    pub fn request(&self) {
        if !self.requested.replace(true) {
            self.watch.notify_all();
        }
    }

    pub fn is_requested(&self) -> bool {
        self.requested.get()
    }

    /// Resolves once shutdown is requested.
    pub async fn wait(&self) {
        while !self.requested.get() {
            self.watch.changed().await;
        }
    }
}

/// One core's share of the broker.
pub struct Shard {
    pub core: usize,
    pub config: Arc<BrokerConfig>,
    pub mesh: Mesh,
    pub shutdown: Shutdown,
    pub metrics: crate::server::metrics::Metrics,
    pub segment_files: crate::server::sendfile::SegmentFiles,
    pub offsets: offsets::OffsetStore,
    topics: RefCell<HashMap<String, Rc<TopicMeta>>>,
    /// Partitions this core owns, by topic then partition number.
    partitions: RefCell<HashMap<String, Vec<Option<Rc<PartitionLog>>>>>,
    /// Serializes topic creation and deletion on the controller.
    controller_lock: glommio::sync::Semaphore,
}

impl Shard {
    pub fn new(core: usize, config: Arc<BrokerConfig>, mesh: Mesh) -> Shard {
        let offsets =
            offsets::OffsetStore::new(&config.data_dir, &config.log, config.offsets_segment_bytes);
        Shard {
            core,
            config,
            mesh,
            shutdown: Shutdown::default(),
            metrics: Default::default(),
            segment_files: Default::default(),
            offsets,
            topics: RefCell::new(HashMap::new()),
            partitions: RefCell::new(HashMap::new()),
            controller_lock: glommio::sync::Semaphore::new(1),
        }
    }

    pub fn cores(&self) -> usize {
        self.config.cores
    }

    pub fn owner(&self, topic: &str, partition: u32) -> usize {
        routing::partition_owner(topic, partition, self.cores())
    }

    /// Loads every topic from disk and opens the partitions this core owns (recovering
    /// them if the last stop was not clean).
    pub async fn load(self: &Rc<Self>) -> Result<(), StorageError> {
        let metas = topics::load_all(&self.config.data_dir, &self.config.log)?;
        for meta in metas {
            self.open_topic(meta).await?;
        }
        self.offsets.load(self.core, self.cores()).await?;
        let owned: usize = self
            .partitions
            .borrow()
            .values()
            .map(|v| v.iter().flatten().count())
            .sum();
        info!(
            core = self.core,
            topics = self.topics.borrow().len(),
            partitions_owned = owned,
            "core loaded"
        );
        Ok(())
    }

    pub fn topic(&self, name: &str) -> Option<Rc<TopicMeta>> {
        self.topics.borrow().get(name).cloned()
    }

    pub fn topic_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.topics.borrow().keys().cloned().collect();
        names.sort();
        names
    }

    /// The log of a partition this core owns.
    pub fn local_log(&self, topic: &str, partition: u32) -> Option<Rc<PartitionLog>> {
        self.partitions
            .borrow()
            .get(topic)
            .and_then(|v| v.get(partition as usize).cloned().flatten())
    }

    /// Every partition this core owns, with its topic.
    pub fn local_partitions(&self) -> Vec<(Rc<TopicMeta>, u32, Rc<PartitionLog>)> {
        let topics = self.topics.borrow();
        let mut out = Vec::new();
        for (name, logs) in self.partitions.borrow().iter() {
            let Some(meta) = topics.get(name) else {
                continue;
            };
            for (partition, log) in logs.iter().enumerate() {
                if let Some(log) = log {
                    out.push((Rc::clone(meta), partition as u32, Rc::clone(log)));
                }
            }
        }
        out
    }

    /// Every partition log this core owns.
    pub fn local_logs(&self) -> Vec<Rc<PartitionLog>> {
        self.partitions
            .borrow()
            .values()
            .flat_map(|v| v.iter().flatten().cloned())
            .collect()
    }

    /// Opens the partitions of a topic this core owns and registers the topic.
    async fn open_topic(self: &Rc<Self>, meta: TopicMeta) -> Result<(), StorageError> {
        self.open_partitions(&meta).await?;
        self.publish_topic(meta);
        Ok(())
    }

    /// Makes a topic visible to this core's clients. The controller publishes a new topic
    /// only after every core opened its partitions, so no core can route a request to an
    /// owner that does not have the partition yet.
    fn publish_topic(&self, meta: TopicMeta) {
        self.topics
            .borrow_mut()
            .insert(meta.name.clone(), Rc::new(meta));
    }

    /// Opens the partitions of a topic this core owns, without publishing the topic.
    async fn open_partitions(self: &Rc<Self>, meta: &TopicMeta) -> Result<(), StorageError> {
        let mut logs = vec![None; meta.partitions as usize];
        let log_config = meta.log_config(&self.config.log);
        for partition in 0..meta.partitions {
            if self.owner(&meta.name, partition) != self.core {
                continue;
            }
            let dir = topics::partition_dir(&self.config.data_dir, &meta.name, partition);
            let log = PartitionLog::open(&dir, log_config.clone()).await?;
            Metrics::add(
                &self.metrics.corrupt_batches_detected,
                log.corrupt_batches(),
            );
            logs[partition as usize] = Some(log);
        }
        self.partitions.borrow_mut().insert(meta.name.clone(), logs);
        Ok(())
    }

    /// Forgets a topic; its partition logs close when their last user lets go.
    fn drop_topic(&self, name: &str) {
        self.topics.borrow_mut().remove(name);
        self.partitions.borrow_mut().remove(name);
    }

    /// Routes a call to the core that owns the data, or runs it here.
    pub async fn route(self: &Rc<Self>, owner: usize, call: Call) -> Answer {
        if owner == self.core {
            self.handle(call).await
        } else {
            self.metrics
                .mesh_calls
                .set(self.metrics.mesh_calls.get() + 1);
            self.mesh.call(owner, call).await
        }
    }

    /// Runs a call on this core (it owns the data, or it is the controller).
    pub async fn handle(self: &Rc<Self>, call: Call) -> Answer {
        let result = match call {
            Call::Produce {
                topic,
                partition,
                count,
                batches,
            } => self.produce_local(&topic, partition, count, &batches).await,
            Call::Fetch {
                topic,
                partition,
                offset,
                max_bytes,
                max_wait_ms,
            } => self
                .fetch_local(&topic, partition, offset, max_bytes, max_wait_ms)
                .await
                .map(Answer::Plan),
            Call::ListOffsets {
                topic,
                partition,
                spec,
            } => self
                .list_offsets_local(&topic, partition, spec)
                .map(Answer::Offset),
            Call::PartitionState { topic, partition } => {
                self.owned_log(&topic, partition)
                    .map(|log| Answer::PartitionState {
                        log_start_offset: log.log_start_offset(),
                        high_watermark: log.high_watermark(),
                    })
            }
            Call::CreateTopic {
                meta,
                if_not_exists,
            } => self.create_topic_controller(meta, if_not_exists).await,
            Call::DeleteTopic { name } => self.delete_topic_controller(&name).await,
            Call::OpenPartitions { meta } => self
                .open_partitions(&meta)
                .await
                .map(|()| Answer::Done)
                .map_err(Failure::from),
            Call::PublishTopic { meta } => {
                self.publish_topic(meta);
                Ok(Answer::Done)
            }
            Call::DropTopic { name } => {
                self.drop_topic(&name);
                Ok(Answer::Done)
            }
            Call::CommitOffset { key, offset } => self
                .offsets
                .commit(key, offset)
                .await
                .map(|()| Answer::Done),
            Call::FetchOffset { key } => match self.offsets.fetch(&key).await {
                Ok(Some(committed)) => Ok(Answer::Offset(committed.offset)),
                Ok(None) => Err(Failure::new(
                    ErrorCode::NoCommittedOffset,
                    "no offset committed",
                )),
                Err(failure) => Err(failure),
            },
            Call::Compact { topic, partition } => self
                .compact_local(&topic, partition)
                .await
                .map(Answer::Compacted),
            Call::GroupOffsets { group } => Ok(Answer::GroupOffsets(
                self.offsets
                    .entries(group.as_deref())
                    .into_iter()
                    .map(|(g, t, p, c)| (g, t, p, c.offset))
                    .collect(),
            )),
            Call::MetricsSnapshot => Ok(Answer::Metrics(Box::new(crate::server::scrape::collect(
                self,
            )))),
        };
        result.unwrap_or_else(Answer::Failed)
    }

    fn owned_log(&self, topic: &str, partition: u32) -> Result<Rc<PartitionLog>, Failure> {
        if let Some(log) = self.local_log(topic, partition) {
            return Ok(log);
        }
        Err(match self.topic(topic) {
            None => Failure::new(ErrorCode::UnknownTopic, format!("unknown topic {topic}")),
            Some(meta) if partition >= meta.partitions => Failure::new(
                ErrorCode::UnknownPartition,
                format!(
                    "topic {topic} has {} partitions; {partition} does not exist",
                    meta.partitions
                ),
            ),
            Some(_) => Failure::new(
                ErrorCode::Internal,
                format!("{topic}/{partition} is not owned by core {}", self.core),
            ),
        })
    }

    async fn produce_local(
        &self,
        topic: &str,
        partition: u32,
        count: u32,
        batches: &Bytes,
    ) -> Result<Answer, Failure> {
        let log = self.owned_log(topic, partition)?;
        let batches = ProduceBatches::from_validated(count, batches, self.config.log.limits);
        let (base_offset, last) = stage_all(&log, batches, &self.metrics).await?;
        log.commit(last).await?;
        Ok(Answer::Produced {
            base_offset,
            next_offset: last.end_offset,
        })
    }

    /// Plans a read on a partition this core owns, long-polling up to `max_wait_ms` when the
    /// offset is at the high watermark.
    async fn fetch_local(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait_ms: u32,
    ) -> Result<SendPlan, Failure> {
        let log = self.owned_log(topic, partition)?;
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
                return Ok(SendPlan {
                    wal_path: crate::storage::segment::wal_path(
                        log.dir(),
                        plan.segment_base_offset,
                    ),
                    file_id: plan.file_id,
                    position: plan.position,
                    length: plan.length,
                    crcs: plan.batches.iter().map(|b| b.crc).collect(),
                    records,
                    next_offset: plan.next_offset().unwrap_or(offset),
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

    fn list_offsets_local(
        &self,
        topic: &str,
        partition: u32,
        spec: OffsetSpec,
    ) -> Result<u64, Failure> {
        let log = self.owned_log(topic, partition)?;
        Ok(match spec {
            OffsetSpec::Earliest => log.log_start_offset(),
            OffsetSpec::Latest => log.high_watermark(),
            OffsetSpec::Timestamp(ts) => log
                .offset_for_timestamp(ts)
                .unwrap_or_else(|| log.high_watermark()),
        })
    }

    /// Validates a topic or group name (`what` says which), counting refusals.
    pub fn valid_name<'n>(&self, name: &'n [u8], what: &str) -> Result<&'n str, Failure> {
        validate_name(name).map_err(|e| {
            Metrics::inc(&self.metrics.bad_names);
            Failure::new(ErrorCode::InvalidName, format!("invalid {what} name: {e}"))
        })
    }

    /// Makes sure a topic exists, creating it with one partition if it does not (produce and
    /// fetch create topics on demand).
    pub async fn ensure_topic(self: &Rc<Self>, name: &[u8]) -> Result<Rc<TopicMeta>, Failure> {
        let name = self.valid_name(name, "topic")?;
        if let Some(meta) = self.topic(name) {
            return Ok(meta);
        }
        let settings = TopicSettings {
            partitions: 1,
            ..Default::default()
        };
        self.create_via_controller(name, &settings, true).await?;
        self.topic(name).ok_or_else(|| {
            Failure::new(
                ErrorCode::Internal,
                format!("topic {name} was created but is not known here"),
            )
        })
    }

    /// Creates a topic from a client's request (on any core; forwarded to the controller).
    pub async fn create_topic(
        self: &Rc<Self>,
        name: &[u8],
        settings: &TopicSettings,
    ) -> Result<(), Failure> {
        let name = self.valid_name(name, "topic")?;
        self.create_via_controller(name, settings, false).await
    }

    async fn create_via_controller(
        self: &Rc<Self>,
        name: &str,
        settings: &TopicSettings,
        if_not_exists: bool,
    ) -> Result<(), Failure> {
        let meta = TopicMeta::from_settings(name, settings, &self.config.log)
            .map_err(|(code, msg)| Failure::new(code, msg))?;
        self.route(
            CONTROLLER_CORE,
            Call::CreateTopic {
                meta,
                if_not_exists,
            },
        )
        .await
        .done()
    }

    pub async fn delete_topic(self: &Rc<Self>, name: &[u8]) -> Result<(), Failure> {
        let name = self.valid_name(name, "topic")?;
        self.route(
            CONTROLLER_CORE,
            Call::DeleteTopic {
                name: name.to_string(),
            },
        )
        .await
        .done()
    }

    async fn create_topic_controller(
        self: &Rc<Self>,
        meta: TopicMeta,
        if_not_exists: bool,
    ) -> Result<Answer, Failure> {
        assert_eq!(self.core, CONTROLLER_CORE);
        let _lock = self
            .controller_lock
            .acquire_permit(1)
            .await
            .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;
        if self.topic(&meta.name).is_some() {
            return if if_not_exists {
                Ok(Answer::Done)
            } else {
                Err(Failure::new(
                    ErrorCode::TopicExists,
                    format!("topic {} exists", meta.name),
                ))
            };
        }
        if self.topics.borrow().len() >= self.config.topics_max {
            self.metrics
                .topic_limit_hits
                .set(self.metrics.topic_limit_hits.get() + 1);
            warn!(topic = %meta.name, limit = self.config.topics_max, "topic limit reached");
            return Err(Failure::new(
                ErrorCode::TopicLimit,
                format!(
                    "the broker holds its maximum of {} topics",
                    self.config.topics_max
                ),
            ));
        }
        // Several fsyncs: on the blocking thread, so that a client creating topics in a
        // loop does not stall every other connection of this core.
        let (persisted, data_dir) = (meta.clone(), self.config.data_dir.clone());
        glommio::executor()
            .spawn_blocking(move || persisted.persist(&data_dir))
            .await
            .map_err(Failure::from)?;
        info!(topic = %meta.name, partitions = meta.partitions, "topic created");
        // Two rounds: every owner opens its partitions, then every core learns the topic.
        self.broadcast(|| Call::OpenPartitions { meta: meta.clone() })
            .await?;
        self.broadcast(|| Call::PublishTopic { meta: meta.clone() })
            .await
    }

    async fn delete_topic_controller(self: &Rc<Self>, name: &str) -> Result<Answer, Failure> {
        assert_eq!(self.core, CONTROLLER_CORE);
        let _lock = self
            .controller_lock
            .acquire_permit(1)
            .await
            .map_err(|e| Failure::new(ErrorCode::Internal, e.to_string()))?;
        if self.topic(name).is_none() {
            return Err(Failure::new(
                ErrorCode::UnknownTopic,
                format!("unknown topic {name}"),
            ));
        }
        self.broadcast(|| Call::DropTopic {
            name: name.to_string(),
        })
        .await?;
        let (data_dir, removed) = (self.config.data_dir.clone(), name.to_string());
        glommio::executor()
            .spawn_blocking(move || topics::remove_topic_dir(&data_dir, &removed))
            .await
            .map_err(Failure::from)?;
        info!(topic = %name, "topic deleted");
        Ok(Answer::Done)
    }

    /// Runs a call on every core in order; the first failure stops it.
    async fn broadcast(self: &Rc<Self>, make: impl Fn() -> Call) -> Result<Answer, Failure> {
        for core in 0..self.cores() {
            // Boxed: `route` may run `handle`, which runs this (topic calls on the controller).
            Box::pin(self.route(core, make())).await.done()?;
        }
        Ok(Answer::Done)
    }

    /// Stores a group's offset (the next offset it will consume) durably.
    pub async fn commit_offset(
        self: &Rc<Self>,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        offset: u64,
    ) -> Result<(), Failure> {
        let key = self.offsets_key(group, topic, partition)?;
        let owner = offsets::shard_owner(offsets::shard_of(&key), self.cores());
        self.route(owner, Call::CommitOffset { key, offset })
            .await
            .done()
    }

    /// A group's committed offset, if it has one.
    pub async fn fetch_offset(
        self: &Rc<Self>,
        group: &[u8],
        topic: &[u8],
        partition: u32,
    ) -> Result<Option<u64>, Failure> {
        let key = self.offsets_key(group, topic, partition)?;
        let owner = offsets::shard_owner(offsets::shard_of(&key), self.cores());
        match self.route(owner, Call::FetchOffset { key }).await {
            Answer::Offset(offset) => Ok(Some(offset)),
            Answer::Failed(failure) if failure.code == ErrorCode::NoCommittedOffset => Ok(None),
            Answer::Failed(failure) => Err(failure),
            other => Err(other.unexpected()),
        }
    }

    /// Committed offsets of `group` (every group when `None`) across all cores.
    pub async fn group_offsets(
        self: &Rc<Self>,
        group: Option<&str>,
    ) -> Result<Vec<(String, String, u32, u64)>, Failure> {
        let mut all = Vec::new();
        for core in 0..self.cores() {
            match self
                .route(
                    core,
                    Call::GroupOffsets {
                        group: group.map(str::to_string),
                    },
                )
                .await
            {
                Answer::GroupOffsets(entries) => all.extend(entries),
                Answer::Failed(failure) => return Err(failure),
                other => return Err(other.unexpected()),
            }
        }
        all.sort();
        Ok(all)
    }

    /// (log start, high watermark) of any partition, wherever it lives.
    pub async fn partition_state(
        self: &Rc<Self>,
        topic: &str,
        partition: u32,
    ) -> Result<(u64, u64), Failure> {
        let owner = self.owner(topic, partition);
        let call = Call::PartitionState {
            topic: topic.to_string(),
            partition,
        };
        match self.route(owner, call).await {
            Answer::PartitionState {
                log_start_offset,
                high_watermark,
            } => Ok((log_start_offset, high_watermark)),
            Answer::Failed(failure) => Err(failure),
            other => Err(other.unexpected()),
        }
    }

    fn offsets_key(&self, group: &[u8], topic: &[u8], partition: u32) -> Result<Vec<u8>, Failure> {
        let group = self.valid_name(group, "group")?;
        let topic = self.valid_name(topic, "topic")?;
        Ok(offsets::encode_key(group, topic, partition))
    }

    /// Flushes, syncs and closes every partition this core owns (clean shutdown).
    pub async fn close_all(&self) {
        for log in self.local_logs().into_iter().chain(self.offsets.logs()) {
            if let Err(error) = log.close().await {
                warn!(dir = %log.dir().display(), %error, "partition did not close cleanly");
            }
        }
    }
}

/// Stages every batch of a produce request on `log` as one contiguous run (all validated,
/// CRCs included, before any is staged: a request is stored whole or not at all, so a
/// client retrying an error never duplicates part of it). Returns the first offset and the
/// last batch's ticket; committing it commits them all.
pub async fn stage_all(
    log: &Rc<PartitionLog>,
    batches: ProduceBatches<'_>,
    metrics: &crate::server::metrics::Metrics,
) -> Result<(u64, crate::storage::Ticket), Failure> {
    let staged = if batches.count == 1 {
        let (crc, batch) = batches.iter().next().expect("one batch");
        log.stage(batch, Some(crc))
            .await
            .map(|t| (t.base_offset, t))
    } else {
        log.stage_many(batches.iter().map(|(crc, batch)| (Some(crc), batch)))
            .await
    };
    let staged = staged.inspect_err(|e| {
        if matches!(e, StorageError::BadBatch(_)) {
            Metrics::inc(&metrics.bad_batches);
        }
    })?;
    metrics
        .batches_in
        .set(metrics.batches_in.get() + u64::from(batches.count));
    Metrics::add(&metrics.records_in, staged.1.end_offset - staged.0);
    metrics.bytes_in.set(
        metrics.bytes_in.get() + batches.as_bytes().len() as u64 - 4 * u64::from(batches.count),
    );
    Ok(staged)
}
