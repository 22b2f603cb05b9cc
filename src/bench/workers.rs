//! Producer and consumer threads of the bench, each on its own connection.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

use crate::bench::{Shared, histogram};
use crate::client::blocking::Client;
use crate::limits::Limits;
use crate::protocol::payload::push_record;
use crate::protocol::record::{BatchHeader, encode_batch};

/// What one worker measured inside the measurement window.
pub struct WorkerResult {
    pub latency_ns: Histogram<u64>,
    pub messages: u64,
    pub payload_bytes: u64,
    /// First and last event inside the window.
    pub window: Option<(Instant, Instant)>,
}

impl WorkerResult {
    fn new() -> WorkerResult {
        WorkerResult {
            latency_ns: histogram(),
            messages: 0,
            payload_bytes: 0,
            window: None,
        }
    }

    fn count(&mut self, at: Instant, messages: u64, payload_bytes: u64) {
        self.messages += messages;
        self.payload_bytes += payload_bytes;
        self.window = Some(match self.window {
            None => (at, at),
            Some((first, _)) => (first, at),
        });
    }
}

/// Maps `Instant`s to nanoseconds since the epoch, for batch timestamps.
struct WallClock {
    instant: Instant,
    unix_ns: u64,
}

impl WallClock {
    fn now() -> WallClock {
        let unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        WallClock {
            instant: Instant::now(),
            unix_ns,
        }
    }

    fn unix_ns(&self, at: Instant) -> u64 {
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

pub fn produce(
    shared: Arc<Shared>,
    index: usize,
    addr: SocketAddr,
    topic: String,
    partition: u32,
) -> Result<WorkerResult, String> {
    let args = &shared.args;
    let mut client = Client::connect(addr).map_err(|e| format!("producer {index}: {e}"))?;
    let producers = args.producers as u64;
    let quota = args
        .count
        .map(|c| c / producers + u64::from((index as u64) < c % producers));
    let deadline = args
        .duration
        .map(|d| shared.start + Duration::from_secs_f64(d));
    let rate = args.rate as f64 / producers as f64;
    let per_batch = if rate > 0.0 && args.linger_ms > 0 {
        // At a low rate a batch would take longer than the linger to fill: send what
        // arrived within the linger instead.
        ((rate * args.linger_ms as f64 / 1000.0).ceil() as usize).clamp(1, args.batch)
    } else {
        args.batch
    };
    let interval = (rate > 0.0).then(|| Duration::from_secs_f64(per_batch as f64 / rate));
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
            let mut payload = Vec::with_capacity(messages as usize * (args.size + 4));
            for _ in 0..messages {
                push_record(&mut payload, &record);
            }
            let batch = encode_batch(clock.unix_ns(intended), b"", &payload, messages as u32);
            let correlation_id = client
                .send_produce(&topic, partition, &[batch])
                .map_err(|e| format!("producer {index}: {e}"))?;
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
            .map_err(|e| format!("producer {index}: {e}"))?;
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

pub fn consume(
    shared: Arc<Shared>,
    partitions: Vec<(String, u32, u64)>,
) -> Result<WorkerResult, String> {
    let args = &shared.args;
    let mut client = Client::connect(args.broker).map_err(|e| format!("consumer: {e}"))?;
    let mut offsets: Vec<u64> = partitions.iter().map(|p| p.2).collect();
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
        for (k, (topic, partition, _)) in partitions.iter().enumerate() {
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
        let consumed = shared.consumed.load(Ordering::Relaxed);
        let done = if args.producers == 0 {
            args.count.is_some_and(|c| consumed >= c)
                || args
                    .duration
                    .is_some_and(|d| shared.start.elapsed().as_secs_f64() >= d)
                || idle_since.elapsed() > Duration::from_secs(2)
        } else {
            shared.producers_done.load(Ordering::Acquire)
                && consumed >= shared.produced.load(Ordering::Relaxed)
        };
        if done {
            return Ok(result);
        }
        if idle_since.elapsed() > Duration::from_secs(30) {
            return Err("consumer saw no data for 30 s".into());
        }
    }
}
