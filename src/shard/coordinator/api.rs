//! The group API of [`Shard`]: every call goes to the group's coordinator core (or to every
//! core), wherever the front-end that calls it runs.

use std::rc::Rc;

use super::calls::*;
use crate::shard::groups::GroupPartition;
use crate::shard::membership::JoinRequest;
use crate::shard::{Shard, ShardError};

/// A group described: its membership (if the coordinator has the group) and its
/// committed offsets with each partition's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub view: Option<GroupView>,
    pub offsets: Vec<GroupPartition>,
}

/// One partition's commit in a fenced commit.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommitEntry {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    /// Kafka's commit metadata string ("" for none; at most
    /// `offsets::COMMIT_METADATA_BYTES_MAX` bytes).
    pub metadata: String,
}

impl Shard {
    /// Joins (or rejoins) a group and waits until the generation forms; or, for a first
    /// join that must have a member id first (KIP-394), hands one out at once.
    pub async fn join_group(
        self: &Rc<Self>,
        group: &[u8],
        request: JoinRequest,
    ) -> Result<JoinAnswer, ShardError> {
        let group = self.valid_name(group, "group")?.to_string();
        if request.instance_id.as_deref() == Some("") {
            return Err(ShardError::malformed("empty group instance id"));
        }
        for topic in &request.topics {
            self.valid_name(topic.as_bytes(), "topic")?;
        }
        self.route(
            self.placement().coordinator(&group),
            GroupJoin { group, request },
        )
        .await
    }

    /// Sends the member's sync (with every member's assignment from a Kafka leader) and
    /// waits for its assignment.
    pub async fn sync_group(
        self: &Rc<Self>,
        group: &[u8],
        member_id: &str,
        generation: i32,
        assignments: Vec<(String, Vec<u8>)>,
    ) -> Result<Synced, ShardError> {
        let group = self.valid_name(group, "group")?.to_string();
        let call = GroupSync {
            group,
            member_id: member_id.to_string(),
            generation,
            assignments,
        };
        self.route(self.placement().coordinator(&call.group), call)
            .await
    }

    pub async fn heartbeat(
        self: &Rc<Self>,
        group: &[u8],
        member_id: &str,
        generation: i32,
    ) -> Result<(), ShardError> {
        let group = self.valid_name(group, "group")?.to_string();
        let call = GroupHeartbeat {
            group,
            member_id: member_id.to_string(),
            generation,
        };
        self.route(self.placement().coordinator(&call.group), call)
            .await
    }

    /// Members leave, each by member id (or, empty, by its instance id); one result each.
    pub async fn leave_group(
        self: &Rc<Self>,
        group: &[u8],
        members: Vec<(String, Option<String>)>,
    ) -> Result<Vec<Result<(), ShardError>>, ShardError> {
        let group = self.valid_name(group, "group")?.to_string();
        let owner = self.placement().coordinator(&group);
        self.route(owner, GroupLeave { group, members }).await
    }

    /// Membership and offsets of a group; `UnknownGroup` if it has neither.
    pub async fn describe_group_full(
        self: &Rc<Self>,
        group: &[u8],
    ) -> Result<GroupDescription, ShardError> {
        let name = self.valid_name(group, "group")?.to_string();
        let owner = self.placement().coordinator(&name);
        let view = self
            .route(
                owner,
                GroupDescribe {
                    group: name.clone(),
                },
            )
            .await?;
        let offsets = match self.describe_group(group).await {
            Ok(offsets) => offsets,
            Err(ShardError::UnknownGroup { .. }) if view.is_some() => Vec::new(),
            Err(f) => return Err(f),
        };
        Ok(GroupDescription { view, offsets })
    }

