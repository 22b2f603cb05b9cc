//! The `pagurus` client subcommands (produce, consume, topics, groups) against a real broker.

mod common;

use std::io::Write;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::Broker;
use pagurus::protocol::record::encode_batch;
use pagurus::shard::placement::partition_owner;

/// Starts a broker of its own for a test (the harness takes starts one at a time).
fn start() -> (tempfile::TempDir, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    (dir, broker)
}

/// Runs `pagurus ARGS --broker ADDR` with `stdin`.
fn run(broker: &str, args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(args)
        .arg("--broker")
        .arg(broker)
        .env_remove("PAGURUS_BROKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the pagurus binary runs");
    let mut input = child.stdin.take().unwrap();
    // A command that fails early (no broker) may exit before it reads its input.
    let _ = input.write_all(stdin);
    drop(input);
    child.wait_with_output().unwrap()
}

/// Runs a command that must succeed; returns its stdout and stderr.
fn ok(broker: &Broker, args: &[&str], stdin: &[u8]) -> (String, String) {
    let out = run(&broker.addr.to_string(), args, stdin);
    let stdout = String::from_utf8(out.stdout).unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        out.status.success(),
        "pagurus {args:?} failed with {}:\nstdout: {stdout}\nstderr: {stderr}",
        out.status
    );
    (stdout, stderr)
}

/// Runs a command that must fail; returns its stderr.
fn fails(broker: &str, args: &[&str], stdin: &[u8]) -> String {
    let out = run(broker, args, stdin);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        !out.status.success(),
        "pagurus {args:?} succeeded:\nstdout: {}\nstderr: {stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        stderr.starts_with("pagurus: ") && stderr.lines().count() == 1,
        "one error line expected, got: {stderr}"
    );
    stderr
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn lines_round_trip_raw_and_json() {
    let (_dir, broker) = start();
    let before = now_ms();
    // Five lines (one empty, one with \r\n, the last without a newline), two per batch.
    let (_, stderr) = ok(
        &broker,
        &["produce", "--topic", "lines", "--key", "k1", "--batch", "2"],
        b"alpha\nbeta\n\ngamma\r\ndelta",
    );
    assert!(
        stderr.starts_with("produced 5 records in 3 batches to lines/0: offsets 0..=4,"),
        "{stderr}"
    );
    assert!(stderr.contains("records/s"), "{stderr}");

    let consume = ["consume", "--topic", "lines", "--exit-at-end"];
    let (out, _) = ok(&broker, &consume, b"");
    assert_eq!(out, "alpha\nbeta\n\ngamma\ndelta\n");

    let (out, _) = ok(
        &broker,
        &[&consume[..], &["--format", "json"]].concat(),
        b"",
    );
    let records: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let values = ["alpha", "beta", "", "gamma", "delta"];
    assert_eq!(records.len(), values.len());
    for (i, (record, value)) in records.iter().zip(values).enumerate() {
        assert_eq!(record["offset"], i as u64, "{record}");
        assert_eq!(record["key"], "k1", "{record}");
        assert_eq!(record["value"], value, "{record}");
        let ts = record["timestamp"].as_u64().unwrap();
        assert!(ts >= before && ts <= now_ms(), "{record}");
    }

    // From an offset in the middle of a batch, and a count that stops in the middle of one.
    let (out, _) = ok(&broker, &[&consume[..], &["--from", "3"]].concat(), b"");
    assert_eq!(out, "gamma\ndelta\n");
    let (out, _) = ok(
        &broker,
        &[&consume[..], &["--from", "earliest", "--count", "3"]].concat(),
        b"",
    );
    assert_eq!(out, "alpha\nbeta\n\n");
    // --count without --exit-at-end stops as soon as it has its records.
    let (out, _) = ok(
        &broker,
        &["consume", "--topic", "lines", "--from", "1", "--count", "1"],
        b"",
    );
    assert_eq!(out, "beta\n");
    let (out, _) = ok(
        &broker,
        &[&consume[..], &["--from", "latest"]].concat(),
        b"",
    );
    assert_eq!(out, "");

    // A payload not in the length-prefixed encoding (as a HermitMQ client sends) is one record.
    let mut client = broker.client();
    client
        .produce("lines", 0, &[encode_batch(0, b"", b"opaque payload", 1)])
        .unwrap();
    let (out, _) = ok(
        &broker,
        &[&consume[..], &["--from", "5", "--format", "json"]].concat(),
        b"",
    );
    let record: serde_json::Value = serde_json::from_str(out.trim_end()).unwrap();
    assert_eq!(record["offset"], 5);
    assert_eq!(record["key"], "");
    assert_eq!(record["value"], "opaque payload");
}

