//! The newer Kafka API versions, driven through the `kafka-protocol` crate's request and
//! response types over a real socket against a real broker: ApiVersions' ranges,
//! FindCoordinator v4+ with several keys (KIP-699), OffsetFetch v8+ with several groups
//! (KIP-709), and Metadata v10+ with real, stable topic ids (KIP-516), also by id.

mod common;

use common::Broker;
use common::kafka::Conn;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use pagurus::shard::placement::group_coordinator;
use uuid::Uuid;

const CORES: usize = 2;

fn name(s: &str) -> TopicName {
    TopicName(StrBytes::from_string(s.to_string()))
}

fn create(conn: &mut Conn, topic: &str) -> Uuid {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(name(topic))
                .with_num_partitions(2)
                .with_replication_factor(1),
        ]);
    let mut body = conn.call(ApiKey::CreateTopics, 7, &request);
    let response = CreateTopicsResponse::decode(&mut body, 7).unwrap();
    assert_eq!(response.topics[0].error_code, 0, "{response:?}");
    response.topics[0].topic_id
}

fn metadata(conn: &mut Conn, version: i16, topics: Vec<MetadataRequestTopic>) -> MetadataResponse {
    let request = MetadataRequest::default()
        .with_topics(Some(topics))
        .with_allow_auto_topic_creation(false);
    let mut body = conn.call(ApiKey::Metadata, version, &request);
    MetadataResponse::decode(&mut body, version).unwrap()
}

fn by_name(topic: &str) -> MetadataRequestTopic {
    MetadataRequestTopic::default().with_name(Some(name(topic)))
}

#[test]
fn api_versions_advertise_the_new_ranges() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), CORES, &[]);
    let mut conn = Conn::connect(broker.addr);
    let mut body = conn.call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let response = ApiVersionsResponse::decode(&mut body, 3).unwrap();
    let range = |key: ApiKey| {
        let found = response.api_keys.iter().find(|k| k.api_key == key as i16);
        found.map(|k| (k.min_version, k.max_version))
    };
    // Apache Kafka 4.1's broker, API by API: its schemas' validVersions less the versions
    // marked unstable (OffsetCommit 10, OffsetFetch 10, InitProducerId 6), and Produce
    // advertised from v0 (KAFKA-18659) though v0-v2 are refused.
    let kafka_41 = [
        (ApiKey::Produce, 0, 13),
        (ApiKey::Fetch, 4, 18),
        (ApiKey::ListOffsets, 1, 10),
        (ApiKey::Metadata, 0, 13),
        (ApiKey::OffsetCommit, 2, 9),
        (ApiKey::OffsetFetch, 1, 9),
        (ApiKey::FindCoordinator, 0, 6),
        (ApiKey::JoinGroup, 0, 9),
        (ApiKey::Heartbeat, 0, 4),
        (ApiKey::LeaveGroup, 0, 5),
        (ApiKey::SyncGroup, 0, 5),
        (ApiKey::DescribeGroups, 0, 6),
        (ApiKey::ListGroups, 0, 5),
        (ApiKey::SaslHandshake, 0, 1),
        (ApiKey::ApiVersions, 0, 4),
        (ApiKey::CreateTopics, 2, 7),
        (ApiKey::DeleteTopics, 1, 6),
        (ApiKey::DeleteRecords, 0, 2),
        (ApiKey::InitProducerId, 0, 5),
        (ApiKey::DescribeConfigs, 1, 4),
        (ApiKey::AlterConfigs, 0, 2),
        (ApiKey::DescribeLogDirs, 1, 4),
        (ApiKey::SaslAuthenticate, 0, 2),
        (ApiKey::CreatePartitions, 0, 3),
        (ApiKey::DeleteGroups, 0, 2),
        (ApiKey::ElectLeaders, 0, 2),
        (ApiKey::IncrementalAlterConfigs, 0, 1),
        (ApiKey::OffsetDelete, 0, 0),
        (ApiKey::DescribeCluster, 0, 2),
    ];
    for (key, min, max) in kafka_41 {
        assert_eq!(range(key), Some((min, max)), "{key:?}");
    }
    assert_eq!(response.api_keys.len(), kafka_41.len(), "no other API");
}

#[test]
fn find_coordinator_answers_several_keys_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), CORES, &[]);
    let mut conn = Conn::connect(broker.addr);
    let groups = ["orders", "billing", "audit", "g-4"];
    for version in 4..=6 {
        let keys: Vec<StrBytes> = groups
            .iter()
            .map(|g| StrBytes::from_static_str(g))
            .chain([StrBytes::from_static_str("")])
            .collect();
        let request = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(keys);
        let mut body = conn.call(ApiKey::FindCoordinator, version, &request);
        let response = FindCoordinatorResponse::decode(&mut body, version).unwrap();
        assert_eq!(response.coordinators.len(), groups.len() + 1);
        for (group, found) in groups.iter().zip(&response.coordinators) {
            let core = group_coordinator(group, CORES);
            assert_eq!(found.key.as_str(), *group);
            assert_eq!(found.error_code, 0, "{found:?}");
            assert_eq!(found.node_id.0, core as i32);
            assert_eq!(found.port, i32::from(broker.addr.port()) + 1 + core as i32);
        }
        // An invalid group name is refused for itself only.
        assert_ne!(response.coordinators[groups.len()].error_code, 0);
    }
}

