//! The typed mesh: one struct per cross-core call, each with its reply type.
//!
//! [`mesh_calls!`] lists every call once, with its reply. From that one list it makes the
//! [`Call`] and [`Answer`] envelopes and, for each call, the [`MeshCall`] glue that puts it
//! in its envelope and takes its reply out of the answer. A handler ([`Run`]) returns the
//! call's own reply type, and [`dispatch`] wraps it in the matching answer variant, so a
//! call answered with the wrong kind of answer does not compile.

use std::rc::Rc;

use bytes::Bytes;

use crate::metrics::snapshot::CoreSnapshot;
use crate::protocol::native::OffsetSpec;
use crate::shard::coordinator::calls::*;
use crate::shard::topics::TopicMeta;
use crate::shard::{Shard, ShardError};
use crate::storage::CompactionOutcome;

/// A call that can cross the mesh: what it answers with, and how it travels.
pub trait MeshCall: Sized {
    type Reply;
    fn into_call(self) -> Call;
    /// The call back out of its envelope, as a send that failed returns it; `None` for an
    /// envelope of another call.
    fn from_call(call: Call) -> Option<Self>;
    /// The reply in an answer to this call. The answer's variant is made from the call's
    /// own by [`dispatch`]; another variant cannot happen, and is an internal error.
    fn reply(answer: Answer) -> Result<Self::Reply, ShardError>;
}

/// Runs a call on the core that owns its data.
#[allow(async_fn_in_trait)] // used inside the crate only, on one thread
pub trait Run: MeshCall {
    async fn run(self, shard: &Rc<Shard>) -> Result<Self::Reply, ShardError>;
}

macro_rules! mesh_calls {
    ($($(#[$doc:meta])* $name:ident -> $reply:ty;)+) => {
        /// A request for another core: one variant per call struct.
        #[derive(Debug)]
        pub enum Call {
            $($name($name),)+
        }

        /// The answer to a [`Call`]: the same variant, carrying the call's reply.
        #[derive(Debug)]
        pub enum Answer {
            $($name(Result<$reply, ShardError>),)+
        }

        $(
            impl MeshCall for $name {
                type Reply = $reply;
                fn into_call(self) -> Call {
                    Call::$name(self)
                }
                fn from_call(call: Call) -> Option<Self> {
                    match call {
                        Call::$name(call) => Some(call),
                        #[allow(unreachable_patterns)]
                        _ => None,
                    }
                }
                fn reply(answer: Answer) -> Result<$reply, ShardError> {
                    match answer {
                        Answer::$name(reply) => reply,
                        #[allow(unreachable_patterns)]
                        other => Err(mismatch(stringify!($name), &other)),
                    }
                }
            }
        )+

        /// Runs a call that arrived over the mesh; its answer is the same variant.
        pub async fn dispatch(shard: &Rc<Shard>, call: Call) -> Answer {
            match call {
                $(Call::$name(call) => Answer::$name(call.run(shard).await),)+
            }
        }

        impl Call {
            /// The call's name, for logs.
            pub fn name(&self) -> &'static str {
                match self {
                    $(Call::$name(_) => stringify!($name),)+
                }
            }
        }
    };
}

fn mismatch(call: &str, answer: &Answer) -> ShardError {
    tracing::error!(call, ?answer, "mesh answer of another kind than its call");
    ShardError::internal(format!("{call} answered with {answer:?}"))
}

/// The reply to a produce: the request's offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Produced {
    pub base_offset: u64,
    pub next_offset: u64,
}

/// Where a partition's log starts and ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionState {
    pub log_start_offset: u64,
    pub high_watermark: u64,
    /// Bytes of its segment files.
    pub size_bytes: u64,
}

/// Where a fetch's bytes are: a range of a segment file, with the batches' index entries
/// (offsets, positions, lengths, CRCs, formats).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendPlan {
    pub wal_path: std::path::PathBuf,
    /// (device, inode) the path must still name; a descriptor of another file is stale.
    pub file_id: crate::storage::segment::FileId,
    pub position: u64,
    pub length: u64,
    pub batches: Vec<crate::storage::index::IndexEntry>,
    /// Records in the range.
    pub records: u64,
    /// Offset after the last batch in the range (the requested offset if it is empty).
    pub next_offset: u64,
    pub high_watermark: u64,
    pub log_start_offset: u64,
    /// The range is in the active segment, whose pages are most likely cached.
    pub hot: bool,
}

/// A committed offset as (group, topic, partition, offset, metadata string).
pub type GroupOffset = (String, String, u32, u64, String);

/// Append batches: validated `(crc, batch)` pairs, as in a native produce request.
#[derive(Debug)]
pub struct Produce {
    pub topic: String,
    pub partition: u32,
    pub count: u32,
    pub batches: Bytes,
    pub source: crate::shard::data::BatchSource,
    /// For an idempotent Kafka producer: each batch's producer id, epoch and sequences
    /// (`shard::idempotence`); empty otherwise.
    pub producers: Vec<crate::shard::idempotence::IdempotentBatch>,
}

/// Plan a read, waiting up to `max_wait_ms` for data if there is none yet.
#[derive(Debug)]
pub struct Fetch {
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
    pub max_bytes: u32,
    pub max_wait_ms: u32,
}

