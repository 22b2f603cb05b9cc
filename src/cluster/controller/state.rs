//! The controller's state machine: the cluster's metadata as every node applies it from
//! the committed log, in log order, so every node holds the same copy.
//!
//! - nodes: id, client and cluster addresses, cores, liveness;
//! - members added at run time (`pagurus cluster add-node`): id and cluster address, kept
//!   from before the node first registers until it is removed;
//! - topics: name, replication factor, settings (a string map), partitions;
//! - placement: each partition's replicas as (node, core), the first the preferred leader,
//!   and a leader hint (where the partition's leader was last seen).
//!
//! A [`Command`] is applied deterministically: its outcome (including a refusal, as
//! [`CommandError`]) depends only on the state before it, so every node reaches the same
//! state and the same answer. Placement ([`placement`]) is computed at apply time from the
//! state, not by the proposer, for the same reason. Commands and snapshots have a compact
//! versioned binary form ([`encode`]).

pub mod encode;
pub mod placement;

use std::collections::BTreeMap;

use crate::cluster::NodeId;
use crate::limits::{NameError, validate_name};

pub use placement::{BrokerIdError, Replica};

/// Most partitions a topic may have (the shard's `topics::PARTITIONS_MAX`).
pub const PARTITIONS_MAX: u32 = 4096;
/// Most topics the cluster holds.
pub const TOPICS_MAX: usize = 65_536;
/// Most cores a node may declare (each is a Kafka broker; the broker id keeps 16 bits).
pub const CORES_MAX: u16 = 1024;
/// Longest client or cluster address (`HOST:PORT`).
pub const ADDRESS_LEN_MAX: usize = 255;
/// Most settings a topic has, and the longest key and value.
pub const SETTINGS_MAX: usize = 64;
pub const SETTING_KEY_LEN_MAX: usize = 249;
pub const SETTING_VALUE_LEN_MAX: usize = 4096;

/// A node as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub id: NodeId,
    /// Where clients reach the node (`--advertised-host` and the listener's port).
    pub client_addr: String,
    /// Where peers reach the node (`--cluster-listen`).
    pub cluster_addr: String,
    /// Cores the node serves from; replicas go to cores `0..cores`.
    pub cores: u16,
    /// False once the controller has marked the node down: new replicas avoid it.
    pub live: bool,
}

/// One partition's placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Distinct nodes; the first is the preferred leader.
    pub replicas: Vec<Replica>,
    /// Where the partition's leader was last seen (one of the replicas).
    pub leader_hint: Option<Replica>,
}

/// A topic as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicInfo {
    pub name: String,
    pub replication_factor: u16,
    pub settings: BTreeMap<String, String>,
    pub partitions: Vec<PartitionInfo>,
    /// The Raft group of partition 0 of a replicated topic (replication factor above 1);
    /// partition `p`'s is `group_base + p`. 0 for a topic of one copy, which has no group.
    pub group_base: u64,
}

impl TopicInfo {
    /// The Raft group of `partition`, when the topic is replicated and has it. Groups are
    /// handed out by the controller at creation from a counter that only grows, so a
    /// topic deleted and made again never meets the old groups' stale messages.
    pub fn group_of(&self, partition: u32) -> Option<u64> {
        let exists = (partition as usize) < self.partitions.len();
        (self.group_base != 0 && exists).then(|| self.group_base + u64::from(partition))
    }
}

/// The first partition group: group 0 is the controller's.
pub const FIRST_PARTITION_GROUP: u64 = 1;

/// A change to the metadata: what the controller log's entries hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Adds a node or updates its addresses and cores; the node is live afterwards.
    RegisterNode {
        id: NodeId,
        client_addr: String,
        cluster_addr: String,
        cores: u16,
    },
    SetLiveness {
        node: NodeId,
        live: bool,
    },
    /// Creates a topic, placed over the live nodes by [`placement::place`].
    CreateTopic {
        name: String,
        partitions: u32,
        replication_factor: u16,
        settings: BTreeMap<String, String>,
    },
    DeleteTopic {
        name: String,
    },
    /// Replaces a topic's settings.
    SetTopicSettings {
        name: String,
        settings: BTreeMap<String, String>,
    },
    SetLeaderHint {
        topic: String,
        partition: u32,
        leader: Replica,
    },
    /// Records a member's cluster address before it is made a voter: the node cannot
    /// register itself until it is one (it knows no leader), but its peers must reach it
    /// to make it one. Again for a member updates its address.
    AddMember {
        id: NodeId,
        cluster_addr: String,
    },
    /// Forgets a member removed from the voters, and its registration: placement and
    /// group coordinators leave it. Refused while partitions are placed on it (their only
    /// copy is there: moving partitions is not built).
    RemoveMember {
        id: NodeId,
    },
}

