//! The cluster families of one scrape: this node's part in the controller group, what it
//! knows of the leader and the nodes, and the node-to-node transport's counters. Read from
//! the node's cluster view (`cluster::status`), which core 0's controller driver writes.

use super::{Kind, Out};
use crate::cluster::status::{Role, Snapshot};

/// The cluster families for `snapshot`, as text to append to a scrape.
pub fn render_cluster(snapshot: &Snapshot) -> String {
    let mut out = Out::default();
    let status = &snapshot.status;
    out.family(
        "pagurus_cluster_role",
        Kind::Gauge,
        "1 for this node's role in the controller group (alone: started without the cluster flags).",
    );
    for role in Role::ALL {
        out.sample(
            "pagurus_cluster_role",
            &[("role", &role.name())],
            u8::from(role == status.role),
        );
    }
    out.family(
        "pagurus_cluster_term",
        Kind::Gauge,
        "The controller's Raft term as this node knows it.",
    );
    out.sample("pagurus_cluster_term", &[], status.term);
    out.family(
        "pagurus_cluster_leader",
        Kind::Gauge,
        "The controller leader's node id as this node knows it; 0 when none is known (and on a broker started alone, its own id).",
    );
    out.sample(
        "pagurus_cluster_leader",
        &[],
        status.leader.map_or(0, |l| l.0),
    );
    out.family(
        "pagurus_cluster_leader_changes_total",
        Kind::Counter,
        "Controller leaders (a new leader or term) this node has seen since it started.",
    );
    out.sample(
        "pagurus_cluster_leader_changes_total",
        &[],
        snapshot.leader_changes,
    );
    out.family(
        "pagurus_cluster_applied_index",
        Kind::Gauge,
        "Index of the last controller log entry applied on this node.",
    );
    out.sample("pagurus_cluster_applied_index", &[], status.applied);
    out.family(
        "pagurus_cluster_nodes",
        Kind::Gauge,
        "Nodes registered with the controller, by liveness as the controller knows it.",
    );
    let live = status.nodes.iter().filter(|n| n.live).count();
    out.sample("pagurus_cluster_nodes", &[("state", &"live")], live);
    out.sample(
        "pagurus_cluster_nodes",
        &[("state", &"down")],
        status.nodes.len() - live,
    );
    render_transport(&mut out, snapshot);
    out.text
}

fn render_transport(out: &mut Out, snapshot: &Snapshot) {
    let t = &snapshot.transport;
    out.family(
        "pagurus_cluster_connections_total",
        Kind::Counter,
        "Node-to-node connections: outgoing ones made and failed, incoming ones refused at their hello or closed for a bad frame.",
    );
    for (event, value) in [
        ("connected", t.connects),
        ("connect_failed", t.connect_failures),
        ("refused", t.refused),
        ("protocol_error", t.protocol_errors),
    ] {
        out.sample(
            "pagurus_cluster_connections_total",
            &[("event", &event)],
            value,
        );
    }
    out.family(
        "pagurus_cluster_messages_total",
        Kind::Counter,
        "Raft messages between nodes: queued to a peer, written, delivered to a group, or dropped (a full queue, no handler, a full handler, queued too long); Raft resends what is lost.",
    );
    for (event, value) in [
        ("queued", t.queued),
        ("written", t.written),
        ("delivered", t.delivered),
        ("dropped_queue_full", t.dropped_queue_full),
        ("dropped_no_handler", t.dropped_no_handler),
        ("dropped_handler_full", t.dropped_handler_full),
        ("dropped_stale", t.dropped_stale),
    ] {
        out.sample(
            "pagurus_cluster_messages_total",
            &[("event", &event)],
            value,
        );
    }
}
