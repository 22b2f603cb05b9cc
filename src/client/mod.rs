//! Clients of the native protocol.
//!
//! The protocol logic is sans-IO, so any runtime can drive it: the codec in
//! [`crate::protocol::native`], and on top of it
//!
//! - [`session`]: correlation ids, requests in flight, matching answers to requests;
//! - [`produce`]: produce requests built in place, batching by record count, bytes and
//!   linger time, CRC32C per batch, the key-hash partitioner;
//! - [`consume`]: fetch answers checked batch by batch against their CRCs, the logical
//!   records inside a batch, start points (earliest, latest, offset, timestamp);
//! - [`routing`]: shard-aware routing, from metadata to the owner core's port;
//! - [`group`]: a native group member's logic (join, heartbeat, rejoin, positions).
//!
//! Two drivers run it over sockets:
//!
//! - [`blocking`]: over `std::net`, one thread per connection; the CLI and the tests.
//! - [`glommio`]: async on a glommio executor, many requests in flight per connection from
//!   any number of tasks, answers matched by correlation id; with a batching, shard-aware
//!   [`glommio::Producer`] and a long-polling, CRC-checking [`glommio::Consumer`]. `pagurus
//!   bench` drives it.

pub mod blocking;
pub mod consume;
pub mod glommio;
pub mod group;
pub mod produce;
pub mod routing;
pub mod secure;
pub mod session;

use crate::protocol::native::{ErrorCode, decode_error};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Protocol(String),
    /// The server accepted the connection but sent no preface in time: a stopped broker,
    /// or a server that is not a pagurus broker.
    #[error(
        "connected, but no greeting within {timeout_ms} ms: the broker is stopped or overloaded, or this is not a pagurus broker"
    )]
    NoGreeting { timeout_ms: u64 },
    #[error("broker answered {name} ({code}): {message}")]
    Broker {
        code: u16,
        name: &'static str,
        message: String,
        earliest: u64,
        latest: u64,
    },
    #[error("batch at offset {offset} failed its CRC check")]
    Crc { offset: u64 },
    /// The caller asked for something that cannot be sent.
    #[error("{0}")]
    Invalid(String),
}

impl ClientError {
    /// The broker's error code, if this is a broker error.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => ErrorCode::from_u16(*code),
            _ => None,
        }
    }

    pub(crate) fn from_response(code: u16, body: &[u8]) -> ClientError {
        let decoded = decode_error(body).unwrap_or_else(|_| crate::protocol::native::ErrorBody {
            message: String::from("(undecodable error body)"),
            earliest: 0,
            latest: 0,
        });
        ClientError::Broker {
            code,
            name: ErrorCode::from_u16(code).map_or("Unknown", ErrorCode::name),
            message: decoded.message,
            earliest: decoded.earliest,
            latest: decoded.latest,
        }
    }
}