/// Why a command changed nothing. Every node reaches the same refusal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("topic {name} already exists")]
    TopicExists { name: String },
    #[error("topic {name} does not exist")]
    UnknownTopic { name: String },
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition { topic: String, partition: u32 },
    #[error("{node} is not a node of the cluster")]
    UnknownNode { node: NodeId },
    #[error("node id {node} is outside 1..={max}", max = NodeId::MAX.0)]
    InvalidNodeId { node: u16 },
    #[error("a node has 1..={CORES_MAX} cores, not {cores}")]
    InvalidCores { cores: u16 },
    #[error("replication factor {requested} needs that many live nodes; {live_nodes} are live")]
    InvalidReplicationFactor { requested: u16, live_nodes: usize },
    #[error("a topic has 1..={PARTITIONS_MAX} partitions, not {requested}")]
    InvalidPartitions { requested: u32 },
    #[error("topic name refused: {0}")]
    InvalidName(#[from] NameError),
    #[error("{what} is {len} bytes long; at most {max} are allowed")]
    TooLong {
        what: &'static str,
        len: usize,
        max: usize,
    },
    #[error("{count} settings; at most {SETTINGS_MAX} are allowed")]
    TooManySettings { count: usize },
    #[error("the cluster holds {TOPICS_MAX} topics, its limit")]
    TooManyTopics,
    #[error(
        "{node} holds {partitions} partition(s), of topic {example} and maybe others: their only copy is there, so delete those topics first (moving partitions is not built)"
    )]
    NodeHoldsPartitions {
        node: NodeId,
        partitions: usize,
        example: String,
    },
    #[error("cluster address {addr} is {node}'s already")]
    AddressInUse { addr: String, node: NodeId },
    #[error("{leader} is not a replica of {topic} partition {partition}")]
    NotAReplica {
        topic: String,
        partition: u32,
        leader: Replica,
    },
}

/// The cluster's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterState {
    nodes: BTreeMap<NodeId, NodeInfo>,
    topics: BTreeMap<String, TopicInfo>,
    /// Members added at run time, by id: their cluster address.
    members: BTreeMap<NodeId, String>,
    /// The next partition Raft group to hand out ([`TopicInfo::group_of`]).
    next_group: u64,
}

impl Default for ClusterState {
    fn default() -> ClusterState {
        ClusterState {
            nodes: BTreeMap::new(),
            topics: BTreeMap::new(),
            members: BTreeMap::new(),
            next_group: FIRST_PARTITION_GROUP,
        }
    }
}

impl ClusterState {
    pub fn nodes(&self) -> impl Iterator<Item = &NodeInfo> {
        self.nodes.values()
    }

    pub fn node(&self, id: NodeId) -> Option<&NodeInfo> {
        self.nodes.get(&id)
    }

    /// Members added at run time, with their cluster address.
    pub fn members(&self) -> impl Iterator<Item = (NodeId, &str)> {
        self.members.iter().map(|(id, addr)| (*id, addr.as_str()))
    }

    /// Where peers reach `id`: the address it was added with, else the one it registered.
    pub fn cluster_addr(&self, id: NodeId) -> Option<&str> {
        self.members
            .get(&id)
            .map(String::as_str)
            .or_else(|| self.nodes.get(&id).map(|n| n.cluster_addr.as_str()))
    }

    /// Partitions placed on `node` (any replica), and one topic holding them.
    pub fn partitions_on(&self, node: NodeId) -> (usize, Option<&str>) {
        let mut count = 0;
        let mut example = None;
        for topic in self.topics.values() {
            let on = topic
                .partitions
                .iter()
                .filter(|p| p.replicas.iter().any(|r| r.node == node))
                .count();
            if on > 0 {
                count += on;
                example.get_or_insert(topic.name.as_str());
            }
        }
        (count, example)
    }

    pub fn topics(&self) -> impl Iterator<Item = &TopicInfo> {
        self.topics.values()
    }

    pub fn topic(&self, name: &str) -> Option<&TopicInfo> {
        self.topics.get(name)
    }

    /// Applies one committed command. A refused command changes nothing.
    pub fn apply(&mut self, command: Command) -> Result<(), CommandError> {
        self.check(&command)?;
        match command {
            Command::RegisterNode {
                id,
                client_addr,
                cluster_addr,
                cores,
            } => {
                let node = NodeInfo {
                    id,
                    client_addr,
                    cluster_addr,
                    cores,
                    live: true,
                };
                self.nodes.insert(id, node);
            }
            Command::SetLiveness { node, live } => {
                self.nodes.get_mut(&node).expect("checked").live = live;
            }
            Command::CreateTopic {
                name,
                partitions,
                replication_factor,
                settings,
            } => {
                let placed = placement::place(self, partitions, replication_factor)?;
                let group_base = match replication_factor {
                    0 | 1 => 0,
                    _ => {
                        let base = self.next_group;
                        self.next_group += u64::from(partitions);
                        base
                    }
                };
                let topic = TopicInfo {
                    name: name.clone(),
                    replication_factor,
                    settings,
                    partitions: placed,
                    group_base,
                };
                self.topics.insert(name, topic);
            }
            Command::DeleteTopic { name } => {
                self.topics.remove(&name);
            }
            Command::SetTopicSettings { name, settings } => {
                self.topics.get_mut(&name).expect("checked").settings = settings;
            }
            Command::SetLeaderHint {
                topic,
                partition,
                leader,
            } => {
                let topic = self.topics.get_mut(&topic).expect("checked");
                topic.partitions[partition as usize].leader_hint = Some(leader);
            }
            Command::AddMember { id, cluster_addr } => {
                self.members.insert(id, cluster_addr);
            }
            Command::RemoveMember { id } => {
                self.members.remove(&id);
                self.nodes.remove(&id);
            }
        }
        Ok(())
    }

