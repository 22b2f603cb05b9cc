//! Seeking by timestamp into the middle of a batch starts at the first record at or after
//! that time (`server::time_seek`), for Kafka clients (confluent-kafka, kafka-python; driver
//! tests/kafka/time_seek.py) and the native client. The index keeps one timestamp per
//! batch; before, the answer was the batch's first offset, up to a batch too early.

mod common;

use std::process::Command;

use bytes::BytesMut;
use common::{Broker, have_python};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use pagurus::limits::Limits;
use pagurus::protocol::native::OffsetSpec;
use pagurus::protocol::record::{BatchHeader, encode_batch};

const BASE_MS: i64 = 1_700_000_000_000;
const STEP_MS: i64 = 10;
const RECORDS: i64 = 200;
/// Between records 37 (BASE + 370) and 38 (BASE + 380): Kafka answers 38.
const SEEK_MS: i64 = BASE_MS + 375;

/// One RecordBatch of `RECORDS` records at `BASE_MS + i * STEP_MS`.
fn record_batch(compression: Compression) -> Vec<u8> {
    let records: Vec<Record> = (0..RECORDS)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: BASE_MS + i * STEP_MS,
            key: None,
            value: Some(bytes::Bytes::from(format!("v{i}"))),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).unwrap();
    out.to_vec()
}

fn at_ns(ms: i64) -> OffsetSpec {
    OffsetSpec::Timestamp(u64::try_from(ms).unwrap() * 1_000_000)
}

#[test]
fn native_client_seeks_to_the_record_inside_a_batch() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut client = broker.client();
    let max_ns = u64::try_from(BASE_MS + (RECORDS - 1) * STEP_MS).unwrap() * 1_000_000;
    // A RecordBatch sent by a native producer is stored (and served) as a Kafka batch.
    let batch = record_batch(Compression::None);
    let stored = encode_batch(max_ns, b"", &batch, RECORDS as u32);
    assert_eq!(client.produce("seek", 0, &[stored]).unwrap().0, 0);
    for (ms, expected) in [
        (BASE_MS - 1, 0),
        (BASE_MS, 0),
        (SEEK_MS, 38),
        (BASE_MS + 380, 38),
        (BASE_MS + 1_999, 200),
    ] {
        assert_eq!(
            client.list_offsets("seek", 0, at_ns(ms)).unwrap(),
            expected,
            "at {ms}"
        );
    }
    // A compressed RecordBatch is not opened by the broker: its first offset.
    let gzip = encode_batch(
        max_ns,
        b"",
        &record_batch(Compression::Gzip),
        RECORDS as u32,
    );
    assert_eq!(client.produce("zipped", 0, &[gzip]).unwrap().0, 0);
    assert_eq!(client.list_offsets("zipped", 0, at_ns(SEEK_MS)).unwrap(), 0);
    // Native batches carry one timestamp for all their records: their first offset.
    for ts in [100u64, 200] {
        let batch = encode_batch(ts, b"", b"x", 2);
        client.produce("native", 0, &[batch]).unwrap();
    }
    let spec = OffsetSpec::Timestamp(150);
    assert_eq!(client.list_offsets("native", 0, spec).unwrap(), 2);
}

#[test]
fn kafka_clients_seek_to_the_record_inside_a_batch() {
    if !have_python("confluent_kafka") || !have_python("kafka") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let script = format!("{}/tests/kafka/time_seek.py", env!("CARGO_MANIFEST_DIR"));
    let args = [RECORDS, BASE_MS, STEP_MS, SEEK_MS].map(|n| n.to_string());
    let out = Command::new("timeout")
        .args(["120", "python3", &script, &broker.addr.to_string(), "seek"])
        .args(&args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "time_seek.py failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    // Offset 38 is inside a stored batch that starts before it (the producer sent them in
    // one batch): what the index alone would have answered is that batch's first offset.
    let mut client = broker.client();
    let fetched = client
        .fetch("seek", 0, 38, 1, std::time::Duration::ZERO)
        .unwrap();
    let header = BatchHeader::decode(&fetched.batches[0], &Limits::default()).unwrap();
    assert!(header.offset < 38 && header.offset + u64::from(header.record_count) > 38);
    assert_eq!(got["confluent"], 38, "{got}");
    assert_eq!(got["kafka_python"], 38, "{got}");
    assert_eq!(got["first"]["offset"], 38, "{got}");
    assert_eq!(got["first"]["timestamp"], BASE_MS + 380, "{got}");
    assert_eq!(got["first"]["value"], "v38", "{got}");
    assert_eq!(client.list_offsets("seek", 0, at_ns(SEEK_MS)).unwrap(), 38);
}
