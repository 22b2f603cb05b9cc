//! Changes of the controller group's voters, one at a time, through raft-rs conf changes
//! (`ConfChange` v1: `AddNode`, `RemoveNode`; raft-rs applies one change at a time and
//! refuses a second while one is pending).
//!
//! - **A joining node** opens its store with no configuration ([`Controller::join`]): a
//!   node outside its own configuration is not promotable, so it never campaigns; it
//!   learns the group from the leader's snapshot. Every node snapshots (and compacts its
//!   log) as soon as it applied the addition of a node, so the leader has a snapshot that
//!   names the new voter and no log from index 1 to send instead: the new node starts from
//!   that snapshot, never from an empty configuration plus the log.
//! - **The leader is never removed while it leads**: raft-rs 0.7 lets a leader that
//!   applied its own removal go on leading (`post_conf_change`, "TODO: step down"), and
//!   with check-quorum it would hold the others for ever. A removal of the leader, proposed
//!   on it or forwarded to it, makes it transfer the leadership to the most caught-up other
//!   voter instead, and the proposer proposes again to the new leader.
//! - **The last voter** is never removed (a group of none can never commit again).

use protobuf::Message as _;
use raft::eraftpb::{ConfChange, ConfChangeType, EntryType, Message, MessageType};

use super::{Controller, DriverConfig, DriverError};
use crate::cluster::NodeId;
use crate::cluster::controller::raft_store::RaftStore;

/// One change of the voters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VoterChange {
    Add(NodeId),
    Remove(NodeId),
}

impl VoterChange {
    pub fn node(self) -> NodeId {
        match self {
            VoterChange::Add(node) | VoterChange::Remove(node) => node,
        }
    }

    fn conf_change(self) -> ConfChange {
        let mut cc = ConfChange {
            node_id: self.node().raft_id(),
            ..ConfChange::default()
        };
        cc.set_change_type(match self {
            VoterChange::Add(_) => ConfChangeType::AddNode,
            VoterChange::Remove(_) => ConfChangeType::RemoveNode,
        });
        cc
    }
}

/// Why a change of the voters was not proposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VoterError {
    #[error("{0} is already a voter of the controller")]
    AlreadyVoter(NodeId),
    #[error("{0} is not a voter of the controller")]
    NotVoter(NodeId),
    #[error(
        "{0} is the controller's last voter: removing it would leave a group that can never decide again"
    )]
    LastVoter(NodeId),
    #[error("another change of the voters is not applied yet; try again once it is")]
    Pending,
    #[error(
        "{0} leads the controller: the leadership is being moved to another voter, propose the removal again to the new leader"
    )]
    LeaderMovingAway(NodeId),
}

impl Controller {
    /// Opens the controller of a node joining a running cluster: a store never set up gets
    /// no configuration (the node does not campaign) and waits for the leader's snapshot;
    /// a store set up before opens as [`Controller::open`] does.
    pub fn join(
        node: NodeId,
        store: RaftStore,
        config: DriverConfig,
    ) -> Result<Controller, DriverError> {
        Controller::open_store(node, store, config)
    }

    /// The voters as this node applied them, by id.
    pub fn voters(&self) -> Vec<NodeId> {
        let mut voters: Vec<NodeId> = self
            .raw
            .raft
            .prs()
            .conf()
            .to_conf_state()
            .voters
            .iter()
            .filter_map(|id| NodeId::from_raft_id(*id))
            .collect();
        voters.sort();
        voters
    }

    /// Proposes `change` under `proposal` from any node (forwarded to the leader by
    /// raft-rs, as [`Controller::propose_anywhere`]); its outcome is an
    /// [`super::Event::VotersChanged`] carrying `proposal`, once committed and applied.
    /// Refused at once when this node's applied voters refuse it; the removal of the
    /// leader proposed on the leader starts a leadership transfer and is refused.
    pub fn propose_voter_change(
        &mut self,
        change: VoterChange,
        proposal: u64,
    ) -> Result<(), DriverError> {
        let Some(leader) = self.leader() else {
            return Err(DriverError::NotLeader { leader: None });
        };
        let voters = self.voters();
        let node = change.node();
        match change {
            VoterChange::Add(_) if voters.contains(&node) => {
                return Err(VoterError::AlreadyVoter(node).into());
            }
            VoterChange::Remove(_) if !voters.contains(&node) => {
                return Err(VoterError::NotVoter(node).into());
            }
            VoterChange::Remove(_) if voters.len() == 1 => {
                return Err(VoterError::LastVoter(node).into());
            }
            _ => {}
        }
        if self.is_leader() && self.raw.raft.has_pending_conf() {
            return Err(VoterError::Pending.into());
        }
        if self.is_leader() && change == VoterChange::Remove(leader) {
            self.transfer_away();
            return Err(VoterError::LeaderMovingAway(leader).into());
        }
        let context = self.proposal_context(proposal);
        Ok(self
            .raw
            .propose_conf_change(context, change.conf_change())?)
    }

    /// On the leader, a forwarded proposal to remove it: starts a leadership transfer and
    /// drops the message (its proposer proposes again to the new leader). True when
    /// `message` was that.
    pub(super) fn refuse_own_removal(&mut self, message: &Message) -> bool {
        if message.msg_type != MessageType::MsgPropose || !self.is_leader() {
            return false;
        }
        let me = self.node.raft_id();
        let removes_me = message.entries.iter().any(|e| {
            e.entry_type == EntryType::EntryConfChange
                && ConfChange::parse_from_bytes(&e.data).is_ok_and(|cc| {
                    cc.change_type == ConfChangeType::RemoveNode && cc.node_id == me
                })
        });
        if removes_me {
            self.transfer_away();
        }
        removes_me
    }

    /// Hands the leadership to the other voter with the most of the log.
    fn transfer_away(&mut self) {
        let me = self.node.raft_id();
        let voters = self.raw.raft.prs().conf().to_conf_state().voters;
        let best = self
            .raw
            .raft
            .prs()
            .iter()
            .filter(|(id, _)| **id != me && voters.contains(id))
            .max_by_key(|(id, pr)| (pr.matched, std::cmp::Reverse(**id)))
            .map(|(id, _)| *id);
        if let Some(to) = best {
            self.raw.transfer_leader(to);
        }
    }
}
