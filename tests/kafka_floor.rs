//! Requests below pagurus' version floor (Kafka 4.0's, KIP-896) and outside its table,
//! answered the way Kafka 4.x answers them: ApiVersions at any version gets the table (a
//! v0 response with UNSUPPORTED_VERSION, 35, when its own version is unknown); any other
//! API at a version not served closes the connection, after the answers to the requests
//! before it. Real bytes, kafka-python pinned to an old protocol, and librdkafka 2.0.2
//! (kcat) compressing its batches because Produce is advertised from v0 (KAFKA-18659).

mod common;

use std::io::Read;
use std::process::Command;

use bytes::BytesMut;
use common::kafka::Conn;
use common::{Broker, have, have_python};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

fn start() -> (tempfile::TempDir, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    (dir, broker)
}

/// A request header for `key` v`version` with correlation id `id`, then `body`.
fn raw(key: i16, version: i16, id: i32, body: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.extend_from_slice(&key.to_be_bytes());
    out.extend_from_slice(&version.to_be_bytes());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    out.extend_from_slice(body);
    out.to_vec()
}

fn assert_closed(conn: &mut Conn) {
    let mut rest = Vec::new();
    let read = conn
        .stream
        .read_to_end(&mut rest)
        .expect("closed, not timed out");
    assert_eq!(read, 0, "no bytes after the close: {rest:?}");
}

#[test]
fn a_request_below_the_floor_closes_the_connection_after_earlier_answers() {
    let (_dir, broker) = start();
    // Produce v2 (message sets: removed in Kafka 4.0), by hand: acks 1, timeout, no topics.
    let mut conn = Conn::connect(broker.addr);
    conn.send_raw(&raw(0, 2, 7, &[0, 1, 0, 0, 0x27, 0x10, 0, 0, 0, 0]));
    assert_closed(&mut conn);

    // Pipelined: Metadata v1 (served) then Fetch v3 (below Fetch's floor, 4): the
    // Metadata answer comes, then the close.
    let mut conn = Conn::connect(broker.addr);
    let mut metadata = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(ApiKey::Metadata as i16)
        .with_request_api_version(1)
        .with_correlation_id(41)
        .with_client_id(Some(StrBytes::from_static_str("old")))
        .encode(&mut metadata, 1)
        .unwrap();
    MetadataRequest::default()
        .with_topics(Some(vec![]))
        .encode(&mut metadata, 1)
        .unwrap();
    conn.send_raw(&metadata);
    conn.send_raw(&raw(1, 3, 42, &[0xff; 20]));
    let mut answer = conn.read_frame();
    assert_eq!(&answer[..4], &41i32.to_be_bytes());
    let mut body = answer.split_off(4);
    let response = MetadataResponse::decode(&mut body, 1).unwrap();
    assert_eq!(response.brokers.len(), 2);
    assert_closed(&mut conn);

    // An API pagurus does not serve at all (EndTxn, 26), and one above the newest
    // version (Metadata v14): closed the same way.
    for (key, version) in [(26, 3), (ApiKey::Metadata as i16, 14)] {
        let mut conn = Conn::connect(broker.addr);
        conn.send_raw(&raw(key, version, 5, &[0; 8]));
        assert_closed(&mut conn);
    }
    let log = broker.log_text();
    assert!(
        log.contains("connection closed, as Kafka closes it") && log.contains("version=2"),
        "{log}"
    );

    // The broker is still there.
    let mut conn = Conn::connect(broker.addr);
    let mut body = conn.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    assert_eq!(
        ApiVersionsResponse::decode(&mut body, 3)
            .unwrap()
            .error_code,
        0
    );
}

#[test]
fn api_versions_at_an_unknown_version_gets_the_table_in_v0() {
    let (_dir, broker) = start();
    let mut conn = Conn::connect(broker.addr);
    // ApiVersions v9: a client newer than the broker. v0 header, v0 body.
    conn.send_raw(&raw(18, 9, 3, &[]));
    let mut answer = conn.read_frame();
    assert_eq!(&answer[..4], &3i32.to_be_bytes());
    let mut body = answer.split_off(4);
    let response = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    assert_eq!(response.error_code, 35, "UNSUPPORTED_VERSION");
    let fetch = response.api_keys.iter().find(|k| k.api_key == 1).unwrap();
    assert_eq!((fetch.min_version, fetch.max_version), (4, 18));
    // ApiVersions v0, the oldest client's first request, is answered normally: a client
    // whose Fetch stops at v3 finds no version in common here and says so itself.
    let mut body = conn.call(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default());
    let response = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    assert_eq!(response.error_code, 0);
    let produce = response.api_keys.iter().find(|k| k.api_key == 0).unwrap();
    assert_eq!((produce.min_version, produce.max_version), (0, 13));
}

#[test]
fn kafka_python_pinned_below_the_floor_fails_its_send_and_the_broker_says_why() {
    if !have_python("kafka") {
        return;
    }
    let (_dir, broker) = start();
    let script = format!("{}/tests/kafka/old_client.py", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("timeout")
        .args(["60", "python3", &script, &broker.addr.to_string(), "old"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let outcome: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("no JSON ({e}): {stdout}"));
    // As against Kafka 4.x: the connection is closed, the send fails, nothing is stored.
    assert_eq!(outcome["stored"], false, "{outcome}");
    assert_eq!(outcome["error"], "KafkaConnectionError", "{outcome}");
    let log = broker.log_text();
    assert!(
        log.contains("api=0 version=2") && log.contains("connection closed"),
        "the broker names the refused version: {log}"
    );
}

#[test]
fn kcat_compresses_because_produce_is_advertised_from_v0() {
    if !have("kcat", "kcat", &["-V"]) {
        return;
    }
    let (_dir, broker) = start();
    common::create_topic(&broker, "zipped", 1);
    let mut kcat = Command::new("timeout")
        .args([
            "60",
            "kcat",
            "-b",
            &broker.addr.to_string(),
            "-t",
            "zipped",
            "-P",
        ])
        .args(["-z", "gzip", "-p", "0", "-X", "linger.ms=50"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = kcat.stdin.as_mut().unwrap();
        for i in 0..100 {
            writeln!(stdin, "message number {i} compresses well well well well").unwrap();
        }
    }
    assert!(kcat.wait().unwrap().success());
    // librdkafka 2.0.2 sends uncompressed batches ("Broker does not support compression
    // type gzip") to a broker whose Produce range starts above v2.
    let fetched = broker
        .client()
        .fetch("zipped", 0, 0, 1 << 20, std::time::Duration::ZERO)
        .unwrap();
    assert!(!fetched.batches.is_empty());
    for batch in &fetched.batches {
        // The stored RecordBatch after the 29-byte pagurus header; attributes at 21..23.
        let kafka = &batch[29..];
        let attributes = i16::from_be_bytes([kafka[21], kafka[22]]);
        assert_eq!(attributes & 0x7, 1, "gzip");
    }
}
