//! CreateTopic, DeleteTopic and Compact.

use std::rc::Rc;

use crate::protocol::native::{self, TopicSettings};
use crate::server::native::{Pending, Tag, empty, later};
use crate::shard::Shard;
use crate::shard::used::UsedTopics;

pub(super) fn create(
    shard: &Rc<Shard>,
    used: &Rc<UsedTopics>,
    tag: Tag,
    name: &[u8],
    settings: TopicSettings,
    replication_factor: u16,
) -> Pending {
    let name = name.to_vec();
    let used = Rc::clone(used);
    later(shard, tag, async move |shard: Rc<Shard>| {
        shard
            .create_topic(&used, &name, &settings, replication_factor)
            .await?;
        Ok(empty(tag.1))
    })
}

pub(super) fn delete(shard: &Rc<Shard>, used: &Rc<UsedTopics>, tag: Tag, name: &[u8]) -> Pending {
    let name = name.to_vec();
    let used = Rc::clone(used);
    later(shard, tag, async move |shard: Rc<Shard>| {
        shard.delete_topic(&used, &name).await?;
        Ok(empty(tag.1))
    })
}

pub(super) fn compact(shard: &Rc<Shard>, tag: Tag, topic: &[u8], partition: u32) -> Pending {
    let topic = topic.to_vec();
    later(shard, tag, async move |shard: Rc<Shard>| {
        let outcome = shard.compact(&topic, partition).await?;
        let mut out = Vec::new();
        native::encode_compact_response(
            &mut out,
            tag.1,
            &native::CompactResponse {
                segments_rewritten: u32::try_from(outcome.segments_rewritten).unwrap_or(u32::MAX),
                batches_removed: outcome.batches_removed,
                bytes_before: outcome.bytes_before,
                bytes_after: outcome.bytes_after,
                duration_us: u64::try_from(outcome.duration.as_micros()).unwrap_or(u64::MAX),
            },
        );
        Ok(out)
    })
}
