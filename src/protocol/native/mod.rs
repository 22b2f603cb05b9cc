//! The native protocol: length-framed, versioned, pipelined. Byte layout in
//! `docs/PROTOCOL.md`; this module is the single source of truth for it, shared by the
//! broker and the client.
//!
//! Sans-IO: [`check_frame`] says whether a buffer holds a whole frame, and how long it is
//! (or that more bytes are needed); the `decode`/`encode` functions turn frame bodies into
//! typed messages and back without touching a socket. Decoding borrows from the buffer; a
//! produce request's batches are validated (magic, sizes) during decoding and then iterated
//! without further checks or copies.
//!
//! This file holds what both directions share (preface, frames, headers, error codes);
//! [`request`] and [`response`] hold the messages.

use crate::limits::Limits;
use crate::protocol::record::{self, RecordError};
use crate::protocol::wire::{Malformed, Put, Reader};

/// The first four bytes a native client sends; `P` (0x50) keeps them apart from the
/// HermitMQ role bytes (0x01-0x03) and the Kafka-reserved 0x00.
pub const PREFACE_MAGIC: [u8; 4] = *b"PGRS";
/// Magic, then the version (u16), then flags (u16, zero).
pub const PREFACE_LEN: usize = 8;
/// Protocol version this build speaks.
pub const VERSION: u16 = 1;
/// Every frame starts with its length (u32, big-endian), not counting these 4 bytes.
pub const FRAME_LEN_BYTES: usize = 4;
/// api (u16), version (u16), correlation id (u32).
pub const REQUEST_HEADER_LEN: usize = 8;
/// correlation id (u32), error code (u16).
pub const RESPONSE_HEADER_LEN: usize = 6;

/// Encodes the preface a client sends (and the broker answers with).
pub fn preface(version: u16) -> [u8; PREFACE_LEN] {
    let mut out = [0u8; PREFACE_LEN];
    out[..4].copy_from_slice(&PREFACE_MAGIC);
    out[4..6].copy_from_slice(&version.to_be_bytes());
    out
}

/// Checks a preface; returns the peer's version.
pub fn check_preface(buf: &[u8; PREFACE_LEN]) -> Result<u16, Malformed> {
    if buf[..4] != PREFACE_MAGIC {
        return Err(Malformed {
            what: "preface magic",
        });
    }
    Ok(u16::from_be_bytes([buf[4], buf[5]]))
}

/// Outcome of looking for a frame at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameCheck {
    /// A whole frame of this many bytes (length prefix included) is there.
    Complete { frame_bytes: usize },
    /// More bytes are needed.
    Incomplete { needed: usize },
    /// The frame announces `body_bytes`, more than the broker accepts. Framing is kept: the
    /// reader may skip `body_bytes` after the prefix and answer with an error.
    TooLarge { body_bytes: u64 },
}

/// Looks for one frame at the front of `buf`.
pub fn check_frame(buf: &[u8], frame_body_max_bytes: usize) -> FrameCheck {
    if buf.len() < FRAME_LEN_BYTES {
        return FrameCheck::Incomplete {
            needed: FRAME_LEN_BYTES - buf.len(),
        };
    }
    let body = u32::from_be_bytes(buf[..4].try_into().expect("4")) as usize;
    if body > frame_body_max_bytes {
        return FrameCheck::TooLarge {
            body_bytes: body as u64,
        };
    }
    let frame_bytes = FRAME_LEN_BYTES + body;
    if buf.len() < frame_bytes {
        return FrameCheck::Incomplete {
            needed: frame_bytes - buf.len(),
        };
    }
    FrameCheck::Complete { frame_bytes }
}

/// Largest request body the broker accepts: one batch at the limits plus room for headers.
pub fn frame_body_max_bytes(limits: &Limits) -> usize {
    let batch = record::HEADER_LEN as u64 + limits.max_key_bytes + limits.max_payload_bytes;
    usize::try_from(batch + 64 * 1024).unwrap_or(usize::MAX)
}

macro_rules! code_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:expr),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum $name { $($(#[$vmeta])* $variant = $value),+ }

        impl $name {
            pub fn from_u16(v: u16) -> Option<$name> {
                match v { $($value => Some($name::$variant),)+ _ => None }
            }
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant),)+ }
            }
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
        }
    };
}

