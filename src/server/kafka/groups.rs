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
use super::{Conn, Pending, groups_admin, groups_find, groups_join, groups_member, groups_offsets};
use crate::protocol::kafka::{KafkaRequest, RequestHeader};
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
