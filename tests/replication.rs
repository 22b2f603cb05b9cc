//! Replicated partitions on three nodes of the real binary (docs/REPLICATION.md): a topic
//! of replication factor 3 is a Raft group per partition over the partition logs; a
//! produce is acknowledged once a majority holds it, on whichever node it is sent to
//! (the node routes it to the leader, or says where the leader is); every node's log holds
//! the same bytes; a kill -9 of the leader loses no acknowledged record, and the two others
//! elect a new leader that takes produces; a node killed and restarted catches up, and
//! serves every acknowledged record once the others die in turn. A node with no replica
//! routes to the leader the controller is told of; an idempotent librdkafka producer's
//! messages are stored once.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::Broker;
use common::cluster::{Cluster, agreed, pagurus};

/// Produces `lines` to `partition` of `r3` through `node`, trying again for up to 20 s while no
/// leader is elected (each try fails whole or is acknowledged whole: one batch).
fn produce(node: &Broker, partition: u32, lines: &[String]) {
    produce_to(node, "r3", partition, lines);
}

fn produce_to(node: &Broker, topic: &str, partition: u32, lines: &[String]) {
    let input: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let partition = partition.to_string();
    let args = [
        "produce",
        "--topic",
        topic,
        "--partition",
        &partition,
        "--reconnect-ms",
        "0",
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, _, err) = pagurus(node, &args, &input);
        if ok {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "produce never acknowledged: {err}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Every record of `partition` of `r3`, read through `node` (from the leader).
fn consume(node: &Broker, partition: u32) -> Vec<String> {
    consume_from(node, "r3", partition)
}

fn consume_from(node: &Broker, topic: &str, partition: u32) -> Vec<String> {
    let partition = partition.to_string();
    let args = [
        "consume",
        "--topic",
        topic,
        "--partition",
        &partition,
        "--from",
        "earliest",
        "--exit-at-end",
        "--reconnect-ms",
        "0",
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (ok, out, err) = pagurus(node, &args, "");
        if ok {
            return out.lines().map(String::from).collect();
        }
        assert!(Instant::now() < deadline, "consume failed: {err}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The bytes of partition `partition`'s first segment on node `id` up to `len`.
fn segment(dir: &std::path::Path, id: u16, partition: u32, len: usize) -> Vec<u8> {
    let path = dir.join(format!(
        "node{id}/topics/r3/{partition}/00000000000000000000.wal"
    ));
    let bytes = std::fs::read(&path).unwrap();
    bytes[..len.min(bytes.len())].to_vec()
}

fn lines(tag: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{tag}-{i}")).collect()
}

#[test]
fn three_replicas_hold_the_same_log_and_lose_no_acknowledged_record_to_kills() {
    let dir = tempfile::tempdir().unwrap();
    // Two cores a node: a partition's replica may be on core 1, its messages routed
    // through core 0's transport.
    let mut cluster = Cluster::start_cores(dir.path(), 3, 2);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    let args = [
        "topics",
        "create",
        "r3",
        "--partitions",
        "2",
        "--replication-factor",
        "3",
    ];
    let (ok, _, err) = pagurus(&cluster.nodes[0], &args, "");
    assert!(ok, "{err}");

    // Produces sent to every node, for both partitions: acknowledged, in order.
    let mut acknowledged = [Vec::new(), Vec::new()];
    for round in 0..3 {
        for partition in 0..2u32 {
            let node = &cluster.nodes[(round + partition as usize) % 3];
            let batch = lines(&format!("p{partition}-r{round}"), 5);
            produce(node, partition, &batch);
            acknowledged[partition as usize].extend(batch);
        }
    }
    for partition in 0..2u32 {
        for node in &cluster.nodes {
            assert_eq!(consume(node, partition), acknowledged[partition as usize]);
        }
    }
    // Every node's log holds the same bytes (the leader's offsets and timestamps), once
    // the followers have them (an acknowledgement needs only a majority).
    for partition in 0..2u32 {
        common::cluster::eventually("the three logs are the same", || {
            let first = segment(dir.path(), 1, partition, 1 << 16);
            (2..=3).all(|id| segment(dir.path(), id, partition, 1 << 16) == first)
        });
    }

    // kill -9 of nodes in turn, each restarted before the next: every acknowledged record
    // survives, produces go on through the two left.
    for victim in 1..=3u16 {
        cluster.node(victim).kill();
        let other = &cluster.nodes[usize::from(victim % 3)];
        for partition in 0..2u32 {
            let batch = lines(&format!("p{partition}-after-kill-{victim}"), 3);
            produce(other, partition, &batch);
            acknowledged[partition as usize].extend(batch);
            assert_eq!(consume(other, partition), acknowledged[partition as usize]);
        }
        cluster.node(victim).restart();
        agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(20));
    }
    // The last node restarted caught up: with another node down, it is half the majority
    // that serves every acknowledged record.
    cluster.node(1).kill();
    for partition in 0..2u32 {
        assert_eq!(
            consume(&cluster.nodes[2], partition),
            acknowledged[partition as usize],
            "partition {partition}"
        );
    }
    for node in &mut cluster.nodes[1..] {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

#[test]
fn a_node_without_a_replica_follows_the_leader_the_controller_is_told_of() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    let args = ["topics", "create", "r2", "--replication-factor", "2"];
    let (ok, _, err) = pagurus(&cluster.nodes[0], &args, "");
    assert!(ok, "{err}");
    let holds = |id| !common::cluster::partitions_on(dir.path(), id, "r2").is_empty();
    common::cluster::eventually("two nodes hold r2", || {
        (1..=3).filter(|&id| holds(id)).count() == 2
    });
    let outside = (1..=3).find(|&id| !holds(id)).unwrap();
    let outsider = usize::from(outside) - 1;
    // Through the node with no replica: it names the leader it was told of.
    let mut acknowledged = lines("first", 4);
    produce_to(&cluster.nodes[outsider], "r2", 0, &acknowledged);

    // The leader killed: with two replicas the other cannot win alone, so the killed one
    // comes back; whichever leads then tells the controller, and the outsider follows.
    let leader = (1..=3u16)
        .filter(|&id| id != outside)
        .find(|&id| {
            let (_, out, _) = pagurus(
                &cluster.nodes[usize::from(id) - 1],
                &["topics", "describe", "r2"],
                "",
            );
            out.lines()
                .any(|l| l.split_whitespace().take(2).eq(["0", &id.to_string()]))
        })
        .unwrap();
    cluster.node(leader).kill();
    cluster.node(leader).restart();
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(20));
    let more = lines("after", 4);
    produce_to(&cluster.nodes[outsider], "r2", 0, &more);
    acknowledged.extend(more);
    assert_eq!(
        consume_from(&cluster.nodes[outsider], "r2", 0),
        acknowledged
    );
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

/// An idempotent librdkafka producer (acks=all) and a consumer on a topic of replication
/// factor 3, bootstrapped on all three nodes: every message acknowledged once and read back
/// once, in order per partition (`tests/kafka/librdkafka.py idempotent`).
#[test]
fn an_idempotent_librdkafka_producer_on_replicated_partitions() {
    if !common::have_python("confluent_kafka") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    let bootstrap: Vec<String> = cluster.nodes.iter().map(|n| n.addr.to_string()).collect();
    let script = format!("{}/tests/kafka/librdkafka.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("timeout")
        .args([
            "120",
            "python3",
            &script,
            "idempotent",
            &bootstrap.join(","),
            "idem",
            "20000",
        ])
        .env("REPLICATION_FACTOR", "3")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| {
            panic!(
                "no JSON ({e}): {stdout} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert_eq!(json["delivered"], 20000, "{json}");
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

/// A topic deleted and made again under its name keeps its records when every node
/// restarts: the controller applies the old deletion again at start (its log replayed from
/// the last snapshot), and the node must not delete the topic made since (it did, for
/// topics of one copy too, before).
#[test]
fn a_topic_made_again_after_a_deletion_survives_a_restart_of_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    for (topic, factor) in [("again3", "3"), ("again1", "1")] {
        for step in ["create", "delete", "create"] {
            let mut args = vec!["topics", step, topic];
            if step == "create" {
                args.extend(["--replication-factor", factor]);
            }
            let (ok, _, err) = pagurus(&cluster.nodes[0], &args, "");
            assert!(ok, "{step} {topic}: {err}");
        }
        produce_to(&cluster.nodes[1], topic, 0, &lines(topic, 5));
    }
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
    for node in &mut cluster.nodes {
        node.restart();
    }
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(20));
    for topic in ["again3", "again1"] {
        assert_eq!(
            consume_from(&cluster.nodes[2], topic, 0),
            lines(topic, 5),
            "{topic}"
        );
    }
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}
