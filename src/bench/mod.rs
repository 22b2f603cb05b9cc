//! `pagurus bench`: drives a running broker with N producers and M consumers and reports
//! throughput and latency percentiles.
//!
//! Latency is measured without coordinated omission: with `--rate`, every batch has an
//! intended send time on a fixed schedule, and both its acknowledgement latency and its
//! end-to-end latency are measured from that intended time, so a stalled broker shows up as
//! latency rather than as a silently lower send rate. The batch header's timestamp carries
//! the intended time to the consumer (same machine, same clock).
//!
//! - [`report`]: percentiles, `.hgrm` files, the SVG chart, JSON.

pub mod report;
mod workers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;

use crate::client::blocking::Client;
use crate::protocol::native::TopicSettings;
use crate::shard::routing::partition_owner;

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Broker address.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub broker: SocketAddr,
    /// Producer connections (one thread each).
    #[arg(long, default_value_t = 4)]
    pub producers: usize,
    /// Consumer connections (one thread each).
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Topics, named `<topic-prefix>-<i>`.
    #[arg(long, default_value_t = 1)]
    pub topics: usize,
    /// Partitions per topic.
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    #[arg(long, default_value = "bench")]
    pub topic_prefix: String,
    /// Bytes per message.
    #[arg(long, default_value_t = 100)]
    pub size: usize,
    /// Messages per batch.
    #[arg(long, default_value_t = 100)]
    pub batch: usize,
    /// At a fixed rate, send a partial batch once its first message waited this long.
    #[arg(long, default_value_t = 0)]
    pub linger_ms: u64,
    /// Batches in flight per producer (pipelined on one connection).
    #[arg(long, default_value_t = 8)]
    pub in_flight: usize,
    /// Target rate in messages per second over all producers (open loop); 0 = as fast as
    /// the broker acknowledges.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// Messages to produce in all (or to consume, with `--producers 0`).
    #[arg(long, conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Seconds to produce for.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds at the start whose latencies and counts are left out.
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Where consumers start: `latest` (what this run produces) or `earliest` (catch-up).
    #[arg(long, default_value = "latest")]
    pub from: String,
    /// Connect each producer to the port of the core that owns its partition.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub shard_aware: bool,
    /// Print one JSON object instead of the text report.
    #[arg(long)]
    pub json: bool,
    /// Write `.hgrm` percentile files and an SVG chart here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Label for the files written to `--out`.
    #[arg(long, default_value = "bench")]
    pub label: String,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

/// What the workers share.
pub struct Shared {
    pub args: BenchArgs,
    pub start: Instant,
    pub measure_from: Instant,
    pub produced: AtomicU64,
    pub consumed: AtomicU64,
    pub producers_done: AtomicBool,
    pub stop: AtomicBool,
}

/// Latency histograms in nanoseconds, 1 ns .. 10 min, 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000_000, 3).expect("valid bounds")
}

/// The partitions the run uses: producer `i` writes `(topic i % T, partition (i / T) % P)`.
pub fn assignment(args: &BenchArgs, producer: usize) -> (String, u32) {
    let topics = args.topics.max(1);
    (
        format!("{}-{}", args.topic_prefix, producer % topics),
        ((producer / topics) as u32) % args.partitions.max(1),
    )
}

/// Every (topic, partition) some producer writes, or all of them when there are none.
fn used_partitions(args: &BenchArgs) -> Vec<(String, u32)> {
    let mut used: Vec<(String, u32)> = if args.producers == 0 {
        (0..args.topics.max(1))
            .flat_map(|t| {
                (0..args.partitions.max(1)).map(move |p| (format!("{}-{t}", args.topic_prefix), p))
            })
            .collect()
    } else {
        (0..args.producers).map(|i| assignment(args, i)).collect()
    };
    used.sort();
    used.dedup();
    used
}

