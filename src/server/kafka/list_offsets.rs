//! ListOffsets: earliest (-2), latest (-1) or the first record at or after a timestamp
//! (ms, `server::time_seek`), each from the partition's owner. v8+ may ask for the earliest
//! *local* offset (-4, KIP-405), which is the earliest: pagurus keeps no tiered storage;
//! v9+ for the latest *tiered* offset (-5), answered as Kafka answers it for a topic without
//! remote storage: offset -1, no error. v10's timeout bounds a wait for remote storage,
//! which never happens here.

use std::rc::Rc;

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::errors::{self, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::protocol::native::OffsetSpec;
use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;

const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: ListOffsetsRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let mut topics = Vec::with_capacity(request.topics.len());
        for topic in request.topics {
            let described = conn.may(
                errors::acl(KafkaApi::ListOffsets),
                ResourceType::Topic,
                topic.name.0.as_str(),
            );
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for p in topic.partitions {
                let answer = ListOffsetsPartitionResponse::default()
                    .with_partition_index(p.partition_index)
                    .with_timestamp(-1)
                    // v4+ only; -1 (unknown) is the default every version can carry.
                    .with_leader_epoch(
                        if header.api_version >= 4 && p.timestamp != LATEST_TIERED {
                            0
                        } else {
                            -1
                        },
                    );
                let code_or_offset = if described {
                    list(&conn, topic.name.0.as_str(), p.partition_index, p.timestamp).await
                } else {
                    Err(errors::TOPIC_AUTHORIZATION_FAILED)
                };
                partitions.push(match code_or_offset {
                    Ok(offset) => answer.with_offset(offset),
                    Err(code) => answer.with_offset(-1).with_error_code(code),
                });
            }
            topics.push(
                ListOffsetsTopicResponse::default()
                    .with_name(topic.name)
                    .with_partitions(partitions),
            );
        }
        Reply::frame(respond(
            &header,
            &ListOffsetsResponse::default().with_topics(topics),
        ))
    })
}

async fn list(conn: &Conn, topic: &str, index: i32, timestamp: i64) -> Result<i64, i16> {
    let shard = &conn.shard;
    let partition = u32::try_from(index).map_err(|_| UNKNOWN_TOPIC_OR_PARTITION)?;
    // Unknown before "not the leader": a client must not chase a leader for a topic that
    // does not exist (or that this connection saw deleted).
    shard
        .known_partition_in(&conn.used, topic, partition)
        .map_err(|f| errors::of(&f))?;
    if conn.not_leader(shard.placement().owner(topic, partition)) {
        return Err(NOT_LEADER_OR_FOLLOWER);
    }
    let spec = match timestamp {
        LATEST => OffsetSpec::Latest,
        EARLIEST | EARLIEST_LOCAL => OffsetSpec::Earliest,
        // Nothing is tiered: Kafka's answer for a topic without remote storage.
        LATEST_TIERED => return Ok(-1),
        ms if ms >= 0 => {
            OffsetSpec::Timestamp(u64::try_from(ms).expect("non-negative") * 1_000_000)
        }
        // -3 (max timestamp) and anything else: not served.
        _ => return Err(errors::UNSUPPORTED_FOR_MESSAGE_FORMAT),
    };
    let offset = crate::server::time_seek::list_offsets(
        shard,
        &conn.used,
        topic.as_bytes(),
        partition,
        spec,
    )
    .await
    .map_err(|f| errors::of(&f))?;
    Ok(i64::try_from(offset).unwrap_or(i64::MAX))
}
