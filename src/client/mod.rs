//! Clients of the native protocol. The protocol logic is the sans-IO codec in
//! [`crate::protocol::native`]; this module drives it over sockets.
//!
//! - [`blocking`]: a simple client over `std::net`, used by the CLI and the tests.

pub mod blocking;

use crate::protocol::native::{ErrorCode, decode_error};

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    #[error("protocol error: {0}")]
    Protocol(String),
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