    /// Whether `command` would apply, without applying it (a proposer's early answer; the
    /// applied outcome is what counts).
    pub fn check(&self, command: &Command) -> Result<(), CommandError> {
        match command {
            Command::RegisterNode {
                id,
                client_addr,
                cluster_addr,
                cores,
            } => {
                if !id.is_member() {
                    return Err(CommandError::InvalidNodeId { node: id.0 });
                }
                if *cores == 0 || *cores > CORES_MAX {
                    return Err(CommandError::InvalidCores { cores: *cores });
                }
                check_len("client address", client_addr, ADDRESS_LEN_MAX)?;
                check_len("cluster address", cluster_addr, ADDRESS_LEN_MAX)
            }
            Command::SetLiveness { node, .. } => self.known_node(*node).map(|_| ()),
            Command::CreateTopic {
                name,
                partitions,
                replication_factor,
                settings,
            } => {
                validate_name(name.as_bytes())?;
                if self.topics.contains_key(name) {
                    return Err(CommandError::TopicExists { name: name.clone() });
                }
                if self.topics.len() >= TOPICS_MAX {
                    return Err(CommandError::TooManyTopics);
                }
                if *partitions == 0 || *partitions > PARTITIONS_MAX {
                    return Err(CommandError::InvalidPartitions {
                        requested: *partitions,
                    });
                }
                placement::check_replication_factor(self, *replication_factor)?;
                check_settings(settings)
            }
            Command::DeleteTopic { name } => self.known_topic(name).map(|_| ()),
            Command::SetTopicSettings { name, settings } => {
                self.known_topic(name)?;
                check_settings(settings)
            }
            Command::SetLeaderHint {
                topic,
                partition,
                leader,
            } => {
                let info = self.known_topic(topic)?;
                let unknown = || CommandError::UnknownPartition {
                    topic: topic.clone(),
                    partition: *partition,
                };
                let p = info
                    .partitions
                    .get(*partition as usize)
                    .ok_or_else(unknown)?;
                if !p.replicas.contains(leader) {
                    return Err(CommandError::NotAReplica {
                        topic: topic.clone(),
                        partition: *partition,
                        leader: *leader,
                    });
                }
                Ok(())
            }
            Command::AddMember { id, cluster_addr } => {
                if !id.is_member() {
                    return Err(CommandError::InvalidNodeId { node: id.0 });
                }
                check_len("cluster address", cluster_addr, ADDRESS_LEN_MAX)?;
                self.check_address_free(*id, cluster_addr)
            }
            Command::RemoveMember { id } => self.check_remove_member(*id),
        }
    }

    /// Another member at the same cluster address would be reached instead of `id` (its
    /// hello then names the other node, and `id` is never reached).
    fn check_address_free(&self, id: NodeId, cluster_addr: &str) -> Result<(), CommandError> {
        let ids = self.members.keys().chain(self.nodes.keys());
        match ids
            .filter(|&&other| other != id)
            .find(|&&other| self.cluster_addr(other) == Some(cluster_addr))
        {
            Some(&node) => Err(CommandError::AddressInUse {
                addr: cluster_addr.to_string(),
                node,
            }),
            None => Ok(()),
        }
    }

    fn check_remove_member(&self, id: NodeId) -> Result<(), CommandError> {
        if !self.members.contains_key(&id) && !self.nodes.contains_key(&id) {
            return Err(CommandError::UnknownNode { node: id });
        }
        match self.partitions_on(id) {
            (0, _) => Ok(()),
            (partitions, example) => Err(CommandError::NodeHoldsPartitions {
                node: id,
                partitions,
                example: example.unwrap_or_default().to_string(),
            }),
        }
    }

    fn known_node(&self, node: NodeId) -> Result<&NodeInfo, CommandError> {
        self.nodes
            .get(&node)
            .ok_or(CommandError::UnknownNode { node })
    }

    fn known_topic(&self, name: &str) -> Result<&TopicInfo, CommandError> {
        self.topics
            .get(name)
            .ok_or_else(|| CommandError::UnknownTopic {
                name: name.to_string(),
            })
    }
}

fn check_len(what: &'static str, s: &str, max: usize) -> Result<(), CommandError> {
    if s.len() > max {
        return Err(CommandError::TooLong {
            what,
            len: s.len(),
            max,
        });
    }
    Ok(())
}

fn check_settings(settings: &BTreeMap<String, String>) -> Result<(), CommandError> {
    if settings.len() > SETTINGS_MAX {
        return Err(CommandError::TooManySettings {
            count: settings.len(),
        });
    }
    for (key, value) in settings {
        check_len("setting name", key, SETTING_KEY_LEN_MAX)?;
        check_len("setting value", value, SETTING_VALUE_LEN_MAX)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
