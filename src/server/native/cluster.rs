//! ClusterStatus: the node's cluster view (`cluster::status`), as the native response;
//! FindCoordinator: the placement's answer for a group; ChangeMember: a member added
//! or removed through the controller.

use std::rc::Rc;

use crate::cluster::NodeId;
use crate::cluster::status::ClusterStatus;
use crate::protocol::native::{
    self, ClusterNodeEntry, ClusterStatusResponse, CoordinatorResponse, ErrorCode,
};
use crate::server::native::refusal::Refusal;
use crate::server::native::{Answer, Pending, Tag, later};
use crate::shard::Shard;
use crate::shard::members::MemberChange;
use crate::shard::placement::Address;

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

/// Where `group`'s coordinator is: the placement's place, and its node's client address
/// when it is another node (a node it has no address for is not answered: `NotHere`
/// would send the client nowhere, so `Internal` says the metadata lags).
pub(super) fn find_coordinator(shard: &Rc<Shard>, tag: Tag, group: &[u8]) -> Pending {
    let answer = shard
        .valid_name(group, "group")
        .map_err(Refusal::from)
        .and_then(|group| {
            let placement = shard.placement();
            let place = placement.coordinator(group);
            let here = place.node == placement.node();
            let (host, port) = match placement.address(place) {
                _ if here => (String::new(), shard.config.listen.port()),
                Some(Address {
                    host: Some(host),
                    main_port,
                    ..
                }) => (host, main_port),
                _ => {
                    let why = format!("the coordinator of {group:?}, {place}, has no address here");
                    return Err(Refusal::new(ErrorCode::Internal, why));
                }
            };
            Ok(CoordinatorResponse {
                node: place.node.0,
                core: place.core.0,
                here,
                host,
                port,
            })
        });
    match answer {
        Ok(coordinator) => {
            let mut frame = Vec::new();
            native::encode_coordinator_response(&mut frame, tag.1, &coordinator);
            Pending::Ready(Answer::Frame { frame, error: None })
        }
        Err(refusal) => Pending::Ready(Answer::failed(tag.1, refusal)),
    }
}

/// Adds `node` at `cluster_addr` to the voters, or removes it; answered once the change
/// is applied on this node.
pub(super) fn change_member(
    shard: &Rc<Shard>,
    tag: Tag,
    add: bool,
    node: u16,
    cluster_addr: &[u8],
) -> Pending {
    let change = match (add, std::str::from_utf8(cluster_addr)) {
        (false, _) => MemberChange::Remove { node },
        (true, Ok(addr)) => MemberChange::Add {
            node,
            cluster_addr: addr.to_string(),
        },
        (true, Err(_)) => {
            let why = "the cluster address is not UTF-8";
            return Pending::Ready(Answer::failed(
                tag.1,
                Refusal::new(ErrorCode::Malformed, why),
            ));
        }
    };
    later(shard, tag, async move |shard: Rc<Shard>| {
        let changed = shard.change_member(change).await?;
        let mut frame = Vec::new();
        let response = native::MemberChangeResponse {
            cluster_id: changed.cluster_id,
            voters: changed.voters,
        };
        native::encode_member_change_response(&mut frame, tag.1, &response);
        Ok(frame)
    })
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
        voters: status.voters.iter().map(|v| v.0).collect(),
    }
}