    /// Every group a coordinator holds or with committed offsets, sorted, as (name, state,
    /// protocol type); a group known only by its offsets is `Empty` with no type.
    pub async fn group_listings(self: &Rc<Self>) -> Result<Vec<GroupListing>, ShardError> {
        let calls = self
            .local_places()
            .into_iter()
            .map(|place| (place, GroupList))
            .collect();
        let mut all = Vec::new();
        for reply in self.on_places(calls).await {
            all.extend(reply?);
        }
        for name in self.list_groups().await? {
            if !all.iter().any(|(g, _, _)| *g == name) {
                all.push((name, "Empty".to_string(), String::new()));
            }
        }
        all.sort();
        Ok(all)
    }

    /// Deletes an empty group: its coordinator forgets it and its offsets go.
    /// `GroupNotEmpty` while it has members, `UnknownGroup` if there was nothing to delete.
    pub async fn delete_group(self: &Rc<Self>, group: &[u8]) -> Result<(), ShardError> {
        let name = self.valid_name(group, "group")?.to_string();
        let owner = self.placement().coordinator(&name);
        let forgotten = self
            .route(
                owner,
                GroupForget {
                    group: name.clone(),
                },
            )
            .await?;
        let deleted = self.delete_offsets(Some(&name), None, None).await?;
        if !forgotten && deleted == 0 {
            return Err(ShardError::UnknownGroup {
                group: name,
                reason: "does not exist",
            });
        }
        Ok(())
    }

    /// Deletes committed offsets on every core; returns how many went.
    pub async fn delete_offsets(
        self: &Rc<Self>,
        group: Option<&str>,
        topic: Option<&str>,
        partitions: Option<Vec<u32>>,
    ) -> Result<u64, ShardError> {
        let calls = self
            .local_places()
            .into_iter()
            .map(|place| {
                let call = OffsetsDelete {
                    group: group.map(str::to_string),
                    topic: topic.map(str::to_string),
                    partitions: partitions.clone(),
                };
                (place, call)
            })
            .collect();
        let mut deleted = 0;
        for reply in self.on_places(calls).await {
            deleted += reply?;
        }
        Ok(deleted)
    }

    /// OffsetDelete: a group's offsets of some partitions of a topic, refused while the
    /// group has members.
    pub async fn delete_group_offsets(
        self: &Rc<Self>,
        group: &[u8],
        topic: &[u8],
        partitions: Vec<u32>,
    ) -> Result<u64, ShardError> {
        let name = self.valid_name(group, "group")?.to_string();
        let topic = self.valid_name(topic, "topic")?.to_string();
        self.check_commit(&name, "", -1)
            .await
            .map_err(|refused| match refused {
                // Another node's group: the client asks its coordinator.
                ShardError::NotHere(_) => refused,
                _ => ShardError::GroupNotEmpty {
                    group: name.clone(),
                    reason: "its offsets stay while it does",
                },
            })?;
        self.delete_offsets(Some(&name), Some(&topic), Some(partitions))
            .await
    }

    /// Whether `member_id` may commit at `generation` (empty and -1: from outside a
    /// generation, accepted only while the group has no members).
    pub async fn check_commit(
        self: &Rc<Self>,
        group: &str,
        member_id: &str,
        generation: i32,
    ) -> Result<(), ShardError> {
        let call = GroupCheckCommit {
            group: group.to_string(),
            member_id: member_id.to_string(),
            generation,
        };
        self.route(self.placement().coordinator(group), call).await
    }

    /// Commits offsets for a member of a generation: fenced by the coordinator first (a
    /// member of an older generation, or one the group removed, commits nothing), then
    /// each stored in its offsets shard. One result per entry.
    pub async fn commit_offsets_fenced(
        self: &Rc<Self>,
        group: &[u8],
        member_id: &str,
        generation: i32,
        entries: Vec<CommitEntry>,
    ) -> Result<Vec<Result<(), ShardError>>, ShardError> {
        let name = self.valid_name(group, "group")?.to_string();
        self.check_commit(&name, member_id, generation).await?;
        let mut results = Vec::with_capacity(entries.len());
        for entry in entries {
            let stored = self
                .store_offset(
                    group,
                    entry.topic.as_bytes(),
                    entry.partition,
                    entry.offset,
                    entry.metadata,
                )
                .await;
            results.push(stored);
        }
        Ok(results)
    }
}
