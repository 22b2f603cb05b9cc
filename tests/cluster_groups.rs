//! Consumer groups across a cluster: a group's coordinator is one (node, core) of the
//! registered nodes (docs/CLUSTER.md, "Groups across the cluster"), every node names it in
//! FindCoordinator, and the others answer NOT_COORDINATOR. Kafka clients nobody here
//! wrote (confluent-kafka) bootstrapped on node 1 only produce to and consume from every
//! partition of a topic spread over three nodes, as a group that commits and resumes.

mod common;

use std::process::Command;
use std::time::Duration;

use common::cluster::{Cluster, agreed, partitions_on};
use common::have_python;
use kafka_protocol::messages::{
    ApiKey, FindCoordinatorRequest, FindCoordinatorResponse, HeartbeatRequest, HeartbeatResponse,
    OffsetFetchRequest, OffsetFetchResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use pagurus::cluster::NodeId;
use pagurus::cluster::table::coordinator_among;

const NOT_COORDINATOR: i16 = 16;
const UNKNOWN_MEMBER_ID: i16 = 25;

/// A group name whose coordinator is node `node` of three one-core nodes.
fn group_on(node: u16) -> String {
    let members = [(NodeId(1), 1), (NodeId(2), 1), (NodeId(3), 1)];
    (0..)
        .map(|i| format!("spread-group-{i}"))
        .find(|g| coordinator_among(&members, g) == Some((NodeId(node), 0)))
        .unwrap()
}

/// FindCoordinator v2 of `group` at `conn`: (error, broker id, port).
fn find_coordinator(conn: &mut common::kafka::Conn, group: &str) -> (i16, i32, i32) {
    let request = FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.into()));
    let mut body = conn.call(ApiKey::FindCoordinator, 2, &request);
    let answer = FindCoordinatorResponse::decode(&mut body, 2).unwrap();
    (answer.error_code, answer.node_id.0, answer.port)
}

/// Heartbeat v3 of a member the group does not have, and OffsetFetch v5 of partition 0:
/// their error codes (the group's, for OffsetFetch).
fn group_calls(conn: &mut common::kafka::Conn, group: &str, topic: &str) -> (i16, i16) {
    use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
    use kafka_protocol::messages::{GroupId, TopicName};
    let group_id = GroupId(StrBytes::from_string(group.into()));
    let heartbeat = HeartbeatRequest::default()
        .with_group_id(group_id.clone())
        .with_generation_id(1)
        .with_member_id(StrBytes::from_static_str("nobody"));
    let mut body = conn.call(ApiKey::Heartbeat, 3, &heartbeat);
    let beat = HeartbeatResponse::decode(&mut body, 3).unwrap().error_code;
    let fetch = OffsetFetchRequest::default()
        .with_group_id(group_id)
        .with_topics(Some(vec![
            OffsetFetchRequestTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.into())))
                .with_partition_indexes(vec![0]),
        ]));
    let mut body = conn.call(ApiKey::OffsetFetch, 5, &fetch);
    let fetched = OffsetFetchResponse::decode(&mut body, 5)
        .unwrap()
        .error_code;
    (beat, fetched)
}

/// Runs `tests/kafka/cluster_groups.py` and returns the JSON it printed last.
fn driver(args: &[&str]) -> serde_json::Value {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka/cluster_groups.py");
    let out = Command::new("timeout")
        .args(["120", "python3", script])
        .args(args)
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "cluster_groups.py {args:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}"))
}

/// `{"0": n, "1": n, ...}` for every partition of 12.
fn every_partition(value: u64) -> serde_json::Value {
    (0..12)
        .map(|p| (p.to_string(), serde_json::Value::from(value)))
        .collect::<serde_json::Map<_, _>>()
        .into()
}

