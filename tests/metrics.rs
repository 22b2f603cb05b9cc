//! The Prometheus endpoint against a real broker: scrapes after real traffic, consumer lag
//! as a consumer catches up, bad HTTP input, and the metrics reference in the docs.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::Broker;
use pagurus::protocol::native::{ErrorCode, TopicSettings};
use pagurus::protocol::record::encode_batch;

/// A free port on 127.0.0.1 right now.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start(cores: usize) -> (tempfile::TempDir, Broker, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let broker = Broker::start_in(
        &dir.path().join("data"),
        cores,
        &["--metrics-listen", &metrics.to_string()],
    );
    (dir, broker, metrics)
}

/// Sends `request` raw and returns the whole response (the server closes after one).
fn http(addr: SocketAddr, request: &[u8]) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8(response).unwrap();
    let (head, body) = response
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no end of head in {response:?}"));
    (head.to_string(), body.to_string())
}

fn scrape(addr: SocketAddr) -> Exposition {
    let (head, body) = http(addr, b"GET /metrics HTTP/1.1\r\nHost: pagurus\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("Content-Type: text/plain; version=0.0.4; charset=utf-8"),
        "{head}"
    );
    assert!(
        head.contains(&format!("Content-Length: {}\r\n", body.len())),
        "{head}"
    );
    Exposition::parse(&body)
}

#[derive(Debug)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A scrape, checked against the text format as it is parsed: declarations before samples,
/// each family declared once, names and labels well formed, values numbers, counters named
/// `_total`, histogram buckets cumulative up to `+Inf` = `_count`.
#[derive(Debug)]
struct Exposition {
    types: HashMap<String, String>,
    samples: Vec<Sample>,
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl Exposition {
    fn parse(text: &str) -> Exposition {
        let mut types = HashMap::new();
        let mut helped = std::collections::HashSet::new();
        let mut samples = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(is_name(name), "bad name in {line:?}");
                assert!(helped.insert(name.to_string()), "HELP twice: {line:?}");
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(
                    ["counter", "gauge", "histogram"].contains(&kind),
                    "{line:?}"
                );
                assert!(helped.contains(name), "TYPE before HELP: {line:?}");
                if kind == "counter" {
                    assert!(name.ends_with("_total"), "counter not _total: {line:?}");
                }
                assert!(
                    types.insert(name.to_string(), kind.to_string()).is_none(),
                    "TYPE twice: {line:?}"
                );
                continue;
            }
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            samples.push(Self::sample(line, &types));
        }
        let exposition = Exposition { types, samples };
        exposition.check_histograms();
        exposition
    }

    fn sample(line: &str, types: &HashMap<String, String>) -> Sample {
        let (series, value) = line.rsplit_once(' ').unwrap();
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("value of {line:?}"));
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels end with }");
                (name, Self::labels(body, line))
            }
        };
        assert!(is_name(name), "{line:?}");
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .filter_map(|s| name.strip_suffix(s))
            .find(|f| types.get(*f).is_some_and(|t| t == "histogram"))
            .unwrap_or(name);
        assert!(
            types.contains_key(family),
            "sample of an undeclared family: {line:?}"
        );
        Sample {
            name: name.to_string(),
            labels,
            value,
        }
    }

    fn labels(mut body: &str, line: &str) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::new();
        while !body.is_empty() {
            let (key, rest) = body.split_once("=\"").expect("label=\"value\"");
            assert!(is_name(key), "label name in {line:?}");
            let mut value = String::new();
            let mut chars = rest.char_indices();
            let end = loop {
                match chars.next().expect("closing quote") {
                    (_, '\\') => match chars.next().expect("escape").1 {
                        'n' => value.push('\n'),
                        c @ ('\\' | '"') => value.push(c),
                        c => panic!("bad escape \\{c} in {line:?}"),
                    },
                    (i, '"') => break i,
                    (_, c) => value.push(c),
                }
            };
            assert!(labels.insert(key.to_string(), value).is_none(), "{line:?}");
            body = &rest[end + 1..];
            body = body.strip_prefix(',').unwrap_or(body);
        }
        labels
    }

    fn check_histograms(&self) {
        for (family, _) in self.types.iter().filter(|(_, t)| *t == "histogram") {
            let bucket = format!("{family}_bucket");
            let mut series: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
            for s in self.samples.iter().filter(|s| s.name == bucket) {
                let le = &s.labels["le"];
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap()
                };
                series
                    .entry(s.labels["core"].clone())
                    .or_default()
                    .push((le, s.value));
            }
            for (core, buckets) in series {
                assert!(
                    buckets
                        .windows(2)
                        .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                    "{family} core {core}: buckets not cumulative: {buckets:?}"
                );
                let (last_le, last) = *buckets.last().unwrap();
                assert_eq!(last_le, f64::INFINITY, "{family} ends without +Inf");
                assert_eq!(
                    self.value(&format!("{family}_count"), &[("core", &core)]),
                    last
                );
            }
        }
    }

    /// Samples of `name` whose labels include `labels`.
    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
    }

    /// The one sample of `name` with `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<&Sample> = self.matching(name, labels).collect();
        assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
        found[0].value
    }

    /// The sum over every sample of `name` with `labels` (e.g. over cores).
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.matching(name, labels).map(|s| s.value).sum()
    }
}

