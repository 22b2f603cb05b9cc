//! Kafka clients nobody here wrote, against the real broker: kcat (librdkafka 2.0.2 on
//! Debian), confluent-kafka (current librdkafka) and kafka-python. The Python drivers live
//! in tests/kafka/*.py.
//!
//! A missing client fails the test when `PAGURUS_KAFKA_CLIENTS=required` (set by `.ci/run`);
//! elsewhere the test prints why it skipped.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Broker, have, have_python};
use pagurus::protocol::hermit;
use pagurus::protocol::kafka::batch;
use pagurus::protocol::record::{self, BatchHeader, HEADER_LEN};

fn have_kcat() -> bool {
    have("kcat", "kcat", &["-V"])
}

fn start(cores: usize) -> (tempfile::TempDir, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), cores, &["--fsync", "always"]);
    (dir, broker)
}

/// Runs a command with `stdin`, failing the test (with its output) unless it succeeds.
fn run(program: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program} does not start: {e}"));
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout[..out.stdout.len().min(2000)]),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn driver(script: &str, args: &[&str]) -> serde_json::Value {
    let path = format!("{}/tests/kafka/{script}", env!("CARGO_MANIFEST_DIR"));
    let mut all = vec![path.as_str()];
    all.extend_from_slice(args);
    let out = run("timeout", &[&["120", "python3"][..], &all].concat(), b"");
    let line = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(line.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {line}"))
}

fn bootstrap(broker: &Broker) -> String {
    broker.addr.to_string()
}

#[test]
fn kcat_metadata_keyed_produce_and_consume() {
    if !have_kcat() {
        return;
    }
    let (_dir, broker) = start(2);
    let b = bootstrap(&broker);
    let meta = run("timeout", &["30", "kcat", "-b", &b, "-L"], b"");
    let meta = String::from_utf8_lossy(&meta.stdout);
    assert!(meta.contains(" 2 brokers:"), "{meta}");
    for core in 0..2u16 {
        let port = broker.addr.port() + 1 + core;
        assert!(
            meta.contains(&format!("broker {core} at 127.0.0.1:{port}")),
            "{meta}"
        );
    }
    let mut lines = Vec::new();
    for i in 0..5000 {
        // Keys and values with spaces, punctuation and bytes above 0x7f.
        lines.extend_from_slice(
            format!("key {i}:value {i} \u{e9}t\u{e9} {}\n", "~".repeat(i % 97)).as_bytes(),
        );
    }
    run(
        "timeout",
        &[
            "60", "kcat", "-b", &b, "-t", "lines", "-K:", "-X", "acks=all", "-P",
        ],
        &lines,
    );
    let out = run(
        "timeout",
        &[
            "60",
            "kcat",
            "-b",
            &b,
            "-t",
            "lines",
            "-K:",
            "-C",
            "-e",
            "-o",
            "beginning",
            "-q",
        ],
        b"",
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&lines),
        "kcat reads back every key and value, in order"
    );
}

#[test]
fn librdkafka_admin_idempotent_producer_and_codecs() {
    if !have_python("confluent_kafka") {
        return;
    }
    let (_dir, broker) = start(2);
    let b = bootstrap(&broker);
    let created = driver("librdkafka.py", &["create", &b, "four", "4"]);
    assert_eq!(created["partitions"], 4, "{created}");
    assert_eq!(created["brokers"], 2, "{created}");
    let idem = driver("librdkafka.py", &["idempotent", &b, "idem", "50000"]);
    assert_eq!(idem["delivered"], 50000, "{idem}");
    let codecs = driver("librdkafka.py", &["codecs", &b, "codec"]);
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        assert_eq!(codecs[codec], 2000, "{codec}: {codecs}");
    }
}

#[test]
fn kafka_python_produce_and_consume() {
    if !have_python("kafka") {
        return;
    }
    let (_dir, broker) = start(2);
    let out = driver("kafka_python.py", &[&bootstrap(&broker), "kp", "3000"]);
    assert_eq!(out["consumed"], 3000, "{out}");
}

/// Deleting a topic wins over running Kafka clients (docs/KAFKA.md, "Deleting a topic"):
/// a librdkafka producer, a kafka-python producer (its Metadata allows auto-creation) and a
/// tailing consumer do not make it again; a new client may, and the old ones still cannot
/// write into that new topic.
#[test]
fn delete_wins_over_running_kafka_clients() {
    if !have_python("confluent_kafka") || !have_python("kafka") {
        return;
    }
    let (_dir, broker) = start(2);
    let out = driver(
        "delete.py",
        &[&bootstrap(&broker), env!("CARGO_BIN_EXE_pagurus")],
    );
    let n = |key: &str| out[key].as_u64().unwrap_or(0);
    assert!(n("rd_ok_before") > 0 && n("kp_ok_before") > 0, "{out}");
    assert!(n("consumed_before") > 0, "{out}");
    assert_eq!(out["listed_mid"], false, "the topic came back: {out}");
    assert_eq!(out["listed_after"], false, "the topic came back: {out}");
    for old in [
        "rd_ok_after",
        "kp_ok_after",
        "rd_ok_recreated",
        "kp_ok_recreated",
    ] {
        assert_eq!(
            n(old),
            0,
            "{old}: an old client wrote after the delete: {out}"
        );
    }
    assert!(
        n("rd_failed_after") > 0 && n("kp_failed_after") > 0,
        "{out}"
    );
    assert_eq!(out["fresh_errors"], serde_json::json!([]), "{out}");
    assert_eq!(n("new_partitions"), 1, "{out}");
    assert_eq!(n("new_high"), 1, "only the new client's record: {out}");
}