code_enum!(
    /// Request types.
    ApiKey {
        Produce = 1,
        Fetch = 2,
        ListOffsets = 3,
        CreateTopic = 4,
        DeleteTopic = 5,
        Metadata = 6,
        CommitOffset = 7,
        FetchOffset = 8,
        ListGroups = 9,
        DescribeGroup = 10,
        Compact = 11,
        JoinGroup = 12,
        Heartbeat = 13,
        LeaveGroup = 14,
        CommitGroupOffset = 15,
        DeleteGroup = 16,
        ClusterStatus = 17,
        Authenticate = 18,
        ListUsers = 19,
        SetUser = 20,
        DeleteUser = 21,
        ListAcls = 22,
        ChangeAcl = 23,
        FindCoordinator = 24,
        ChangeMember = 25,
    }
);

code_enum!(
    /// Every error the broker answers with. The connection stays open for all of them.
    ErrorCode {
        None = 0,
        UnsupportedApi = 1,
        UnsupportedVersion = 2,
        Malformed = 3,
        FrameTooLarge = 4,
        BadMagic = 5,
        CrcMismatch = 6,
        KeyTooLarge = 7,
        PayloadTooLarge = 8,
        InvalidName = 9,
        UnknownTopic = 10,
        UnknownPartition = 11,
        /// Body: earliest (u64), latest (u64).
        OffsetOutOfRange = 12,
        TopicExists = 13,
        TopicLimit = 14,
        InvalidConfig = 15,
        StorageFull = 16,
        StorageError = 17,
        Fenced = 18,
        CorruptData = 19,
        ShuttingDown = 20,
        UnknownGroup = 21,
        Internal = 22,
        /// The group has committed no offset for this topic and partition.
        NoCommittedOffset = 23,
        /// Kafka produce only: an idempotent producer's batch is not the next in sequence.
        OutOfOrderSequence = 24,
        /// Kafka produce only: an idempotent producer's epoch is older than the current one.
        ProducerFenced = 25,
        /// Kafka produce only: the partition remembers as many producers as it may.
        ProducerLimit = 26,
        /// The group is rebalancing: join again (with the same member id).
        RebalanceInProgress = 27,
        /// The group does not have this member (its session expired, or it left): join
        /// again with no member id.
        UnknownMember = 28,
        /// The member's generation is not the group's: join again.
        IllegalGeneration = 29,
        /// The group has members: it cannot be deleted, nor its offsets set from outside.
        GroupNotEmpty = 30,
        /// The member's protocol type or assignors match no other member's.
        InconsistentGroupProtocol = 31,
        /// The session timeout is outside the broker's bounds.
        InvalidSessionTimeout = 32,
        /// The group is at its member limit, or its coordinator at its group limit.
        GroupFull = 33,
        /// The partition, group or controller is served by another node of the cluster:
        /// refresh the metadata and ask there.
        NotHere = 34,
        /// The login failed (unknown user and wrong password alike), or the request came
        /// before it: the connection closes.
        AuthenticationFailed = 35,
        /// The ACLs do not let this principal do this on the topic.
        TopicAuthorizationFailed = 36,
        /// ... on the group.
        GroupAuthorizationFailed = 37,
        /// ... on the cluster.
        ClusterAuthorizationFailed = 38,
        /// An ACL api on a broker without `--authorizer acl`: there are no ACLs to list or change.
        SecurityDisabled = 39,
        /// A change of the cluster's members the controller refused (the message says why).
        MembershipRefused = 40,
        /// A replicated partition's batch was not held by a majority of its replicas in
        /// time (no quorum, or leadership lost meanwhile): it may or may not be kept.
        /// Retry; refresh the metadata first when the leader may have moved.
        NotReplicated = 41,
    }
);

impl From<&RecordError> for ErrorCode {
    fn from(e: &RecordError) -> Self {
        match e {
            RecordError::Incomplete { .. } | RecordError::BadParts { .. } => ErrorCode::Malformed,
            RecordError::BadMagic { .. } => ErrorCode::BadMagic,
            RecordError::KeyTooLarge { .. } => ErrorCode::KeyTooLarge,
            RecordError::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            RecordError::CrcMismatch { .. } => ErrorCode::CrcMismatch,
        }
    }
}

