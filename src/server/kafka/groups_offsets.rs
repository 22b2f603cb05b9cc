//! OffsetCommit (fenced by the member's generation; generation -1 with no member id is a
//! commit from outside the group, accepted while it has no members), OffsetFetch and
//! OffsetDelete. Offsets live in the shard's offsets shards, shared with native clients,
//! each with its commit's metadata string (at most 4096 bytes, as Kafka's default
//! `offset.metadata.max.bytes`; OffsetFetch answers it).

use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use std::rc::Rc;

use kafka_protocol::messages::offset_commit_request::OffsetCommitRequestPartition;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use super::errors::{
    self, INVALID_REQUEST, NONE, OFFSET_METADATA_TOO_LARGE, UNKNOWN_TOPIC_OR_PARTITION,
};
use super::groups::{GROUP_SUBSCRIBED_TO_TOPIC, NOT_COORDINATOR, code, name_code};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::shard::ShardError;
use crate::shard::coordinator::api::CommitEntry;
use crate::shard::offsets::COMMIT_METADATA_BYTES_MAX;

pub(super) fn commit(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: OffsetCommitRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let shard = &conn.shard;
        // Each partition's own refusal, before the group's fence; `None` goes to the group.
        let mut refused = Vec::new();
        let mut entries = Vec::new();
        let group_ok = conn.may(
            errors::acl(KafkaApi::OffsetCommit),
            ResourceType::Group,
            request.group_id.as_str(),
        );
        for topic in &request.topics {
            for p in &topic.partitions {
                let metadata = p.committed_metadata.as_deref().unwrap_or_default();
                let code = if group_ok {
                    partition_refusal(&conn, &topic.name, p, metadata)
                } else {
                    Some(errors::GROUP_AUTHORIZATION_FAILED)
                };
                if code.is_none() {
                    entries.push(CommitEntry {
                        topic: topic.name.to_string(),
                        partition: p.partition_index as u32,
                        offset: p.committed_offset as u64,
                        metadata: metadata.to_string(),
                    });
                }
                refused.push(code);
            }
        }
        let committed = shard
            .commit_offsets_fenced(
                request.group_id.as_bytes(),
                &request.member_id,
                request.generation_id_or_member_epoch,
                entries,
            )
            .await;
        let (fence_code, mut results) = match committed {
            Ok(results) => (NONE, results.into_iter()),
            Err(failure) => (name_code(&failure), Vec::new().into_iter()),
        };
        let mut refused = refused.into_iter();
        let topics = request
            .topics
            .into_iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let code = match refused.next().flatten() {
                            Some(code) => code,
                            None if fence_code != NONE => fence_code,
                            None => results
                                .next()
                                .and_then(Result::err)
                                .map_or(NONE, |f| code(&f)),
                        };
                        OffsetCommitResponsePartition::default()
                            .with_partition_index(p.partition_index)
                            .with_error_code(code)
                    })
                    .collect();
                OffsetCommitResponseTopic::default()
                    .with_name(topic.name)
                    .with_partitions(partitions)
            })
            .collect();
        Reply::frame(respond(
            &header,
            &OffsetCommitResponse::default().with_topics(topics),
        ))
    })
}

/// Why one partition's commit is refused before the group is asked: a bad index or
/// offset, metadata over Kafka's `offset.metadata.max.bytes` (4096), a topic or partition
/// that does not exist (as Kafka answers), or a topic deleted since this connection used it
/// (`shard::used`: a consumer's old positions do not fit a topic made again under its name).
fn partition_refusal(
    conn: &Conn,
    topic: &TopicName,
    p: &OffsetCommitRequestPartition,
    metadata: &str,
) -> Option<i16> {
    let (Ok(partition), true) = (u32::try_from(p.partition_index), p.committed_offset >= 0) else {
        return Some(INVALID_REQUEST);
    };
    if !conn.may(
        errors::acl(KafkaApi::OffsetCommit),
        ResourceType::Topic,
        topic.0.as_str(),
    ) {
        return Some(errors::TOPIC_AUTHORIZATION_FAILED);
    }
    if metadata.len() > COMMIT_METADATA_BYTES_MAX {
        debug!(topic = %topic.0, partition, bytes = metadata.len(), "commit metadata too large");
        return Some(OFFSET_METADATA_TOO_LARGE);
    }
    let shard = &conn.shard;
    let known = shard
        .known_partition_in(&conn.used, topic.as_str(), partition)
        .is_ok();
    (!known).then_some(UNKNOWN_TOPIC_OR_PARTITION)
}

