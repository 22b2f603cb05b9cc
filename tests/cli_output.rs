//! The CLI's output for scripts and people, through the real binary against a real broker:
//! consume's formats and its reading of every partition, JSON listings, completion
//! scripts, the client configuration file, and refusals that name their cause.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::Broker;
use serde_json::Value;

/// `pagurus ARGS` with `stdin`, `env` set and no `PAGURUS_*` variable or configuration file
/// of this environment.
fn pagurus(args: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut command = Command::new(env!("CARGO_BIN_EXE_pagurus"));
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("PAGURUS_") {
            command.env_remove(key);
        }
    }
    let mut child = command
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the pagurus binary runs");
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().unwrap()
}

/// Runs `pagurus ARGS --broker ADDR`, which must succeed; returns stdout.
fn ok(broker: &Broker, args: &[&str], stdin: &[u8]) -> Vec<u8> {
    let addr = broker.addr.to_string();
    let out = pagurus(&[args, &["--broker", &addr]].concat(), &[], stdin);
    assert!(
        out.status.success(),
        "pagurus {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn text(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap()
}

/// Lines of `key:value` for three partitions, and one binary value.
fn fill(broker: &Broker) -> usize {
    ok(
        broker,
        &["topics", "create", "multi", "--partitions", "3"],
        b"",
    );
    let mut input = Vec::new();
    for i in 0..30 {
        input.extend_from_slice(format!("k{}:v{i}\n", i % 7).as_bytes());
    }
    input.extend_from_slice(b"bin:\xff\xfe\n");
    ok(
        broker,
        &["produce", "--topic", "multi", "--key-separator", ":"],
        &input,
    );
    31
}

#[test]
fn consume_reads_every_partition_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let records = fill(&broker);

    // JSON: topic, partition, offsets in order per partition, base64 for the binary value.
    let consume = ["consume", "--topic", "multi", "--exit-at-end"];
    let out = text(ok(
        &broker,
        &[&consume[..], &["--format", "json"]].concat(),
        b"",
    ));
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), records, "{out}");
    let mut next: BTreeMap<u64, u64> = BTreeMap::new();
    let mut key_partition: BTreeMap<String, u64> = BTreeMap::new();
    for line in &lines {
        assert_eq!(line["topic"], "multi");
        let partition = line["partition"].as_u64().unwrap();
        let offset = line["offset"].as_u64().unwrap();
        let expected = next.entry(partition).or_insert(0);
        assert_eq!(offset, *expected, "{line}");
        *expected += 1;
        let key = line["key"].as_str().unwrap().to_string();
        // A key always goes to the same partition.
        assert_eq!(*key_partition.entry(key).or_insert(partition), partition);
        assert!(line["timestamp"].as_u64().unwrap() > 1_700_000_000_000);
    }
    assert!(next.len() > 1, "the keys spread over partitions: {next:?}");
    let binary = lines.iter().find(|l| l["key"] == "bin").unwrap();
    assert_eq!(binary["value"], "//4=");
    assert_eq!(binary["value_encoding"], "base64");
    assert_eq!(binary["key_encoding"], "utf8");
    let first = lines.iter().find(|l| l["key"] == "k0").unwrap();
    assert_eq!(first["value"], "v0");
    assert_eq!(first["value_encoding"], "utf8");

    // A template, as kcat's -f; raw output of the same records.
    let out = ok(
        &broker,
        &[&consume[..], &["--format", "%t %p %o %k=%s|%K,%S\\n"]].concat(),
        b"",
    );
    let first_line = format!("multi {} {} k0=v0|2,2", first["partition"], first["offset"]);
    assert!(
        String::from_utf8_lossy(&out)
            .lines()
            .any(|l| l == first_line),
        "{first_line} in {}",
        String::from_utf8_lossy(&out)
    );
    let needle = b" bin=\xff\xfe|3,2\n";
    assert!(
        out.windows(needle.len()).any(|w| w == needle),
        "{}",
        String::from_utf8_lossy(&out)
    );
    let raw = ok(&broker, &consume, b"");
    assert_eq!(raw.iter().filter(|&&b| b == b'\n').count(), records);
    let bad = pagurus(&["consume", "--topic", "multi", "--format", "%q"], &[], b"");
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown directive %q"));

    // --count counts over all partitions; a group commits each partition it read.
    let out = ok(&broker, &[&consume[..], &["--count", "5"]].concat(), b"");
    assert_eq!(text(out).lines().count(), 5);
    ok(&broker, &[&consume[..], &["--group", "all"]].concat(), b"");
    let described: Value = serde_json::from_slice(&ok(
        &broker,
        &["groups", "describe", "all", "--output", "json"],
        b"",
    ))
    .unwrap();
    assert_eq!(described["group"], "all");
    let partitions = described["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), next.len(), "{described}");
    for p in partitions {
        let end = next[&p["partition"].as_u64().unwrap()];
        assert_eq!(p["committed_offset"], end, "{p}");
        assert_eq!(p["log_end_offset"], end, "{p}");
        assert_eq!(p["lag"], 0, "{p}");
    }
    let groups: Value =
        serde_json::from_slice(&ok(&broker, &["groups", "list", "--output", "json"], b"")).unwrap();
    assert_eq!(groups, serde_json::json!([{"name": "all"}]));

    // Topics as JSON.
    let listed: Value =
        serde_json::from_slice(&ok(&broker, &["topics", "list", "--output", "json"], b"")).unwrap();
    assert_eq!(
        listed,
        serde_json::json!([{"name": "multi", "partitions": 3}])
    );
    let described: Value = serde_json::from_slice(&ok(
        &broker,
        &["topics", "describe", "multi", "--output", "json"],
        b"",
    ))
    .unwrap();
    let topic = &described[0];
    assert_eq!(topic["name"], "multi");
    assert_eq!(topic["cleanup"], "delete");
    assert_eq!(topic["retention_ms"], Value::Null);
    let hws: u64 = topic["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["high_watermark"].as_u64().unwrap())
        .sum();
    assert_eq!(hws, records as u64);
}

#[test]
fn completion_scripts_parse_in_their_shells() {
    let dir = tempfile::tempdir().unwrap();
    for (shell, check) in [
        ("bash", &["bash", "-n"][..]),
        ("zsh", &["zsh", "-n"]),
        ("fish", &["fish", "--no-execute"]),
    ] {
        let out = pagurus(&["completion", shell], &[], b"");
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains("consume") && script.contains("key-separator"));
        let path = dir.path().join(format!("pagurus.{shell}"));
        std::fs::write(&path, &script).unwrap();
        let parsed = Command::new(check[0])
            .args(&check[1..])
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("{} is needed (.ci/run installs it): {e}", check[0]));
        assert!(
            parsed.status.success(),
            "{shell}: {}",
            String::from_utf8_lossy(&parsed.stderr)
        );
    }
}

