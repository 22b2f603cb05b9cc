//! This node's replicas on one core (docs/REPLICATION.md, "Where a replica runs"): each
//! replica is a [`ReplicaDriver`] driven by a task of its own on the partition's core,
//! next to its log. The task steps what peers send, ticks every [`TICK`], writes what
//! raft-rs has ready and sends what it says; a produce proposes on the leader through the
//! same replica, one at a time with the task's rounds (a round's write does not hold the
//! driver, so the produce path can read outcomes meanwhile).
//!
//! Messages: the node's one transport is on core 0. A peer's message for a group arrives
//! there and is handed to the replica's core ([`ReplicaEnvelope::In`], over the replica
//! mesh, moved and not copied); a replica's messages go to core 0 the other way
//! ([`ReplicaEnvelope::Out`]). A message for a group with no replica here, or one that
//! finds a full inbox, is dropped: Raft sends again.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use futures_lite::future::BoxedLocal;
use glommio::channels::channel_mesh::Senders;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use raft::eraftpb::Message;
use tracing::{debug, info, warn};

use super::directory::KnownLeader;
use super::driver::{ProposeError, ReplicaDriver};
use super::storage::ReplicaStorage;
use crate::cluster::NodeId;
use crate::cluster::status::ClusterView;
use crate::cluster::transport::TransportSender;
use crate::shard::ShardError;
use crate::shard::placement::ReplicaSet;
use crate::shard::replicated::{Outcome, Proposal, Replicated};
use crate::storage::PartitionLog;
use crate::watch::Watch;

/// How often a replica ticks raft-rs: elections after 6 to 12 ticks without a leader,
/// heartbeats every 2. Shorter than the controller's 10 (a partition's failover is what
/// producers wait for: median 1.9 s with 10 measured by scripts/replication_failover.py);
/// three heartbeats per election timeout still ride out a lost one.
pub const TICK: Duration = Duration::from_millis(100);
const ELECTION_TICKS: usize = 6;
const HEARTBEAT_TICKS: usize = 2;
/// Largest append message to a follower, and most appends in flight to one.
const MAX_SIZE_PER_MSG: u64 = 1 << 20;
const MAX_INFLIGHT_MSGS: usize = 4096;
/// Messages from peers waiting for one replica at most.
const INBOX_CAPACITY: usize = 1024;
/// Messages stepped in one round before the replica writes and answers.
const STEPS_PER_ROUND_MAX: usize = 256;

/// A partition group's message between this node's cores.
#[derive(Debug)]
pub enum ReplicaEnvelope {
    /// From a peer, for the replica of `group` on the core it is sent to.
    In { group: u64, message: Message },
    /// From a replica, for core 0 to send to the node the message names.
    Out { group: u64, message: Message },
}

/// This core's replicas, and its way to the node's transport.
pub struct ReplicaHost {
    me: NodeId,
    core: usize,
    view: Arc<ClusterView>,
    /// The replica mesh (`None` with one core).
    senders: Option<Senders<ReplicaEnvelope>>,
    /// On core 0, once the node's transport started.
    transport: RefCell<Option<TransportSender>>,
    inboxes: RefCell<HashMap<u64, LocalSender<Message>>>,
    this: Weak<ReplicaHost>,
}

impl ReplicaHost {
    pub fn new(
        me: NodeId,
        core: usize,
        view: Arc<ClusterView>,
        senders: Option<Senders<ReplicaEnvelope>>,
    ) -> Rc<ReplicaHost> {
        Rc::new_cyclic(|this| ReplicaHost {
            me,
            core,
            view,
            senders,
            transport: RefCell::new(None),
            inboxes: RefCell::new(HashMap::new()),
            this: this.clone(),
        })
    }

    /// On core 0: the node's transport, once it started.
    pub fn set_transport(&self, transport: TransportSender) {
        *self.transport.borrow_mut() = Some(transport);
    }

    /// A peer's message for `group` (on core 0 from the transport, or from core 0 over the
    /// mesh): to the replica when it is on this core, else to its core.
    pub fn deliver(&self, group: u64, message: Message) {
        if let Some(inbox) = self.inboxes.borrow().get(&group) {
            if inbox.try_send(message).is_err() {
                debug!(group, "replica inbox full; message dropped");
            }
            return;
        }
        let Some(core) = self.view.replicas.core_of(group) else {
            debug!(
                group,
                "no replica of this group on this node; message dropped"
            );
            return;
        };
        let core = usize::from(core);
        if core != self.core {
            self.to_core(core, ReplicaEnvelope::In { group, message });
        }
    }

    /// A replica's message for a peer: sent by the transport on core 0.
    fn send(&self, group: u64, message: Message) {
        if self.core != 0 {
            self.to_core(0, ReplicaEnvelope::Out { group, message });
            return;
        }
        let Some(to) = NodeId::from_raft_id(message.to) else {
            return;
        };
        match &*self.transport.borrow() {
            Some(transport) => {
                if let Err(error) = transport.send(to, group, &message) {
                    debug!(group, to = to.0, %error, "replica message not sent");
                }
            }
            None => debug!(
                group,
                "the transport is not up yet; replica message dropped"
            ),
        }
    }