pub(super) fn fetch(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: OffsetFetchRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let describable = |group: &str| {
            conn.may(
                errors::acl(KafkaApi::OffsetFetch),
                ResourceType::Group,
                group,
            )
        };
        if header.api_version < 8 {
            let asked: Option<Vec<(TopicName, Vec<i32>)>> = request.topics.map(|topics| {
                topics
                    .into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect()
            });
            let (code, topics) = match describable(request.group_id.as_str()) {
                true => fetch_group(&conn, request.group_id.as_str(), asked).await,
                false => (errors::GROUP_AUTHORIZATION_FAILED, Vec::new()),
            };
            let topics = topics
                .into_iter()
                .map(|(name, partitions)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(name)
                        .with_partitions(partitions)
                })
                .collect();
            let mut body = OffsetFetchResponse::default().with_topics(topics);
            if header.api_version >= 2 {
                body = body.with_error_code(code);
            }
            return Reply::frame(respond(&header, &body));
        }
        // v8+ (KIP-709): several groups in one request, each answered on its own. The
        // member id and epoch of v9 belong to KIP-848 groups, which pagurus does not have;
        // a classic group's offsets are answered whatever they say. (v10 names topics by
        // id; the kafka-protocol crate's request type ends at v9.)
        let mut groups = Vec::with_capacity(request.groups.len());
        for group in request.groups {
            let asked: Option<Vec<(TopicName, Vec<i32>)>> = group.topics.map(|topics| {
                topics
                    .into_iter()
                    .map(|t| (t.name, t.partition_indexes))
                    .collect()
            });
            let (code, topics) = match describable(group.group_id.as_str()) {
                true => fetch_group(&conn, group.group_id.as_str(), asked).await,
                false => (errors::GROUP_AUTHORIZATION_FAILED, Vec::new()),
            };
            let topics = topics
                .into_iter()
                .map(|(name, partitions)| {
                    let partitions = partitions
                        .into_iter()
                        .map(|p| {
                            OffsetFetchResponsePartitions::default()
                                .with_partition_index(p.partition_index)
                                .with_committed_offset(p.committed_offset)
                                .with_committed_leader_epoch(p.committed_leader_epoch)
                                .with_metadata(p.metadata)
                                .with_error_code(p.error_code)
                        })
                        .collect();
                    OffsetFetchResponseTopics::default()
                        .with_name(name)
                        .with_partitions(partitions)
                })
                .collect();
            groups.push(
                OffsetFetchResponseGroup::default()
                    .with_group_id(group.group_id)
                    .with_topics(topics)
                    .with_error_code(code),
            );
        }
        Reply::frame(respond(
            &header,
            &OffsetFetchResponse::default().with_groups(groups),
        ))
    })
}

