//! The CLI never hangs and survives a broker restart: connect and greeting timeouts against
//! a silent socket, an HTTP-like server and a stopped (SIGSTOP) broker; `consume` and
//! `produce` reconnect when the broker restarts, resuming at the next offset and sending
//! again what was not acknowledged; a clean stop (SIGTERM) stores nothing twice.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::Broker;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

fn pagurus(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pagurus"));
    command
        .args(args)
        .env_remove("PAGURUS_BROKER")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn failure(out: Output) -> String {
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!out.status.success(), "succeeded; stderr: {stderr}");
    assert!(stderr.starts_with("pagurus: "), "{stderr}");
    stderr
}

#[test]
fn a_silent_server_times_out_with_a_message() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // Accepts (the kernel does, into the backlog) and never says anything.
    let out = pagurus(&["topics", "list", "--broker", &addr, "--timeout-ms", "300"])
        .output()
        .unwrap();
    let stderr = failure(out);
    assert!(stderr.contains("no greeting within 300 ms"), "{stderr}");
    drop(listener);
}

#[test]
fn a_server_that_is_not_a_broker_is_named() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let server = std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let mut request = [0u8; 8];
        let _ = stream.read(&mut request);
        let _ = stream.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
    });
    let out = pagurus(&["topics", "list", "--broker", &addr])
        .output()
        .unwrap();
    let stderr = failure(out);
    assert!(stderr.contains("not a pagurus broker"), "{stderr}");
    server.join().unwrap();
}

#[test]
fn a_stopped_broker_times_out_and_a_restart_is_survived() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let addr = broker.addr.to_string();
    kill(Pid::from_raw(broker.pid()), Signal::SIGSTOP).unwrap();
    // The signal stops the process asynchronously: wait until every thread is stopped.
    let stopped = || {
        std::fs::read_dir(format!("/proc/{}/task", broker.pid()))
            .unwrap()
            .all(|task| {
                let stat = std::fs::read_to_string(task.unwrap().path().join("stat")).unwrap();
                stat.rsplit(')')
                    .next()
                    .unwrap()
                    .trim_start()
                    .starts_with('T')
            })
    };
    while !stopped() {
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = pagurus(&["topics", "list", "--broker", &addr, "--timeout-ms", "500"])
        .output()
        .unwrap();
    kill(Pid::from_raw(broker.pid()), Signal::SIGCONT).unwrap();
    let stderr = failure(out);
    assert!(stderr.contains("no greeting within 500 ms"), "{stderr}");

    // A consumer tails the topic across a restart.
    let lines: Vec<String> = (0..20).map(|i| format!("line-{i}")).collect();
    let produce = |lines: &[String]| {
        let mut child = pagurus(&["produce", "--broker", &addr, "--topic", "t"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        let mut input = child.stdin.take().unwrap();
        for line in lines {
            writeln!(input, "{line}").unwrap();
        }
        drop(input);
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    produce(&lines[..10]);
    let mut consumer = pagurus(&[
        "consume",
        "--broker",
        &addr,
        "--topic",
        "t",
        "--count",
        "20",
        "--wait-ms",
        "100",
    ])
    .spawn()
    .unwrap();
    let mut printed = BufReader::new(consumer.stdout.take().unwrap());
    let mut got = Vec::new();
    for _ in 0..10 {
        let mut line = String::new();
        printed.read_line(&mut line).unwrap();
        got.push(line.trim_end().to_string());
    }
    assert_eq!(got, lines[..10]);
    assert_eq!(broker.terminate().code(), Some(0));
    std::thread::sleep(Duration::from_millis(300));
    broker.restart();
    produce(&lines[10..]);
    let mut rest = String::new();
    printed.read_to_string(&mut rest).unwrap();
    got.extend(rest.lines().map(str::to_string));
    let out = consumer.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(got, lines, "each line once, in order, across the restart");
    assert!(stderr.contains("reconnected"), "{stderr}");

    // A producer whose broker restarts mid-stream loses no line.
    let mut producer = pagurus(&[
        "produce",
        "--broker",
        &addr,
        "--topic",
        "p",
        "--linger-ms",
        "1",
    ])
    .stdin(Stdio::piped())
    .spawn()
    .unwrap();
    let mut input = producer.stdin.take().unwrap();
    for i in 0..50 {
        writeln!(input, "p-{i}").unwrap();
    }
    input.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    broker.kill();
    for i in 50..100 {
        writeln!(input, "p-{i}").unwrap();
    }
    input.flush().unwrap();
    broker.restart();
    drop(input);
    let out = producer.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let out = pagurus(&[
        "consume",
        "--broker",
        &addr,
        "--topic",
        "p",
        "--exit-at-end",
    ])
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored = String::from_utf8(out.stdout).unwrap();
    for i in 0..100 {
        assert!(
            stored.lines().any(|l| l == format!("p-{i}")),
            "p-{i} lost; stored:\n{stored}\nproducer: {stderr}"
        );
    }
}

#[test]
fn a_producer_survives_a_clean_stop_without_duplicates() {
    const COUNT: u64 = 3_000_000;
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let addr = broker.addr.to_string();
    let out = pagurus(&[
        "topics",
        "create",
        "big",
        "--partitions",
        "2",
        "--broker",
        &addr,
    ])
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let count = COUNT.to_string();
    let mut producer = pagurus(&[
        "produce", "--broker", &addr, "--topic", "big", "--count", &count, "--size", "16",
    ])
    .spawn()
    .unwrap();
    // Stop the broker (SIGTERM) once the producer is well under way.
    let stored = |client: &mut pagurus::client::blocking::Client| -> u64 {
        (0..2)
            .map(|p| {
                client
                    .list_offsets("big", p, pagurus::protocol::native::OffsetSpec::Latest)
                    .unwrap()
            })
            .sum()
    };
    let mut client = broker.client();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while stored(&mut client) < 100_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the producer is stuck"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(client);
    assert!(
        producer.try_wait().unwrap().is_none(),
        "the producer was done before the stop: the test needs a larger count"
    );
    assert_eq!(broker.terminate().code(), Some(0));
    std::thread::sleep(Duration::from_millis(300));
    broker.restart();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while producer.try_wait().unwrap().is_none() {
        assert!(std::time::Instant::now() < deadline, "the producer hangs");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = producer.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("ShuttingDown") && stderr.contains("reconnected"),
        "{stderr}"
    );
    assert!(!stderr.contains("may be stored twice"), "{stderr}");
    assert!(!stderr.contains("I/O error: broker answered"), "{stderr}");

    // Every record once: none lost, none stored twice.
    let out = pagurus(&[
        "consume",
        "--broker",
        &addr,
        "--topic",
        "big",
        "--exit-at-end",
    ])
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut seen = vec![false; COUNT as usize];
    let mut lines = 0u64;
    for line in out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let number = std::str::from_utf8(line).unwrap().trim_end_matches('.');
        let number: usize = number.parse().unwrap();
        assert!(!seen[number], "record {number} stored twice");
        seen[number] = true;
        lines += 1;
    }
    assert_eq!(lines, COUNT, "records lost; producer said: {stderr}");
}
