//! Kafka admin operations through real clients against a real broker
//! (`tests/kafka/admin.py`: confluent-kafka's AdminClient and kafka-python's admin client):
//! CreatePartitions grows a topic from 3 to 6 keeping every record, and a producer then
//! writes to all 6, also after a restart; DeleteRecords moves the log start for Kafka
//! consumers, the native client and `pagurus` retention, durably across kill -9;
//! DescribeCluster, DescribeLogDirs and ElectLeaders answer for one node.
//!
//! A missing client fails the test when `PAGURUS_KAFKA_CLIENTS=required` (set by `.ci/run`);
//! elsewhere the test prints why it skipped.

mod common;

use std::process::Command;
use std::time::Duration;

use common::{Broker, have_python};
use pagurus::client::ClientError;
use pagurus::protocol::native::OffsetSpec;
use serde_json::Value;

fn driver(broker: &Broker, phase: &str) -> Value {
    let script = format!("{}/tests/kafka/admin.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("timeout")
        .args(["120", "python3", &script, &broker.addr.to_string(), phase])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "admin.py {phase}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("admin.py printed no JSON ({e}): {stdout}"))
}

fn clients() -> bool {
    have_python("confluent_kafka") && have_python("kafka")
}

fn values(read: &Value, partition: usize) -> Vec<String> {
    read[partition.to_string()]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn create_partitions_grows_3_to_6_keeping_every_record() {
    if !clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let seen = driver(&broker, "grow");
    assert_eq!(seen["partitions_after"], 6, "{seen}");
    assert_eq!(seen["shrink"], "INVALID_PARTITIONS");
    // The three old partitions hold exactly what they held, first, in order.
    let mut before = Vec::new();
    for p in 0..3 {
        let old = values(&seen["before"], p);
        let now = values(&seen["after"], p);
        assert_eq!(now[..old.len()], old[..], "partition {p}");
        before.extend(old);
    }
    before.sort();
    let mut expected: Vec<String> = (0..30).map(|i| format!("before-{i}")).collect();
    expected.sort();
    assert_eq!(before, expected, "every record kept");
    // The producer that started after the grow wrote to all six.
    let mut after = Vec::new();
    for p in 0..6 {
        let new: Vec<String> = values(&seen["after"], p)
            .into_iter()
            .filter(|v| v.starts_with("after-"))
            .collect();
        assert!(
            !new.is_empty(),
            "partition {p} got none of the new records: {seen}"
        );
        after.extend(new);
    }
    assert_eq!(after.len(), 60);

    // After a restart the topic has 6 partitions, and the native client reads them all.
    broker.terminate();
    broker.restart();
    let mut client = broker.client();
    let metadata = client.metadata(&["grow"]).unwrap();
    assert_eq!(metadata.topics[0].partitions.len(), 6, "{metadata:?}");
    let mut total = 0;
    for p in 0..6 {
        total += client.list_offsets("grow", p, OffsetSpec::Latest).unwrap();
    }
    assert_eq!(total, 90);
    let described = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args([
            "topics",
            "describe",
            "grow",
            "--broker",
            &broker.addr.to_string(),
        ])
        .env_remove("PAGURUS_BROKER")
        .output()
        .unwrap();
    let described = String::from_utf8_lossy(&described.stdout);
    assert!(described.contains('6'), "{described}");
}

#[test]
fn delete_records_moves_the_start_for_every_reader_durably() {
    if !clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &["--segment-bytes", "2048"]);
    let seen = driver(&broker, "delete");
    assert_eq!(seen["confluent_low"], 40, "{seen}");
    assert_eq!(
        seen["kafka_python_low"]["trim/0"]["low_watermark"], 70,
        "{seen}"
    );
    assert_eq!(seen["past_end"], "OFFSET_OUT_OF_RANGE");
    // A Kafka consumer from the beginning starts at the new start.
    assert_eq!(seen["first_read"], serde_json::json!([70, "r70"]));
    assert_eq!(seen["read"], 30);
    assert_eq!(seen["watermarks"], serde_json::json!([70, 100]));

    // The native client: earliest is 70, a fetch below it is out of range.
    let native = |broker: &Broker| {
        let mut client = broker.client();
        let earliest = client
            .list_offsets("trim", 0, OffsetSpec::Earliest)
            .unwrap();
        let below = client.fetch("trim", 0, 10, 1 << 20, Duration::ZERO);
        let start = match below {
            Err(ClientError::Broker { earliest, .. }) => earliest,
            other => panic!("a fetch below the start: {other:?}"),
        };
        (earliest, start)
    };
    assert_eq!(native(&broker), (70, 70));

    // kill -9: the start was durable before the answer.
    broker.kill();
    broker.restart();
    assert_eq!(native(&broker), (70, 70));

    // Retention (the topic has no limits) deletes the segments wholly below the start
    // within its next passes; the records from 70 on stay.
    let partition = dir.path().join("data/topics/trim/0");
    // One record per batch in 2 KiB segments: the segment at 0 ends well before 70.
    let below_start = |p: &std::path::Path| {
        let mut bases: Vec<u64> = std::fs::read_dir(p)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.strip_suffix(".wal")?.parse::<u64>().ok()
            })
            .filter(|&base| base < 70)
            .collect();
        bases.sort();
        bases
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while below_start(&partition).len() > 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let left = below_start(&partition);
    assert!(
        left.len() == 1 && left[0] > 0,
        "only the segment holding 70 starts below it: {left:?}"
    );
    let mut client = broker.client();
    let fetched = client
        .fetch("trim", 0, 70, 1 << 20, Duration::ZERO)
        .unwrap();
    assert_eq!(fetched.log_start_offset, 70);
    assert_eq!(
        client.list_offsets("trim", 0, OffsetSpec::Latest).unwrap(),
        100
    );
}

