//! The CLI's connections routed by partition owner ([`Routed`]): `produce` and `consume`
//! bootstrapped on one node of a cluster reach the partitions of the others, and `groups`
//! and `consume --group` a group's coordinator on another node.

use std::net::SocketAddr;
use std::time::Duration;

use crate::cli::{BrokerArgs, ReconnectArgs, connect, describe, reconnect, reconnect_to};
use crate::client::ClientError;
use crate::client::blocking::Client;
use crate::client::routing::{Connect, Routed};
use crate::protocol::native::{ErrorCode, MetadataResponse};

/// Connects to `--broker` and learns `topics`' routes; reads on every connection wait up
/// to the timeout plus `extra` (a fetch's long poll).
pub(super) fn routed(
    target: &BrokerArgs,
    extra: Duration,
    topics: &[&str],
) -> Result<(Routed, MetadataResponse), String> {
    let (bootstrap, client, connect_node) = parts(target, extra)?;
    Routed::new(bootstrap, client, topics, connect_node).map_err(|e| {
        format!(
            "reading the metadata of {}: {}",
            topics.join(", "),
            describe(&e)
        )
    })
}

/// Connects to `--broker` and routes every call there until a `NotHere` answer says
/// otherwise (a group's calls, or a partition's): nothing is asked now.
pub(super) fn bare(target: &BrokerArgs, extra: Duration) -> Result<Routed, String> {
    let (bootstrap, client, connect_node) = parts(target, extra)?;
    Ok(Routed::bare(bootstrap, client, connect_node))
}

/// The bootstrap connection, its address, and how to connect to the other nodes (with
/// the same TLS, login and timeouts).
fn parts(target: &BrokerArgs, extra: Duration) -> Result<(SocketAddr, Client, Connect), String> {
    let mut client = target.connect(extra)?;
    let bootstrap = client
        .stream()
        .tcp()
        .peer_addr()
        .map_err(|e| e.to_string())?;
    let (timeout, read_timeout) = (target.timeout(), target.timeout() + extra);
    let options = target.security.options()?;
    let connect_node = Box::new(move |addr: SocketAddr| {
        let client = Client::connect_with(&addr.to_string(), timeout, &options)?;
        client.set_read_timeout(Some(read_timeout))?;
        Ok::<_, ClientError>(client)
    });
    Ok((bootstrap, client, connect_node))
}

/// A new connection to `addr` after `why` lost the old one (as `reconnect`, which it is
/// for the bootstrap address of `routed`).
pub(super) fn reconnect_at(
    target: &BrokerArgs,
    routed: &Routed,
    addr: SocketAddr,
    retry: &ReconnectArgs,
    extra: Duration,
    why: &ClientError,
) -> Result<Client, String> {
    if addr == routed.routes().bootstrap() {
        return reconnect(target, retry, extra, why);
    }
    let address = addr.to_string();
    let options = target.security.options()?;
    reconnect_to(&address, retry, why, || {
        connect(
            &address,
            &options,
            target.timeout(),
            target.timeout() + extra,
        )
    })
}

/// On a cluster, a node knows the offsets of its own partitions only: asks each other node
/// owning some of `metadata`'s partitions (reached from `bootstrap`, as the routes say) and
/// puts its offsets in. A node that does not answer leaves zeros, with a warning.
pub(super) fn remote_offsets(
    target: &BrokerArgs,
    bootstrap: SocketAddr,
    names: &[&str],
    metadata: &mut MetadataResponse,
) {
    let routes = crate::client::routing::Routes::new(bootstrap, metadata);
    let mut nodes: Vec<u16> = metadata
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .filter_map(|p| p.owner_node)
        .filter(|&n| metadata.cluster.as_ref().is_some_and(|c| c.node != n))
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    let options = match target.security.options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("pagurus: other nodes' offsets are not shown (0): {e}");
            return;
        }
    };
    for node in nodes {
        let answer = routes
            .node_address(node)
            .ok_or_else(|| String::from("no address known"))
            .and_then(|addr| {
                connect(
                    &addr.to_string(),
                    &options,
                    target.timeout(),
                    target.timeout(),
                )
            })
            .and_then(|mut client| client.metadata(names).map_err(|e| describe(&e)));
        let theirs = match answer {
            Ok(theirs) => theirs,
            Err(e) => {
                eprintln!("pagurus: node {node}'s offsets are not shown (0): {e}");
                continue;
            }
        };
        for topic in &mut metadata.topics {
            let Some(their) = theirs.topics.iter().find(|t| t.name == topic.name) else {
                continue;
            };
            for (mine, their) in topic.partitions.iter_mut().zip(&their.partitions) {
                if mine.owner_node == Some(node) {
                    mine.log_start_offset = their.log_start_offset;
                    mine.high_watermark = their.high_watermark;
                }
            }
        }
    }
}

/// A node's id and its answer, or why there is none.
pub(super) type NodeAnswer<T> = (u16, Result<T, String>);

/// On a cluster, runs `call` on every registered node but the one `client` is connected
/// to (the node asked), each on a connection of its own, and gives each node's answer (a
/// node that does not answer, its error). A broker alone has no other node, and nothing is
/// asked of it but whether it is one (ClusterStatus). `Err` when the node asked does not
/// say which nodes there are.
pub(super) fn on_other_nodes<T>(
    target: &BrokerArgs,
    client: &mut Client,
    mut call: impl FnMut(&mut Client) -> Result<T, ClientError>,
) -> Result<Vec<NodeAnswer<T>>, String> {
    let others = other_nodes(client).map_err(|e| describe(&e))?;
    if others.is_empty() {
        return Ok(Vec::new());
    }
    let options = target.security.options()?;
    Ok(others
        .into_iter()
        .map(|(id, addr)| {
            let answer = connect(&addr, &options, target.timeout(), target.timeout())
                .and_then(|mut other| call(&mut other).map_err(|e| describe(&e)));
            (id, answer)
        })
        .collect())
}

/// The registered nodes other than the one `client` is connected to, with their client
/// addresses: from ClusterStatus, or, for a principal the ACLs do not let see the cluster's
/// status, from the metadata's cluster section (which any client gets). None on a broker
/// alone.
fn other_nodes(client: &mut Client) -> Result<Vec<(u16, String)>, ClientError> {
    match client.cluster_status() {
        Ok(status) => Ok(status
            .nodes
            .into_iter()
            .filter(|n| status.role != 0 && n.id != status.node)
            .map(|n| (n.id, n.client_addr))
            .collect()),
        Err(ClientError::Broker { code, .. })
            if code == ErrorCode::ClusterAuthorizationFailed as u16 =>
        {
            let Some(cluster) = client.metadata(&[])?.cluster else {
                return Ok(Vec::new());
            };
            Ok(cluster
                .nodes
                .into_iter()
                .filter(|n| n.id != cluster.node)
                .map(|n| (n.id, format!("{}:{}", n.host, n.port)))
                .collect())
        }
        Err(other) => Err(other),
    }
}
