//! DeleteTopics by name (v1-v5; v6 deletes by topic id and is not served).

use std::rc::Rc;

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use super::errors;
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: DeleteTopicsRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let mut results = Vec::with_capacity(request.topic_names.len());
        for name in request.topic_names {
            let result = DeletableTopicResult::default().with_name(Some(name.clone()));
            let deleted = conn.shard.delete_topic(name.0.as_bytes()).await;
            // This connection knows: it may create the name again (`shard::used`).
            conn.used.forget(&conn.shard, name.0.as_bytes());
            results.push(match deleted {
                Ok(()) => result,
                Err(failure) => result
                    .with_error_code(errors::from_native(failure.code))
                    .with_error_message(Some(StrBytes::from_string(failure.message))),
            });
        }
        Reply::frame(respond(
            &header,
            &DeleteTopicsResponse::default().with_responses(results),
        ))
    })
}
