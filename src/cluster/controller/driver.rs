//! The controller's driver: raft-rs's `RawNode` over the durable [`RaftStore`], applying
//! committed entries to the [`ClusterState`]. Deterministic and runtime-free: the caller
//! calls [`Controller::tick`] every [`DriverConfig::tick`], hands it peers' messages with
//! [`Controller::step`], calls [`Controller::handle_ready`] after either, and sends what
//! [`Controller::take_messages`] returns. Nothing here reads a clock or a socket, so a test
//! drives a whole cluster in one thread, message by message.
//!
//! Pre-vote and check-quorum are on: a node cut off from the others cannot win even a
//! pre-vote, so it never raises its term and never deposes the leader when it returns; a
//! leader that loses touch with a quorum steps down within an election timeout, so a cut
//! off leader stops accepting changes.
//!
//! Timeouts (ticks of [`DriverConfig::tick`], 100 ms by default): heartbeats every 2 ticks
//! (200 ms); a follower that hears no leader for a random 10..20 ticks (1-2 s) starts a
//! pre-vote. A dead leader is replaced within about 2 s plus the rounds of a vote.
//!
//! `handle_ready` follows raft-rs's order: send the leader's messages, install a snapshot,
//! apply committed entries, append new entries, store the hard state, then send the
//! messages that depended on those writes (votes, append acknowledgements), so nothing is
//! promised to a peer before it is on disk.

use std::time::Duration;

use protobuf::Message as _;
use raft::eraftpb::{
    ConfChange, ConfChangeType, ConfChangeV2, Entry, EntryType, Message, Snapshot,
};
use raft::{Config, RawNode, SnapshotStatus, StateRole, Storage as _};

use super::raft_store::{RaftStore, RaftStoreError};
use super::state::encode::DecodeError;
use super::state::{ClusterState, Command, CommandError};
use crate::cluster::wire::CONTROLLER_GROUP;
use crate::cluster::{NodeId, raft_log};

/// The driver's knobs; [`DriverConfig::default`] is what a node runs with.
#[derive(Debug, Clone)]
pub struct DriverConfig {
    /// How often the caller ticks (the driver itself never reads a clock).
    pub tick: Duration,
    /// Ticks without a leader before a follower campaigns (raft-rs randomizes in
    /// `election_tick..2 * election_tick`).
    pub election_tick: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_tick: usize,
    /// Applied entries past the latest snapshot that make a new one (and compact the log).
    pub snapshot_every: u64,
    /// Largest append message to a follower, and most appends in flight to one.
    pub max_size_per_msg: u64,
    pub max_inflight_msgs: usize,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            tick: Duration::from_millis(100),
            election_tick: 10,
            heartbeat_tick: 2,
            snapshot_every: 1024,
            max_size_per_msg: 1024 * 1024,
            max_inflight_msgs: 256,
        }
    }
}

