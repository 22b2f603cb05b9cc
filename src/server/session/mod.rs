//! A connection, whatever its protocol, is a [`Session`]: its socket, its view of deleted
//! topics, who is on the other end ([`auth`]) and its metrics label, shared by the two halves of its
//! [`pipeline`]. The reader half owns the read buffer and the request deadline
//! ([`pipeline::Inbox`]); the writer half owns the answers waiting to go out
//! ([`Outbox`]), the one place that sends file ranges.
//!
//! A protocol front-end is a sans-IO codec plus one handler per request kind, plugged into
//! the pipeline through [`pipeline::Frontend`]: reading, framing, timeouts, pipelining, request
//! metrics and writing answers are written once, here, for every protocol.

pub mod auth;
pub mod login;
pub mod outbox;
pub mod pipeline;

use std::cell::RefCell;
use std::io;
use std::net::IpAddr;
use std::rc::Rc;
use std::sync::Arc;

use crate::server::stream::Stream;

use crate::security::listener::SecurityProtocol;
use crate::security::runtime::Security;
use crate::shard::Shard;
use crate::shard::placement::Place;
use crate::shard::used::UsedTopics;

pub use auth::Auth;
pub use outbox::{FileRange, Outbox};

/// The listener a connection came in on, as the session needs it.
#[derive(Clone)]
pub struct Accepted {
    pub security: Arc<Security>,
    /// The listener's place in the broker's list (the main one is 0).
    pub listener_index: usize,
    /// The listener's name (`--listener NAME=...`), for log lines.
    pub listener_name: Rc<str>,
    pub listener_security: SecurityProtocol,
    /// The listener's own port.
    pub port: u16,
    /// The core this port reaches exactly (a shard port of the listener); `None` for the
    /// listener's own port, which any core may have accepted.
    pub exact: Option<Place>,
}

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
    pub stream: RefCell<Stream>,
    pub protocol: Protocol,
    pub listener: Listener,
    /// The address the client reached this broker at: what metadata advertises.
    pub host: String,
    /// The port of the listener it reached (not of the shard port): what metadata
    /// advertises on a listener other than the main one, with its shard ports.
    pub listener_port: u16,
    /// What this connection used, so that a deleted topic stays deleted (`shard::used`).
    pub used: Rc<UsedTopics>,
    /// The broker's users, TLS and authorizer.
    pub security: Arc<Security>,
    pub listener_index: usize,
    pub listener_name: Rc<str>,
    pub listener_security: SecurityProtocol,
    /// The client's address: for ACLs that name hosts, and audit lines.
    pub peer: IpAddr,
    pub auth: RefCell<Auth>,
}

impl Session {
    /// A session for `stream`, which the protocol selection found speaking `protocol`.
    pub fn new(
        shard: Rc<Shard>,
        stream: RefCell<Stream>,
        protocol: Protocol,
        accepted: Accepted,
        auth: Auth,
    ) -> io::Result<Session> {
        let local = stream.borrow().tcp().local_addr()?;
        let peer = stream.borrow().tcp().peer_addr()?.ip();
        let listener = match accepted.exact {
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
            listener_port: accepted.port,
            used,
            security: accepted.security,
            listener_index: accepted.listener_index,
            listener_name: accepted.listener_name,
            listener_security: accepted.listener_security,
            peer,
            auth: RefCell::new(auth),
        })
    }

    /// True when a request for a partition owned by `owner` must be refused as "not the
    /// leader" on this connection.
    pub fn not_leader(&self, owner: Place) -> bool {
        matches!(self.listener, Listener::Shard(at) if at != owner)
    }
}
