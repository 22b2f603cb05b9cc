//! What this node knows of its cluster, shared by every core: the controller's driver on
//! core 0 writes it after each round, and any core reads it to answer `ClusterStatus` or
//! a metrics scrape. A plain lock around a small value: written a few times a second at
//! most, read once per request that asks for it, never on the produce or fetch path.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::cluster::NodeId;
use crate::cluster::transport::TransportStats;

/// This node's part in the controller group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// A broker started without the cluster flags: a one-node cluster, no controller.
    Alone,
    Follower,
    PreCandidate,
    Candidate,
    Leader,
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Alone,
        Role::Follower,
        Role::PreCandidate,
        Role::Candidate,
        Role::Leader,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Role::Alone => "alone",
            Role::Follower => "follower",
            Role::PreCandidate => "pre_candidate",
            Role::Candidate => "candidate",
            Role::Leader => "leader",
        }
    }

    /// The role's number on the native wire.
    pub fn code(self) -> u8 {
        match self {
            Role::Alone => 0,
            Role::Follower => 1,
            Role::PreCandidate => 2,
            Role::Candidate => 3,
            Role::Leader => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.code() == code)
    }
}

/// A node as this node's applied controller state has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    pub id: NodeId,
    pub client_addr: String,
    pub cluster_addr: String,
    pub cores: u16,
    pub live: bool,
}

/// What `pagurus cluster status` shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// This node (0 for a broker started alone).
    pub node: NodeId,
    pub role: Role,
    /// The controller's term as this node knows it (0 alone).
    pub term: u64,
    /// The controller leader this node knows of.
    pub leader: Option<NodeId>,
    /// The index of the last controller entry applied here.
    pub applied: u64,
    /// The registered nodes, by id.
    pub nodes: Vec<NodeStatus>,
    /// The controller's voters as applied here, by id (empty on a joining node before
    /// the leader's snapshot reached it).
    pub voters: Vec<NodeId>,
}

impl ClusterStatus {
    /// A broker without the cluster flags: itself, alone and leading.
    pub fn alone(node: NodeId, client_addr: String, cores: u16) -> ClusterStatus {
        ClusterStatus {
            node,
            role: Role::Alone,
            term: 0,
            leader: Some(node),
            applied: 0,
            nodes: vec![NodeStatus {
                id: node,
                client_addr,
                cluster_addr: String::new(),
                cores,
                live: true,
            }],
            voters: vec![node],
        }
    }
}

/// The status and the transport's counters, as last written by the driver.
#[derive(Debug, Clone)]
pub struct Snapshot {
    pub status: ClusterStatus,
    pub transport: TransportStats,
    /// Leader changes this node has seen since start.
    pub leader_changes: u64,
}

/// A topic the controller placed: its settings and where each partition's replicas and
/// leader live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedTopic {
    pub settings: std::collections::BTreeMap<String, String>,
    /// `(node, core)` of each partition's leader as the controller last heard, by
    /// partition.
    pub owners: Vec<(NodeId, u16)>,
    /// `(node, core)` of each partition's replicas, the preferred leader first.
    pub replicas: Vec<Vec<(NodeId, u16)>>,
    /// The Raft group of partition 0 when the topic is replicated (partition `p`'s is
    /// `group_base + p`); 0 for a topic of one copy.
    pub group_base: u64,
}

impl PlacedTopic {
    /// Partition `partition`'s Raft group and replicas, when it is replicated.
    pub fn replica_set(&self, partition: u32) -> Option<(u64, &[(NodeId, u16)])> {
        if self.group_base == 0 {
            return None;
        }
        let replicas = self.replicas.get(partition as usize)?;
        Some((self.group_base + u64::from(partition), replicas))
    }
}

/// Every topic the controller placed, by name.
pub type TopicOwners = HashMap<String, PlacedTopic>;

/// Shared between the cores (an `Arc` each).
#[derive(Debug)]
pub struct ClusterView {
    inner: RwLock<Snapshot>,
    /// Read on every produce and fetch of a cluster node (the shard's placement), so kept
    /// apart from the status and replaced whole when the controller's topics change.
    owners: RwLock<Arc<TopicOwners>>,
    /// The registered nodes and their cores, by id: what a group's coordinator is chosen
    /// from (`cluster::table::coordinator_among`), read on every group call.
    members: RwLock<Arc<Vec<(NodeId, u16)>>>,
    /// This node's replicated partitions: their cores and known leaders.
    pub replicas: crate::cluster::replica::directory::ReplicaDirectory,
}

impl ClusterView {
    pub fn new(status: ClusterStatus) -> Arc<ClusterView> {
        Arc::new(ClusterView {
            inner: RwLock::new(Snapshot {
                status,
                transport: TransportStats::default(),
                leader_changes: 0,
            }),
            owners: RwLock::new(Arc::default()),
            members: RwLock::new(Arc::default()),
            replicas: Default::default(),
        })
    }

    /// The leader's place of `topic`'s `partition`, when the controller placed the topic:
    /// for a replicated partition, the leader this node's replica knows, else the one the
    /// controller last heard of.
    pub fn owner(&self, topic: &str, partition: u32) -> Option<(NodeId, u16)> {
        let owners = self
            .owners
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let placed = owners.get(topic)?;
        if let Some((group, replicas)) = placed.replica_set(partition)
            && let Some(leader) = self.replicas.leader_of(group)
            && let Some(place) = replicas.iter().find(|(node, _)| *node == leader.node)
        {
            return Some(*place);
        }
        placed.owners.get(partition as usize).copied()
    }

    /// `topic`'s `partition`'s Raft group and replicas, when it is replicated.
    pub fn replica_set(&self, topic: &str, partition: u32) -> Option<(u64, Vec<(NodeId, u16)>)> {
        let owners = self
            .owners
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let (group, replicas) = owners.get(topic)?.replica_set(partition)?;
        Some((group, replicas.to_vec()))
    }

    /// Whether the controller placed `topic`.
    pub fn has_topic(&self, topic: &str) -> bool {
        let owners = self
            .owners
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        owners.contains_key(topic)
    }

    /// Every topic the controller placed.
    pub fn topics(&self) -> Arc<TopicOwners> {
        Arc::clone(
            &self
                .owners
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    pub fn set_owners(&self, owners: TopicOwners) {
        *self
            .owners
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(owners);
    }

    /// The registered nodes and their cores, by id (empty until the controller's state
    /// names one).
    pub fn members(&self) -> Arc<Vec<(NodeId, u16)>> {
        Arc::clone(
            &self
                .members
                .read()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        )
    }

    pub fn set_members(&self, members: Vec<(NodeId, u16)>) {
        *self
            .members
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = Arc::new(members);
    }

    pub fn snapshot(&self) -> Snapshot {
        // A writer that panicked left a whole value behind (it replaces it in one move).
        self.inner
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    pub fn status(&self) -> ClusterStatus {
        self.snapshot().status
    }

    pub fn publish(&self, snapshot: Snapshot) {
        *self
            .inner
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = snapshot;
    }
}
