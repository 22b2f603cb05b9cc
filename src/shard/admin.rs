//! Topic administration: creation (on demand or asked for), deletion and compaction
//! requests. Creation and deletion run on the controller (the placement's; core 0 of a
//! one-node broker), one at a time, in rounds over every core of the node.
//!
//! Create: write `topic.meta` durably; every owner opens its partitions (unpublished);
//! then every core publishes the topic. If a step fails before the publish round, the
//! creation is rolled back: every core drops what it opened and `topic.meta` is removed
//! durably, so the topic does not appear after a restart either.

use std::rc::Rc;

use tracing::{info, warn};

use crate::metrics::counters::Metrics;
use crate::protocol::native::TopicSettings;
use crate::shard::calls::{
    AlterTopic, CreateTopic, DeleteTopic, DropTopic, ForgetOffsets, OpenPartitions, PublishTopic,
    Run,
};
use crate::shard::topics::{self, TopicMeta};
use crate::shard::used::UsedTopics;
use crate::shard::{Shard, ShardError};

impl Shard {
    /// The topic a produce or fetch names, created with one partition if it does not exist
    /// (topics are created on demand). The one place where that is decided, for every
    /// protocol.
    pub async fn topic_on_demand(
        self: &Rc<Self>,
        name: &[u8],
    ) -> Result<Rc<TopicMeta>, ShardError> {
        let name = self.valid_name(name, "topic")?;
        if let Some(meta) = self.topic(name) {
            return Ok(meta);
        }
        let settings = TopicSettings {
            partitions: 1,
            ..Default::default()
        };
        self.create_via_controller(name, &settings, 1, true).await?;
        self.topic(name).ok_or_else(|| {
            ShardError::internal(format!("topic {name} was created but is not known here"))
        })
    }

    /// The topic a connection's produce or fetch names, created on demand unless the
    /// connection used a topic of that name that has since been deleted (`shard::used`):
    /// then `UnknownTopic`, and nothing is created. The check and the creation have no
    /// await between them, so a delete cannot slip in; every protocol's produce and fetch
    /// pass here, so the rule is kept in one place.
    pub async fn topic_used(
        self: &Rc<Self>,
        used: &UsedTopics,
        name: &[u8],
    ) -> Result<Rc<TopicMeta>, ShardError> {
        used.check(self, name)?;
        let meta = self.topic_on_demand(name).await?;
        used.record(self, name);
        Ok(meta)
    }

    /// A topic that must exist already, and the partition that must be in it.
    pub fn known_partition(
        &self,
        topic: &str,
        partition: u32,
    ) -> Result<Rc<TopicMeta>, ShardError> {
        let Some(meta) = self.topic(topic) else {
            return Err(self.unknown_topic(topic));
        };
        check_partition(&meta, partition)?;
        Ok(meta)
    }

    /// Creates a topic from a client's request (on any core; forwarded to the controller).
    /// The connection knows the name afterwards, whatever the outcome: it may use the new
    /// topic even if it used an older one of that name (`shard::used`).
    pub async fn create_topic(
        self: &Rc<Self>,
        used: &UsedTopics,
        name: &[u8],
        settings: &TopicSettings,
        replication_factor: u16,
    ) -> Result<(), ShardError> {
        let created = match self.valid_name(name, "topic") {
            Ok(valid) => {
                self.create_via_controller(valid, settings, replication_factor, false)
                    .await
            }
            Err(e) => Err(e),
        };
        used.forget(self, name);
        created
    }

    async fn create_via_controller(
        self: &Rc<Self>,
        name: &str,
        settings: &TopicSettings,
        replication_factor: u16,
        if_not_exists: bool,
    ) -> Result<(), ShardError> {
        if replication_factor == 0 {
            return Err(ShardError::invalid_config(
                "replication factor 0: a partition needs at least one copy",
            ));
        }
        let mut meta = TopicMeta::from_settings(name, settings, &self.config.log)
            .map_err(ShardError::invalid_config)?;
        meta.id = topics::new_topic_id().map_err(ShardError::from)?;
        let call = CreateTopic {
            meta,
            replication_factor,
            if_not_exists,
        };
        self.route(self.placement().controller(), call).await
    }

    /// Deletes a topic (forwarded to the controller). The connection that deleted it may
    /// create the name again (`shard::used`).
    pub async fn delete_topic(
        self: &Rc<Self>,
        used: &UsedTopics,
        name: &[u8],
    ) -> Result<(), ShardError> {
        let valid = self.valid_name(name, "topic")?;
        let call = DeleteTopic {
            name: valid.to_string(),
        };
        let deleted = self.route(self.placement().controller(), call).await;
        used.forget(self, name);
        deleted
    }