fn write_config(path: &Path, text: &str) -> String {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
fn the_config_file_gives_defaults_below_flags_and_variables() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let addr = broker.addr.to_string();
    let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let nowhere = free.local_addr().unwrap().to_string();
    drop(free);
    let list = ["topics", "list"];

    // ~/.config/pagurus/config.toml (HOME; no XDG_CONFIG_HOME).
    let home = dir.path().join("home");
    write_config(
        &home.join(".config/pagurus/config.toml"),
        &format!("broker = \"{addr}\"\ntimeout-ms = 3000\n"),
    );
    let home_env = [("HOME", home.to_str().unwrap()), ("XDG_CONFIG_HOME", "")];
    let out = pagurus(&list, &home_env, b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The variable wins over the file, and the flag over the variable.
    let env_nowhere = [&home_env[..], &[("PAGURUS_BROKER", nowhere.as_str())]].concat();
    let out = pagurus(&list, &env_nowhere, b"");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(&nowhere));
    let out = pagurus(
        &[&list[..], &["--broker", &addr]].concat(),
        &env_nowhere,
        b"",
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // PAGURUS_CONFIG, with a profile over a top level that points nowhere.
    let file = write_config(
        &dir.path().join("pagurus.toml"),
        &format!("broker = \"{nowhere}\"\n\n[profile.here]\nbroker = \"{addr}\"\n"),
    );
    let env = [("PAGURUS_CONFIG", file.as_str())];
    assert!(!pagurus(&list, &env, b"").status.success());
    let out = pagurus(&[&list[..], &["--profile", "here"]].concat(), &env, b"");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let profile_env = [
        ("PAGURUS_CONFIG", file.as_str()),
        ("PAGURUS_PROFILE", "here"),
    ];
    assert!(pagurus(&list, &profile_env, b"").status.success());
    let out = pagurus(&[&list[..], &["--profile", "there"]].concat(), &env, b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no [profile.there] (profiles: here)"));

    // A typo is refused with the file's name; a missing PAGURUS_CONFIG too.
    let bad = write_config(&dir.path().join("bad.toml"), "brokr = \"x\"\n");
    let out = pagurus(&list, &[("PAGURUS_CONFIG", bad.as_str())], b"");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("bad.toml") && stderr.contains("brokr"),
        "{stderr}"
    );
    let out = pagurus(&list, &[("PAGURUS_CONFIG", "/nonexistent/p.toml")], b"");
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot read /nonexistent/p.toml"));
}

#[test]
fn refusals_name_their_cause_and_are_logged() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(
        &dir.path().join("data"),
        1,
        &["--max-payload-bytes", "1000", "--max-key-bytes", "100"],
    );
    let addr = broker.addr.to_string();

    let out = pagurus(
        &[
            "topics",
            "create",
            "newt",
            "--partitions",
            "0",
            "--broker",
            &addr,
        ],
        &[],
        b"",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("0 is not in 1..=4096"));

    let out = pagurus(
        &["topics", "create", "ünïcode", "--broker", &addr],
        &[],
        b"",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("name contains 'ü'"), "{stderr}");

    // A batch over the broker's limit: the answer names the flag.
    let line = vec![b'x'; 70 * 1024];
    let out = pagurus(
        &["produce", "--topic", "big", "--broker", &addr],
        &[],
        &[&line[..], b"\n"].concat(),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--max-payload-bytes 1000"), "{stderr}");

    assert_eq!(broker.terminate().code(), Some(0));
    let log = broker.log_text();
    let refused = log
        .lines()
        .find(|l| l.contains("name refused"))
        .unwrap_or_else(|| panic!("no refusal logged:\n{log}"));
    assert!(
        refused.contains("WARN") && refused.contains('ü'),
        "{refused}"
    );
    let serving = log.lines().find(|l| l.contains("core serving")).unwrap();
    assert!(!serving.contains("Some("), "{serving}");
    let stopped = log.lines().find(|l| l.contains("core stopped")).unwrap();
    let counters: Vec<&str> = stopped
        .split_once("counters=")
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    assert!(counters.contains(&"bad_names=1"), "{stopped}");
    assert!(
        counters
            .iter()
            .all(|c| !c.ends_with("=0") && !c.contains('(')),
        "{stopped}"
    );
}

#[test]
fn serve_resolves_a_host_name_to_listen_on() {
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--cores", "1", "--no-shard-ports", "--data-dir"])
        .arg(dir.path().join("data"))
        .args(["--listen", &format!("localhost:{port}")])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let connected = loop {
        if let Ok(mut client) = pagurus::client::blocking::Client::connect(("127.0.0.1", port)) {
            break client.metadata(&[]).is_ok();
        }
        if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert!(connected, "no broker on localhost:{port} ({status})");
    assert!(status.success(), "{status}");
}

/// Partition counts of the topics named `prefix-*`.
fn bench_topics(broker: &Broker, prefix: &str) -> Vec<u64> {
    let listed: Value =
        serde_json::from_slice(&ok(broker, &["topics", "list", "--output", "json"], b"")).unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["name"].as_str().unwrap().starts_with(prefix))
        .map(|t| t["partitions"].as_u64().unwrap())
        .collect()
}

#[test]
fn bench_cleans_up_its_topics_and_writes_running_totals() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let addr = broker.addr.to_string();
    let out_dir = dir.path().join("results");
    let bench = |extra: &[&str]| {
        // --broker from PAGURUS_BROKER.
        let out = pagurus(
            &[
                &[
                    "bench",
                    "--producers",
                    "2",
                    "--consumers",
                    "1",
                    "--count",
                    "3000",
                    "--batch",
                    "10",
                    "--warmup",
                    "0",
                    "--json",
                    "--topic-prefix",
                    "tb",
                ][..],
                extra,
            ]
            .concat(),
            &[("PAGURUS_BROKER", addr.as_str())],
            b"",
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "bench {extra:?}: {stderr}");
        let report: Value = serde_json::from_slice(&out.stdout).unwrap();
        (report, stderr)
    };

    let (report, _) = bench(&["--out", out_dir.to_str().unwrap(), "--label", "one"]);
    assert_eq!(report["produce"]["messages_total"], 3000, "{report}");
    assert_eq!(report["consume"]["messages_total"], 3000, "{report}");
    assert_eq!(bench_topics(&broker, "tb-"), Vec::<u64>::new(), "deleted");

    // The .hgrm TotalCount column is a running total ending at the histogram's count.
    let hgrm = std::fs::read_to_string(out_dir.join("one-ack.hgrm")).unwrap();
    let totals: Vec<u64> = hgrm
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#') && !l.contains("Value"))
        .map(|l| l.split_whitespace().nth(2).unwrap().parse().unwrap())
        .collect();
    assert!(totals.windows(2).all(|w| w[0] <= w[1]), "{hgrm}");
    let batches = 3000 / 10;
    assert_eq!(totals.last(), Some(&batches), "{hgrm}");

    // Kept topics; a later run with another partition count replaces them.
    bench(&["--partitions", "3", "--keep-topics"]);
    assert_eq!(bench_topics(&broker, "tb-"), [3]);
    let (_, stderr) = bench(&["--partitions", "2", "--keep-topics"]);
    assert!(
        stderr.contains("deleting topic tb-0 (3 partitions) to create it with 2"),
        "{stderr}"
    );
    assert_eq!(bench_topics(&broker, "tb-"), [2]);

    // A run without producers reads what the last run kept, and says so when that is less
    // than --count, or when the topic does not exist (instead of a rate of nothing).
    let consume = |prefix: &str, count: &str| {
        pagurus(
            &[
                "bench",
                "--producers",
                "0",
                "--consumers",
                "1",
                "--partitions",
                "2",
                "--from",
                "earliest",
                "--count",
                count,
                "--warmup",
                "0",
                "--json",
                "--topic-prefix",
                prefix,
            ],
            &[("PAGURUS_BROKER", addr.as_str())],
            b"",
        )
    };
    let out = consume("tb", "3000");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["consume"]["messages_total"], 3000, "{report}");
    let out = consume("tb", "5000");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("consumed 3000 of --count 5000 messages"),
        "{stderr}"
    );
    let out = consume("nothere", "10");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("topic nothere-0 does not exist"),
        "{stderr}"
    );
}
