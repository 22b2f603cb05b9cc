//! Kafka's admin APIs under `--authorizer acl` on the wire, request by request, with
//! Kafka's codes in Kafka's places: User:ANONYMOUS (the PLAINTEXT listener, no super user)
//! may Read, Delete and DescribeConfigs the topic `orders` and Describe the group `billing`,
//! and nothing else. A request naming resources of both kinds is served for the allowed
//! ones and refused, per resource, for the others; cluster APIs answer
//! CLUSTER_AUTHORIZATION_FAILED; listings leave out what may not be described.
//! (`security_acl_admin.rs` drives the same APIs through real admin clients.)

mod common;

use bytes::Bytes;
use common::Broker;
use common::kafka::Conn;
use common::security::pagurus_ok;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use pagurus::protocol::native::TopicSettings;

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
/// Kafka's AclOperation codes, as bits of an authorized-operations field.
const READ: i32 = 1 << 3;
const DELETE: i32 = 1 << 6;
const DESCRIBE: i32 = 1 << 8;
const DESCRIBE_CONFIGS: i32 = 1 << 10;

fn topic(name: &'static str) -> TopicName {
    TopicName(StrBytes::from_static_str(name))
}

fn group(name: &'static str) -> GroupId {
    GroupId(StrBytes::from_static_str(name))
}

/// A broker whose topics `orders` and `payments` and the groups `billing` and `audit` (an
/// offset committed on each topic) were made before the authorizer was on; then the ACLs.
fn start() -> (tempfile::TempDir, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut open = Broker::start_in(&data, 1, &["--fsync", "never"]);
    let mut client = open.client();
    for name in ["orders", "payments"] {
        let settings = TopicSettings {
            partitions: 1,
            ..Default::default()
        };
        client.create_topic(name, settings).unwrap();
        for group in ["billing", "audit"] {
            client.commit_offset(group, name, 0, 0).unwrap();
        }
    }
    drop(client);
    assert!(open.terminate().success());
    let data_arg = data.display().to_string();
    for (operation, resource) in [
        ("Read", ["--topic", "orders"]),
        ("Delete", ["--topic", "orders"]),
        ("DescribeConfigs", ["--topic", "orders"]),
        ("Describe", ["--group", "billing"]),
    ] {
        let mut args = vec!["acls", "add", "--data-dir", &data_arg];
        args.extend(["--principal", "User:ANONYMOUS", "--operation", operation]);
        args.extend(resource);
        pagurus_ok(&args, "");
    }
    let broker = Broker::start_in(&data, 1, &["--fsync", "never", "--authorizer", "acl"]);
    (dir, broker)
}

fn decode<R: Decodable>(mut body: Bytes, version: i16) -> R {
    R::decode(&mut body, version).unwrap()
}

#[test]
fn topic_apis_refuse_each_topic_alone() {
    let (_dir, broker) = start();
    let mut conn = Conn::connect(broker.addr);
    // DeleteRecords: orders is trimmed, payments refused in the same request.
    let partition = |offset| {
        delete_records_request::DeleteRecordsPartition::default()
            .with_partition_index(0)
            .with_offset(offset)
    };
    let request = DeleteRecordsRequest::default().with_topics(vec![
        delete_records_request::DeleteRecordsTopic::default()
            .with_name(topic("orders"))
            .with_partitions(vec![partition(-1)]),
        delete_records_request::DeleteRecordsTopic::default()
            .with_name(topic("payments"))
            .with_partitions(vec![partition(0)]),
    ]);
    let response: DeleteRecordsResponse = decode(conn.call(ApiKey::DeleteRecords, 2, &request), 2);
    let codes: Vec<i16> = response
        .topics
        .iter()
        .map(|t| t.partitions[0].error_code)
        .collect();
    assert_eq!(codes, [0, TOPIC_DENIED], "{response:?}");
    // DescribeConfigs: orders described; payments and the broker refused.
    let resource = |resource_type, name: &'static str| {
        describe_configs_request::DescribeConfigsResource::default()
            .with_resource_type(resource_type)
            .with_resource_name(StrBytes::from_static_str(name))
            .with_configuration_keys(None)
    };
    let request = DescribeConfigsRequest::default().with_resources(vec![
        resource(2, "orders"),
        resource(2, "payments"),
        resource(4, "0"),
    ]);
    let response: DescribeConfigsResponse =
        decode(conn.call(ApiKey::DescribeConfigs, 4, &request), 4);
    let codes: Vec<i16> = response.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, [0, TOPIC_DENIED, CLUSTER_DENIED], "{response:?}");
    assert!(!response.results[0].configs.is_empty());
    // IncrementalAlterConfigs: DescribeConfigs does not allow altering.
    let alter = incremental_alter_configs_request::AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_static_str("orders"))
        .with_configs(vec![
            incremental_alter_configs_request::AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("60000"))),
        ]);
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![alter]);
    let response: IncrementalAlterConfigsResponse =
        decode(conn.call(ApiKey::IncrementalAlterConfigs, 1, &request), 1);
    assert_eq!(response.responses[0].error_code, TOPIC_DENIED);
    // CreatePartitions: Delete and Read do not allow Alter.
    let request = CreatePartitionsRequest::default().with_topics(vec![
        create_partitions_request::CreatePartitionsTopic::default()
            .with_name(topic("orders"))
            .with_count(2),
    ]);
    let response: CreatePartitionsResponse =
        decode(conn.call(ApiKey::CreatePartitions, 3, &request), 3);
    assert_eq!(response.results[0].error_code, TOPIC_DENIED);
    // Metadata of every topic: orders alone, with what may be done on it (KIP-430).
    let request = MetadataRequest::default()
        .with_topics(None)
        .with_include_cluster_authorized_operations(true)
        .with_include_topic_authorized_operations(true);
    let response: MetadataResponse = decode(conn.call(ApiKey::Metadata, 10, &request), 10);
    assert_eq!(response.topics.len(), 1, "{response:?}");
    let orders = &response.topics[0];
    assert_eq!(orders.name.as_ref().unwrap().0.as_str(), "orders");
    assert_eq!(
        orders.topic_authorized_operations,
        READ | DELETE | DESCRIBE | DESCRIBE_CONFIGS
    );
    assert_eq!(response.cluster_authorized_operations, 0);
}

