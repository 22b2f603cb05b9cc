//! Consumer groups: one sans-IO state machine for every protocol (`docs/KAFKA.md`, "Groups").
//!
//! Kafka's classic rebalance protocol: members join, the group moves to a new generation
//! once every known member has (re)joined or the rebalance timeout passes, the leader (or,
//! for native clients, the broker) assigns partitions, members sync and heartbeat, and a
//! member that stops heartbeating for its session timeout is removed, which starts the next
//! rebalance. Time is a `now_ms` passed in: nothing here reads a clock, so every timeout is
//! unit-testable. Answers that wait (a join until the rebalance completes, a sync until the
//! leader's assignment) come back as [`Reply`]s from whichever call completes them.

pub mod assign;
mod member;
pub mod registry;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

pub use assign::{Assignor, TopicPartition};
pub use member::{JoinRequest, Member, Pending};
pub use registry::{GroupLimitReached, Groups};

/// Protocol type of native clients, whose partitions the broker assigns.
pub const NATIVE_PROTOCOL_TYPE: &str = "pagurus";

/// The group's state, as Kafka names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    /// Waiting for members to (re)join until `deadline_ms`.
    PreparingRebalance {
        deadline_ms: u64,
    },
    /// A generation is formed; waiting for the leader's assignment.
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// Kafka's name of the state (DescribeGroups, ListGroups).
    pub fn name(&self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance { .. } => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

/// Bounds on what one client can make a group hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupLimits {
    pub members_max: usize,
    pub session_timeout_ms_min: u64,
    pub session_timeout_ms_max: u64,
    /// Longest protocol metadata or assignment of one member.
    pub metadata_bytes_max: usize,
}

impl Default for GroupLimits {
    fn default() -> Self {
        GroupLimits {
            members_max: 1000,
            session_timeout_ms_min: 1_000,
            session_timeout_ms_max: 1_800_000,
            metadata_bytes_max: 1 << 20,
        }
    }
}

/// Why a group call was refused (each front-end maps it to its wire's code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("unknown member {member_id}")]
    UnknownMember { member_id: String },
    #[error("generation {got} is not the group's {current}")]
    IllegalGeneration { got: i32, current: i32 },
    #[error("the group is rebalancing")]
    RebalanceInProgress,
    #[error("protocol type or protocols do not match the group's")]
    InconsistentProtocol,
    #[error("session timeout {ms} ms is outside the broker's bounds")]
    InvalidSessionTimeout { ms: u64 },
    #[error("the group already has {max} members")]
    GroupFull { max: usize },
    #[error("the group is not empty")]
    NotEmpty,
    #[error("the group is dead (deleted)")]
    Dead,
    #[error("metadata of {bytes} bytes is over the limit")]
    MetadataTooLarge { bytes: usize },
    /// Not a refusal: the first step of a join (KIP-394); join again with this id.
    #[error("a member id is required: join again as {member_id}")]
    MemberIdRequired { member_id: String },
}

/// An answer for a member whose join or sync was waiting (or is answered at once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Joined {
        member_id: String,
        generation: i32,
        protocol: Option<String>,
        leader: String,
        /// Every member's (id, instance id, metadata for the chosen protocol): leader only.
        members: Vec<(String, Option<String>, Vec<u8>)>,
    },
    Synced {
        member_id: String,
        assignment: Vec<u8>,
        /// The broker-side assignment (native groups), also in `assignment` as topic names.
        partitions: Vec<TopicPartition>,
    },
    Failed {
        member_id: String,
        error: GroupError,
    },
}

/// One consumer group.
#[derive(Debug, Clone)]
pub struct Group {
    pub id: String,
    state: GroupState,
    generation: i32,
    protocol_type: Option<String>,
    protocol: Option<String>,
    leader: Option<String>,
    members: BTreeMap<String, Member>,
    /// Static members: instance id → current member id.
    instances: BTreeMap<String, String>,
    member_seq: u64,
    /// Member ids handed out by MEMBER_ID_REQUIRED and not yet joined with, each until
    /// its session timeout ends (ms); at most `members_max`.
    pending_ids: BTreeMap<String, u64>,
    /// Part of every member id: which group of this name this is.
    incarnation: u64,
    limits: GroupLimits,
}

mod machine;
