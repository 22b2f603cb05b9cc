//! The Kafka bench's producers and consumers, as glommio tasks (one connection each), with
//! the native glommio workers' pacing, warm-up and counting (`super::super::glommio`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchRequest, FetchResponse, InitProducerIdRequest, InitProducerIdResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::codec::{
    FETCH_MAX_BYTES, FETCH_RESPONSE_BYTES_MAX, FETCH_VERSION, INIT_PRODUCER_ID_VERSION,
    KafkaBenchError, PRODUCE_VERSION, RESPONSE_BYTES_MAX,
};
use super::conn::Conn;
use super::records::{self, BatchBuilder, ProducerIds};
use crate::bench::workers::{ConsumerSpec, ProducerSpec, WallClock, WorkerResult};
use crate::bench::{Shared, batch_schedule};

/// acks=all: the broker answers once the batch is durable as its `--fsync` says.
const ACKS_ALL: i16 = -1;
/// The consumers' long poll, as the native bench's.
const FETCH_MAX_WAIT: Duration = Duration::from_millis(100);

struct InFlight {
    correlation_id: i32,
    intended: Instant,
    messages: u64,
}

pub async fn produce(shared: Arc<Shared>, spec: ProducerSpec) -> Result<WorkerResult, String> {
    let result = produce_inner(&shared, &spec).await;
    shared.producer_finished();
    result.map_err(|e| format!("kafka producer {}: {e}", spec.index))
}

async fn produce_inner(
    shared: &Shared,
    spec: &ProducerSpec,
) -> Result<WorkerResult, KafkaBenchError> {
    let args = &shared.args;
    let timeout = args.target.timeout();
    let mut conn = Conn::connect(spec.addr, timeout).await?;
    let ids = init_producer_id(&mut conn).await?;
    let schedule = batch_schedule(args, spec.index);
    let clock = WallClock::now();
    let mut builder = BatchBuilder::default();
    // One request, its records replaced for each batch: no per-batch rebuild of the rest.
    let mut request = ProduceRequest::default()
        .with_acks(ACKS_ALL)
        .with_timeout_ms(i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX))
        .with_topic_data(vec![
            TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(spec.topic.clone())))
                .with_partition_data(vec![
                    PartitionProduceData::default().with_index(spec.partition as i32),
                ]),
        ]);
    let mut result = WorkerResult::new();
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(args.in_flight);
    let (mut sent, mut sequence) = (0u64, 0i32);
    let mut next_intended = Instant::now();
    loop {
        while in_flight.len() < args.in_flight {
            let remaining = schedule.quota.map_or(u64::MAX, |q| q - sent);
            if remaining == 0
                || schedule.deadline.is_some_and(|d| Instant::now() >= d)
                || shared.stop.load(Ordering::Relaxed)
            {
                break;
            }
            let now = Instant::now();
            let intended = if schedule.interval.is_some() {
                next_intended
            } else {
                now
            };
            if intended > now {
                // Unlike the native workers, a connection here cannot wait for an answer
                // and a send time at once (a read cut off mid-frame would lose the frame):
                // with answers due, read the oldest first; the latency still counts from
                // the intended time, so a late send shows.
                if !in_flight.is_empty() {
                    break;
                }
                ::glommio::timer::sleep(intended - now).await;
            }
            let messages = (schedule.per_batch as u64).min(remaining);
            let batch = builder.build(
                messages as usize,
                args.size,
                ids,
                sequence,
                clock.unix_ns(intended),
            );
            request.topic_data[0].partition_data[0].records = Some(Bytes::copy_from_slice(batch));
            let correlation_id = conn
                .send(ApiKey::Produce, PRODUCE_VERSION, &request)
                .await?;
            in_flight.push_back(InFlight {
                correlation_id,
                intended,
                messages,
            });
            sent += messages;
            // Kafka's sequence numbers wrap at i32::MAX.
            sequence = ((i64::from(sequence) + messages as i64) % (i64::from(i32::MAX) + 1)) as i32;
            if let Some(interval) = schedule.interval {
                next_intended += interval;
            }
        }
        let Some(oldest) = in_flight.pop_front() else {
            break;
        };
        let response: ProduceResponse = conn
            .receive(
                ApiKey::Produce,
                PRODUCE_VERSION,
                oldest.correlation_id,
                RESPONSE_BYTES_MAX,
                Duration::ZERO,
            )
            .await?;
        check_produced(&response, spec)?;
        let now = Instant::now();
        if oldest.intended >= shared.measure_from {
            result
                .latency_ns
                .saturating_record(now.duration_since(oldest.intended).as_nanos() as u64);
            result.count(now, oldest.messages, oldest.messages * args.size as u64);
        }
        shared
            .produced
            .fetch_add(oldest.messages, Ordering::Relaxed);
    }
    Ok(result)
}