#[test]
fn generated_records_and_timestamps() {
    let (_dir, broker) = start();
    let (_, stderr) = ok(
        &broker,
        &[
            "produce",
            "--topic",
            "gen",
            "--count",
            "1000",
            "--size",
            "64",
            "--batch",
            "64",
            "--in-flight",
            "4",
        ],
        b"",
    );
    assert!(
        stderr.starts_with("produced 1000 records in 16 batches to gen/0: offsets 0..=999,"),
        "{stderr}"
    );
    let (out, _) = ok(
        &broker,
        &[
            "consume",
            "--topic",
            "gen",
            "--exit-at-end",
            "--max-bytes",
            "4096",
        ],
        b"",
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1000);
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(line.len(), 64);
        let number = line.trim_end_matches('.');
        assert_eq!(number, i.to_string());
    }

    // --from @TIMESTAMP: only what was stored at or after that time.
    std::thread::sleep(Duration::from_millis(20));
    let since = now_ms();
    ok(&broker, &["produce", "--topic", "gen"], b"late-1\nlate-2\n");
    let at = format!("@{since}");
    let (out, _) = ok(
        &broker,
        &["consume", "--topic", "gen", "--exit-at-end", "--from", &at],
        b"",
    );
    assert_eq!(out, "late-1\nlate-2\n");
    let (out, _) = ok(
        &broker,
        &[
            "consume",
            "--topic",
            "gen",
            "--exit-at-end",
            "--from",
            "@0",
            "--count",
            "1",
        ],
        b"",
    );
    assert_eq!(out, format!("0{}\n", ".".repeat(63)));
    let later = format!("@{}", now_ms() + 60_000);
    let (out, _) = ok(
        &broker,
        &[
            "consume",
            "--topic",
            "gen",
            "--exit-at-end",
            "--from",
            &later,
        ],
        b"",
    );
    assert_eq!(out, "");
}

#[test]
fn group_lag_falls_to_zero() {
    let (_dir, broker) = start();
    ok(
        &broker,
        &[
            "produce", "--topic", "work", "--count", "10", "--size", "4", "--batch", "3",
        ],
        b"",
    );
    let consume = ["consume", "--topic", "work", "--group", "g1"];
    // Stops inside the second batch; the commit is the record after the last one printed.
    let (out, _) = ok(&broker, &[&consume[..], &["--count", "4"]].concat(), b"");
    assert_eq!(out, "0...\n1...\n2...\n3...\n");

    let (out, _) = ok(&broker, &["groups", "describe", "g1"], b"");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    // The consumer left: no members.
    assert!(out.starts_with("group g1: Empty"), "{out}");
    assert_eq!(
        rows[1],
        [
            "TOPIC",
            "PARTITION",
            "COMMITTED",
            "LOG",
            "END",
            "LAG",
            "MEMBER"
        ]
    );
    assert_eq!(rows[2..], [["work", "0", "4", "10", "6", "-"]]);

    // Resumes at the committed offset and catches up.
    let (out, _) = ok(&broker, &[&consume[..], &["--exit-at-end"]].concat(), b"");
    assert_eq!(out.lines().next(), Some("4..."));
    assert_eq!(out.lines().count(), 6);
    let (out, _) = ok(&broker, &["groups", "describe", "g1"], b"");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows[2..], [["work", "0", "10", "10", "0", "-"]]);
    // Nothing left for the group.
    let (out, _) = ok(&broker, &[&consume[..], &["--exit-at-end"]].concat(), b"");
    assert_eq!(out, "");

    let (out, _) = ok(&broker, &["groups", "list"], b"");
    assert_eq!(out, "g1\n");
    let stderr = fails(
        &broker.addr.to_string(),
        &["groups", "describe", "nobody"],
        b"",
    );
    assert!(stderr.contains("UnknownGroup"), "{stderr}");
}

