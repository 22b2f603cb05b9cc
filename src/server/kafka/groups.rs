//! Consumer group APIs (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! OffsetCommit, OffsetFetch, ListGroups, DescribeGroups, DeleteGroups, OffsetDelete).
//!
//! Until the group coordinator is wired in (`groups_*.rs` handlers), each is answered with
//! COORDINATOR_NOT_AVAILABLE in the API's own error fields, so a client backs off and
//! retries instead of losing its connection; ListGroups answers an empty list. Consumers
//! that assign partitions themselves (`assign()`, no commits) never call these.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponseTopic,
};
use kafka_protocol::messages::*;

use super::errors::COORDINATOR_NOT_AVAILABLE;
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::{KafkaRequest, RequestHeader};

const CODE: i16 = COORDINATOR_NOT_AVAILABLE;

pub(super) fn handle(_conn: &Rc<Conn>, header: RequestHeader, request: KafkaRequest) -> Pending {
    let h = &header;
    let frame = match request {
        KafkaRequest::FindCoordinator(_) => respond(
            h,
            &FindCoordinatorResponse::default()
                .with_error_code(CODE)
                .with_node_id((-1).into())
                .with_port(-1),
        ),
        KafkaRequest::JoinGroup(_) => respond(
            h,
            &JoinGroupResponse::default()
                .with_error_code(CODE)
                .with_generation_id(-1),
        ),
        KafkaRequest::SyncGroup(_) => {
            respond(h, &SyncGroupResponse::default().with_error_code(CODE))
        }
        KafkaRequest::Heartbeat(_) => {
            respond(h, &HeartbeatResponse::default().with_error_code(CODE))
        }
        KafkaRequest::LeaveGroup(_) => {
            respond(h, &LeaveGroupResponse::default().with_error_code(CODE))
        }
        KafkaRequest::ListGroups(_) => respond(h, &ListGroupsResponse::default()),
        KafkaRequest::DescribeGroups(r) => {
            let groups = r
                .groups
                .into_iter()
                .map(|g| {
                    DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(CODE)
                })
                .collect();
            respond(h, &DescribeGroupsResponse::default().with_groups(groups))
        }
        KafkaRequest::DeleteGroups(r) => {
            let results = r
                .groups_names
                .into_iter()
                .map(|g| {
                    DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(CODE)
                })
                .collect();
            respond(h, &DeleteGroupsResponse::default().with_results(results))
        }
        KafkaRequest::OffsetDelete(_) => {
            respond(h, &OffsetDeleteResponse::default().with_error_code(CODE))
        }
        KafkaRequest::OffsetCommit(r) => {
            let topics = r
                .topics
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partitions
                        .iter()
                        .map(|p| {
                            OffsetCommitResponsePartition::default()
                                .with_partition_index(p.partition_index)
                                .with_error_code(CODE)
                        })
                        .collect();
                    OffsetCommitResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(partitions)
                })
                .collect();
            respond(h, &OffsetCommitResponse::default().with_topics(topics))
        }
        KafkaRequest::OffsetFetch(r) => {
            let topics = r
                .topics
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    let partitions = t
                        .partition_indexes
                        .iter()
                        .map(|&p| {
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(p)
                                .with_committed_offset(-1)
                                .with_error_code(CODE)
                        })
                        .collect();
                    OffsetFetchResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(partitions)
                })
                .collect();
            let groups = vec![
                OffsetFetchResponseGroup::default()
                    .with_group_id(r.group_id.clone())
                    .with_error_code(CODE),
            ];
            let mut body = OffsetFetchResponse::default().with_topics(topics);
            if header.api_version >= 8 {
                body = body.with_groups(groups);
            } else if header.api_version >= 2 {
                body = body.with_error_code(CODE);
            }
            respond(h, &body)
        }
        other => unreachable!("{:?} is dispatched to its own handler", other.api_key()),
    };
    Pending::Ready(Reply::frame(frame))
}
