//! The transport follows the controller's membership: after each applied change the
//! driver gives it the voters and the members added at run time, each at the address the
//! controller's state has for it (the one it was added with, else the one it registered),
//! else the one of `--cluster-peers`.

use std::collections::BTreeSet;

use tracing::{info, warn};

use crate::cluster::NodeId;
use crate::cluster::config::{Peer, PeerAddr};
use crate::cluster::controller::driver::Controller;

/// The peers the transport should have now, this node included; `None` on a joining node
/// whose controller has no configuration yet (it keeps its flags' peers until the
/// leader's snapshot names the voters).
pub(super) fn wanted(controller: &Controller, flag_peers: &[Peer]) -> Option<Vec<Peer>> {
    let voters = controller.voters();
    if voters.is_empty() {
        return None;
    }
    let state = controller.state();
    let mut ids: BTreeSet<NodeId> = voters.into_iter().collect();
    ids.extend(state.members().map(|(id, _)| id));
    let peers = ids
        .into_iter()
        .filter_map(|node| {
            let recorded = state.cluster_addr(node).and_then(|a| PeerAddr::parse(a).ok());
            let flagged = || flag_peers.iter().find(|p| p.node == node).map(|p| p.addr.clone());
            match recorded.or_else(flagged) {
                Some(addr) => Some(Peer { node, addr }),
                None => {
                    warn!(node = node.0, "a member has no known cluster address; it is not reached until it registers");
                    None
                }
            }
        })
        .collect();
    Some(peers)
}

impl super::Driver {
    /// Gives the transport the members the controller's state now has, when they changed;
    /// says once when this node is no longer one of the voters.
    pub(super) fn follow_members(&mut self) {
        let controller = self.current();
        let Some(wanted) = wanted(controller, &self.flag_peers) else {
            return;
        };
        let out = !controller.voters().contains(&self.me);
        if out && !self.removed {
            warn!(
                node = self.me.0,
                "this node is no longer a voter of the controller (removed from the cluster): stop it"
            );
        }
        self.removed = out;
        if wanted != self.peers {
            let ids: Vec<u16> = wanted.iter().map(|p| p.node.0).collect();
            info!(members = ?ids, "cluster members changed");
            self.transport.set_peers(&wanted);
            self.peers = wanted;
        }
    }
}
