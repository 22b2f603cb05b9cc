//! Starts that cannot work fail at once with one clear line: a second broker on a port or
//! a data directory in use, a cluster port in use, more cores than CPUs, a locked-memory limit glommio cannot run
//! under, cluster flags that do not go together.

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::Broker;

/// Starts `serve` and returns its stderr once it exits, which it must, unsuccessfully,
/// within 30 s (a start that goes on serving is killed and fails the test).
fn serve(data: &std::path::Path, listen: &str, extra: &[&str]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--data-dir"])
        .arg(data)
        .args(["--listen", listen, "--cores", "1"])
        .args(extra)
        .env_remove("PAGURUS_CORES")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (status, stderr) = common::exit_and_stderr(&mut child, Duration::from_secs(30))
        .expect("the second start was still running after 30 s");
    assert!(!status.success(), "second start succeeded: {stderr}");
    stderr
}

#[test]
fn a_second_broker_on_a_port_or_a_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let addr = broker.addr.to_string();
    let stderr = serve(&dir.path().join("other"), &addr, &[]);
    assert!(
        stderr.contains("address in use by another process"),
        "{stderr}"
    );
    // A shard port (listen port + 1) in use is refused the same way.
    let below = format!("127.0.0.1:{}", broker.addr.port() - 1);
    let stderr = serve(&dir.path().join("other2"), &below, &[]);
    assert!(
        stderr.contains("address in use by another process"),
        "{stderr}"
    );
    let stderr = serve(
        &dir.path().join("data"),
        "127.0.0.1:0",
        &["--no-shard-ports"],
    );
    assert!(
        stderr.contains("in use by another pagurus process"),
        "{stderr}"
    );
    // The first broker still serves.
    broker.client().metadata(&[]).unwrap();
}

/// The cluster transport binds `--cluster-listen` with SO_REUSEPORT too: a second node
/// given a running node's cluster port is refused at start, not left to share it.
#[test]
fn a_second_node_on_a_cluster_port_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cluster = format!("127.0.0.1:{}", common::free_ports(0));
    let peers = format!("1={cluster}");
    let flags = [
        "--node-id",
        "1",
        "--cluster-listen",
        cluster.as_str(),
        "--cluster-peers",
        peers.as_str(),
    ];
    let node = Broker::start_in(&dir.path().join("data"), 1, &flags);
    let listen = format!("127.0.0.1:{}", common::free_ports(2));
    let stderr = serve(&dir.path().join("other"), &listen, &flags);
    assert!(
        stderr.contains(&format!("cannot listen on {cluster}: address in use")),
        "{stderr}"
    );
    // The first node still serves.
    node.client().metadata(&[]).unwrap();
}

#[test]
fn more_cores_than_cpus_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cpus = std::thread::available_parallelism().unwrap().get();
    let cores = (cpus + 1).to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--cores", &cores])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("--cores {cores} but this process may run on")),
        "{stderr}"
    );
}

#[test]
fn a_tiny_locked_memory_limit_names_what_to_raise() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("prlimit")
        .arg("--memlock=65536")
        .arg(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--cores", "1"])
        .output()
        .expect("prlimit (util-linux) is installed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("ulimit -l") && stderr.contains("LimitMEMLOCK"),
        "{stderr}"
    );
}

/// A directory of someone else's files, or one marked with a newer format, is refused with
/// one line, before anything is written in it; an empty one is marked at first start; one
/// pagurus wrote before the marker existed is adopted with its data.
#[test]
fn a_data_dir_that_is_not_pagurus_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let theirs = dir.path().join("theirs");
    std::fs::create_dir_all(theirs.join("trash/important")).unwrap();
    std::fs::write(theirs.join("trash/important/thesis.txt"), b"years of work").unwrap();
    std::fs::write(theirs.join("notes.txt"), b"mine").unwrap();
    let stderr = serve(&theirs, "127.0.0.1:0", &["--no-shard-ports"]);
    let refusal: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("is not a pagurus data directory"))
        .collect();
    assert_eq!(refusal.len(), 1, "{stderr}");
    assert!(refusal[0].contains("notes.txt"), "{stderr}");
    let mut left: Vec<String> = walk(&theirs);
    left.sort();
    assert_eq!(
        left,
        [
            "notes.txt",
            "trash",
            "trash/important",
            "trash/important/thesis.txt"
        ]
    );
    assert_eq!(
        std::fs::read(theirs.join("trash/important/thesis.txt")).unwrap(),
        b"years of work"
    );

    let newer = dir.path().join("newer");
    std::fs::create_dir(&newer).unwrap();
    std::fs::write(newer.join("pagurus.meta"), "format=99\ncreated_ns=1\n").unwrap();
    let stderr = serve(&newer, "127.0.0.1:0", &["--no-shard-ports"]);
    assert!(
        stderr.contains("has data format 99, newer than this pagurus reads (2)"),
        "{stderr}"
    );
    assert_eq!(walk(&newer), ["pagurus.meta"]);

    let garbled = dir.path().join("garbled");
    std::fs::create_dir(&garbled).unwrap();
    std::fs::write(garbled.join("pagurus.meta"), "\u{0}\u{1}binary").unwrap();
    let stderr = serve(&garbled, "127.0.0.1:0", &["--no-shard-ports"]);
    assert!(
        stderr.contains("cannot be read as a pagurus marker"),
        "{stderr}"
    );
}

