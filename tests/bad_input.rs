//! Every bad input gets a clear error (a coded error on the native protocol, a closed
//! connection where the protocol cannot be known), and the broker keeps serving.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Broker;
use pagurus::client::ClientError;
use pagurus::client::blocking::Client;
use pagurus::protocol::native::{self, ErrorCode, TopicSettings};
use pagurus::protocol::record::encode_batch;
use pagurus::protocol::wire::Put;

fn code(result: Result<impl std::fmt::Debug, ClientError>) -> ErrorCode {
    let error = result.expect_err("the broker must refuse this");
    error
        .code()
        .unwrap_or_else(|| panic!("expected a broker error, got {error:?}"))
}

/// Sends a raw request body (after the length prefix) and returns the answer's error code.
fn raw_request(client: &mut Client, body: &[u8]) -> ErrorCode {
    let mut frame = Vec::new();
    frame.put_u32(body.len() as u32);
    frame.extend_from_slice(body);
    client.stream().write_all(&frame).unwrap();
    let header = client.receive().unwrap();
    ErrorCode::from_u16(header.error).unwrap()
}

fn small_limits_broker(dir: &std::path::Path) -> Broker {
    Broker::start_in(
        &dir.join("data"),
        2,
        &[
            "--max-key-bytes",
            "100",
            "--max-payload-bytes",
            "1000",
            "--max-topics",
            "3",
            "--handshake-timeout-ms",
            "300",
            "--max-connections",
            "6",
        ],
    )
}

#[test]
fn bad_requests_get_coded_errors_and_the_connection_survives() {
    let dir = tempfile::tempdir().unwrap();
    let broker = small_limits_broker(dir.path());
    let mut client = broker.client();

    // Bad CRC: refused, nothing stored.
    let batch = encode_batch(0, b"", b"payload", 1);
    let mut bytes = Vec::new();
    bytes.put_u32(0xdead_beef);
    bytes.extend_from_slice(&batch);
    let mut body = Vec::new();
    body.put_u16(native::ApiKey::Produce as u16);
    body.put_u16(native::VERSION);
    body.put_u32(1);
    body.put_string(b"t1");
    body.put_u32(0);
    body.put_u32(1);
    body.extend_from_slice(&bytes);
    assert_eq!(raw_request(&mut client, &body), ErrorCode::CrcMismatch);

    // Bad magic inside a produce.
    let magic_at = body.len() - batch.len();
    body[magic_at] = 0x07;
    assert_eq!(raw_request(&mut client, &body), ErrorCode::BadMagic);

    // Oversized payload and key (the frame itself is within limits).
    assert_eq!(
        code(client.produce("t1", 0, &[encode_batch(0, b"", &[0; 1001], 1)])),
        ErrorCode::PayloadTooLarge
    );
    assert_eq!(
        code(client.produce("t1", 0, &[encode_batch(0, &[0; 101], b"", 1)])),
        ErrorCode::KeyTooLarge
    );

    // Truncated request, unknown api, unknown version.
    assert_eq!(raw_request(&mut client, &body[..20]), ErrorCode::Malformed);
    let mut unknown = body.clone();
    unknown[..2].copy_from_slice(&999u16.to_be_bytes());
    assert_eq!(
        raw_request(&mut client, &unknown),
        ErrorCode::UnsupportedApi
    );
    let mut version = body.clone();
    version[2..4].copy_from_slice(&77u16.to_be_bytes());
    assert_eq!(
        raw_request(&mut client, &version),
        ErrorCode::UnsupportedVersion
    );

    // Names that would leave the data directory, or are not names at all.
    for name in ["../x", "..", ".", "a/b", "", "über"] {
        assert_eq!(
            code(client.produce(name, 0, &[encode_batch(0, b"", b"x", 1)])),
            ErrorCode::InvalidName,
            "{name:?}"
        );
    }
    assert!(
        !dir.path().join("x").exists(),
        "nothing was created outside the data directory"
    );

    // A partition that does not exist.
    assert_eq!(
        code(client.produce("t1", 5, &[encode_batch(0, b"", b"x", 1)])),
        ErrorCode::UnknownPartition
    );

    // After all that, the same connection still works, and nothing partial was stored.
    let (base, _) = client
        .produce("t1", 0, &[encode_batch(0, b"", b"good", 1)])
        .unwrap();
    assert_eq!(base, 0, "no refused batch took an offset");
}

#[test]
fn an_oversized_frame_is_skipped_and_answered() {
    let dir = tempfile::tempdir().unwrap();
    let broker = small_limits_broker(dir.path());
    let mut client = broker.client();
    let body_len = 200_000u32;
    let mut frame = Vec::new();
    frame.put_u32(body_len);
    frame.put_u16(native::ApiKey::Produce as u16);
    frame.put_u16(native::VERSION);
    frame.put_u32(42);
    frame.resize(4 + body_len as usize, 0xab);
    client.stream().write_all(&frame).unwrap();
    let header = client.receive().unwrap();
    assert_eq!(header.correlation_id, 42);
    assert_eq!(
        ErrorCode::from_u16(header.error),
        Some(ErrorCode::FrameTooLarge)
    );
    // Framing was kept: the next request on the same connection is answered.
    client
        .produce("t2", 0, &[encode_batch(0, b"", b"ok", 1)])
        .unwrap();
}

#[test]
fn the_topic_limit_holds() {
    let dir = tempfile::tempdir().unwrap();
    let broker = small_limits_broker(dir.path());
    let mut client = broker.client();
    for name in ["a", "b", "c"] {
        client.create_topic(name, TopicSettings::default()).unwrap();
    }
    assert_eq!(
        code(client.create_topic("d", TopicSettings::default())),
        ErrorCode::TopicLimit
    );
    assert_eq!(
        code(client.produce("e", 0, &[encode_batch(0, b"", b"x", 1)])),
        ErrorCode::TopicLimit
    );
    assert_eq!(
        code(client.create_topic("a", TopicSettings::default())),
        ErrorCode::TopicExists
    );
    client.delete_topic("a").unwrap();
    client.create_topic("d", TopicSettings::default()).unwrap();
    assert_eq!(code(client.delete_topic("a")), ErrorCode::UnknownTopic);
}

fn assert_closed_by_broker(mut stream: TcpStream) {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut buf = [0u8; 16];
    match stream.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("expected the broker to close the connection, got {other:?}"),
    }
}

#[test]
fn silent_unknown_and_excess_connections_are_closed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = small_limits_broker(dir.path());

    // Says nothing: closed after the handshake timeout.
    assert_closed_by_broker(TcpStream::connect(broker.addr).unwrap());

    // Speaks HTTP, or announces a Kafka frame (first byte 0) over the request limit: closed.
    let mut http = TcpStream::connect(broker.addr).unwrap();
    http.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert_closed_by_broker(http);
    let mut kafka = TcpStream::connect(broker.addr).unwrap();
    kafka.write_all(&[0, 0xff, 0xff, 0xff]).unwrap();
    assert_closed_by_broker(kafka);

    // The connection limit (6): the seventh is closed at once.
    let held: Vec<Client> = (0..6).map(|_| broker.client()).collect();
    assert_closed_by_broker(TcpStream::connect(broker.addr).unwrap());
    drop(held);
    std::thread::sleep(Duration::from_millis(200));
    let mut client = broker.client();
    client
        .produce("t", 0, &[encode_batch(0, b"", b"still serving", 1)])
        .unwrap();
}
