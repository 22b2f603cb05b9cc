//! The group calls as they run on the coordinator core (or on every core).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use tracing::info;

use super::calls::*;
use super::{Want, group_failure};
use crate::shard::calls::Run;
use crate::shard::membership::{GroupError, GroupState, NATIVE_PROTOCOL_TYPE, Reply};
use crate::shard::{Shard, ShardError};

impl Run for GroupJoin {
    async fn run(self, shard: &Rc<Shard>) -> Result<JoinAnswer, ShardError> {
        let coordinator = &shard.coordinator;
        let bound = Duration::from_millis(self.request.rebalance_timeout_ms);
        let (member_id, protocol_type) = {
            let mut groups = coordinator.groups.borrow_mut();
            let group = groups.get_or_create(&self.group)?;
            let generation = group.generation();
            let (member_id, replies) = match group.join_member(coordinator.now_ms(), self.request) {
                Ok(joined) => joined,
                Err(GroupError::MemberIdRequired { member_id }) => {
                    info!(group = %self.group, member = %member_id, "member id handed out; the member joins again with it");
                    return Ok(JoinAnswer::MemberIdRequired { member_id });
                }
                Err(e) => return Err(group_failure(&self.group, e)),
            };
            info!(group = %self.group, member = %member_id, generation, "member joins");
            coordinator.forget(&self.group, &member_id);
            let protocol_type = group.protocol_type().unwrap_or_default().to_string();
            drop(groups);
            coordinator.deliver(&self.group, replies);
            (member_id, protocol_type)
        };
        match coordinator
            .wait(shard, &self.group, &member_id, Want::Join, bound)
            .await?
        {
            Reply::Joined {
                member_id,
                generation,
                protocol,
                leader,
                members,
            } => {
                info!(group = %self.group, member = %member_id, generation, "member joined its generation");
                Ok(JoinAnswer::Joined(Joined {
                    member_id,
                    generation,
                    protocol_type,
                    protocol,
                    leader,
                    members,
                }))
            }
            Reply::Failed { error, .. } => Err(group_failure(&self.group, error)),
            Reply::Synced { .. } => unreachable!("a join waits for Joined or Failed"),
        }
    }
}

impl Run for GroupSync {
    async fn run(self, shard: &Rc<Shard>) -> Result<Synced, ShardError> {
        let coordinator = &shard.coordinator;
        let (bound, protocol_type, protocol) = {
            let mut groups = coordinator.groups.borrow_mut();
            let group = groups
                .get_mut(&self.group)
                .ok_or_else(|| unknown_member(&self.group, &self.member_id))?;
            let rebalance_timeout_ms = group
                .members()
                .find(|m| m.id == self.member_id)
                .map_or(0, |m| m.rebalance_timeout_ms);
            let partitions = if group.protocol_type() == Some(NATIVE_PROTOCOL_TYPE) {
                subscribed_partitions(shard, group.members().flat_map(|m| m.topics.iter()))
            } else {
                BTreeMap::new()
            };
            coordinator.forget(&self.group, &self.member_id);
            let replies = group
                .sync(
                    coordinator.now_ms(),
                    &self.member_id,
                    self.generation,
                    self.assignments,
                    &partitions,
                )
                .map_err(|e| group_failure(&self.group, e))?;
            let kind = (
                group.protocol_type().unwrap_or_default().to_string(),
                group.protocol().map(str::to_string),
            );
            drop(groups);
            coordinator.deliver(&self.group, replies);
            (Duration::from_millis(rebalance_timeout_ms), kind.0, kind.1)
        };
        match coordinator
            .wait(shard, &self.group, &self.member_id, Want::Sync, bound)
            .await?
        {
            Reply::Synced {
                assignment,
                partitions,
                ..
            } => Ok(Synced {
                protocol_type,
                protocol,
                assignment,
                partitions,
            }),
            Reply::Failed { error, .. } => Err(group_failure(&self.group, error)),
            Reply::Joined { .. } => unreachable!("a sync waits for Synced or Failed"),
        }
    }
}

/// Partition counts of the topics native members subscribe to (unknown topics left out).
fn subscribed_partitions<'t>(
    shard: &Shard,
    topics: impl Iterator<Item = &'t String>,
) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for topic in topics {
        if !out.contains_key(topic)
            && let Some(meta) = shard.topic(topic)
        {
            out.insert(topic.clone(), meta.partitions);
        }
    }
    out
}

fn unknown_member(group: &str, member_id: &str) -> ShardError {
    group_failure(
        group,
        GroupError::UnknownMember {
            member_id: member_id.to_string(),
        },
    )
}