#[test]
fn topics_round_trip() {
    let (_dir, broker) = start();
    let (out, _) = ok(
        &broker,
        &[
            "topics",
            "create",
            "orders",
            "--partitions",
            "3",
            "--fsync",
            "interval=50",
            "--segment-bytes",
            "1048576",
            "--retention-ms",
            "60000",
            "--cleanup",
            "compact",
        ],
        b"",
    );
    assert_eq!(out, "created topic orders with 3 partitions\n");
    ok(&broker, &["topics", "create", "plain"], b"");
    let (out, _) = ok(&broker, &["topics", "list"], b"");
    assert_eq!(out, "orders\nplain\n");

    ok(
        &broker,
        &["produce", "--topic", "orders", "--partition", "2"],
        b"a\nb\nc\n",
    );
    let (out, _) = ok(&broker, &["topics", "describe", "orders"], b"");
    let lines: Vec<&str> = out.lines().collect();
    let setting = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
    };
    assert_eq!(setting("topic:"), "orders");
    assert_eq!(setting("partitions:"), "3");
    assert_eq!(setting("fsync:"), "interval=50");
    assert_eq!(setting("segment bytes:"), "1048576");
    assert_eq!(setting("retention bytes:"), "none");
    assert_eq!(setting("retention ms:"), "60000");
    assert_eq!(setting("cleanup:"), "compact");
    let table_at = lines
        .iter()
        .position(|l| l.starts_with("PARTITION"))
        .unwrap();
    let rows: Vec<Vec<&str>> = lines[table_at + 1..]
        .iter()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 3);
    for (p, row) in rows.iter().enumerate() {
        let owner = partition_owner("orders", p as u32, 2).to_string();
        let hw = if p == 2 { "3" } else { "0" };
        assert_eq!(row, &[p.to_string().as_str(), owner.as_str(), "0", hw]);
    }
    let (out, _) = ok(&broker, &["topics", "describe", "plain"], b"");
    assert!(out.contains("fsync:            broker default"), "{out}");

    let addr = broker.addr.to_string();
    let stderr = fails(&addr, &["topics", "create", "orders"], b"");
    assert!(stderr.contains("TopicExists"), "{stderr}");

    let (out, _) = ok(&broker, &["topics", "delete", "orders"], b"");
    assert_eq!(out, "deleted topic orders\n");
    let (out, _) = ok(&broker, &["topics", "list"], b"");
    assert_eq!(out, "plain\n");
    let stderr = fails(&addr, &["topics", "describe", "orders"], b"");
    assert!(stderr.contains("UnknownTopic"), "{stderr}");
    let stderr = fails(&addr, &["topics", "delete", "orders"], b"");
    assert!(stderr.contains("UnknownTopic"), "{stderr}");
}

#[test]
fn errors_are_one_line_and_non_zero() {
    let (_dir, broker) = start();
    let addr = broker.addr.to_string();

    // Nothing listens on a port just freed.
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = free.local_addr().unwrap().to_string();
    drop(free);
    for args in [
        &["topics", "list"][..],
        &["groups", "list"],
        &["produce", "--topic", "t"],
        &["consume", "--topic", "t"],
    ] {
        let stderr = fails(&nowhere, args, b"x\n");
        assert!(
            stderr.starts_with(&format!(
                "pagurus: cannot connect to the broker at {nowhere}"
            )),
            "{stderr}"
        );
    }

    // The broker's refusal of a bad topic name reaches the user.
    let stderr = fails(&addr, &["topics", "create", "bad/name"], b"");
    assert!(stderr.contains("InvalidName"), "{stderr}");
    let stderr = fails(&addr, &["produce", "--topic", "bad name"], b"x\n");
    assert!(stderr.contains("InvalidName"), "{stderr}");
    // A partition count out of range is refused before it reaches the broker (which
    // refuses it too, and reads 0 as its default of 1).
    for partitions in ["0", "5000"] {
        let out = run(
            &addr,
            &["topics", "create", "t", "--partitions", partitions],
            b"",
        );
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.contains(&format!("{partitions} is not in 1..=4096")),
            "{stderr}"
        );
    }
    // Consumers do not create topics, and an offset past the end is refused.
    for from in ["earliest", "0"] {
        let stderr = fails(
            &addr,
            &["consume", "--topic", "missing", "--from", from],
            b"",
        );
        assert!(stderr.contains("UnknownTopic"), "{stderr}");
    }
    let stderr = fails(
        &addr,
        &["consume", "--topic", "missing", "--group", "g"],
        b"",
    );
    assert!(stderr.contains("UnknownTopic"), "{stderr}");
    let (out, _) = ok(&broker, &["topics", "list"], b"");
    assert_eq!(out, "", "consumers created no topic");
    ok(&broker, &["produce", "--topic", "short"], b"one\n");
    let stderr = fails(&addr, &["consume", "--topic", "short", "--from", "7"], b"");
    assert!(stderr.contains("OffsetOutOfRange"), "{stderr}");
    // Bad flags are clap's usage errors.
    let out = run(
        &addr,
        &["consume", "--topic", "short", "--from", "soon"],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains("--from"), "{stderr}");
}

#[test]
fn help_everywhere() {
    for args in [
        &["produce"][..],
        &["consume"],
        &["topics"],
        &["topics", "create"],
        &["topics", "describe"],
        &["groups"],
        &["groups", "describe"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
            .args(args)
            .arg("--help")
            .output()
            .unwrap();
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(out.status.success(), "{args:?}");
        assert!(help.contains("--broker"), "{args:?}: {help}");
        assert!(help.contains("127.0.0.1:9092"), "{args:?}: {help}");
    }
}