#[test]
fn group_apis_refuse_each_group_alone() {
    let (_dir, broker) = start();
    let mut conn = Conn::connect(broker.addr);
    let request = ListGroupsRequest::default();
    let response: ListGroupsResponse = decode(conn.call(ApiKey::ListGroups, 4, &request), 4);
    let listed: Vec<&str> = response
        .groups
        .iter()
        .map(|g| g.group_id.as_str())
        .collect();
    assert_eq!(listed, ["billing"], "{response:?}");
    let request = DescribeGroupsRequest::default()
        .with_groups(vec![group("billing"), group("audit")])
        .with_include_authorized_operations(true);
    let response: DescribeGroupsResponse =
        decode(conn.call(ApiKey::DescribeGroups, 5, &request), 5);
    let codes: Vec<i16> = response.groups.iter().map(|g| g.error_code).collect();
    assert_eq!(codes, [0, GROUP_DENIED], "{response:?}");
    assert_eq!(response.groups[0].authorized_operations, DESCRIBE);
    // OffsetFetch: every topic leaves payments out; naming it refuses it; audit is refused.
    let fetch_group = |name, topics: Option<Vec<&'static str>>| {
        offset_fetch_request::OffsetFetchRequestGroup::default()
            .with_group_id(group(name))
            .with_topics(topics.map(|topics| {
                topics
                    .into_iter()
                    .map(|t| {
                        offset_fetch_request::OffsetFetchRequestTopics::default()
                            .with_name(topic(t))
                            .with_partition_indexes(vec![0])
                    })
                    .collect()
            }))
    };
    let request = OffsetFetchRequest::default().with_groups(vec![
        fetch_group("billing", None),
        fetch_group("billing", Some(vec!["orders", "payments"])),
        fetch_group("audit", None),
    ]);
    let response: OffsetFetchResponse = decode(conn.call(ApiKey::OffsetFetch, 8, &request), 8);
    let all = &response.groups[0];
    let names: Vec<&str> = all.topics.iter().map(|t| t.name.0.as_str()).collect();
    assert_eq!(names, ["orders"], "{response:?}");
    let named: Vec<i16> = response.groups[1]
        .topics
        .iter()
        .map(|t| t.partitions[0].error_code)
        .collect();
    assert_eq!(named, [0, TOPIC_DENIED], "{response:?}");
    assert_eq!(response.groups[2].error_code, GROUP_DENIED);
    // OffsetDelete and DeleteGroups need Delete on the group.
    let request = OffsetDeleteRequest::default()
        .with_group_id(group("billing"))
        .with_topics(vec![
            offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(topic("orders"))
                .with_partitions(vec![
                    offset_delete_request::OffsetDeleteRequestPartition::default(),
                ]),
        ]);
    let response: OffsetDeleteResponse = decode(conn.call(ApiKey::OffsetDelete, 0, &request), 0);
    assert_eq!(response.error_code, GROUP_DENIED, "{response:?}");
    assert!(response.topics.is_empty());
    let request = DeleteGroupsRequest::default().with_groups_names(vec![group("billing")]);
    let response: DeleteGroupsResponse = decode(conn.call(ApiKey::DeleteGroups, 2, &request), 2);
    assert_eq!(response.results[0].error_code, GROUP_DENIED);
}

#[test]
fn cluster_apis_need_the_cluster() {
    let (_dir, broker) = start();
    let mut conn = Conn::connect(broker.addr);
    let request = DescribeLogDirsRequest::default().with_topics(None);
    let response: DescribeLogDirsResponse =
        decode(conn.call(ApiKey::DescribeLogDirs, 4, &request), 4);
    assert_eq!(response.error_code, CLUSTER_DENIED);
    assert!(response.results.is_empty());
    let request = ElectLeadersRequest::default().with_topic_partitions(Some(vec![
        elect_leaders_request::TopicPartitions::default()
            .with_topic(topic("orders"))
            .with_partitions(vec![0]),
    ]));
    let response: ElectLeadersResponse = decode(conn.call(ApiKey::ElectLeaders, 2, &request), 2);
    assert_eq!(response.error_code, CLUSTER_DENIED);
    let partition = &response.replica_election_results[0].partition_result[0];
    assert_eq!(partition.error_code, CLUSTER_DENIED);
    // DescribeCluster answers the brokers to everyone, as Metadata does (Kafka asks no
    // ACL); its authorized operations need Describe on the cluster.
    let request = DescribeClusterRequest::default()
        .with_include_cluster_authorized_operations(true)
        .with_endpoint_type(1);
    let response: DescribeClusterResponse =
        decode(conn.call(ApiKey::DescribeCluster, 1, &request), 1);
    assert_eq!(response.error_code, 0, "{response:?}");
    assert_eq!(response.brokers.len(), 1);
    assert_eq!(response.cluster_authorized_operations, 0);
    let log = broker.log_text();
    for (resource, operation) in [("Cluster", "Describe"), ("Cluster", "Alter")] {
        let line = format!(
            r#"principal=User:ANONYMOUS peer=127.0.0.1 listener=PLAINTEXT resource="{resource}" name="kafka-cluster" operation="{operation}""#
        );
        assert!(log.contains(&line), "no audit line {line}");
    }
}
