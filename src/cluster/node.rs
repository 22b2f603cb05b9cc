//! A node's membership at run time: the transport and the controller on one glommio
//! executor (core 0 of `serve`), driven by one task.
//!
//! The task ticks the controller every [`DriverConfig::tick`], steps what peers send,
//! proposes this node's `RegisterNode` until the applied state has it (forwarded to the
//! leader by raft-rs when this node is a follower), and on the leader marks peers down or
//! up from what raft-rs heard of them. After each round it publishes what it knows to the
//! [`ClusterView`] the other cores read.
//!
//! The controller's store writes with blocking `std::fs` calls (fdatasync included), so
//! [`Controller::handle_ready`] runs on glommio's blocking thread pool
//! (`spawn_blocking`): the controller moves to a pool thread for the writes and back, and
//! core 0 keeps serving clients meanwhile. Ticks and steps touch memory only and stay on
//! the executor.

mod hints;
mod peers;
mod propose;
#[cfg(test)]
mod tests;
mod view;

use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use tracing::{debug, info, warn};

use crate::cluster::config::ClusterConfig;
use crate::cluster::controller::driver::{Controller, DriverConfig, DriverError, Event};
use crate::cluster::controller::raft_store::{RaftStore, controller_dir};
use crate::cluster::controller::state::Command;
use crate::cluster::identity::{self, ClusterIdError};
use crate::cluster::status::{ClusterView, Snapshot};
use crate::cluster::transport::{
    Received, Transport, TransportConfig, TransportError, TransportSender,
};
use crate::cluster::wire::CONTROLLER_GROUP;
use crate::cluster::{ClusterId, NodeId};

pub use propose::{PROPOSE_TIMEOUT, ProposeError, Proposer};
use view::status_of;
pub(crate) use view::{members_of, owners_of};

/// What the node's topics must follow, sent by the driver once the view shows it: a topic
/// the controller deleted, or any other change of its topics (the receiver compares the
/// view's topics with the ones it has).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicChange {
    Deleted(String),
    Changed,
}

/// Topic changes waiting for the node's topic task at most; `Changed` is dropped when
/// full (one is enough), a lost `Deleted` is logged.
const TOPIC_CHANGES_MAX: usize = 1024;
/// Messages from peers waiting for the driver at most.
const INBOX_CAPACITY: usize = 4096;
/// Messages stepped in one round before the driver persists and answers.
const STEPS_PER_ROUND_MAX: usize = 256;
/// How often a proposal this node still waits for is made again (a forwarded one is lost
/// when the leader changes).
const RETRY_EVERY: Duration = Duration::from_secs(1);
/// A peer the leader has not heard from for this long is marked down (3 election timeouts
/// of the defaults: raft-rs clears what it heard once per election timeout).
const DOWN_AFTER: Duration = Duration::from_secs(3);
/// Longest wait for the driver to finish its round at shutdown.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// What a node needs to join its cluster.
#[derive(Debug, Clone)]
pub struct NodeSetup {
    pub cluster: ClusterConfig,
    pub data_dir: PathBuf,
    /// Where clients reach this node (`HOST:PORT`).
    pub client_addr: String,
    pub cores: u16,
    pub driver: DriverConfig,
}

/// Why the node could not join (or its controller stopped).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error(transparent)]
    ClusterId(#[from] ClusterIdError),
    #[error(transparent)]
    Transport(#[from] TransportError),
    #[error("controller: {0}")]
    Driver(#[from] DriverError),
    #[error(
        "this data directory belongs to cluster {ours}, but nodes {nodes} of --cluster-peers are in cluster {theirs}: it is another cluster's data directory (or this node formed a cluster with another --cluster-peers); give the node an empty data directory, or start it with its own cluster's flags (a node added to a running cluster with `pagurus cluster add-node` starts with --cluster-join and the id that printed)"
    )]
    ForeignCluster {
        ours: ClusterId,
        theirs: ClusterId,
        nodes: String,
    },
}

