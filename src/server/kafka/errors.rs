//! Kafka error codes the front-end answers with, and the answer to a malformed request.

use bytes::{BufMut, BytesMut};

use crate::protocol::kafka::header::HeaderPrefix;
use crate::protocol::native::ErrorCode;

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
pub const UNKNOWN_TOPIC_ID: i16 = 100;

/// The Kafka code for a shard failure.
pub fn from_native(code: ErrorCode) -> i16 {
    match code {
        ErrorCode::None => NONE,
        ErrorCode::UnknownTopic | ErrorCode::UnknownPartition => UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode::OffsetOutOfRange => OFFSET_OUT_OF_RANGE,
        ErrorCode::InvalidName => INVALID_TOPIC_EXCEPTION,
        ErrorCode::TopicExists => TOPIC_ALREADY_EXISTS,
        ErrorCode::BadMagic | ErrorCode::CrcMismatch | ErrorCode::Malformed => CORRUPT_MESSAGE,
        ErrorCode::KeyTooLarge | ErrorCode::PayloadTooLarge => MESSAGE_TOO_LARGE,
        ErrorCode::TopicLimit => POLICY_VIOLATION,
        ErrorCode::InvalidConfig => INVALID_CONFIG,
        ErrorCode::StorageError | ErrorCode::StorageFull | ErrorCode::CorruptData => {
            KAFKA_STORAGE_ERROR
        }
        // The client retries elsewhere after refreshing its metadata.
        ErrorCode::ShuttingDown | ErrorCode::Fenced | ErrorCode::NotHere => NOT_LEADER_OR_FOLLOWER,
        ErrorCode::UnknownGroup => COORDINATOR_NOT_AVAILABLE,
        ErrorCode::OutOfOrderSequence => OUT_OF_ORDER_SEQUENCE_NUMBER,
        ErrorCode::ProducerFenced => INVALID_PRODUCER_EPOCH,
        ErrorCode::ProducerLimit => POLICY_VIOLATION,
        _ => UNKNOWN_SERVER_ERROR,
    }
}

/// INVALID_REQUEST under the request's correlation id, in the place most responses keep
/// their first error code (the client that sent a malformed request is off the protocol).
pub fn invalid_request(out: &mut BytesMut, prefix: HeaderPrefix) {
    out.put_i32(6);
    out.put_i32(prefix.correlation_id);
    out.put_i16(INVALID_REQUEST);
}