/// Families in the metrics reference of docs/OPERATIONS.md (rows starting `| \`pagurus_`).
fn documented_families() -> Vec<String> {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/OPERATIONS.md"))
        .unwrap();
    docs.lines()
        .filter_map(|l| l.strip_prefix("| `pagurus_"))
        .map(|l| format!("pagurus_{}", l.split('`').next().unwrap()))
        .collect()
}

#[test]
fn scrape_reports_traffic_and_lag_follows_the_consumer() {
    let (_dir, broker, metrics) = start(2);
    let mut client = broker.client();
    client
        .create_topic(
            "orders",
            TopicSettings {
                partitions: 2,
                ..Default::default()
            },
        )
        .unwrap();
    // 10 produce requests of 2 batches of 5 records per partition: 100 records per partition.
    let mut bytes_in = [0u64; 2];
    for partition in 0..2u32 {
        for i in 0..10 {
            let batches: Vec<Vec<u8>> = (0..2)
                .map(|j| encode_batch(0, b"k", format!("{partition}-{i}-{j}").as_bytes(), 5))
                .collect();
            bytes_in[partition as usize] += batches.iter().map(|b| b.len() as u64).sum::<u64>();
            client.produce("orders", partition, &batches).unwrap();
        }
    }
    let refused = client.create_topic("bad/name", TopicSettings::default());
    assert_eq!(refused.unwrap_err().code(), Some(ErrorCode::InvalidName));

    let m = scrape(metrics);
    let mut families: Vec<&String> = m.types.keys().collect();
    families.sort();
    let documented = documented_families();
    for family in &families {
        assert!(
            documented.contains(family),
            "{family} is not in the metrics reference of docs/OPERATIONS.md"
        );
    }
    for family in &documented {
        assert!(
            m.types.contains_key(family),
            "docs/OPERATIONS.md lists {family}, which the broker does not export"
        );
    }
    assert_eq!(m.value("pagurus_cores", &[]), 2.0);
    assert_eq!(m.sum("pagurus_core_up", &[]), 2.0, "both cores answered");
    for partition in ["0", "1"] {
        let p = [("topic", "orders"), ("partition", partition)];
        assert_eq!(m.value("pagurus_log_end_offset", &p), 100.0);
        assert_eq!(m.value("pagurus_log_start_offset", &p), 0.0);
        assert_eq!(m.value("pagurus_partition_records_in_total", &p), 100.0);
        assert_eq!(m.value("pagurus_partition_batches_in_total", &p), 20.0);
        let i = partition.parse::<usize>().unwrap();
        assert_eq!(
            m.value("pagurus_partition_bytes_in_total", &p),
            bytes_in[i] as f64
        );
        assert_eq!(m.value("pagurus_log_size_bytes", &p), bytes_in[i] as f64);
    }
    assert_eq!(m.sum("pagurus_records_in_total", &[]), 200.0);
    assert_eq!(m.sum("pagurus_batches_in_total", &[]), 40.0);
    assert_eq!(
        m.sum("pagurus_bytes_in_total", &[]),
        (bytes_in[0] + bytes_in[1]) as f64
    );
    assert_eq!(
        m.sum("pagurus_requests_total", &[("type", "Produce")]),
        20.0
    );
    assert_eq!(
        m.sum(
            "pagurus_request_errors_total",
            &[("type", "CreateTopic"), ("code", "InvalidName")]
        ),
        1.0
    );
    assert!(m.sum("pagurus_rejected_total", &[("reason", "bad_name")]) >= 1.0);
    // Every batch was written by some group-commit round, each made durable by an fsync.
    assert_eq!(m.sum("pagurus_group_commit_batches_sum", &[]), 40.0);
    let fsyncs = m.sum("pagurus_fsync_duration_seconds_count", &[]);
    // One client, one request at a time: at most one fsync round per produce request.
    assert!((1.0..=20.0).contains(&fsyncs), "fsyncs {fsyncs}");
    assert!(m.sum("pagurus_fsync_duration_seconds_sum", &[]) > 0.0);
    assert_eq!(m.sum("pagurus_fsync_errors_total", &[]), 0.0);
    // Every produce request was acknowledged once, each after an fsync of its own (one
    // request at a time): its ack took at least that fsync.
    assert_eq!(
        m.sum("pagurus_produce_ack_duration_seconds_count", &[]),
        20.0
    );
    assert!(
        m.sum("pagurus_produce_ack_duration_seconds_sum", &[])
            >= m.sum("pagurus_fsync_duration_seconds_sum", &[]) * 0.5,
        "acks that waited for fsyncs take at least part of their time"
    );
    // Each round made one WAL write of its batches, inline or through io_uring
    // (`storage::log::inline`), and a round that synced the WAL alone one more, of its
    // index journal record (`storage::index_journal`; none on tmpfs, where it is off).
    let journaled = m.sum("pagurus_commit_rounds_total", &[("files", "wal")]);
    assert_eq!(
        m.sum("pagurus_commit_rounds_total", &[]),
        m.sum("pagurus_group_commit_batches_count", &[]),
        "under always every round is a commit round"
    );
    assert_eq!(
        m.sum("pagurus_wal_writes_total", &[]),
        m.sum("pagurus_group_commit_batches_count", &[]) + journaled
    );
    assert!(m.sum("pagurus_connections_accepted_total", &[]) >= 1.0);
    assert!(m.sum("pagurus_connections_open", &[]) >= 1.0, "our client");
    // The scrape itself asked core 1 over the mesh.
    assert!(
        m.value(
            "pagurus_mesh_messages_total",
            &[("core", "1"), ("direction", "received"), ("kind", "call")]
        ) >= 1.0
    );
    assert_eq!(m.matching("pagurus_consumer_lag", &[]).count(), 0);

    // A consumer reads part of partition 0 and commits; partition 1 it has not started.
    let fetched = client
        .fetch("orders", 0, 0, 1, Duration::from_millis(0))
        .unwrap();
    assert!(!fetched.batches.is_empty());
    client.commit_offset("billing", "orders", 0, 30).unwrap();
    client.commit_offset("billing", "orders", 1, 0).unwrap();
    let lag = |m: &Exposition, partition: &str| {
        m.value(
            "pagurus_consumer_lag",
            &[
                ("group", "billing"),
                ("topic", "orders"),
                ("partition", partition),
            ],
        )
    };
    let m = scrape(metrics);
    assert_eq!(lag(&m, "0"), 70.0);
    assert_eq!(lag(&m, "1"), 100.0);
    assert_eq!(
        m.value(
            "pagurus_consumer_committed_offset",
            &[("group", "billing"), ("partition", "0")]
        ),
        30.0
    );
    let p0 = [("topic", "orders"), ("partition", "0")];
    assert_eq!(m.value("pagurus_partition_records_out_total", &p0), 5.0);
    assert_eq!(m.sum("pagurus_records_out_total", &[]), 5.0);
    assert!(m.sum("pagurus_bytes_out_total", &[]) > 0.0);

    // It catches up on partition 0 while a producer adds to partition 1.
    client.commit_offset("billing", "orders", 0, 100).unwrap();
    client
        .produce("orders", 1, &[encode_batch(0, b"", b"late", 3)])
        .unwrap();
    let m = scrape(metrics);
    assert_eq!(lag(&m, "0"), 0.0);
    assert_eq!(lag(&m, "1"), 103.0);
    client.commit_offset("billing", "orders", 1, 103).unwrap();
    assert_eq!(lag(&scrape(metrics), "1"), 0.0);
    // Scrapes are counted after they are rendered: four so far.
    assert_eq!(
        scrape(metrics).value("pagurus_metrics_scrapes_total", &[("core", "0")]),
        4.0
    );
}

