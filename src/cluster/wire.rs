//! Node-to-node frames, sans-IO: bytes in, typed frames out, "incomplete" a normal outcome
//! (the style of `protocol::native`).
//!
//! Every frame is a 9-byte header then a body (big-endian):
//!
//! | field  | bytes | meaning                                                        |
//! |--------|-------|----------------------------------------------------------------|
//! | length | 4     | body bytes (not counting the header); checked against the limit before anything is allocated |
//! | kind   | 1     | [`FrameKind`]                                                   |
//! | crc    | 4     | CRC32C of the length and kind bytes, then of the body           |
//! | body   | length| per kind                                                       |
//!
//! Bodies: [`FrameKind::Hello`] is magic `PGCL`, protocol version (u16), cluster id (16
//! bytes), node id (u16), sent first by each side of a connection and checked with
//! [`Hello::check`]. [`FrameKind::Raft`] is a group id (u64: 0 the controller, later one per
//! partition) then a raft-rs `Message` in raft's own codec (protobuf).

use protobuf::Message as _;
use raft::eraftpb::Message;

use crate::cluster::{ClusterId, NodeId};
use crate::protocol::wire::{Malformed, Put, Reader};

/// Length (u32), kind (u8), CRC32C (u32).
pub const HEADER_LEN: usize = 9;
/// The first bytes of a hello body: keeps a stray client apart from a peer.
pub const HELLO_MAGIC: [u8; 4] = *b"PGCL";
/// The node-to-node protocol version this build speaks.
pub const PROTOCOL_VERSION: u16 = 1;
/// Magic, version, cluster id, node id.
pub const HELLO_BODY_LEN: usize = 4 + 2 + 16 + 2;
/// Body bytes before the Raft message: the group id.
pub const RAFT_PREFIX_LEN: usize = 8;
/// Default frame body limit: a partition group's append carries batches (50 MiB payload
/// at the default limits) plus Raft's fields; the controller's messages are far smaller.
pub const DEFAULT_MAX_BODY_BYTES: u32 = 64 * 1024 * 1024;

/// A Raft group: [`CONTROLLER_GROUP`] or, later, one per partition.
pub type GroupId = u64;
/// The controller's Raft group.
pub const CONTROLLER_GROUP: GroupId = 0;

/// What a frame carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FrameKind {
    Hello = 1,
    Raft = 2,
}

impl FrameKind {
    pub fn from_u8(v: u8) -> Option<FrameKind> {
        match v {
            1 => Some(FrameKind::Hello),
            2 => Some(FrameKind::Raft),
            _ => None,
        }
    }
}

/// Why bytes from a peer were refused. Every one of them closes the connection: a peer
/// that sends a bad frame is out of step, and Raft resends what is lost.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("frame of {body_bytes} bytes is over the limit of {max_bytes}")]
    FrameTooLarge { body_bytes: u64, max_bytes: u32 },
    #[error("frame CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("unknown frame kind {kind}")]
    UnknownKind { kind: u8 },
    #[error("malformed {what}")]
    Malformed { what: &'static str },
    #[error("hello magic {found:02x?} is not a pagurus cluster peer's")]
    BadMagic { found: [u8; 4] },
    #[error("peer speaks cluster protocol version {theirs}, this node speaks {ours}")]
    VersionUnsupported { theirs: u16, ours: u16 },
    #[error("peer belongs to cluster {theirs}, this node to cluster {ours}")]
    ClusterMismatch { ours: ClusterId, theirs: ClusterId },
    #[error("peer says it is {node}, which is not a member of this cluster")]
    UnknownNode { node: NodeId },
    #[error("peer says it is {node}, which is this node")]
    SelfConnection { node: NodeId },
    #[error("Raft message does not decode: {reason}")]
    RaftDecode { reason: String },
    #[error("Raft message does not encode: {reason}")]
    RaftEncode { reason: String },
}

impl From<Malformed> for WireError {
    fn from(m: Malformed) -> Self {
        WireError::Malformed { what: m.what }
    }
}

/// Outcome of looking for a frame at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameCheck {
    /// A whole frame of this many bytes (header included) is there.
    Complete { frame_bytes: usize },
    /// More bytes are needed: at least this many.
    Incomplete { needed: usize },
}

/// The first frame each side sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub cluster: ClusterId,
    pub node: NodeId,
}

/// What this node expects of a peer's hello.
#[derive(Debug, Clone)]
pub struct HelloExpect<'a> {
    pub cluster: ClusterId,
    /// This node: a hello naming it is a connection to ourselves (a peer list mistake).
    pub me: NodeId,
    /// The cluster's members this node knows.
    pub members: &'a [NodeId],
}

impl Hello {
    /// This build's hello for `node` of `cluster`.
    pub fn new(cluster: ClusterId, node: NodeId) -> Hello {
        Hello {
            version: PROTOCOL_VERSION,
            cluster,
            node,
        }
    }

    /// Accepts a peer's hello, or says why not.
    pub fn check(&self, expect: &HelloExpect<'_>) -> Result<(), WireError> {
        if self.version != PROTOCOL_VERSION {
            return Err(WireError::VersionUnsupported {
                theirs: self.version,
                ours: PROTOCOL_VERSION,
            });
        }
        if self.cluster != expect.cluster {
            return Err(WireError::ClusterMismatch {
                ours: expect.cluster,
                theirs: self.cluster,
            });
        }
        if self.node == expect.me {
            return Err(WireError::SelfConnection { node: self.node });
        }
        if !expect.members.contains(&self.node) {
            return Err(WireError::UnknownNode { node: self.node });
        }
        Ok(())
    }
}

