//! Placement: where each partition, group and the controller lives, as a `(node, core)`
//! [`Place`], and how a client reaches a place (address, Kafka broker id).
//!
//! Callers never compute a core: they ask the [`Placement`] the shard holds
//! (`shard.placement()`) and route on its answer through `Shard::hop`, the one function
//! that turns a place into "run here" or "this core of the node, over the mesh". A place on
//! another node is not served here: the shard answers [`NotHere`]
//! (`ErrorCode::NotHere`), and each front-end maps it (Kafka: NOT_LEADER_OR_FOLLOWER, or
//! NOT_COORDINATOR for a group call).
//!
//! A node started today is a one-node cluster, and its table is [`OneNode`]: the rules the
//! broker always used, `fnv1a32("{topic}/{partition}") % cores` for a partition,
//! `fnv1a32(group) % cores` for a group's coordinator, offsets shard `s` on core
//! `s % cores`, the controller on core 0, and core `c` reached at its shard port. The
//! cluster will answer the same questions from its metadata log instead, replacing this
//! table, with no caller changed.

use std::fmt;

use crate::config::BrokerConfig;
use crate::protocol::routing::{fnv1a32, fnv1a32_extend};

/// A node of the cluster (`--node-id`, later); a broker started alone is node 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u16);

impl NodeId {
    /// The highest node id whose cores' Kafka broker ids fit a positive i32.
    pub const MAX: NodeId = NodeId(0x7fff);
}

/// A core of one node: its executor and its peer number in that node's mesh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CoreId(pub u16);

impl CoreId {
    /// The core's index in its node's mesh.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Where something is served: one core of one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub node: NodeId,
    pub core: CoreId,
}

impl Place {
    /// Kafka's broker id of this place: `node << 16 | core`, so that node 0's cores are
    /// brokers 0, 1, 2, ... as they always were, and every other node has ids of its own.
    pub fn broker_id(self) -> i32 {
        (i32::from(self.node.0) << 16) | i32::from(self.core.0)
    }

    /// The place a Kafka broker id names, if the id is one [`Place::broker_id`] makes.
    pub fn from_broker_id(id: i32) -> Option<Place> {
        let id = u32::try_from(id).ok()?;
        Some(Place {
            node: NodeId(u16::try_from(id >> 16).ok()?),
            core: CoreId((id & 0xffff) as u16),
        })
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} core {}", self.node.0, self.core.0)
    }
}

/// How a client reaches a place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Address {
    /// The node's host; `None` for this node, which advertises the address each client
    /// reached it at (a broker behind NAT or on 0.0.0.0 has no better name for itself).
    pub host: Option<String>,
    /// The port that reaches exactly this place (its shard port), if it has one.
    pub shard_port: Option<u16>,
    /// The node's main port, which reaches any of its cores.
    pub main_port: u16,
}

impl Address {
    /// The port to advertise for this place: its own, else the node's main port.
    pub fn port(&self) -> u16 {
        self.shard_port.unwrap_or(self.main_port)
    }
}

/// A request for something another node serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("served by {place}, not by this node")]
pub struct NotHere {
    pub place: Place,
}

/// The placement table a shard holds: every answer as a [`Place`], never a core index.
/// A replicated partition's Raft group and where its replicas are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSet {
    pub group: u64,
    pub places: Vec<Place>,
}

pub trait Placement {
    /// The node this broker process is.
    fn node(&self) -> NodeId;

    /// Every place that serves clients (every node's every core), in order.
    fn places(&self) -> Vec<Place>;

    /// The leader of a partition: the place that appends to it and serves it.
    fn owner(&self, topic: &str, partition: u32) -> Place;

    /// Every replica of a partition, the leader first.
    fn replicas(&self, topic: &str, partition: u32) -> Vec<Place>;

    /// A replicated partition's Raft group and replicas (the preferred leader first);
    /// `None` for a partition of one copy.
    fn replica_set(&self, _topic: &str, _partition: u32) -> Option<ReplicaSet> {
        None
    }

    /// The coordinator of a consumer group.
    fn coordinator(&self, group: &str) -> Place;

