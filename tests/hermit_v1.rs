//! HermitMQ v1 compatibility: the bytes of HERMIT-WIRE.md, spoken by a raw socket exactly as
//! HermitMQ's clients and load tools speak them.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Broker;
use common::hermit::{V1Producer, consume_records, consumer, load_batch};
use pagurus::limits::Limits;
use pagurus::protocol::hermit::{self, ACK_FAILED, ACK_STORED};
use pagurus::protocol::native::TopicSettings;
use pagurus::protocol::record::{self, BatchHeader, HEADER_LEN, encode_batch};

fn commit(broker: &Broker, group: &str, topic: &str, partition: u32, offset: u64) {
    let mut stream = TcpStream::connect(broker.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(&hermit::encode_commit(group, topic, partition, offset))
        .unwrap();
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer).unwrap();
    assert_eq!(answer, [hermit::COMMIT_DONE]);
}

#[test]
fn load_tool_workload_ten_producers_a_million_records_live_consumer() {
    let dir = tempfile::tempdir().unwrap();
    // PAGURUS_TEST_FSYNC picks the policy (default always); the rate is printed, so this test
    // doubles as the v1 throughput measurement:
    //   PAGURUS_TEST_FSYNC=never cargo test --release --test hermit_v1 load_tool -- --nocapture
    let fsync = std::env::var("PAGURUS_TEST_FSYNC").unwrap_or_else(|_| "always".into());
    let broker = Broker::start_in(&dir.path().join("data"), 2, &["--fsync", &fsync]);
    // The consumer connects first and waits: delivery must continue as batches arrive.
    let mut live = consumer(&broker, "stress-group", "load_test", 0);
    let started = std::time::Instant::now();
    let producers: Vec<_> = (0..10)
        .map(|p| {
            let mut producer = V1Producer::connect(&broker, "load_test", 0);
            std::thread::spawn(move || {
                let mut last = None;
                for b in 0..1000 {
                    let (status, base) = producer.send(&load_batch(p, b));
                    assert_eq!(status, ACK_STORED);
                    if let Some(previous) = last {
                        assert!(base > previous, "a connection's acks increase");
                    }
                    last = Some(base);
                }
            })
        })
        .collect();
    let batches = consume_records(&mut live, 0, 1_000_000);
    for producer in producers {
        producer.join().unwrap();
    }
    let elapsed = started.elapsed();
    println!(
        "HermitMQ v1 workload, fsync={fsync}: 1,000,000 records produced and consumed in {:.2} s = {:.0} records/s",
        elapsed.as_secs_f64(),
        1e6 / elapsed.as_secs_f64()
    );
    assert_eq!(batches.len(), 10_000);
    // Every (producer, batch) arrived exactly once, and each batch's records in order.
    let mut seen = vec![false; 10_000];
    for batch in &batches {
        let header = BatchHeader::decode(batch, &Limits::default()).unwrap();
        let payload = record::payload_of(batch, &header);
        let producer = u64::from_be_bytes(payload[..8].try_into().unwrap()) as usize;
        let index = u64::from_be_bytes(payload[8..16].try_into().unwrap()) as usize;
        assert!(
            !std::mem::replace(&mut seen[producer * 1000 + index], true),
            "duplicate batch"
        );
        for (r, record) in payload.chunks(28).enumerate() {
            assert_eq!(
                u64::from_be_bytes(record[16..24].try_into().unwrap()),
                r as u64
            );
        }
    }
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn commit_then_reconnect_resumes_at_the_committed_offset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut producer = V1Producer::connect(&broker, "orders", 0);
    for i in 0..10u8 {
        let (status, base) = producer.send(&encode_batch(0, b"", &[i; 10], 1));
        assert_eq!((status, base), (ACK_STORED, u64::from(i)));
    }
    // No commit yet: delivery starts at the oldest offset.
    let mut first = consumer(&broker, "g", "orders", 0);
    assert_eq!(consume_records(&mut first, 0, 10).len(), 10);
    drop(first);
    commit(&broker, "g", "orders", 0, 6);
    let mut again = consumer(&broker, "g", "orders", 0);
    let batches = consume_records(&mut again, 6, 4);
    let header = BatchHeader::decode(&batches[0], &Limits::default()).unwrap();
    assert_eq!(record::payload_of(&batches[0], &header), &[6u8; 10]);
    // Native clients see the same committed offset.
    assert_eq!(
        broker.client().fetch_offset("g", "orders", 0).unwrap(),
        Some(6)
    );
}

