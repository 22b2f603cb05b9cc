//! Why the shard refused a call, in the shard's own terms.
//!
//! Every protocol front-end maps a [`ShardError`] to its wire: the native protocol to its
//! error codes, Kafka to its codes, HermitMQ v1 to its one refusal byte. The shard never
//! speaks a wire's vocabulary, so a new front-end (or a cluster peer) adds a mapping, not a
//! variant. Variants carry what a front-end needs to answer precisely (the range a log
//! holds, the group error Kafka names); the message for humans is the `Display`.
//!
//! A `ShardError` crosses the mesh between cores inside answers, so it owns its data and is
//! `Clone`; a storage error is kept as the structured part its callers use plus its text.

use crate::protocol::record::RecordError;
use crate::shard::membership::GroupError;
use crate::shard::membership::registry::GroupLimitReached;
use crate::shard::placement::NotHere;
use crate::shard::producers::SequenceError;
use crate::storage::StorageError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    // Topics and partitions.
    #[error("unknown topic {topic}")]
    UnknownTopic { topic: String },
    /// A topic of that name was deleted on this core not long ago.
    #[error("topic {topic} was deleted")]
    TopicDeleted { topic: String },
    /// The connection used the topic before it was deleted (`shard::used`).
    #[error(
        "topic {topic} was deleted while this connection used it; it is not created again from this connection (a new connection or CreateTopic may)"
    )]
    DeletedWhileUsed { topic: String },
    #[error("topic {topic} is being deleted")]
    TopicBeingDeleted { topic: String },
    #[error("topic {topic} has {partitions} partitions; {partition} does not exist")]
    UnknownPartition {
        topic: String,
        partition: u32,
        partitions: u32,
    },
    #[error("invalid {what} name: {reason}")]
    InvalidName { what: &'static str, reason: String },
    #[error("{reason}")]
    InvalidConfig { reason: String },
    #[error("topic {topic} exists")]
    TopicExists { topic: String },
    #[error("the broker holds its maximum of {max} topics")]
    TopicLimit { max: usize },

    // Requests the front-end decoded but the shard cannot take.
    #[error("{reason}")]
    Malformed { reason: String },
    #[error("commit metadata of {bytes} bytes is over the limit of {max}")]
    CommitMetadataTooLarge { bytes: usize, max: usize },

    // The log.
    #[error("bad batch: {0}")]
    BadBatch(RecordError),
    #[error("batch header says {header_bytes} bytes but {given_bytes} were given")]
    BatchLength {
        header_bytes: usize,
        given_bytes: usize,
    },
    #[error("offset {requested} is out of range; the log holds {earliest}..{latest}")]
    OffsetOutOfRange {
        requested: u64,
        earliest: u64,
        latest: u64,
    },
    /// A stored batch is damaged; `offset..next_offset` are what a consumer would skip.
    #[error("batch at offsets {offset}..{next_offset} is damaged on disk and is not served")]
    Corrupt { offset: u64, next_offset: u64 },
    #[error("partition fenced ({reason}); restart the broker to recover it")]
    Fenced { reason: String },
    #[error("{reason}")]
    StorageFull { reason: String },
    #[error("{reason}")]
    Storage { reason: String },

    // Consumer groups.
    #[error("group {group}: {error}")]
    Group { group: String, error: GroupError },
    #[error(transparent)]
    GroupLimit(#[from] GroupLimitReached),
    #[error("group {group}: the rebalance did not complete within {bound_ms} ms; join again")]
    RebalanceTimeout { group: String, bound_ms: u64 },
    #[error("group {group} {reason}")]
    UnknownGroup { group: String, reason: &'static str },
    #[error("group {group} has members: {reason}")]
    GroupNotEmpty { group: String, reason: &'static str },

    // Idempotent producers.
    #[error(transparent)]
    Sequence(#[from] SequenceError),

    // Where things are.
    #[error(transparent)]
    NotHere(#[from] NotHere),
    /// This node's replica of a replicated partition does not lead it.
    #[error("this node does not lead {topic}/{partition} (its leader is {leader})")]
    NotLeader {
        topic: String,
        partition: u32,
        /// The leader's node as this replica knows it, or "not known".
        leader: String,
    },
    /// A replicated partition's batch was not acknowledged by a majority in time.
    #[error("{topic}/{partition}: {reason}; the batch may or may not be kept, retry")]
    NotReplicated {
        topic: String,
        partition: u32,
        reason: String,
    },
    /// A change of the cluster's members the controller refused (or a broker alone).
    #[error("{reason}")]
    MembershipRefused { reason: String },
    #[error("{reason}")]
    ShuttingDown { reason: String },
    #[error("{reason}")]
    Internal { reason: String },
}

impl ShardError {
    pub fn internal(reason: impl Into<String>) -> ShardError {
        ShardError::Internal {
            reason: reason.into(),
        }
    }

    pub fn shutting_down(reason: impl Into<String>) -> ShardError {
        ShardError::ShuttingDown {
            reason: reason.into(),
        }
    }

    pub fn invalid_config(reason: impl Into<String>) -> ShardError {
        ShardError::InvalidConfig {
            reason: reason.into(),
        }
    }

    pub fn malformed(reason: impl Into<String>) -> ShardError {
        ShardError::Malformed {
            reason: reason.into(),
        }
    }

    /// A refused group call.
    pub fn group(group: &str, error: GroupError) -> ShardError {
        ShardError::Group {
            group: group.to_string(),
            error,
        }
    }

    /// The offsets a client is told about: the range the log holds for an out-of-range
    /// offset, the damaged batch's offsets for a corrupt one.
    pub fn range(&self) -> Option<(u64, u64)> {
        match *self {
            ShardError::OffsetOutOfRange {
                earliest, latest, ..
            } => Some((earliest, latest)),
            ShardError::Corrupt {
                offset,
                next_offset,
            } => Some((offset, next_offset)),
            _ => None,
        }
    }

    /// True for every "no such topic" answer, whatever the reason.
    pub fn is_unknown_topic(&self) -> bool {
        matches!(
            self,
            ShardError::UnknownTopic { .. }
                | ShardError::TopicDeleted { .. }
                | ShardError::DeletedWhileUsed { .. }
                | ShardError::TopicBeingDeleted { .. }
        )
    }
}

impl From<StorageError> for ShardError {
    fn from(e: StorageError) -> ShardError {
        match e {
            StorageError::BadBatch(record) => ShardError::BadBatch(record),
            StorageError::BatchLength {
                header_bytes,
                given_bytes,
            } => ShardError::BatchLength {
                header_bytes,
                given_bytes,
            },
            StorageError::OffsetOutOfRange {
                requested,
                earliest,
                latest,
            } => ShardError::OffsetOutOfRange {
                requested,
                earliest,
                latest,
            },
            StorageError::Corrupt {
                offset,
                next_offset,
            } => ShardError::Corrupt {
                offset,
                next_offset,
            },
            StorageError::Fenced { reason } => ShardError::Fenced { reason },
            StorageError::Closed => ShardError::shutting_down(e.to_string()),
            StorageError::Config { reason } => ShardError::InvalidConfig { reason },
            _ if kind_of(&e) == Some(std::io::ErrorKind::StorageFull) => ShardError::StorageFull {
                reason: e.to_string(),
            },
            _ => ShardError::Storage {
                reason: e.to_string(),
            },
        }
    }
}

fn kind_of(e: &StorageError) -> Option<std::io::ErrorKind> {
    match e {
        StorageError::WriteFailed { kind } => Some(*kind),
        StorageError::Io { source, .. } => Some(source.kind()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_errors_keep_what_clients_are_told() {
        let out = ShardError::from(StorageError::OffsetOutOfRange {
            requested: 9,
            earliest: 2,
            latest: 5,
        });
        assert_eq!(out.range(), Some((2, 5)));
        assert_eq!(
            out.to_string(),
            "offset 9 is out of range; the log holds 2..5"
        );
        let corrupt = ShardError::from(StorageError::Corrupt {
            offset: 7,
            next_offset: 9,
        });
        assert_eq!(corrupt.range(), Some((7, 9)));
        let full = ShardError::from(StorageError::WriteFailed {
            kind: std::io::ErrorKind::StorageFull,
        });
        assert!(matches!(full, ShardError::StorageFull { .. }), "{full:?}");
        let closed = ShardError::from(StorageError::Closed);
        assert!(
            matches!(closed, ShardError::ShuttingDown { .. }),
            "{closed:?}"
        );
    }
}
