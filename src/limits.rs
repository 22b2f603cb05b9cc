//! Limits on what one client can make the broker hold. Every size read from the network or
//! the disk is checked against these before memory is allocated for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Size limits on record batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest payload of one batch (default 50 MiB, as HermitMQ).
    pub max_payload_bytes: u64,
    /// Largest key of one batch (default 64 KiB).
    pub max_key_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_payload_bytes: 50 * 1024 * 1024,
            max_key_bytes: 64 * 1024,
        }
    }
}

/// A place under the broker-wide connection limit (`--max-connections`), given back on
/// drop. It moves with its connection: a HermitMQ v1 connection handed to another core
/// (`shard::handoff`) takes its slot along, so it is counted once wherever it is served.
#[derive(Debug)]
pub struct ConnectionSlot {
    open: Arc<AtomicUsize>,
}

impl ConnectionSlot {
    /// Takes a slot unless `max` connections are open.
    pub fn try_take(open: &Arc<AtomicUsize>, max: usize) -> Option<ConnectionSlot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| ConnectionSlot {
            open: Arc::clone(open),
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Longest topic or consumer group name.
pub const NAME_LEN_MAX: usize = 249;

/// Why a topic or group name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("name is empty")]
    Empty,
    #[error("name is {len} bytes long; at most {NAME_LEN_MAX} are allowed")]
    TooLong { len: usize },
    #[error("name may not be '.' or '..'")]
    DotName,
    #[error("name contains {found:?}; only [A-Za-z0-9._-] are allowed")]
    BadCharacter { found: char },
    #[error(
        "name contains the byte {byte:#04x}, which is not UTF-8; only [A-Za-z0-9._-] are allowed"
    )]
    BadByte { byte: u8 },
}

/// Validates a topic or group name: 1-249 bytes of `[A-Za-z0-9._-]`, never `.` or `..`, so a
/// name can never leave the data directory when it becomes a path component.
pub fn validate_name(name: &[u8]) -> Result<&str, NameError> {
    if name.is_empty() {
        return Err(NameError::Empty);
    }
    if name.len() > NAME_LEN_MAX {
        return Err(NameError::TooLong { len: name.len() });
    }
    if let Some(at) = name
        .iter()
        .position(|&b| !(b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'))
    {
        return Err(bad_character(&name[at..]));
    }
    if name == b"." || name == b".." {
        return Err(NameError::DotName);
    }
    Ok(std::str::from_utf8(name).expect("ASCII checked above"))
}

/// The refusal of the character `rest` starts with: the character itself when `rest` is
/// UTF-8 there (`ü`, not the `Ã` of its first byte), else the byte.
fn bad_character(rest: &[u8]) -> NameError {
    let chunk = rest.utf8_chunks().next().expect("rest is not empty");
    match chunk.valid().chars().next() {
        Some(found) => NameError::BadCharacter { found },
        None => NameError::BadByte {
            byte: chunk.invalid()[0],
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(validate_name(b"orders.v1-eu_2"), Ok("orders.v1-eu_2"));
        assert_eq!(validate_name(b""), Err(NameError::Empty));
        assert_eq!(validate_name(b".."), Err(NameError::DotName));
        assert_eq!(validate_name(b"."), Err(NameError::DotName));
        assert_eq!(
            validate_name(b"../x"),
            Err(NameError::BadCharacter { found: '/' })
        );
        assert!(matches!(
            validate_name(&[b'a'; 250]),
            Err(NameError::TooLong { len: 250 })
        ));
        assert!(validate_name(&[b'a'; 249]).is_ok());
        assert_eq!(
            validate_name("ünïcode".as_bytes()),
            Err(NameError::BadCharacter { found: 'ü' })
        );
        assert_eq!(
            validate_name(b"ab\xff"),
            Err(NameError::BadByte { byte: 0xff })
        );
        let e = validate_name("aé".as_bytes()).unwrap_err().to_string();
        assert_eq!(e, "name contains 'é'; only [A-Za-z0-9._-] are allowed");
    }
}
