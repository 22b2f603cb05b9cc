//! A replicated partition's replica on this node (docs/REPLICATION.md). Built so far: the
//! replica's durable Raft hard and conf state ([`raft_state`]) and raft-rs's `Storage` over
//! the partition log ([`storage`]), and the replica's Raft node around them ([`driver`]:
//! offsets assigned on the leader, the high watermark from the commit). The owner core's
//! task and the routing of the group's messages to it come next.

pub mod directory;
pub mod driver;
pub mod host;
pub mod raft_state;
pub mod storage;

#[cfg(test)]
mod sim_tests;
