//! A producer keeps its input order within each partition, with per-record keys (one key
//! per batch, so a change of key starts a new batch): `pagurus produce --key-separator`
//! and the glommio client's `Producer`, against a real broker.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Broker, create_topic, on_glommio};
use pagurus::client::glommio::{Producer, ProducerConfig};
use pagurus::client::produce::{BatchLimits, key_partition};

fn start() -> (tempfile::TempDir, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &["--fsync", "never"]);
    (dir, broker)
}

/// Runs `pagurus ARGS --broker ADDR` with `stdin`; returns stdout, failing on an error.
fn pagurus(broker: &Broker, args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(args)
        .arg("--broker")
        .arg(broker.addr.to_string())
        .env_remove("PAGURUS_BROKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the pagurus binary runs");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "pagurus {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `KEY=VALUE` lines of one partition, in offset order.
fn stored(broker: &Broker, topic: &str, partition: u32) -> Vec<String> {
    let partition = partition.to_string();
    let args = [
        "consume",
        "--topic",
        topic,
        "--partition",
        &partition,
        "--exit-at-end",
        "--format",
        "%k=%s\n",
    ];
    let out = pagurus(broker, &args, b"");
    out.lines().map(str::to_string).collect()
}

#[test]
fn produce_with_a_key_separator_keeps_the_input_order() {
    let (_dir, broker) = start();
    // The case: one partition, keys interleaved.
    pagurus(
        &broker,
        &["produce", "--topic", "one", "--key-separator", ":"],
        b"a:1\nb:2\nc:3\na:4\nd:5\n",
    );
    assert_eq!(
        stored(&broker, "one", 0),
        ["a=1", "b=2", "c=3", "a=4", "d=5"]
    );

    // Three partitions, 20 keys, runs of one key: every partition holds its records in
    // input order, and each key's records stay on its key's partition.
    create_topic(&broker, "three", 3);
    let input: Vec<(String, u32)> = (0..600u32)
        .map(|i| (format!("k{}", (i / 3) % 20), i))
        .collect();
    let text: String = input.iter().map(|(k, i)| format!("{k}:{i}\n")).collect();
    pagurus(
        &broker,
        &[
            "produce",
            "--topic",
            "three",
            "--key-separator",
            ":",
            "--batch",
            "7",
        ],
        text.as_bytes(),
    );
    for partition in 0..3 {
        let expected: Vec<String> = input
            .iter()
            .filter(|(k, _)| key_partition(k.as_bytes(), 3) == partition)
            .map(|(k, i)| format!("{k}={i}"))
            .collect();
        assert!(!expected.is_empty(), "partition {partition} gets keys");
        assert_eq!(stored(&broker, "three", partition), expected);
    }
}

#[test]
fn the_client_producer_keeps_the_order_of_per_record_keys() {
    let (_dir, broker) = start();
    create_topic(&broker, "keys", 1);
    let addr = broker.addr;
    let input: Vec<(String, String)> = (0..200u32)
        .map(|i| (format!("k{}", i % 7), i.to_string()))
        .collect();
    let sent = input.clone();
    let stats = on_glommio(move || async move {
        let config = ProducerConfig {
            batch: BatchLimits {
                records_max: 10,
                bytes_max: 1 << 20,
                linger: Duration::from_millis(50),
            },
            in_flight: 4,
            shard_aware: true,
            retry_for: Duration::from_secs(30),
        };
        let producer = Producer::connect(addr, config).await.unwrap();
        for (key, value) in &sent {
            producer
                .send("keys", key.as_bytes(), value.as_bytes())
                .await
                .unwrap();
        }
        producer.flush().await.unwrap()
    });
    assert_eq!(stats.records_acked, 200);
    let expected: Vec<String> = input.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(stored(&broker, "keys", 0), expected);
}
