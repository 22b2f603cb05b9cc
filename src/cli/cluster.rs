//! `pagurus cluster status`: what the node asked knows of its cluster.

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
}

pub fn run(args: ClusterArgs) -> Result<(), String> {
    let mut client = args.target.connect(std::time::Duration::ZERO)?;
    match args.command {
        ClusterCommand::Status { output } => {
            let status = client.cluster_status().map_err(|e| describe(&e))?;
            match output {
                Output::Text => print_out(&text(&status)),
                Output::Json => print_json(&to_json(&status)),
            }
        }
    }
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
        "node {} ({}); controller leader: {leader}; term {}; applied {}\n",
        status.node,
        role_name(status.role),
        status.term,
        status.applied
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
        "nodes": status.nodes.iter().map(|n| json!({
            "id": n.id,
            "client_addr": n.client_addr,
            "cluster_addr": n.cluster_addr,
            "cores": n.cores,
            "live": n.live,
        })).collect::<Vec<_>>(),
    })
}