    /// Where offsets shard `shard` (`offsets::shard_of`) lives.
    fn offsets_owner(&self, shard: usize) -> Place;

    /// The controller: the place that creates, alters and deletes topics.
    fn controller(&self) -> Place;

    /// How a client reaches `place`; `None` for a place that does not exist.
    fn address(&self, place: Place) -> Option<Address>;

    /// The place of this node that a port of this node reaches exactly (a shard port);
    /// `None` for the main port, which reaches any core.
    fn listening_on(&self, port: u16) -> Option<Place>;

    /// The place a Kafka broker id names, if it exists.
    fn place_of_broker(&self, id: i32) -> Option<Place> {
        Place::from_broker_id(id).filter(|&place| self.address(place).is_some())
    }
}

/// The placement of a broker that is the only node: everything hashed over its cores.
#[derive(Debug, Clone)]
pub struct OneNode {
    node: NodeId,
    cores: usize,
    main_port: u16,
    shard_ports: Vec<Option<u16>>,
}

impl OneNode {
    /// The table of node 0 with `config`'s cores and ports.
    pub fn new(config: &BrokerConfig) -> OneNode {
        let cores = config.cores.max(1);
        // The native wire and the Kafka broker id both carry a core in 16 bits; no machine
        // pagurus may pin an executor per CPU on comes near it.
        assert!(
            cores <= 1 << 16,
            "{cores} cores do not fit a 16-bit core id"
        );
        OneNode {
            node: NodeId(0),
            cores,
            main_port: config.listen.port(),
            shard_ports: (0..cores).map(|core| config.shard_port(core)).collect(),
        }
    }

    /// [`OneNode::new`]'s table for cluster node `node`: the same rules for what stays on
    /// the node (groups, offsets, the controller core, topics the cluster did not place).
    pub fn for_node(config: &BrokerConfig, node: NodeId) -> OneNode {
        OneNode {
            node,
            ..OneNode::new(config)
        }
    }

    fn here(&self, core: usize) -> Place {
        Place {
            node: self.node,
            core: CoreId(u16::try_from(core).expect("checked in OneNode::new")),
        }
    }
}

impl Placement for OneNode {
    fn node(&self) -> NodeId {
        self.node
    }

    fn places(&self) -> Vec<Place> {
        (0..self.cores).map(|core| self.here(core)).collect()
    }

    fn owner(&self, topic: &str, partition: u32) -> Place {
        self.here(partition_owner(topic, partition, self.cores))
    }

    fn replicas(&self, topic: &str, partition: u32) -> Vec<Place> {
        vec![self.owner(topic, partition)]
    }

    fn coordinator(&self, group: &str) -> Place {
        self.here(group_coordinator(group, self.cores))
    }

    fn offsets_owner(&self, shard: usize) -> Place {
        self.here(shard % self.cores)
    }

    fn controller(&self) -> Place {
        self.here(0)
    }

    fn address(&self, place: Place) -> Option<Address> {
        if place.node != self.node {
            return None;
        }
        Some(Address {
            host: None,
            shard_port: *self.shard_ports.get(place.core.index())?,
            main_port: self.main_port,
        })
    }

    fn listening_on(&self, port: u16) -> Option<Place> {
        let core = self.shard_ports.iter().position(|&p| p == Some(port))?;
        Some(self.here(core))
    }
}

/// The one-node rule for a partition: core `fnv1a32("{topic}/{partition}") % cores`,
/// computed without building the string. Public because docs/PROTOCOL.md lets a client
/// compute it offline, and tests do.
pub fn partition_owner(topic: &str, partition: u32, cores: usize) -> usize {
    let mut digits = [0u8; 10];
    let mut at = digits.len();
    let mut n = partition;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let hash = fnv1a32_extend(
        fnv1a32_extend(fnv1a32(topic.as_bytes()), b"/"),
        &digits[at..],
    );
    (hash as usize) % cores.max(1)
}

/// The one-node rule for a group's coordinator: core `fnv1a32(group) % cores`.
pub fn group_coordinator(group: &str, cores: usize) -> usize {
    (fnv1a32(group.as_bytes()) as usize) % cores.max(1)
}

#[cfg(test)]
mod tests;
