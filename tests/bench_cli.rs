//! `pagurus bench` as a user runs it: with no flags it runs for its default 10 s (its
//! `--help` says so), and its live line on a terminal fits the terminal's width, the consume
//! rate included (a pseudo-terminal of a given size stands for the terminal).

mod common;

use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Broker;

fn pagurus(broker: &Broker) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pagurus"));
    for (key, _) in std::env::vars() {
        if key.starts_with("PAGURUS_") {
            command.env_remove(key);
        }
    }
    command
        .env("PAGURUS_BROKER", broker.addr.to_string())
        .stdin(Stdio::null());
    command
}

#[test]
fn bench_without_flags_runs_for_its_default_duration() {
    let help = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["bench", "--help"])
        .output()
        .unwrap();
    // Wrapped to the terminal's width: compared as one line.
    let help = String::from_utf8_lossy(&help.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("Without --count or --duration a run lasts 10 s"),
        "{help}"
    );

    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let started = Instant::now();
    // No flag but the output format: the length is the default's.
    let out = pagurus(&broker).args(["bench", "--json"]).output().unwrap();
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["produce"]["messages_total"].as_u64().unwrap() > 0,
        "{report}"
    );
    // 10 s, the 1 s warm-up left out of the measured window.
    let measured = report["produce"]["seconds"].as_f64().unwrap();
    assert!((8.0..=10.0).contains(&measured), "{measured} s: {report}");
    assert!(took >= Duration::from_secs(10), "{took:?}");
    assert!(took < Duration::from_secs(60), "{took:?}");
}

/// Runs a 3 s bench with its stderr on a pseudo-terminal `columns` wide (0: one that reports
/// no size) and `env`; returns the lines it drew, escape sequences removed.
fn drawn_lines(broker: &Broker, columns: u16, env: &[(&str, &str)]) -> Vec<String> {
    let size = libc::winsize {
        ws_row: if columns == 0 { 0 } else { 40 },
        ws_col: columns,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors; the name buffer and termios are not used.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: both descriptors were just opened and are owned here alone.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let mut command = pagurus(broker);
    command
        .args([
            "bench",
            "--duration",
            "3",
            "--warmup",
            "0",
            "--producers",
            "1",
        ])
        .env_remove("COLUMNS")
        .env("TERM", "xterm")
        .stdout(Stdio::null())
        .stderr(Stdio::from(slave));
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().unwrap();
    // The slave's last copy is the child's now (the Command held ours): the master reads
    // until the child exits (EIO).
    drop(command);
    let reader = std::thread::spawn(move || {
        let mut master = std::fs::File::from(master);
        let mut text = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = master.read(&mut chunk) {
            if n == 0 {
                break;
            }
            text.extend_from_slice(&chunk[..n]);
        }
        text
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "bench did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    let text = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    // Drop CSI escape sequences (cursor moves, line clears); lines end at \r or \n.
    let mut plain = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.next() == Some('[') {
                for d in chars.by_ref() {
                    if d.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
        .split(['\r', '\n'])
        .map(|l| l.trim_end().to_string())
        .filter(|l| l.contains(" s left"))
        .collect()
}

#[test]
fn the_live_line_fits_the_terminal_and_keeps_the_consume_rate() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    // An 80-column terminal: the line shortens to keep both rates.
    let lines = drawn_lines(&broker, 80, &[]);
    assert!(!lines.is_empty(), "no live line drawn");
    for line in &lines {
        assert!(line.chars().count() < 80, "{line:?}");
    }
    assert!(lines.iter().any(|l| l.contains("cons ")), "{lines:#?}");
    // A wide terminal gets the whole wording, the bar and the MB/s.
    let lines = drawn_lines(&broker, 160, &[]);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("| consume ") && l.contains("MB/s") && l.contains('█')),
        "{lines:#?}"
    );
    // A terminal that reports no size: $COLUMNS says it, not an 80-column guess.
    let lines = drawn_lines(&broker, 0, &[("COLUMNS", "160")]);
    assert!(lines.iter().any(|l| l.contains("| consume ")), "{lines:#?}");
    for line in &lines {
        assert!(line.chars().count() < 160, "{line:?}");
    }
}

/// `--protocol kafka` produces and consumes through the Kafka API, and the broker stores what
/// it produced as Kafka RecordBatches: read back with the native client, every batch is one,
/// and together they hold every record, each partition its producer's share.
#[test]
fn kafka_protocol_produces_and_consumes_record_batches() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let out = pagurus(&broker)
        .args([
            "bench",
            "--protocol",
            "kafka",
            "--producers",
            "2",
            "--partitions",
            "2",
            "--size",
            "100",
            "--batch",
            "100",
            "--count",
            "5000",
            "--warmup",
            "0",
            "--topic-prefix",
            "kafka-bench",
            "--keep-topics",
            "--json",
            "--quiet",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["config"]["protocol"], "kafka", "{report}");
    assert_eq!(report["produce"]["messages_total"], 5000, "{report}");
    assert_eq!(report["consume"]["messages_total"], 5000, "{report}");
    assert_eq!(report["consume"]["payload_bytes"], 5000 * 100, "{report}");

    let mut client = broker.client();
    for partition in 0..2 {
        let (mut offset, mut records, mut batches) = (0u64, 0u64, 0u64);
        loop {
            let fetched = client
                .fetch_batches("kafka-bench-0", partition, offset, 1 << 20, Duration::ZERO)
                .unwrap();
            if fetched.is_empty() {
                break;
            }
            for batch in fetched.iter() {
                assert_eq!(
                    batch.format(),
                    pagurus::protocol::record::BatchFormat::Kafka,
                    "partition {partition}, offset {offset}: not a RecordBatch"
                );
                let kafka = batch.kafka_records().unwrap();
                assert_eq!(kafka.len() as u64, batch.header.records());
                assert!(
                    kafka
                        .iter()
                        .all(|r| r.value.as_ref().map(|v| v.len()) == Some(100))
                );
                records += batch.header.records();
                batches += 1;
                offset = batch.next_offset();
            }
        }
        assert_eq!(records, 2500, "partition {partition}");
        assert_eq!(
            batches, 25,
            "partition {partition}: batches of --batch records"
        );
    }

    // The text report says which protocol ran.
    let text = pagurus(&broker)
        .args([
            "bench",
            "--protocol",
            "kafka",
            "--producers",
            "1",
            "--count",
            "200",
            "--warmup",
            "0",
            "--quiet",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.status.success(),
        "{}",
        String::from_utf8_lossy(&text.stderr)
    );
    assert!(
        stdout.starts_with("protocol kafka (client glommio)"),
        "{stdout}"
    );
}

/// A protocol the bench does not speak is refused by name, with the ones it does; and Kafka
/// on the blocking client, which has no Kafka workers, is refused before anything runs.
#[test]
fn an_unknown_protocol_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["bench", "--protocol", "amqp", "--count", "10"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("invalid value 'amqp' for '--protocol <PROTOCOL>'"),
        "{stderr}"
    );
    assert!(
        stderr.contains("native") && stderr.contains("kafka"),
        "{stderr}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["bench", "--protocol", "kafka", "--client", "blocking"])
        .args(["--broker", "127.0.0.1:1", "--count", "10"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--protocol kafka runs on the glommio client"),
        "{stderr}"
    );
}