#[derive(Debug)]
pub struct ListOffsets {
    pub topic: String,
    pub partition: u32,
    pub spec: OffsetSpec,
}

/// The states of several partitions one core owns, in one round trip; `None` for one
/// that core does not have (deleted meanwhile).
#[derive(Debug)]
pub struct PartitionStates {
    pub partitions: Vec<(String, u32)>,
}

/// To the controller (core 0).
#[derive(Debug)]
pub struct CreateTopic {
    pub meta: TopicMeta,
    /// Copies of each partition (1 on a broker alone; a cluster places them).
    pub replication_factor: u16,
    pub if_not_exists: bool,
}

/// To the controller (core 0).
#[derive(Debug)]
pub struct DeleteTopic {
    pub name: String,
}

/// From the controller to every core: open the partitions of a new topic you own.
#[derive(Debug)]
pub struct OpenPartitions {
    pub meta: TopicMeta,
}

/// To the controller (core 0): new settings for an existing topic, whose partition count
/// stays (only the settings that take effect on open partitions may change).
#[derive(Debug)]
pub struct AlterTopic {
    pub meta: TopicMeta,
}

/// To the controller (core 0): change the cluster's members (`shard::members`).
#[derive(Debug)]
pub struct ChangeMember {
    pub change: crate::shard::members::MemberChange,
}

/// To the controller (core 0): grow a topic to `partitions` partitions.
#[derive(Debug)]
pub struct GrowTopic {
    pub name: String,
    pub partitions: u32,
    pub validate_only: bool,
}

/// To the owner: move the partition's log start to `offset` (`None`: the high watermark).
#[derive(Debug)]
pub struct DeleteRecords {
    pub topic: String,
    pub partition: u32,
    pub offset: Option<u64>,
}

/// From the controller to every core, once all opened theirs: the topic exists.
#[derive(Debug)]
pub struct PublishTopic {
    pub meta: TopicMeta,
}

/// From the controller to every core: forget a topic (published or only opened), close
/// its partitions.
#[derive(Debug)]
pub struct DropTopic {
    pub name: String,
}

/// From the controller to every core, deleting a topic: forget the topic's committed
/// offsets in the offsets shards this core owns (durably). Replies how many.
#[derive(Debug)]
pub struct ForgetOffsets {
    pub topic: String,
}

/// To the owner of the key's offsets shard.
#[derive(Debug)]
pub struct CommitOffset {
    pub key: Vec<u8>,
    pub offset: u64,
    /// Kafka's commit metadata ("" for none).
    pub metadata: String,
}

/// To the owner of the key's offsets shard.
#[derive(Debug)]
pub struct FetchOffset {
    pub key: Vec<u8>,
}

/// To every core: the committed offsets of one group (or all) in its shards.
#[derive(Debug)]
pub struct GroupOffsets {
    pub group: Option<String>,
}

/// To the owner: run a compaction pass on the partition now.
#[derive(Debug)]
pub struct Compact {
    pub topic: String,
    pub partition: u32,
}

/// To every core: its metrics, for a scrape.
#[derive(Debug)]
pub struct MetricsSnapshot;

/// To the core that owns a connection's partition: serve this client connection
/// (`shard::handoff`). It carries a descriptor of the socket, every byte already read
/// from it (from its first byte on, so the owner reads the handshake again and then any
/// bytes the client pipelined behind it), and its slot under the connection limit. Every
/// part closes or gives itself back when dropped, wherever the call is lost.
#[derive(Debug)]
pub struct HandOff {
    pub socket: std::os::fd::OwnedFd,
    pub read: Bytes,
    pub slot: crate::limits::ConnectionSlot,
    /// Which of the broker's listeners accepted it (its index in the server's list).
    pub listener: usize,
}

/// The owner's answer to a [`HandOff`].
#[derive(Debug)]
pub enum Adoption {
    /// The owner serves the connection now.
    Adopted,
    /// The owner cannot serve it (stopping, or not serving yet): the connection comes back
    /// whole and the sending core serves it where it is.
    Refused {
        connection: HandOff,
        reason: &'static str,
    },
}

mesh_calls! {
    Produce -> Produced;
    Fetch -> SendPlan;
    ListOffsets -> u64;
    PartitionStates -> Vec<Option<PartitionState>>;
    CreateTopic -> ();
    DeleteTopic -> ();
    AlterTopic -> ();
    GrowTopic -> ();
    ChangeMember -> crate::shard::members::MemberChanged;
    DeleteRecords -> u64;
    OpenPartitions -> ();
    PublishTopic -> ();
    DropTopic -> ();
    ForgetOffsets -> usize;
    CommitOffset -> ();
    FetchOffset -> Option<(u64, String)>;
    GroupOffsets -> Vec<GroupOffset>;
    Compact -> CompactionOutcome;
    MetricsSnapshot -> Box<CoreSnapshot>;
    HandOff -> Adoption;
    // Consumer groups (shard::coordinator).
    GroupJoin -> JoinAnswer;
    GroupSync -> Synced;
    GroupHeartbeat -> ();
    GroupLeave -> Vec<Result<(), ShardError>>;
    GroupDescribe -> Option<GroupView>;
    GroupList -> Vec<GroupListing>;
    GroupForget -> bool;
    GroupCheckCommit -> ();
    OffsetsDelete -> u64;
}
