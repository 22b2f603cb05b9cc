//! The request timeout (`--request-timeout-ms`) through real sockets against the broker
//! binary: a native frame or HermitMQ v1 batch whose first bytes arrived must arrive whole
//! within it, or the connection is closed, logged and counted (`requests_too_slow`); a
//! slow request that does arrive in time is served, and each request has its own clock.
//!
//! The idle timeout stays at its default (300 s) in these tests, so a connection closed
//! within seconds was closed by the request timeout.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Broker;
use common::raw::{assert_closed_within, counters, dribble, native_preface, produce_frame};
use pagurus::protocol::hermit;
use pagurus::protocol::native::{self, ErrorCode};
use pagurus::protocol::record::{BatchHeader, HEADER_LEN, encode_batch};

/// Far below the idle timeout, far above the request timeout of these tests.
const CLOSED_WITHIN: Duration = Duration::from_secs(20);

/// Half a frame or batch, then silence (or a hang-up): the silent ones are closed at the
/// request timeout, not the idle timeout, and nothing of any of them is stored.
#[test]
fn partial_requests_are_closed_at_the_request_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(
        &dir.path().join("data"),
        2,
        &["--request-timeout-ms", "1000"],
    );
    let mut silent = Vec::new();
    let frame = produce_frame("cut", b"never whole");
    for cut in [2, 4, 10, frame.len() - 1] {
        let mut stream = native_preface(broker.addr);
        stream.write_all(&frame[..cut]).unwrap();
        silent.push(stream);

        let mut gone = native_preface(broker.addr);
        gone.write_all(&frame[..cut]).unwrap();
        drop(gone);
    }
    // The v1 producer: a header announcing 1,000 bytes, 10 of them, then nothing.
    let mut v1 = TcpStream::connect(broker.addr).unwrap();
    v1.write_all(&hermit::encode_producer_hello("cut", 0))
        .unwrap();
    let batch = encode_batch(0, b"", &[5u8; 1000 - HEADER_LEN], 1);
    assert_eq!(
        BatchHeader::decode(&batch, &Default::default())
            .unwrap()
            .batch_len(),
        1000
    );
    v1.write_all(&batch[..HEADER_LEN + 10]).unwrap();
    silent.push(v1);

    for stream in &mut silent {
        assert_closed_within(stream, CLOSED_WITHIN);
    }
    let mut client = broker.client();
    let fetched = client.fetch("cut", 0, 0, 1 << 20, Duration::ZERO).unwrap();
    assert!(fetched.batches.is_empty(), "nothing partial was stored");
    drop(client);
    let counted = counters(&mut broker);
    assert!(
        counted["requests_too_slow"] >= silent.len() as u64,
        "{counted:?}"
    );
    let log = broker.log_text();
    // One line per protocol, from the session both share.
    for protocol in ["native", "hermit"] {
        assert!(
            log.lines().any(|line| line
                .contains("request not complete within the request timeout of its first bytes")
                && line.contains(&format!("protocol=\"{protocol}\""))),
            "no timeout line for {protocol}: {log}"
        );
    }
}

/// A byte at a time, each well within the idle timeout: the handshake, a native frame and a
/// v1 batch are each cut off by their deadline, not kept open for as long as the client likes.
#[test]
fn slowloris_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(
        &dir.path().join("data"),
        1,
        &[
            "--request-timeout-ms",
            "1500",
            "--handshake-timeout-ms",
            "1000",
        ],
    );
    let gap = Duration::from_millis(200);

    let mut handshake = TcpStream::connect(broker.addr).unwrap();
    let long_hello = hermit::encode_consumer_hello(&"g".repeat(200), "t", 0);
    let taken = dribble(&mut handshake, &long_hello, gap);
    assert!(taken < long_hello.len());

    let mut native_stream = native_preface(broker.addr);
    let frame = produce_frame("slow", &[7u8; 400]);
    let taken = dribble(&mut native_stream, &frame, gap);
    assert!(taken < frame.len());

    let mut v1 = TcpStream::connect(broker.addr).unwrap();
    v1.write_all(&hermit::encode_producer_hello("slow", 0))
        .unwrap();
    let batch = encode_batch(0, b"", &[7u8; 400], 1);
    let taken = dribble(&mut v1, &batch, gap);
    assert!(taken < batch.len());

    // Nothing of the slow requests was stored; the broker serves the well-behaved.
    let mut client = broker.client();
    let fetched = client.fetch("slow", 0, 0, 1 << 20, Duration::ZERO).unwrap();
    assert!(fetched.batches.is_empty());
    drop(client);
    let counted = counters(&mut broker);
    assert!(counted["requests_too_slow"] >= 2, "{counted:?}");
    assert!(counted["connections_timed_out"] >= 3, "{counted:?}");
}

/// Sends `bytes` in `pieces` parts, `gap` apart.
fn send_slowly(stream: &mut TcpStream, bytes: &[u8], pieces: usize, gap: Duration) {
    for (i, piece) in bytes.chunks(bytes.len().div_ceil(pieces)).enumerate() {
        if i > 0 {
            std::thread::sleep(gap);
        }
        stream.write_all(piece).unwrap();
    }
}

/// Requests that take a while but arrive whole within the limit are served, and the clock
/// starts again with each: together they take longer than the limit.
#[test]
fn slow_but_complete_requests_are_served() {
    const REQUESTS: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(
        &dir.path().join("data"),
        1,
        &["--request-timeout-ms", "3000", "--fsync", "never"],
    );
    let (pieces, gap) = (4, Duration::from_millis(250));

    let mut native_stream = native_preface(broker.addr);
    for _ in 0..REQUESTS {
        send_slowly(
            &mut native_stream,
            &produce_frame("slow", &[1u8; 300]),
            pieces,
            gap,
        );
        let mut len = [0u8; 4];
        native_stream.read_exact(&mut len).unwrap();
        let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
        native_stream.read_exact(&mut body).unwrap();
        let (header, _) = native::decode_response(&body).unwrap();
        assert_eq!(header.error, ErrorCode::None as u16);
    }

    let mut v1 = TcpStream::connect(broker.addr).unwrap();
    v1.write_all(&hermit::encode_producer_hello("slow", 0))
        .unwrap();
    for _ in 0..REQUESTS {
        send_slowly(&mut v1, &encode_batch(0, b"", &[2u8; 300], 1), pieces, gap);
        let mut ack = [0u8; hermit::ACK_LEN];
        v1.read_exact(&mut ack).unwrap();
        assert_eq!(ack[0], hermit::ACK_STORED);
    }

    let mut client = broker.client();
    let fetched = client.fetch("slow", 0, 0, 1 << 20, Duration::ZERO).unwrap();
    assert_eq!(fetched.batches.len(), 2 * REQUESTS);
    drop(client);
    drop((native_stream, v1));
    let counted = counters(&mut broker);
    // The stop line names only counters above zero.
    assert_eq!(counted.get("requests_too_slow"), None, "{counted:?}");
    assert!(counted["batches_in"] >= 2 * REQUESTS as u64, "{counted:?}");
}
