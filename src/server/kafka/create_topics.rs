//! CreateTopics: each topic through the controller, with Kafka's own refusals for what
//! pagurus does not do (replication factor above 1, explicit replica assignments).

use std::rc::Rc;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use super::errors::{self, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REQUEST};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::protocol::native::TopicSettings;

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
            // This connection knows the name now, whatever the outcome (`shard::used`).
            conn.used.forget(&conn.shard, name.0.as_bytes());
            results.push(match created {
                Ok(count) => result.with_num_partitions(count).with_replication_factor(1),
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

/// Creates one topic; its partition count, or Kafka's code and a message.
async fn create(
    conn: &Conn,
    topic: CreatableTopic,
    validate_only: bool,
) -> Result<i32, (i16, String)> {
    if !matches!(topic.replication_factor, -1 | 1) {
        return Err((
            INVALID_REPLICATION_FACTOR,
            format!(
                "replication factor {} (pagurus keeps one copy)",
                topic.replication_factor
            ),
        ));
    }
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
    let settings = TopicSettings {
        partitions: count,
        ..Default::default()
    };
    let name = topic.name.0.as_bytes();
    if validate_only {
        conn.shard
            .valid_name(name, "topic")
            .map_err(|f| (errors::from_native(f.code), f.message))?;
        return Ok(partitions);
    }
    conn.shard
        .create_topic(name, &settings)
        .await
        .map_err(|f| (errors::from_native(f.code), f.message))?;
    Ok(partitions)
}
