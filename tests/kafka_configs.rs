//! Topic configs through Kafka's admin clients (confluent-kafka and kafka-python) against
//! the real broker: created with configs, described with sources and read-only flags,
//! altered (incremental and legacy), refused with INVALID_CONFIG when pagurus has no such
//! setting, taking effect (retention) and kept across a restart; `pagurus topics describe`
//! agrees. The Python driver is tests/kafka/configs.py.
//!
//! A missing client fails the test when `PAGURUS_KAFKA_CLIENTS=required` (set by `.ci/run`);
//! elsewhere the test prints why it skipped.

mod common;

use std::process::{Command, Output};

use common::{Broker, have_python};

fn succeed(out: Output, what: &str) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{what} failed: {}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn driver(broker: &Broker, phase: &str) -> serde_json::Value {
    let script = format!("{}/tests/kafka/configs.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("timeout")
        .args(["120", "python3", &script, &broker.addr.to_string(), phase])
        .output()
        .unwrap();
    let stdout = succeed(out, &format!("configs.py {phase}"));
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("configs.py printed no JSON ({e}): {stdout}"))
}

/// `pagurus topics describe <topic>`'s settings, as `(label, value)` lines.
fn cli_describe(broker: &Broker, topic: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args([
            "topics",
            "describe",
            topic,
            "--broker",
            &broker.addr.to_string(),
        ])
        .env_remove("PAGURUS_BROKER")
        .output()
        .unwrap();
    succeed(out, "pagurus topics describe")
}

fn setting<'a>(described: &'a str, label: &str) -> &'a str {
    described
        .lines()
        .find_map(|l| l.strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no {label} in:\n{described}"))
}

#[test]
fn admin_clients_create_describe_and_alter_topic_configs() {
    if !have_python("confluent_kafka") || !have_python("kafka") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &["--fsync", "always"]);

    let out = driver(&broker, "admin");
    assert_eq!(out["confluent"], "ok", "{out}");
    assert_eq!(out["kafka_python"], "ok", "{out}");
    // The CLI reads the same settings over the native protocol.
    let described = cli_describe(&broker, "conf-compacted");
    assert_eq!(setting(&described, "partitions:"), "3", "{described}");
    assert_eq!(setting(&described, "cleanup:"), "delete", "{described}");
    assert_eq!(
        setting(&described, "retention ms:"),
        "120000",
        "{described}"
    );
    assert_eq!(
        setting(&described, "retention bytes:"),
        "none",
        "{described}"
    );
    assert_eq!(
        setting(&described, "segment bytes:"),
        "1048576",
        "{described}"
    );
    let described = cli_describe(&broker, "kp-configs");
    assert_eq!(setting(&described, "fsync:"), "always", "{described}");
    assert_eq!(
        setting(&described, "retention ms:"),
        "3600000",
        "{described}"
    );

    let out = driver(&broker, "retention");
    assert_eq!(out["retention"], "ok", "{out}");

    broker.terminate();
    broker.restart();
    let out = driver(&broker, "restart");
    assert_eq!(out["restart"], "ok", "{out}");
    let described = cli_describe(&broker, "conf-compacted");
    assert_eq!(
        setting(&described, "retention ms:"),
        "120000",
        "{described}"
    );
    assert!(
        broker.log_text().contains("topic settings altered"),
        "the alter is logged"
    );
}