/// Why a request could not be decoded; each maps to an [`ErrorCode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown api {0}")]
    UnsupportedApi(u16),
    #[error("unsupported version {version} of api {api}")]
    UnsupportedVersion { api: u16, version: u16 },
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("bad batch: {0}")]
    Batch(#[from] RecordError),
}

impl DecodeError {
    pub fn code(&self) -> ErrorCode {
        match self {
            DecodeError::UnsupportedApi(_) => ErrorCode::UnsupportedApi,
            DecodeError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            DecodeError::Malformed(_) => ErrorCode::Malformed,
            DecodeError::Batch(e) => e.into(),
        }
    }
}

/// The fixed part of every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub api: u16,
    pub version: u16,
    pub correlation_id: u32,
}

impl RequestHeader {
    pub fn decode(body: &[u8]) -> Result<(RequestHeader, &[u8]), Malformed> {
        let mut r = Reader::new(body);
        let header = RequestHeader {
            api: r.u16("request header")?,
            version: r.u16("request header")?,
            correlation_id: r.u32("request header")?,
        };
        Ok((header, r.rest()))
    }
}

/// Where a fetch or list-offsets request points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    Timestamp(u64),
}

/// Topic settings a client may set at creation; zeros mean "the broker's default".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicSettings {
    pub partitions: u32,
    /// 0 default, 1 always, 2 never, 3 interval (`fsync_interval_ms`).
    pub fsync: u8,
    pub fsync_interval_ms: u32,
    pub segment_bytes: u64,
    /// 0: no size limit.
    pub retention_bytes: u64,
    /// 0: no age limit.
    pub retention_ms: u64,
    /// 0 delete, 1 compact.
    pub cleanup: u8,
}

impl TopicSettings {
    /// Wire layout (create-topic requests and metadata responses): `[u32 partitions]
    /// [u8 fsync][u32 fsync interval ms][u64 segment bytes][u64 retention bytes]
    /// [u64 retention ms][u8 cleanup]`.
    pub fn put(&self, out: &mut Vec<u8>) {
        out.put_u32(self.partitions);
        out.put_u8(self.fsync);
        out.put_u32(self.fsync_interval_ms);
        out.put_u64(self.segment_bytes);
        out.put_u64(self.retention_bytes);
        out.put_u64(self.retention_ms);
        out.put_u8(self.cleanup);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<TopicSettings, Malformed> {
        Ok(TopicSettings {
            partitions: r.u32("partitions")?,
            fsync: r.u8("fsync")?,
            fsync_interval_ms: r.u32("fsync interval")?,
            segment_bytes: r.u64("segment bytes")?,
            retention_bytes: r.u64("retention bytes")?,
            retention_ms: r.u64("retention ms")?,
            cleanup: r.u8("cleanup")?,
        })
    }
}

/// Reserves the length prefix of a frame; returns where the frame starts.
pub fn begin_frame(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.put_u32(0);
    start
}

/// Fills in the length prefix reserved by [`begin_frame`].
pub fn end_frame(out: &mut [u8], start: usize) {
    let body = u32::try_from(out.len() - start - FRAME_LEN_BYTES).expect("frames are under 4 GiB");
    out[start..start + FRAME_LEN_BYTES].copy_from_slice(&body.to_be_bytes());
}

/// Starts a response frame: length placeholder, correlation id, error code. The caller
/// appends the body and calls [`end_frame`].
pub fn begin_response(out: &mut Vec<u8>, correlation_id: u32, error: ErrorCode) -> usize {
    let start = begin_frame(out);
    out.put_u32(correlation_id);
    out.put_u16(error as u16);
    start
}

/// A whole response with an empty body.
pub fn encode_empty_response(out: &mut Vec<u8>, correlation_id: u32, error: ErrorCode) {
    let start = begin_response(out, correlation_id, error);
    end_frame(out, start);
}

pub mod admin;
pub mod auth;
pub mod cluster;
pub mod groups;
pub mod request;
pub mod response;
#[cfg(test)]
mod tests;

pub use admin::*;
pub use auth::*;
pub use cluster::*;
pub use groups::*;
pub use request::*;
pub use response::*;
