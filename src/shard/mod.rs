//! Per-core state and the location-transparent request API every protocol front-end uses.
//!
//! A front-end (native, HermitMQ v1, Kafka) decodes a request and calls one method of
//! [`Shard`]; the shard alone decides whether the data is on this core or a mesh hop away,
//! and counts the request's data metrics once, where the data is.
//!
//! - [`data`]: produce (two-phase, for pipelining), fetch plans (the owner's half, a long
//!   poll, in `fetch`), list offsets, partition
//!   states and metadata.
//! - [`staging`]: a produce's batches staged on the owner, its append metrics counted once.
//! - [`admin`]: topic creation (on demand, in one place), deletion, the controller's rounds.
//! - [`groups`]: commit and fetch offsets, list and describe groups.
//! - [`calls`]: the typed mesh calls, one struct per call with its reply type.
//! - [`snapshot`]: this core's metrics snapshot, for a scrape.
//! - [`placement`]: where each partition, group and the controller lives, as (node, core),
//!   and how a client reaches a place; every route goes through [`Shard::hop`].
//! - [`mesh`]: calls and answers between cores.
//! - [`topics`]: topic metadata, its files, and the controller's create/delete.
//! - [`offsets`]: consumer group offsets in 256 shards of internal logs.
//! - [`membership`]: consumer group membership, one sans-IO state machine for every protocol.
//! - [`coordinator`]: the groups this core coordinates, driven with real time; the group
//!   API (join, sync, heartbeat, leave, describe, list, delete, fenced commits).
//! - [`producers`]: idempotent producers' sequences per partition, sans-IO; [`idempotence`]:
//!   their tables on the owner, settled against the log (a failed write forgets its batches).
//! - [`used`]: the topics a connection used, so a delete wins over its clients.
//! - [`handoff`]: handing a client connection to the core that owns its partition.

pub mod admin;
pub mod calls;
pub mod compaction;
pub mod coordinator;
pub mod data;
pub mod error;
mod fetch;
pub mod groups;
pub mod handoff;
pub mod idempotence;
pub mod members;
pub mod membership;
pub mod mesh;
pub mod offsets;
pub mod partitions;
pub mod placement;
pub mod producers;
mod receive;
pub mod replicated;
pub mod snapshot;
pub mod staging;
pub mod topics;
pub mod used;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use tracing::{info, warn};

use crate::config::BrokerConfig;
use crate::limits::validate_name;
use crate::metrics::counters::Metrics;
use crate::shard::calls::Run;
pub use crate::shard::error::ShardError;
use crate::shard::mesh::Mesh;
use crate::shard::placement::{CoreId, NotHere, OneNode, Place, Placement};
use crate::shard::topics::TopicMeta;
use crate::storage::{PartitionLog, StorageError};
use crate::watch::Watch;

/// How this core reaches a place of its node ([`Shard::hop`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hop {
    /// This core: the call runs inline.
    Here,
    /// Another core of this node, by its mesh index.
    Core(usize),
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
    pub metrics: crate::metrics::counters::Metrics,
    pub offsets: offsets::OffsetStore,
    pub coordinator: coordinator::Coordinator,
    /// Where everything lives; one node's table until the cluster fills it.
    placement: Box<dyn Placement>,
    topics: RefCell<HashMap<String, Rc<TopicMeta>>>,
    /// Partitions this core owns, by topic then partition number.
    partitions: RefCell<HashMap<String, Vec<Option<Rc<PartitionLog>>>>>,
    /// Idempotent producers' state of the partitions this core owns (`idempotence`).
    pub(crate) producers: idempotence::Producers,
    /// Topics deleted on this core, for Kafka connections (`used`).
    pub deleted_topics: used::DeletedTopics,
    /// Serializes topic creation and deletion on the controller.
    controller_lock: glommio::sync::Semaphore,
    /// How this core serves a connection another core hands it (registered by the server).
    adopter: RefCell<Option<handoff::Adopter>>,
    /// What this node knows of its cluster, shared by the cores (set by the server).
    cluster: std::cell::OnceCell<Arc<crate::cluster::status::ClusterView>>,
    /// On a cluster node's controller core: where topic creation and deletion go.
    topic_controller: std::cell::OnceCell<Rc<dyn TopicController>>,
    /// On a cluster node: what starts this core's replicas of replicated partitions.
    replica_host: std::cell::OnceCell<Rc<dyn replicated::ReplicaHost>>,
    /// This core's replicas, by topic and partition (their logs are theirs: see
    /// [`Shard::local_log`]).
    replicas: RefCell<HashMap<(String, u32), Rc<dyn replicated::Replicated>>>,
    /// Idempotent producers of the replicated partitions this core leads.
    replicated_producers: replicated::ReplicatedProducers,
}

