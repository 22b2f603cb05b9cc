//! A connection, whatever its protocol, is a [`Session`]: its socket, its view of deleted
//! topics, its principal and its metrics label, shared by the two halves of its
//! [`pipeline`]. The reader half owns the read buffer and the request deadline
//! ([`pipeline::Inbox`]); the writer half owns the answers waiting to go out
//! ([`Outbox`]), the one place that sends file ranges.
//!
//! A protocol front-end is a sans-IO codec plus one handler per request kind, plugged into
//! the pipeline through [`pipeline::Frontend`]: reading, framing, timeouts, pipelining, request
//! metrics and writing answers are written once, here, for every protocol.

pub mod outbox;
pub mod pipeline;

use std::cell::RefCell;
use std::io;
use std::rc::Rc;

use glommio::net::TcpStream;

use crate::shard::Shard;
use crate::shard::placement::Place;
use crate::shard::used::UsedTopics;

pub use outbox::{FileRange, Outbox};

/// Which protocol a session speaks: its metrics label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Native,
    Kafka,
    Hermit,
}

impl Protocol {
    pub fn label(self) -> &'static str {
        match self {
            Protocol::Native => "native",
            Protocol::Kafka => "kafka",
            Protocol::Hermit => "hermit",
        }
    }
}

/// Who is on the other end. Every session is anonymous until authentication exists; the
/// slot is here so that authorization has one place to look.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Principal {
    #[default]
    Anonymous,
}

/// Which listener accepted the connection: it decides what "not the leader" means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The main port: any core may have accepted it (SO_REUSEPORT), so requests for other
    /// cores' partitions go through the shard API (a mesh hop), never NOT_LEADER.
    Main,
    /// A core's shard port, advertised as that place: a partition placed elsewhere is
    /// refused (Kafka's NOT_LEADER_OR_FOLLOWER), and the client refreshes its metadata.
    Shard(Place),
}

/// One connection's state, shared by its reader and writer.
pub struct Session {
    pub shard: Rc<Shard>,
    pub stream: RefCell<TcpStream>,
    pub protocol: Protocol,
    pub listener: Listener,
    /// The address the client reached this broker at: what metadata advertises.
    pub host: String,
    /// What this connection used, so that a deleted topic stays deleted (`shard::used`).
    pub used: Rc<UsedTopics>,
    pub principal: RefCell<Principal>,
}

impl Session {
    /// A session for `stream`, which the protocol selection found speaking `protocol`.
    pub fn new(
        shard: Rc<Shard>,
        stream: RefCell<TcpStream>,
        protocol: Protocol,
    ) -> io::Result<Session> {
        let local = stream.borrow().local_addr()?;
        let listener = match shard.placement().listening_on(local.port()) {
            Some(place) => Listener::Shard(place),
            None => Listener::Main,
        };
        let used = Rc::new(match protocol {
            Protocol::Kafka => UsedTopics::kafka(&shard),
            Protocol::Native | Protocol::Hermit => UsedTopics::default(),
        });
        Ok(Session {
            shard,
            stream,
            protocol,
            listener,
            host: local.ip().to_string(),
            used,
            principal: RefCell::default(),
        })
    }

    /// True when a request for a partition owned by `owner` must be refused as "not the
    /// leader" on this connection.
    pub fn not_leader(&self, owner: Place) -> bool {
        matches!(self.listener, Listener::Shard(at) if at != owner)
    }
}
