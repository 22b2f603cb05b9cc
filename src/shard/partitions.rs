//! Partition administration: growing a topic (Kafka's CreatePartitions) and moving a
//! partition's log start (DeleteRecords).
//!
//! Grow runs on the controller like create and alter: `topic.meta` is rewritten durably
//! with the new count first, then every core opens the new partitions it owns (each placed
//! by the placement like any partition; the existing ones stay open as they are),
//! then every core publishes the topic with its new count. A failure before the publish
//! round writes the old count back, so a restart shows the topic as clients last saw it.
//! A crash after the rewrite and before the answer leaves the topic grown at the next
//! start (the client got no answer and may ask again: the count is then already there).
//! Existing partitions, their records and offsets do not move: a partition's owner is (on
//! one node) a hash of its topic and number, not of the count.

use std::rc::Rc;

use tracing::{info, warn};

use crate::shard::calls::{DeleteRecords, GrowTopic, OpenPartitions, PublishTopic, Run};
use crate::shard::topics::{PARTITIONS_MAX, TopicMeta};
use crate::shard::{Shard, ShardError};

impl Shard {
    /// Grows topic `name` to `partitions` partitions (on any core; forwarded to the
    /// controller). `validate_only` checks without changing. A count not above the
    /// current one, or over [`PARTITIONS_MAX`], is `InvalidConfig`.
    pub async fn grow_topic(
        self: &Rc<Self>,
        name: &[u8],
        partitions: u32,
        validate_only: bool,
    ) -> Result<(), ShardError> {
        let name = self.valid_name(name, "topic")?.to_string();
        let call = GrowTopic {
            name,
            partitions,
            validate_only,
        };
        self.route(self.placement().controller(), call).await
    }

    async fn grow_on_controller(self: &Rc<Self>, call: GrowTopic) -> Result<(), ShardError> {
        let _lock = self.controller_permit().await?;
        let Some(old) = self.topic(&call.name) else {
            return Err(self.unknown_topic(&call.name));
        };
        let invalid = |message: String| Err(ShardError::invalid_config(message));
        if call.partitions <= old.partitions {
            return invalid(format!(
                "topic {} has {} partitions; a topic can only grow",
                old.name, old.partitions
            ));
        }
        if call.partitions > PARTITIONS_MAX {
            return invalid(format!(
                "{} partitions; at most {PARTITIONS_MAX}",
                call.partitions
            ));
        }
        if call.validate_only {
            return Ok(());
        }
        let meta = TopicMeta {
            partitions: call.partitions,
            ..(*old).clone()
        };
        self.persist_meta(&meta).await?;
        if let Err(failure) = self
            .broadcast(|| OpenPartitions { meta: meta.clone() })
            .await
        {
            warn!(topic = %meta.name, error = %failure, "growing a topic failed; its old partition count is written back");
            if let Err(error) = self.persist_meta(&old).await {
                warn!(topic = %meta.name, error = %error, "could not write the old partition count back; the topic may have more partitions after a restart");
            }
            return Err(failure);
        }
        self.broadcast(|| PublishTopic { meta: meta.clone() })
            .await?;
        info!(topic = %meta.name, from = old.partitions, to = meta.partitions, "topic grown");
        Ok(())
    }

    /// Moves the log start of a partition to `offset` (`None`: its high watermark), on its
    /// owner. Returns the start after the move.
    pub async fn delete_records(
        self: &Rc<Self>,
        topic: &str,
        partition: u32,
        offset: Option<u64>,
    ) -> Result<u64, ShardError> {
        self.known_partition(topic, partition)?;
        let call = DeleteRecords {
            topic: topic.to_string(),
            partition,
            offset,
        };
        self.route(self.placement().owner(topic, partition), call)
            .await
    }
}

impl Run for GrowTopic {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        Box::pin(shard.grow_on_controller(self)).await
    }
}

impl Run for DeleteRecords {
    async fn run(self, shard: &Rc<Shard>) -> Result<u64, ShardError> {
        let log = shard.owned_log(&self.topic, self.partition)?;
        Ok(log.delete_records_before(self.offset).await?)
    }
}