/// Why the controller could not go on (or a proposal was refused).
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    #[error(transparent)]
    Store(#[from] RaftStoreError),
    #[error("raft: {0}")]
    Raft(#[from] raft::Error),
    #[error("this node is not the controller leader (leader: {leader:?})")]
    NotLeader { leader: Option<NodeId> },
    #[error(transparent)]
    Refused(#[from] CommandError),
    /// A committed entry this build cannot read (one written by a newer build): the node
    /// stops applying rather than skip it and diverge.
    #[error("committed entry {index} does not decode: {source}")]
    BadEntry { index: u64, source: DecodeError },
    #[error("committed conf change {index} does not decode: {reason}")]
    BadConfChange { index: u64, reason: String },
    #[error("the snapshot at {index} does not decode: {source}")]
    BadSnapshot { index: u64, source: DecodeError },
    #[error("{node} is not among the initial voters {voters:?}")]
    NotAVoter { node: NodeId, voters: Vec<NodeId> },
    #[error(transparent)]
    Voters(#[from] VoterError),
}

/// What applying the committed log did, in log order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The command at `index` was applied (or refused, the same way on every node).
    /// `proposal` is the id this node proposed it under, when it did.
    Applied {
        index: u64,
        command: Command,
        result: Result<(), CommandError>,
        proposal: Option<u64>,
    },
    /// The state was replaced by the leader's snapshot at `index`.
    Restored { index: u64 },
    /// The change of the voters at `index` was applied: `voters` are the voters now.
    /// `proposal` is the id this node proposed it under, when it did.
    VotersChanged {
        index: u64,
        voters: Vec<NodeId>,
        proposal: Option<u64>,
    },
}

/// One node's member of the controller group.
pub struct Controller {
    node: NodeId,
    raw: RawNode<RaftStore>,
    state: ClusterState,
    applied: u64,
    config: DriverConfig,
    outbox: Vec<Message>,
    /// A node was added: snapshot at once, so the leader sends it a snapshot naming it.
    snapshot_due: bool,
}

impl Controller {
    /// Opens the controller on `store`; a store never set up gets `voters` as its first
    /// configuration. The state is the latest snapshot's; the committed entries after it
    /// are applied again by the first [`Controller::handle_ready`].
    pub fn open(
        node: NodeId,
        voters: &[NodeId],
        mut store: RaftStore,
        config: DriverConfig,
    ) -> Result<Controller, DriverError> {
        if !store.is_initialized() {
            if !voters.contains(&node) {
                return Err(DriverError::NotAVoter {
                    node,
                    voters: voters.to_vec(),
                });
            }
            let ids: Vec<u64> = voters.iter().map(|v| v.raft_id()).collect();
            store.initialize(&ids)?;
        }
        Controller::open_store(node, store, config)
    }

    /// Opens the controller on `store` as it is (set up, or without a configuration).
    fn open_store(
        node: NodeId,
        store: RaftStore,
        config: DriverConfig,
    ) -> Result<Controller, DriverError> {
        let snapshot = store.latest_snapshot();
        let applied = snapshot.get_metadata().index;
        let state = restore(snapshot)?;
        let raft_config = Config {
            id: node.raft_id(),
            election_tick: config.election_tick,
            heartbeat_tick: config.heartbeat_tick,
            applied,
            max_size_per_msg: config.max_size_per_msg,
            max_inflight_msgs: config.max_inflight_msgs,
            check_quorum: true,
            pre_vote: true,
            ..Config::default()
        };
        let logger = raft_log::logger(CONTROLLER_GROUP, node.raft_id());
        let raw = RawNode::new(&raft_config, store, &logger)?;
        Ok(Controller {
            node,
            raw,
            state,
            applied,
            config,
            outbox: Vec::new(),
            snapshot_due: false,
        })
    }

    pub fn node(&self) -> NodeId {
        self.node
    }

    /// The metadata as applied on this node.
    pub fn state(&self) -> &ClusterState {
        &self.state
    }

    /// The index of the last entry applied to [`Controller::state`].
    pub fn applied(&self) -> u64 {
        self.applied
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<NodeId> {
        NodeId::from_raft_id(self.raw.raft.leader_id)
    }

    pub fn store(&self) -> &RaftStore {
        self.raw.store()
    }

    /// One tick of [`DriverConfig::tick`].
    pub fn tick(&mut self) {
        self.raw.tick();
    }

    /// A message from a peer (raft-rs refuses one from a node outside the group).
    pub fn step(&mut self, message: Message) -> Result<(), DriverError> {
        if self.refuse_own_removal(&message) {
            return Ok(());
        }
        Ok(self.raw.step(message)?)
    }

    /// Proposes `command` under `proposal` (an id this node picks): refused at once when
    /// this node is not the leader or the command would be refused now; otherwise its
    /// outcome is an [`Event::Applied`] carrying `proposal`, once committed.
    pub fn propose(&mut self, command: &Command, proposal: u64) -> Result<(), DriverError> {
        if !self.is_leader() {
            return Err(DriverError::NotLeader {
                leader: self.leader(),
            });
        }
        self.state.check(command)?;
        self.append(command, proposal)
    }

    /// Proposes `command` from any node: on a follower raft-rs forwards it to the leader it
    /// knows (over the transport, as a `MsgPropose`), on the leader it is appended. Refused
    /// at once only when no leader is known or this node's own applied state refuses it;
    /// a forwarded proposal can still be lost (a leader change), so the caller retries
    /// until it sees the outcome in an [`Event::Applied`] carrying `proposal`.
    pub fn propose_anywhere(
        &mut self,
        command: &Command,
        proposal: u64,
    ) -> Result<(), DriverError> {
        if self.is_leader() {
            return self.propose(command, proposal);
        }
        if self.leader().is_none() {
            return Err(DriverError::NotLeader { leader: None });
        }
        self.state.check(command)?;
        self.append(command, proposal)
    }

    /// Hands `command` to raft-rs, its context naming this node and `proposal`.
    fn append(&mut self, command: &Command, proposal: u64) -> Result<(), DriverError> {
        let context = self.proposal_context(proposal);
        Ok(self.raw.propose(context, command.encode())?)
    }

    /// An entry's context: this node and the proposal id it picked.
    fn proposal_context(&self, proposal: u64) -> Vec<u8> {
        let mut context = Vec::with_capacity(10);
        context.extend_from_slice(&self.node.0.to_be_bytes());
        context.extend_from_slice(&proposal.to_be_bytes());
        context
    }

    /// Whether [`Controller::handle_ready`] has anything to persist, apply or send.
    pub fn has_ready(&self) -> bool {
        self.raw.has_ready()
    }

    /// This node's part in the group.
    pub fn role(&self) -> StateRole {
        self.raw.raft.state
    }

    /// On the leader, the peers raft-rs heard from since its last check-quorum round
    /// (`recent_active`, cleared every election timeout); empty elsewhere.
    pub fn peers_heard(&self) -> Vec<(NodeId, bool)> {
        if !self.is_leader() {
            return Vec::new();
        }
        self.raw
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != self.node.raft_id())
            .filter_map(|(id, pr)| Some((NodeId::from_raft_id(*id)?, pr.recent_active)))
            .collect()
    }

    /// Messages to send to peers (each names its destination in `to`).
    pub fn take_messages(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outbox)
    }

    /// The transport could not reach `node`: raft-rs slows its appends to it.
    pub fn report_unreachable(&mut self, node: NodeId) {
        self.raw.report_unreachable(node.raft_id());
    }

    /// Whether a snapshot sent to `node` arrived; on failure raft-rs sends another later.
    pub fn report_snapshot(&mut self, node: NodeId, delivered: bool) {
        let status = if delivered {
            SnapshotStatus::Finish
        } else {
            SnapshotStatus::Failure
        };
        self.raw.report_snapshot(node.raft_id(), status);
    }

    /// Persists, applies and queues what raft-rs has ready; returns what was applied.
    pub fn handle_ready(&mut self) -> Result<Vec<Event>, DriverError> {
        let mut events = Vec::new();
        if !self.raw.has_ready() {
            return Ok(events);
        }
        let mut ready = self.raw.ready();
        self.outbox.extend(ready.take_messages());
        if !ready.snapshot().is_empty() {
            let snapshot = ready.snapshot().clone();
            let index = snapshot.get_metadata().index;
            let state = restore(&snapshot)?;
            self.raw.mut_store().apply_snapshot(snapshot)?;
            (self.state, self.applied) = (state, index);
            events.push(Event::Restored { index });
        }
        self.apply(ready.take_committed_entries(), &mut events)?;
        self.raw.mut_store().append(ready.entries())?;
        if let Some(hs) = ready.hs() {
            self.raw.mut_store().set_hard_state(hs)?;
        }
        self.outbox.extend(ready.take_persisted_messages());
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().set_commit(commit)?;
        }
        self.outbox.extend(light.take_messages());
        self.apply(light.take_committed_entries(), &mut events)?;
        self.raw.advance_apply();
        self.maybe_snapshot()?;
        Ok(events)
    }

    fn apply(&mut self, entries: Vec<Entry>, events: &mut Vec<Event>) -> Result<(), DriverError> {
        for entry in entries {
            let index = entry.index;
            match entry.entry_type {
                EntryType::EntryNormal if entry.data.is_empty() => {} // a new leader's entry
                EntryType::EntryNormal => events.push(self.apply_command(&entry)?),
                EntryType::EntryConfChange => {
                    let cc = ConfChange::parse_from_bytes(&entry.data)
                        .map_err(|e| bad_conf_change(index, e))?;
                    self.snapshot_due |= cc.change_type == ConfChangeType::AddNode;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.raw.mut_store().set_conf_state(cs)?;
                    events.push(self.voters_changed(&entry));
                }
                EntryType::EntryConfChangeV2 => {
                    let cc = ConfChangeV2::parse_from_bytes(&entry.data)
                        .map_err(|e| bad_conf_change(index, e))?;
                    let cs = self.raw.apply_conf_change(&cc)?;
                    self.raw.mut_store().set_conf_state(cs)?;
                    events.push(self.voters_changed(&entry));
                }
            }
            self.applied = index;
        }
        Ok(())
    }

    fn voters_changed(&self, entry: &Entry) -> Event {
        Event::VotersChanged {
            index: entry.index,
            voters: self.voters(),
            proposal: self.proposal_of(&entry.context),
        }
    }

    fn apply_command(&mut self, entry: &Entry) -> Result<Event, DriverError> {
        let index = entry.index;
        let command = Command::decode(&entry.data)
            .map_err(|source| DriverError::BadEntry { index, source })?;
        let result = self.state.apply(command.clone());
        Ok(Event::Applied {
            index,
            command,
            result,
            proposal: self.proposal_of(&entry.context),
        })
    }

    /// The proposal id in an entry's context, when this node proposed it.
    fn proposal_of(&self, context: &[u8]) -> Option<u64> {
        let (node, id) = context.split_first_chunk::<2>()?;
        let id: [u8; 8] = id.try_into().ok()?;
        (u16::from_be_bytes(*node) == self.node.0).then_some(u64::from_be_bytes(id))
    }

    /// Snapshots the state and compacts the log once enough entries were applied past the
    /// latest snapshot.
    fn maybe_snapshot(&mut self) -> Result<(), DriverError> {
        let store = self.raw.store();
        let latest = store.latest_snapshot().get_metadata().index;
        let committed = store.hard_state().commit;
        let due = self.applied >= latest + self.config.snapshot_every
            || (self.snapshot_due && self.applied > latest);
        if !due || self.applied > committed {
            return Ok(());
        }
        self.snapshot_due = false;
        let conf = self.raw.raft.prs().conf().to_conf_state();
        let data = self.state.encode_snapshot();
        let applied = self.applied;
        self.raw.mut_store().create_snapshot(applied, conf, data)?;
        Ok(())
    }

    /// The first and last index of the log this node holds (after its snapshot).
    pub fn log_range(&self) -> (u64, u64) {
        let store = self.raw.store();
        let first = store.first_index().unwrap_or(0);
        let last = store.last_index().unwrap_or(0);
        (first, last)
    }
}

