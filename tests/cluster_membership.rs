//! A cluster's members change at run time: three nodes grow to four with `pagurus cluster
//! add-node` and `serve --cluster-join`, the new node takes partitions of a new topic, the
//! membership survives restarts, and the node is removed again (refused while it holds
//! partitions, and by the node removed itself). Loopback ports, each node with its own
//! data directory, the real binary and its CLI.

mod common;

use std::process::{Command, Output};
use std::time::Duration;

use common::cluster::{
    Cluster, agreed, cluster_args, eventually, free_port, partitions_on, status,
};
use pagurus::protocol::native::TopicSettings;

fn cli(node: &common::Broker, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .arg("cluster")
        .args(args)
        .args(["--broker", &node.addr.to_string()])
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The voters node `id` applied.
fn voters(cluster: &Cluster, id: u16) -> Vec<u16> {
    status(&cluster.nodes[usize::from(id) - 1]).map_or_else(Vec::new, |s| s.voters)
}

fn create(cluster: &mut Cluster, through: u16, topic: &str, partitions: u32) {
    let settings = TopicSettings {
        partitions,
        ..Default::default()
    };
    let mut client = cluster.node(through).client();
    client.create_topic(topic, settings).unwrap();
}

#[test]
fn three_nodes_grow_to_four_and_shrink_back_keeping_their_topics() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    create(&mut cluster, 1, "before", 3);

    // Added through node 2; the answer names the cluster id the new node joins with.
    let port = free_port();
    let member = format!("4=127.0.0.1:{port}");
    let added = stdout(&cli(cluster.node(2), &["add-node", &member]));
    assert!(added.contains("voters: 1, 2, 3, 4"), "{added}");
    let id = added
        .split("--cluster-join ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no cluster id in {added:?}"))
        .to_string();
    assert_eq!(id.len(), 32, "{added}");
    // Added again: nothing more to do, the same answer.
    let again = stdout(&cli(cluster.node(3), &["add-node", &member]));
    assert!(again.contains("voters: 1, 2, 3, 4"), "{again}");

    let peers = format!("{},{member}", cluster.peers);
    let mut args = cluster_args(4, &format!("127.0.0.1:{port}"), &peers);
    args.extend(["--cluster-join".to_string(), id]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    cluster.nodes.push(common::Broker::start_in(
        &dir.path().join("node4"),
        1,
        &args,
    ));
    agreed(&cluster, &[1, 2, 3, 4], 4, Duration::from_secs(20));
    for id in 1..=4 {
        eventually(&format!("node {id} applied four voters"), || {
            voters(&cluster, id) == [1, 2, 3, 4]
        });
    }
    // The new node has the topics made before it joined, and takes its share of a new one.
    eventually("node 4 knows the topic made before it joined", || {
        let metadata = cluster.node(4).client().metadata(&["before"]).unwrap();
        metadata.topics[0].error == 0 && metadata.topics[0].partitions.len() == 3
    });
    create(&mut cluster, 4, "grown", 8);
    eventually("node 4 made its two partitions of grown", || {
        partitions_on(dir.path(), 4, "grown").len() == 2
    });

    // The membership survives a kill -9 of the new node and of a founding one.
    for id in [4, 1] {
        cluster.node(id).kill();
        cluster.node(id).restart();
    }
    agreed(&cluster, &[1, 2, 3, 4], 4, Duration::from_secs(20));
    assert_eq!(voters(&cluster, 4), [1, 2, 3, 4]);

    // Not removed while it holds partitions, nor by itself; nothing changed by either.
    let held = cli(cluster.node(1), &["remove-node", "4"]);
    assert!(!held.status.success());
    let why = String::from_utf8_lossy(&held.stderr);
    assert!(why.contains("delete those topics first"), "{why}");
    let own = cli(cluster.node(4), &["remove-node", "4"]);
    assert!(!own.status.success());
    let why = String::from_utf8_lossy(&own.stderr);
    assert!(why.contains("ask another node"), "{why}");
    assert_eq!(voters(&cluster, 1), [1, 2, 3, 4]);

    cluster.node(2).client().delete_topic("grown").unwrap();
    let removed = stdout(&cli(cluster.node(1), &["remove-node", "4"]));
    assert!(removed.contains("voters: 1, 2, 3"), "{removed}");
    for id in 1..=3u16 {
        eventually(&format!("node {id} forgot node 4"), || {
            status(&cluster.nodes[usize::from(id) - 1])
                .is_some_and(|s| s.voters == [1, 2, 3] && s.nodes.iter().all(|n| n.id != 4))
        });
    }
    cluster.node(4).kill();

    // Three nodes again: new topics are placed on them only, and a restart keeps it so.
    create(&mut cluster, 3, "after", 6);
    eventually("the three nodes made after", || {
        (1..=3)
            .map(|id| partitions_on(dir.path(), id, "after").len())
            .sum::<usize>()
            == 6
    });
    assert!(partitions_on(dir.path(), 4, "after").is_empty());
    for id in 1..=3 {
        cluster.node(id).kill();
    }
    for id in 1..=3 {
        cluster.node(id).restart();
    }
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(20));
    for id in 1..=3 {
        assert_eq!(voters(&cluster, id), [1, 2, 3], "node {id}");
    }
}

#[test]
fn a_broker_alone_refuses_a_member_change_and_a_bad_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let alone = common::Broker::start_in(dir.path(), 1, &[]);
    let out = cli(&alone, &["add-node", "2=127.0.0.1:9"]);
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("without the cluster flags"), "{why}");

    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 1);
    agreed(&cluster, &[1], 1, Duration::from_secs(15));
    let mut client = cluster.node(1).client();
    let err = client.change_member(2, Some("no-port")).unwrap_err();
    assert!(err.to_string().contains("cluster address"), "{err}");
    let taken = format!("127.0.0.1:{}", cluster.cluster_ports[0]);
    let err = client.change_member(2, Some(&taken)).unwrap_err();
    assert!(err.to_string().contains("is node 1's already"), "{err}");
    let err = client.change_member(0, Some("127.0.0.1:9")).unwrap_err();
    assert!(err.to_string().contains("outside 1..="), "{err}");
    let err = client.change_member(1, None).unwrap_err();
    assert!(err.to_string().contains("ask another node"), "{err}");
    let err = client.change_member(3, None).unwrap_err();
    assert!(err.to_string().contains("not a member"), "{err}");
    assert_eq!(voters(&cluster, 1), [1]);
}