#[test]
fn a_data_dir_from_before_the_marker_is_adopted_with_its_data() {
    use pagurus::protocol::record::encode_batch;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 1, &[]);
    let marker = std::fs::read_to_string(data.join("pagurus.meta")).unwrap();
    assert!(marker.contains("format=2\n"), "{marker}");
    assert!(marker.contains("created_ns="), "{marker}");
    broker
        .client()
        .produce("kept", 0, &[encode_batch(0, b"", b"old", 1)])
        .unwrap();
    assert!(broker.terminate().success());
    // As a broker from before the marker left it.
    std::fs::remove_file(data.join("pagurus.meta")).unwrap();
    broker.restart();
    let fetched = broker
        .client()
        .fetch("kept", 0, 0, 1 << 20, std::time::Duration::ZERO)
        .unwrap();
    assert_eq!(fetched.batches.len(), 1);
    assert!(data.join("pagurus.meta").is_file());
    assert!(
        broker.log_text().contains("adopted"),
        "{}",
        broker.log_text()
    );
}

/// A cluster node's data directory keeps its node id from the first start: restarting it
/// as another node, or as a one-node broker, is refused with what to do, and its data is
/// left alone; a one-node broker's directory joins as the node it is first started as.
#[test]
fn a_data_dir_belongs_to_the_node_that_first_used_it() {
    use pagurus::protocol::record::encode_batch;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 1, &[]);
    broker
        .client()
        .produce("kept", 0, &[encode_batch(0, b"", b"before", 1)])
        .unwrap();
    assert!(broker.terminate().success());
    let marker = std::fs::read_to_string(data.join("pagurus.meta")).unwrap();
    assert!(!marker.contains("node_id"), "{marker}");

    // The one-node directory becomes node 2's, with its data.
    let mut node = Broker::start_in(&data, 1, &["--node-id", "2"]);
    let fetched = node
        .client()
        .fetch("kept", 0, 0, 1 << 20, std::time::Duration::ZERO)
        .unwrap();
    assert_eq!(fetched.batches.len(), 1);
    assert!(
        node.log_text().contains("now belongs to this node"),
        "{}",
        node.log_text()
    );
    assert!(node.terminate().success());
    let marker = std::fs::read_to_string(data.join("pagurus.meta")).unwrap();
    assert!(marker.contains("node_id=2\n"), "{marker}");

    let stderr = serve(
        &data,
        "127.0.0.1:0",
        &["--no-shard-ports", "--node-id", "3"],
    );
    assert!(
        stderr.contains("belongs to node 2 of a cluster, not to node 3; start it with --node-id 2"),
        "{stderr}"
    );
    let stderr = serve(&data, "127.0.0.1:0", &["--no-shard-ports"]);
    assert!(
        stderr.contains("belongs to node 2 of a cluster; start it with --node-id 2"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(data.join("pagurus.meta")).unwrap(),
        marker,
        "a refused start leaves the marker as it was"
    );
    let stderr = serve(
        &dir.path().join("fresh"),
        "127.0.0.1:0",
        &["--node-id", "0"],
    );
    assert!(stderr.contains("node id 0 is not in 1..=32767"), "{stderr}");

    // Node 2 again: it serves what it kept.
    node.restart();
    let fetched = node
        .client()
        .fetch("kept", 0, 0, 1 << 20, std::time::Duration::ZERO)
        .unwrap();
    assert_eq!(fetched.batches.len(), 1);
}

/// Paths under `root`, relative, with `/`.
fn walk(root: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            out.push(
                path.strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned(),
            );
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn cluster_flags_that_do_not_go_together_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let peers = "1=127.0.0.1:19100,2=127.0.0.1:19101";
    for (extra, expected) in [
        (
            vec![
                "--cluster-listen",
                "127.0.0.1:19100",
                "--cluster-peers",
                peers,
            ],
            "--cluster-listen needs --node-id",
        ),
        (
            vec![
                "--node-id",
                "3",
                "--cluster-listen",
                "127.0.0.1:19100",
                "--cluster-peers",
                peers,
            ],
            "does not name this node (3)",
        ),
        (
            vec!["--node-id", "1", "--cluster-peers", peers],
            "--cluster-peers needs --cluster-listen",
        ),
        (
            vec![
                "--node-id",
                "1",
                "--cluster-listen",
                "127.0.0.1:19100",
                "--cluster-peers",
                "1=a:1,1=b:2",
            ],
            "names node 1 twice",
        ),
        (
            vec![
                "--node-id",
                "1",
                "--cluster-listen",
                "127.0.0.1:19092",
                "--cluster-peers",
                peers,
            ],
            "port 19092 is already --listen's",
        ),
        (
            vec![
                "--node-id",
                "1",
                "--cluster-listen",
                "127.0.0.1:19100",
                "--cluster-peers",
                "1=a:1,40000=b:2",
            ],
            "node id 40000 is not in 1..=32767",
        ),
    ] {
        let stderr = serve(&data, "127.0.0.1:19092", &extra);
        // One line says it (clap adds a hint line to its own refusals).
        let first = stderr.lines().next().unwrap_or_default();
        assert!(first.contains(expected), "{extra:?}: {stderr}");
    }
    assert!(!data.exists(), "refused before the data directory was made");
}