    /// Hands every envelope the other cores send to this one.
    pub fn start_receivers(
        self: &Rc<Self>,
        mut receivers: glommio::channels::channel_mesh::Receivers<ReplicaEnvelope>,
    ) {
        for (_peer, receiver) in receivers.streams() {
            let host = Rc::clone(self);
            glommio::spawn_local(async move {
                while let Some(envelope) = receiver.recv().await {
                    host.received(envelope);
                }
            })
            .detach();
        }
    }

    /// An envelope from another core's replica mesh.
    pub fn received(&self, envelope: ReplicaEnvelope) {
        match envelope {
            ReplicaEnvelope::In { group, message } => self.deliver(group, message),
            ReplicaEnvelope::Out { group, message } => self.send(group, message),
        }
    }

    fn to_core(&self, core: usize, envelope: ReplicaEnvelope) {
        let Some(senders) = &self.senders else {
            return;
        };
        if let Err(error) = senders.try_send_to(core, envelope) {
            debug!(core, %error, "replica mesh full or closed; message dropped");
        }
    }

    fn raft_config(&self) -> raft::Config {
        raft::Config {
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            max_size_per_msg: MAX_SIZE_PER_MSG,
            max_inflight_msgs: MAX_INFLIGHT_MSGS,
            pre_vote: true,
            check_quorum: true,
            ..raft::Config::default()
        }
    }
}

impl crate::shard::replicated::ReplicaHost for ReplicaHost {
    fn start(
        &self,
        topic: &str,
        partition: u32,
        set: &ReplicaSet,
        log: Rc<PartitionLog>,
    ) -> Result<Rc<dyn Replicated>, ShardError> {
        let failed = |e: &dyn std::fmt::Display| {
            ShardError::internal(format!("{topic}/{partition}: replica: {e}"))
        };
        let storage = ReplicaStorage::open(log).map_err(|e| failed(&e))?;
        let voters: Vec<u64> = set.places.iter().map(|p| u64::from(p.node.0)).collect();
        let known = raft::Storage::initial_state(&storage).map_err(|e| failed(&e))?;
        if known.conf_state.voters.is_empty() {
            storage.initialize(&voters).map_err(|e| failed(&e))?;
        }
        let driver = ReplicaDriver::new(self.me.raft_id(), storage, &self.raft_config())
            .map_err(|e| failed(&e))?;
        let (inbox_tx, inbox) = local_channel::new_bounded(INBOX_CAPACITY);
        let replica = Rc::new(Replica {
            group: set.group,
            topic: topic.to_string(),
            partition,
            driver: RefCell::new(driver),
            lock: glommio::sync::Semaphore::new(1),
            wake: Watch::default(),
            moved: Watch::default(),
            stopped: Cell::new(false),
        });
        self.inboxes.borrow_mut().insert(set.group, inbox_tx);
        let core = u16::try_from(self.core).expect("cores fit a u16");
        self.view.replicas.open(set.group, core);
        info!(topic, partition, group = set.group, voters = ?voters, "replica started");
        let host = self.this.upgrade().expect("the host outlives its calls");
        glommio::spawn_local(run(host, Rc::clone(&replica), inbox)).detach();
        Ok(Rc::new(Handle(replica)))
    }
}

/// One replica: its Raft node and what its task and the produce path share.
struct Replica {
    group: u64,
    topic: String,
    partition: u32,
    driver: RefCell<ReplicaDriver>,
    /// One task round or one produce's proposals at a time: raft-rs takes no proposal
    /// between a `Ready` and its `advance`.
    lock: glommio::sync::Semaphore,
    /// Notified when a produce proposed: the task writes and sends at once.
    wake: Watch,
    /// Notified after each round (the commit or the leadership may have moved).
    moved: Watch,
    stopped: Cell<bool>,
}

/// The shard's handle on a replica.
struct Handle(Rc<Replica>);

impl Replicated for Handle {
    fn log(&self) -> Rc<PartitionLog> {
        self.0.driver.borrow().store().log()
    }

    fn propose(&self, batches: Vec<Vec<u8>>) -> BoxedLocal<Result<Vec<Proposal>, ShardError>> {
        let replica = Rc::clone(&self.0);
        Box::pin(async move {
            let Ok(_permit) = replica.lock.acquire_permit(1).await else {
                return Err(ShardError::shutting_down("the replica stopped"));
            };
            let mut driver = replica.driver.borrow_mut();
            let mut proposals = Vec::with_capacity(batches.len());
            let mut refused = None;
            for batch in &batches {
                match driver.propose(batch) {
                    Ok(proposal) => proposals.push(proposal),
                    Err(e) => {
                        refused = Some(replica.refusal(e));
                        break;
                    }
                }
            }
            drop(driver);
            // Those proposed before a refusal stay proposed: the task writes them.
            if !proposals.is_empty() {
                replica.wake.notify_all();
            }
            match refused {
                Some(refusal) => Err(refusal),
                None => Ok(proposals),
            }
        })
    }

