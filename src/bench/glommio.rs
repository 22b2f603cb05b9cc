//! Bench workers on the glommio client: each bench thread runs one glommio executor, which
//! drives all of that thread's producers and consumers as tasks, each on its own
//! connection with many requests in flight. Few threads compete with the broker for the
//! CPUs, and none blocks waiting for an answer.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_lite::future;
use glommio::{LocalExecutorBuilder, Placement};

use crate::bench::workers::{ConsumerSpec, ProducerSpec, WallClock, WorkerResult};
use crate::bench::{Protocol, Results, Shared, batch_schedule, kafka};
use crate::client::ClientError;
use crate::client::glommio::{Client, OwnedReply, ReplyFuture};
use crate::client::produce::ProduceFrame;
use crate::protocol::native::Request;

/// Runs `producers` and `consumers` on one executor thread; returns their results.
/// `cpu`: the CPU to bind the thread to when the client polls (`--idle-poll-us`).
pub fn thread(
    name: String,
    cpu: Option<usize>,
    shared: Arc<Shared>,
    producers: Vec<ProducerSpec>,
    consumers: Vec<ConsumerSpec>,
) -> std::thread::JoinHandle<Result<Results, String>> {
    std::thread::spawn(move || {
        let builder = match cpu {
            Some(cpu) if shared.args.idle_poll_us > 0 => {
                LocalExecutorBuilder::new(Placement::Fixed(cpu))
                    .spin_before_park(Duration::from_micros(shared.args.idle_poll_us))
            }
            _ => LocalExecutorBuilder::default(),
        }
        .name(&name);
        builder
            .make()
            .map_err(|e| format!("cannot start a bench executor: {e}"))?
            .run(async move {
                let kafka = shared.args.protocol == Protocol::Kafka;
                let producing: Vec<_> = producers
                    .into_iter()
                    .map(|spec| {
                        let shared = Arc::clone(&shared);
                        if kafka {
                            glommio::spawn_local(kafka::workers::produce(shared, spec))
                        } else {
                            glommio::spawn_local(produce(shared, spec))
                        }
                    })
                    .collect();
                let consuming: Vec<_> = consumers
                    .into_iter()
                    .map(|spec| {
                        let shared = Arc::clone(&shared);
                        if kafka {
                            glommio::spawn_local(kafka::workers::consume(shared, spec))
                        } else {
                            glommio::spawn_local(consume(shared, spec))
                        }
                    })
                    .collect();
                let mut produced = Vec::new();
                for task in producing {
                    produced.push(task.await?);
                }
                let mut consumed = Vec::new();
                for task in consuming {
                    consumed.push(task.await?);
                }
                Ok((produced, consumed))
            })
    })
}

struct InFlight {
    reply: ReplyFuture,
    intended: Instant,
    messages: u64,
}

enum Wake {
    Answer(Result<OwnedReply, ClientError>),
    SendTime,
}

async fn produce(shared: Arc<Shared>, spec: ProducerSpec) -> Result<WorkerResult, String> {
    let result = produce_inner(&shared, &spec).await;
    shared.producer_finished();
    result.map_err(|e| format!("producer {}: {e}", spec.index))
}

async fn produce_inner(shared: &Shared, spec: &ProducerSpec) -> Result<WorkerResult, String> {
    let args = &shared.args;
    let client = Client::connect_timeout(spec.addr, args.target.timeout())
        .await
        .map_err(|e| e.to_string())?;
    let schedule = batch_schedule(args, spec.index);
    let record = vec![0x5au8; args.size];
    let clock = WallClock::now();
    let mut frame = ProduceFrame::new(&spec.topic, spec.partition, b"");
    let mut result = WorkerResult::new();
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(args.in_flight);
    let mut sent = 0u64;
    let mut next_intended = Instant::now();
    loop {
        let mut waiting_to_send = false;
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
                if !in_flight.is_empty() {
                    waiting_to_send = true;
                    break;
                }
                glommio::timer::sleep(intended - now).await;
            }
            let messages = (schedule.per_batch as u64).min(remaining);
            frame.reset(&spec.topic, spec.partition, b"");
            for _ in 0..messages {
                frame.push(&record);
            }
            let reply = client.produce(&mut frame, clock.unix_ns(intended));
            in_flight.push_back(InFlight {
                reply,
                intended,
                messages,
            });
            sent += messages;
            if let Some(interval) = schedule.interval {
                next_intended += interval;
            }
        }
        let Some(oldest) = in_flight.front_mut() else {
            break;
        };
        // Open loop: wait for the oldest answer, but wake at the next send time if a slot
        // is free, so the schedule never waits for the broker.
        let wake = if waiting_to_send {
            let until = next_intended.saturating_duration_since(Instant::now());
            future::or(async { Wake::Answer((&mut oldest.reply).await) }, async {
                glommio::timer::sleep(until).await;
                Wake::SendTime
            })
            .await
        } else {
            Wake::Answer((&mut oldest.reply).await)
        };
        let Wake::Answer(reply) = wake else {
            continue;
        };
        let oldest = in_flight.pop_front().expect("looked at above");
        reply
            .and_then(|r| r.produced())
            .map_err(|e| e.to_string())?;
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

async fn consume(shared: Arc<Shared>, spec: ConsumerSpec) -> Result<WorkerResult, String> {
    let args = &shared.args;
    let client = Client::connect_timeout(spec.addr, args.target.timeout())
        .await
        .map_err(|e| format!("consumer: {e}"))?;
    let measure_from_unix_ns = WallClock::now().unix_ns(shared.measure_from);
    let mut result = WorkerResult::new();
    let mut offset = spec.offset;
    let mut idle_since = Instant::now();
    loop {
        let reply = client
            .call(&Request::Fetch {
                topic: spec.topic.as_bytes(),
                partition: spec.partition,
                offset,
                max_bytes: 4 << 20,
                max_wait_ms: 100,
            })
            .await
            .map_err(|e| format!("consumer on {}/{}: {e}", spec.topic, spec.partition))?;
        let fetched = reply
            .fetched()
            .map_err(|e| format!("consumer on {}/{}: {e}", spec.topic, spec.partition))?;
        let now = Instant::now();
        let now_unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        for batch in fetched.iter() {
            let header = batch.header;
            let messages = header.records();
            if header.timestamp_ns >= measure_from_unix_ns || args.producers == 0 {
                if args.producers > 0 {
                    result.latency_ns.saturating_record_n(
                        now_unix_ns.saturating_sub(header.timestamp_ns),
                        messages,
                    );
                }
                let payload = u64::from(header.payload_len).saturating_sub(4 * messages);
                result.count(now, messages, payload);
            }
            shared.consumed.fetch_add(messages, Ordering::Relaxed);
            offset = batch.next_offset();
            idle_since = now;
        }
        if shared.consumer_done(idle_since) {
            return Ok(result);
        }
        if idle_since.elapsed() > Duration::from_secs(30) {
            return Err("consumer saw no data for 30 s".into());
        }
    }
}
