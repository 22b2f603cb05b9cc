//! A deterministic cluster for the driver's tests: real raft-rs, real `RaftStore` files in
//! a temporary directory per node, and an in-memory network that delivers, drops (seeded)
//! and cuts messages. One round is one tick of every live node followed by a few passes of
//! "handle ready, deliver". Delivery, drops and cuts follow the seed; raft-rs draws each
//! election timeout from `rand::thread_rng` (it takes no seed), so which node wins an
//! election can differ between runs, and the tests assert what holds for any winner.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::PathBuf;

use raft::eraftpb::{Message, MessageType};

use super::{Controller, DriverConfig, DriverError, Event, VoterChange};
use crate::cluster::NodeId;
use crate::cluster::controller::raft_store::{RaftStore, controller_dir};
use crate::cluster::controller::state::Command;

/// Delivery passes per round: enough for a vote or an append and its answer to travel
/// within one tick, as on a LAN with 100 ms ticks.
const PASSES: usize = 4;

pub(super) struct Sim {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    voters: Vec<NodeId>,
    nodes: BTreeMap<NodeId, Option<Controller>>,
    config: DriverConfig,
    rng: u64,
    /// Messages dropped per thousand.
    pub drop_per_mille: u64,
    /// Nodes cut off: nothing reaches them, nothing they send leaves.
    cut: BTreeSet<NodeId>,
    queue: VecDeque<Message>,
    /// Every event each node produced, across its restarts.
    pub events: BTreeMap<NodeId, Vec<Event>>,
    next_proposal: u64,
}

impl Sim {
    pub fn new(n: u16, seed: u64, config: DriverConfig) -> Sim {
        let tmp = tempfile::tempdir().unwrap();
        let voters: Vec<NodeId> = (1..=n).map(NodeId).collect();
        let mut sim = Sim {
            root: tmp.path().to_path_buf(),
            _tmp: tmp,
            nodes: BTreeMap::new(),
            events: voters.iter().map(|v| (*v, Vec::new())).collect(),
            voters,
            config,
            rng: seed,
            drop_per_mille: 0,
            cut: BTreeSet::new(),
            queue: VecDeque::new(),
            next_proposal: 1,
        };
        for id in sim.voters.clone() {
            sim.restart(id);
        }
        sim
    }

    pub fn voters(&self) -> Vec<NodeId> {
        self.voters.clone()
    }

    /// Opens node `id` from its files (its first start sets them up; a node that was not
    /// an initial voter opens as a joining one).
    pub fn restart(&mut self, id: NodeId) {
        let dir = controller_dir(&self.root.join(format!("node{}", id.0)));
        let store = RaftStore::open(&dir).unwrap();
        let config = self.config.clone();
        let node = match self.voters.contains(&id) {
            true => Controller::open(id, &self.voters, store, config),
            false => Controller::join(id, store, config),
        };
        self.nodes.insert(id, Some(node.unwrap()));
    }

    /// Starts node `id`, not an initial voter, on an empty store: it waits to be added.
    pub fn join(&mut self, id: NodeId) {
        self.events.entry(id).or_default();
        self.restart(id);
    }

    /// Proposes `change` on node `on`; the proposal id.
    pub fn propose_voters(&mut self, on: NodeId, change: VoterChange) -> Result<u64, DriverError> {
        let proposal = self.next_proposal;
        self.next_proposal += 1;
        self.node_mut(on).propose_voter_change(change, proposal)?;
        Ok(proposal)
    }

    /// Stops node `id` at once (its files stay as the last write left them).
    pub fn crash(&mut self, id: NodeId) {
        self.nodes.insert(id, None);
    }

    pub fn isolate(&mut self, id: NodeId) {
        self.cut.insert(id);
    }

    pub fn heal(&mut self, id: NodeId) {
        self.cut.remove(&id);
    }

    pub fn node(&self, id: NodeId) -> &Controller {
        self.nodes[&id].as_ref().expect("node is running")
    }

    pub fn node_mut(&mut self, id: NodeId) -> &mut Controller {
        self.nodes
            .get_mut(&id)
            .unwrap()
            .as_mut()
            .expect("node is running")
    }

    pub fn live(&self) -> impl Iterator<Item = &Controller> {
        self.nodes.values().flatten()
    }

