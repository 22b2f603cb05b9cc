//! The native protocol's error answer: a code, a message and, for an offset out of range or
//! a damaged batch, the offsets the client is told about. A [`ShardError`] becomes one here;
//! the native front-end's own refusals (a frame too large, a request while stopping) are
//! made directly.

use crate::protocol::native::ErrorCode;
use crate::shard::ShardError;
use crate::shard::membership::GroupError;
use crate::shard::producers::SequenceError;

/// A refused native request, as the wire answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: ErrorCode,
    pub message: String,
    pub range: Option<(u64, u64)>,
}

impl Refusal {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
            range: None,
        }
    }
}

impl From<ShardError> for Refusal {
    fn from(e: ShardError) -> Refusal {
        Refusal {
            code: code_of(&e),
            range: e.range(),
            message: e.to_string(),
        }
    }
}

/// The native code for a shard error (HermitMQ v1, which has one refusal byte, uses it for
/// its metrics and log lines too).
pub fn code_of(e: &ShardError) -> ErrorCode {
    match e {
        ShardError::UnknownTopic { .. }
        | ShardError::TopicDeleted { .. }
        | ShardError::DeletedWhileUsed { .. }
        | ShardError::TopicBeingDeleted { .. } => ErrorCode::UnknownTopic,
        ShardError::UnknownPartition { .. } => ErrorCode::UnknownPartition,
        ShardError::InvalidName { .. } => ErrorCode::InvalidName,
        ShardError::InvalidConfig { .. } => ErrorCode::InvalidConfig,
        ShardError::MembershipRefused { .. } => ErrorCode::MembershipRefused,
        ShardError::TopicExists { .. } => ErrorCode::TopicExists,
        ShardError::TopicLimit { .. } => ErrorCode::TopicLimit,
        ShardError::Malformed { .. }
        | ShardError::CommitMetadataTooLarge { .. }
        | ShardError::BatchLength { .. } => ErrorCode::Malformed,
        ShardError::BadBatch(record) => record.into(),
        ShardError::OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
        ShardError::Corrupt { .. } => ErrorCode::CorruptData,
        ShardError::Fenced { .. } => ErrorCode::Fenced,
        ShardError::StorageFull { .. } => ErrorCode::StorageFull,
        ShardError::Storage { .. } => ErrorCode::StorageError,
        ShardError::Group { error, .. } => group_code(error),
        ShardError::GroupLimit(_) => ErrorCode::GroupFull,
        ShardError::RebalanceTimeout { .. } => ErrorCode::RebalanceInProgress,
        ShardError::UnknownGroup { .. } => ErrorCode::UnknownGroup,
        ShardError::GroupNotEmpty { .. } => ErrorCode::GroupNotEmpty,
        ShardError::Sequence(e) => match e {
            SequenceError::OutOfOrder { .. } | SequenceError::RepeatInRun { .. } => {
                ErrorCode::OutOfOrderSequence
            }
            SequenceError::Fenced { .. } => ErrorCode::ProducerFenced,
            SequenceError::Full { .. } => ErrorCode::ProducerLimit,
        },
        ShardError::NotHere(_) | ShardError::NotLeader { .. } => ErrorCode::NotHere,
        ShardError::NotReplicated { .. } => ErrorCode::NotReplicated,
        ShardError::ShuttingDown { .. } => ErrorCode::ShuttingDown,
        ShardError::Internal { .. } => ErrorCode::Internal,
    }
}

fn group_code(error: &GroupError) -> ErrorCode {
    match error {
        GroupError::UnknownMember { .. } => ErrorCode::UnknownMember,
        GroupError::IllegalGeneration { .. } => ErrorCode::IllegalGeneration,
        GroupError::RebalanceInProgress => ErrorCode::RebalanceInProgress,
        GroupError::InconsistentProtocol => ErrorCode::InconsistentGroupProtocol,
        GroupError::InvalidSessionTimeout { .. } => ErrorCode::InvalidSessionTimeout,
        GroupError::GroupFull { .. } => ErrorCode::GroupFull,
        GroupError::NotEmpty => ErrorCode::GroupNotEmpty,
        GroupError::Dead => ErrorCode::UnknownGroup,
        GroupError::MetadataTooLarge { .. } => ErrorCode::Malformed,
        // Answered as a JoinAnswer by GroupJoin; never a refusal.
        GroupError::MemberIdRequired { .. } => ErrorCode::UnknownMember,
    }
}
