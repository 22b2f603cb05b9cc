//! HermitMQ v1, sans-IO (see `HERMIT-WIRE.md`): the handshakes of its three roles and the
//! producer's 9-byte acknowledgement. Batches themselves are the shared 29-byte record
//! format ([`crate::protocol::record`]).
//!
//! Every parser takes the bytes after the role byte and returns the decoded message with
//! the number of bytes it used, or `Incomplete` when more are needed. A v1 string is one
//! length byte (1-255; 0 is an error) and that many bytes.

use crate::limits::{NameError, validate_name};

pub const ROLE_PRODUCER: u8 = 0x01;
pub const ROLE_CONSUMER: u8 = 0x02;
pub const ROLE_COMMIT: u8 = 0x03;

/// Producer acknowledgement status: stored.
pub const ACK_STORED: u8 = 0x00;
/// Producer acknowledgement status: the append failed; the connection stays open.
pub const ACK_FAILED: u8 = 0xFF;
/// The commit role's only answer.
pub const COMMIT_DONE: u8 = 0x01;
pub const ACK_LEN: usize = 9;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HermitError {
    #[error("incomplete: {needed} more bytes needed")]
    Incomplete { needed: usize },
    #[error("a string of length 0")]
    EmptyString,
    #[error("invalid name: {0}")]
    Name(#[from] NameError),
}

/// `[string topic][u32 partition]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerHello<'a> {
    pub topic: &'a str,
    pub partition: u32,
}

/// `[string group][string topic][u32 partition]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerHello<'a> {
    pub group: &'a str,
    pub topic: &'a str,
    pub partition: u32,
}

/// `[string group][string topic][u32 partition][u64 offset]`
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitRequest<'a> {
    pub group: &'a str,
    pub topic: &'a str,
    pub partition: u32,
    pub offset: u64,
}

struct Cursor<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], HermitError> {
        let end = self.at + n;
        if end > self.buf.len() {
            return Err(HermitError::Incomplete {
                needed: end - self.buf.len(),
            });
        }
        let out = &self.buf[self.at..end];
        self.at = end;
        Ok(out)
    }

    /// A name: validated as soon as its bytes are there, so a bad name fails before the
    /// rest of the handshake arrives.
    fn name(&mut self) -> Result<&'a str, HermitError> {
        let len = self.take(1)?[0] as usize;
        if len == 0 {
            return Err(HermitError::EmptyString);
        }
        Ok(validate_name(self.take(len)?)?)
    }

    fn u32(&mut self) -> Result<u32, HermitError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4")))
    }

    fn u64(&mut self) -> Result<u64, HermitError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8")))
    }
}

pub fn parse_producer_hello(buf: &[u8]) -> Result<(ProducerHello<'_>, usize), HermitError> {
    let mut c = Cursor { buf, at: 0 };
    let hello = ProducerHello {
        topic: c.name()?,
        partition: c.u32()?,
    };
    Ok((hello, c.at))
}

pub fn parse_consumer_hello(buf: &[u8]) -> Result<(ConsumerHello<'_>, usize), HermitError> {
    let mut c = Cursor { buf, at: 0 };
    let hello = ConsumerHello {
        group: c.name()?,
        topic: c.name()?,
        partition: c.u32()?,
    };
    Ok((hello, c.at))
}

pub fn parse_commit(buf: &[u8]) -> Result<(CommitRequest<'_>, usize), HermitError> {
    let mut c = Cursor { buf, at: 0 };
    let commit = CommitRequest {
        group: c.name()?,
        topic: c.name()?,
        partition: c.u32()?,
        offset: c.u64()?,
    };
    Ok((commit, c.at))
}

pub fn encode_ack(status: u8, base_offset: u64) -> [u8; ACK_LEN] {
    let mut out = [0u8; ACK_LEN];
    out[0] = status;
    out[1..].copy_from_slice(&base_offset.to_be_bytes());
    out
}

/// Client side: `[role][string ...]` handshakes, for tests and tools.
pub fn encode_producer_hello(topic: &str, partition: u32) -> Vec<u8> {
    let mut out = vec![ROLE_PRODUCER];
    push_string(&mut out, topic);
    out.extend_from_slice(&partition.to_be_bytes());
    out
}

pub fn encode_consumer_hello(group: &str, topic: &str, partition: u32) -> Vec<u8> {
    let mut out = vec![ROLE_CONSUMER];
    push_string(&mut out, group);
    push_string(&mut out, topic);
    out.extend_from_slice(&partition.to_be_bytes());
    out
}

pub fn encode_commit(group: &str, topic: &str, partition: u32, offset: u64) -> Vec<u8> {
    let mut out = vec![ROLE_COMMIT];
    push_string(&mut out, group);
    push_string(&mut out, topic);
    out.extend_from_slice(&partition.to_be_bytes());
    out.extend_from_slice(&offset.to_be_bytes());
    out
}

fn push_string(out: &mut Vec<u8>, s: &str) {
    let len = u8::try_from(s.len()).expect("v1 strings are at most 255 bytes");
    out.push(len);
    out.extend_from_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handshakes_round_trip() {
        let hello = encode_producer_hello("load_test", 7);
        assert_eq!(
            parse_producer_hello(&hello[1..]),
            Ok((
                ProducerHello {
                    topic: "load_test",
                    partition: 7
                },
                hello.len() - 1
            ))
        );
        let hello = encode_consumer_hello("stress-group", "load_test", 0);
        let (parsed, used) = parse_consumer_hello(&hello[1..]).unwrap();
        assert_eq!(
            (parsed.group, parsed.topic, parsed.partition, used),
            ("stress-group", "load_test", 0, hello.len() - 1)
        );
        let commit = encode_commit("g", "t", 1, 99);
        let (parsed, _) = parse_commit(&commit[1..]).unwrap();
        assert_eq!(parsed.offset, 99);
        assert_eq!(encode_ack(ACK_STORED, 5), [0, 0, 0, 0, 0, 0, 0, 0, 5]);
    }

    #[test]
    fn incomplete_and_bad_input() {
        let hello = encode_producer_hello("topic", 1);
        for cut in 1..hello.len() - 1 {
            assert!(
                matches!(
                    parse_producer_hello(&hello[1..cut]),
                    Err(HermitError::Incomplete { .. })
                ),
                "cut at {cut}"
            );
        }
        assert_eq!(parse_producer_hello(&[0]), Err(HermitError::EmptyString));
        assert!(matches!(
            parse_producer_hello(b"\x04../x\0\0\0\0"),
            Err(HermitError::Name(_))
        ));
        // A bad name fails as soon as the name is in, before the partition arrives.
        assert!(matches!(
            parse_producer_hello(b"\x02.."),
            Err(HermitError::Name(_))
        ));
    }
}
