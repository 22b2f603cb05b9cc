//! `pagurus cluster status`: what the node asked knows of its cluster; `add-node` and
//! `remove-node`: its members, changed through the controller.

use clap::{Args, Subcommand};
use serde_json::json;

use crate::cli::{BrokerArgs, Output, describe, print_json, print_out, table};
use crate::cluster::status::Role;
use crate::protocol::native::ClusterStatusResponse;

#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    pub target: BrokerArgs,
    #[command(subcommand)]
    pub command: ClusterCommand,
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// Print the node asked, the controller leader and term it knows, and every node
    /// registered with the controller: id, client address, cluster address, cores and
    /// liveness. A broker started without the cluster flags is a one-node cluster.
    Status {
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Add a node to the cluster's controller voters: ID=HOST:PORT, the new node's id and
    /// its --cluster-listen address as its peers reach it. Prints the cluster id; start
    /// the new node with --cluster-join and that id (docs/CLUSTER.md, "Adding and
    /// removing nodes").
    AddNode {
        /// ID=HOST:PORT
        #[arg(value_name = "ID=HOST:PORT")]
        member: String,
    },
    /// Remove a node from the cluster: out of the controller's voters, then forgotten.
    /// Refused while partitions are placed on it; ask another node than the one removed.
    RemoveNode {
        #[arg(value_name = "ID")]
        node: u16,
    },
}

/// Up to two controller proposals of at most 10 s each, and the leadership moving when
/// the leader is removed.
const MEMBER_CHANGE_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

pub fn run(args: ClusterArgs) -> Result<(), String> {
    let extra = match args.command {
        ClusterCommand::Status { .. } => std::time::Duration::ZERO,
        _ => MEMBER_CHANGE_WAIT,
    };
    let mut client = args.target.connect(extra)?;
    match args.command {
        ClusterCommand::AddNode { member } => {
            let peer = crate::cluster::config::parse_peers(&member).map_err(|e| e.to_string())?;
            let [peer] = peer.as_slice() else {
                return Err(format!("{member:?}: one node, as ID=HOST:PORT"));
            };
            let addr = peer.addr.to_host_port();
            let changed = client
                .change_member(peer.node.0, Some(&addr))
                .map_err(|e| describe(&e))?;
            let id = crate::cluster::ClusterId(changed.cluster_id);
            print_out(&format!(
                "node {} added at {addr}; voters: {}\nstart it with: --node-id {} --cluster-listen {addr} --cluster-join {id} (and --cluster-peers naming every member)\n",
                peer.node.0,
                list(&changed.voters),
                peer.node.0,
            ))
        }
        ClusterCommand::RemoveNode { node } => {
            let changed = client.change_member(node, None).map_err(|e| describe(&e))?;
            print_out(&format!(
                "node {node} removed; voters: {}\n",
                list(&changed.voters)
            ))
        }
        ClusterCommand::Status { output } => {
            let status = client.cluster_status().map_err(|e| describe(&e))?;
            match output {
                Output::Text => print_out(&text(&status)),
                Output::Json => print_json(&to_json(&status)),
            }
        }
    }
}

fn list(ids: &[u16]) -> String {
    let ids: Vec<String> = ids.iter().map(u16::to_string).collect();
    ids.join(", ")
}

fn role_name(code: u8) -> String {
    Role::from_code(code).map_or_else(|| format!("role {code}"), |r| r.name().to_string())
}

fn text(status: &ClusterStatusResponse) -> String {
    let leader = match (status.role, status.leader) {
        (0, _) => String::from("itself (a one-node cluster)"),
        (_, 0) => String::from("none known"),
        (_, id) => format!("node {id}"),
    };
    let mut out = format!(
        "node {} ({}); controller leader: {leader}; term {}; applied {}; voters: {}\n",
        status.node,
        role_name(status.role),
        status.term,
        status.applied,
        list(&status.voters)
    );
    let rows: Vec<Vec<String>> = status
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.id.to_string(),
                n.client_addr.clone(),
                n.cluster_addr.clone(),
                n.cores.to_string(),
                String::from(if n.live { "live" } else { "down" }),
                String::from(if n.id == status.leader { "leader" } else { "" }),
            ]
        })
        .collect();
    out.push_str(&table(
        &[
            "NODE",
            "ADDRESS",
            "CLUSTER ADDRESS",
            "CORES",
            "STATE",
            "CONTROLLER",
        ],
        &rows,
    ));
    out
}

fn to_json(status: &ClusterStatusResponse) -> serde_json::Value {
    json!({
        "node": status.node,
        "role": role_name(status.role),
        "leader": (status.leader != 0).then_some(status.leader),
        "term": status.term,
        "applied": status.applied,
        "voters": status.voters,
        "nodes": status.nodes.iter().map(|n| json!({
            "id": n.id,
            "client_addr": n.client_addr,
            "cluster_addr": n.cluster_addr,
            "cores": n.cores,
            "live": n.live,
        })).collect::<Vec<_>>(),
    })
}
