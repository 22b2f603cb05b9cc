//! Node-to-node TCP on glommio: the cluster's Raft messages between nodes.
//!
//! Each ordered pair of nodes has its own connection: node A connects to B to send, B to A
//! to send back. A connection carries one direction only (after the two hellos), so there
//! is no connection-choice race and each side's writer alone owns its socket.
//!
//! - **Outgoing** ([`link`]): one task per peer keeps one connection, reconnecting with
//!   capped exponential backoff (50 ms doubling to 2 s, jittered to half..whole). It sends
//!   its hello, checks the answer names the peer it meant, then writes what [`Transport::send`]
//!   queued. The queue is bounded in frames and bytes; when full, the new message is dropped
//!   and counted: Raft resends what is not acknowledged.
//! - **Incoming** ([`conn`]): the listener accepts a connection, waits for its hello (cluster
//!   id, a member id other than this node's, protocol version; anything else is refused with
//!   a log line and the connection closed), answers with its own, then delivers each Raft
//!   message to the handler registered for its group ([`Transport::register`], a glommio
//!   local channel; full or missing handlers drop and count).
//!
//! Every wait is bounded: connect, hello and write timeouts; a frame once begun must arrive
//! whole within the frame timeout; between frames a silent connection is watched by TCP
//! keepalive (a dead peer is found within about 16 s), because between two Raft followers
//! nothing flows for as long as the leader lives, and that silence is healthy.

mod conn;
#[cfg(test)]
mod controller_tests;
mod link;
#[cfg(test)]
mod tests;

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Waker;
use std::time::{Duration, Instant};

use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::task::JoinHandle;
use raft::eraftpb::Message;

use crate::cluster::config::{ClusterConfig, Peer};
use crate::cluster::wire::{self, GroupId, WireError};
use crate::cluster::{ClusterId, NodeId};

/// The transport's settings; [`TransportConfig::new`] gives the defaults.
#[derive(Debug, Clone)]
pub struct TransportConfig {
    pub cluster: ClusterId,
    pub me: NodeId,
    pub listen: SocketAddr,
    /// Every member, this node included (it is skipped).
    pub peers: Vec<Peer>,
    /// Largest frame body sent or accepted.
    pub max_body_bytes: u32,
    /// Frames queued to one peer at most...
    pub queue_frames_max: usize,
    /// ...and bytes.
    pub queue_bytes_max: usize,
    /// A frame queued longer than this (its peer unreachable meanwhile) is dropped rather
    /// than written: a stale Raft message is at best useless (Raft resends what matters)
    /// and at worst harmful, as a forwarded proposal its proposer gave up on would be
    /// applied after it was told it failed.
    pub queue_age_max: Duration,
    pub connect_timeout: Duration,
    /// Each side's hello must arrive within this time of the connection.
    pub hello_timeout: Duration,
    /// One write must complete within this time.
    pub write_timeout: Duration,
    /// A frame must arrive whole within this time of its first byte.
    pub frame_timeout: Duration,
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// Incoming connections open at once; more are closed at once.
    pub incoming_max: usize,
}

impl TransportConfig {
    pub fn new(cluster: ClusterId, me: NodeId, listen: SocketAddr, peers: Vec<Peer>) -> Self {
        let incoming_max = peers.len() * 2 + 8;
        TransportConfig {
            cluster,
            me,
            listen,
            peers,
            max_body_bytes: wire::DEFAULT_MAX_BODY_BYTES,
            queue_frames_max: 4096,
            queue_bytes_max: 128 * 1024 * 1024,
            queue_age_max: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            hello_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
            frame_timeout: Duration::from_secs(30),
            backoff_min: Duration::from_millis(50),
            backoff_max: Duration::from_secs(2),
            incoming_max,
        }
    }

    /// The settings of a node started with the cluster flags.
    pub fn from_cluster(cluster: &ClusterConfig, id: ClusterId) -> Self {
        TransportConfig::new(id, cluster.node, cluster.listen, cluster.peers.clone())
    }

    fn members(&self) -> Vec<NodeId> {
        self.peers.iter().map(|p| p.node).collect()
    }
}