/// Where a cluster node's topic changes go instead of being made here at once (the
/// cluster's controller, set by the server). The node makes them when they are applied.
/// Changes of the cluster's members go there too.
pub trait TopicController {
    fn create(
        &self,
        meta: TopicMeta,
        replication_factor: u16,
        if_not_exists: bool,
    ) -> futures_lite::future::BoxedLocal<Result<(), ShardError>>;
    fn delete(&self, name: String) -> futures_lite::future::BoxedLocal<Result<(), ShardError>>;
    /// New settings for an existing topic (`meta` is the topic with them).
    fn alter(&self, meta: TopicMeta) -> futures_lite::future::BoxedLocal<Result<(), ShardError>>;
    /// Adds or removes a member; the cluster id and the voters once it is applied here.
    fn change_member(
        &self,
        change: members::MemberChange,
    ) -> futures_lite::future::BoxedLocal<Result<members::MemberChanged, ShardError>>;
}

impl Shard {
    /// Core `core` of a broker that is the only node ([`OneNode`] placement).
    pub fn new(core: usize, config: Arc<BrokerConfig>, mesh: Mesh) -> Shard {
        let placement = Box::new(OneNode::new(&config));
        Shard::with_placement(core, config, mesh, placement)
    }

    /// Core `core` placing partitions, groups and the controller by `placement`.
    pub fn with_placement(
        core: usize,
        config: Arc<BrokerConfig>,
        mesh: Mesh,
        placement: Box<dyn Placement>,
    ) -> Shard {
        let offsets =
            offsets::OffsetStore::new(&config.data_dir, &config.log, config.offsets_segment_bytes);
        Shard {
            core,
            config,
            mesh,
            shutdown: Shutdown::default(),
            metrics: Default::default(),
            offsets,
            coordinator: Default::default(),
            placement,
            topics: RefCell::new(HashMap::new()),
            partitions: RefCell::new(HashMap::new()),
            producers: Default::default(),
            deleted_topics: Default::default(),
            controller_lock: glommio::sync::Semaphore::new(1),
            adopter: RefCell::new(None),
            cluster: std::cell::OnceCell::new(),
            topic_controller: std::cell::OnceCell::new(),
            replica_host: std::cell::OnceCell::new(),
            replicas: RefCell::new(HashMap::new()),
            replicated_producers: Default::default(),
        }
    }

    /// Sends this core's topic creations and deletions to `controller` (once).
    pub fn set_topic_controller(&self, controller: Rc<dyn TopicController>) {
        let _ = self.topic_controller.set(controller);
    }

    /// Starts this core's replicas with `host` (once, before [`Shard::load`]).
    pub fn set_replica_host(&self, host: Rc<dyn replicated::ReplicaHost>) {
        let _ = self.replica_host.set(host);
    }

    fn topic_controller(&self) -> Option<Rc<dyn TopicController>> {
        self.topic_controller.get().cloned()
    }

    /// Gives this core the node's cluster view (once; a later call is ignored).
    pub fn set_cluster_view(&self, view: Arc<crate::cluster::status::ClusterView>) {
        let _ = self.cluster.set(view);
    }

    /// The node's cluster view, when the server set one.
    pub fn cluster_view(&self) -> Option<&Arc<crate::cluster::status::ClusterView>> {
        self.cluster.get()
    }

    pub fn cores(&self) -> usize {
        self.config.cores
    }

    /// Where every partition, group and the controller lives.
    pub fn placement(&self) -> &dyn Placement {
        self.placement.as_ref()
    }

    /// This core's place.
    pub fn here(&self) -> Place {
        Place {
            node: self.placement.node(),
            core: CoreId(u16::try_from(self.core).expect("cores fit a core id")),
        }
    }

    /// The places of this node's cores, in core order.
    pub fn local_places(&self) -> Vec<Place> {
        let node = self.placement.node();
        let mut places = self.placement.places();
        places.retain(|place| place.node == node);
        places
    }

    /// How this core reaches `place`: the one function that turns a place into a local
    /// core. Another node's place is [`NotHere`]: this process cannot serve it.
    pub fn hop(&self, place: Place) -> Result<Hop, NotHere> {
        if place.node != self.placement.node() || place.core.index() >= self.cores() {
            return Err(NotHere { place });
        }
        Ok(if place.core.index() == self.core {
            Hop::Here
        } else {
            Hop::Core(place.core.index())
        })
    }

