//! What every bench worker shares (results, the wall clock, the specs of producers and
//! consumers), and the blocking client's workers (`--client blocking`): one thread per
//! producer or consumer, each on its own connection.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

use crate::bench::{Shared, batch_schedule, histogram};
use crate::client::blocking::Client;
use crate::client::produce::ProduceFrame;
use crate::limits::Limits;
use crate::protocol::record::BatchHeader;

/// One producer: its number, where it connects, what it writes.
#[derive(Debug, Clone)]
pub struct ProducerSpec {
    pub index: usize,
    pub addr: SocketAddr,
    pub topic: String,
    pub partition: u32,
}

/// One partition a consumer reads, from `offset`, through `addr`.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    pub addr: SocketAddr,
    pub topic: String,
    pub partition: u32,
    pub offset: u64,
}

/// What one worker measured inside the measurement window.
pub struct WorkerResult {
    pub latency_ns: Histogram<u64>,
    pub messages: u64,
    pub payload_bytes: u64,
    /// First and last event inside the window.
    pub window: Option<(Instant, Instant)>,
}

impl WorkerResult {
    pub fn new() -> WorkerResult {
        WorkerResult {
            latency_ns: histogram(),
            messages: 0,
            payload_bytes: 0,
            window: None,
        }
    }

    pub fn count(&mut self, at: Instant, messages: u64, payload_bytes: u64) {
        self.messages += messages;
        self.payload_bytes += payload_bytes;
        self.window = Some(match self.window {
            None => (at, at),
            Some((first, _)) => (first, at),
        });
    }
}

/// Maps `Instant`s to nanoseconds since the epoch, for batch timestamps.
pub struct WallClock {
    instant: Instant,
    unix_ns: u64,
}

impl WallClock {
    pub fn now() -> WallClock {
        let unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        WallClock {
            instant: Instant::now(),
            unix_ns,
        }
    }

    pub fn unix_ns(&self, at: Instant) -> u64 {
        match at.checked_duration_since(self.instant) {
            Some(after) => self.unix_ns + after.as_nanos() as u64,
            None => self.unix_ns - self.instant.duration_since(at).as_nanos() as u64,
        }
    }
}

struct InFlight {
    correlation_id: u32,
    intended: Instant,
    messages: u64,
}

pub fn produce(shared: Arc<Shared>, spec: ProducerSpec) -> Result<WorkerResult, String> {
    let result = produce_inner(&shared, &spec);
    shared.producer_finished();
    result.map_err(|e| format!("producer {}: {e}", spec.index))
}

fn produce_inner(shared: &Shared, spec: &ProducerSpec) -> Result<WorkerResult, String> {
    let args = &shared.args;
    let mut client =
        Client::connect_timeout(spec.addr, args.target.timeout()).map_err(|e| e.to_string())?;
    let schedule = batch_schedule(args, spec.index);
    let (quota, deadline, per_batch, interval) = (
        schedule.quota,
        schedule.deadline,
        schedule.per_batch,
        schedule.interval,
    );
    let mut frame = ProduceFrame::new(&spec.topic, spec.partition, b"");
    let record = vec![0x5au8; args.size];
    let clock = WallClock::now();
    let mut result = WorkerResult::new();
    let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(args.in_flight);
    let mut sent = 0u64;
    let mut next_intended = Instant::now();
    loop {
        while in_flight.len() < args.in_flight {
            let remaining = quota.map_or(u64::MAX, |q| q - sent);
            if remaining == 0
                || deadline.is_some_and(|d| Instant::now() >= d)
                || shared.stop.load(Ordering::Relaxed)
            {
                break;
            }
            let now = Instant::now();
            let intended = if interval.is_some() {
                next_intended
            } else {
                now
            };
            if intended > now {
                if !in_flight.is_empty() {
                    break;
                }
                std::thread::sleep(intended - now);
            }
            let messages = (per_batch as u64).min(remaining);
            frame.reset(&spec.topic, spec.partition, b"");
            for _ in 0..messages {
                frame.push(&record);
            }
            let correlation_id = client
                .send_frame(&mut frame, clock.unix_ns(intended))
                .map_err(|e| e.to_string())?;
            in_flight.push_back(InFlight {
                correlation_id,
                intended,
                messages,
            });
            sent += messages;
            if let Some(interval) = interval {
                next_intended += interval;
            }
        }
        let Some(oldest) = in_flight.pop_front() else {
            break;
        };
        client
            .expect(oldest.correlation_id)
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

/// Reads `partitions` round robin on one connection to the broker's main address.
pub fn consume(shared: Arc<Shared>, partitions: Vec<ConsumerSpec>) -> Result<WorkerResult, String> {
    let args = &shared.args;
    let mut client = Client::connect_timeout(shared.broker, shared.args.target.timeout())
        .map_err(|e| format!("consumer: {e}"))?;
    let mut offsets: Vec<u64> = partitions.iter().map(|p| p.offset).collect();
    let wait = if partitions.len() == 1 {
        Duration::from_millis(100)
    } else {
        Duration::from_millis(2)
    };
    let limits = Limits {
        max_key_bytes: u64::MAX,
        max_payload_bytes: u64::MAX,
    };
    let measure_from_unix_ns = WallClock::now().unix_ns(shared.measure_from);
    let mut result = WorkerResult::new();
    let mut idle_since = Instant::now();
    loop {
        let mut got = false;
        for (k, spec) in partitions.iter().enumerate() {
            let (topic, partition) = (&spec.topic, &spec.partition);
            let fetched = client
                .fetch(topic, *partition, offsets[k], 4 << 20, wait)
                .map_err(|e| format!("consumer on {topic}/{partition}: {e}"))?;
            let now = Instant::now();
            let now_unix_ns = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            for batch in &fetched.batches {
                let header = BatchHeader::decode(batch, &limits).map_err(|e| e.to_string())?;
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
                got = true;
            }
            if let Some(next) = fetched.next_offset() {
                offsets[k] = next;
            }
        }
        if got {
            idle_since = Instant::now();
        }
        if shared.consumer_done(idle_since) {
            return Ok(result);
        }
        if idle_since.elapsed() > Duration::from_secs(30) {
            return Err("consumer saw no data for 30 s".into());
        }
    }
}
