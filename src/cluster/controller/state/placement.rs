//! Where a new topic's replicas go, and the Kafka broker id of each (node, core).
//!
//! The rule, applied partition by partition over the live nodes (a deterministic function
//! of the state, so every node computes the same placement):
//! 1. the leader (first replica) goes to the live node leading the fewest partitions, then
//!    holding the fewest replicas, then the lowest id: 12 partitions on 3 empty nodes are
//!    led 4/4/4, and a new topic fills in where earlier ones left nodes light;
//! 2. the other replicas go to the live nodes holding the fewest replicas, ties broken by
//!    distance after the leader in id order, so replica sets rotate;
//! 3. within a node, a replica goes to the core holding the fewest (for a leader: leading
//!    the fewest, then holding the fewest), then the lowest core.
//!
//! A replication factor above the live node count is refused
//! ([`CommandError::InvalidReplicationFactor`], Kafka's INVALID_REPLICATION_FACTOR): two
//! replicas never share a node.

use std::collections::BTreeMap;
use std::fmt;

use super::{ClusterState, CommandError, NodeInfo, PartitionInfo};
use crate::cluster::NodeId;

/// One replica's place: a core of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Replica {
    pub node: NodeId,
    pub core: u16,
}

impl fmt::Display for Replica {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} core {}", self.node, self.core)
    }
}

/// Why a (node, core) has no Kafka broker id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokerIdError {
    #[error("node id {node} is above {max}: its broker ids would not be positive i32s", max = NodeId::MAX.0)]
    NodeTooLarge { node: u16 },
    #[error("{id} is not a broker id of any (node, core)")]
    NotABrokerId { id: i32 },
}

impl Replica {
    /// Kafka's broker id of this (node, core): `node << 16 | core`, the formula of the
    /// shard's placement table, so a broker started alone (node 0) keeps ids 0, 1, 2, ...
    /// Node ids go up to 0x7fff so the id is a positive i32; every u16 core fits.
    pub fn broker_id(self) -> Result<i32, BrokerIdError> {
        if self.node > NodeId::MAX {
            return Err(BrokerIdError::NodeTooLarge { node: self.node.0 });
        }
        Ok((i32::from(self.node.0) << 16) | i32::from(self.core))
    }

    /// The (node, core) a broker id names.
    pub fn from_broker_id(id: i32) -> Result<Replica, BrokerIdError> {
        let raw = u32::try_from(id).map_err(|_| BrokerIdError::NotABrokerId { id })?;
        Ok(Replica {
            node: NodeId((raw >> 16) as u16),
            core: (raw & 0xffff) as u16,
        })
    }
}

/// Refuses a replication factor of 0 or above the live node count.
pub(super) fn check_replication_factor(
    state: &ClusterState,
    requested: u16,
) -> Result<(), CommandError> {
    let live_nodes = state.nodes.values().filter(|n| n.live).count();
    if requested == 0 || usize::from(requested) > live_nodes {
        return Err(CommandError::InvalidReplicationFactor {
            requested,
            live_nodes,
        });
    }
    Ok(())
}

/// How many partitions a node or core leads and holds.
#[derive(Debug, Clone, Copy, Default)]
struct Load {
    leaders: u32,
    replicas: u32,
}

impl Load {
    fn add(&mut self, leader: bool) {
        self.replicas += 1;
        self.leaders += u32::from(leader);
    }
}

/// Loads of every live node and each of its cores, from the topics already placed.
struct Loads<'a> {
    live: Vec<&'a NodeInfo>,
    nodes: BTreeMap<NodeId, Load>,
    cores: BTreeMap<Replica, Load>,
}

impl<'a> Loads<'a> {
    fn of(state: &'a ClusterState) -> Loads<'a> {
        let live: Vec<&NodeInfo> = state.nodes.values().filter(|n| n.live).collect();
        let mut loads = Loads {
            nodes: live.iter().map(|n| (n.id, Load::default())).collect(),
            cores: BTreeMap::new(),
            live,
        };
        for p in state.topics.values().flat_map(|t| &t.partitions) {
            for (i, r) in p.replicas.iter().enumerate() {
                loads.add(*r, i == 0);
            }
        }
        loads
    }

    fn add(&mut self, replica: Replica, leader: bool) {
        if let Some(node) = self.nodes.get_mut(&replica.node) {
            node.add(leader);
            self.cores.entry(replica).or_default().add(leader);
        }
    }

    fn node(&self, id: NodeId) -> Load {
        self.nodes.get(&id).copied().unwrap_or_default()
    }

    /// The core of `node` for a new replica (rule 3).
    fn core(&self, node: &NodeInfo, leader: bool) -> Replica {
        let load = |core| {
            let l = self
                .cores
                .get(&Replica {
                    node: node.id,
                    core,
                })
                .copied()
                .unwrap_or_default();
            (if leader { l.leaders } else { 0 }, l.replicas, core)
        };
        let core = (0..node.cores).min_by_key(|c| load(*c)).unwrap_or(0);
        Replica {
            node: node.id,
            core,
        }
    }

    /// One partition's replicas (rules 1 and 2).
    fn place_one(&mut self, replication_factor: usize) -> Vec<Replica> {
        let n = self.live.len();
        let leader_at = (0..n)
            .min_by_key(|&i| {
                let l = self.node(self.live[i].id);
                (l.leaders, l.replicas, i)
            })
            .expect("the replication factor check makes sure a node is live");
        let mut followers: Vec<usize> = (0..n).filter(|&i| i != leader_at).collect();
        followers.sort_by_key(|&i| (self.node(self.live[i].id).replicas, (i + n - leader_at) % n));
        let chosen = std::iter::once(leader_at).chain(followers);
        let replicas: Vec<Replica> = chosen
            .take(replication_factor)
            .enumerate()
            .map(|(k, i)| self.core(self.live[i], k == 0))
            .collect();
        for (k, r) in replicas.iter().enumerate() {
            self.add(*r, k == 0);
        }
        replicas
    }
}

/// Places `partitions` new partitions of `replication_factor` replicas over the live nodes.
pub(super) fn place(
    state: &ClusterState,
    partitions: u32,
    replication_factor: u16,
) -> Result<Vec<PartitionInfo>, CommandError> {
    check_replication_factor(state, replication_factor)?;
    let mut loads = Loads::of(state);
    Ok((0..partitions)
        .map(|_| {
            let replicas = loads.place_one(usize::from(replication_factor));
            PartitionInfo {
                leader_hint: replicas.first().copied(),
                replicas,
            }
        })
        .collect())
}