/// Kafka-produced records read by `pagurus consume` and by a HermitMQ v1 consumer, and
/// native-produced records read by kcat.
#[test]
fn cross_protocol() {
    if !have_kcat() {
        return;
    }
    let (_dir, broker) = start(2);
    let b = bootstrap(&broker);
    let lines: String = (0..300)
        .map(|i| format!("k{i}:kafka value {i}\n"))
        .collect();
    run(
        "timeout",
        &[
            "60",
            "kcat",
            "-b",
            &b,
            "-t",
            "fromkafka",
            "-K:",
            "-X",
            "acks=all",
            "-P",
        ],
        lines.as_bytes(),
    );

    // The pagurus CLI decodes the stored RecordBatches.
    let cli = run(
        env!("CARGO_BIN_EXE_pagurus"),
        &[
            "consume",
            "--broker",
            &b,
            "--topic",
            "fromkafka",
            "--exit-at-end",
        ],
        b"",
    );
    let values: String = (0..300).map(|i| format!("kafka value {i}\n")).collect();
    assert_eq!(String::from_utf8_lossy(&cli.stdout), values);

    // A HermitMQ v1 consumer gets the batches as stored: each payload is one RecordBatch
    // whose base offset is the batch's own.
    let mut v1 = TcpStream::connect(broker.addr).unwrap();
    v1.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    v1.write_all(&hermit::encode_consumer_hello("g", "fromkafka", 0))
        .unwrap();
    let limits = pagurus::limits::Limits::default();
    let mut offset = 0u64;
    while offset < 300 {
        let mut head = [0u8; HEADER_LEN];
        v1.read_exact(&mut head).unwrap();
        let header = BatchHeader::decode(&head, &limits).unwrap();
        assert_eq!(header.offset, offset);
        let mut rest = vec![0u8; header.batch_len() - HEADER_LEN];
        v1.read_exact(&mut rest).unwrap();
        let whole = [&head[..], &rest].concat();
        assert_eq!(
            record::format_of(&whole, &header),
            record::BatchFormat::Kafka
        );
        let info = batch::check(&rest, u64::MAX).unwrap();
        assert_eq!(info.base_offset as u64, offset, "base offset rewritten");
        offset += info.offsets();
    }

    // kcat reads what the native client produced.
    let native: String = (0..200).map(|i| format!("native {i}\n")).collect();
    run(
        env!("CARGO_BIN_EXE_pagurus"),
        &[
            "produce",
            "--broker",
            &b,
            "--topic",
            "fromnative",
            "--batch",
            "7",
        ],
        native.as_bytes(),
    );
    let out = run(
        "timeout",
        &[
            "60",
            "kcat",
            "-b",
            &b,
            "-t",
            "fromnative",
            "-C",
            "-e",
            "-o",
            "beginning",
            "-q",
        ],
        b"",
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), native);
}

/// kill -9 while confluent-kafka produces with acks=all: every acknowledged message is
/// there after the restart, at the offset it was acknowledged with.
#[test]
fn kill_during_kafka_produce_loses_nothing_acknowledged() {
    if !have_python("confluent_kafka") {
        return;
    }
    let (dir, mut broker) = start(2);
    let b = bootstrap(&broker);
    let ledger = dir.path().join("acked.txt");
    let script = format!("{}/tests/kafka/librdkafka.py", env!("CARGO_MANIFEST_DIR"));
    let mut producer = Command::new("python3")
        .args([
            &script,
            "produce-until-killed",
            &b,
            "crash",
            ledger.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let acked = |ledger: &std::path::Path| {
        std::fs::read_to_string(ledger)
            .unwrap_or_default()
            .lines()
            .filter(|l| !l.is_empty())
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while acked(&ledger) < 3000 {
        assert!(
            std::time::Instant::now() < deadline,
            "producer acknowledged too little"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    broker.kill();
    std::thread::sleep(Duration::from_millis(300));
    let _ = producer.kill();
    let _ = producer.wait();
    let text = std::fs::read_to_string(&ledger).unwrap();
    let acked: Vec<(u64, String)> = text
        .lines()
        .filter(|l| l.split(' ').count() == 2)
        .map(|l| {
            let (offset, key) = l.split_once(' ').unwrap();
            (offset.parse().unwrap(), key.to_string())
        })
        .collect();
    broker.restart();
    let last = acked.iter().map(|(o, _)| *o).max().unwrap();
    let read = driver(
        "librdkafka.py",
        &["read-keys", &b, "crash", &(last + 1).to_string()],
    );
    let stored: std::collections::HashMap<u64, String> = read["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m[0].as_u64().unwrap(), m[1].as_str().unwrap().to_string()))
        .collect();
    for (offset, key) in &acked {
        assert_eq!(
            stored.get(offset),
            Some(key),
            "acknowledged message at offset {offset} is there after kill -9"
        );
    }
}
