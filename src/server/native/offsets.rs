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
        let offset =
            crate::server::time_seek::list_offsets(&shard, &used, &topic, partition, spec).await?;
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
        shard
            .commit_offset(&used, &group, &topic, partition, offset)
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