/// The state `store`'s committed entries make: its snapshot, then every committed command
/// after it, applied in order. What the node had applied when it stopped, known before its
/// controller runs (a restarted node's placement needs it before its cores open their
/// partitions). Reads only.
pub fn committed_state(store: &RaftStore) -> Result<ClusterState, DriverError> {
    let snapshot = store.latest_snapshot();
    let mut state = restore(snapshot)?;
    let from = snapshot.get_metadata().index + 1;
    let commit = store.hard_state().commit;
    if commit < from {
        return Ok(state);
    }
    let context = raft::GetEntriesContext::empty(false);
    for entry in store.entries(from, commit + 1, None, context)? {
        if entry.get_entry_type() != EntryType::EntryNormal || entry.data.is_empty() {
            continue;
        }
        let index = entry.index;
        let command = Command::decode(&entry.data)
            .map_err(|source| DriverError::BadEntry { index, source })?;
        // A refusal changes nothing, on every node alike.
        let _ = state.apply(command);
    }
    Ok(state)
}

fn restore(snapshot: &Snapshot) -> Result<ClusterState, DriverError> {
    let index = snapshot.get_metadata().index;
    if index == 0 {
        return Ok(ClusterState::default());
    }
    ClusterState::decode_snapshot(&snapshot.data)
        .map_err(|source| DriverError::BadSnapshot { index, source })
}

fn bad_conf_change(index: u64, e: protobuf::ProtobufError) -> DriverError {
    DriverError::BadConfChange {
        index,
        reason: e.to_string(),
    }
}

mod voters;

pub use voters::{VoterChange, VoterError};

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod voter_tests;
