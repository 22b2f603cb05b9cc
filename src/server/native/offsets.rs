//! ListOffsets, CommitOffset and FetchOffset.

use std::rc::Rc;

use crate::protocol::native::{self, ErrorCode, OffsetSpec};
use crate::server::native::refusal::Refusal;
use crate::server::native::{Pending, Tag, empty, later};
use crate::shard::Shard;
use crate::shard::used::UsedTopics;

pub(super) fn list(
    shard: &Rc<Shard>,
    used: &Rc<UsedTopics>,
    tag: Tag,
    topic: &[u8],
    partition: u32,
    spec: OffsetSpec,
) -> Pending {
    let topic = topic.to_vec();
    let used = Rc::clone(used);
    later(shard, tag, async move |shard: Rc<Shard>| {
        // A consumer that read a topic deleted since (a group member placing itself after
        // a rebalance) is told so, as its fetches are, not just "unknown topic".
        used.check(&shard, &topic)?;
        let offset =
            crate::server::time_seek::list_offsets(&shard, &topic, partition, spec).await?;
        let mut out = Vec::new();
        native::encode_offset_response(&mut out, tag.1, offset);
        Ok(out)
    })
}

pub(super) fn commit(
    shard: &Rc<Shard>,
    used: &Rc<UsedTopics>,
    tag: Tag,
    group: &[u8],
    topic: &[u8],
    partition: u32,
    offset: u64,
) -> Pending {
    let (group, topic) = (group.to_vec(), topic.to_vec());
    let used = Rc::clone(used);
    later(shard, tag, async move |shard: Rc<Shard>| {
        // A consumer that used a deleted topic must not leave offsets for it behind.
        used.check(&shard, &topic)?;
        shard
            .commit_offset(&group, &topic, partition, offset)
            .await?;
        Ok(empty(tag.1))
    })
}

pub(super) fn fetch(
    shard: &Rc<Shard>,
    tag: Tag,
    group: &[u8],
    topic: &[u8],
    partition: u32,
) -> Pending {
    let (group, topic) = (group.to_vec(), topic.to_vec());
    later(shard, tag, async move |shard: Rc<Shard>| {
        match shard.fetch_offset(&group, &topic, partition).await? {
            Some(offset) => {
                let mut out = Vec::new();
                native::encode_offset_response(&mut out, tag.1, offset);
                Ok(out)
            }
            None => Err(Refusal::new(
                ErrorCode::NoCommittedOffset,
                "the group has no committed offset here",
            )),
        }
    })
}
