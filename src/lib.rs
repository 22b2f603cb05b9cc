//! pagurus: a persistent, log-structured message broker, thread-per-core on io_uring.
//!
//! # Map of the crate
//!
//! Layering (each layer uses only those above it): `protocol`, `limits`, `clock`, `watch`
//! and `metrics` know no sockets; `storage` knows files, not requests; `shard` is the
//! location-transparent request API on one core (it never imports `server`); `server` is
//! listeners and thin protocol front-ends over the shard; `client` uses only `protocol`,
//! `limits` and `watch`.
//!
//! - [`protocol`]: sans-IO codecs. [`protocol::record`] is the 29-byte batch header that is
//!   both the on-disk and the on-the-wire format; [`protocol::native`] the native protocol;
//!   [`protocol::hermit`] HermitMQ v1; [`protocol::routing`] the FNV-1a owner formula (part
//!   of the wire contract: shard-aware clients compute it); [`protocol::wire`],
//!   [`protocol::payload`].
//! - [`limits`]: size and name limits checked before anything is allocated.
//! - [`clock`]: wall-clock nanoseconds since the epoch, as timestamps are stored.
//! - [`watch`]: the single-core "something changed" signal (commit waits, long polls).
//! - [`config`]: `BrokerConfig`, what every core shares, immutable.
//! - [`storage`]: segmented partition logs: mmapped index with CRCs, group commit, read
//!   plans for zero-copy sends, crash recovery, compaction, retention.
//! - [`shard`]: one core's share of the broker and the request API every front-end calls
//!   ([`shard::Shard`]): produce, fetch plans, offsets, metadata, groups, topic admin, each
//!   local or a typed mesh call ([`shard::calls`]) to the owner core; group offsets
//!   ([`shard::offsets`]), topic files ([`shard::topics`]), compaction triggers.
//! - [`server`]: process start, executors and mesh join, listeners and accept loops,
//!   protocol selection, the native and HermitMQ v1 front-ends, zero-copy `sendfile`, the
//!   `/metrics` endpoint, shutdown.
//! - [`metrics`]: per-core counters ([`metrics::counters`]), histograms, snapshots, the
//!   Prometheus text format.
//! - [`cluster`]: nodes agreeing on metadata through a raft-rs controller group: the
//!   node-to-node wire, the controller's durable Raft log, its state machine and driver
//!   (not wired into the server yet; `docs/CLUSTER.md`).
//! - [`client`]: the Rust client (sans-IO session, blocking and glommio transports).
//! - `cli`, `bench` (cargo feature `cli`, on by default): the `pagurus` command line and
//!   its load generator. A program that uses only the client turns default features off and
//!   does not build clap, indicatif, plotters or hdrhistogram.
//!
//! The design every part agrees on is in the documents under `docs/` (start with
//! `docs/ARCHITECTURE.md`).

#[cfg(feature = "cli")]
pub mod bench;
#[cfg(feature = "cli")]
pub mod cli;
pub mod client;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod limits;
pub mod metrics;
#[cfg(test)]
mod on_executor;
pub mod protocol;
pub mod security;
pub mod server;
pub mod shard;
pub mod storage;
pub mod watch;
