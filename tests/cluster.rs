//! Three nodes of the real binary on 127.0.0.1, each with its own data directory and ports:
//! they elect one controller leader and agree on it (`pagurus cluster status` and the
//! client's ClusterStatus on every node), a kill -9 of the leader is replaced within 5 s
//! with the default timeouts, and the killed node rejoins from its data directory without
//! deposing the new leader (pre-vote). A node's data directory refuses another node id.
//! Network partitions (link down in network namespaces) are `tests/cluster_netns.rs`'s and
//! `scripts/cluster-netns.sh`'s; restarts of every node and 5 nodes `tests/cluster_restart.rs`'s.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Broker;
use common::cluster::{
    Cluster, agreed, cli_status, cluster_args, eventually, partitions_on, status,
};

#[test]
fn three_nodes_elect_one_leader_replace_it_when_killed_and_take_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    let (first, term) = agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));

    // The command line shows the same cluster from every node, with their addresses.
    for node in &cluster.nodes {
        let json = cli_status(node);
        assert_eq!(json["leader"], first, "{json}");
        let nodes = json["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 3, "{json}");
        for (i, n) in nodes.iter().enumerate() {
            assert_eq!(n["id"], i + 1);
            assert_eq!(n["live"], true);
            assert_eq!(
                n["cluster_addr"],
                format!("127.0.0.1:{}", cluster.cluster_ports[i])
            );
            assert_eq!(
                n["client_addr"],
                cluster.nodes[i].addr.to_string(),
                "{json}"
            );
        }
    }

    // kill -9 of the leader: the other two agree on another within 5 s.
    cluster.node(first).kill();
    let killed_at = Instant::now();
    let survivors: Vec<u16> = (1..=3).filter(|&id| id != first).collect();
    let deadline = killed_at + Duration::from_secs(5);
    let (second, second_term) = loop {
        let seen: Vec<_> = survivors
            .iter()
            .map(|&id| status(&cluster.nodes[usize::from(id) - 1]))
            .collect();
        let leaders: Vec<Option<(u16, u64)>> = seen
            .iter()
            .map(|s| s.as_ref().map(|s| (s.leader, s.term)))
            .collect();
        if let Some(Some((leader, t))) = leaders.first().copied()
            && leader != first
            && leader != 0
            && leaders.iter().all(|l| *l == Some((leader, t)))
        {
            break (leader, t);
        }
        assert!(
            Instant::now() < deadline,
            "no new leader within 5 s of the kill: {seen:#?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!(
        "new leader {second} (term {second_term}) {:?} after the kill",
        killed_at.elapsed()
    );
    assert!(second_term > term);
    // The new leader marks the dead node down.
    agreed(&cluster, &survivors, 2, Duration::from_secs(10));

    // The killed node comes back with its data directory: it rejoins, is live again, and
    // the leader and term stay (its pre-vote cannot depose a leader the others hear).
    cluster.node(first).restart();
    let (leader, rejoined_term) = agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    assert_eq!((leader, rejoined_term), (second, second_term));

    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
        assert!(node.log_text().contains("controller stopped"));
    }
}

#[test]
fn a_cluster_nodes_data_directory_refuses_another_node_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    assert!(cluster.node(2).terminate().success());
    assert!(dir.path().join("node2/cluster/cluster_id").is_file());
    assert!(
        dir.path()
            .join("node2/cluster/controller/raft_state")
            .is_file()
    );

    // Node 2's directory started as node 1 (with node 1's cluster flags, but on a free
    // cluster port: node 1's own is in use, which is refused before the data directory is
    // looked at).
    let listen = format!("127.0.0.1:{}", common::cluster::free_port());
    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("node2"))
        .args(["--listen", "127.0.0.1:0"])
        .args(cluster_args(1, &listen, &cluster.peers))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("belongs to node 2 of a cluster, not to node 1"),
        "{stderr}"
    );
    for id in [1, 3] {
        assert!(cluster.node(id).terminate().success());
    }
}

#[test]
fn a_broker_without_cluster_flags_is_a_one_node_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &["--no-shard-ports"]);
    let status = broker.client().cluster_status().unwrap();
    assert_eq!((status.node, status.role, status.term), (0, 0, 0));
    assert_eq!(status.leader, 0);
    assert_eq!(status.nodes.len(), 1);
    assert_eq!(status.nodes[0].client_addr, broker.addr.to_string());
    assert_eq!(status.nodes[0].cores, 2);
    assert!(status.nodes[0].live);
    let json = cli_status(&broker);
    assert_eq!(json["role"], "alone", "{json}");
    assert!(broker.terminate().success());
    assert!(!dir.path().join("data/cluster").exists());
}