async fn init_producer_id(conn: &mut Conn) -> Result<ProducerIds, KafkaBenchError> {
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    let response: InitProducerIdResponse = conn
        .call(ApiKey::InitProducerId, INIT_PRODUCER_ID_VERSION, &request)
        .await?;
    if response.error_code != 0 {
        return Err(KafkaBenchError::broker(
            ApiKey::InitProducerId,
            "an idempotent producer",
            response.error_code,
        ));
    }
    Ok(ProducerIds {
        id: response.producer_id.0,
        epoch: response.producer_epoch,
    })
}

/// The answer for the one partition produced to, without an error.
fn check_produced(response: &ProduceResponse, spec: &ProducerSpec) -> Result<(), KafkaBenchError> {
    let what = || format!("{}/{}", spec.topic, spec.partition);
    let partition = response
        .responses
        .iter()
        .flat_map(|t| &t.partition_responses)
        .find(|p| p.index == spec.partition as i32)
        .ok_or_else(|| KafkaBenchError::Metadata(format!("no produce answer for {}", what())))?;
    if partition.error_code != 0 {
        return Err(KafkaBenchError::broker(
            ApiKey::Produce,
            what(),
            partition.error_code,
        ));
    }
    Ok(())
}

pub async fn consume(shared: Arc<Shared>, spec: ConsumerSpec) -> Result<WorkerResult, String> {
    consume_inner(&shared, &spec)
        .await
        .map_err(|e| format!("kafka consumer on {}/{}: {e}", spec.topic, spec.partition))
}

async fn consume_inner(
    shared: &Shared,
    spec: &ConsumerSpec,
) -> Result<WorkerResult, KafkaBenchError> {
    let args = &shared.args;
    let mut conn = Conn::connect(spec.addr, args.target.timeout()).await?;
    let measure_from_unix_ns = WallClock::now().unix_ns(shared.measure_from);
    let mut request = FetchRequest::default()
        .with_max_wait_ms(FETCH_MAX_WAIT.as_millis() as i32)
        .with_min_bytes(1)
        .with_max_bytes(FETCH_MAX_BYTES)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(spec.topic.clone())))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(spec.partition as i32)
                        .with_partition_max_bytes(FETCH_MAX_BYTES),
                ]),
        ]);
    let mut result = WorkerResult::new();
    let mut offset = spec.offset;
    let mut idle_since = Instant::now();
    loop {
        request.topics[0].partitions[0].fetch_offset = offset as i64;
        let correlation_id = conn.send(ApiKey::Fetch, FETCH_VERSION, &request).await?;
        let response: FetchResponse = conn
            .receive(
                ApiKey::Fetch,
                FETCH_VERSION,
                correlation_id,
                FETCH_RESPONSE_BYTES_MAX,
                FETCH_MAX_WAIT,
            )
            .await?;
        let records = fetched_records(&response, spec)?;
        let now = Instant::now();
        let now_unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        for batch in records::read_batches(&records, offset)? {
            if batch.sent_ns >= measure_from_unix_ns || args.producers == 0 {
                if args.producers > 0 {
                    result.latency_ns.saturating_record_n(
                        now_unix_ns.saturating_sub(batch.sent_ns),
                        batch.records,
                    );
                }
                result.count(now, batch.records, batch.value_bytes);
            }
            shared.consumed.fetch_add(batch.records, Ordering::Relaxed);
            offset = batch.next_offset;
            idle_since = now;
        }
        if shared.consumer_done(idle_since) {
            return Ok(result);
        }
        if idle_since.elapsed() > Duration::from_secs(30) {
            return Err(KafkaBenchError::Records("no data for 30 s".into()));
        }
    }
}

/// The fetched partition's records (empty when none came), or its error.
fn fetched_records(
    response: &FetchResponse,
    spec: &ConsumerSpec,
) -> Result<Bytes, KafkaBenchError> {
    let what = || format!("{}/{}", spec.topic, spec.partition);
    if response.error_code != 0 {
        return Err(KafkaBenchError::broker(
            ApiKey::Fetch,
            what(),
            response.error_code,
        ));
    }
    let Some(partition) = response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .find(|p| p.partition_index == spec.partition as i32)
    else {
        return Ok(Bytes::new());
    };
    if partition.error_code != 0 {
        return Err(KafkaBenchError::broker(
            ApiKey::Fetch,
            what(),
            partition.error_code,
        ));
    }
    Ok(partition.records.clone().unwrap_or_default())
}
