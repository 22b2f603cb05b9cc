//! Prometheus metrics, sans-IO. Each core records into its own plain counters (no atomics,
//! no locks, no allocation on the request path); a scrape asks every core for a snapshot
//! over the mesh (`server::scrape`) and renders them here.
//!
//! - [`histogram`]: fixed-bucket histograms of `Cell`s.
//! - [`io`]: per-core storage I/O metrics (fsync latency, group-commit size), thread-local.
//! - [`requests`]: requests by type and error code.
//! - [`snapshot`]: what one core reports for a scrape.
//! - [`exposition`]: the text format, and consumer lag.
//! - [`http`]: the endpoint's request parsing and response heads.
//!
//! The per-core counters themselves (connections, bytes, mesh, bad input) are
//! `metrics::counters::Metrics`. Every family is listed in `docs/OPERATIONS.md`.

pub mod counters;
pub mod exposition;
pub mod histogram;
pub mod http;
pub mod io;
pub mod requests;
pub mod snapshot;
