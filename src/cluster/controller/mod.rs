//! The controller: one Raft group (group 0) over the voters, whose log is the cluster's
//! metadata (nodes, topics, placement, leader hints), like Kafka's KRaft and Redpanda's
//! controller.
//!
//! - [`raft_store`]: the group's durable raft-rs `Storage` under
//!   `<data-dir>/cluster/controller/`.
//! - [`state`]: the metadata state machine applied from committed entries, its commands'
//!   and snapshots' binary forms, and the placement rule.
//! - [`driver`]: the deterministic, runtime-free driver around raft-rs's `RawNode`.

pub mod driver;
pub mod raft_store;
pub mod state;
