//! Consumer group APIs, each in its own file, all on the shard's group API
//! (`shard::coordinator`): the same groups native clients join.
//!
//! - `groups_find.rs`: FindCoordinator (the group's core, as a broker).
//! - `groups_join.rs`: JoinGroup, SyncGroup.
//! - `groups_member.rs`: Heartbeat, LeaveGroup.
//! - `groups_offsets.rs`: OffsetCommit (fenced by generation), OffsetFetch, OffsetDelete.
//! - `groups_admin.rs`: ListGroups, DescribeGroups, DeleteGroups.

use std::rc::Rc;

use super::errors::{self, COORDINATOR_NOT_AVAILABLE};
use super::{
    Conn, Pending, Reply, groups_admin, groups_find, groups_join, groups_member, groups_offsets,
    respond,
};
use crate::protocol::kafka::{KafkaRequest, RequestHeader};
use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use crate::shard::ShardError;
use crate::shard::membership::GroupError;

pub const ILLEGAL_GENERATION: i16 = 22;
pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
pub const UNKNOWN_MEMBER_ID: i16 = 25;
pub const INVALID_SESSION_TIMEOUT: i16 = 26;
pub const REBALANCE_IN_PROGRESS: i16 = 27;
pub const INVALID_GROUP_ID: i16 = 24;
pub const GROUP_ID_NOT_FOUND: i16 = 69;
pub const NON_EMPTY_GROUP: i16 = 68;
pub const MEMBER_ID_REQUIRED: i16 = 79;
pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
pub const NOT_COORDINATOR: i16 = 16;

pub(super) fn handle(conn: &Rc<Conn>, header: RequestHeader, request: KafkaRequest) -> Pending {
    if let Some(refused) = refuse_member(conn, &header, &request) {
        return refused;
    }
    match request {
        KafkaRequest::FindCoordinator(r) => groups_find::handle(conn, header, r),
        KafkaRequest::JoinGroup(r) => groups_join::join(conn, header, r),
        KafkaRequest::SyncGroup(r) => groups_join::sync(conn, header, r),
        KafkaRequest::Heartbeat(r) => groups_member::heartbeat(conn, header, r),
        KafkaRequest::LeaveGroup(r) => groups_member::leave(conn, header, r),
        KafkaRequest::OffsetCommit(r) => groups_offsets::commit(conn, header, r),
        KafkaRequest::OffsetFetch(r) => groups_offsets::fetch(conn, header, r),
        KafkaRequest::OffsetDelete(r) => groups_offsets::delete(conn, header, r),
        KafkaRequest::ListGroups(r) => groups_admin::list(conn, header, r),
        KafkaRequest::DescribeGroups(r) => groups_admin::describe(conn, header, r),
        KafkaRequest::DeleteGroups(r) => groups_admin::delete(conn, header, r),
        other => unreachable!("{:?} is dispatched to its own handler", other.api_key()),
    }
}

/// GROUP_AUTHORIZATION_FAILED for a member call (join, sync, heartbeat, leave) on a group
/// the principal may not read; `None` when it may (or the call is another).
fn refuse_member(conn: &Conn, header: &RequestHeader, request: &KafkaRequest) -> Option<Pending> {
    use kafka_protocol::messages::{
        HeartbeatResponse, JoinGroupResponse, LeaveGroupResponse, SyncGroupResponse,
    };
    let (api, group) = match request {
        KafkaRequest::JoinGroup(r) => (KafkaApi::JoinGroup, &r.group_id),
        KafkaRequest::SyncGroup(r) => (KafkaApi::SyncGroup, &r.group_id),
        KafkaRequest::Heartbeat(r) => (KafkaApi::Heartbeat, &r.group_id),
        KafkaRequest::LeaveGroup(r) => (KafkaApi::LeaveGroup, &r.group_id),
        _ => return None,
    };
    if conn.may(errors::acl(api), ResourceType::Group, group.0.as_str()) {
        return None;
    }
    let code = errors::GROUP_AUTHORIZATION_FAILED;
    let body = match request {
        KafkaRequest::JoinGroup(r) => respond(
            header,
            &JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_member_id(r.member_id.clone()),
        ),
        KafkaRequest::SyncGroup(_) => {
            respond(header, &SyncGroupResponse::default().with_error_code(code))
        }
        KafkaRequest::Heartbeat(_) => {
            respond(header, &HeartbeatResponse::default().with_error_code(code))
        }
        _ => respond(header, &LeaveGroupResponse::default().with_error_code(code)),
    };
    Some(Pending::Ready(Reply::frame(body)))
}

/// Kafka's code for a refused group call.
pub(super) fn code(failure: &ShardError) -> i16 {
    match failure {
        // A deleted group is gone for good: the client is told so, not sent looking again.
        ShardError::Group {
            error: GroupError::Dead,
            ..
        }
        | ShardError::UnknownGroup { .. } => GROUP_ID_NOT_FOUND,
        ShardError::RebalanceTimeout { .. } => REBALANCE_IN_PROGRESS,
        ShardError::GroupNotEmpty { .. } => NON_EMPTY_GROUP,
        ShardError::GroupLimit(_) => GROUP_MAX_SIZE_REACHED,
        ShardError::Malformed { .. } => errors::INVALID_REQUEST,
        // The client finds the coordinator again and retries.
        ShardError::ShuttingDown { .. } => COORDINATOR_NOT_AVAILABLE,
        // The group's coordinator is on another node: FindCoordinator names it.
        ShardError::NotHere(_) => NOT_COORDINATOR,
        other => errors::of(other),
    }
}

/// The code for a group name the broker refuses.
pub(super) fn name_code(failure: &ShardError) -> i16 {
    if matches!(failure, ShardError::InvalidName { .. }) {
        INVALID_GROUP_ID
    } else {
        code(failure)
    }
}
