//! ClusterStatus: the node's cluster view (`cluster::status`), as the native response.

use std::rc::Rc;

use crate::cluster::NodeId;
use crate::cluster::status::ClusterStatus;
use crate::protocol::native::{self, ClusterNodeEntry, ClusterStatusResponse};
use crate::server::native::{Answer, Pending, Tag};
use crate::shard::Shard;

pub(super) fn status(shard: &Rc<Shard>, tag: Tag) -> Pending {
    let status = match shard.cluster_view() {
        Some(view) => view.status(),
        // A shard the server gave no view (never in `serve`): itself, alone.
        None => ClusterStatus::alone(
            NodeId(0),
            shard.config.listen.to_string(),
            u16::try_from(shard.cores()).unwrap_or(u16::MAX),
        ),
    };
    let mut frame = Vec::new();
    native::encode_cluster_status_response(&mut frame, tag.1, &response(&status));
    Pending::Ready(Answer::Frame { frame, error: None })
}

fn response(status: &ClusterStatus) -> ClusterStatusResponse {
    ClusterStatusResponse {
        node: status.node.0,
        role: status.role.code(),
        term: status.term,
        leader: status.leader.map_or(0, |l| l.0),
        applied: status.applied,
        nodes: status
            .nodes
            .iter()
            .map(|n| ClusterNodeEntry {
                id: n.id.0,
                live: n.live,
                cores: n.cores,
                client_addr: n.client_addr.clone(),
                cluster_addr: n.cluster_addr.clone(),
            })
            .collect(),
    }
}
