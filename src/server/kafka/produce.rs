//! Produce: each partition's RecordBatches are checked (CRC, magic, counts, size) and then
//! stored as they arrived, each inside a pagurus batch (`protocol::kafka::convert`); the
//! storage rewrites the RecordBatch's base offset when it assigns offsets. A partition's
//! batches are stored all or none. The reader starts every partition's produce in request
//! order; the answer waits for all of them (acks=1 and acks=-1 both wait for the fsync
//! policy's acknowledgement: there are no replicas), and acks=0 gets no answer, as in Kafka.
//!
//! From v13 a topic is named by its id (KIP-516): the id is looked up here, an id no topic
//! has is `UNKNOWN_TOPIC_ID` (100) for each of its partitions, and a produce by id never
//! creates a topic (an id names a topic that exists).

use std::rc::Rc;

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::warn;

use super::errors::{
    self, CORRUPT_MESSAGE, INVALID_RECORD, MESSAGE_TOO_LARGE, NOT_LEADER_OR_FOLLOWER,
};
use super::{Conn, Pending, Reply, respond};
use crate::metrics::counters::Metrics;
use crate::protocol::kafka::batch::{self, BatchError};
use crate::protocol::kafka::{RequestHeader, convert};
use crate::protocol::record;
use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use crate::shard::data::{Batches, KafkaBatch, ProduceInFlight};
use crate::shard::idempotence::IdempotentBatch;
use crate::shard::producers::ProducerBatch;

/// One partition's produce, started or refused.
enum Started {
    InFlight(ProduceInFlight),
    Refused(i16, String),
}

pub(super) async fn start(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: ProduceRequest,
) -> Pending {
    let acks = request.acks;
    let by_id = header.api_version >= 13;
    let mut started = Vec::with_capacity(request.topic_data.len());
    for topic in request.topic_data {
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        let id = topic.topic_id;
        let name = if by_id {
            conn.shard
                .topic_by_id(id.as_u128())
                .map(|meta| TopicName(StrBytes::from_string(meta.name.clone())))
        } else {
            Some(topic.name)
        };
        let writable = name.as_ref().is_none_or(|name| {
            conn.may(
                errors::acl(KafkaApi::Produce),
                ResourceType::Topic,
                name.0.as_str(),
            )
        });
        for p in topic.partition_data {
            let outcome = match &name {
                None => Started::Refused(errors::UNKNOWN_TOPIC_ID, format!("no topic has id {id}")),
                Some(_) if !writable => Started::Refused(
                    errors::TOPIC_AUTHORIZATION_FAILED,
                    "not authorized to write to the topic".into(),
                ),
                Some(_) if !matches!(acks, -1..=1) => {
                    Started::Refused(errors::INVALID_REQUIRED_ACKS, format!("acks={acks}"))
                }
                Some(_) if request.transactional_id.is_some() => {
                    Started::Refused(INVALID_RECORD, "transactions are not supported".into())
                }
                Some(name) => {
                    start_partition(conn, name, p.index, p.records.as_deref().unwrap_or(&[])).await
                }
            };
            partitions.push((p.index, outcome));
        }
        let name = name.unwrap_or_else(|| TopicName(StrBytes::from_static_str("")));
        started.push((name, id, partitions));
    }
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let mut responses = Vec::with_capacity(started.len());
        for (name, id, partitions) in started {
            let mut out = Vec::with_capacity(partitions.len());
            for (index, outcome) in partitions {
                out.push(finish(&conn, &name, index, outcome).await);
            }
            responses.push(
                TopicProduceResponse::default()
                    .with_name(name)
                    .with_topic_id(id)
                    .with_partition_responses(out),
            );
        }
        if acks == 0 {
            return Reply::none();
        }
        Reply::frame(respond(
            &header,
            &ProduceResponse::default().with_responses(responses),
        ))
    })
}

