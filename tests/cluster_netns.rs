//! A node cut off from the others (its link down, each node in its own network namespace
//! joined to a bridge by a veth pair) neither takes metadata changes nor disrupts the
//! others when it comes back (pre-vote, check-quorum): a topic created through it fails
//! within a bounded time with a clear error, the others keep their leader and term
//! throughout and after the heal, the cut-off node never raises its term, and it is live
//! again afterwards. The cut lasts `PAGURUS_ISOLATE_SECS` (default 12 s: long enough for the
//! refused create's 10 s); the issue's 30 s: `PAGURUS_ISOLATE_SECS=30` or
//! `scripts/cluster-netns.sh`.
//!
//! Needs root and `ip` (iproute2). Without them the test says why and passes, unless
//! `PAGURUS_NETNS=required` (set by `.ci/run`, which runs as root), where it fails.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const NODES: u16 = 3;

/// Why network namespaces cannot be used here, if they cannot.
fn unavailable() -> Option<String> {
    if !nix::unistd::geteuid().is_root() {
        return Some("not root".into());
    }
    let probe = format!("pgprobe{}", std::process::id());
    match Command::new("ip").args(["netns", "add", &probe]).output() {
        Err(e) => Some(format!("no `ip` command: {e}")),
        Ok(out) if !out.status.success() => Some(format!(
            "`ip netns add` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )),
        Ok(_) => {
            let _ = Command::new("ip").args(["netns", "del", &probe]).output();
            None
        }
    }
}

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Three nodes, node n in namespace `{prefix}-n{n}` at `{net}.{n}`, its host-side veth
/// `{prefix}-h{n}` on the bridge `{prefix}-br`. Everything is removed on drop.
struct Netns {
    prefix: String,
    net: String,
    dir: tempfile::TempDir,
    nodes: Vec<Option<Child>>,
}

impl Netns {
    fn new() -> Netns {
        let pid = std::process::id();
        let netns = Netns {
            prefix: format!("pgt{}", pid % 100_000),
            net: format!("10.{}.{}", 200 + pid % 50, (pid / 50) % 250),
            dir: tempfile::tempdir().unwrap(),
            nodes: Vec::new(),
        };
        let br = format!("{}-br", netns.prefix);
        ip(&["link", "add", &br, "type", "bridge"]);
        ip(&["addr", "add", &format!("{}.254/24", netns.net), "dev", &br]);
        ip(&["link", "set", &br, "up"]);
        for n in 1..=NODES {
            let (ns, host) = (netns.ns(n), netns.host_link(n));
            ip(&["netns", "add", &ns]);
            ip(&[
                "link", "add", &host, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ]);
            ip(&["link", "set", &host, "master", &br, "up"]);
            let addr = format!("{}.{n}/24", netns.net);
            ip(&[
                "netns", "exec", &ns, "ip", "addr", "add", &addr, "dev", "eth0",
            ]);
            ip(&["netns", "exec", &ns, "ip", "link", "set", "eth0", "up"]);
            ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"]);
        }
        netns
    }

    fn ns(&self, n: u16) -> String {
        format!("{}-n{n}", self.prefix)
    }

    fn host_link(&self, n: u16) -> String {
        format!("{}-h{n}", self.prefix)
    }

    fn start(&mut self) {
        let peers: Vec<String> = (1..=NODES)
            .map(|n| format!("{n}={}.{n}:9100", self.net))
            .collect();
        let peers = peers.join(",");
        for n in 1..=NODES {
            let log = std::fs::File::create(self.dir.path().join(format!("n{n}.log"))).unwrap();
            // Listening on every address: a cut-off node still answers on its own
            // 127.0.0.1, so the test can ask it what it thinks.
            let child = Command::new("ip")
                .args([
                    "netns",
                    "exec",
                    &self.ns(n),
                    env!("CARGO_BIN_EXE_pagurus"),
                    "serve",
                ])
                .arg("--data-dir")
                .arg(self.dir.path().join(format!("n{n}")))
                .args(["--node-id", &n.to_string(), "--listen", "0.0.0.0:9092"])
                .args(["--no-shard-ports", "--cores", "1"])
                .args(["--advertised-host", &format!("{}.{n}", self.net)])
                .args([
                    "--cluster-listen",
                    "0.0.0.0:9100",
                    "--cluster-peers",
                    &peers,
                ])
                .env("RUST_LOG", "info")
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap();
            self.nodes.push(Some(child));
        }
    }

    /// `pagurus ARGS --broker 127.0.0.1:9092` inside node `n`'s namespace.
    fn cli(&self, n: u16, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", &self.ns(n), env!("CARGO_BIN_EXE_pagurus")])
            .args(args)
            .args(["--broker", "127.0.0.1:9092"])
            .output()
            .unwrap()
    }

    /// (leader, term, role, live nodes) as node `n` sees it, if it answers.
    fn view(&self, n: u16) -> Option<(u64, u64, String, usize)> {
        let out = self.cli(
            n,
            &[
                "cluster",
                "status",
                "--output",
                "json",
                "--timeout-ms",
                "2000",
            ],
        );
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).ok()?;
        let live = json["nodes"]
            .as_array()?
            .iter()
            .filter(|n| n["live"] == true);
        Some((
            json["leader"].as_u64().unwrap_or(0),
            json["term"].as_u64()?,
            json["role"].as_str()?.to_string(),
            live.count(),
        ))
    }

    /// Waits until nodes `ids` name one leader and term with `live` nodes live.
    fn agreed(&self, ids: &[u16], live: usize, within: Duration) -> (u64, u64) {
        let deadline = Instant::now() + within;
        loop {
            let seen: Vec<_> = ids.iter().map(|&n| self.view(n)).collect();
            if let Some(Some((leader, term, _, _))) = seen.first().cloned()
                && leader != 0
                && seen.iter().all(|s| {
                    s.as_ref()
                        .is_some_and(|s| (s.0, s.1, s.3) == (leader, term, live))
                })
            {
                return (leader, term);
            }
            assert!(
                Instant::now() < deadline,
                "nodes {ids:?} did not agree within {within:?}: {seen:?}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn logs(&self) -> String {
        (1..=NODES)
            .map(|n| {
                let log = self.dir.path().join(format!("n{n}.log"));
                format!(
                    "--- node {n}\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            })
            .collect()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        for child in self.nodes.iter_mut().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
        for n in 1..=NODES {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(n)])
                .output();
            let _ = Command::new("ip")
                .args(["link", "del", &self.host_link(n)])
                .output();
        }
        let br = format!("{}-br", self.prefix);
        let _ = Command::new("ip").args(["link", "del", &br]).output();
    }
}

#[test]
fn an_isolated_node_takes_no_metadata_change_and_does_not_disrupt_the_others() {
    if let Some(why) = unavailable() {
        let required = std::env::var("PAGURUS_NETNS").is_ok_and(|v| v == "required");
        assert!(
            !required,
            "PAGURUS_NETNS=required but network namespaces are unusable: {why}"
        );
        eprintln!("skipped: network namespaces are unusable here ({why})");
        return;
    }
    let isolate = Duration::from_secs(
        std::env::var("PAGURUS_ISOLATE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(12),
    );
    let mut net = Netns::new();
    net.start();
    let (leader, term) = net.agreed(&[1, 2, 3], 3, Duration::from_secs(30));
    let cut = (leader as u16) % NODES + 1;
    let others: Vec<u16> = (1..=NODES).filter(|&n| n != cut).collect();

    ip(&["link", "set", &net.host_link(cut), "down"]);
    let cut_at = Instant::now();
    // A topic created through the cut-off node: refused within a bounded time, saying why.
    let create = net.cli(
        cut,
        &["topics", "create", "cut-off", "--timeout-ms", "20000"],
    );
    let took = cut_at.elapsed();
    let stderr = String::from_utf8_lossy(&create.stderr);
    assert!(!create.status.success(), "created through a cut-off node");
    assert!(
        stderr.contains("no leader, or no quorum"),
        "not a clear error: {stderr}"
    );
    assert!(
        took < Duration::from_secs(15),
        "refused only after {took:?}"
    );
    eprintln!(
        "create through the cut-off node refused after {took:?}: {}",
        stderr.trim()
    );

    // Throughout the cut: the others keep their leader and term and mark the node down;
    // the cut-off node never raises its term and does not lead.
    let mut marked_down = false;
    while cut_at.elapsed() < isolate {
        for &n in &others {
            let (l, t, _, live) = net.view(n).expect("a connected node answers");
            assert_eq!(
                (l, t),
                (leader, term),
                "node {n} moved while {cut} was cut off"
            );
            marked_down |= live == 2;
        }
        if let Some((_, t, role, _)) = net.view(cut) {
            assert_eq!(
                t, term,
                "the cut-off node raised its term (pre-vote should stop it)"
            );
            assert_ne!(role, "leader");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(marked_down, "the leader never marked node {cut} down");

    // Healed: the same leader and term everywhere, the node live again, and the refused
    // topic nowhere.
    ip(&["link", "set", &net.host_link(cut), "up"]);
    let after = net.agreed(&[1, 2, 3], 3, Duration::from_secs(15));
    assert_eq!(
        after,
        (leader, term),
        "the returning node disrupted the cluster"
    );
    std::thread::sleep(Duration::from_secs(1));
    for n in 1..=NODES {
        let list = net.cli(n, &["topics", "list"]);
        let names = String::from_utf8_lossy(&list.stdout);
        assert!(
            !names.contains("cut-off"),
            "node {n} has the refused topic: {names}"
        );
    }
    // And the controller takes changes through the healed node.
    let create = net.cli(cut, &["topics", "create", "healed"]);
    assert!(
        create.status.success(),
        "{}",
        String::from_utf8_lossy(&create.stderr)
    );
}