impl Run for GroupHeartbeat {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        let coordinator = &shard.coordinator;
        let mut groups = coordinator.groups.borrow_mut();
        let group = groups
            .get_mut(&self.group)
            .ok_or_else(|| unknown_member(&self.group, &self.member_id))?;
        group
            .heartbeat(coordinator.now_ms(), &self.member_id, self.generation)
            .map_err(|e| group_failure(&self.group, e))
    }
}

impl Run for GroupLeave {
    async fn run(self, shard: &Rc<Shard>) -> Result<Vec<Result<(), ShardError>>, ShardError> {
        let coordinator = &shard.coordinator;
        let mut results = Vec::with_capacity(self.members.len());
        let mut replies = Vec::new();
        {
            let mut groups = coordinator.groups.borrow_mut();
            for (member_id, instance_id) in self.members {
                let Some(group) = groups.get_mut(&self.group) else {
                    results.push(Err(unknown_member(&self.group, &member_id)));
                    continue;
                };
                // A static member may leave by its instance id alone (Kafka LeaveGroup v3+).
                let id = match (&instance_id, member_id.is_empty()) {
                    (Some(instance), true) => group
                        .members()
                        .find(|m| m.instance_id.as_ref() == Some(instance))
                        .map_or(member_id.clone(), |m| m.id.clone()),
                    _ => member_id.clone(),
                };
                match group.leave(coordinator.now_ms(), &id) {
                    Ok(made) => {
                        info!(group = %self.group, member = %id, "member leaves");
                        replies.extend(made);
                        results.push(Ok(()));
                    }
                    Err(e) => results.push(Err(group_failure(&self.group, e))),
                }
            }
        }
        coordinator.deliver(&self.group, replies);
        Ok(results)
    }
}

impl Run for GroupDescribe {
    async fn run(self, shard: &Rc<Shard>) -> Result<Option<GroupView>, ShardError> {
        let groups = shard.coordinator.groups.borrow();
        let Some(group) = groups.get(&self.group) else {
            return Ok(None);
        };
        let protocol = group.protocol().unwrap_or_default().to_string();
        let members = group
            .members()
            .map(|m| MemberView {
                member_id: m.id.clone(),
                instance_id: m.instance_id.clone(),
                client_id: m.client_id.clone(),
                metadata: m.metadata(&protocol).unwrap_or_default().to_vec(),
                assignment: m.assignment.clone(),
                partitions: m.partitions.clone(),
            })
            .collect();
        Ok(Some(GroupView {
            group: group.id.clone(),
            state: group.state().name().to_string(),
            protocol_type: group.protocol_type().unwrap_or_default().to_string(),
            protocol,
            generation: group.generation(),
            leader: group.leader().unwrap_or_default().to_string(),
            members,
        }))
    }
}

impl Run for GroupList {
    async fn run(self, shard: &Rc<Shard>) -> Result<Vec<GroupListing>, ShardError> {
        // An empty group is listed by its committed offsets alone (`group_listings`), as if
        // the registry had already forgotten it: that happens at the next tick, so listing
        // it here would make a listing right after its last member left depend on the tick.
        Ok(shard
            .coordinator
            .groups
            .borrow()
            .list()
            .filter(|(_, state, _)| *state != GroupState::Empty.name())
            .map(|(id, state, protocol_type)| {
                (
                    id.to_string(),
                    state.to_string(),
                    protocol_type.unwrap_or_default().to_string(),
                )
            })
            .collect())
    }
}

impl Run for GroupForget {
    async fn run(self, shard: &Rc<Shard>) -> Result<bool, ShardError> {
        let forgotten = shard
            .coordinator
            .groups
            .borrow_mut()
            .delete(&self.group)
            .map_err(|e| group_failure(&self.group, e))?;
        if forgotten {
            info!(group = %self.group, "group deleted");
        }
        Ok(forgotten)
    }
}

impl Run for GroupCheckCommit {
    async fn run(self, shard: &Rc<Shard>) -> Result<(), ShardError> {
        let groups = shard.coordinator.groups.borrow();
        match groups.get(&self.group) {
            Some(group) => group
                .check_commit(&self.member_id, self.generation)
                .map_err(|e| group_failure(&self.group, e)),
            // No members (none since the broker started): only commits from outside a
            // generation are accepted.
            None if self.member_id.is_empty() && self.generation < 0 => Ok(()),
            None => Err(ShardError::group(
                &self.group,
                GroupError::UnknownMember {
                    member_id: self.member_id.clone(),
                },
            )),
        }
    }
}

impl Run for OffsetsDelete {
    async fn run(self, shard: &Rc<Shard>) -> Result<u64, ShardError> {
        shard
            .offsets
            .delete_matching(|group, topic, partition| {
                self.group.as_deref().is_none_or(|g| g == group)
                    && self.topic.as_deref().is_none_or(|t| t == topic)
                    && self
                        .partitions
                        .as_ref()
                        .is_none_or(|list| list.contains(&partition))
            })
            .await
    }
}
