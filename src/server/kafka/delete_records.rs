//! DeleteRecords: moves each partition's log start to the asked offset (-1: the high
//! watermark), durably, on its owner (`storage::log::start`). Records below it are gone for
//! every reader: Kafka and native fetches and HermitMQ consumers get it as the earliest
//! offset, ListOffsets earliest answers it, and retention deletes the segments wholly
//! below it. The answer's low watermark is the start after the move. An offset past the
//! high watermark is `OFFSET_OUT_OF_RANGE` (1), as in Kafka. With the ACL authorizer a
//! topic needs Delete on it: each partition of a topic refused gets
//! TOPIC_AUTHORIZATION_FAILED, and the other topics are served.

use std::rc::Rc;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use tracing::{info, warn};

use super::errors::{self, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;

/// The offset that means "everything up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: DeleteRecordsRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let api = errors::acl(KafkaApi::DeleteRecords);
            let allowed = conn.may(api, ResourceType::Topic, topic.name.0.as_str());
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for p in topic.partitions {
                let result =
                    DeleteRecordsPartitionResult::default().with_partition_index(p.partition_index);
                let deleted = if allowed {
                    delete(&conn, topic.name.0.as_str(), p.partition_index, p.offset).await
                } else {
                    Err(errors::TOPIC_AUTHORIZATION_FAILED)
                };
                partitions.push(match deleted {
                    Ok(start) => result.with_low_watermark(start),
                    Err(code) => result.with_low_watermark(-1).with_error_code(code),
                });
            }
            topics.push(
                DeleteRecordsTopicResult::default()
                    .with_name(topic.name)
                    .with_partitions(partitions),
            );
        }
        Reply::frame(respond(
            &header,
            &DeleteRecordsResponse::default().with_topics(topics),
        ))
    })
}

async fn delete(conn: &Conn, topic: &str, index: i32, offset: i64) -> Result<i64, i16> {
    let shard = &conn.shard;
    let partition = u32::try_from(index).map_err(|_| UNKNOWN_TOPIC_OR_PARTITION)?;
    let offset = match offset {
        HIGH_WATERMARK => None,
        o => Some(u64::try_from(o).map_err(|_| OFFSET_OUT_OF_RANGE)?),
    };
    match shard.delete_records(topic, partition, offset).await {
        Ok(start) => {
            info!(topic, partition, log_start = start, "DeleteRecords");
            Ok(i64::try_from(start).unwrap_or(i64::MAX))
        }
        Err(failure) => {
            warn!(topic, partition, error = %failure, "DeleteRecords refused");
            Err(errors::of(&failure))
        }
    }
}