/// One group's committed offsets: of the asked partitions, or of every partition it
/// committed (`None`); with the group's error code. As Kafka's broker: an asked topic the
/// principal may not describe gets TOPIC_AUTHORIZATION_FAILED for each partition, and a
/// listing of every topic leaves such topics out.
async fn fetch_group(
    conn: &Conn,
    group: &str,
    asked: Option<Vec<(TopicName, Vec<i32>)>>,
) -> (i16, Vec<(TopicName, Vec<OffsetFetchResponsePartition>)>) {
    let shard = &conn.shard;
    let describable = |topic: &str| {
        conn.may(
            errors::acl(KafkaApi::OffsetFetch),
            ResourceType::Topic,
            topic,
        )
    };
    let partition = |index: i32, committed: Option<(u64, String)>, code: i16| {
        let (offset, metadata) = committed.map_or((-1, String::new()), |(offset, metadata)| {
            (i64::try_from(offset).unwrap_or(i64::MAX), metadata)
        });
        OffsetFetchResponsePartition::default()
            .with_partition_index(index)
            .with_committed_offset(offset)
            .with_committed_leader_epoch(-1)
            .with_metadata(Some(StrBytes::from_string(metadata)))
            .with_error_code(code)
    };
    // The group's coordinator is another node's: the group's code and every asked
    // partition's (v0-v1 have no group code) send the client to FindCoordinator.
    if shard.valid_name(group.as_bytes(), "group").is_ok() && shard.group_here(group).is_err() {
        let topics = asked.into_iter().flatten().map(|(name, indexes)| {
            let refused = indexes
                .into_iter()
                .map(|i| partition(i, None, NOT_COORDINATOR));
            (name, refused.collect())
        });
        return (NOT_COORDINATOR, topics.collect());
    }
    match asked {
        Some(asked) => {
            let mut topics = Vec::with_capacity(asked.len());
            for (name, indexes) in asked {
                let allowed = describable(name.as_str());
                let mut partitions = Vec::with_capacity(indexes.len());
                for index in indexes {
                    let fetched = if !allowed {
                        Err(errors::TOPIC_AUTHORIZATION_FAILED)
                    } else if index < 0 {
                        Err(INVALID_REQUEST)
                    } else {
                        shard
                            .fetch_committed(group.as_bytes(), name.as_bytes(), index as u32)
                            .await
                            .map_err(|f| name_code(&f))
                    };
                    partitions.push(match fetched {
                        Ok(offset) => partition(index, offset, NONE),
                        Err(code) => partition(index, None, code),
                    });
                }
                topics.push((name, partitions));
            }
            (NONE, topics)
        }
        // Every topic the group committed for.
        None => match shard.group_offsets(Some(group)).await {
            Ok(entries) => {
                let mut topics: Vec<(TopicName, Vec<OffsetFetchResponsePartition>)> = Vec::new();
                // The topic last left out (entries come topic by topic): asked once.
                let mut hidden: Option<String> = None;
                for (_, topic, index, offset, metadata) in entries {
                    if hidden.as_deref() == Some(topic.as_str()) {
                        continue;
                    }
                    if topics.last().is_none_or(|(name, _)| **name != *topic) {
                        if !conn.may_list(
                            errors::acl(KafkaApi::OffsetFetch),
                            ResourceType::Topic,
                            &topic,
                        ) {
                            hidden = Some(topic);
                            continue;
                        }
                        topics.push((StrBytes::from_string(topic).into(), Vec::new()));
                    }
                    let last = topics.last_mut().expect("pushed");
                    last.1
                        .push(partition(index as i32, Some((offset, metadata)), NONE));
                }
                (NONE, topics)
            }
            Err(failure) => (code(&failure), Vec::new()),
        },
    }
}

pub(super) fn delete(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: OffsetDeleteRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let api = errors::acl(KafkaApi::OffsetDelete);
        if !conn.may(api, ResourceType::Group, request.group_id.as_str()) {
            // As Kafka: the whole request, with no topics.
            return Reply::frame(respond(
                &header,
                &OffsetDeleteResponse::default()
                    .with_error_code(errors::GROUP_AUTHORIZATION_FAILED),
            ));
        }
        let mut topics = Vec::with_capacity(request.topics.len());
        let mut top_code = NONE;
        for topic in request.topics {
            let indexes: Vec<u32> = topic
                .partitions
                .iter()
                .filter(|p| p.partition_index >= 0)
                .map(|p| p.partition_index as u32)
                .collect();
            let partition_code = if !conn.may(api, ResourceType::Topic, topic.name.as_str()) {
                errors::TOPIC_AUTHORIZATION_FAILED
            } else {
                let group = request.group_id.as_bytes();
                let deleted = conn
                    .shard
                    .delete_group_offsets(group, topic.name.as_bytes(), indexes)
                    .await;
                match &deleted {
                    Ok(_) => NONE,
                    Err(ShardError::GroupNotEmpty { .. }) => GROUP_SUBSCRIBED_TO_TOPIC,
                    Err(f @ (ShardError::InvalidName { .. } | ShardError::NotHere(_))) => {
                        top_code = name_code(f);
                        NONE
                    }
                    Err(f) => code(f),
                }
            };
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(if p.partition_index < 0 {
                            INVALID_REQUEST
                        } else {
                            partition_code
                        })
                })
                .collect();
            topics.push(
                OffsetDeleteResponseTopic::default()
                    .with_name(topic.name)
                    .with_partitions(partitions),
            );
        }
        Reply::frame(respond(
            &header,
            &OffsetDeleteResponse::default()
                .with_error_code(top_code)
                .with_topics(topics),
        ))
    })
}
