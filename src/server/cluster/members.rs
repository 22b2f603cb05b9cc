//! `pagurus cluster add-node` / `remove-node` on the node asked: the controller records a
//! member's address before making it a voter (its peers must reach it to send it the
//! controller's snapshot), and takes a node out of the voters before forgetting it. Each
//! step is one proposal through this node's [`Proposer`]; asking again after a failure
//! finishes what the first ask began (a step already made is taken as done).

use std::sync::Arc;

use tracing::info;

use crate::cluster::config::PeerAddr;
use crate::cluster::controller::driver::{VoterChange, VoterError};
use crate::cluster::controller::state::{Command, CommandError};
use crate::cluster::node::{ProposeError, Proposer};
use crate::cluster::status::ClusterView;
use crate::cluster::{ClusterId, NodeId};
use crate::shard::ShardError;
use crate::shard::members::{MemberChange, MemberChanged};

/// What a member change needs besides the proposer.
#[derive(Clone)]
pub(crate) struct Members {
    pub(crate) me: NodeId,
    pub(crate) cluster_id: ClusterId,
    pub(crate) view: Arc<ClusterView>,
}

impl Members {
    pub(crate) async fn change(
        &self,
        proposer: &Proposer,
        change: MemberChange,
    ) -> Result<MemberChanged, ShardError> {
        let voters = match change {
            MemberChange::Add { node, cluster_addr } => {
                self.add(proposer, member_id(node)?, &cluster_addr).await?
            }
            MemberChange::Remove { node } => self.remove(proposer, member_id(node)?).await?,
        };
        Ok(MemberChanged {
            cluster_id: self.cluster_id.0,
            voters: voters.iter().map(|v| v.0).collect(),
        })
    }

    async fn add(
        &self,
        proposer: &Proposer,
        node: NodeId,
        cluster_addr: &str,
    ) -> Result<Vec<NodeId>, ShardError> {
        let addr = PeerAddr::parse(cluster_addr)
            .map_err(|why| refused(format!("cluster address {cluster_addr:?}: {why}")))?;
        let record = Command::AddMember {
            id: node,
            cluster_addr: addr.to_host_port(),
        };
        proposer.propose(record).await.map_err(failed)?;
        let voters = match proposer.change_voters(VoterChange::Add(node)).await {
            Ok(voters) => voters,
            Err(ProposeError::Voters(VoterError::AlreadyVoter(_))) => self.voters(),
            Err(error) => return Err(failed(error)),
        };
        info!(node = node.0, %addr, voters = ?ids(&voters), "member added to the controller's voters");
        Ok(voters)
    }

    async fn remove(&self, proposer: &Proposer, node: NodeId) -> Result<Vec<NodeId>, ShardError> {
        if node == self.me {
            // Out of the voters, this node would stop hearing the controller before its
            // removal is recorded.
            return Err(refused(format!(
                "{node} is the node asked: ask another node of the cluster to remove it"
            )));
        }
        // Checked before the voters change, so a refused removal changes nothing; the
        // controller checks again when it forgets the node.
        let held = self
            .view
            .topics()
            .values()
            .flat_map(|t| &t.owners)
            .filter(|(owner, _)| *owner == node)
            .count();
        if held > 0 {
            return Err(refused(format!(
                "{node} holds {held} partition(s), their only copy: delete those topics first (moving partitions is not built)"
            )));
        }
        // Not a voter: removed before (only its record may be left), or never a member.
        let after = match proposer.change_voters(VoterChange::Remove(node)).await {
            Ok(voters) => Some(voters),
            Err(ProposeError::Voters(VoterError::NotVoter(_))) => None,
            Err(error) => return Err(failed(error)),
        };
        let was_voter = after.is_some();
        match proposer.propose(Command::RemoveMember { id: node }).await {
            Ok(()) => {}
            Err(ProposeError::Refused(CommandError::UnknownNode { .. })) if was_voter => {}
            Err(ProposeError::Refused(CommandError::UnknownNode { .. })) => {
                return Err(refused(format!("{node} is not a member of the cluster")));
            }
            Err(error) => return Err(failed(error)),
        }
        let voters = after.unwrap_or_else(|| self.voters());
        info!(node = node.0, voters = ?ids(&voters), "member removed from the cluster");
        Ok(voters)
    }

    fn voters(&self) -> Vec<NodeId> {
        self.view.status().voters
    }
}

fn member_id(node: u16) -> Result<NodeId, ShardError> {
    let id = NodeId(node);
    if !id.is_member() {
        return Err(refused(format!(
            "node id {node} is outside 1..={}",
            NodeId::MAX.0
        )));
    }
    Ok(id)
}

fn refused(reason: String) -> ShardError {
    ShardError::MembershipRefused { reason }
}

/// A refusal says why; a timeout or a stopped controller is the broker's trouble.
fn failed(error: ProposeError) -> ShardError {
    match error {
        ProposeError::Refused(_) | ProposeError::Voters(_) => refused(error.to_string()),
        ProposeError::TimedOut(_) | ProposeError::Stopped | ProposeError::Driver(_) => {
            ShardError::internal(format!("membership change: {error}"))
        }
    }
}

fn ids(voters: &[NodeId]) -> Vec<u16> {
    voters.iter().map(|v| v.0).collect()
}
