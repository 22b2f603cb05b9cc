//! Kafka 4.1's newest versions of Produce (v13: topics by id), ListOffsets (v8-v10: the
//! earliest-local and latest-tiered specs, a timeout) and DeleteTopics (v6: by id), driven
//! through the `kafka-protocol` crate's request and response types over a real socket
//! against a real broker.

mod common;

use bytes::{Bytes, BytesMut};
use common::Broker;
use common::kafka::Conn;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use uuid::Uuid;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create(conn: &mut Conn, topic: &str, partitions: i32) -> Uuid {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(partitions)
                .with_replication_factor(1),
        ]);
    let mut body = conn.call(ApiKey::CreateTopics, 7, &request);
    let response = CreateTopicsResponse::decode(&mut body, 7).unwrap();
    assert_eq!(response.topics[0].error_code, 0, "{response:?}");
    response.topics[0].topic_id
}

/// One uncompressed RecordBatch of `values`, timestamps 1000, 1001, ...
fn batch(values: &[&str]) -> Bytes {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, v)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            sequence: 0,
            timestamp: 1000 + i as i64,
            key: None,
            value: Some(Bytes::from(v.to_string())),
            headers: Default::default(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, records.iter(), &options).unwrap();
    out.freeze()
}

fn produce_v13(conn: &mut Conn, id: Uuid, partition: i32, records: Bytes) -> ProduceResponse {
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_topic_id(id)
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records)),
                ]),
        ]);
    let mut body = conn.call(ApiKey::Produce, 13, &request);
    ProduceResponse::decode(&mut body, 13).unwrap()
}

fn list_offsets(conn: &mut Conn, version: i16, topic: &str, timestamp: i64) -> (i16, i64, i32) {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_timeout_ms(5_000)
        .with_topics(vec![
            ListOffsetsTopic::default()
                .with_name(name(topic))
                .with_partitions(vec![
                    ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(timestamp),
                ]),
        ]);
    let mut body = conn.call(ApiKey::ListOffsets, version, &request);
    let response = ListOffsetsResponse::decode(&mut body, version).unwrap();
    let p = &response.topics[0].partitions[0];
    (p.error_code, p.offset, p.leader_epoch)
}

#[test]
fn produce_v13_names_topics_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut conn = Conn::connect(broker.addr);
    let id = create(&mut conn, "by-id", 1);
    let response = produce_v13(&mut conn, id, 0, batch(&["a", "b", "c"]));
    let topic = &response.responses[0];
    assert_eq!(topic.topic_id, id);
    let answer = &topic.partition_responses[0];
    assert_eq!(
        (answer.error_code, answer.base_offset),
        (0, 0),
        "{answer:?}"
    );
    let response = produce_v13(&mut conn, id, 0, batch(&["d"]));
    assert_eq!(response.responses[0].partition_responses[0].base_offset, 3);

    // An id no topic has: UNKNOWN_TOPIC_ID, and no topic is made.
    let stranger = Uuid::from_u128(0x1234);
    let response = produce_v13(&mut conn, stranger, 0, batch(&["x"]));
    let answer = &response.responses[0].partition_responses[0];
    assert_eq!(answer.error_code, 100, "{answer:?}");
    assert_eq!(response.responses[0].topic_id, stranger);

    // The native client reads the four records produced by id.
    let mut client = broker.client();
    let fetched = client
        .fetch_batches("by-id", 0, 0, 1 << 20, std::time::Duration::ZERO)
        .unwrap();
    let values: Vec<Vec<u8>> = fetched
        .iter()
        .flat_map(|b| b.kafka_records().unwrap())
        .map(|r| r.value.unwrap().to_vec())
        .collect();
    assert_eq!(values, [b"a", b"b", b"c", b"d"].map(|v| v.to_vec()));
}

#[test]
fn list_offsets_v8_to_v10_answer_local_and_tiered_specs() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let mut conn = Conn::connect(broker.addr);
    let id = create(&mut conn, "lo", 1);
    produce_v13(&mut conn, id, 0, batch(&["a", "b", "c", "d", "e"]));
    for version in 8..=10 {
        assert_eq!(
            list_offsets(&mut conn, version, "lo", -2),
            (0, 0, 0),
            "v{version}"
        );
        assert_eq!(list_offsets(&mut conn, version, "lo", -1), (0, 5, 0));
        // Earliest local (-4): nothing is tiered, so the earliest.
        assert_eq!(list_offsets(&mut conn, version, "lo", -4), (0, 0, 0));
        // A timestamp inside the batch: the record at it.
        assert_eq!(list_offsets(&mut conn, version, "lo", 1003), (0, 3, 0));
        if version >= 9 {
            // Latest tiered (-5): Kafka's answer for a topic without remote storage.
            assert_eq!(list_offsets(&mut conn, version, "lo", -5), (0, -1, -1));
        }
    }
}

#[test]
fn delete_topics_v6_deletes_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut conn = Conn::connect(broker.addr);
    let first = create(&mut conn, "gone-by-id", 2);
    let second = create(&mut conn, "gone-by-name", 1);
    let stranger = Uuid::from_u128(0x77);
    let request = DeleteTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            DeleteTopicState::default().with_topic_id(first),
            DeleteTopicState::default().with_name(Some(name("gone-by-name"))),
            DeleteTopicState::default().with_topic_id(stranger),
        ]);
    let mut body = conn.call(ApiKey::DeleteTopics, 6, &request);
    let response = DeleteTopicsResponse::decode(&mut body, 6).unwrap();
    let results = &response.responses;
    assert_eq!(results.len(), 3);
    assert_eq!(results[0].error_code, 0, "{:?}", results[0]);
    assert_eq!(
        results[0].name.as_ref().map(|n| n.as_str()),
        Some("gone-by-id")
    );
    assert_eq!(results[0].topic_id, first);
    assert_eq!(results[1].error_code, 0);
    assert_eq!(results[1].topic_id, second);
    assert_eq!(results[2].error_code, 100, "UNKNOWN_TOPIC_ID");
    let request = MetadataRequest::default()
        .with_topics(None)
        .with_allow_auto_topic_creation(false);
    let mut body = conn.call(ApiKey::Metadata, 12, &request);
    let response = MetadataResponse::decode(&mut body, 12).unwrap();
    assert!(response.topics.is_empty(), "{response:?}");
}
