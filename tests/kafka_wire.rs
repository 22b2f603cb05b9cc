//! The Kafka front-end at the byte level, over a raw socket with requests built by the
//! `kafka-protocol` crate: idempotent retries, sequence and epoch errors, bad batches,
//! NOT_LEADER_OR_FOLLOWER on the wrong core's port, unsupported APIs, a deleted topic
//! staying deleted for open connections, JoinGroup's MEMBER_ID_REQUIRED.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::Broker;
use common::kafka::Conn;
use indexmap::IndexMap;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, ProduceRequest, ProduceResponse, RequestHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

fn batch(producer_id: i64, epoch: i16, first_sequence: i32, count: i32) -> Bytes {
    batch_of(producer_id, epoch, first_sequence, count, 0)
}

/// [`batch`] with each value padded to at least `value_len` bytes.
fn batch_of(
    producer_id: i64,
    epoch: i16,
    first_sequence: i32,
    count: i32,
    value_len: usize,
) -> Bytes {
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch: epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: if producer_id >= 0 {
                first_sequence + i
            } else {
                -1
            },
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from({
                let mut value = format!("v{first_sequence}-{i}").into_bytes();
                value.resize(value.len().max(value_len), b'.');
                value
            })),
            headers: IndexMap::new(),
        })
        .collect();
    let mut out = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut out,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    out.freeze()
}

/// Produces `records` to `topic`/0 with acks=-1 at v7; returns (error code, base offset).
fn produce(conn: &mut Conn, topic: &str, records: Bytes) -> (i16, i64) {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records)),
                ]),
        ]);
    let mut body = conn.call(ApiKey::Produce, 7, &request);
    let response = ProduceResponse::decode(&mut body, 7).unwrap();
    let p = &response.responses[0].partition_responses[0];
    (p.error_code, p.base_offset)
}

fn start() -> (tempfile::TempDir, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    (dir, broker)
}

fn create(conn: &mut Conn, topic: &str) {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                .with_num_partitions(1)
                .with_replication_factor(1),
        ]);
    let mut body = conn.call(ApiKey::CreateTopics, 5, &request);
    let response = kafka_protocol::messages::CreateTopicsResponse::decode(&mut body, 5).unwrap();
    assert_eq!(response.topics[0].error_code, 0, "{response:?}");
}

#[test]
fn idempotent_retries_sequences_and_epochs() {
    let (_dir, mut broker) = start();
    let mut conn = Conn::connect(broker.addr);
    create(&mut conn, "idem");
    const PID: i64 = 4242;
    assert_eq!(produce(&mut conn, "idem", batch(PID, 0, 0, 10)), (0, 0));
    assert_eq!(produce(&mut conn, "idem", batch(PID, 0, 10, 5)), (0, 10));
    // A retry of the last batch: its original offset, stored once.
    assert_eq!(produce(&mut conn, "idem", batch(PID, 0, 10, 5)), (0, 10));
    // A gap in the sequence: OUT_OF_ORDER_SEQUENCE_NUMBER.
    assert_eq!(produce(&mut conn, "idem", batch(PID, 0, 20, 1)).0, 45);
    assert_eq!(produce(&mut conn, "idem", batch(PID, 0, 15, 1)), (0, 15));
    // A newer epoch starts at 0 and fences the older one.
    assert_eq!(produce(&mut conn, "idem", batch(PID, 1, 0, 1)), (0, 16));
    assert_eq!(produce(&mut conn, "idem", batch(PID, 0, 16, 1)).0, 47);
    // Plain batches are not checked.
    assert_eq!(produce(&mut conn, "idem", batch(-1, -1, -1, 3)), (0, 17));

    // After a restart the table is rebuilt from the log: the retry is still recognised.
    drop(conn);
    broker.terminate();
    broker.restart();
    let mut conn = Conn::connect(broker.addr);
    assert_eq!(produce(&mut conn, "idem", batch(PID, 1, 0, 1)), (0, 16));
    assert_eq!(produce(&mut conn, "idem", batch(PID, 1, 1, 2)), (0, 20));
}

