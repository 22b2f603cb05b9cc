//! The group calls that cross the mesh to a group's coordinator (or to every core), and
//! their replies. They are listed in `shard::calls`'s `mesh_calls!`.

use crate::shard::membership::{JoinRequest, TopicPartition};

/// A member's generation, as its join answer gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    pub member_id: String,
    pub generation: i32,
    pub protocol_type: String,
    pub protocol: Option<String>,
    pub leader: String,
    /// Every member's (id, instance id, metadata): for the leader only.
    pub members: Vec<(String, Option<String>, Vec<u8>)>,
}

/// The answer to a join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinAnswer {
    Joined(Joined),
    /// KIP-394 (Kafka's JoinGroup v4+): join again with this member id.
    MemberIdRequired {
        member_id: String,
    },
}

/// A member's assignment for its generation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Synced {
    pub protocol_type: String,
    pub protocol: Option<String>,
    /// Opaque for Kafka groups; the encoded `partitions` for native ones.
    pub assignment: Vec<u8>,
    /// The broker's assignment (native groups).
    pub partitions: Vec<TopicPartition>,
}

/// One member, described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    /// Its metadata for the group's protocol.
    pub metadata: Vec<u8>,
    pub assignment: Vec<u8>,
    pub partitions: Vec<TopicPartition>,
}

/// A group's membership, described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupView {
    pub group: String,
    /// Kafka's name of the state: Empty, PreparingRebalance, CompletingRebalance, Stable.
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub generation: i32,
    pub leader: String,
    pub members: Vec<MemberView>,
}

/// A group's (name, state, protocol type) as a listing gives it.
pub type GroupListing = (String, String, String);

/// To the coordinator: join (or rejoin), waiting for the generation.
#[derive(Debug)]
pub struct GroupJoin {
    pub group: String,
    pub request: JoinRequest,
}

/// To the coordinator: the member's assignment (the leader brings everyone's in a Kafka
/// group), waiting for it.
#[derive(Debug)]
pub struct GroupSync {
    pub group: String,
    pub member_id: String,
    pub generation: i32,
    pub assignments: Vec<(String, Vec<u8>)>,
}

/// To the coordinator.
#[derive(Debug)]
pub struct GroupHeartbeat {
    pub group: String,
    pub member_id: String,
    pub generation: i32,
}

/// To the coordinator: members leave, each named by member id or instance id.
#[derive(Debug)]
pub struct GroupLeave {
    pub group: String,
    pub members: Vec<(String, Option<String>)>,
}

/// To the coordinator.
#[derive(Debug)]
pub struct GroupDescribe {
    pub group: String,
}

/// To every core: the groups it coordinates.
#[derive(Debug)]
pub struct GroupList;

/// To the coordinator: forget an empty group (refused while it has members). True if
/// the coordinator had it.
#[derive(Debug)]
pub struct GroupForget {
    pub group: String,
}

/// To the coordinator: may this member commit offsets at this generation?
#[derive(Debug)]
pub struct GroupCheckCommit {
    pub group: String,
    pub member_id: String,
    pub generation: i32,
}

/// To every core: delete the committed offsets in its shards that match; how many went.
/// `None` matches everything; at least one of `group` and `topic` is given.
#[derive(Debug)]
pub struct OffsetsDelete {
    pub group: Option<String>,
    pub topic: Option<String>,
    pub partitions: Option<Vec<u32>>,
}