#[test]
fn metrics_endpoint_refuses_bad_requests_and_keeps_serving() {
    let (_dir, broker, metrics) = start(1);
    let (head, body) = http(metrics, b"\x16\x03\x01\x00\xa5\x01\x00\x00\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 400 "), "{head}");
    assert!(body.contains("malformed"), "{body}");
    let mut oversized = b"GET /metrics HTTP/1.1\r\nX-Pad: ".to_vec();
    oversized.resize(20_000, b'a');
    let (head, _) = http(metrics, &oversized);
    assert!(head.starts_with("HTTP/1.1 431 "), "{head}");
    let (head, _) = http(metrics, b"GET /nothing HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 404 "), "{head}");
    let (head, _) = http(metrics, b"POST /metrics HTTP/1.1\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 405 "), "{head}");
    assert!(head.contains("Allow: GET, HEAD"), "{head}");
    let (head, body) = http(metrics, b"HEAD /metrics HTTP/1.0\r\n\r\n");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    assert!(body.is_empty(), "HEAD has no body");
    // A client that goes away mid-request costs nothing.
    drop(TcpStream::connect(metrics).unwrap());

    let m = scrape(metrics);
    assert_eq!(
        m.value(
            "pagurus_rejected_total",
            &[("core", "0"), ("reason", "bad_metrics_request")]
        ),
        2.0
    );
    // The broker itself is untouched.
    let mut client = broker.client();
    client
        .produce("still-up", 0, &[encode_batch(0, b"", b"x", 1)])
        .unwrap();
}

