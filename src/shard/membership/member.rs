//! A group member and the join request that makes or refreshes one.

use super::assign::TopicPartition;

/// A JoinGroup, from any protocol.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinRequest {
    /// Empty for a member joining for the first time.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub instance_id: Option<String>,
    pub client_id: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocol_type: String,
    /// (protocol name, metadata), in the member's order of preference.
    pub protocols: Vec<(String, Vec<u8>)>,
    /// Subscribed topics of a native member (broker-side assignment); empty for Kafka ones,
    /// whose subscription is inside their opaque metadata.
    pub topics: Vec<String>,
    /// A first join (empty member id, no instance id) gets a member id and must join again
    /// with it (KIP-394: Kafka's JoinGroup v4+).
    pub member_id_required: bool,
}

/// Where a member is in the current rebalance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pending {
    /// Nothing waiting.
    Nothing,
    /// Joined in this rebalance; its join answer waits for the generation.
    Join,
    /// Sent its sync; the answer waits for the assignment.
    Sync,
}

/// One member of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub session_timeout_ms: u64,
    pub rebalance_timeout_ms: u64,
    pub protocols: Vec<(String, Vec<u8>)>,
    pub topics: Vec<String>,
    /// The assignment of the current generation (opaque for Kafka clients).
    pub assignment: Vec<u8>,
    /// The broker-side assignment of a native member.
    pub partitions: Vec<TopicPartition>,
    pub last_seen_ms: u64,
    pub pending: Pending,
}

impl Member {
    pub(super) fn new(id: String, request: JoinRequest, now_ms: u64) -> Member {
        Member {
            id,
            instance_id: request.instance_id,
            client_id: request.client_id,
            session_timeout_ms: request.session_timeout_ms,
            rebalance_timeout_ms: request.rebalance_timeout_ms,
            protocols: request.protocols,
            topics: request.topics,
            assignment: Vec::new(),
            partitions: Vec::new(),
            last_seen_ms: now_ms,
            pending: Pending::Join,
        }
    }

    pub(super) fn refresh(&mut self, request: JoinRequest, now_ms: u64) {
        self.session_timeout_ms = request.session_timeout_ms;
        self.rebalance_timeout_ms = request.rebalance_timeout_ms;
        self.protocols = request.protocols;
        self.topics = request.topics;
        self.last_seen_ms = now_ms;
        self.pending = Pending::Join;
    }

    /// Metadata for `protocol`, if the member supports it.
    pub fn metadata(&self, protocol: &str) -> Option<&[u8]> {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.as_slice())
    }

    pub(super) fn expired(&self, now_ms: u64) -> bool {
        now_ms > self.last_seen_ms.saturating_add(self.session_timeout_ms)
    }
}