#[test]
fn topics_go_through_the_controller_and_each_node_makes_its_share() {
    use pagurus::protocol::native::{ErrorCode, TopicSettings};
    use pagurus::protocol::record::encode_batch;
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    let (leader, _) = agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));

    // Created through a follower: raft-rs forwards the proposal to the leader.
    let settings = TopicSettings {
        partitions: 12,
        ..Default::default()
    };
    let follower = leader % 3 + 1;
    cluster
        .node(follower)
        .client()
        .create_topic("orders", settings)
        .unwrap();
    let mut all = Vec::new();
    for id in 1..=3 {
        eventually(&format!("node {id} has its 4 partitions"), || {
            partitions_on(dir.path(), id, "orders").len() == 4
        });
        all.extend(partitions_on(dir.path(), id, "orders"));
        // A node makes the partition files, then publishes the topic to its cores: under
        // load, its metadata can lag the files by a moment.
        eventually(&format!("node {id} lists the topic"), || {
            let metadata = cluster.node(id).client().metadata(&[]).unwrap();
            metadata.topics.iter().any(|t| t.name == "orders")
        });
    }
    all.sort_unstable();
    assert_eq!(
        all,
        (0..12).collect::<Vec<u32>>(),
        "each partition on one node"
    );
    // Created again through another node: the controller refuses it.
    let again = cluster.node(3).client().create_topic("orders", settings);
    assert_eq!(again.unwrap_err().code(), Some(ErrorCode::TopicExists));

    // A node serves its own partitions and sends clients elsewhere for the others.
    let mine = partitions_on(dir.path(), 1, "orders")[0];
    let other = partitions_on(dir.path(), 2, "orders")[0];
    let batch = encode_batch(0, b"", b"here", 1);
    let mut client = cluster.node(1).client();
    client
        .produce("orders", mine, std::slice::from_ref(&batch))
        .unwrap();
    let refused = client.produce("orders", other, &[batch]).unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::NotHere), "{refused}");

    // The leader is killed and a topic created at once through another node: the proposal
    // waits for the new leader (or is made again to it), and the killed node makes its
    // share when it comes back. (The leader marks a node down 3 s after it last heard from
    // it and placement skips a down node, so the killed node usually has none: the new
    // leader is elected within about 2 s and judges the old one 3 s later.)
    let (down, _) = agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    let up: Vec<u16> = (1..=3).filter(|&id| id != down).collect();
    cluster.node(down).kill();
    cluster
        .node(up[0])
        .client()
        .create_topic("later", settings)
        .unwrap();
    let mut on_others = 0;
    eventually("the other two make their shares of later", || {
        let (one, two) = (
            partitions_on(dir.path(), up[0], "later").len(),
            partitions_on(dir.path(), up[1], "later").len(),
        );
        on_others = one + two;
        one == two && (one == 4 || one == 6)
    });
    assert!(partitions_on(dir.path(), down, "later").is_empty());
    cluster.node(down).restart();
    eventually(
        "the killed node makes its share of a topic created while it was down",
        || partitions_on(dir.path(), down, "later").len() == 12 - on_others,
    );
    eventually("the killed node has the topic", || {
        status(&cluster.nodes[usize::from(down) - 1]).is_some_and(|s| s.leader != 0)
            && cluster
                .node(down)
                .client()
                .metadata(&["later"])
                .is_ok_and(|m| m.topics.iter().any(|t| t.name == "later" && t.error == 0))
    });

    // Deleted through node 3: gone from every node.
    cluster.node(3).client().delete_topic("orders").unwrap();
    for id in 1..=3 {
        eventually(&format!("node {id} deleted orders"), || {
            partitions_on(dir.path(), id, "orders").is_empty()
                && !dir.path().join(format!("node{id}/topics/orders")).exists()
        });
    }
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

/// `kcat ARGS` with `input` on stdin, within 30 s; its stdout.
fn kcat(args: &[&str], input: &str) -> String {
    use std::io::Write;
    let mut child = Command::new("timeout")
        .arg("30")
        .arg("kcat")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "kcat {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_kafka_client_bootstrapped_on_one_node_reaches_every_partition() {
    if !common::have("kcat", "kcat", &["-V"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    let settings = pagurus::protocol::native::TopicSettings {
        partitions: 6,
        ..Default::default()
    };
    cluster
        .node(3)
        .client()
        .create_topic("spread", settings)
        .unwrap();
    let bootstrap = cluster.node(1).addr.to_string();

    // The metadata lists every node's broker (node << 16 | core) and each partition's.
    let listing = kcat(&["-b", &bootstrap, "-L", "-t", "spread"], "");
    for broker in [65536, 131072, 196608] {
        assert!(
            listing.contains(&format!("broker {broker} at")),
            "{listing}"
        );
    }
    for partition in 0..6 {
        kcat(
            &[
                "-b",
                &bootstrap,
                "-P",
                "-t",
                "spread",
                "-p",
                &partition.to_string(),
            ],
            &format!("m{partition}\n"),
        );
    }
    let consumed = kcat(
        &[
            "-b",
            &bootstrap,
            "-C",
            "-t",
            "spread",
            "-o",
            "beginning",
            "-e",
            "-q",
        ],
        "",
    );
    let mut got: Vec<&str> = consumed.lines().collect();
    got.sort_unstable();
    assert_eq!(got, ["m0", "m1", "m2", "m3", "m4", "m5"]);
    for id in 1..=3 {
        assert_eq!(partitions_on(dir.path(), id, "spread").len(), 2);
    }
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}