/// How long a start waits for the peers' hellos to tell whether they are of this node's
/// cluster: a node whose peers are all of one other cluster is refused
/// ([`NodeError::ForeignCluster`]). Returns at the first hello of its own cluster (in
/// milliseconds when a peer is up); a node whose peers are all down waits it out and
/// starts.
const FIRST_CONTACT_WAIT: Duration = Duration::from_secs(2);

/// Waits (at most [`FIRST_CONTACT_WAIT`]) for the peers' hellos; an error when a quorum of
/// them is of another cluster.
async fn check_peers_cluster(transport: &Transport, ours: ClusterId) -> Result<(), NodeError> {
    use crate::cluster::transport::PeerClusters;
    let deadline = Instant::now() + FIRST_CONTACT_WAIT;
    loop {
        match transport.peer_clusters() {
            PeerClusters::Own => return Ok(()),
            PeerClusters::Foreign { theirs, nodes } => {
                let nodes: Vec<String> = nodes.iter().map(|n| n.0.to_string()).collect();
                return Err(NodeError::ForeignCluster {
                    ours,
                    theirs,
                    nodes: nodes.join(", "),
                });
            }
            PeerClusters::Unknown if Instant::now() >= deadline => return Ok(()),
            PeerClusters::Unknown => glommio::timer::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// A running node; [`ClusterNode::stop`] ends it.
pub struct ClusterNode {
    stop: Rc<std::cell::Cell<bool>>,
    task: glommio::task::JoinHandle<()>,
    done: Rc<std::cell::Cell<bool>>,
    pub cluster_id: ClusterId,
    pub listen: std::net::SocketAddr,
    pub proposer: Proposer,
    changes: Option<LocalReceiver<TopicChange>>,
    partitions: Option<(TransportSender, LocalReceiver<Received>)>,
}

impl ClusterNode {
    /// Keeps the cluster id, opens the controller's store (both on the blocking pool),
    /// binds `--cluster-listen` and starts the driver. Call it on the executor that is to
    /// run them.
    pub async fn start(setup: NodeSetup, view: Arc<ClusterView>) -> Result<ClusterNode, NodeError> {
        let me = setup.cluster.node;
        let voters = setup.cluster.members();
        let (data_dir, peers, config, join) = (
            setup.data_dir.clone(),
            setup.cluster.peers.clone(),
            setup.driver.clone(),
            setup.cluster.join,
        );
        let opened = glommio::executor()
            .spawn_blocking(move || -> Result<_, NodeError> {
                let (id, made) = identity::load_or_create(&data_dir, &peers, join)?;
                let store =
                    RaftStore::open(&controller_dir(&data_dir)).map_err(DriverError::from)?;
                // A node that joined a running cluster (now or at an earlier start, its
                // id not its flags') never takes its flags as the voters: it waits for
                // the leader's snapshot (on a store set up before, both open it as is).
                let controller = if join.is_some() || id != identity::derive(&peers) {
                    Controller::join(me, store, config)?
                } else {
                    Controller::open(me, &voters, store, config)?
                };
                Ok((id, made, controller))
            })
            .await;
        let (cluster_id, made, controller) = opened?;
        let transport =
            Transport::start(TransportConfig::from_cluster(&setup.cluster, cluster_id))?;
        check_peers_cluster(&transport, cluster_id).await?;
        let listen = transport.local_addr();
        info!(node = me.0, %cluster_id, new = made, cluster_listen = %listen, voters = setup.cluster.peers.len(), term = controller.term(), applied = controller.applied(), "cluster node starting");
        let rx = transport.register(CONTROLLER_GROUP, INBOX_CAPACITY);
        let partitions = (
            transport.sender(),
            transport.register_partitions(INBOX_CAPACITY),
        );
        let stop = Rc::new(std::cell::Cell::new(false));
        let done = Rc::new(std::cell::Cell::new(false));
        let (proposer, requests) = Proposer::new();
        let (changes_tx, changes) = local_channel::new_bounded(TOPIC_CHANGES_MAX);
        let driver = Driver::new(&setup, controller, transport, view, changes_tx);
        let (stop2, done2) = (Rc::clone(&stop), Rc::clone(&done));
        let task = glommio::spawn_local(async move {
            if let Err(error) = driver.run(rx, requests, &stop2).await {
                tracing::error!(%error, "the controller stopped; this node takes no part in the cluster until restarted");
            }
            done2.set(true);
        })
        .detach();
        Ok(ClusterNode {
            stop,
            task,
            done,
            cluster_id,
            listen,
            proposer,
            changes: Some(changes),
            partitions: Some(partitions),
        })
    }

    /// Partition groups' messages from peers, and a way to send theirs (once: a second
    /// call gets `None`): for the node's replicas (`cluster::replica::host`).
    pub fn take_partitions(&mut self) -> Option<(TransportSender, LocalReceiver<Received>)> {
        self.partitions.take()
    }

    /// The topic changes to follow (once: a second call gets `None`).
    pub fn take_changes(&mut self) -> Option<LocalReceiver<TopicChange>> {
        self.changes.take()
    }

    /// Stops the driver after its current round (its store's writes finish first) and
    /// closes the transport; waits at most [`STOP_TIMEOUT`].
    pub async fn stop(self) {
        self.stop.set(true);
        let deadline = Instant::now() + STOP_TIMEOUT;
        while !self.done.get() && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
        if self.done.get() {
            info!("controller stopped");
        } else {
            warn!(timeout = ?STOP_TIMEOUT, "controller did not stop in time; left behind");
            self.task.cancel();
        }
    }
}

/// The driver task's state.
struct Driver {
    me: NodeId,
    /// `None` only while the blocking pool holds it.
    controller: Option<Controller>,
    transport: Transport,
    view: Arc<ClusterView>,
    tick: Duration,
    register: Command,
    register_sent: Option<Instant>,
    next_proposal: u64,
    seen: (Option<NodeId>, u64),
    leader_changes: u64,
    /// On the leader: when each peer was last heard from, and when its liveness was last
    /// proposed.
    heard: HashMap<NodeId, Instant>,
    liveness_sent: HashMap<NodeId, Instant>,
    waiting: propose::Waiting,
    changes: LocalSender<TopicChange>,
    /// Topic changes applied in this round, sent once the view shows them.
    pending: Vec<TopicChange>,
    /// The applied index the view's topics were built at.
    owners_at: Option<u64>,
    /// `--cluster-peers`: the addresses of members the controller's state has none for.
    flag_peers: Vec<crate::cluster::config::Peer>,
    /// The peers last given to the transport.
    peers: Vec<crate::cluster::config::Peer>,
    /// Whether this node saw itself out of the voters (removed), so it says so once.
    removed: bool,
    hints: hints::Hints,
}

impl Driver {
    fn new(
        setup: &NodeSetup,
        controller: Controller,
        transport: Transport,
        view: Arc<ClusterView>,
        changes: LocalSender<TopicChange>,
    ) -> Driver {
        let me = setup.cluster.node;
        let cluster_addr = setup
            .cluster
            .peers
            .iter()
            .find(|p| p.node == me)
            .map(|p| p.addr.to_host_port())
            .unwrap_or_else(|| setup.cluster.listen.to_string());
        Driver {
            me,
            controller: Some(controller),
            transport,
            view,
            tick: setup.driver.tick,
            register: Command::RegisterNode {
                id: me,
                client_addr: setup.client_addr.clone(),
                cluster_addr,
                cores: setup.cores,
            },
            register_sent: None,
            next_proposal: 1,
            seen: (None, 0),
            leader_changes: 0,
            heard: HashMap::new(),
            liveness_sent: HashMap::new(),
            waiting: propose::Waiting::default(),
            changes,
            pending: Vec::new(),
            owners_at: None,
            flag_peers: setup.cluster.peers.clone(),
            peers: setup.cluster.peers.clone(),
            removed: false,
            hints: hints::Hints::default(),
        }
    }

    fn current(&self) -> &Controller {
        self.controller
            .as_ref()
            .expect("the controller is back from the blocking pool")
    }

    fn controller(&mut self) -> &mut Controller {
        self.controller
            .as_mut()
            .expect("the controller is back from the blocking pool")
    }

    async fn run(
        mut self,
        rx: LocalReceiver<Received>,
        requests: LocalReceiver<propose::Request>,
        stop: &std::cell::Cell<bool>,
    ) -> Result<(), NodeError> {
        let mut next_tick = Instant::now() + self.tick;
        while !stop.get() {
            let wait = next_tick.saturating_duration_since(Instant::now());
            let first = future::or(async { Wake::Peer(rx.recv().await) }, async {
                future::or(async { Wake::Request(requests.recv().await) }, async {
                    glommio::timer::sleep(wait).await;
                    Wake::Tick
                })
                .await
            })
            .await;
            let mut got = match first {
                Wake::Peer(received) => received,
                Wake::Request(Some(request)) => {
                    let id = self.proposal_id();
                    self.waiting.start(id, request);
                    None
                }
                Wake::Request(None) | Wake::Tick => None,
            };
            let mut steps = 0;
            while let Some(received) = got {
                // A message raft-rs refuses (a stale term, a node outside the group) is
                // its business; it is only logged.
                if let Err(error) = self.controller().step(received.message) {
                    debug!(from = received.from.0, %error, "controller message not stepped");
                }
                steps += 1;
                got = match steps < STEPS_PER_ROUND_MAX {
                    true => future::poll_once(rx.recv()).await.flatten(),
                    false => None,
                };
            }
            let now = Instant::now();
            if now >= next_tick {
                self.controller().tick();
                // After a long stall, tick once and carry on rather than catch up in a burst.
                next_tick = (next_tick + self.tick).max(now);
            }
            self.propose_register(now);
            self.propose_liveness(now);
            self.propose_hints(now);
            self.waiting.expire(now);
            let controller = self.controller.as_mut().expect("the controller is here");
            self.waiting.propose(controller);
            self.ready().await?;
            self.publish();
            self.send_topic_changes();
        }
        info!(node = self.me.0, "controller stopping");
        Ok(())
    }

    /// Persists, applies and sends what raft-rs has ready, the store's writes on the
    /// blocking pool; again while a round makes more (a commit after an append).
    async fn ready(&mut self) -> Result<(), NodeError> {
        for _ in 0..4 {
            if !self.controller().has_ready() {
                break;
            }
            let mut controller = self.controller.take().expect("the controller is here");
            let (controller, result) = glommio::executor()
                .spawn_blocking(move || {
                    let result = controller.handle_ready();
                    (controller, result)
                })
                .await;
            self.controller = Some(controller);
            for event in result? {
                self.applied(event);
            }
            self.send();
        }
        Ok(())
    }

    fn send(&mut self) {
        for message in self.controller().take_messages() {
            let Some(to) = NodeId::from_raft_id(message.to) else {
                continue;
            };
            match self.transport.send(to, CONTROLLER_GROUP, &message) {
                Ok(()) => {}
                Err(TransportError::QueueFull { .. }) => self.controller().report_unreachable(to),
                Err(error) => debug!(to = to.0, %error, "controller message not sent"),
            }
        }
    }

    fn applied(&mut self, event: Event) {
        match event {
            Event::Applied {
                index,
                command,
                result,
                proposal,
            } => {
                if let (Command::DeleteTopic { name }, Ok(())) = (&command, &result) {
                    self.pending.push(TopicChange::Deleted(name.clone()));
                }
                if let Some(id) = proposal {
                    self.waiting.applied(id, result.clone());
                }
                if let Err(error) = &result {
                    debug!(index, ?command, %error, "controller command refused");
                } else if proposal.is_some() {
                    debug!(index, ?command, "controller command applied");
                }
            }
            Event::Restored { index } => info!(
                index,
                "controller state restored from the leader's snapshot"
            ),
            Event::VotersChanged {
                index,
                voters,
                proposal,
            } => {
                let ids: Vec<u16> = voters.iter().map(|v| v.0).collect();
                info!(index, voters = ?ids, "controller voters changed");
                if let Some(id) = proposal {
                    self.waiting.voters_applied(id, voters);
                }
            }
        }
    }

    /// Proposes this node's registration until the applied state has it as it is now.
    fn propose_register(&mut self, now: Instant) {
        let Command::RegisterNode {
            client_addr,
            cluster_addr,
            cores,
            ..
        } = &self.register
        else {
            return;
        };
        let me = self.me;
        let registered = self.current().state().node(me).is_some_and(|n| {
            n.live
                && &n.client_addr == client_addr
                && &n.cluster_addr == cluster_addr
                && n.cores == *cores
        });
        if registered || self.current().leader().is_none() || !due(self.register_sent, now) {
            return;
        }
        self.register_sent = Some(now);
        let (command, id) = (self.register.clone(), self.proposal_id());
        match self.controller().propose_anywhere(&command, id) {
            Ok(()) => info!(node = me.0, "registering with the controller"),
            Err(error) => debug!(%error, "registration not proposed yet"),
        }
    }

    /// On the leader: marks a registered peer down once nothing was heard from it for
    /// [`DOWN_AFTER`], and up again when it is heard.
    fn propose_liveness(&mut self, now: Instant) {
        let heard = self.current().peers_heard();
        if heard.is_empty() {
            self.heard.clear();
            return;
        }
        let mut changes = Vec::new();
        for (node, active) in heard {
            let last = self.heard.entry(node).or_insert(now);
            if active {
                *last = now;
            }
            let up = now.duration_since(*last) < DOWN_AFTER;
            let known = self.current().state().node(node).map(|n| n.live);
            if known.is_some_and(|live| live != up)
                && due(self.liveness_sent.get(&node).copied(), now)
            {
                changes.push((node, up));
            }
        }
        for (node, live) in changes {
            self.liveness_sent.insert(node, now);
            let id = self.proposal_id();
            match self
                .controller()
                .propose(&Command::SetLiveness { node, live }, id)
            {
                Ok(()) => info!(node = node.0, live, "proposing a peer's liveness"),
                Err(error) => debug!(node = node.0, %error, "liveness not proposed"),
            }
        }
    }

    fn proposal_id(&mut self) -> u64 {
        self.next_proposal += 1;
        self.next_proposal
    }

    /// Sends the topic changes the view now shows to the node's topic task.
    fn send_topic_changes(&mut self) {
        for change in self.pending.drain(..) {
            if let Err(error) = self.changes.try_send(change.clone())
                && change != TopicChange::Changed
            {
                warn!(?change, %error, "a topic change was not passed on; the node's topics may lag the controller's until restart");
            }
        }
    }

    /// Writes what this node knows to the shared view; logs a new leader or term.
    fn publish(&mut self) {
        let controller = self.controller.as_ref().expect("the controller is here");
        if self.owners_at != Some(controller.applied()) {
            self.owners_at = Some(controller.applied());
            self.view.set_owners(owners_of(controller.state()));
            self.view.set_members(members_of(controller.state()));
            self.pending.push(TopicChange::Changed);
            self.follow_members();
        }
        let controller = self.controller.as_ref().expect("the controller is here");
        let status = status_of(self.me, controller);
        if status.leader.is_some() && (status.leader, status.term) != self.seen {
            self.seen = (status.leader, status.term);
            self.leader_changes += 1;
            info!(
                term = status.term,
                leader = status.leader.map(|l| l.0),
                me = self.me.0,
                role = status.role.name(),
                "controller leader"
            );
        }
        self.view.publish(Snapshot {
            status,
            transport: self.transport.stats(),
            leader_changes: self.leader_changes,
        });
    }
}

/// What a driver round woke for.
enum Wake {
    Peer(Option<Received>),
    Request(Option<propose::Request>),
    Tick,
}

fn due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|t| now.duration_since(t) >= RETRY_EVERY)
}