#[test]
fn offset_fetch_answers_several_groups_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), CORES, &[]);
    let mut conn = Conn::connect(broker.addr);
    create(&mut conn, "t");
    // Commits from outside the groups (no member, generation -1).
    for (group, offset) in [("g1", 5), ("g2", 7)] {
        let request = OffsetCommitRequest::default()
            .with_group_id(StrBytes::from_static_str(group).into())
            .with_generation_id_or_member_epoch(-1)
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(name("t"))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(1)
                            .with_committed_offset(offset)
                            .with_committed_metadata(Some(StrBytes::from_static_str("m"))),
                    ]),
            ]);
        let mut body = conn.call(ApiKey::OffsetCommit, 8, &request);
        let response = OffsetCommitResponse::decode(&mut body, 8).unwrap();
        assert_eq!(response.topics[0].partitions[0].error_code, 0);
    }
    for version in 8..=9 {
        let asked = OffsetFetchRequestTopics::default().with_name(name("t"));
        let group = |id: &str, topics| {
            OffsetFetchRequestGroup::default()
                .with_group_id(StrBytes::from_string(id.to_string()).into())
                .with_member_epoch(-1)
                .with_topics(topics)
        };
        let request = OffsetFetchRequest::default().with_groups(vec![
            group("g1", Some(vec![asked.with_partition_indexes(vec![0, 1])])),
            // Every partition g2 committed.
            group("g2", None),
            group("nobody", None),
        ]);
        let mut body = conn.call(ApiKey::OffsetFetch, version, &request);
        let response = OffsetFetchResponse::decode(&mut body, version).unwrap();
        let groups = &response.groups;
        assert_eq!(groups.len(), 3, "{response:?}");
        assert_eq!(groups[0].group_id.as_str(), "g1");
        let g1 = &groups[0].topics[0].partitions;
        assert_eq!((g1[0].partition_index, g1[0].committed_offset), (0, -1));
        assert_eq!((g1[1].partition_index, g1[1].committed_offset), (1, 5));
        assert_eq!(g1[1].metadata.as_deref(), Some("m"));
        let g2 = &groups[1].topics;
        assert_eq!(g2.len(), 1);
        assert_eq!(g2[0].name.as_str(), "t");
        assert_eq!(g2[0].partitions[0].committed_offset, 7);
        assert!(groups[2].topics.is_empty());
        assert!(groups.iter().all(|g| g.error_code == 0));
    }
}

#[test]
fn topic_ids_are_real_stable_and_new_for_each_topic() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), CORES, &[]);
    let mut conn = Conn::connect(broker.addr);
    let created = create(&mut conn, "ids");
    assert!(!created.is_nil());
    for version in 10..=13 {
        let response = metadata(&mut conn, version, vec![by_name("ids")]);
        assert_eq!(response.topics[0].topic_id, created, "v{version}");
        // By id alone, as v10+ allows.
        let asked = MetadataRequestTopic::default()
            .with_name(None)
            .with_topic_id(created);
        let response = metadata(&mut conn, version, vec![asked]);
        assert_eq!(
            response.topics[0].name.as_ref().map(|n| n.as_str()),
            Some("ids")
        );
        let unknown = MetadataRequestTopic::default()
            .with_name(None)
            .with_topic_id(Uuid::from_u128(7));
        let response = metadata(&mut conn, version, vec![unknown]);
        assert_eq!(response.topics[0].error_code, 100, "UNKNOWN_TOPIC_ID");
    }
    // Older versions carry no id.
    let response = metadata(&mut conn, 9, vec![by_name("ids")]);
    assert!(response.topics[0].topic_id.is_nil());

    // The id is kept across a restart.
    broker.terminate();
    broker.restart();
    let mut conn = Conn::connect(broker.addr);
    let response = metadata(&mut conn, 12, vec![by_name("ids")]);
    assert_eq!(response.topics[0].topic_id, created);

    // Deleted and made again under the same name: another topic, another id.
    let request = DeleteTopicsRequest::default()
        .with_topic_names(vec![name("ids")])
        .with_timeout_ms(10_000);
    let mut body = conn.call(ApiKey::DeleteTopics, 5, &request);
    let response = DeleteTopicsResponse::decode(&mut body, 5).unwrap();
    assert_eq!(response.responses[0].error_code, 0);
    let again = create(&mut conn, "ids");
    assert!(!again.is_nil());
    assert_ne!(again, created);
    let response = metadata(&mut conn, 12, vec![by_name("ids")]);
    assert_eq!(response.topics[0].topic_id, again);
}