/// A Raft message for one group.
#[derive(Debug, Clone, PartialEq)]
pub struct RaftFrame {
    pub group: GroupId,
    pub message: Message,
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    Hello(Hello),
    Raft(RaftFrame),
}

/// Looks for one frame at the front of `buf`. The length is checked against
/// `max_body_bytes` as soon as the header is there, so a caller sizes its buffer only for
/// frames it will accept. The CRC is checked by [`decode`].
pub fn check(buf: &[u8], max_body_bytes: u32) -> Result<FrameCheck, WireError> {
    if buf.len() < HEADER_LEN {
        return Ok(FrameCheck::Incomplete {
            needed: HEADER_LEN - buf.len(),
        });
    }
    let body = u32::from_be_bytes(buf[..4].try_into().expect("4"));
    if body > max_body_bytes {
        return Err(WireError::FrameTooLarge {
            body_bytes: u64::from(body),
            max_bytes: max_body_bytes,
        });
    }
    let frame_bytes = HEADER_LEN + body as usize;
    if buf.len() < frame_bytes {
        return Ok(FrameCheck::Incomplete {
            needed: frame_bytes - buf.len(),
        });
    }
    Ok(FrameCheck::Complete { frame_bytes })
}

/// Decodes the frame at the front of `buf`: `None` while it is incomplete, else the frame
/// and how many bytes it took.
pub fn decode(buf: &[u8], max_body_bytes: u32) -> Result<Option<(Frame, usize)>, WireError> {
    let frame_bytes = match check(buf, max_body_bytes)? {
        FrameCheck::Incomplete { .. } => return Ok(None),
        FrameCheck::Complete { frame_bytes } => frame_bytes,
    };
    let frame = &buf[..frame_bytes];
    let stored = u32::from_be_bytes(frame[5..9].try_into().expect("4"));
    let computed = frame_crc(&frame[..5], &frame[HEADER_LEN..]);
    if stored != computed {
        return Err(WireError::CrcMismatch { stored, computed });
    }
    let body = &frame[HEADER_LEN..];
    let decoded = match FrameKind::from_u8(frame[4]) {
        Some(FrameKind::Hello) => Frame::Hello(decode_hello(body)?),
        Some(FrameKind::Raft) => Frame::Raft(decode_raft(body)?),
        None => return Err(WireError::UnknownKind { kind: frame[4] }),
    };
    Ok(Some((decoded, frame_bytes)))
}

fn decode_hello(body: &[u8]) -> Result<Hello, WireError> {
    let mut r = Reader::new(body);
    let magic: [u8; 4] = r.bytes(4, "hello magic")?.try_into().expect("4");
    if magic != HELLO_MAGIC {
        return Err(WireError::BadMagic { found: magic });
    }
    let version = r.u16("hello version")?;
    if version != PROTOCOL_VERSION {
        // A later version may lay out the rest differently: refuse before reading it.
        return Err(WireError::VersionUnsupported {
            theirs: version,
            ours: PROTOCOL_VERSION,
        });
    }
    let cluster = ClusterId(r.bytes(16, "hello cluster id")?.try_into().expect("16"));
    let node = NodeId(r.u16("hello node id")?);
    r.finish("hello (trailing bytes)")?;
    Ok(Hello {
        version,
        cluster,
        node,
    })
}

fn decode_raft(body: &[u8]) -> Result<RaftFrame, WireError> {
    let mut r = Reader::new(body);
    let group = r.u64("raft group id")?;
    let message = Message::parse_from_bytes(r.rest()).map_err(|e| WireError::RaftDecode {
        reason: e.to_string(),
    })?;
    Ok(RaftFrame { group, message })
}

/// Appends a hello frame to `out`.
pub fn encode_hello(hello: &Hello, out: &mut Vec<u8>) {
    let start = begin(out, FrameKind::Hello);
    out.extend_from_slice(&HELLO_MAGIC);
    out.put_u16(hello.version);
    out.extend_from_slice(&hello.cluster.0);
    out.put_u16(hello.node.0);
    finish(out, start);
}

/// Appends a Raft frame to `out`; refuses one the peer would refuse as too large (nothing
/// is appended then).
pub fn encode_raft(
    group: GroupId,
    message: &Message,
    max_body_bytes: u32,
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let body_bytes = RAFT_PREFIX_LEN as u64 + u64::from(message.compute_size());
    if body_bytes > u64::from(max_body_bytes) {
        return Err(WireError::FrameTooLarge {
            body_bytes,
            max_bytes: max_body_bytes,
        });
    }
    let start = begin(out, FrameKind::Raft);
    out.put_u64(group);
    if let Err(e) = message.write_to_vec(out) {
        out.truncate(start);
        return Err(WireError::RaftEncode {
            reason: e.to_string(),
        });
    }
    finish(out, start);
    Ok(())
}

/// Writes a header with a zero length and CRC; returns where the frame starts.
fn begin(out: &mut Vec<u8>, kind: FrameKind) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, kind as u8, 0, 0, 0, 0]);
    start
}

/// Fills in the length and CRC of the frame that starts at `start` and ends at the end.
fn finish(out: &mut [u8], start: usize) {
    let body = u32::try_from(out.len() - start - HEADER_LEN).expect("callers bound the body");
    out[start..start + 4].copy_from_slice(&body.to_be_bytes());
    let crc = frame_crc(&out[start..start + 5], &out[start + HEADER_LEN..]);
    out[start + 5..start + HEADER_LEN].copy_from_slice(&crc.to_be_bytes());
}

/// CRC32C over the length and kind bytes, then the body: a flipped length is caught too.
fn frame_crc(length_and_kind: &[u8], body: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(length_and_kind), body)
}

#[cfg(test)]
#[path = "wire_tests.rs"]
mod tests;