/// `pagurus bench --broker-metrics` reports the broker's own share of the acks it measured:
/// every ack of the window counted, and no more of the broker's time than the client saw;
/// beside it, the machine's CPU time over the window.
#[test]
fn bench_reports_the_brokers_share_of_the_ack() {
    let (_dir, broker, metrics) = start(2);
    let bench = |metrics_addr: &str| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_pagurus"))
            .args([
                "bench",
                "--broker",
                &broker.addr.to_string(),
                "--producers",
                "2",
                "--consumers",
                "0",
                "--count",
                "2000",
                "--batch",
                "10",
                "--warmup",
                "0",
                "--json",
                "--quiet",
                "--broker-metrics",
                metrics_addr,
            ])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "bench: {stderr}");
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };

    let report = bench(&metrics.to_string());
    let share = &report["broker_ack_latency_us"];
    // No warm-up: the window holds every produce of the run, 2000 / 10 batches.
    assert_eq!(share["count"], 200, "{report}");
    let client = &report["produce"]["ack_latency_us"];
    for q in ["p50", "p90", "p99"] {
        let broker_us = share[q].as_f64().unwrap();
        let client_us = client[q].as_f64().unwrap();
        assert!(broker_us > 0.0, "{q}: {report}");
        // Each ack's broker time is part of the client's; a bucket estimate can sit
        // anywhere in its bucket, whose upper bound is at most 2.5 times its lower one
        // (and 25 us above it at the finest).
        assert!(
            broker_us <= client_us * 2.5 + 25.0,
            "{q}: the broker's share {broker_us} us exceeds the client's {client_us} us"
        );
    }

    // The machine's CPU time over the same window (from /proc/stat), steal apart.
    let machine = &report["machine_cpu"];
    for share in ["steal_share", "busy_share"] {
        let share = machine[share].as_f64().unwrap_or(-1.0);
        assert!((0.0..=1.0).contains(&share), "{report}");
    }
    for ms in ["steal_ms", "iowait_ms", "busy_ms"] {
        assert!(machine[ms].as_f64().unwrap_or(-1.0) >= 0.0, "{report}");
    }

    // A metrics address with nothing behind it: the run stands, the share says why not.
    let report = bench(&format!("127.0.0.1:{}", free_port()));
    let error = report["broker_ack_latency_us"]["error"].as_str().unwrap();
    assert!(error.contains("cannot scrape"), "{report}");
    assert_eq!(report["produce"]["messages_total"], 2000, "{report}");
}