/// Why the transport did not start or did not take a message.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("cannot listen for cluster peers on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{node} is not a peer of this node")]
    UnknownPeer { node: NodeId },
    #[error("the queue to {node} is full: message dropped")]
    QueueFull { node: NodeId },
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Counters since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TransportStats {
    /// Outgoing connections that completed both hellos.
    pub connects: u64,
    /// Outgoing attempts that failed (connect, hello, wrong node).
    pub connect_failures: u64,
    /// Incoming connections refused at their hello, or over `incoming_max`.
    pub refused: u64,
    /// Incoming connections closed for a bad frame (too large, CRC, undecodable, out of place).
    pub protocol_errors: u64,
    /// Messages queued by `send`, and written to a socket.
    pub queued: u64,
    pub written: u64,
    /// Messages dropped: queue full, no handler for the group, handler full.
    pub dropped_queue_full: u64,
    pub dropped_no_handler: u64,
    pub dropped_handler_full: u64,
    /// Messages dropped for waiting longer than `queue_age_max` to be written.
    pub dropped_stale: u64,
    /// Messages handed to a handler.
    pub delivered: u64,
}

/// A Raft message received from a peer.
#[derive(Debug, Clone, PartialEq)]
pub struct Received {
    pub from: NodeId,
    pub group: GroupId,
    pub message: Message,
}

/// Frames waiting to be written to one peer.
#[derive(Default)]
struct Outbox {
    /// Each frame with when it was queued.
    frames: VecDeque<(Instant, Vec<u8>)>,
    bytes: usize,
    waker: Option<Waker>,
}

struct Inner {
    config: TransportConfig,
    /// Every member, this node included; [`Transport::set_peers`] changes it.
    members: RefCell<Vec<NodeId>>,
    outboxes: RefCell<HashMap<NodeId, Rc<RefCell<Outbox>>>>,
    /// Each other member's address and the task of its outgoing link.
    links: RefCell<HashMap<NodeId, (Peer, u64)>>,
    handlers: RefCell<HashMap<GroupId, LocalSender<Received>>>,
    /// Where the messages of partition groups no handler took go (the node hands them to
    /// the replica's core: docs/REPLICATION.md), when registered.
    partitions: RefCell<Option<LocalSender<Received>>>,
    stats: Cell<TransportStats>,
    /// Every task of this transport, so dropping it stops them all.
    tasks: RefCell<HashMap<u64, JoinHandle<()>>>,
    next_task: Cell<u64>,
    /// The task serving each peer's current incoming connection: a newer one replaces it.
    incoming: RefCell<HashMap<NodeId, u64>>,
    /// Incoming connections being served.
    incoming_open: Cell<usize>,
    /// The cluster each member peer's last hello named (this node's or another).
    hellos: RefCell<HashMap<NodeId, ClusterId>>,
}

impl Inner {
    fn count(&self, f: impl FnOnce(&mut TransportStats)) {
        let mut stats = self.stats.get();
        f(&mut stats);
        self.stats.set(stats);
    }

    /// Spawns a task that removes itself from `tasks` when it ends.
    fn spawn(self: &Rc<Self>, fut: impl std::future::Future<Output = ()> + 'static) -> u64 {
        let id = self.next_task.get();
        self.next_task.set(id + 1);
        let weak = Rc::downgrade(self);
        let handle = glommio::spawn_local(async move {
            fut.await;
            if let Some(inner) = weak.upgrade() {
                inner.tasks.borrow_mut().remove(&id);
            }
        })
        .detach();
        self.tasks.borrow_mut().insert(id, handle);
        id
    }

    /// Starts the outgoing link to `peer` (a new queue).
    fn add_link(self: &Rc<Self>, peer: Peer) {
        let node = peer.node;
        self.outboxes.borrow_mut().insert(node, Rc::default());
        let task = self.spawn(link::link(Rc::clone(self), peer.clone()));
        self.links.borrow_mut().insert(node, (peer, task));
    }

    /// Stops the outgoing link to `node`, drops its queue and closes its incoming
    /// connection.
    fn remove_link(&self, node: NodeId) {
        if let Some((_, task)) = self.links.borrow_mut().remove(&node) {
            self.cancel(task);
        }
        self.outboxes.borrow_mut().remove(&node);
        let incoming = self.incoming.borrow_mut().remove(&node);
        if let Some(task) = incoming {
            self.cancel(task);
        }
        self.hellos.borrow_mut().remove(&node);
    }

    fn cancel(&self, id: u64) {
        if let Some(handle) = self.tasks.borrow_mut().remove(&id) {
            handle.cancel();
        }
    }
}

/// A node's end of the cluster's connections. Lives on one glommio executor; dropping it
/// closes its listener and connections.
pub struct Transport {
    inner: Rc<Inner>,
    local_addr: SocketAddr,
}

