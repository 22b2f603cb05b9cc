//! Fetch: a plan per partition from the shard (here or the owner), then the answer is
//! written in parts: the response head from user space, each stored Kafka RecordBatch from
//! its segment file with sendfile (skipping its 29-byte pagurus header), and each native
//! batch converted to one RecordBatch in memory (`kafka_batches_converted`).
//!
//! Long poll: every partition is planned at once without waiting; if that brings fewer than
//! `min_bytes`, every partition long-polls at once, and the first one with data (or the end
//! of `max_wait_ms`) ends the wait. A fetch from an offset inside a stored batch starts with
//! that batch; the client skips the records before its offset, as with Kafka.
//!
//! Fetch sessions (KIP-227) are not kept: the answer's session id is 0, which tells the
//! client to send full fetches.

use std::io;
use std::rc::Rc;

use bytes::{BufMut, BytesMut};
use glommio::channels::local_channel;
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, FetchRequest, TopicName};
use kafka_protocol::protocol::{Encodable, StrBytes};
use tracing::warn;

use super::errors::{self, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION};
use super::{Conn, Part, Pending, Reply};
use crate::metrics::counters::Metrics;
use crate::protocol::kafka::{RequestHeader, convert};
use crate::protocol::record::{self, BatchFormat};
use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use crate::server::native::FETCH_BYTES_MAX;
use crate::server::session::FileRange;
use crate::shard::calls::{Fetch, SendPlan};

/// Partitions one Fetch may name.
const PARTITIONS_MAX: usize = 10_000;

/// One partition asked for.
struct Asked {
    topic: usize,
    partition: i32,
    offset: i64,
    max_bytes: u32,
}

/// What one partition answers.
enum Outcome {
    Plan(SendPlan),
    Error(i16),
}

pub(super) fn handle(conn: &Rc<Conn>, header: RequestHeader, request: FetchRequest) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move { fetch(&conn, &header, request).await })
}

async fn fetch(conn: &Rc<Conn>, header: &RequestHeader, request: FetchRequest) -> Reply {
    let by_id = header.api_version >= 13;
    let mut topics: Vec<TopicName> = Vec::new();
    // v13+ (KIP-516): topics named by id, answered by id; an id no topic has is answered
    // UNKNOWN_TOPIC_ID for each of its partitions (its name stays empty, which no topic has).
    let mut ids: Vec<Option<uuid::Uuid>> = Vec::new();
    let mut asked = Vec::new();
    for topic in request.topics {
        let at = topics.len();
        if by_id {
            let meta = conn.shard.topic_by_id(topic.topic_id.as_u128());
            let name = meta.map_or_else(String::new, |m| m.name.clone());
            topics.push(TopicName(StrBytes::from_string(name)));
            ids.push(Some(topic.topic_id));
        } else {
            topics.push(topic.topic);
            ids.push(None);
        }
        for p in topic.partitions {
            asked.push(Asked {
                topic: at,
                partition: p.partition,
                offset: p.fetch_offset,
                max_bytes: u32::try_from(p.partition_max_bytes.max(1))
                    .unwrap_or(1)
                    .min(FETCH_BYTES_MAX),
            });
        }
    }
    asked.truncate(PARTITIONS_MAX);
    let max_wait_ms = u32::try_from(request.max_wait_ms).unwrap_or(0);
    let min_bytes = u64::try_from(request.min_bytes).unwrap_or(0);
    let mut outcomes = plan_all(conn, &topics, &asked, 0).await;
    // Planned like any other (a plan reads nothing), then refused before anything is sent.
    // Without an authorizer nothing is asked (no allocation on the fetch path).
    if conn.security.authorizes() {
        let readable: Vec<bool> = topics
            .iter()
            .map(|t| {
                conn.may(
                    errors::acl(KafkaApi::Fetch),
                    ResourceType::Topic,
                    t.0.as_str(),
                )
            })
            .collect();
        for (outcome, a) in outcomes.iter_mut().zip(&asked) {
            if !readable[a.topic] {
                *outcome = Outcome::Error(errors::TOPIC_AUTHORIZATION_FAILED);
            }
        }
    }
    let ready: u64 = outcomes.iter().map(plan_bytes).sum();
    let errors = outcomes.iter().any(|o| matches!(o, Outcome::Error(_)));
    if ready < min_bytes.max(1) && !errors && max_wait_ms > 0 {
        outcomes = wait_any(conn, &topics, &asked, max_wait_ms, outcomes).await;
    }
    let response_max = u64::try_from(request.max_bytes.max(1)).unwrap_or(1);
    // An unknown id's partitions were refused by name (empty, no topic has it): they
    // answer UNKNOWN_TOPIC_ID, which makes the client refresh its metadata.
    for (outcome, a) in outcomes.iter_mut().zip(&asked) {
        if by_id && topics[a.topic].is_empty() {
            *outcome = Outcome::Error(errors::UNKNOWN_TOPIC_ID);
        }
    }
    encode(
        conn,
        header,
        (&topics, &ids),
        &asked,
        outcomes,
        response_max,
    )
    .await
}

