//! CreatePartitions: grows a topic to the asked count (`shard::partitions`). Every new
//! partition is placed like any other (by the placement: on one node its owner core is a
//! hash of the topic and the partition number), and the existing ones keep their records,
//! offsets and owners. Clients see the new partitions at their next Metadata. A count not
//! above the current one is `INVALID_PARTITIONS` (37), as in Kafka; manual replica
//! assignments are `INVALID_REQUEST` (42): placement is by hash, as for CreateTopics.
//! With the ACL authorizer each topic needs Alter on it (TOPIC_AUTHORIZATION_FAILED, the
//! other topics still grow), as in Kafka.

use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;
use tracing::warn;

use super::errors::{self, INVALID_PARTITIONS, INVALID_REQUEST};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use crate::shard::ShardError;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: CreatePartitionsRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let mut results = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let api = errors::acl(KafkaApi::CreatePartitions);
            let outcome = if !conn.may(api, ResourceType::Topic, topic.name.0.as_str()) {
                Err((
                    errors::TOPIC_AUTHORIZATION_FAILED,
                    "not authorized to alter the topic".into(),
                ))
            } else if topic.assignments.is_some() {
                Err((
                    INVALID_REQUEST,
                    "replica assignments are not taken: partitions are placed by hash".into(),
                ))
            } else {
                let count = u32::try_from(topic.count).unwrap_or(0);
                conn.shard
                    .grow_topic(topic.name.0.as_bytes(), count, request.validate_only)
                    .await
                    .map_err(|failure| {
                        let code = match failure {
                            ShardError::InvalidConfig { .. } => INVALID_PARTITIONS,
                            ref other => errors::of(other),
                        };
                        (code, failure.to_string())
                    })
            };
            let result = CreatePartitionsTopicResult::default().with_name(topic.name);
            results.push(match outcome {
                Ok(()) => result,
                Err((code, message)) => {
                    warn!(topic = %result.name.0, code, %message, "CreatePartitions refused");
                    result
                        .with_error_code(code)
                        .with_error_message(Some(StrBytes::from_string(message)))
                }
            });
        }
        Reply::frame(respond(
            &header,
            &CreatePartitionsResponse::default().with_results(results),
        ))
    })
}
