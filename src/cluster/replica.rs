//! A replicated partition's replica on this node (docs/REPLICATION.md). Built so far: the
//! replica's durable Raft hard and conf state ([`raft_state`]); the raft-rs storage over the
//! partition log and the per-partition driver come next.

pub mod raft_state;
