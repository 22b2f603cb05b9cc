//! CreateTopics: each topic through the controller, with its configs mapped onto pagurus'
//! settings (`configs`: a config pagurus does not have is INVALID_CONFIG, never dropped),
//! and Kafka's own refusals for what pagurus does not do (a replication factor above the
//! live nodes, or above 1 while partitions are not replicated; explicit replica
//! assignments).

use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use std::rc::Rc;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;
use tracing::warn;

use super::configs;
use super::errors::{
    self, INVALID_CONFIG, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REQUEST,
};
use super::{Conn, Pending, Reply, respond};
use crate::metrics::counters::Metrics;
use crate::protocol::kafka::RequestHeader;
use crate::protocol::native::TopicSettings;
use crate::shard::topics::TopicMeta;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: CreateTopicsRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let mut results = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let name = topic.name.clone();
            let partitions = topic.num_partitions;
            let result = CreatableTopicResult::default().with_name(name.clone());
            let created = create(&conn, topic, request.validate_only).await;
            // This connection knows the name now, whatever the outcome, even a refusal before
            // the shard's create (`shard::used`).
            conn.used.forget(&conn.shard, name.0.as_bytes());
            results.push(match created {
                Ok(meta) => {
                    let configs = configs::describe_topic(&meta, &conn.shard.config)
                        .into_iter()
                        .map(|e| {
                            CreatableTopicConfigs::default()
                                .with_name(StrBytes::from_static_str(e.name))
                                .with_value(Some(StrBytes::from_string(e.value)))
                                .with_read_only(e.read_only)
                                .with_config_source(e.source)
                        })
                        .collect();
                    result
                        .with_topic_id(uuid_of(meta.id))
                        .with_num_partitions(meta.partitions as i32)
                        .with_replication_factor(replicas_of(&conn, &meta.name))
                        .with_configs(Some(configs))
                }
                Err((code, message)) => result
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_string(message)))
                    .with_num_partitions(partitions)
                    .with_replication_factor(-1),
            });
        }
        Reply::frame(respond(
            &header,
            &CreateTopicsResponse::default().with_topics(results),
        ))
    })
}

/// Copies of `topic`'s partitions, as placed.
fn replicas_of(conn: &Conn, topic: &str) -> i16 {
    let copies = conn.shard.placement().replicas(topic, 0).len();
    i16::try_from(copies).unwrap_or(i16::MAX)
}

/// A topic id as Kafka's UUID.
pub(super) fn uuid_of(id: u128) -> uuid::Uuid {
    uuid::Uuid::from_u128(id)
}

/// Creates one topic; the topic as created (as it would be, for `validate_only`), or
/// Kafka's code and a message.
async fn create(
    conn: &Conn,
    topic: CreatableTopic,
    validate_only: bool,
) -> Result<TopicMeta, (i16, String)> {
    if !conn.may(
        errors::acl(KafkaApi::CreateTopics),
        ResourceType::Topic,
        topic.name.0.as_str(),
    ) {
        return Err((
            errors::TOPIC_AUTHORIZATION_FAILED,
            "not authorized to create the topic".to_string(),
        ));
    }
    let live_nodes = conn.shard.cluster_view().map_or(1, |view| {
        view.status().nodes.iter().filter(|node| node.live).count()
    });
    crate::cluster::check_replication_factor(topic.replication_factor.into(), live_nodes)
        .map_err(|message| (INVALID_REPLICATION_FACTOR, message))?;
    if !topic.assignments.is_empty() {
        return Err((
            INVALID_REQUEST,
            "replica assignments are not supported".into(),
        ));
    }
    // -1: the broker's default, one partition (as on-demand creation).
    let partitions = if topic.num_partitions == -1 {
        1
    } else {
        topic.num_partitions
    };
    let Ok(count @ 1..) = u32::try_from(partitions) else {
        return Err((INVALID_PARTITIONS, format!("{partitions} partitions")));
    };
    let mut settings = TopicSettings {
        partitions: count,
        ..Default::default()
    };
    let name = topic.name.0.as_str();
    let log = &conn.shard.config.log;
    let refused = |message: String| {
        Metrics::inc(&conn.shard.metrics.kafka_configs_refused);
        warn!(topic = %name, %message, "CreateTopics config refused");
        (INVALID_CONFIG, message)
    };
    // What a topic created with no configs would be: the fixed configs' values.
    let plain = TopicMeta::from_settings(name, &settings, log).map_err(refused)?;
    let described = configs::describe_topic(&plain, &conn.shard.config);
    for config in &topic.configs {
        let (key, value) = (config.name.as_str(), config.value.as_deref());
        configs::apply(&mut settings, key, value, true, &described).map_err(refused)?;
    }
    // The settings' own checks (segment size range, ...), before anything is created.
    let planned = TopicMeta::from_settings(name, &settings, log).map_err(refused)?;
    // -1: the default, one copy.
    let replication_factor = u16::try_from(topic.replication_factor).unwrap_or(1).max(1);
    if validate_only {
        conn.shard
            .valid_name(name.as_bytes(), "topic")
            .map_err(|f| (errors::of(&f), f.to_string()))?;
        return Ok(planned);
    }
    conn.shard
        .create_topic(&conn.used, name.as_bytes(), &settings, replication_factor)
        .await
        .map_err(|f| (errors::of(&f), f.to_string()))?;
    conn.shard.topic(name).map(|m| (*m).clone()).ok_or_else(|| {
        (
            errors::UNKNOWN_SERVER_ERROR,
            format!("topic {name} was created but is not known here"),
        )
    })
}