#[test]
fn fetch_names_topics_by_id_from_v13() {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::records::RecordBatchDecoder;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), CORES, &[]);
    let mut conn = Conn::connect(broker.addr);
    let id = create(&mut conn, "by-id");
    let mut client = broker.client();
    for partition in 0..2 {
        let payload = format!("p{partition}");
        let batch = pagurus::protocol::record::encode_batch(1, b"", payload.as_bytes(), 1);
        client.produce("by-id", partition, &[batch]).unwrap();
    }
    for version in 13..=18 {
        let partitions = (0..2)
            .map(|p| {
                FetchPartition::default()
                    .with_partition(p)
                    .with_fetch_offset(0)
                    .with_partition_max_bytes(1 << 20)
            })
            .collect();
        let topics = vec![
            FetchTopic::default()
                .with_topic_id(id)
                .with_partitions(partitions),
            FetchTopic::default()
                .with_topic_id(Uuid::from_u128(7))
                .with_partitions(vec![FetchPartition::default().with_partition(0)]),
        ];
        let request = FetchRequest::default()
            .with_replica_id(BrokerId(-1))
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(topics);
        let mut body = conn.call(ApiKey::Fetch, version, &request);
        let response = FetchResponse::decode(&mut body, version).unwrap();
        assert_eq!(response.responses.len(), 2, "v{version}");
        let known = &response.responses[0];
        assert_eq!(known.topic_id, id);
        for (p, data) in known.partitions.iter().enumerate() {
            assert_eq!(data.error_code, 0, "v{version} {data:?}");
            assert_eq!(data.high_watermark, 1);
            let mut records = data.records.clone().unwrap();
            let set = RecordBatchDecoder::decode(&mut records).unwrap();
            let value = set.records[0].value.clone().unwrap();
            assert_eq!(&value[..], format!("p{p}").as_bytes());
        }
        let unknown = &response.responses[1];
        assert_eq!(unknown.topic_id, Uuid::from_u128(7));
        assert_eq!(unknown.partitions[0].error_code, 100, "UNKNOWN_TOPIC_ID");
    }
}

#[test]
fn the_other_new_versions_answer_through_the_crate() {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let mut conn = Conn::connect(broker.addr);
    create(&mut conn, "v");

    let mut body = conn.call(ApiKey::ApiVersions, 4, &ApiVersionsRequest::default());
    let response = ApiVersionsResponse::decode(&mut body, 4).unwrap();
    assert_eq!(response.error_code, 0);
    assert!(response.api_keys.len() >= 20);

    // Produce v12: one uncompressed batch of one record.
    let record = kafka_protocol::records::Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: 0,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: kafka_protocol::records::TimestampType::Creation,
        offset: 0,
        sequence: 0,
        timestamp: 1,
        key: None,
        value: Some(bytes::Bytes::from_static(b"twelve")),
        headers: Default::default(),
    };
    let mut records = bytes::BytesMut::new();
    let options = kafka_protocol::records::RecordEncodeOptions {
        version: 2,
        compression: kafka_protocol::records::Compression::None,
    };
    kafka_protocol::records::RecordBatchEncoder::encode(&mut records, [&record], &options).unwrap();
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(name("v"))
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(0)
                        .with_records(Some(records.freeze())),
                ]),
        ]);
    let mut body = conn.call(ApiKey::Produce, 12, &request);
    let response = ProduceResponse::decode(&mut body, 12).unwrap();
    let answer = &response.responses[0].partition_responses[0];
    assert_eq!((answer.error_code, answer.base_offset), (0, 0));

    // OffsetCommit v9, from outside the group.
    let request = OffsetCommitRequest::default()
        .with_group_id(StrBytes::from_static_str("g9").into())
        .with_generation_id_or_member_epoch(-1)
        .with_topics(vec![
            OffsetCommitRequestTopic::default()
                .with_name(name("v"))
                .with_partitions(vec![
                    OffsetCommitRequestPartition::default().with_committed_offset(1),
                ]),
        ]);
    let mut body = conn.call(ApiKey::OffsetCommit, 9, &request);
    let response = OffsetCommitResponse::decode(&mut body, 9).unwrap();
    assert_eq!(response.topics[0].partitions[0].error_code, 0);

    // ListGroups v5: every group is classic.
    for (types, listed) in [(vec![], 1), (vec!["classic"], 1), (vec!["consumer"], 0)] {
        let request = ListGroupsRequest::default()
            .with_types_filter(types.into_iter().map(StrBytes::from_static_str).collect());
        let mut body = conn.call(ApiKey::ListGroups, 5, &request);
        let response = ListGroupsResponse::decode(&mut body, 5).unwrap();
        assert_eq!(response.groups.len(), listed, "{response:?}");
        if let Some(group) = response.groups.first() {
            assert_eq!(group.group_type.as_str(), "classic");
        }
    }

    // DescribeGroups v6.
    let request =
        DescribeGroupsRequest::default().with_groups(vec![StrBytes::from_static_str("g9").into()]);
    let mut body = conn.call(ApiKey::DescribeGroups, 6, &request);
    let response = DescribeGroupsResponse::decode(&mut body, 6).unwrap();
    assert_eq!(response.groups[0].group_state.as_str(), "Empty");

    // InitProducerId v5.
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let mut body = conn.call(ApiKey::InitProducerId, 5, &request);
    let response = InitProducerIdResponse::decode(&mut body, 5).unwrap();
    assert_eq!(response.error_code, 0);
    assert!(response.producer_id.0 > 0);
}
