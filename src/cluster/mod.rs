//! The cluster: nodes that agree on metadata through one Raft group (the controller), and
//! talk to each other over a framed node-to-node protocol. Consensus is tikv's `raft`
//! crate (raft-rs `RawNode`), never hand-written; this module gives it a wire format, a
//! durable log and a state machine, and drives it without a runtime. Design as built:
//! `docs/CLUSTER.md`.
//!
//! - [`config`]: the cluster flags of `serve`, checked into a [`config::ClusterConfig`].
//! - [`wire`]: sans-IO node-to-node frames (hello, Raft messages), CRC-checked, bounded.
//! - [`controller`]: the controller group: its durable Raft storage
//!   ([`controller::raft_store`]), its metadata state machine ([`controller::state`]) and the
//!   deterministic driver around `RawNode` ([`controller::driver`]).
//! - [`transport`]: node-to-node TCP on glommio: hellos, reconnection, per-group delivery.
//! - [`raft_log`]: raft-rs logs through `slog`; this drain hands its records to `tracing`.
//! - [`node`]: a node at run time on core 0 of `serve`: the transport and the controller
//!   driven by one task, proposals from this node, topic changes passed on.
//! - [`status`]: what the node knows, shared with every core; [`identity`]: the cluster id;
//!   [`table`]: the shard's placement on a cluster node, from the controller's topics.
//!
//! What is not wired yet (replication, ...): docs/CLUSTER.md.

pub mod config;
pub mod controller;
pub mod identity;
pub mod node;
pub mod raft_log;
pub mod replica;
pub mod status;
pub mod table;
pub mod transport;
pub mod wire;

use std::fmt;

/// Checks a new topic's replication factor (Kafka's CreateTopics, `pagurus topics create
/// --replication-factor`) against the live nodes; the refusal says why. -1 (Kafka's "the
/// default") and 1 are taken; above the live nodes is refused (two replicas never share
/// a node), and so is anything above 1 on a broker started alone.
pub fn check_replication_factor(requested: i32, live_nodes: usize) -> Result<(), String> {
    match requested {
        -1 | 1 => Ok(()),
        ..=0 => Err(format!(
            "replication factor {requested}: it must be at least 1 (or -1, the default)"
        )),
        r if r as usize > live_nodes => Err(format!(
            "replication factor {r} is more than the {live_nodes} live node{}",
            if live_nodes == 1 { "" } else { "s" }
        )),
        r if r > i32::from(u16::MAX) => Err(format!("replication factor {r} is too large")),
        _ => Ok(()),
    }
}

/// A node's id in the cluster (`--node-id`), also its Raft id in every group. 0 is the
/// broker started alone (raft-rs reserves id 0 for "none"), so members are
/// `1..=`[`NodeId::MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub u16);

impl NodeId {
    /// The highest node id whose cores' Kafka broker ids fit a positive i32 (the same bound
    /// as the shard's placement table).
    pub const MAX: NodeId = NodeId(0x7fff);

    /// The node's id as raft-rs numbers peers.
    pub fn raft_id(self) -> u64 {
        u64::from(self.0)
    }

    /// The node a raft-rs peer id names, if it is a member id.
    pub fn from_raft_id(id: u64) -> Option<NodeId> {
        let node = NodeId(u16::try_from(id).ok()?);
        node.is_member().then_some(node)
    }

    /// True for `1..=MAX`: an id a cluster member may have.
    pub fn is_member(self) -> bool {
        self.0 != 0 && self <= NodeId::MAX
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {}", self.0)
    }
}

/// The id every node of one cluster shares (16 bytes, made once when the cluster is
/// formed); a node refuses a peer from another cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClusterId(pub [u8; 16]);

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for ClusterId {
    type Err = String;

    /// 32 hex digits, as `Display` writes it (`pagurus cluster add-node` prints it).
    fn from_str(s: &str) -> Result<ClusterId, String> {
        let s = s.trim();
        let bad = || {
            format!(
                "cluster id {s:?}: expected 32 hex digits (as `pagurus cluster add-node` prints it)"
            )
        };
        if s.len() != 32 || !s.is_ascii() {
            return Err(bad());
        }
        let mut id = [0u8; 16];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(ClusterId(id))
    }
}

#[cfg(test)]
mod cluster_id_tests {
    use super::ClusterId;

    #[test]
    fn an_id_reads_back_from_its_hex_and_a_bad_one_is_refused() {
        let id = ClusterId(*b"\x00\x01\xfe\xffpagurus-ids!");
        assert_eq!(id.to_string().parse::<ClusterId>(), Ok(id));
        for bad in ["", "abc", &"g".repeat(32), &"0".repeat(33), &"é".repeat(16)] {
            let err = bad.parse::<ClusterId>().unwrap_err();
            assert!(err.contains("32 hex digits"), "{bad:?}: {err}");
        }
    }
}

#[cfg(test)]
mod replication_factor_tests {
    use super::check_replication_factor;

    #[test]
    fn up_to_the_live_nodes_is_taken_and_the_rest_refused_saying_why() {
        assert_eq!(check_replication_factor(1, 3), Ok(()));
        assert_eq!(check_replication_factor(3, 3), Ok(()));
        assert_eq!(check_replication_factor(2, 3), Ok(()));
        assert_eq!(check_replication_factor(-1, 1), Ok(()));
        let why = |r, live| check_replication_factor(r, live).unwrap_err();
        assert!(why(0, 3).contains("at least 1"), "{}", why(0, 3));
        assert!(why(-2, 3).contains("at least 1"));
        assert!(
            why(2, 1).contains("more than the 1 live node"),
            "{}",
            why(2, 1)
        );
        assert!(why(4, 3).contains("more than the 3 live nodes"));
        assert!(why(70_000, 100_000).contains("too large"));
    }
}
