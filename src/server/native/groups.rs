//! ListGroups and DescribeGroup.

use std::rc::Rc;

use crate::protocol::native;
use crate::server::native::{Pending, Tag, later};
use crate::shard::Shard;

pub(super) fn list(shard: &Rc<Shard>, tag: Tag) -> Pending {
    later(shard, tag, async move |shard: Rc<Shard>| {
        let groups = shard.list_groups().await?;
        let mut out = Vec::new();
        native::encode_list_groups_response(&mut out, tag.1, &groups);
        Ok(out)
    })
}

pub(super) fn describe(shard: &Rc<Shard>, tag: Tag, group: &[u8]) -> Pending {
    let group = group.to_vec();
    later(shard, tag, async move |shard: Rc<Shard>| {
        let partitions: Vec<native::GroupPartition> = shard
            .describe_group(&group)
            .await?
            .into_iter()
            .map(|p| native::GroupPartition {
                lag: p.lag(),
                topic: p.topic,
                partition: p.partition,
                committed_offset: p.committed_offset,
                log_end_offset: p.log_end_offset,
            })
            .collect();
        let mut out = Vec::new();
        native::encode_describe_group_response(&mut out, tag.1, &partitions);
        Ok(out)
    })
}