    /// Changes an existing topic's settings (on any core; forwarded to the controller).
    /// Only what open partitions follow may change: retention and cleanup, which the
    /// background tasks read from the registry at every pass. The caller checks that.
    pub async fn alter_topic(self: &Rc<Self>, meta: TopicMeta) -> Result<(), ShardError> {
        self.route(self.placement().controller(), AlterTopic { meta })
            .await
    }

    /// Runs a call on every core of this node in order; the first failure stops it.
    pub(crate) async fn broadcast<C: Run<Reply = ()>>(
        self: &Rc<Self>,
        make: impl Fn() -> C,
    ) -> Result<(), ShardError> {
        for place in self.local_places() {
            self.route(place, make()).await?;
        }
        Ok(())
    }

    pub(crate) async fn controller_permit(&self) -> Result<glommio::sync::Permit<'_>, ShardError> {
        assert_eq!(self.here(), self.placement().controller());
        self.controller_lock
            .acquire_permit(1)
            .await
            .map_err(|e| ShardError::internal(e.to_string()))
    }

    async fn create_on_controller(self: &Rc<Self>, call: CreateTopic) -> Result<(), ShardError> {
        let CreateTopic {
            meta,
            replication_factor,
            if_not_exists,
        } = call;
        // A cluster node asks the cluster's controller; the topic is made here (and on the
        // other nodes) when its creation is applied (`install_topic`).
        if let Some(controller) = self.topic_controller() {
            return controller
                .create(meta, replication_factor, if_not_exists)
                .await;
        }
        if replication_factor > 1 {
            return Err(ShardError::invalid_config(format!(
                "replication factor {replication_factor}: a broker started alone keeps one copy of each partition (start a cluster for more)"
            )));
        }
        self.install_topic(meta, if_not_exists).await
    }

    /// Makes a topic on this node: `topic.meta`, the partitions this node's cores own
    /// (by the placement), then every core learns it. On the node's controller core.
    pub async fn install_topic(
        self: &Rc<Self>,
        meta: TopicMeta,
        if_not_exists: bool,
    ) -> Result<(), ShardError> {
        let _lock = self.controller_permit().await?;
        if self.topic(&meta.name).is_some() {
            return if if_not_exists {
                Ok(())
            } else {
                Err(ShardError::TopicExists {
                    topic: meta.name.clone(),
                })
            };
        }
        if self.topic_count() >= self.config.topics_max {
            Metrics::inc(&self.metrics.topic_limit_hits);
            warn!(topic = %meta.name, limit = self.config.topics_max, "topic limit reached");
            return Err(ShardError::TopicLimit {
                max: self.config.topics_max,
            });
        }
        // Several fsyncs: on the blocking thread, so that a client creating topics in a
        // loop does not stall every other connection of this core.
        let (persisted, data_dir) = (meta.clone(), self.config.data_dir.clone());
        let written = glommio::executor()
            .spawn_blocking(move || persisted.persist(&data_dir))
            .await;
        // Two rounds: every owner opens its partitions, then every core learns the topic.
        let opened = match written {
            Ok(()) => {
                self.broadcast(|| OpenPartitions { meta: meta.clone() })
                    .await
            }
            Err(error) => Err(ShardError::from(error)),
        };
        if let Err(failure) = opened {
            self.roll_back_create(&meta.name, &failure).await;
            return Err(failure);
        }
        self.broadcast(|| PublishTopic { meta: meta.clone() })
            .await?;
        info!(topic = %meta.name, partitions = meta.partitions, "topic created");
        Ok(())
    }

    /// Undoes a creation that failed before its publish round: every core drops what it
    /// opened, and `topic.meta` (with the topic's directory) is removed durably.
    async fn roll_back_create(self: &Rc<Self>, name: &str, failure: &ShardError) {
        warn!(topic = %name, error = %failure, "topic creation failed; rolling it back");
        for place in self.local_places() {
            let call = DropTopic {
                name: name.to_string(),
            };
            if let Err(error) = self.route(place, call).await {
                warn!(topic = %name, %place, error = %error, "core could not drop a topic being rolled back");
            }
        }
        let (data_dir, removed) = (self.config.data_dir.clone(), name.to_string());
        let removed = glommio::executor()
            .spawn_blocking(move || topics::remove_topic_dir(&data_dir, &removed))
            .await;
        if let Err(error) = removed {
            warn!(topic = %name, %error, "could not remove a topic whose creation failed; it may appear after a restart");
        }
    }

    async fn alter_on_controller(self: &Rc<Self>, meta: TopicMeta) -> Result<(), ShardError> {
        // A cluster node asks the cluster's controller; every node applies the change
        // when it is applied (`apply_settings`), this one before the client is answered.
        if let Some(controller) = self.topic_controller() {
            self.check_alter(&meta)?;
            return controller.alter(meta).await;
        }
        self.apply_settings(meta).await
    }

    /// Makes `meta`'s settings the topic's on this node: `topic.meta`, then every core.
    /// On the node's controller core.
    pub async fn apply_settings(self: &Rc<Self>, meta: TopicMeta) -> Result<(), ShardError> {
        let _lock = self.controller_permit().await?;
        self.check_alter(&meta)?;
        // Durable before any core uses it: a crash after the answer keeps the new
        // settings (the file is replaced by a rename, never half written).
        self.persist_meta(&meta).await?;
        self.broadcast(|| PublishTopic { meta: meta.clone() })
            .await?;
        info!(topic = %meta.name, settings = ?meta.settings(), "topic settings altered");
        Ok(())
    }

    /// An alteration must be of the topic as it is: same partitions and id.
    fn check_alter(&self, meta: &TopicMeta) -> Result<(), ShardError> {
        let Some(old) = self.topic(&meta.name) else {
            return Err(self.unknown_topic(&meta.name));
        };
        if old.partitions != meta.partitions || old.id != meta.id {
            return Err(ShardError::invalid_config(format!(
                "topic {} changed while its settings were altered",
                meta.name
            )));
        }
        Ok(())
    }

    /// Writes `topic.meta` durably, on the blocking thread (several fsyncs).
    pub(crate) async fn persist_meta(&self, meta: &TopicMeta) -> Result<(), ShardError> {
        let (persisted, data_dir) = (meta.clone(), self.config.data_dir.clone());
        glommio::executor()
            .spawn_blocking(move || persisted.persist(&data_dir))
            .await
            .map_err(ShardError::from)
    }

    async fn delete_on_controller(self: &Rc<Self>, name: &str) -> Result<(), ShardError> {
        if let Some(controller) = self.topic_controller() {
            return controller.delete(name.to_string()).await;
        }
        self.remove_topic(name).await
    }

    /// Deletes a topic on this node: every core drops it, its groups' offsets and its
    /// files go. On the node's controller core.
    pub async fn remove_topic(self: &Rc<Self>, name: &str) -> Result<(), ShardError> {
        let _lock = self.controller_permit().await?;
        if self.topic(name).is_none() {
            return Err(self.unknown_topic(name));
        }
        self.broadcast(|| DropTopic {
            name: name.to_string(),
        })
        .await?;
        // Before the topic's files go: a crash in between leaves the topic (its delete not
        // acknowledged) without offsets, never offsets of a deleted topic waiting for one
        // made again under its name.
        let mut offsets = 0;
        for place in self.local_places() {
            let call = ForgetOffsets {
                topic: name.to_string(),
            };
            offsets += self.route(place, call).await?;
        }
        let (data_dir, removed) = (self.config.data_dir.clone(), name.to_string());
        glommio::executor()
            .spawn_blocking(move || topics::remove_topic_dir(&data_dir, &removed))
            .await
            .map_err(ShardError::from)?;
        info!(topic = %name, offsets, "topic deleted, with its groups' committed offsets");
        Ok(())
    }
}