fn plan_bytes(outcome: &Outcome) -> u64 {
    match outcome {
        Outcome::Plan(plan) => plan.length,
        Outcome::Error(_) => 0,
    }
}

/// Plans every partition at once, each waiting up to `max_wait_ms`.
async fn plan_all(
    conn: &Rc<Conn>,
    topics: &[TopicName],
    asked: &[Asked],
    max_wait_ms: u32,
) -> Vec<Outcome> {
    let tasks: Vec<_> = asked
        .iter()
        .map(|a| {
            let conn = Rc::clone(conn);
            let topic = topics[a.topic].0.to_string();
            let (partition, offset, max_bytes) = (a.partition, a.offset, a.max_bytes);
            glommio::spawn_local(async move {
                plan_one(&conn, topic, partition, offset, max_bytes, max_wait_ms).await
            })
        })
        .collect();
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await);
    }
    out
}

/// Long-polls every partition at once; answers when the first has data, or when all have
/// waited `max_wait_ms`. The others' waits are cancelled (their tasks dropped) and they
/// answer what `first` (the plans made without waiting) found: nothing, and their offsets.
async fn wait_any(
    conn: &Rc<Conn>,
    topics: &[TopicName],
    asked: &[Asked],
    max_wait_ms: u32,
    first: Vec<Outcome>,
) -> Vec<Outcome> {
    let (tx, rx) = local_channel::new_bounded(asked.len().max(1));
    let tx = Rc::new(tx);
    let tasks: Vec<_> = asked
        .iter()
        .enumerate()
        .map(|(at, a)| {
            let conn = Rc::clone(conn);
            let tx = Rc::clone(&tx);
            let topic = topics[a.topic].0.to_string();
            let (partition, offset, max_bytes) = (a.partition, a.offset, a.max_bytes);
            glommio::spawn_local(async move {
                let outcome =
                    plan_one(&conn, topic, partition, offset, max_bytes, max_wait_ms).await;
                let _ = tx.send((at, outcome)).await;
            })
        })
        .collect();
    drop(tx);
    let mut outcomes = first;
    let mut answered = 0;
    while answered < asked.len() {
        let Some((at, outcome)) = rx.recv().await else {
            break;
        };
        let has_data = plan_bytes(&outcome) > 0 || matches!(outcome, Outcome::Error(_));
        outcomes[at] = outcome;
        answered += 1;
        if has_data {
            break;
        }
    }
    drop(tasks);
    outcomes
}

async fn plan_one(
    conn: &Conn,
    topic: String,
    partition: i32,
    offset: i64,
    max_bytes: u32,
    max_wait_ms: u32,
) -> Outcome {
    let shard = &conn.shard;
    let (Ok(partition), Ok(offset)) = (u32::try_from(partition), u64::try_from(offset)) else {
        return Outcome::Error(if partition < 0 {
            UNKNOWN_TOPIC_OR_PARTITION
        } else {
            errors::OFFSET_OUT_OF_RANGE
        });
    };
    // No creation on demand: a consumer asks for what Metadata listed.
    if let Err(failure) = shard.known_partition(&topic, partition) {
        return Outcome::Error(errors::of(&failure));
    }
    if conn.not_leader(shard.placement().owner(&topic, partition)) {
        return Outcome::Error(NOT_LEADER_OR_FOLLOWER);
    }
    let fetch = Fetch {
        topic,
        partition,
        offset,
        max_bytes,
        max_wait_ms,
    };
    // A topic deleted since this connection used it stays unknown (`shard::used`).
    match shard.fetch(&conn.used, fetch).await {
        Ok(plan) => Outcome::Plan(plan),
        Err(failure) => Outcome::Error(errors::of(&failure)),
    }
}

