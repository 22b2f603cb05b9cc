//! A cluster seen by pagurus's own clients and by Kafka clients: the native metadata names
//! each partition's node and the CLI, bootstrapped on node 1, produces to and consumes
//! from a partition of node 3; `topics describe` names the node.

mod common;

use std::time::Duration;

use common::cluster::{Cluster, agreed, pagurus, partitions_on};
use pagurus::protocol::native::TopicSettings;

#[test]
fn the_cli_bootstrapped_on_one_node_reaches_a_partition_of_another() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    let settings = TopicSettings {
        partitions: 6,
        ..Default::default()
    };
    cluster
        .node(1)
        .client()
        .create_topic("routed", settings)
        .unwrap();
    let on_three = partitions_on(dir.path(), 3, "routed");
    assert_eq!(on_three.len(), 2, "6 partitions spread 2/2/2");
    let theirs = on_three[0].to_string();

    // The native metadata names the node of every partition and every node's address.
    let metadata = cluster.node(1).client().metadata(&["routed"]).unwrap();
    let section = metadata.cluster.as_ref().expect("a cluster node's section");
    assert_eq!(section.node, 1);
    assert_eq!(section.nodes.len(), 3, "{section:?}");
    for (i, p) in metadata.topics[0].partitions.iter().enumerate() {
        let id = p.owner_node.unwrap();
        assert!(partitions_on(dir.path(), id, "routed").contains(&(i as u32)));
    }

    // Produce and consume through node 1, to and from node 3's partition.
    let node1 = &cluster.nodes[0];
    let produce = ["produce", "--topic", "routed", "--partition", &theirs];
    let (ok, _, err) = pagurus(node1, &produce, "a\nb\nc\n");
    assert!(ok, "{err}");
    let consume = [
        "consume",
        "--topic",
        "routed",
        "--partition",
        &theirs,
        "--exit-at-end",
    ];
    let (ok, out, err) = pagurus(node1, &consume, "");
    assert!(ok, "{err}");
    assert_eq!(out, "a\nb\nc\n");
    // Keyed records spread over every partition of every node, all read back.
    let lines: String = (0..60).map(|i| format!("k{i}:v{i}\n")).collect();
    let spread = ["produce", "--topic", "routed", "--key-separator", ":"];
    let (ok, _, err) = pagurus(node1, &spread, &lines);
    assert!(ok, "{err}");
    let all = ["consume", "--topic", "routed", "--exit-at-end"];
    let (ok, out, err) = pagurus(node1, &all, "");
    assert!(ok, "{err}");
    assert_eq!(out.lines().count(), 63, "{out}");
    for node in 1..=3 {
        let with_data = partitions_on(dir.path(), node, "routed");
        assert!(!with_data.is_empty());
    }

    // `topics describe` names the node, with the offsets that node knows.
    let (ok, out, err) = pagurus(
        node1,
        &["topics", "describe", "routed", "--output", "json"],
        "",
    );
    assert!(ok, "{err}");
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    let partition = &json[0]["partitions"][on_three[0] as usize];
    assert_eq!(partition["owner_node"], 3, "{json}");
    assert!(partition["high_watermark"].as_u64().unwrap() >= 3, "{json}");
    let (ok, out, err) = pagurus(node1, &["topics", "describe", "routed"], "");
    assert!(ok, "{err}");
    assert!(out.contains("NODE"), "{out}");
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}

/// CreateTopics v5 of `topic` with 1 partition and `factor`: (error code, message).
fn kafka_create(conn: &mut common::kafka::Conn, topic: &str, factor: i16) -> (i16, String) {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName};
    use kafka_protocol::protocol::{Decodable, StrBytes};
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.into())))
                .with_num_partitions(1)
                .with_replication_factor(factor),
        ]);
    let mut body = conn.call(ApiKey::CreateTopics, 5, &request);
    let response = CreateTopicsResponse::decode(&mut body, 5).unwrap();
    let result = &response.topics[0];
    let message = result.error_message.as_ref().map(|m| m.to_string());
    (result.error_code, message.unwrap_or_default())
}

/// Produce v7 (one record) and Fetch v4 of `topic`/`partition`: their error codes.
fn kafka_produce_and_fetch(
    conn: &mut common::kafka::Conn,
    topic: &str,
    partition: i32,
) -> (i16, i16) {
    use bytes::BytesMut;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{
        ApiKey, BrokerId, FetchRequest, FetchResponse, ProduceRequest, ProduceResponse, TopicName,
    };
    use kafka_protocol::protocol::{Decodable, StrBytes};
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    let name = || TopicName(StrBytes::from_string(topic.into()));
    let record = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: -1,
        producer_epoch: -1,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: -1,
        timestamp: 1_700_000_000_000,
        key: None,
        value: Some(bytes::Bytes::from_static(b"kafka")),
        headers: Default::default(),
    };
    let mut records = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut records, &[record], &options).unwrap();
    let produce = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(name())
                .with_partition_data(vec![
                    PartitionProduceData::default()
                        .with_index(partition)
                        .with_records(Some(records.freeze())),
                ]),
        ]);
    let mut body = conn.call(ApiKey::Produce, 7, &produce);
    let produced = ProduceResponse::decode(&mut body, 7).unwrap();
    let fetch = FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(name())
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(partition)
                        .with_fetch_offset(0)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let mut body = conn.call(ApiKey::Fetch, 4, &fetch);
    let fetched = FetchResponse::decode(&mut body, 4).unwrap();
    (
        produced.responses[0].partition_responses[0].error_code,
        fetched.responses[0].partitions[0].error_code,
    )
}

#[test]
fn replication_factors_are_checked_and_the_wrong_node_says_not_leader() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    let mut conn = common::kafka::Conn::connect(cluster.nodes[0].addr);

    // Kafka CreateTopics: above the live nodes refused with INVALID_REPLICATION_FACTOR
    // (38) saying why; up to them, and -1, taken.
    let (code, message) = kafka_create(&mut conn, "four", 4);
    assert_eq!(code, 38);
    assert!(message.contains("more than the 3 live nodes"), "{message}");
    assert_eq!(kafka_create(&mut conn, "two", 2).0, 0);
    assert_eq!(kafka_create(&mut conn, "one", 1).0, 0);
    assert_eq!(kafka_create(&mut conn, "default", -1).0, 0);
    // The same through the command line.
    let node1 = &cluster.nodes[0];
    let args = ["topics", "create", "r", "--replication-factor", "4"];
    let (ok, _, err) = pagurus(node1, &args, "");
    assert!(!ok && err.contains("more than the 3 live nodes"), "{err}");
    let args = [
        "topics",
        "create",
        "r",
        "--replication-factor",
        "1",
        "--partitions",
        "3",
    ];
    let (ok, _, err) = pagurus(node1, &args, "");
    assert!(ok, "{err}");

    // Produce and Fetch of a partition of node 3 sent to node 1: NOT_LEADER_OR_FOLLOWER (6),
    // so a Kafka client refreshes its metadata; node 3 takes them.
    let on_three = || common::cluster::partitions_on(dir.path(), 3, "r");
    common::cluster::eventually("node 3 has a partition of r", || !on_three().is_empty());
    let theirs = on_three()[0] as i32;
    assert_eq!(kafka_produce_and_fetch(&mut conn, "r", theirs), (6, 6));
    let mut at_three = common::kafka::Conn::connect(cluster.nodes[2].addr);
    assert_eq!(kafka_produce_and_fetch(&mut at_three, "r", theirs), (0, 0));
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}
