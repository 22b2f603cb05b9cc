//! A cluster's metadata survives its nodes: every node of three killed (-9) and started
//! again keeps its topics and their placement; five nodes start, elect and place a topic;
//! a data directory of another cluster is refused at start.
//! Loopback ports, each node with its own data directory.

mod common;

use std::time::Duration;

use common::cluster::{Cluster, agreed, eventually, partitions_on};
use pagurus::protocol::native::TopicSettings;

/// Each partition's owner node of `topic`, as node `id` answers once it knows the topic
/// (a node makes the partition files, then publishes the topic to its cores: under load its
/// metadata can lag the files by a moment).
fn owners(cluster: &mut Cluster, id: u16, topic: &str) -> Vec<Option<u16>> {
    eventually(&format!("node {id} knows {topic}"), || {
        let metadata = cluster.node(id).client().metadata(&[topic]).unwrap();
        metadata.topics[0].error == 0
    });
    let metadata = cluster.node(id).client().metadata(&[topic]).unwrap();
    assert_eq!(metadata.topics[0].error, 0, "{metadata:?}");
    let owners = metadata.topics[0].partitions.iter();
    owners.map(|p| p.owner_node).collect()
}

#[test]

fn every_node_killed_and_started_again_keeps_the_topics_and_their_placement() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    let twelve = TopicSettings {
        partitions: 12,
        ..Default::default()
    };
    cluster
        .node(2)
        .client()
        .create_topic("kept", twelve)
        .unwrap();
    let five = TopicSettings {
        partitions: 5,
        ..Default::default()
    };
    cluster.node(3).client().create_topic("also", five).unwrap();
    let topics = ["kept", "also"];
    for topic in topics {
        let total = if topic == "kept" { 12 } else { 5 };
        eventually(&format!("every node made its share of {topic}"), || {
            (1..=3)
                .map(|id| partitions_on(dir.path(), id, topic).len())
                .sum::<usize>()
                == total
        });
    }
    let before: Vec<Vec<Vec<u32>>> = topics
        .iter()
        .map(|t| (1..=3).map(|id| partitions_on(dir.path(), id, t)).collect())
        .collect();
    let placed: Vec<Vec<Option<u16>>> = topics.iter().map(|t| owners(&mut cluster, 1, t)).collect();
    assert!(placed[0].iter().all(Option::is_some), "{placed:?}");

    for node in &mut cluster.nodes {
        node.kill();
    }
    for node in &mut cluster.nodes {
        node.restart();
    }
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    for (t, topic) in topics.iter().enumerate() {
        for id in 1..=3 {
            assert_eq!(
                partitions_on(dir.path(), id, topic),
                before[t][usize::from(id) - 1]
            );
            assert_eq!(
                owners(&mut cluster, id, topic),
                placed[t],
                "node {id}, {topic}"
            );
        }
    }
    // And the controller works again: a new topic, a duplicate refused.
    cluster
        .node(1)
        .client()
        .create_topic("after", five)
        .unwrap();
    let again = cluster.node(2).client().create_topic("kept", twelve);
    assert!(again.is_err());
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

#[test]
fn five_nodes_elect_a_leader_and_place_a_topic_on_all() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 5);
    let all = [1, 2, 3, 4, 5];
    agreed(&cluster, &all, 5, Duration::from_secs(20));
    let settings = TopicSettings {
        partitions: 10,
        ..Default::default()
    };
    cluster
        .node(4)
        .client()
        .create_topic("five", settings)
        .unwrap();
    for id in all {
        eventually(&format!("node {id} has its 2 partitions"), || {
            partitions_on(dir.path(), id, "five").len() == 2
        });
    }
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

#[test]
fn another_clusters_data_directory_is_refused_at_start() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));

    // A data directory of another cluster: node 3 of a cluster formed with other peers
    // (nobody else up, so it starts after its wait and keeps that cluster's id).
    let foreign = dir.path().join("foreign");
    let other: Vec<u16> = (0..3).map(|_| common::cluster::free_port()).collect();
    let other_peers = format!(
        "1=127.0.0.1:{},2=127.0.0.1:{},3=127.0.0.1:{}",
        other[0], other[1], other[2]
    );
    let listen = format!("127.0.0.1:{}", other[2]);
    let mut formed = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .arg("serve")
        .arg("--data-dir")
        .arg(&foreign)
        .args(["--listen", "127.0.0.1:0"])
        .args(common::cluster::cluster_args(3, &listen, &other_peers))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    eventually("the other cluster's id is kept", || {
        foreign.join("cluster/cluster_id").is_file()
    });
    formed.kill().unwrap();
    formed.wait().unwrap();

    // Started as node 3 of the running cluster: its peers' hellos name their cluster, not
    // the one its directory keeps, and the start is refused saying so.
    assert!(cluster.node(3).terminate().success());
    let listen = format!("127.0.0.1:{}", cluster.cluster_ports[2]);
    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .arg("serve")
        .arg("--data-dir")
        .arg(&foreign)
        .args(["--listen", "127.0.0.1:0"])
        .args(common::cluster::cluster_args(3, &listen, &cluster.peers))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("nodes 1, 2 of --cluster-peers are in cluster")
            && stderr.contains("another cluster's data directory"),
        "{stderr}"
    );
    // Its own directory starts and rejoins.
    cluster.node(3).restart();
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}