#[test]
fn bad_batches_wrong_core_and_unsupported_apis() {
    let (_dir, broker) = start();
    let mut conn = Conn::connect(broker.addr);
    create(&mut conn, "bad");
    // A flipped byte inside the CRC's range: CORRUPT_MESSAGE, nothing stored.
    let good = batch(-1, -1, -1, 4);
    let mut bad = good.to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    assert_eq!(produce(&mut conn, "bad", Bytes::from(bad)).0, 2);
    // Two batches, the second broken: neither is stored.
    let mut two = good.to_vec();
    let mut broken = good.to_vec();
    broken[16] = 1; // magic 1
    two.extend_from_slice(&broken);
    assert_eq!(produce(&mut conn, "bad", Bytes::from(two)).0, 2);
    assert_eq!(produce(&mut conn, "bad", good.clone()), (0, 0));

    // The partition's owner is one core; the other core's shard port says NOT_LEADER.
    let owner = pagurus::shard::placement::partition_owner("bad", 0, 2);
    let other = 1 - owner;
    let port = |core: usize| broker.addr.port() + 1 + core as u16;
    let mut wrong = Conn::connect(SocketAddr::from(([127, 0, 0, 1], port(other))));
    assert_eq!(produce(&mut wrong, "bad", good.clone()).0, 6);
    let mut right = Conn::connect(SocketAddr::from(([127, 0, 0, 1], port(owner))));
    assert_eq!(produce(&mut right, "bad", good.clone()), (0, 4));

    // An API pagurus does not serve (DescribeDelegationToken, key 41): the connection is closed, as
    // Kafka 4.x closes it (`tests/kafka_floor.rs`); a new one works.
    let mut body = BytesMut::new();
    RequestHeader::default()
        .with_request_api_key(41)
        .with_request_api_version(1)
        .with_correlation_id(777)
        .encode(&mut body, 1)
        .unwrap();
    body.extend_from_slice(&[0; 16]);
    conn.send_raw(&body);
    let mut rest = Vec::new();
    use std::io::Read;
    assert_eq!(
        conn.stream.read_to_end(&mut rest).unwrap(),
        0,
        "closed, no answer"
    );
    let mut conn = Conn::connect(broker.addr);
    assert_eq!(produce(&mut conn, "bad", good), (0, 8));
}

/// Metadata v9 for `topic`, allowing auto-creation: the topic's error code.
fn metadata_code(conn: &mut Conn, topic: &str) -> i16 {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};
    let request = MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_string(topic.to_string())),
        ))]));
    let mut body = conn.call(ApiKey::Metadata, 9, &request);
    let response = MetadataResponse::decode(&mut body, 9).unwrap();
    response.topics[0].error_code
}

/// Deleting a topic wins over Kafka connections (docs/KAFKA.md, "Deleting a topic"): one
/// that produced and one that was only open get UNKNOWN_TOPIC_OR_PARTITION and create
/// nothing, even by Metadata with auto-creation; a new connection may make the name again,
/// and the old ones still cannot use that new topic.
#[test]
fn a_deleted_topic_stays_deleted_for_open_kafka_connections() {
    let (_dir, broker) = start();
    let mut producer = Conn::connect(broker.addr);
    let mut idle = Conn::connect(broker.addr);
    // The broker knows a Kafka connection from its first request (as every client sends
    // ApiVersions first).
    let versions = kafka_protocol::messages::ApiVersionsRequest::default();
    idle.call(ApiKey::ApiVersions, 0, &versions);
    create(&mut producer, "gone");
    assert_eq!(produce(&mut producer, "gone", batch(-1, -1, -1, 2)), (0, 0));
    broker.client().delete_topic("gone").unwrap();

    assert_eq!(produce(&mut producer, "gone", batch(-1, -1, -1, 2)).0, 3);
    assert_eq!(metadata_code(&mut producer, "gone"), 3);
    assert_eq!(metadata_code(&mut idle, "gone"), 3);
    assert_eq!(produce(&mut idle, "gone", batch(-1, -1, -1, 2)).0, 3);
    assert!(
        broker.client().metadata(&[]).unwrap().topics.is_empty(),
        "nothing made the topic again"
    );

    // A new connection may; the old ones still may not use what it made.
    let mut fresh = Conn::connect(broker.addr);
    assert_eq!(metadata_code(&mut fresh, "gone"), 0);
    assert_eq!(produce(&mut fresh, "gone", batch(-1, -1, -1, 1)), (0, 0));
    assert_eq!(produce(&mut producer, "gone", batch(-1, -1, -1, 2)).0, 3);
    assert_eq!(produce(&mut idle, "gone", batch(-1, -1, -1, 2)).0, 3);
    // A connection that deletes and creates the name itself knows it.
    let delete = kafka_protocol::messages::DeleteTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topic_names(vec![TopicName(StrBytes::from_static_str("gone"))]);
    let mut body = idle.call(ApiKey::DeleteTopics, 4, &delete);
    let deleted = kafka_protocol::messages::DeleteTopicsResponse::decode(&mut body, 4).unwrap();
    assert_eq!(deleted.responses[0].error_code, 0, "{deleted:?}");
    create(&mut idle, "gone");
    assert_eq!(produce(&mut idle, "gone", batch(-1, -1, -1, 1)), (0, 0));
    assert_eq!(produce(&mut fresh, "gone", batch(-1, -1, -1, 1)).0, 3);
}

