//! pagurus: a persistent, log-structured message broker, thread-per-core on io_uring.
//!
//! # Map of the crate
//!
//! - [`protocol`]: sans-IO codecs. [`protocol::record`] is the 29-byte batch header that is
//!   both the on-disk and the on-the-wire format.
//! - [`storage`]: segmented partition logs: mmapped index with CRCs, group commit, read
//!   plans for zero-copy sends, crash recovery.
//! - [`clock`]: wall-clock nanoseconds since the epoch, as timestamps are stored.
//! - [`limits`]: size and name limits checked before anything is allocated.
//! - [`metrics`]: Prometheus metrics: per-core recording, snapshots, text exposition.
//!
//! The design every part agrees on is in `DESIGN.md` (shared with the product owner) and the
//! documents under `docs/`.

pub mod bench;
pub mod cli;
pub mod client;
pub mod clock;
pub mod config;
pub mod limits;
pub mod metrics;
pub mod protocol;
pub mod server;
pub mod shard;
pub mod storage;