impl Transport {
    /// Binds `config.listen` and starts connecting to every peer. Call it on a glommio
    /// executor.
    pub fn start(config: TransportConfig) -> Result<Transport, TransportError> {
        let listener =
            glommio::net::TcpListener::bind(config.listen).map_err(|e| TransportError::Listen {
                addr: config.listen,
                source: e.into(),
            })?;
        let local_addr = listener.local_addr().map_err(|e| TransportError::Listen {
            addr: config.listen,
            source: e.into(),
        })?;
        let others: Vec<Peer> = config
            .peers
            .iter()
            .filter(|p| p.node != config.me)
            .cloned()
            .collect();
        let inner = Rc::new(Inner {
            members: RefCell::new(config.members()),
            outboxes: RefCell::default(),
            links: RefCell::default(),
            config,
            handlers: RefCell::default(),
            partitions: RefCell::default(),
            stats: Cell::default(),
            tasks: RefCell::default(),
            next_task: Cell::new(0),
            incoming: RefCell::default(),
            incoming_open: Cell::new(0),
            hellos: RefCell::default(),
        });
        inner.spawn(conn::accept_loop(Rc::clone(&inner), listener));
        for peer in others {
            inner.add_link(peer);
        }
        tracing::info!(listen = %local_addr, node = inner.config.me.0, "cluster transport started");
        Ok(Transport { inner, local_addr })
    }

    /// The address the listener is bound to (its port when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Messages of `group` arrive on the returned channel, `capacity` at most waiting; a
    /// second registration of a group replaces the first.
    pub fn register(&self, group: GroupId, capacity: usize) -> LocalReceiver<Received> {
        let (tx, rx) = local_channel::new_bounded(capacity.max(1));
        self.inner.handlers.borrow_mut().insert(group, tx);
        rx
    }

    /// Messages of every partition group (any group but the controller's) that no
    /// [`Transport::register`] took arrive on the returned channel, `capacity` at most
    /// waiting; a second call replaces the first.
    pub fn register_partitions(&self, capacity: usize) -> LocalReceiver<Received> {
        let (tx, rx) = local_channel::new_bounded(capacity.max(1));
        *self.inner.partitions.borrow_mut() = Some(tx);
        rx
    }

    /// Queues a message of `group` for `to`. Never waits: a full queue drops it (counted,
    /// and said in the error), as a lost packet would.
    pub fn send(
        &self,
        to: NodeId,
        group: GroupId,
        message: &Message,
    ) -> Result<(), TransportError> {
        self.inner.send(to, group, message)
    }

    /// A handle that sends as [`Transport::send`] does, for another task of this executor;
    /// it does not keep the transport running (dropping the [`Transport`] still stops it).
    pub fn sender(&self) -> TransportSender {
        TransportSender(Rc::clone(&self.inner))
    }

    /// Makes `peers` (every member, this node included) the members: a new member gets a
    /// link, a member whose address changed a new one, and a member no longer listed loses
    /// its link, its queue and its incoming connection (its hellos are refused from now
    /// on). The cluster's membership changes at run time this way.
    pub fn set_peers(&self, peers: &[Peer]) {
        let me = self.inner.config.me;
        let wanted: HashMap<NodeId, &Peer> = peers
            .iter()
            .filter(|p| p.node != me)
            .map(|p| (p.node, p))
            .collect();
        let current: Vec<(NodeId, Peer)> = self
            .inner
            .links
            .borrow()
            .iter()
            .map(|(node, (peer, _))| (*node, peer.clone()))
            .collect();
        for (node, peer) in &current {
            if wanted.get(node).is_none_or(|p| *p != peer) {
                tracing::info!(node = node.0, addr = %peer.addr, "cluster peer removed");
                self.inner.remove_link(*node);
            }
        }
        for (node, peer) in wanted {
            if !self.inner.links.borrow().contains_key(&node) {
                tracing::info!(node = node.0, addr = %peer.addr, "cluster peer added");
                self.inner.add_link(peer.clone());
            }
        }
        let mut members: Vec<NodeId> = peers.iter().map(|p| p.node).collect();
        if !members.contains(&me) {
            members.push(me);
        }
        members.sort_unstable();
        *self.inner.members.borrow_mut() = members;
    }

    /// The members now, this node included, by id.
    pub fn members(&self) -> Vec<NodeId> {
        self.inner.members.borrow().clone()
    }

    pub fn stats(&self) -> TransportStats {
        self.inner.stats.get()
    }