    /// Loads every topic from disk and opens the partitions this core owns (recovering
    /// them if the last stop was not clean).
    pub async fn load(self: &Rc<Self>) -> Result<(), StorageError> {
        let metas = topics::load_all(&self.config.data_dir, &self.config.log)?;
        for meta in metas {
            self.open_topic(meta).await?;
        }
        let here = self.here();
        self.offsets
            .load(|shard| self.placement.offsets_owner(shard) == here)
            .await?;
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

    /// The topic with this id (Kafka's topic id), if it exists.
    pub fn topic_by_id(&self, id: u128) -> Option<Rc<TopicMeta>> {
        self.topics
            .borrow()
            .values()
            .find(|meta| meta.id == id)
            .cloned()
    }

    pub fn topic_count(&self) -> usize {
        self.topics.borrow().len()
    }

    pub fn topic_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.topics.borrow().keys().cloned().collect();
        names.sort();
        names
    }

    /// The log of a partition this core owns (a replicated one's as its replica has it
    /// now: cutting a divergent tail reopens it).
    pub fn local_log(&self, topic: &str, partition: u32) -> Option<Rc<PartitionLog>> {
        let log = self
            .partitions
            .borrow()
            .get(topic)
            .and_then(|v| v.get(partition as usize).cloned().flatten())?;
        Some(self.current_log(topic, partition, log))
    }