#[test]
fn describe_cluster_log_dirs_and_elect_leaders_answer_for_one_node() {
    if !clients() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let seen = driver(&broker, "cluster");
    let confluent = &seen["confluent_cluster"];
    assert_eq!(confluent["id"], "pagurus", "{seen}");
    assert_eq!(confluent["controller"], 0);
    assert_eq!(confluent["nodes"], serde_json::json!([0, 1]));
    let kp = &seen["kafka_python_cluster"];
    assert_eq!(kp["cluster_id"], "pagurus");
    let ports: Vec<u64> = kp["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["port"].as_u64().unwrap())
        .collect();
    let base = u64::from(broker.addr.port());
    assert_eq!(ports, [base + 1, base + 2], "each core's shard port");

    // Each broker (core) lists the partitions it leads; together, each partition once.
    let mut listed = Vec::new();
    for answer in seen["log_dirs"].as_array().unwrap() {
        let broker_id = answer["broker"].as_u64().unwrap() as usize;
        for log_dir in answer["log_dirs"].as_array().unwrap() {
            assert!(log_dir["usable_bytes"].as_i64().unwrap() > 0);
            for topic in log_dir["topics"].as_array().unwrap() {
                let name = topic["name"].as_str().unwrap();
                for p in topic["partitions"].as_array().unwrap() {
                    let index = p["partition_index"].as_u64().unwrap() as u32;
                    assert_eq!(
                        pagurus::shard::placement::partition_owner(name, index, 2),
                        broker_id
                    );
                    listed.push((
                        name.to_string(),
                        index,
                        p["partition_size"].as_i64().unwrap(),
                    ));
                }
            }
        }
    }
    listed.sort();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(
        listed[1].2 > 1000,
        "ten 100-byte records in dirs/1: {listed:?}"
    );

    // No election is ever needed: each partition's only replica leads it.
    assert_eq!(
        seen["kafka_python_elect"],
        serde_json::json!([[0, 84], [1, 84]])
    );
    assert_eq!(seen["confluent_elect"]["dirs/0"], "ELECTION_NOT_NEEDED");
}