#[test]
fn a_group_bootstrapped_on_one_node_finds_its_coordinator_commits_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    common::create_topic(&cluster.nodes[1], "spread", 12);
    for node in 1..=3 {
        let topic = || partitions_on(dir.path(), node, "spread");
        common::cluster::eventually("4 partitions on each node", || topic().len() == 4);
    }

    // Every node names the same coordinator, node 3's broker (3 << 16, its one core), and
    // the others send group calls there with NOT_COORDINATOR.
    let group = group_on(3);
    let node3_port = i32::from(cluster.nodes[2].addr.port());
    for node in &cluster.nodes {
        let mut conn = common::kafka::Conn::connect(node.addr);
        assert_eq!(
            find_coordinator(&mut conn, &group),
            (0, 3 << 16, node3_port),
            "asked node at {}",
            node.addr
        );
    }
    for node in [0, 1] {
        let mut conn = common::kafka::Conn::connect(cluster.nodes[node].addr);
        let codes = group_calls(&mut conn, &group, "spread");
        assert_eq!(
            codes,
            (NOT_COORDINATOR, NOT_COORDINATOR),
            "node {}",
            node + 1
        );
    }
    let mut at_three = common::kafka::Conn::connect(cluster.nodes[2].addr);
    assert_eq!(
        group_calls(&mut at_three, &group, "spread"),
        (UNKNOWN_MEMBER_ID, 0)
    );

    // Records produced to the topic so far.
    let mut records = 0;
    if have_python("confluent_kafka") {
        let bootstrap = cluster.nodes[0].addr.to_string();
        let run = |mode: &str, extra: &[&str]| {
            let args = [
                &[bootstrap.as_str(), "spread", "12", &group, mode][..],
                extra,
            ]
            .concat();
            driver(&args)
        };
        // Produce to every partition and read every one back as a group of two members,
        // which commit; all through node 1.
        let produced = run("produce", &["10"]);
        assert_eq!(produced["delivered"], every_partition(10), "{produced}");
        let first = run("consume", &[]);
        assert_eq!(first["first"], every_partition(0), "{first}");
        assert_eq!(first["committed"], every_partition(10), "{first}");
        for (p, read) in first["count"].as_object().unwrap() {
            assert!(read.as_u64().unwrap() >= 10, "partition {p}: {first}");
        }
        let assigned = first["assigned"].as_array().unwrap();
        assert!(assigned.iter().all(|a| !a.as_array().unwrap().is_empty()));
        // The offsets are kept on the coordinator's node only.
        let mut at_one = common::kafka::Conn::connect(cluster.nodes[0].addr);
        assert_eq!(
            group_calls(&mut at_one, &group, "spread").1,
            NOT_COORDINATOR
        );

        // New members of the group resume where the group committed.
        let produced = run("produce", &["5"]);
        assert_eq!(produced["delivered"], every_partition(5), "{produced}");
        let second = run("consume", &[]);
        assert_eq!(second["first"], every_partition(10), "{second}");
        assert_eq!(second["committed"], every_partition(15), "{second}");
        records = 12 * 15;
    }
    if common::have("kcat", "kcat", &["-V"]) {
        // kcat's balanced consumer (-G), bootstrapped on node 1, in a group node 2
        // coordinates: every record of every partition, then it exits at the end.
        let produce = ["produce", "--topic", "spread", "--key-separator", ":"];
        let lines: String = (0..24).map(|i| format!("k{i}:v{i}\n")).collect();
        let (ok, _, err) = pagurus(&cluster.nodes[0], &produce, &lines);
        assert!(ok, "{err}");
        let out = Command::new("timeout")
            .args(["60", "kcat", "-b", &cluster.nodes[0].addr.to_string()])
            .args(["-G", &group_on(2), "spread", "-e", "-q", "-f", "%p %o\n"])
            .args(["-X", "auto.offset.reset=earliest"])
            .output()
            .unwrap();
        let read = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{read}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(read.lines().count(), records + 24, "{read}");
    }
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