pub fn run(args: BenchArgs) -> Result<(), String> {
    if args.count.is_none() && args.duration.is_none() {
        return Err("give --count N or --duration S".into());
    }
    if args.batch == 0 || args.in_flight == 0 {
        return Err("--batch and --in-flight must be at least 1".into());
    }
    let mut admin =
        Client::connect(args.broker).map_err(|e| format!("cannot reach {}: {e}", args.broker))?;
    for t in 0..args.topics.max(1) {
        let name = format!("{}-{t}", args.topic_prefix);
        let settings = TopicSettings {
            partitions: args.partitions.max(1),
            ..Default::default()
        };
        match admin.create_topic(&name, settings) {
            Ok(()) => {}
            Err(e) if e.code() == Some(crate::protocol::native::ErrorCode::TopicExists) => {}
            Err(e) => return Err(format!("cannot create topic {name}: {e}")),
        }
    }
    let metadata = admin.metadata(&[]).map_err(|e| e.to_string())?;
    let cores = metadata.core_ports.len().max(1);
    let core_ports = metadata.core_ports.clone();

    let used = used_partitions(&args);
    let mut consumer_starts = Vec::new();
    for (topic, partition) in &used {
        let spec = if args.from == "earliest" {
            crate::protocol::native::OffsetSpec::Earliest
        } else {
            crate::protocol::native::OffsetSpec::Latest
        };
        let offset = admin
            .list_offsets(topic, *partition, spec)
            .map_err(|e| e.to_string())?;
        consumer_starts.push((topic.clone(), *partition, offset));
    }
    drop(admin);

    let start = Instant::now();
    let shared = Arc::new(Shared {
        measure_from: start + Duration::from_secs_f64(args.warmup.max(0.0)),
        start,
        produced: AtomicU64::new(0),
        consumed: AtomicU64::new(0),
        producers_done: AtomicBool::new(args.producers == 0),
        stop: AtomicBool::new(false),
        args: args.clone(),
    });

    let mut producers = Vec::new();
    for i in 0..args.producers {
        let (topic, partition) = assignment(&args, i);
        let addr = match core_ports.get(partition_owner(&topic, partition, cores)) {
            Some(&port) if args.shard_aware && port != 0 => SocketAddr::new(args.broker.ip(), port),
            _ => args.broker,
        };
        let shared = Arc::clone(&shared);
        producers.push(std::thread::spawn(move || {
            workers::produce(shared, i, addr, topic, partition)
        }));
    }
    let mut consumers = Vec::new();
    for j in 0..args.consumers {
        let mine: Vec<(String, u32, u64)> = consumer_starts
            .iter()
            .enumerate()
            .filter(|(k, _)| k % args.consumers == j)
            .map(|(_, s)| s.clone())
            .collect();
        if mine.is_empty() {
            continue;
        }
        let shared = Arc::clone(&shared);
        consumers.push(std::thread::spawn(move || workers::consume(shared, mine)));
    }

    let progress = report::Progress::new(&args);
    let mut producer_results = Vec::new();
    for handle in producers {
        while !handle.is_finished() {
            progress.tick(&shared);
            std::thread::sleep(Duration::from_millis(100));
        }
        producer_results.push(
            handle
                .join()
                .map_err(|_| "a producer panicked".to_string())??,
        );
    }
    shared.producers_done.store(true, Ordering::Release);
    let mut consumer_results = Vec::new();
    for handle in consumers {
        while !handle.is_finished() {
            progress.tick(&shared);
            std::thread::sleep(Duration::from_millis(100));
        }
        consumer_results.push(
            handle
                .join()
                .map_err(|_| "a consumer panicked".to_string())??,
        );
    }
    progress.finish();
    let report = report::Report::build(&args, &producer_results, &consumer_results);
    report.print(&args);
    if let Some(dir) = &args.out {
        report
            .write_files(dir, &args.label)
            .map_err(|e| format!("cannot write to {}: {e}", dir.display()))?;
    }
    Ok(())
}