/// `partition` must be one of `meta`'s.
pub fn check_partition(meta: &TopicMeta, partition: u32) -> Result<(), ShardError> {
    if partition < meta.partitions {
        return Ok(());
    }
    Err(ShardError::UnknownPartition {
        topic: meta.name.clone(),
        partition,
        partitions: meta.partitions,
    })
}

impl Run for CreateTopic {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        // Boxed: the controller's rounds route further calls from inside this one.
        Box::pin(shard.create_on_controller(self)).await
    }
}

impl Run for DeleteTopic {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        Box::pin(shard.delete_on_controller(&self.name)).await
    }
}

impl Run for AlterTopic {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        Box::pin(shard.alter_on_controller(self.meta)).await
    }
}

impl Run for OpenPartitions {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        shard
            .open_partitions(&self.meta)
            .await
            .map_err(ShardError::from)
    }
}

impl Run for PublishTopic {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        shard.publish_topic(self.meta);
        Ok(())
    }
}

impl Run for ForgetOffsets {
    async fn run(self, shard: &Rc<Shard>) -> Result<usize, ShardError> {
        shard.offsets.forget_topic(&self.topic).await
    }
}

impl Run for DropTopic {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        shard.drop_topic(&self.name);
        // Its groups' offsets go with it (in this core's offsets shards): a topic made
        // again under the name starts with no group positions.
        shard
            .offsets
            .delete_matching(|_, topic, _| topic == self.name)
            .await?;
        Ok(())
    }
}