    /// `log`, or its replica's log now when the partition is replicated.
    fn current_log(&self, topic: &str, partition: u32, log: Rc<PartitionLog>) -> Rc<PartitionLog> {
        if !log.is_raft_indexed() {
            return log;
        }
        self.replicated(topic, partition)
            .map_or(log, |replica| replica.log())
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
                    let log = self.current_log(name, partition as u32, Rc::clone(log));
                    out.push((Rc::clone(meta), partition as u32, log));
                }
            }
        }
        out
    }

    /// Every partition log this core owns.
    pub fn local_logs(&self) -> Vec<Rc<PartitionLog>> {
        let partitions = self.partitions.borrow();
        let mut logs = Vec::new();
        for (name, v) in partitions.iter() {
            for (partition, log) in v.iter().enumerate() {
                if let Some(log) = log {
                    logs.push(self.current_log(name, partition as u32, Rc::clone(log)));
                }
            }
        }
        logs
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
    pub(crate) fn publish_topic(&self, meta: TopicMeta) {
        self.topics
            .borrow_mut()
            .insert(meta.name.clone(), Rc::new(meta));
    }

    /// Opens the partitions of a topic this core owns, without publishing the topic.
    pub(crate) async fn open_partitions(
        self: &Rc<Self>,
        meta: &TopicMeta,
    ) -> Result<(), StorageError> {
        let mut logs = vec![None; meta.partitions as usize];
        let log_config = meta.log_config(&self.config.log);
        // A topic growing keeps the partitions it has open (`shard::partitions`).
        let open = self.partitions.borrow().get(&meta.name).cloned();
        for partition in 0..meta.partitions {
            let replicated = self.placement.replica_set(&meta.name, partition);
            let here = match &replicated {
                Some(set) => set.places.contains(&self.here()),
                None => self.placement.owner(&meta.name, partition) == self.here(),
            };
            if !here {
                continue;
            }
            if let Some(log) = open
                .as_ref()
                .and_then(|logs| logs.get(partition as usize).cloned().flatten())
            {
                logs[partition as usize] = Some(log);
                continue;
            }
            let dir = topics::partition_dir(&self.config.data_dir, &meta.name, partition);
            let log = match &replicated {
                // A replicated partition's log is its Raft log, numbered from entry 1.
                Some(_) => PartitionLog::open_raft(&dir, log_config.clone(), 1).await?,
                None => PartitionLog::open(&dir, log_config.clone()).await?,
            };
            Metrics::add(
                &self.metrics.corrupt_batches_detected,
                log.corrupt_batches(),
            );
            if let Some(set) = &replicated {
                self.start_replica(&meta.name, partition, set, Rc::clone(&log))
                    .map_err(|e| StorageError::Damaged {
                        path: dir.clone(),
                        reason: format!("its replica did not start: {e}"),
                    })?;
            }
            logs[partition as usize] = Some(log);
        }
        self.partitions.borrow_mut().insert(meta.name.clone(), logs);
        Ok(())
    }

    /// Forgets a topic; its partition logs close when their last user lets go.
    pub(crate) fn drop_topic(&self, name: &str) {
        // Only a published topic was deleted (a creation rolled back never existed).
        if self.topics.borrow_mut().remove(name).is_some() {
            self.deleted_topics.note(name);
        }
        self.partitions.borrow_mut().remove(name);
        self.stop_replicas(name);
        self.replicated_producers.forget_topic(name);
        self.producers.forget_topic(name);
    }

    /// Runs a call where the data lives: here, inline, or a mesh round trip; [`NotHere`]
    /// for a place on another node.
    pub async fn route<C: Run>(
        self: &Rc<Self>,
        place: Place,
        call: C,
    ) -> Result<C::Reply, ShardError> {
        match self.hop(place)? {
            Hop::Here => call.run(self).await,
            Hop::Core(core) => {
                Metrics::inc(&self.metrics.mesh_calls);
                self.mesh.call(core, call).await
            }
        }
    }

    /// Runs one call per place in `calls` at once: every remote call is sent before any
    /// answer is awaited, and the local one runs meanwhile. Replies in the order of `calls`.
    pub async fn on_places<C: Run>(
        self: &Rc<Self>,
        calls: Vec<(Place, C)>,
    ) -> Vec<Result<C::Reply, ShardError>> {
        let mut started = Vec::with_capacity(calls.len());
        let mut local = None;
        for (at, (place, call)) in calls.into_iter().enumerate() {
            match self.hop(place) {
                Ok(Hop::Here) => {
                    local = Some((at, call));
                    started.push(None);
                }
                Ok(Hop::Core(core)) => {
                    Metrics::inc(&self.metrics.mesh_calls);
                    started.push(Some(self.mesh.start(core, call).await));
                }
                Err(not_here) => started.push(Some(Err(not_here.into()))),
            }
        }
        let mut local_reply = match local {
            Some((at, call)) => Some((at, call.run(self).await)),
            None => None,
        };
        let mut replies = Vec::with_capacity(started.len());
        for (at, in_flight) in started.into_iter().enumerate() {
            replies.push(match in_flight {
                Some(Ok(in_flight)) => self.mesh.finish(in_flight).await,
                Some(Err(failure)) => Err(failure),
                None => match local_reply.take() {
                    Some((local_at, reply)) if local_at == at => reply,
                    _ => unreachable!("one local call, at its place"),
                },
            });
        }
        replies
    }

    /// `UnknownTopic` for a name this core has no topic of; it says "was deleted" when this
    /// core deleted one of that name, which a client that used the topic (a fetch racing
    /// the deletion on its way to the owner, say) is better told.
    pub(crate) fn unknown_topic(&self, topic: &str) -> ShardError {
        let topic = topic.to_string();
        if self.deleted_topics.remembers(&topic) {
            ShardError::TopicDeleted { topic }
        } else {
            ShardError::UnknownTopic { topic }
        }
    }

    pub(crate) fn owned_log(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Rc<PartitionLog>, ShardError> {
        if let Some(log) = self.local_log(topic, partition) {
            return Ok(log);
        }
        Err(match self.topic(topic) {
            None => self.unknown_topic(topic),
            Some(meta) if partition >= meta.partitions => ShardError::UnknownPartition {
                topic: topic.to_string(),
                partition,
                partitions: meta.partitions,
            },
            Some(_) => ShardError::internal(format!(
                "{topic}/{partition} is not owned by {}",
                self.here()
            )),
        })
    }

    /// Validates a topic or group name (`what` says which), counting refusals.
    pub fn valid_name<'n>(
        &self,
        name: &'n [u8],
        what: &'static str,
    ) -> Result<&'n str, ShardError> {
        validate_name(name).map_err(|e| {
            Metrics::inc(&self.metrics.bad_names);
            // The error names the bad character, never the whole (client-chosen) name.
            warn!(what, error = %e, "name refused");
            ShardError::InvalidName {
                what,
                reason: e.to_string(),
            }
        })
    }

    pub(crate) fn offsets_key(
        &self,
        group: &[u8],
        topic: &[u8],
        partition: u32,
    ) -> Result<Vec<u8>, ShardError> {
        let group = self.valid_name(group, "group")?;
        let topic = self.valid_name(topic, "topic")?;
        Ok(offsets::encode_key(group, topic, partition))
    }

    /// Flushes, syncs and closes every partition this core owns (clean shutdown).
    pub async fn close_all(&self) {
        self.stop_all_replicas();
        for log in self.local_logs().into_iter().chain(self.offsets.logs()) {
            if let Err(error) = log.close().await {
                warn!(dir = %log.dir().display(), %error, "partition did not close cleanly");
            }
        }
    }
}
