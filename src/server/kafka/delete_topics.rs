//! DeleteTopics: by name (v1-v5), and from v6 by name or by topic id (KIP-516). An id no
//! topic has is `UNKNOWN_TOPIC_ID` (100); a v6 entry with both a name and an id names the
//! topic by its name, and the id must be that topic's.

use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use std::rc::Rc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::errors;
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: DeleteTopicsRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    // (name, id) pairs; `Uuid::nil()` where the request named no id.
    let asked: Vec<(Option<TopicName>, Uuid)> = if header.api_version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n), Uuid::nil()))
            .collect()
    };
    Pending::later(async move {
        let mut results = Vec::with_capacity(asked.len());
        for (name, id) in asked {
            results.push(delete_one(&conn, name, id).await);
        }
        Reply::frame(respond(
            &header,
            &DeleteTopicsResponse::default().with_responses(results),
        ))
    })
}

async fn delete_one(conn: &Conn, name: Option<TopicName>, id: Uuid) -> DeletableTopicResult {
    let shard = &conn.shard;
    let refused = |name: Option<TopicName>, code: i16, message: String| {
        DeletableTopicResult::default()
            .with_name(name)
            .with_topic_id(id)
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message)))
    };
    let name = match name {
        Some(name) => {
            if !id.is_nil()
                && let Some(meta) = shard.topic(name.0.as_str())
                && meta.id != id.as_u128()
            {
                return refused(
                    Some(name),
                    errors::UNKNOWN_TOPIC_ID,
                    format!("topic id {id} is not the id of this topic"),
                );
            }
            name
        }
        None => match shard.topic_by_id(id.as_u128()) {
            Some(meta) => TopicName(StrBytes::from_string(meta.name.clone())),
            None => {
                return refused(
                    None,
                    errors::UNKNOWN_TOPIC_ID,
                    format!("no topic has id {id}"),
                );
            }
        },
    };
    let topic_id = shard
        .topic(name.0.as_str())
        .map_or(id, |meta| Uuid::from_u128(meta.id));
    if !conn.may(
        errors::acl(KafkaApi::DeleteTopics),
        ResourceType::Topic,
        name.0.as_str(),
    ) {
        return refused(
            Some(name),
            errors::TOPIC_AUTHORIZATION_FAILED,
            "not authorized to delete the topic".to_string(),
        );
    }
    // The shard forgets the name for this connection: it may create it again.
    let deleted = shard.delete_topic(&conn.used, name.0.as_bytes()).await;
    match deleted {
        Ok(()) => DeletableTopicResult::default()
            .with_name(Some(name))
            .with_topic_id(topic_id),
        Err(failure) => refused(Some(name), errors::of(&failure), failure.to_string()),
    }
}