/// Builds the answer: the head and each partition's fixed fields from user space, the
/// records as parts.
async fn encode(
    conn: &Conn,
    header: &RequestHeader,
    (topics, ids): (&[TopicName], &[Option<uuid::Uuid>]),
    asked: &[Asked],
    outcomes: Vec<Outcome>,
    response_max: u64,
) -> Reply {
    let version = header.api_version;
    let flexible = version >= 12;
    let mut parts = Vec::new();
    let mut head = BytesMut::new();
    head.put_i32(0); // size, set at the end
    head.put_i32(header.correlation_id);
    if ApiKey::Fetch.response_header_version(version) >= 1 {
        head.put_u8(0);
    }
    head.put_i32(0); // throttle time
    if version >= 7 {
        head.put_i16(errors::NONE);
        head.put_i32(0); // session id: none kept
    }
    // Topics in the order asked, each with its partitions (consecutive in `asked`).
    let mut runs: Vec<(usize, Vec<usize>)> = Vec::new();
    for (at, a) in asked.iter().enumerate() {
        match runs.last_mut() {
            Some((topic, list)) if *topic == a.topic => list.push(at),
            _ => runs.push((a.topic, vec![at])),
        }
    }
    put_len(&mut head, runs.len(), flexible);
    let mut outcomes: Vec<Option<Outcome>> = outcomes.into_iter().map(Some).collect();
    let mut budget = response_max;
    let mut size = 0usize;
    for (topic, list) in runs {
        match ids[topic] {
            Some(id) => head.put_slice(id.as_bytes()),
            None => put_string(&mut head, topics[topic].0.as_str(), flexible),
        }
        put_len(&mut head, list.len(), flexible);
        for at in list {
            let outcome = outcomes[at].take().unwrap_or(Outcome::Error(errors::NONE));
            let (data, records) =
                partition_answer(conn, version, asked[at].partition, outcome, &mut budget).await;
            let mut fixed = BytesMut::new();
            data.encode(&mut fixed, version)
                .expect("a partition answer encodes at a served version");
            // `records` was left null; replace the null with the real length.
            let null_len = if flexible { 2 } else { 4 };
            fixed.truncate(fixed.len() - null_len);
            head.extend_from_slice(&fixed);
            let records_len: usize = records
                .iter()
                .map(|p| match p {
                    Part::Bytes(b) => b.len(),
                    Part::File(range) => range.length as usize,
                })
                .sum();
            if flexible {
                put_uvarint(&mut head, records_len as u64 + 1);
            } else {
                head.put_i32(i32::try_from(records_len).unwrap_or(i32::MAX));
            }
            size += head.len();
            parts.push(Part::Bytes(std::mem::take(&mut head).to_vec()));
            size += records_len;
            parts.extend(records);
            if flexible {
                head.put_u8(0); // partition's tagged fields
            }
        }
        if flexible {
            head.put_u8(0); // topic's tagged fields
        }
    }
    if flexible {
        head.put_u8(0); // response's tagged fields
    }
    size += head.len();
    parts.push(Part::Bytes(head.to_vec()));
    let body = i32::try_from(size - 4).unwrap_or(i32::MAX);
    if let Some(Part::Bytes(first)) = parts.first_mut() {
        first[..4].copy_from_slice(&body.to_be_bytes());
    }
    Reply {
        parts,
        close: false,
    }
}

/// One partition's fixed fields (records null) and its records as parts.
async fn partition_answer(
    conn: &Conn,
    version: i16,
    partition: i32,
    outcome: Outcome,
    budget: &mut u64,
) -> (PartitionData, Vec<Part>) {
    let data = PartitionData::default()
        .with_partition_index(partition)
        .with_records(None);
    let plan = match outcome {
        Outcome::Error(code) => {
            return (
                data.with_error_code(code)
                    .with_high_watermark(-1)
                    .with_last_stable_offset(-1)
                    .with_log_start_offset(-1),
                Vec::new(),
            );
        }
        Outcome::Plan(plan) => plan,
    };
    let hw = i64::try_from(plan.high_watermark).unwrap_or(i64::MAX);
    let data = data
        .with_high_watermark(hw)
        .with_last_stable_offset(hw)
        .with_log_start_offset(if version >= 5 {
            i64::try_from(plan.log_start_offset).unwrap_or(0)
        } else {
            -1 // v5+ only
        })
        .with_aborted_transactions(Some(Vec::new()));
    let parts = match records(conn, &plan, budget).await {
        Ok(parts) => parts,
        Err(error) => {
            warn!(path = %plan.wal_path.display(), %error, "Kafka fetch could not read its segment");
            return (
                data.with_error_code(errors::KAFKA_STORAGE_ERROR),
                Vec::new(),
            );
        }
    };
    (data, parts)
}