/// JoinGroup v5 with no member id: MEMBER_ID_REQUIRED and an id (KIP-394); the join with
/// that id forms generation 1 with the member as leader.
#[test]
fn join_group_v5_hands_out_a_member_id_first() {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::{GroupId, JoinGroupRequest, JoinGroupResponse};
    let (_dir, broker) = start();
    let mut conn = Conn::connect(broker.addr);
    let join = |member_id: StrBytes| {
        JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("kip394")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_member_id(member_id)
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str("range"))
                    .with_metadata(Bytes::from_static(b"sub")),
            ])
    };
    let mut body = conn.call(ApiKey::JoinGroup, 5, &join(StrBytes::default()));
    let first = JoinGroupResponse::decode(&mut body, 5).unwrap();
    assert_eq!(first.error_code, 79, "{first:?}");
    assert!(!first.member_id.is_empty(), "{first:?}");
    let mut body = conn.call(ApiKey::JoinGroup, 5, &join(first.member_id.clone()));
    let joined = JoinGroupResponse::decode(&mut body, 5).unwrap();
    assert_eq!(joined.error_code, 0, "{joined:?}");
    assert_eq!(joined.generation_id, 1);
    assert_eq!(joined.member_id, first.member_id);
    assert_eq!(joined.leader, first.member_id);
    // An id nobody handed out is unknown.
    let mut body = conn.call(
        ApiKey::JoinGroup,
        5,
        &join(StrBytes::from_static_str("x-1")),
    );
    assert_eq!(
        JoinGroupResponse::decode(&mut body, 5).unwrap().error_code,
        25
    );
}

/// The base sequence of each stored batch of `topic`/0, by offset (read with the native
/// client: a Kafka batch is stored as the RecordBatch it arrived as).
fn stored_sequences(broker: &Broker, topic: &str) -> std::collections::BTreeMap<u64, i32> {
    use pagurus::protocol::kafka::batch as kafka_batch;
    use pagurus::protocol::record::{self, BatchHeader};
    let mut client = broker.client();
    let mut stored = std::collections::BTreeMap::new();
    let mut offset = 0;
    loop {
        let fetched = client
            .fetch(topic, 0, offset, 4 << 20, Duration::ZERO)
            .unwrap();
        if fetched.batches.is_empty() {
            return stored;
        }
        for stored_batch in fetched.batches {
            let header = BatchHeader::decode(&stored_batch, &Default::default()).unwrap();
            let info = kafka_batch::peek(record::payload_of(&stored_batch, &header), u64::MAX)
                .expect("a Kafka batch");
            stored.insert(header.offset, info.base_sequence);
            offset = header.offset + header.records();
        }
    }
}

/// Issue 36, made deterministic. A write that fails (disk full) takes back the batch it
/// carried, and its offsets go to the next batch staged. The producer's next batch, sent
/// before it saw the failure, must not be stored in its place as if the failed one were
/// there, and the failed batch's retry must be stored again, not answered with the offset
/// it lost (which another batch now holds). tmpfs allocates as writes come, and `never`
/// writes without pre-extension: the large batch fails where the small one fits.
#[test]
fn a_retry_after_a_failed_write_is_stored_again_not_answered_with_a_lost_offset() {
    let Some(fs) = common::small_fs::SmallFs::tmpfs(8) else {
        return;
    };
    let broker = Broker::start_in(fs.path(), 1, &["--fsync", "never"]);
    let mut conn = Conn::connect(broker.addr);
    create(&mut conn, "full");
    const PID: i64 = 77;
    let mut acked = Vec::new();
    let (code, offset) = produce(&mut conn, "full", batch(PID, 0, 0, 1));
    assert_eq!(code, 0);
    acked.push((0, offset));

    let filler = fs.fill_leaving("filler", 128 << 10);
    // One record, as the next batch has: answered with the lost batch's offset, the retry
    // would be acknowledged as soon as the next batch is written there.
    let large = batch_of(PID, 0, 1, 1, 512 << 10);
    assert!(large.len() > 256 << 10, "larger than the room left");
    assert_eq!(
        produce(&mut conn, "full", large.clone()).0,
        56,
        "KAFKA_STORAGE_ERROR"
    );
    let next_sequence = 2;
    let next = batch(PID, 0, next_sequence, 1);
    let next_first = produce(&mut conn, "full", next.clone());
    if next_first.0 == 0 {
        acked.push((next_sequence, next_first.1));
    } else {
        assert_eq!(
            next_first.0, 45,
            "OUT_OF_ORDER_SEQUENCE_NUMBER after a lost batch"
        );
    }

    std::fs::remove_file(&filler).unwrap();
    let (code, offset) = produce(&mut conn, "full", large);
    assert_eq!(code, 0, "the retry is stored once there is room");
    acked.push((1, offset));
    if next_first.0 != 0 {
        let (code, offset) = produce(&mut conn, "full", next);
        assert_eq!(code, 0, "the next batch follows its retried predecessor");
        acked.push((next_sequence, offset));
    }

    let stored = stored_sequences(&broker, "full");
    for (sequence, offset) in acked {
        assert_eq!(
            stored.get(&(offset as u64)),
            Some(&sequence),
            "the batch acknowledged at offset {offset} (sequence {sequence}) is there; log: {stored:?}"
        );
    }
}
