//! Topic settings changes across a cluster (docs/CLUSTER.md, "Topics through the
//! controller"): Kafka IncrementalAlterConfigs and AlterConfigs made on one node go through
//! the controller, every node applies them, DescribeConfigs on another node reads them
//! back, and the node owning a partition acts on them.

mod common;

use std::time::Duration;

use common::cluster::{Cluster, agreed, eventually, partitions_on};
use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource as IncrementalResource, AlterableConfig as IncrementalConfig,
};
use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, ApiKey, DescribeConfigsRequest,
    DescribeConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use pagurus::protocol::native::{ErrorCode, TopicSettings};

const TOPIC: i8 = 2;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// IncrementalAlterConfigs v0 of `topic`: each (name, value) SET; the resource's code.
fn incremental(conn: &mut common::kafka::Conn, topic: &str, set: &[(&str, &str)]) -> i16 {
    let configs = set
        .iter()
        .map(|(name, value)| {
            IncrementalConfig::default()
                .with_name(text(name))
                .with_config_operation(0)
                .with_value(Some(text(value)))
        })
        .collect();
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        IncrementalResource::default()
            .with_resource_type(TOPIC)
            .with_resource_name(text(topic))
            .with_configs(configs),
    ]);
    let mut body = conn.call(ApiKey::IncrementalAlterConfigs, 0, &request);
    let answer = IncrementalAlterConfigsResponse::decode(&mut body, 0).unwrap();
    answer.responses[0].error_code
}

/// Legacy AlterConfigs v0 of `topic` (what is not named goes back to its default).
fn legacy(conn: &mut common::kafka::Conn, topic: &str, set: &[(&str, &str)]) -> i16 {
    let configs = set
        .iter()
        .map(|(name, value)| {
            AlterableConfig::default()
                .with_name(text(name))
                .with_value(Some(text(value)))
        })
        .collect();
    let request = AlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(TOPIC)
            .with_resource_name(text(topic))
            .with_configs(configs),
    ]);
    let mut body = conn.call(ApiKey::AlterConfigs, 0, &request);
    let answer = AlterConfigsResponse::decode(&mut body, 0).unwrap();
    answer.responses[0].error_code
}

/// DescribeConfigs v1 of `topic`: the value of `name`.
fn described(conn: &mut common::kafka::Conn, topic: &str, name: &str) -> String {
    let request = DescribeConfigsRequest::default().with_resources(vec![
        DescribeConfigsResource::default()
            .with_resource_type(TOPIC)
            .with_resource_name(text(topic))
            .with_configuration_keys(Some(vec![text(name)])),
    ]);
    let mut body = conn.call(ApiKey::DescribeConfigs, 1, &request);
    let answer = DescribeConfigsResponse::decode(&mut body, 1).unwrap();
    let result = &answer.results[0];
    assert_eq!(result.error_code, 0, "{result:?}");
    let config = result.configs.iter().find(|c| c.name.as_str() == name);
    let value = config.and_then(|c| c.value.as_ref());
    value.map(ToString::to_string).unwrap_or_default()
}

#[test]
fn a_settings_change_on_one_node_is_applied_on_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let mut cluster = Cluster::start(dir.path(), 3);
    agreed(&cluster, &[1, 2, 3], 3, Duration::from_secs(15));
    let settings = TopicSettings {
        partitions: 3,
        ..Default::default()
    };
    cluster
        .node(1)
        .client()
        .create_topic("conf", settings)
        .unwrap();
    let on_three = || partitions_on(dir.path(), 3, "conf");
    eventually("node 3 has a partition", || on_three().len() == 1);
    let theirs = on_three()[0];
    // Node 3 owns the partition and refuses to compact a cleanup = delete topic.
    let mut at_three = cluster.node(3).client();
    let refused = at_three.compact("conf", theirs).unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::InvalidConfig), "{refused}");

    // Altered through node 2, read back through node 3 and node 1.
    let kafka = |node: usize| common::kafka::Conn::connect(cluster.nodes[node].addr);
    let set = [("cleanup.policy", "compact"), ("retention.ms", "3600000")];
    assert_eq!(incremental(&mut kafka(1), "conf", &set), 0);
    for node in [2, 0] {
        let mut conn = kafka(node);
        assert_eq!(described(&mut conn, "conf", "cleanup.policy"), "compact");
        assert_eq!(described(&mut conn, "conf", "retention.ms"), "3600000");
    }
    // Every node's own copy of the topic has them, and node 3 compacts its partition now.
    for node in &cluster.nodes {
        let metadata = node.client().metadata(&["conf"]).unwrap();
        let settings = &metadata.topics[0].settings;
        assert_eq!((settings.cleanup, settings.retention_ms), (1, 3_600_000));
    }
    at_three.compact("conf", theirs).unwrap();

    // Node 2 stops; the legacy AlterConfigs through node 3 replaces the whole set: cleanup
    // is delete again, node 1 reads it back, and node 3 refuses to compact again.
    assert!(cluster.node(2).terminate().success());
    let mut at_one = common::kafka::Conn::connect(cluster.nodes[0].addr);
    let mut at_three_kafka = common::kafka::Conn::connect(cluster.nodes[2].addr);
    assert_eq!(
        legacy(&mut at_three_kafka, "conf", &[("retention.ms", "120000")]),
        0
    );
    assert_eq!(described(&mut at_one, "conf", "retention.ms"), "120000");
    assert_eq!(described(&mut at_one, "conf", "cleanup.policy"), "delete");
    let refused = at_three.compact("conf", theirs).unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::InvalidConfig), "{refused}");

    // Node 2 back catches up: its topic.meta (id and settings) is every node's.
    cluster.node(2).restart();
    let meta = |node: u16| {
        let path = dir
            .path()
            .join(format!("node{node}/topics/conf/topic.meta"));
        std::fs::read_to_string(path).unwrap()
    };
    assert!(meta(1).contains("retention_ms=120000\n"), "{}", meta(1));
    assert_eq!(meta(1), meta(3));
    eventually("node 2 has the settings", || meta(2) == meta(1));
    let mut at_two = common::kafka::Conn::connect(cluster.nodes[1].addr);
    assert_eq!(described(&mut at_two, "conf", "retention.ms"), "120000");
    for node in &mut cluster.nodes {
        assert!(node.terminate().success(), "{}", node.log_text());
    }
}