    /// The running node that leads at the highest term, if any.
    pub fn leader(&self) -> Option<NodeId> {
        self.live()
            .filter(|n| n.is_leader())
            .max_by_key(|n| n.term())
            .map(|n| n.node())
    }

    /// One tick everywhere, then messages until quiet (or `PASSES` rounds of them).
    pub fn round(&mut self) {
        for node in self.nodes.values_mut().flatten() {
            node.tick();
        }
        for _ in 0..PASSES {
            self.ready_all();
            if self.queue.is_empty() {
                break;
            }
            self.deliver();
        }
        self.ready_all();
    }

    /// Rounds until `done` holds; how many it took, or `None` after `max`.
    pub fn run_until(&mut self, max: u64, done: impl Fn(&Sim) -> bool) -> Option<u64> {
        for round in 0..=max {
            if done(self) {
                return Some(round);
            }
            self.round();
        }
        None
    }

    pub fn rounds(&mut self, n: u64) {
        for _ in 0..n {
            self.round();
        }
    }

    /// Handles every running node's ready, keeping its events and queueing its messages.
    pub fn ready_all(&mut self) {
        for (id, node) in self.nodes.iter_mut() {
            let Some(node) = node else { continue };
            let events = node.handle_ready().unwrap();
            self.events.get_mut(id).unwrap().extend(events);
            self.queue.extend(node.take_messages());
        }
    }

    fn deliver(&mut self) {
        let queue = std::mem::take(&mut self.queue);
        for m in queue {
            let (from, to) = (node_of(m.from), node_of(m.to));
            let lost = self.cut.contains(&from) || self.cut.contains(&to) || self.roll_drop();
            let Some(Some(target)) = self.nodes.get_mut(&to) else {
                continue; // a crashed node
            };
            if !lost {
                // A message from outside the group is refused by raft-rs: not a test failure.
                let _ = target.step(m);
                continue;
            }
            if m.msg_type == MessageType::MsgSnapshot
                && let Some(Some(sender)) = self.nodes.get_mut(&from)
            {
                sender.report_snapshot(to, false);
            }
        }
    }

    fn roll_drop(&mut self) -> bool {
        if self.drop_per_mille == 0 {
            return false;
        }
        // splitmix64: a seeded, dependency-free sequence.
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % 1000 < self.drop_per_mille
    }

    /// Proposes through the current leader; the proposal id.
    pub fn propose(&mut self, command: &Command) -> Result<(NodeId, u64), DriverError> {
        let leader = self
            .leader()
            .ok_or(DriverError::NotLeader { leader: None })?;
        let proposal = self.next_proposal;
        self.next_proposal += 1;
        self.node_mut(leader).propose(command, proposal)?;
        Ok((leader, proposal))
    }

    /// Proposes `command` until it is applied on the node that proposed it (a proposal
    /// lost with a leader change is proposed again); its index.
    pub fn commit(&mut self, command: &Command) -> u64 {
        for _attempt in 0..20 {
            if self.run_until(100, |s| s.leader().is_some()).is_none() {
                continue;
            }
            let Ok((leader, proposal)) = self.propose(command) else {
                continue;
            };
            let applied = |s: &Sim| applied_index(&s.events[&leader], proposal);
            if self.run_until(50, |s| applied(s).is_some()).is_some() {
                return applied(self).unwrap();
            }
        }
        panic!("{command:?} was not committed in 20 attempts");
    }

    /// Rounds until every running node has applied up to the same index.
    pub fn converge(&mut self, max: u64) -> Option<u64> {
        self.run_until(max, |s| {
            let applied: BTreeSet<u64> = s.live().map(|n| n.applied()).collect();
            let leader_applied = s.leader().map(|l| s.node(l).applied());
            applied.len() == 1 && leader_applied.is_some()
        })
    }
}

/// Where the proposal `proposal` was applied, in one node's events.
pub(super) fn applied_index(events: &[Event], proposal: u64) -> Option<u64> {
    events.iter().find_map(|e| match e {
        Event::Applied {
            index,
            proposal: Some(p),
            ..
        } if *p == proposal => Some(*index),
        _ => None,
    })
}

fn node_of(raft_id: u64) -> NodeId {
    NodeId::from_raft_id(raft_id).expect("a member's raft id")
}
