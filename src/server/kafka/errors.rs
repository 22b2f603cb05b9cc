//! Kafka error codes the front-end answers with, and the answer to a malformed request.

use bytes::{BufMut, BytesMut};

use crate::protocol::kafka::header::HeaderPrefix;
use crate::protocol::record::RecordError;
use crate::shard::ShardError;
use crate::shard::membership::GroupError;
use crate::shard::producers::SequenceError;

pub const NONE: i16 = 0;
pub const UNKNOWN_SERVER_ERROR: i16 = -1;
pub const OFFSET_OUT_OF_RANGE: i16 = 1;
pub const CORRUPT_MESSAGE: i16 = 2;
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
pub const MESSAGE_TOO_LARGE: i16 = 10;
pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
pub const INVALID_REQUIRED_ACKS: i16 = 21;
pub const TOPIC_ALREADY_EXISTS: i16 = 36;
pub const INVALID_PARTITIONS: i16 = 37;
pub const INVALID_REPLICATION_FACTOR: i16 = 38;
pub const INVALID_REQUEST: i16 = 42;
pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: i16 = 43;
pub const POLICY_VIOLATION: i16 = 44;
pub const INVALID_CONFIG: i16 = 40;
pub const KAFKA_STORAGE_ERROR: i16 = 56;
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
pub const INVALID_PRODUCER_EPOCH: i16 = 47;
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: i16 = 53;
pub const INVALID_RECORD: i16 = 87;
pub const REQUEST_TIMED_OUT: i16 = 7;
pub const UNKNOWN_TOPIC_ID: i16 = 100;
pub const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
pub const GROUP_AUTHORIZATION_FAILED: i16 = 30;
pub const CLUSTER_AUTHORIZATION_FAILED: i16 = 31;

/// The request kind of a Kafka API in the ACL actions table.
pub const fn acl(
    api: crate::security::acl::actions::KafkaApi,
) -> crate::security::acl::actions::RequestKind {
    crate::security::acl::actions::RequestKind::Kafka(api)
}

/// The Kafka code for a shard error.
pub fn of(e: &ShardError) -> i16 {
    match e {
        ShardError::UnknownTopic { .. }
        | ShardError::TopicDeleted { .. }
        | ShardError::DeletedWhileUsed { .. }
        | ShardError::TopicBeingDeleted { .. }
        | ShardError::UnknownPartition { .. } => UNKNOWN_TOPIC_OR_PARTITION,
        ShardError::OffsetOutOfRange { .. } => OFFSET_OUT_OF_RANGE,
        ShardError::InvalidName { .. } => INVALID_TOPIC_EXCEPTION,
        ShardError::TopicExists { .. } => TOPIC_ALREADY_EXISTS,
        ShardError::BadBatch(
            RecordError::KeyTooLarge { .. } | RecordError::PayloadTooLarge { .. },
        ) => MESSAGE_TOO_LARGE,
        ShardError::BadBatch(_) | ShardError::BatchLength { .. } | ShardError::Malformed { .. } => {
            CORRUPT_MESSAGE
        }
        ShardError::CommitMetadataTooLarge { .. } => OFFSET_METADATA_TOO_LARGE,
        ShardError::TopicLimit { .. } => POLICY_VIOLATION,
        ShardError::InvalidConfig { .. } => INVALID_CONFIG,
        ShardError::Storage { .. }
        | ShardError::StorageFull { .. }
        | ShardError::Corrupt { .. } => KAFKA_STORAGE_ERROR,
        // The client retries elsewhere after refreshing its metadata.
        ShardError::ShuttingDown { .. }
        | ShardError::Fenced { .. }
        | ShardError::NotHere(_)
        | ShardError::NotLeader { .. } => NOT_LEADER_OR_FOLLOWER,
        // Retriable: the producer sends again (an idempotent one is not doubled).
        ShardError::NotReplicated { .. } => REQUEST_TIMED_OUT,
        ShardError::UnknownGroup { .. } => COORDINATOR_NOT_AVAILABLE,
        ShardError::Group { error, .. } => group_code(error),
        ShardError::Sequence(e) => sequence_code(e),
        ShardError::GroupLimit(_)
        | ShardError::RebalanceTimeout { .. }
        | ShardError::GroupNotEmpty { .. }
        | ShardError::MembershipRefused { .. }
        | ShardError::Internal { .. } => UNKNOWN_SERVER_ERROR,
    }
}

/// Kafka's code for a refused group call.
pub fn group_code(error: &GroupError) -> i16 {
    use super::groups::{
        GROUP_MAX_SIZE_REACHED, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
        INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, NON_EMPTY_GROUP, REBALANCE_IN_PROGRESS,
        UNKNOWN_MEMBER_ID,
    };
    match error {
        GroupError::UnknownMember { .. } => UNKNOWN_MEMBER_ID,
        GroupError::IllegalGeneration { .. } => ILLEGAL_GENERATION,
        GroupError::RebalanceInProgress => REBALANCE_IN_PROGRESS,
        GroupError::InconsistentProtocol => INCONSISTENT_GROUP_PROTOCOL,
        GroupError::InvalidSessionTimeout { .. } => INVALID_SESSION_TIMEOUT,
        GroupError::GroupFull { .. } => GROUP_MAX_SIZE_REACHED,
        GroupError::NotEmpty => NON_EMPTY_GROUP,
        // The client looks for the coordinator again.
        GroupError::Dead => COORDINATOR_NOT_AVAILABLE,
        GroupError::MetadataTooLarge { .. } => INVALID_REQUEST,
        GroupError::MemberIdRequired { .. } => MEMBER_ID_REQUIRED,
    }
}

/// Kafka's code for a refused idempotent batch.
pub fn sequence_code(error: &SequenceError) -> i16 {
    match error {
        SequenceError::OutOfOrder { .. } | SequenceError::RepeatInRun { .. } => {
            OUT_OF_ORDER_SEQUENCE_NUMBER
        }
        SequenceError::Fenced { .. } => INVALID_PRODUCER_EPOCH,
        // Kafka has no such bound; POLICY_VIOLATION says the request broke a broker rule.
        SequenceError::Full { .. } => POLICY_VIOLATION,
    }
}

/// INVALID_REQUEST under the request's correlation id, in the place most responses keep
/// their first error code (the client that sent a malformed request is off the protocol).
pub fn invalid_request(out: &mut BytesMut, prefix: HeaderPrefix) {
    out.put_i32(6);
    out.put_i32(prefix.correlation_id);
    out.put_i16(INVALID_REQUEST);
}