    /// What the peers' hellos said of their cluster so far: `Own` once one named this
    /// node's; `Foreign` when none did and a quorum of the members (this node counted)
    /// named one other cluster, which this node's cluster id can then never reach a
    /// quorum with; else `Unknown`.
    pub fn peer_clusters(&self) -> PeerClusters {
        let hellos = self.inner.hellos.borrow();
        let ours = self.inner.config.cluster;
        if hellos.values().any(|&id| id == ours) {
            return PeerClusters::Own;
        }
        let quorum = self.inner.members.borrow().len() / 2 + 1;
        for &theirs in hellos.values() {
            let mut nodes: Vec<NodeId> = hellos
                .iter()
                .filter(|&(_, &id)| id == theirs)
                .map(|(&node, _)| node)
                .collect();
            if nodes.len() >= quorum {
                nodes.sort_unstable();
                return PeerClusters::Foreign { theirs, nodes };
            }
        }
        PeerClusters::Unknown
    }
}

/// See [`Transport::peer_clusters`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerClusters {
    Unknown,
    Own,
    Foreign {
        theirs: ClusterId,
        nodes: Vec<NodeId>,
    },
}

/// Sends on a node's transport ([`Transport::sender`]).
#[derive(Clone)]
pub struct TransportSender(Rc<Inner>);

impl TransportSender {
    /// [`Transport::send`].
    pub fn send(
        &self,
        to: NodeId,
        group: GroupId,
        message: &Message,
    ) -> Result<(), TransportError> {
        self.0.send(to, group, message)
    }
}

impl Inner {
    /// Queues a message of `group` for `to`. Never waits: a full queue drops it (counted,
    /// and said in the error), as a lost packet would.
    fn send(&self, to: NodeId, group: GroupId, message: &Message) -> Result<(), TransportError> {
        let outbox = self
            .outboxes
            .borrow()
            .get(&to)
            .cloned()
            .ok_or(TransportError::UnknownPeer { node: to })?;
        let mut frame = Vec::new();
        wire::encode_raft(group, message, self.config.max_body_bytes, &mut frame)?;
        let mut outbox = outbox.borrow_mut();
        let config = &self.config;
        if outbox.frames.len() >= config.queue_frames_max
            || outbox.bytes + frame.len() > config.queue_bytes_max
        {
            self.count(|s| s.dropped_queue_full += 1);
            return Err(TransportError::QueueFull { node: to });
        }
        outbox.bytes += frame.len();
        outbox.frames.push_back((Instant::now(), frame));
        if let Some(waker) = outbox.waker.take() {
            waker.wake();
        }
        self.count(|s| s.queued += 1);
        Ok(())
    }
}

impl Drop for Transport {
    fn drop(&mut self) {
        let tasks: Vec<JoinHandle<()>> = self
            .inner
            .tasks
            .borrow_mut()
            .drain()
            .map(|(_, h)| h)
            .collect();
        for task in tasks {
            task.cancel();
        }
    }
}

/// Bounds a wait: the future's output, or `Err(TimedOut)` naming `what`.
async fn within<T>(
    limit: Duration,
    what: &'static str,
    fut: impl std::future::Future<Output = Result<T, conn::ConnError>>,
) -> Result<T, conn::ConnError> {
    futures_lite::future::or(fut, async {
        glommio::timer::sleep(limit).await;
        Err(conn::ConnError::TimedOut { what })
    })
    .await
}

/// Sets TCP keepalive so a silent connection to a dead peer ends: probes after 10 s idle,
/// every 2 s, 3 unanswered close it. And no Nagle delay: Raft's messages are small and
/// latency is its heartbeat.
/// `TCP_USER_TIMEOUT` of cluster sockets, in ms (see [`tune_socket`]).
const UNACKED_TIMEOUT_MS: u32 = 3000;

fn tune_socket(stream: &glommio::net::TcpStream) -> std::io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt};
    use std::os::fd::{AsRawFd, BorrowedFd};
    stream.set_nodelay(true)?;
    // SAFETY: the descriptor belongs to `stream`, which outlives this borrow.
    let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    setsockopt(&fd, sockopt::KeepAlive, &true)?;
    setsockopt(&fd, sockopt::TcpKeepIdle, &10)?;
    setsockopt(&fd, sockopt::TcpKeepInterval, &2)?;
    setsockopt(&fd, sockopt::TcpKeepCount, &3)?;
    // Data the peer has not acknowledged for this long aborts the connection, and the
    // kernel drops what it still held: without it, TCP retransmits for minutes, and a
    // message written while the link was down (a forwarded proposal its proposer has since
    // given up on) reaches the peer when the link comes back.
    setsockopt(&fd, sockopt::TcpUserTimeout, &UNACKED_TIMEOUT_MS)?;
    Ok(())
}
