//! Group requests: ListGroups, DescribeGroup, JoinGroup (join and the broker's assignment
//! in one answer), Heartbeat, LeaveGroup, CommitGroupOffset, DeleteGroup.

use std::rc::Rc;

use crate::protocol::kafka::consumer::{CONSUMER_PROTOCOL_TYPE, assigned_partitions};
use crate::protocol::native::{self, ErrorCode, JoinGroup};
use crate::server::native::refusal::Refusal;
use crate::server::native::{Pending, Tag, empty, later};
use crate::shard::Shard;
use crate::shard::coordinator::api::CommitEntry;
use crate::shard::coordinator::calls::JoinAnswer;
use crate::shard::membership::{Assignor, JoinRequest, NATIVE_PROTOCOL_TYPE};

pub(super) fn list(shard: &Rc<Shard>, tag: Tag) -> Pending {
    later(shard, tag, async move |shard: Rc<Shard>| {
        let groups: Vec<String> = shard
            .group_listings()
            .await?
            .into_iter()
            .map(|(name, _, _)| name)
            .collect();
        let mut out = Vec::new();
        native::encode_list_groups_response(&mut out, tag.1, &groups);
        Ok(out)
    })
}

pub(super) fn describe(shard: &Rc<Shard>, tag: Tag, group: &[u8]) -> Pending {
    let group = group.to_vec();
    later(shard, tag, async move |shard: Rc<Shard>| {
        let found = shard.describe_group_full(&group).await?;
        let mut described = native::GroupDescription {
            state: String::from("Empty"),
            ..Default::default()
        };
        if let Some(view) = found.view {
            // A Kafka consumer's partitions are in the assignment its leader chose, in the
            // consumer protocol; a native member's are the broker's own.
            let kafka = view.protocol_type == CONSUMER_PROTOCOL_TYPE;
            described.state = view.state;
            described.protocol_type = view.protocol_type;
            described.protocol = view.protocol;
            described.generation = view.generation;
            described.leader = view.leader;
            described.members = view
                .members
                .into_iter()
                .map(|m| native::GroupMember {
                    member_id: m.member_id,
                    instance_id: m.instance_id.unwrap_or_default(),
                    client_id: m.client_id,
                    partitions: if kafka {
                        assigned_partitions(&m.assignment).unwrap_or_default()
                    } else {
                        m.partitions
                            .into_iter()
                            .map(|(t, p)| (t, p as u32))
                            .collect()
                    },
                })
                .collect();
        }
        described.partitions = found
            .offsets
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
        native::encode_describe_group_response(&mut out, tag.1, &described);
        Ok(out)
    })
}

/// The broker's side of a native join: join, wait for the generation, then sync (the
/// broker assigns) and answer with the member's partitions.
pub(super) fn join(shard: &Rc<Shard>, tag: Tag, join: JoinGroup<'_>) -> Pending {
    let group = join.group.to_vec();
    let request = join_request(shard, &join);
    later(shard, tag, async move |shard: Rc<Shard>| {
        let request = request?;
        // A native join never asks for a member id first (`member_id_required` is false).
        let JoinAnswer::Joined(joined) = shard.join_group(&group, request).await? else {
            return Err(Refusal::new(
                ErrorCode::Internal,
                "the coordinator asked a native member for a member id",
            ));
        };
        let synced = shard
            .sync_group(&group, &joined.member_id, joined.generation, Vec::new())
            .await?;
        let answer = native::JoinedGroup {
            member_id: joined.member_id,
            generation: joined.generation,
            leader: joined.leader,
            partitions: synced
                .partitions
                .into_iter()
                .map(|(t, p)| (t, p as u32))
                .collect(),
        };
        let mut out = Vec::new();
        native::encode_join_group_response(&mut out, tag.1, &answer);
        Ok(out)
    })
}

fn join_request(shard: &Shard, join: &JoinGroup<'_>) -> Result<JoinRequest, Refusal> {
    let text = |bytes: &[u8], what: &str| {
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| Refusal::new(ErrorCode::Malformed, format!("{what} is not UTF-8")))
    };
    let assignor = text(join.assignor, "assignor")?;
    if Assignor::from_name(&assignor).is_none() {
        return Err(Refusal::new(
            ErrorCode::InconsistentGroupProtocol,
            format!("unknown assignor {assignor:?}: range or roundrobin"),
        ));
    }
    let topics = join
        .topics
        .iter()
        .map(|t| shard.valid_name(t, "topic").map(str::to_string))
        .collect::<Result<Vec<_>, _>>()?;
    let instance_id = text(join.instance_id, "instance id")?;
    Ok(JoinRequest {
        member_id: text(join.member_id, "member id")?,
        instance_id: (!instance_id.is_empty()).then_some(instance_id),
        client_id: text(join.client_id, "client id")?,
        session_timeout_ms: join.session_timeout_ms.into(),
        rebalance_timeout_ms: join.rebalance_timeout_ms.into(),
        protocol_type: NATIVE_PROTOCOL_TYPE.to_string(),
        protocols: vec![(assignor, Vec::new())],
        topics,
        member_id_required: false,
    })
}

pub(super) fn heartbeat(
    shard: &Rc<Shard>,
    tag: Tag,
    group: &[u8],
    member_id: &[u8],
    generation: i32,
) -> Pending {
    let (group, member_id) = (group.to_vec(), member_id.to_vec());
    later(shard, tag, async move |shard: Rc<Shard>| {
        let member_id = String::from_utf8_lossy(&member_id);
        shard.heartbeat(&group, &member_id, generation).await?;
        Ok(empty(tag.1))
    })
}

pub(super) fn leave(shard: &Rc<Shard>, tag: Tag, group: &[u8], member_id: &[u8]) -> Pending {
    let (group, member_id) = (group.to_vec(), member_id.to_vec());
    later(shard, tag, async move |shard: Rc<Shard>| {
        let member_id = String::from_utf8_lossy(&member_id).into_owned();
        let mut results = shard.leave_group(&group, vec![(member_id, None)]).await?;
        results.pop().unwrap_or(Ok(()))?;
        Ok(empty(tag.1))
    })
}

pub(super) struct Commit<'a> {
    pub group: &'a [u8],
    pub member_id: &'a [u8],
    pub generation: i32,
    pub topic: &'a [u8],
    pub partition: u32,
    pub offset: u64,
}

pub(super) fn commit(shard: &Rc<Shard>, tag: Tag, commit: Commit<'_>) -> Pending {
    let (group, member_id) = (commit.group.to_vec(), commit.member_id.to_vec());
    let topic = shard.valid_name(commit.topic, "topic").map(str::to_string);
    let (generation, partition, offset) = (commit.generation, commit.partition, commit.offset);
    later(shard, tag, async move |shard: Rc<Shard>| {
        let member_id = String::from_utf8_lossy(&member_id);
        let entries = vec![CommitEntry {
            topic: topic?,
            partition,
            offset,
            metadata: String::new(),
        }];
        let mut results = shard
            .commit_offsets_fenced(&group, &member_id, generation, entries)
            .await?;
        results.pop().unwrap_or(Ok(()))?;
        Ok(empty(tag.1))
    })
}

pub(super) fn delete(shard: &Rc<Shard>, tag: Tag, group: &[u8]) -> Pending {
    let group = group.to_vec();
    later(shard, tag, async move |shard: Rc<Shard>| {
        shard.delete_group(&group).await?;
        Ok(empty(tag.1))
    })
}
