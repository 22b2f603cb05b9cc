//! Consumer group offsets through the shard: commit and fetch (routed to the owner of the
//! key's offsets shard), list and describe (one call per core, all cores at once).

use std::rc::Rc;

use crate::shard::calls::{CommitOffset, FetchOffset, GroupOffset, GroupOffsets, Run};
use crate::shard::placement::NotHere;
use crate::shard::used::UsedTopics;
use crate::shard::{Shard, ShardError, offsets};

/// One partition of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPartition {
    pub topic: String,
    pub partition: u32,
    pub committed_offset: u64,
    /// The partition's high watermark (0 for a topic deleted since the commit).
    pub log_end_offset: u64,
}

impl GroupPartition {
    pub fn lag(&self) -> u64 {
        self.log_end_offset.saturating_sub(self.committed_offset)
    }
}

impl Shard {
    /// A group's committed offsets are kept on its coordinator's node (on one node: here):
    /// another node answers [`NotHere`] naming the coordinator, so the client asks there.
    pub(crate) fn group_here(&self, group: &str) -> Result<(), NotHere> {
        let place = self.placement().coordinator(group);
        if place.node != self.placement().node() {
            return Err(NotHere { place });
        }
        Ok(())
    }

    /// Stores a group's offset (the next offset it will consume) durably, from outside a
    /// generation (a consumer that picks its partitions itself, an admin tool): refused
    /// while the group has members, whose commits are fenced by their generation
    /// ([`Shard::commit_offsets_fenced`]).
    /// A connection that used a topic deleted since must not leave offsets for it behind:
    /// refused (`shard::used`).
    pub async fn commit_offset(
        self: &Rc<Self>,
        used: &UsedTopics,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        offset: u64,
    ) -> Result<(), ShardError> {
        used.check(self, topic)?;
        let name = self.valid_name(group, "group")?;
        self.check_commit(name, "", -1)
            .await
            .map_err(|refused| match refused {
                // Another node's group: the client asks its coordinator.
                ShardError::NotHere(_) => refused,
                _ => ShardError::GroupNotEmpty {
                    group: name.to_string(),
                    reason: "only they commit its offsets, each for its generation",
                },
            })?;
        self.store_offset(group, topic, partition, offset, String::new())
            .await
    }

    /// Stores an offset, with its metadata string, with no fencing (the caller checked).
    pub(crate) async fn store_offset(
        self: &Rc<Self>,
        group: &[u8],
        topic: &[u8],
        partition: u32,
        offset: u64,
        metadata: String,
    ) -> Result<(), ShardError> {
        let key = self.offsets_key(group, topic, partition)?;
        self.group_here(self.valid_name(group, "group")?)?;
        let owner = self.placement().offsets_owner(offsets::shard_of(&key));
        let call = CommitOffset {
            key,
            offset,
            metadata,
        };
        self.route(owner, call).await
    }

    /// A group's committed offset, if it has one.
    pub async fn fetch_offset(
        self: &Rc<Self>,
        group: &[u8],
        topic: &[u8],
        partition: u32,
    ) -> Result<Option<u64>, ShardError> {
        let committed = self.fetch_committed(group, topic, partition).await?;
        Ok(committed.map(|(offset, _)| offset))
    }

    /// A group's committed offset with its metadata string, if it has one.
    pub async fn fetch_committed(
        self: &Rc<Self>,
        group: &[u8],
        topic: &[u8],
        partition: u32,
    ) -> Result<Option<(u64, String)>, ShardError> {
        let key = self.offsets_key(group, topic, partition)?;
        self.group_here(self.valid_name(group, "group")?)?;
        let owner = self.placement().offsets_owner(offsets::shard_of(&key));
        self.route(owner, FetchOffset { key }).await
    }

    /// Committed offsets of `group` (every group when `None`) across all cores, sorted.
    pub async fn group_offsets(
        self: &Rc<Self>,
        group: Option<&str>,
    ) -> Result<Vec<GroupOffset>, ShardError> {
        if let Some(group) = group {
            self.group_here(group)?;
        }
        let calls = self
            .local_places()
            .into_iter()
            .map(|place| {
                let call = GroupOffsets {
                    group: group.map(str::to_string),
                };
                (place, call)
            })
            .collect();
        let mut all = Vec::new();
        for reply in self.on_places(calls).await {
            all.extend(reply?);
        }
        all.sort();
        Ok(all)
    }

    /// The groups that have committed offsets, sorted.
    pub async fn list_groups(self: &Rc<Self>) -> Result<Vec<String>, ShardError> {
        let mut groups: Vec<String> = self
            .group_offsets(None)
            .await?
            .into_iter()
            .map(|e| e.0)
            .collect();
        groups.dedup();
        Ok(groups)
    }

    /// A group's committed offsets with each partition's end: one call per core for the
    /// offsets, then one per owner core for the partitions' states.
    pub async fn describe_group(
        self: &Rc<Self>,
        group: &[u8],
    ) -> Result<Vec<GroupPartition>, ShardError> {
        let group = self.valid_name(group, "group")?;
        let entries = self.group_offsets(Some(group)).await?;
        if entries.is_empty() {
            return Err(ShardError::UnknownGroup {
                group: group.to_string(),
                reason: "has no committed offsets",
            });
        }
        let asked: Vec<(String, u32)> = entries
            .iter()
            .map(|(_, topic, partition, ..)| (topic.clone(), *partition))
            .collect();
        let states = self.partition_states(&asked).await;
        Ok(entries
            .into_iter()
            .zip(states)
            .map(
                |((_, topic, partition, committed_offset, _), state)| GroupPartition {
                    topic,
                    partition,
                    committed_offset,
                    log_end_offset: state.map_or(0, |s| s.high_watermark),
                },
            )
            .collect())
    }
}

impl Run for CommitOffset {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        shard
            .offsets
            .commit(self.key, self.offset, self.metadata)
            .await
    }
}

impl Run for FetchOffset {
    async fn run(self, shard: &Rc<Shard>) -> Result<Option<(u64, String)>, ShardError> {
        let committed = shard.offsets.fetch(&self.key).await?;
        Ok(committed.map(|c| (c.offset, c.metadata)))
    }
}

impl Run for GroupOffsets {
    async fn run(self, shard: &Rc<Shard>) -> Result<Vec<GroupOffset>, ShardError> {
        Ok(shard
            .offsets
            .entries(self.group.as_deref())
            .into_iter()
            .map(|(g, t, p, c)| (g, t, p, c.offset, c.metadata))
            .collect())
    }
}
