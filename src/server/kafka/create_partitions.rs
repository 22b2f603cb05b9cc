//! CreatePartitions: refused with INVALID_PARTITIONS. A partition's owner core is
//! `fnv1a32("{topic}/{partition}") % cores` and a keyed record's partition is its key's hash
//! modulo the count, so growing a topic would move every key to another partition under
//! running producers and consumers; topics keep the count they were created with
//! (`docs/KAFKA.md`).

use std::rc::Rc;

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;

use super::errors::{INVALID_PARTITIONS, UNKNOWN_TOPIC_OR_PARTITION};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: CreatePartitionsRequest,
) -> Pending {
    let results = request
        .topics
        .into_iter()
        .map(|t| {
            let (code, message) = match conn.shard.topic(t.name.0.as_str()) {
                None => (UNKNOWN_TOPIC_OR_PARTITION, "unknown topic".to_string()),
                Some(meta) => (
                    INVALID_PARTITIONS,
                    format!(
                        "topic has {} partitions; pagurus does not grow topics (keys would move)",
                        meta.partitions
                    ),
                ),
            };
            CreatePartitionsTopicResult::default()
                .with_name(t.name)
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message)))
        })
        .collect();
    Pending::Ready(Reply::frame(respond(
        &header,
        &CreatePartitionsResponse::default().with_results(results),
    )))
}
