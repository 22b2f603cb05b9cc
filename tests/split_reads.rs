//! Requests that arrive cut at any point, in pieces of any size, among frames larger than
//! a connection's read chunk: each is read whole, in order, and stored as sent. A
//! connection's read buffer reuses its room and moves a partial frame to its front when it
//! needs the space (`server::read_buf`); these drive that through real sockets, for the
//! native protocol and for HermitMQ v1 (whose producers may be handed to another core
//! with the bytes read so far).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Broker;
use common::raw::{native_preface, produce_frame};
use pagurus::limits::Limits;
use pagurus::protocol::hermit;
use pagurus::protocol::native::{self, TopicSettings};
use pagurus::protocol::record::{self, encode_batch};

/// Payload sizes around the broker's read sizes (4 KiB at a request boundary, 64 KiB
/// chunks) and well past them.
const PAYLOAD_BYTES: [usize; 9] = [1, 99, 4_000, 4_096, 70_000, 10, 150_000, 65_536, 7];
const FRAMES: usize = 27;

fn payload(i: usize) -> Vec<u8> {
    let len = PAYLOAD_BYTES[i % PAYLOAD_BYTES.len()];
    (0..len).map(|k| (i * 31 + k) as u8).collect()
}

/// Writes `bytes` in pieces of 1 to `piece_max` bytes (a fixed pseudo-random sequence),
/// each its own `write` with Nagle's algorithm off, so the broker's reads end anywhere.
/// The answers are then read with a timeout.
fn send_in_pieces(stream: &mut TcpStream, bytes: &[u8], piece_max: usize, seed: u64) {
    stream.set_nodelay(true).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut state = seed;
    let mut at = 0;
    while at < bytes.len() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let piece = 1 + (state >> 33) as usize % piece_max;
        let end = (at + piece).min(bytes.len());
        stream.write_all(&bytes[at..end]).unwrap();
        at = end;
    }
}

/// The payloads stored in `topic` partition 0, in order.
fn stored(broker: &Broker, topic: &str, count: usize) -> Vec<Vec<u8>> {
    let mut client = broker.client();
    let mut payloads = Vec::new();
    let mut offset = 0;
    while payloads.len() < count {
        let fetched = client
            .fetch(topic, 0, offset, 1 << 20, Duration::from_secs(5))
            .unwrap();
        assert!(!fetched.batches.is_empty(), "nothing at offset {offset}");
        for batch in &fetched.batches {
            let header = record::check(batch, &Limits::default()).unwrap();
            payloads.push(record::payload_of(batch, &header).to_vec());
            offset += header.records();
        }
    }
    payloads
}

/// Runs `send_and_check(broker, topic, piece_max)` for pieces of 1-7 and of 1-9 000 bytes,
/// each on a topic of its own, then checks that the topic holds the payloads in order.
fn for_each_cut(send_and_check: impl Fn(&Broker, &str, usize)) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    for (topic, piece_max) in [("tiny-pieces", 7), ("large-pieces", 9_000)] {
        broker
            .client()
            .create_topic(topic, TopicSettings::default())
            .unwrap();
        send_and_check(&broker, topic, piece_max);
        let expected: Vec<Vec<u8>> = (0..FRAMES).map(payload).collect();
        assert!(
            stored(&broker, topic, FRAMES) == expected,
            "{topic}: payloads differ"
        );
    }
}

#[test]
fn native_requests_cut_anywhere_are_read_whole() {
    for_each_cut(|broker, topic, piece_max| {
        let mut stream = native_preface(broker.addr);
        let mut bytes = Vec::new();
        for i in 0..FRAMES {
            let mut frame = produce_frame(topic, &payload(i));
            // The correlation id: after the length, the api key and the version.
            frame[8..12].copy_from_slice(&(i as u32).to_be_bytes());
            bytes.extend_from_slice(&frame);
        }
        send_in_pieces(&mut stream, &bytes, piece_max, piece_max as u64);
        for i in 0..FRAMES {
            let mut len = [0u8; 4];
            stream.read_exact(&mut len).unwrap();
            let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
            stream.read_exact(&mut body).unwrap();
            let (header, rest) = native::decode_response(&body).unwrap();
            assert_eq!(header.correlation_id, i as u32, "{topic}: answers in order");
            assert_eq!(header.error, 0, "{topic}: request {i} failed");
            let (base, _) = native::decode_produce_response(rest).unwrap();
            assert_eq!(base, i as u64, "{topic}: request {i} stored out of order");
        }
    });
}

#[test]
fn hermit_batches_cut_anywhere_are_read_whole() {
    for_each_cut(|broker, topic, piece_max| {
        let mut stream = TcpStream::connect(broker.addr).unwrap();
        // The handshake goes in pieces too: a hand-off to the owning core carries the
        // bytes read past it.
        let mut bytes = hermit::encode_producer_hello(topic, 0);
        for i in 0..FRAMES {
            bytes.extend_from_slice(&encode_batch(0, b"", &payload(i), 1));
        }
        send_in_pieces(&mut stream, &bytes, piece_max, piece_max as u64 + 1);
        for i in 0..FRAMES {
            let mut ack = [0u8; 9];
            stream.read_exact(&mut ack).unwrap();
            assert_eq!(ack[0], 0, "{topic}: batch {i} failed");
            let base = u64::from_be_bytes(ack[1..].try_into().unwrap());
            assert_eq!(base, i as u64, "{topic}: batch {i} stored out of order");
        }
    });
}
