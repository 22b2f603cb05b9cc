//! Structured logs: `--log-format json` gives one JSON object per line with level, message,
//! fields and the core's thread; a bad `--log-level` (not a level, or a word EnvFilter would
//! take for a target and so mute every line) is refused before anything starts.

mod common;

use std::process::Command;

use common::Broker;

#[test]
fn json_logs_are_one_object_per_line_with_the_core_thread() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &["--log-format", "json"]);
    broker
        .client()
        .produce(
            "logged",
            0,
            &[pagurus::protocol::record::encode_batch(0, b"", b"x", 1)],
        )
        .unwrap();
    assert!(broker.terminate().success());
    let text = broker.log_text();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l:?}")))
        .collect();
    assert!(!lines.is_empty());
    for line in &lines {
        assert!(
            line["level"].is_string() && line["timestamp"].is_string(),
            "{line}"
        );
        assert!(line["fields"]["message"].is_string(), "{line}");
    }
    let find = |message: &str| {
        lines
            .iter()
            .find(|l| l["fields"]["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line in:\n{text}"))
    };
    assert_eq!(find("pagurus starting")["fields"]["cores"], 2);
    let created = find("topic created");
    assert_eq!(created["fields"]["topic"], "logged");
    assert_eq!(created["level"], "INFO");
    assert!(
        created["threadName"]
            .as_str()
            .is_some_and(|t| t.starts_with("pagurus-")),
        "core threads are named: {created}"
    );
    find("broker stopped cleanly");
}

#[test]
fn a_bad_log_level_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--log-level", "pagurus=loud"])
        .arg("--data-dir")
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid --log-level \"pagurus=loud\""),
        "{stderr}"
    );
    assert!(
        !dir.path().join(".lock").exists(),
        "nothing started: {stderr}"
    );
}

/// `pagurus completion bash` with `--log-level LEVEL` (the level is checked before any
/// subcommand runs, so this is the cheapest real start).
fn with_log_level(level: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["completion", "bash", "--log-level", level])
        .env_remove("RUST_LOG")
        .env_remove("PAGURUS_LOG_LEVEL")
        .output()
        .unwrap()
}

#[test]
fn a_word_that_is_not_a_level_is_refused_with_the_accepted_forms() {
    // EnvFilter reads these as target names: accepted, they would mute every log line.
    for bad in ["warning", "verbose", "info,warning", "pagurus=loud", ""] {
        let out = with_log_level(bad);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad:?} accepted: {stderr}");
        assert!(stderr.contains("invalid --log-level"), "{bad:?}: {stderr}");
        for form in ["error, warn, info, debug, trace, off", "TARGET=LEVEL"] {
            assert!(stderr.contains(form), "{bad:?}: no {form:?} in {stderr}");
        }
        assert!(out.stdout.is_empty(), "{bad:?}: the subcommand ran");
    }
    for good in [
        "warn",
        "DEBUG",
        "off",
        "warn,pagurus::storage=debug",
        "pagurus=trace",
        "[request]=debug",
    ] {
        let out = with_log_level(good);
        assert!(
            out.status.success(),
            "{good:?} refused: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
