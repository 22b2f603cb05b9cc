//! Deleting a topic while clients use it: the delete wins. A running `pagurus produce`, a
//! tailing `pagurus consume`, and HermitMQ v1 producers and consumers on the topic get an
//! error or a closed connection, none of them creates the topic again, the groups' offsets
//! for it are gone (also after a restart), and only a new request may create the name again.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Broker;
use pagurus::protocol::hermit;
use pagurus::protocol::native::{ErrorCode, OffsetSpec, TopicSettings};
use pagurus::protocol::record::encode_batch;

const TOPIC: &str = "orders";
const PARTITIONS: u32 = 3;

fn pagurus(broker: &Broker, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(args)
        .arg("--broker")
        .arg(broker.addr.to_string())
        .env_remove("PAGURUS_BROKER")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the pagurus binary runs")
}

/// Waits up to `limit` for `child` to exit; its exit success and stderr.
fn exited_within(child: &mut Child, limit: Duration) -> (bool, String) {
    let (status, stderr) = common::exit_and_stderr(child, limit)
        .unwrap_or_else(|| panic!("still running {limit:?} after the delete"));
    (status.success(), stderr)
}

/// Whether the broker closes `stream` within `limit` (what it sends first is discarded).
fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        stream
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
    false
}

#[test]
fn delete_wins_over_running_clients_and_takes_group_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &["--fsync", "never"]);
    let mut admin = broker.client();
    let settings = TopicSettings {
        partitions: PARTITIONS,
        ..Default::default()
    };
    admin.create_topic(TOPIC, settings).unwrap();

    // A producer fed a line every 20 ms, for as long as it takes them.
    let mut producer = pagurus(
        &broker,
        &[
            "produce",
            "--topic",
            TOPIC,
            "--partition",
            "0",
            "--linger-ms",
            "5",
        ],
    );
    let mut lines = producer.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        for i in 0.. {
            if writeln!(lines, "line {i}").is_err() || i > 3000 {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    });
    // A tailing consumer in a group (alone, so it reads every partition), committing as
    // it goes.
    let mut consumer = pagurus(
        &broker,
        &[
            "consume",
            "--topic",
            TOPIC,
            "--group",
            "g1",
            "--wait-ms",
            "300",
        ],
    );
    let (printed, seen) = mpsc::channel();
    let stdout = consumer.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            if line.is_err() || printed.send(()).is_err() {
                return;
            }
        }
    });
    for _ in 0..10 {
        seen.recv_timeout(Duration::from_secs(30))
            .expect("the consumer prints what the producer sends");
    }
    // HermitMQ v1: a producer that has stored a batch, and a consumer reading.
    let mut v1_producer = TcpStream::connect(broker.addr).unwrap();
    v1_producer
        .write_all(&hermit::encode_producer_hello(TOPIC, 1))
        .unwrap();
    v1_producer
        .write_all(&encode_batch(0, b"", b"v1", 1))
        .unwrap();
    let mut ack = [0u8; hermit::ACK_LEN];
    v1_producer.read_exact(&mut ack).unwrap();
    assert_eq!(ack[0], hermit::ACK_STORED);
    let mut v1_consumer = TcpStream::connect(broker.addr).unwrap();
    v1_consumer
        .write_all(&hermit::encode_consumer_hello("g2", TOPIC, 1))
        .unwrap();
    admin.commit_offset("g2", TOPIC, 2, 5).unwrap();
    let committed = |admin: &mut pagurus::client::blocking::Client, group, partition| {
        admin.fetch_offset(group, TOPIC, partition).unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed(&mut admin, "g1", 0).is_none() {
        assert!(Instant::now() < deadline, "the consumer never committed");
        std::thread::sleep(Duration::from_millis(50));
    }

    admin.delete_topic(TOPIC).unwrap();

    let (ok, stderr) = exited_within(&mut producer, Duration::from_secs(30));
    assert!(!ok && stderr.contains("was deleted"), "producer: {stderr}");
    let (ok, stderr) = exited_within(&mut consumer, Duration::from_secs(30));
    assert!(!ok && stderr.contains("was deleted"), "consumer: {stderr}");
    feeder.join().unwrap();
    assert!(closed_within(&mut v1_consumer, Duration::from_secs(30)));
    // The v1 producer's next batch is not stored: its connection ends.
    let _ = v1_producer.write_all(&encode_batch(0, b"", b"after", 1));
    assert!(closed_within(&mut v1_producer, Duration::from_secs(30)));

    // None of them made it again, and the groups' offsets went with it.
    let metadata = admin.metadata(&[TOPIC]).unwrap();
    assert_eq!(metadata.topics[0].error, ErrorCode::UnknownTopic as u16);
    // A read of the old name, even from a connection that never used it (as a group member
    // placing itself after a rebalance, or a fetch that raced the deletion to the owner),
    // is told the topic was deleted.
    for partition in 0..3 {
        let refused = broker
            .client()
            .list_offsets(TOPIC, partition, OffsetSpec::Earliest)
            .unwrap_err();
        assert_eq!(refused.code(), Some(ErrorCode::UnknownTopic), "{refused}");
        assert!(refused.to_string().contains("was deleted"), "{refused}");
    }
    assert_eq!(committed(&mut admin, "g1", 0), None);
    assert_eq!(committed(&mut admin, "g2", 2), None);
    for group in ["g1", "g2"] {
        let described = admin.describe_group(group).unwrap_err();
        assert_eq!(
            described.code(),
            Some(ErrorCode::UnknownGroup),
            "{described}"
        );
    }

    // A new request may create the name again: a new topic, with no old offsets.
    broker
        .client()
        .produce(TOPIC, 0, &[encode_batch(0, b"", b"new", 1)])
        .unwrap();
    let metadata = admin.metadata(&[TOPIC]).unwrap();
    assert_eq!(metadata.topics[0].partitions.len(), 1);
    drop(admin);
    assert!(broker.terminate().success());
    broker.restart();
    let mut admin = broker.client();
    assert_eq!(committed(&mut admin, "g1", 0), None, "after a restart too");
    assert_eq!(committed(&mut admin, "g2", 2), None, "after a restart too");
}

/// The connection that deletes a topic (or creates it) may use the name again at once; one
/// that only used it may not.
#[test]
fn the_deleting_connection_may_use_the_name_again() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &["--fsync", "never"]);
    let batch = encode_batch(0, b"", b"x", 1);
    let (mut owner, mut other) = (broker.client(), broker.client());
    owner.produce("t", 0, std::slice::from_ref(&batch)).unwrap();
    other.produce("t", 0, std::slice::from_ref(&batch)).unwrap();
    owner.delete_topic("t").unwrap();
    let refused = other
        .produce("t", 0, std::slice::from_ref(&batch))
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::UnknownTopic), "{refused}");
    owner.produce("t", 0, std::slice::from_ref(&batch)).unwrap();
    // Made again by someone else: still not the topic `other` used.
    assert_eq!(
        other
            .fetch("t", 0, 0, 1 << 20, Duration::ZERO)
            .unwrap_err()
            .code(),
        Some(ErrorCode::UnknownTopic)
    );
    other
        .create_topic("t", TopicSettings::default())
        .unwrap_err();
    other.produce("t", 0, std::slice::from_ref(&batch)).unwrap();
}