async fn finish(
    conn: &Conn,
    topic: &TopicName,
    index: i32,
    outcome: Started,
) -> PartitionProduceResponse {
    let response = PartitionProduceResponse::default()
        .with_index(index)
        .with_log_append_time_ms(-1)
        .with_log_start_offset(-1);
    let (code, message) = match outcome {
        Started::Refused(code, message) => (code, message),
        Started::InFlight(produce) => match conn.shard.finish_produce(produce).await {
            Ok(produced) => {
                return response
                    .with_base_offset(i64::try_from(produced.base_offset).unwrap_or(i64::MAX));
            }
            Err(failure) => (errors::of(&failure), failure.to_string()),
        },
    };
    if code != NOT_LEADER_OR_FOLLOWER {
        warn!(topic = %topic.0, partition = index, code, %message, "Kafka produce refused");
    }
    response
        .with_base_offset(-1)
        .with_error_code(code)
        .with_error_message(Some(StrBytes::from_string(message)))
}

/// Checks one partition's batches and starts storing them.
async fn start_partition(conn: &Conn, topic: &TopicName, index: i32, records: &[u8]) -> Started {
    let shard = &conn.shard;
    let Ok(partition) = u32::try_from(index) else {
        return Started::Refused(
            errors::UNKNOWN_TOPIC_OR_PARTITION,
            format!("partition {index}"),
        );
    };
    let name = topic.0.as_bytes();
    if let Ok(name) = std::str::from_utf8(name)
        && let Some(meta) = shard.topic(name)
        && partition < meta.partitions
        && conn.not_leader(shard.placement().owner(name, partition))
    {
        return Started::Refused(
            NOT_LEADER_OR_FOLLOWER,
            format!(
                "{name}/{partition} is led by broker {}",
                shard.placement().owner(name, partition).broker_id()
            ),
        );
    }
    let (batches, producers) = match stored_batches(conn, records) {
        Ok(stored) => stored,
        Err((code, message)) => {
            Metrics::inc(&shard.metrics.bad_batches);
            return Started::Refused(code, message);
        }
    };
    let batches = Batches::Kafka {
        batches: &batches,
        producers: &producers,
    };
    // A topic deleted since this connection used it is refused there (`shard::used`).
    match shard
        .start_produce(&conn.used, name, partition, batches)
        .await
    {
        Ok(in_flight) => Started::InFlight(in_flight),
        Err(e) => Started::Refused(errors::of(&e), e.to_string()),
    }
}

/// The partition's RecordBatches, where they arrived, each with the pagurus header it is
/// stored under, and each one's idempotence fields when the producer is idempotent.
/// Every batch is checked before any is kept.
fn stored_batches<'r>(conn: &Conn, records: &'r [u8]) -> Result<Stored<'r>, (i16, String)> {
    let limits = conn.shard.config.log.limits;
    let mut batches = Vec::new();
    let mut producers = Vec::new();
    if records.is_empty() {
        return Err((CORRUPT_MESSAGE, "no record batch".into()));
    }
    for checked in batch::produced_batches(records, limits.max_payload_bytes) {
        let (info, kafka) = checked.map_err(|e| {
            let code = match e {
                BatchError::TooLarge { .. } => MESSAGE_TOO_LARGE,
                _ => CORRUPT_MESSAGE,
            };
            (code, e.to_string())
        })?;
        if info.transactional || info.control {
            return Err((
                INVALID_RECORD,
                "transactional and control batches are not supported".into(),
            ));
        }
        if info.idempotent() {
            producers.push(IdempotentBatch {
                producer: ProducerBatch {
                    producer_id: info.producer_id,
                    epoch: info.producer_epoch,
                    first_sequence: info.base_sequence,
                    last_sequence: info.last_sequence(),
                },
                offsets: info.offsets(),
            });
        }
        // The RecordBatch's own CRC was just checked, and the storage takes the batch as
        // checked, so the only other pass over its bytes is the index entry's CRC of the
        // bytes as stored.
        let mut header = [0u8; record::HEADER_LEN];
        convert::stored_header(&info, 0).encode(&mut header);
        batches.push(KafkaBatch {
            header,
            record_batch: kafka,
        });
    }
    if !producers.is_empty() && producers.len() != batches.len() {
        return Err((
            INVALID_RECORD,
            "idempotent and plain batches mixed in one partition".into(),
        ));
    }
    Ok((batches, producers))
}

/// The batches of a partition's produce, and the idempotence fields of each (or none).
type Stored<'r> = (Vec<KafkaBatch<'r>>, Vec<IdempotentBatch>);
