//! What the driver publishes to the node's [`ClusterView`](crate::cluster::status::ClusterView):
//! the controller's topics, registered nodes and status, as the other cores read them.

use raft::StateRole;

use crate::cluster::NodeId;
use crate::cluster::controller::driver::Controller;
use crate::cluster::controller::state::ClusterState;
use crate::cluster::status::{ClusterStatus, NodeStatus, PlacedTopic, Role, TopicOwners};

/// The controller's topics, as the view shows them.
pub(crate) fn owners_of(state: &ClusterState) -> TopicOwners {
    state
        .topics()
        .map(|t| {
            let place =
                |r: &crate::cluster::controller::state::placement::Replica| (r.node, r.core);
            let owners = t
                .partitions
                .iter()
                .map(|p| {
                    p.leader_hint
                        .as_ref()
                        .or(p.replicas.first())
                        .map_or((NodeId(0), 0), place)
                })
                .collect();
            let replicas = t
                .partitions
                .iter()
                .map(|p| p.replicas.iter().map(place).collect())
                .collect();
            let placed = PlacedTopic {
                settings: t.settings.clone(),
                owners,
                replicas,
                group_base: t.group_base,
            };
            (t.name.clone(), placed)
        })
        .collect()
}

/// The registered nodes and their cores, by id, as the view shows them.
pub(crate) fn members_of(state: &ClusterState) -> Vec<(NodeId, u16)> {
    let mut members: Vec<(NodeId, u16)> = state.nodes().map(|n| (n.id, n.cores)).collect();
    members.sort();
    members
}

/// What `controller` knows, as the view shows it.
pub(super) fn status_of(me: NodeId, controller: &Controller) -> ClusterStatus {
    ClusterStatus {
        node: me,
        role: role(controller.role()),
        term: controller.term(),
        leader: controller.leader(),
        applied: controller.applied(),
        nodes: controller
            .state()
            .nodes()
            .map(|n| NodeStatus {
                id: n.id,
                client_addr: n.client_addr.clone(),
                cluster_addr: n.cluster_addr.clone(),
                cores: n.cores,
                live: n.live,
            })
            .collect(),
        voters: controller.voters(),
    }
}

fn role(role: StateRole) -> Role {
    match role {
        StateRole::Follower => Role::Follower,
        StateRole::PreCandidate => Role::PreCandidate,
        StateRole::Candidate => Role::Candidate,
        StateRole::Leader => Role::Leader,
    }
}
