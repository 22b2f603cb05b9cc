//! Consumer groups through the real binary and a real broker: `pagurus consume --group`
//! members share a topic's partitions and take over from a member killed with -9;
//! `pagurus groups describe|delete|reset-offsets`.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Broker;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use pagurus::protocol::record::encode_batch;

fn pagurus(broker: &Broker, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(args)
        .arg("--broker")
        .arg(broker.addr.to_string())
        .env_remove("PAGURUS_BROKER")
        .stdin(Stdio::null())
        .output()
        .expect("the pagurus binary runs")
}

fn ok(broker: &Broker, args: &[&str]) -> String {
    let out = pagurus(broker, args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "pagurus {args:?}: {}\n{stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn fails(broker: &Broker, args: &[&str]) -> String {
    let out = pagurus(broker, args);
    assert!(!out.status.success(), "pagurus {args:?} succeeded");
    String::from_utf8(out.stderr).unwrap()
}

/// A `pagurus consume --group` process whose printed lines are collected.
struct Member {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Member {
    fn start(broker: &Broker, topic: &str, group: &str) -> Member {
        Member::start_with_session(broker, topic, group, 2000)
    }

    fn start_with_session(broker: &Broker, topic: &str, group: &str, session_ms: u32) -> Member {
        let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
            .args(["consume", "--topic", topic, "--group", group])
            .args(["--session-timeout-ms", &session_ms.to_string()])
            .args(["--wait-ms", "200"])
            .arg("--broker")
            .arg(broker.addr.to_string())
            .env_remove("PAGURUS_BROKER")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let out = BufReader::new(child.stdout.take().unwrap());
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in out.lines() {
                let Ok(line) = line else { break };
                sink.lock().unwrap().push(line);
            }
        });
        Member { child, lines }
    }

    fn seen(&self) -> BTreeSet<String> {
        self.lines.lock().unwrap().iter().cloned().collect()
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Sends `signal` and waits (at most 10 s) for the process to exit.
    fn stop_with(&mut self, signal: Signal) -> std::process::ExitStatus {
        kill(Pid::from_raw(self.child.id() as i32), signal).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "still running 10 s after {signal}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` until it holds, for at most `secs`.
fn eventually(secs: u64, what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Writes `per_partition` one-record batches "r{round}-p{p}-{i}" to each partition.
fn produce_round(broker: &Broker, topic: &str, partitions: u32, round: u32) -> BTreeSet<String> {
    let mut client = broker.client();
    let mut all = BTreeSet::new();
    for p in 0..partitions {
        for i in 0..25 {
            let value = format!("r{round}-p{p}-{i}");
            client
                .produce(topic, p, &[encode_batch(0, b"", value.as_bytes(), 1)])
                .unwrap();
            all.insert(value);
        }
    }
    all
}

/// Members of `group` and their partition counts, from `groups describe`.
fn members(broker: &Broker, group: &str) -> Vec<usize> {
    let out = ok(broker, &["groups", "describe", group]);
    out.lines()
        .skip_while(|l| !l.starts_with("MEMBER"))
        .skip(1)
        .take_while(|l| !l.starts_with("TOPIC"))
        .map(|l| {
            l.split_whitespace()
                .nth(2)
                .map_or(0, |p| p.split(',').count())
        })
        .collect()
}

#[test]
fn members_share_partitions_and_take_over_from_a_killed_one() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    ok(
        &broker,
        &["topics", "create", "shared", "--partitions", "4"],
    );
    let first = produce_round(&broker, "shared", 4, 1);

    let mut a = Member::start(&broker, "shared", "g");
    eventually(20, "a alone reads all four partitions", || {
        a.seen() == first
    });
    assert_eq!(members(&broker, "g"), vec![4]);

    let b = Member::start(&broker, "shared", "g");
    eventually(20, "two members with two partitions each", || {
        members(&broker, "g") == vec![2, 2]
    });
    let second = produce_round(&broker, "shared", 4, 2);
    eventually(20, "a and b read the second round", || {
        let mut seen = a.seen();
        seen.extend(b.seen());
        second.is_subset(&seen)
    });
    let b_second: BTreeSet<String> = b.seen().intersection(&second).cloned().collect();
    let a_second: BTreeSet<String> = a.seen().intersection(&second).cloned().collect();
    assert_eq!(b_second.len(), 50, "b reads its two partitions of round 2");
    assert_eq!(a_second.len(), 50, "a reads the other two");
    assert!(
        a_second.is_disjoint(&b_second),
        "no partition is read twice"
    );
    let out = ok(&broker, &["groups", "describe", "g"]);
    assert!(out.starts_with("group g: Stable"), "{out}");

    // a dies without leaving: its session expires and b takes over its partitions.
    a.kill();
    let third = produce_round(&broker, "shared", 4, 3);
    eventually(30, "b reads all four partitions of round 3", || {
        third.is_subset(&b.seen())
    });
    assert_eq!(members(&broker, "g"), vec![4]);
    eventually(10, "lag 0 on every partition", || {
        let out = ok(&broker, &["groups", "describe", "g"]);
        let lags: Vec<&str> = out
            .lines()
            .skip_while(|l| !l.starts_with("TOPIC"))
            .skip(1)
            .filter_map(|l| l.split_whitespace().nth(4))
            .collect();
        lags == ["0", "0", "0", "0"]
    });
    let stderr = fails(&broker, &["groups", "delete", "g"]);
    assert!(stderr.contains("GroupNotEmpty"), "{stderr}");
}

#[test]
fn reset_offsets_and_delete() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    ok(&broker, &["topics", "create", "t", "--partitions", "2"]);
    produce_round(&broker, "t", 2, 1);
    let consume = ["consume", "--topic", "t", "--group", "g", "--exit-at-end"];
    assert_eq!(ok(&broker, &consume).lines().count(), 50);
    assert_eq!(ok(&broker, &consume), "", "everything was committed");

    let out = ok(
        &broker,
        &[
            "groups",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to",
            "earliest",
        ],
    );
    assert!(out.contains("t      0          0"), "{out}");
    assert_eq!(ok(&broker, &consume).lines().count(), 50);
    ok(
        &broker,
        &[
            "groups",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--partition",
            "1",
            "--to",
            "20",
        ],
    );
    assert_eq!(
        ok(&broker, &consume),
        "r1-p1-20\nr1-p1-21\nr1-p1-22\nr1-p1-23\nr1-p1-24\n"
    );

    // While the group has a member, its offsets are the member's.
    let mut member = Member::start(&broker, "t", "g");
    eventually(20, "a member", || members(&broker, "g") == vec![2]);
    for refused in [
        &[
            "groups",
            "reset-offsets",
            "g",
            "--topic",
            "t",
            "--to",
            "latest",
        ][..],
        &["groups", "delete", "g"][..],
    ] {
        let stderr = fails(&broker, refused);
        assert!(stderr.contains("GroupNotEmpty"), "{stderr}");
    }
    member.kill();
    eventually(20, "the killed member's session expires", || {
        ok(&broker, &["groups", "describe", "g"]).starts_with("group g: Empty")
    });

    ok(&broker, &["groups", "delete", "g"]);
    assert_eq!(ok(&broker, &["groups", "list"]), "");
    let stderr = fails(&broker, &["groups", "describe", "g"]);
    assert!(stderr.contains("UnknownGroup"), "{stderr}");
    let stderr = fails(&broker, &["groups", "delete", "g"]);
    assert!(stderr.contains("UnknownGroup"), "{stderr}");

    // A deleted topic's group offsets go with it.
    ok(&broker, &consume);
    assert_eq!(ok(&broker, &["groups", "list"]), "g\n");
    ok(&broker, &["topics", "delete", "t"]);
    assert_eq!(ok(&broker, &["groups", "list"]), "");
}

#[test]
fn a_member_stopped_by_a_signal_leaves_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    ok(&broker, &["topics", "create", "t", "--partitions", "2"]);
    let all = produce_round(&broker, "t", 2, 1);
    for signal in [Signal::SIGINT, Signal::SIGTERM] {
        // A session far longer than the waits below: only a leave empties the group.
        let mut member = Member::start_with_session(&broker, "t", "g", 60_000);
        eventually(20, "the member reads everything", || member.seen() == all);
        assert_eq!(members(&broker, "g"), vec![2]);
        let stopped = Instant::now();
        let status = member.stop_with(signal);
        assert_eq!(
            status.code(),
            Some(128 + signal as i32),
            "{signal}: exit {status}"
        );
        assert!(
            ok(&broker, &["groups", "describe", "g"]).starts_with("group g: Empty"),
            "{signal}: the member left"
        );
        assert!(stopped.elapsed() < Duration::from_secs(5), "{signal}");
        // What it printed was committed, and the group's offsets can be moved now.
        ok(
            &broker,
            &[
                "groups",
                "reset-offsets",
                "g",
                "--topic",
                "t",
                "--to",
                "earliest",
            ],
        );
    }
}

#[test]
fn reset_offsets_outside_the_log_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    ok(&broker, &["topics", "create", "t", "--partitions", "2"]);
    produce_round(&broker, "t", 2, 1);
    // Partition 0 holds 35 records, partition 1 holds 25.
    let mut client = broker.client();
    for i in 0..10 {
        let value = format!("extra-{i}");
        client
            .produce("t", 0, &[encode_batch(0, b"", value.as_bytes(), 1)])
            .unwrap();
    }
    let reset = |partition: Option<&str>, to: &str| {
        let mut args = vec!["groups", "reset-offsets", "g", "--topic", "t", "--to", to];
        if let Some(p) = partition {
            args.extend(["--partition", p]);
        }
        pagurus(&broker, &args)
    };
    let committed = |broker: &Broker| -> Vec<String> {
        ok(broker, &["groups", "describe", "g"])
            .lines()
            .skip_while(|l| !l.starts_with("TOPIC"))
            .skip(1)
            .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
            .collect()
    };
    assert!(reset(None, "5").status.success());
    assert_eq!(committed(&broker), ["t 0 5", "t 1 5"]);

    let out = reset(Some("1"), "26");
    assert!(!out.status.success());
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("offset 26 is past the log end of t/1 (log start 0, log end 25)"),
        "{stderr}"
    );
    // 30 is inside partition 0 but past partition 1's end: neither is set.
    let stderr = String::from_utf8(reset(None, "30").stderr).unwrap();
    assert!(stderr.contains("past the log end of t/1"), "{stderr}");
    assert_eq!(committed(&broker), ["t 0 5", "t 1 5"], "nothing was set");

    // The log end itself is a valid place: the group waits there for new records.
    assert!(reset(Some("1"), "25").status.success());
    assert!(reset(Some("0"), "35").status.success());
    assert_eq!(committed(&broker), ["t 0 35", "t 1 25"]);
    let consume = ["consume", "--topic", "t", "--group", "g", "--exit-at-end"];
    assert_eq!(ok(&broker, &consume), "");
}