/// The records of a plan: sendfile ranges for stored RecordBatches, converted bytes for
/// native batches. Stops at the response budget (always at least one batch if any).
async fn records(conn: &Conn, plan: &SendPlan, budget: &mut u64) -> io::Result<Vec<Part>> {
    if plan.batches.is_empty() || *budget == 0 {
        return Ok(Vec::new());
    }
    let file = match crate::server::sendfile::open_segment(&plan.wal_path, plan.file_id) {
        Ok(file) => file,
        // Replaced by compaction or deleted by retention since it was planned: answer
        // nothing now, the client fetches again.
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            Metrics::inc(&conn.shard.metrics.fetches_replanned);
            return Ok(Vec::new());
        }
        Err(error) => return Err(error),
    };
    // The batches that fit the budget: always the first.
    let mut taken = 0;
    for entry in &plan.batches {
        let length = u64::from(entry.length);
        if taken > 0 && length > *budget {
            break;
        }
        *budget = budget.saturating_sub(length);
        taken += 1;
    }
    let batches = &plan.batches[..taken];
    // Native batches to convert, read in one go (the plan's batches are contiguous).
    let mut native = batches.iter().filter(|e| e.format == BatchFormat::Native);
    let span = native
        .next()
        .map(|first| (first, native.next_back().unwrap_or(first)))
        .map(|(first, last)| (u64::from(first.position), last.end_position()));
    let native_bytes = match span {
        Some((start, end)) => {
            crate::server::sendfile::read_range(&file, start, end - start, plan.hot).await?
        }
        None => Vec::new(),
    };
    let limits = conn.shard.config.log.limits;
    let mut parts = Vec::with_capacity(batches.len());
    let mut converted = Vec::new();
    for entry in batches {
        match entry.format {
            BatchFormat::Kafka => {
                if !converted.is_empty() {
                    parts.push(Part::Bytes(std::mem::take(&mut converted)));
                }
                let header = record::HEADER_LEN as u64;
                parts.push(Part::File(FileRange {
                    file: Rc::clone(&file),
                    position: u64::from(entry.position) + header,
                    length: u64::from(entry.length) - header,
                    hot: plan.hot,
                    records: u64::from(entry.records),
                }));
            }
            BatchFormat::Native => {
                let start = span.map_or(0, |(start, _)| start);
                let at = usize::try_from(u64::from(entry.position) - start).expect("in the read");
                let native = &native_bytes[at..at + entry.length as usize];
                convert::native_to_record_batch(native, &limits, &mut converted)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                Metrics::inc(&conn.shard.metrics.kafka_batches_converted);
                Metrics::add(&conn.shard.metrics.records_out, u64::from(entry.records));
            }
        }
    }
    if !converted.is_empty() {
        Metrics::add(&conn.shard.metrics.bytes_out, converted.len() as u64);
        parts.push(Part::Bytes(converted));
    }
    Ok(parts)
}

fn put_len(out: &mut BytesMut, len: usize, flexible: bool) {
    if flexible {
        put_uvarint(out, len as u64 + 1);
    } else {
        out.put_i32(i32::try_from(len).unwrap_or(i32::MAX));
    }
}

fn put_string(out: &mut BytesMut, s: &str, flexible: bool) {
    if flexible {
        put_uvarint(out, s.len() as u64 + 1);
    } else {
        out.put_i16(i16::try_from(s.len()).unwrap_or(i16::MAX));
    }
    out.put_slice(s.as_bytes());
}

fn put_uvarint(out: &mut BytesMut, mut value: u64) {
    while value >= 0x80 {
        out.put_u8((value as u8) | 0x80);
        value >>= 7;
    }
    out.put_u8(value as u8);
}