/// `pagurus ARGS --broker NODE` with `input` on stdin; (success, stdout, stderr).
fn pagurus(node: &common::Broker, args: &[&str], input: &str) -> (bool, String, String) {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(args)
        .args(["--broker", &node.addr.to_string(), "--timeout-ms", "5000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The committed offset of each partition in `groups describe --output json`.
fn committed(json: &str) -> Vec<(u64, u64)> {
    let json: serde_json::Value = serde_json::from_str(json).unwrap();
    let mut offsets: Vec<(u64, u64)> = json["partitions"]
        .as_array()
        .unwrap_or_else(|| panic!("{json}"))
        .iter()
        .map(|p| {
            let partition = p["partition"].as_u64().unwrap();
            (partition, p["committed_offset"].as_u64().unwrap())
        })
        .collect();
    offsets.sort_unstable();
    offsets
}

/// Each partition's (partition, log end, lag) in `groups describe --output json`.
fn log_ends(json: &str) -> Vec<(u64, u64, u64)> {
    let json: serde_json::Value = serde_json::from_str(json).unwrap();
    let mut ends: Vec<(u64, u64, u64)> = json["partitions"]
        .as_array()
        .unwrap_or_else(|| panic!("{json}"))
        .iter()
        .map(|p| {
            let field = |name: &str| p[name].as_u64().unwrap();
            (field("partition"), field("log_end_offset"), field("lag"))
        })
        .collect();
    ends.sort_unstable();
    ends
}

/// Each partition's high watermark as `topics describe` through `node` shows it (asked
/// of each partition's node).
fn high_watermarks(node: &common::Broker, topic: &str) -> Vec<u64> {
    let (ok, out, err) = pagurus(node, &["topics", "describe", topic, "--output", "json"], "");
    assert!(ok, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    json[0]["partitions"]
        .as_array()
        .unwrap_or_else(|| panic!("{json}"))
        .iter()
        .map(|p| p["high_watermark"].as_u64().unwrap())
        .collect()
}

#[test]
fn the_cli_bootstrapped_on_one_node_follows_a_group_to_its_coordinator() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    common::create_topic(&cluster.nodes[0], "native", 6);
    for node in 1..=3 {
        let topic = || partitions_on(dir.path(), node, "native");
        common::cluster::eventually("2 partitions on each node", || topic().len() == 2);
    }
    let node1 = &cluster.nodes[0];
    let lines: String = (0..60).map(|i| format!("k{i}:v{i}\n")).collect();
    let produce = ["produce", "--topic", "native", "--key-separator", ":"];
    let (ok, _, err) = pagurus(node1, &produce, &lines);
    assert!(ok, "{err}");

    // The group's calls made on node 1 are NotHere; FindCoordinator names node 2.
    let group = group_on(2);
    let mut client = node1.client();
    let refused = client.fetch_offset(&group, "native", 0).unwrap_err();
    assert_eq!(
        refused.code(),
        Some(pagurus::protocol::native::ErrorCode::NotHere)
    );
    let found = client.find_coordinator(&group).unwrap();
    assert_eq!((found.node, found.core, found.here), (2, 0, false));
    assert_eq!(found.port, cluster.nodes[1].addr.port());
    let at_two = cluster.nodes[1].client().find_coordinator(&group).unwrap();
    assert!(at_two.here, "{at_two:?}");

    // A member bootstrapped on node 1 joins at node 2 and reads every partition of every
    // node, committing as it goes; a second run has nothing left to read.
    let consume = [
        "consume",
        "--topic",
        "native",
        "--group",
        &group,
        "--exit-at-end",
    ];
    let (ok, out, err) = pagurus(node1, &consume, "");
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 60, "{out}");
    let describe = ["groups", "describe", &group, "--output", "json"];
    let (ok, out, err) = pagurus(node1, &describe, "");
    assert!(ok, "{err}");
    let offsets = committed(&out);
    assert_eq!(offsets.len(), 6, "{out}");
    assert_eq!(offsets.iter().map(|(_, c)| c).sum::<u64>(), 60, "{out}");
    // Each partition's log end is its owner node's, wherever it is: all read, no lag.
    let ends = high_watermarks(node1, "native");
    assert_eq!(ends.iter().sum::<u64>(), 60, "{ends:?}");
    let expected: Vec<_> = (0..6).map(|p| (p, ends[p as usize], 0)).collect();
    assert_eq!(log_ends(&out), expected, "{out}");
    let (ok, out, err) = pagurus(node1, &consume, "");
    assert!(ok && out.is_empty(), "{out}{err}");

    // Offsets set through node 1 land at node 2: read again from the start.
    let reset = [
        "groups",
        "reset-offsets",
        &group,
        "--topic",
        "native",
        "--to",
        "earliest",
    ];
    let (ok, _, err) = pagurus(node1, &reset, "");
    assert!(ok, "{err}");
    let (ok, out, err) = pagurus(&cluster.nodes[2], &describe, "");
    assert!(ok, "{err}");
    assert!(committed(&out).iter().all(|&(_, c)| c == 0), "{out}");
    // Through node 3, which owns none of node 2's partitions: the lag is the log end.
    let expected: Vec<_> = (0..6)
        .map(|p| (p, ends[p as usize], ends[p as usize]))
        .collect();
    assert_eq!(log_ends(&out), expected, "{out}");
    let (ok, out, err) = pagurus(node1, &consume, "");
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 60, "{out}");
    let (ok, out, err) = pagurus(node1, &["groups", "delete", &group], "");
    assert!(ok, "{out}{err}");
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

#[test]
fn groups_list_through_one_node_lists_the_groups_of_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    common::create_topic(&cluster.nodes[0], "listed", 3);
    for node in 1..=3 {
        let topic = || partitions_on(dir.path(), node, "listed");
        common::cluster::eventually("a partition on each node", || topic().len() == 1);
    }
    // One group coordinated by each node, its offsets set through node 1.
    let mut groups: Vec<String> = (1..=3).map(group_on).collect();
    groups.sort_unstable();
    for group in &groups {
        let reset = [
            "groups",
            "reset-offsets",
            group,
            "--topic",
            "listed",
            "--to",
            "earliest",
        ];
        let (ok, _, err) = pagurus(&cluster.nodes[0], &reset, "");
        assert!(ok, "{group}: {err}");
    }
    let every: String = groups.iter().map(|g| format!("{g}\n")).collect();
    for node in &cluster.nodes {
        let (ok, out, err) = pagurus(node, &["groups", "list"], "");
        assert!(ok && err.is_empty(), "{err}");
        assert_eq!(out, every, "through {}", node.addr);
    }
    let (ok, out, err) = pagurus(
        &cluster.nodes[1],
        &["groups", "list", "--output", "json"],
        "",
    );
    assert!(ok, "{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, groups, "{out}");

    // With node 3 stopped, node 1 lists the other two's groups and says what is missing.
    assert!(cluster.nodes[2].terminate().success());
    let (ok, out, err) = pagurus(&cluster.nodes[0], &["groups", "list"], "");
    assert!(ok, "{err}");
    let on_three = group_on(3);
    let rest: String = groups
        .iter()
        .filter(|g| **g != on_three)
        .map(|g| format!("{g}\n"))
        .collect();
    assert_eq!(out, rest);
    assert!(err.contains("node 3's groups are not listed"), "{err}");
    for node in &mut cluster.nodes[..2] {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

#[test]
fn a_glommio_group_member_bootstrapped_on_one_node_reads_every_node_and_commits() {
    use pagurus::client::glommio::{Client, GroupConsumer};
    use pagurus::client::group::GroupConfig;
    use pagurus::protocol::native::OffsetSpec;

    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    common::create_topic(&cluster.nodes[0], "glommio", 6);
    for node in 1..=3 {
        let topic = || partitions_on(dir.path(), node, "glommio");
        common::cluster::eventually("2 partitions on each node", || topic().len() == 2);
    }
    let node1 = &cluster.nodes[0];
    let lines: String = (0..60).map(|i| format!("k{i}:v{i}\n")).collect();
    let produce = ["produce", "--topic", "glommio", "--key-separator", ":"];
    let (ok, _, err) = pagurus(node1, &produce, &lines);
    assert!(ok, "{err}");

    // A member given a connection to node 1 joins at node 2, the coordinator, and reads
    // the partitions of all three nodes.
    let group = group_on(2);
    let (addr, config) = (node1.addr, GroupConfig::new(&group, &["glommio"]));
    let read = common::on_glommio(move || async move {
        let client = Client::connect(addr).await.unwrap();
        let timeout = Duration::from_secs(5);
        let mut consumer = GroupConsumer::new(client, config, OffsetSpec::Earliest, timeout);
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut read = 0;
        while read < 60 && std::time::Instant::now() < deadline {
            if let Some(fetch) = consumer.poll(Duration::from_millis(100)).await.unwrap() {
                read += fetch.records().count();
            }
        }
        consumer.close().await.unwrap();
        read
    });
    assert_eq!(read, 60);
    let describe = ["groups", "describe", &group, "--output", "json"];
    let (ok, out, err) = pagurus(node1, &describe, "");
    assert!(ok, "{err}");
    let ends = high_watermarks(node1, "glommio");
    let expected: Vec<_> = (0..6).map(|p| (p, ends[p as usize], 0)).collect();
    assert_eq!(log_ends(&out), expected, "all committed: {out}");
    assert_eq!(committed(&out).iter().map(|(_, c)| c).sum::<u64>(), 60);
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}
