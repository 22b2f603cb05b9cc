//! Kafka consumer groups with real clients nobody here wrote: confluent-kafka (librdkafka)
//! and kafka-python, from `tests/kafka_groups/groups.py`, against a real broker.

mod common;

use std::process::Command;

use common::Broker;

/// Runs one mode of the Python script; fails the test with its output if it fails.
fn python(broker: &Broker, mode: &str) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/kafka_groups/groups.py");
    let out = Command::new("timeout")
        .args(["120", "python3", script, &broker.addr.to_string(), mode])
        .env("PAGURUS_BIN", env!("CARGO_BIN_EXE_pagurus"))
        .env_remove("PAGURUS_BROKER")
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("OK"),
        "groups.py {mode}: {}\n{stdout}\n{stderr}\nbroker log:\n{}",
        out.status,
        broker.log_text()
    );
}

#[test]
fn a_librdkafka_group_shares_partitions_and_takes_over_after_a_leave() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    python(&broker, "share");
}

#[test]
fn a_group_resumes_at_its_commits_after_consumer_and_broker_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    python(&broker, "commit");
    assert!(broker.terminate().success(), "the broker stops cleanly");
    broker.restart();
    python(&broker, "resume");
    python(&broker, "admin");
}

#[test]
fn groups_describe_shows_the_assignment_of_librdkafka_members() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    python(&broker, "describe");
}
