//! A replicated partition's replica on this node (docs/REPLICATION.md). Built so far: the
//! replica's durable Raft hard and conf state ([`raft_state`]) and raft-rs's `Storage` over
//! the partition log ([`storage`]); the per-partition driver comes next.

pub mod raft_state;
pub mod storage;

#[cfg(test)]
mod sim_tests;