fn assert_closed(stream: &mut TcpStream) {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 9];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the connection to be closed, got {other:?}"),
    }
}

#[test]
fn bad_input_closes_the_connection_and_stores_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let broker = Broker::start_in(&data, 2, &["--max-payload-bytes", "1000"]);

    // A topic name that would escape the data directory.
    let mut escape = TcpStream::connect(broker.addr).unwrap();
    escape
        .write_all(&hermit::encode_producer_hello("../x", 0))
        .unwrap();
    assert_closed(&mut escape);
    assert!(!dir.path().join("x").exists() && !data.join("x").exists());

    // Bad magic.
    let mut producer = V1Producer::connect(&broker, "t", 0);
    assert_eq!(producer.send(&encode_batch(0, b"", b"ok", 1)).0, ACK_STORED);
    let mut bad = encode_batch(0, b"", b"bad", 1);
    bad[0] = 0x02;
    producer.stream.write_all(&bad).unwrap();
    assert_closed(&mut producer.stream);

    // An oversized payload is refused from its header, before its bytes are awaited.
    let mut producer = V1Producer::connect(&broker, "t", 0);
    let huge = encode_batch(0, b"", &[0; 2000], 1);
    producer.stream.write_all(&huge[..HEADER_LEN]).unwrap();
    assert_closed(&mut producer.stream);

    // A zero-length string.
    let mut empty = TcpStream::connect(broker.addr).unwrap();
    empty.write_all(&[hermit::ROLE_COMMIT, 0]).unwrap();
    assert_closed(&mut empty);

    // Nothing partial was stored: only the one good batch.
    let mut client = broker.client();
    let fetched = client.fetch("t", 0, 0, 1 << 20, Duration::ZERO).unwrap();
    assert_eq!(fetched.batches.len(), 1);
    assert_eq!(fetched.high_watermark, 1);
}

#[test]
fn a_failed_append_answers_0xff_and_keeps_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    broker
        .client()
        .create_topic(
            "two",
            TopicSettings {
                partitions: 2,
                ..Default::default()
            },
        )
        .unwrap();
    let mut producer = V1Producer::connect(&broker, "two", 7);
    assert_eq!(
        producer.send(&encode_batch(0, b"", b"x", 1)),
        (ACK_FAILED, 0)
    );
    assert_eq!(
        producer.send(&encode_batch(0, b"", b"y", 1)),
        (ACK_FAILED, 0),
        "still open after 0xFF"
    );
}

#[test]
fn a_consumer_that_leaves_while_waiting_is_cleaned_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    for _ in 0..5 {
        let waiting = consumer(&broker, "g", "quiet", 0);
        std::thread::sleep(Duration::from_millis(100));
        drop(waiting);
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(broker.terminate().success());
    let log = broker.log_text();
    assert_eq!(
        log.matches("HermitMQ consumer went away").count(),
        5,
        "log:\n{log}"
    );
}

/// A v1 producer that sends batches without waiting for each ack (v1 does not forbid it)
/// gets one ack per batch, in order, each at the offset its batch was stored at: the
/// session's pipeline starts batches in arrival order and answers them in that order.
#[test]
fn pipelined_batches_are_acknowledged_in_order_at_their_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut producer = V1Producer::connect(&broker, "piped", 0);
    const BATCHES: u64 = 64;
    let mut all = Vec::new();
    for i in 0..BATCHES {
        // Batches of 1, 2 and 3 records, so a reordered ack names a wrong offset.
        let records = (i % 3 + 1) as u32;
        all.extend_from_slice(&encode_batch(0, b"", &[i as u8; 16], records));
    }
    producer.stream.write_all(&all).unwrap();
    let mut expected_base = 0u64;
    for i in 0..BATCHES {
        let (status, base) = producer.ack();
        assert_eq!(
            (status, base),
            (ACK_STORED, expected_base),
            "ack {i} of {BATCHES}"
        );
        expected_base += i % 3 + 1;
    }
    let mut reader = consumer(&broker, "g", "piped", 0);
    let batches = consume_records(&mut reader, 0, expected_base);
    assert_eq!(batches.len() as u64, BATCHES);
    for (i, batch) in batches.iter().enumerate() {
        let header = BatchHeader::decode(batch, &Limits::default()).unwrap();
        assert_eq!(record::payload_of(batch, &header), &[i as u8; 16]);
    }
}