    fn outcome(&self, proposal: &Proposal) -> Outcome {
        self.0.driver.borrow().outcome(proposal)
    }

    fn term(&self) -> u64 {
        self.0.driver.borrow().term()
    }

    fn serves_reads(&self) -> bool {
        self.0.driver.borrow().serves_reads()
    }

    fn changed(&self) -> BoxedLocal<()> {
        let replica = Rc::clone(&self.0);
        Box::pin(async move {
            if !replica.stopped.get() {
                replica.moved.changed().await;
            }
        })
    }

    fn stop(&self) {
        self.0.stop();
    }
}

impl Replica {
    fn stop(&self) {
        self.stopped.set(true);
        self.wake.notify_all();
        self.moved.notify_all();
    }

    fn refusal(&self, error: ProposeError) -> ShardError {
        match error {
            ProposeError::NotLeader { leader } => ShardError::NotLeader {
                topic: self.topic.clone(),
                partition: self.partition,
                leader: leader.map_or_else(|| "not known".to_string(), |l| format!("node {l}")),
            },
            ProposeError::BadBatch { reason } => ShardError::malformed(reason),
            ProposeError::Refused { reason } => ShardError::NotReplicated {
                topic: self.topic.clone(),
                partition: self.partition,
                reason,
            },
        }
    }
}

/// The replica's task: steps, ticks, writes and sends until the replica stops.
async fn run(host: Rc<ReplicaHost>, replica: Rc<Replica>, inbox: LocalReceiver<Message>) {
    let mut next_tick = Instant::now() + TICK;
    let mut known: Option<KnownLeader> = None;
    while !replica.stopped.get() {
        let wait = next_tick.saturating_duration_since(Instant::now());
        let first = async { inbox.recv().await }
            .or(async {
                replica.wake.changed().await;
                None
            })
            .or(async {
                glommio::timer::sleep(wait).await;
                None
            })
            .await;
        if replica.stopped.get() {
            break;
        }
        let Ok(permit) = replica.lock.acquire_permit(1).await else {
            break;
        };
        let committed = replica.driver.borrow().committed();
        step_all(&replica, first, &inbox).await;
        let now = Instant::now();
        if now >= next_tick {
            replica.driver.borrow_mut().tick();
            next_tick = (next_tick + TICK).max(now);
        }
        // Followers' acknowledgements move a leader's commit as they are stepped: the
        // produces they complete are answered now, not after this round's write.
        if replica.driver.borrow().committed() != committed {
            replica.moved.notify_all();
        }
        if let Err(error) = write_ready(&host, &replica).await {
            warn!(topic = %replica.topic, partition = replica.partition, %error, "replica write failed; the replica stops (restart the broker to recover it)");
            replica.stop();
        }
        drop(permit);
        known = publish_leader(&host, &replica, known);
        replica.moved.notify_all();
    }
    host.inboxes.borrow_mut().remove(&replica.group);
    host.view.replicas.close(replica.group);
    replica.moved.notify_all();
    debug!(topic = %replica.topic, partition = replica.partition, "replica stopped");
}

async fn step_all(replica: &Replica, first: Option<Message>, inbox: &LocalReceiver<Message>) {
    let mut got = first;
    let mut steps = 0;
    while let Some(message) = got {
        // A message raft-rs refuses (a stale term, a node outside the group) is its
        // business; it is only logged.
        if let Err(error) = replica.driver.borrow_mut().step(message) {
            debug!(group = replica.group, %error, "replica message not stepped");
        }
        steps += 1;
        got = match steps < STEPS_PER_ROUND_MAX {
            true => futures_lite::future::poll_once(inbox.recv())
                .await
                .flatten(),
            false => None,
        };
    }
}

/// Writes what raft-rs has ready and sends what depends on it, round after round, the
/// driver not held while the disk works.
async fn write_ready(
    host: &ReplicaHost,
    replica: &Replica,
) -> Result<(), super::storage::ReplicaError> {
    loop {
        let round = replica.driver.borrow_mut().begin_ready();
        send_all(host, replica);
        let Some(round) = round else {
            return Ok(());
        };
        let storage = replica.driver.borrow().shared_store();
        round.persist(&storage).await?;
        replica.driver.borrow_mut().finish_ready(round)?;
        send_all(host, replica);
    }
}

fn send_all(host: &ReplicaHost, replica: &Replica) {
    let messages = replica.driver.borrow_mut().take_messages();
    for message in messages {
        host.send(replica.group, message);
    }
}

/// Tells the node's cores (and so its clients' routes) the leader this replica knows.
fn publish_leader(
    host: &ReplicaHost,
    replica: &Replica,
    known: Option<KnownLeader>,
) -> Option<KnownLeader> {
    let driver = replica.driver.borrow();
    let now = driver
        .leader()
        .and_then(NodeId::from_raft_id)
        .map(|node| KnownLeader {
            node,
            term: driver.term(),
        });
    if now != known {
        host.view.replicas.set_leader(replica.group, now);
        if let Some(leader) = now {
            info!(topic = %replica.topic, partition = replica.partition, leader = leader.node.0, term = leader.term, "replica leader");
        }
    }
    now
}
