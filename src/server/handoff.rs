//! Serving a HermitMQ v1 connection on the core that owns its partition.
//!
//! The kernel spreads connections over the cores (SO_REUSEPORT), but a v1 connection names
//! its topic and partition in its handshake and then uses nothing else, so after the
//! handshake the connection moves to the owner once, and none of its batches crosses cores
//! again (docs/LATENCY.md, "(e)"). The socket is passed as a duplicated descriptor (glommio's
//! `TcpStream` cannot give its own up), with every byte read so far; the owner wraps it in a
//! stream of its own and reads the handshake again from those bytes, then whatever the
//! client pipelined behind it. The slot under the connection limit moves with it.

use std::cell::RefCell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::rc::Rc;

use crate::server::stream::Stream;
use bytes::{BufMut, Bytes, BytesMut};
use tracing::{debug, warn};

use crate::limits::ConnectionSlot;
use crate::metrics::counters::Metrics;
use crate::shard::calls::HandOff;
use crate::shard::handoff::HandedOff;
use crate::shard::placement;
use crate::shard::{Hop, Shard};

/// Where a v1 connection is served, and what it holds there.
pub struct Place {
    /// Its place under the connection limit, held while it is served here.
    slot: Option<ConnectionSlot>,
    /// Bytes past the role byte that the core which handed it here had read.
    read_ahead: Bytes,
    /// A connection moves at most once, from the core that accepted it.
    may_move: bool,
}

impl Place {
    /// A connection accepted on this core.
    pub fn accepted(slot: ConnectionSlot) -> Place {
        Place {
            slot: Some(slot),
            read_ahead: Bytes::new(),
            may_move: true,
        }
    }

    /// A connection another core handed here, with what it read past the role byte.
    pub fn handed_in(slot: ConnectionSlot, read_ahead: Bytes) -> Place {
        Place {
            slot: Some(slot),
            read_ahead,
            may_move: false,
        }
    }

    /// The bytes already read from the connection, to parse before reading more.
    pub fn take_read_ahead(&mut self) -> Bytes {
        std::mem::take(&mut self.read_ahead)
    }

    /// Hands the connection to `owner` unless that is this core or another node's (or it
    /// moved once already).
    /// `read` is everything read from the connection after its `role` byte. True when this
    /// core is done with the connection (the owner serves it); false when it is served
    /// here (the hand-off was declined, and the slot is back).
    pub async fn move_to_owner(
        &mut self,
        shard: &Rc<Shard>,
        stream: &RefCell<Stream>,
        listener: usize,
        role: u8,
        read: &[u8],
        owner: placement::Place,
    ) -> bool {
        // A TLS session's state lives in this process's memory, not in its descriptor.
        if !matches!(shard.hop(owner), Ok(Hop::Core(_)))
            || !stream.borrow().is_plain()
            || !std::mem::replace(&mut self.may_move, false)
        {
            return false;
        }
        let Some(slot) = self.slot.take() else {
            return false;
        };
        let socket = match duplicate(stream) {
            Ok(socket) => socket,
            Err(error) => {
                Metrics::inc(&shard.metrics.handoffs_declined);
                warn!(%error, %owner, "cannot duplicate a socket to hand it off; served here");
                self.slot = Some(slot);
                return false;
            }
        };
        let mut bytes = BytesMut::with_capacity(1 + read.len());
        bytes.put_u8(role);
        bytes.extend_from_slice(read);
        let handed = HandOff {
            socket,
            read: bytes.freeze(),
            slot,
            listener,
        };
        match shard.hand_off(owner, handed).await {
            HandedOff::Taken => {
                Metrics::inc(&shard.metrics.connections_handed_off);
                debug!(
                    %owner,
                    "HermitMQ connection handed to the core that owns its partition"
                );
                true
            }
            HandedOff::Kept { connection, reason } => {
                Metrics::inc(&shard.metrics.handoffs_declined);
                debug!(
                    %owner,
                    reason, "HermitMQ connection not handed off; served here"
                );
                // The duplicate closes here; the connection goes on on this core's own.
                self.slot = Some(connection.slot);
                false
            }
            HandedOff::Unknown => {
                warn!(
                    %owner,
                    "no answer to a connection hand-off; closed on this core"
                );
                true
            }
        }
    }
}

/// A descriptor of the same socket, owned, so it can cross to another thread.
fn duplicate(stream: &RefCell<Stream>) -> io::Result<OwnedFd> {
    let fd = stream.borrow().tcp().as_raw_fd();
    // SAFETY: `stream` owns the descriptor and outlives this borrow.
    unsafe { BorrowedFd::borrow_raw(fd) }.try_clone_to_owned()
}
