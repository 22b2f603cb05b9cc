//! A cluster of nodes of the real binary on 127.0.0.1 for the cluster tests: each node
//! with its own data directory, client port and cluster port.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use pagurus::protocol::native::ClusterStatusResponse;

use super::Broker;

/// ClusterStatus's role code of a leader (docs/PROTOCOL.md).
pub const LEADER: u8 = 4;

/// A free port below the ephemeral range (a restarted node binds it again), never one
/// handed out before in this test process.
pub fn free_port() -> u16 {
    super::free_ports(0)
}

pub struct Cluster {
    pub nodes: Vec<Broker>,
    /// `--cluster-peers`, the same for every node.
    pub peers: String,
    pub cluster_ports: Vec<u16>,
}

impl Cluster {
    pub fn start(dir: &Path, size: u16) -> Cluster {
        Cluster::start_cores(dir, size, 1)
    }

    /// `size` nodes of `cores` cores each.
    pub fn start_cores(dir: &Path, size: u16, cores: usize) -> Cluster {
        let cluster_ports: Vec<u16> = (0..size).map(|_| free_port()).collect();
        let peers = cluster_ports
            .iter()
            .enumerate()
            .map(|(i, port)| format!("{}=127.0.0.1:{port}", i + 1))
            .collect::<Vec<_>>()
            .join(",");
        let nodes = (1..=size)
            .map(|id| {
                let listen = format!("127.0.0.1:{}", cluster_ports[usize::from(id) - 1]);
                let args = cluster_args(id, &listen, &peers);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                Broker::start_in(&dir.join(format!("node{id}")), cores, &args)
            })
            .collect();
        Cluster {
            nodes,
            peers,
            cluster_ports,
        }
    }

    /// The node with id `id` (ids count from 1).
    pub fn node(&mut self, id: u16) -> &mut Broker {
        &mut self.nodes[usize::from(id) - 1]
    }
}

pub fn cluster_args(id: u16, listen: &str, peers: &str) -> Vec<String> {
    [
        "--no-shard-ports",
        "--node-id",
        &id.to_string(),
        "--cluster-listen",
        listen,
        "--cluster-peers",
        peers,
    ]
    .map(String::from)
    .to_vec()
}

pub fn status(node: &Broker) -> Option<ClusterStatusResponse> {
    let mut client = pagurus::client::blocking::Client::connect(node.addr).ok()?;
    client.cluster_status().ok()
}

/// Waits until every node in `ids` names the same leader, that leader says it leads, and
/// every node sees `live` registered nodes live; returns the leader and its term. Panics
/// with what each node said after `within`.
pub fn agreed(cluster: &Cluster, ids: &[u16], live: usize, within: Duration) -> (u16, u64) {
    let deadline = Instant::now() + within;
    loop {
        let seen: Vec<Option<ClusterStatusResponse>> = ids
            .iter()
            .map(|&id| status(&cluster.nodes[usize::from(id) - 1]))
            .collect();
        if let Some(Some(first)) = seen.first() {
            let leader = first.leader;
            let all = seen.iter().flatten().collect::<Vec<_>>();
            let agree = all.len() == ids.len()
                && leader != 0
                && all
                    .iter()
                    .all(|s| s.leader == leader && s.term == first.term)
                && all
                    .iter()
                    .all(|s| s.nodes.iter().filter(|n| n.live).count() == live)
                && all.iter().any(|s| s.node == leader && s.role == LEADER);
            if agree {
                return (leader, first.term);
            }
        }
        assert!(
            Instant::now() < deadline,
            "nodes {ids:?} did not agree within {within:?}: {seen:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `pagurus cluster status --output json` against `node`.
pub fn cli_status(node: &Broker) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["cluster", "status", "--output", "json", "--broker"])
        .arg(node.addr.to_string())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The partitions of `topic` with a directory in node `id`'s data directory.
pub fn partitions_on(dir: &Path, id: u16, topic: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(dir.join(format!("node{id}/topics/{topic}"))) else {
        return Vec::new();
    };
    let mut found: Vec<u32> = entries
        .flatten()
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    found.sort_unstable();
    found
}

/// Waits until `check` holds, for at most 10 s.
pub fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `pagurus ARGS --broker NODE` with `input` on stdin; (success, stdout, stderr).
pub fn pagurus(node: &Broker, args: &[&str], input: &str) -> (bool, String, String) {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(args)
        .args(["--broker", &node.addr.to_string(), "--timeout-ms", "5000"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
