//! `pagurus bench`: drives a running broker with N producers and M consumers and reports
//! throughput and latency percentiles.
//!
//! Latency is measured without coordinated omission: with `--rate`, every batch has an
//! intended send time on a fixed schedule, and both its acknowledgement latency and its
//! end-to-end latency are measured from that intended time, so a stalled broker shows up as
//! latency rather than as a silently lower send rate. The batch header's timestamp carries
//! the intended time to the consumer (same machine, same clock).
//!
//! Producers and consumers run on the glommio client by default: `--threads` executor
//! threads, each driving its share of the producers and consumers as tasks, every one on
//! its own connection. `--client blocking` runs them on the blocking client instead, one
//! thread each, for comparison.
//!
//! - [`report`]: percentiles, `.hgrm` files, the SVG chart, JSON.
//! - [`broker_share`]: the broker's own share of the ack, from its metrics.
//! - [`machine`]: the machine's CPU time over the window, steal above all.
//! - [`kafka`]: the same load spoken in Kafka (`--protocol kafka`).

mod broker_share;
mod glommio;
mod kafka;
mod machine;
mod progress;
pub mod report;
mod window;
mod workers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;

use crate::bench::workers::{ConsumerSpec, ProducerSpec, WorkerResult};
use crate::cli::BrokerArgs;
use crate::client::blocking::Client;
use crate::client::routing::Routes;
use crate::protocol::native::{ErrorCode, TopicSettings};

/// Which client the bench drives the broker with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ClientKind {
    // Plain comments, not doc comments: documented values would switch `bench --help` to
    // clap's long layout, unlike every other subcommand's.
    // The glommio client: few threads, many connections each, requests pipelined.
    Glommio,
    // The blocking client: one thread per producer and per consumer.
    Blocking,
}

/// Which protocol the bench speaks to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    // Plain comments, as for `ClientKind`.
    // pagurus' native protocol.
    Native,
    // Kafka: idempotent producers (acks=all) and Fetch consumers, on each partition's leader.
    Kafka,
}

impl Protocol {
    /// Its name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Native => "native",
            Protocol::Kafka => "kafka",
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Protocol spoken to the broker: native, or kafka (idempotent producers with
    /// acks=all, one RecordBatch per batch, consumers fetching from each partition's
    /// leader; glommio client only). Topics are set up with the native protocol either way.
    #[arg(long, value_enum, default_value = "native")]
    pub protocol: Protocol,
    /// Producers, each on its own connection.
    #[arg(long, default_value_t = 4)]
    pub producers: usize,
    /// Consumers (0: none). The blocking client runs each on a thread that reads its share
    /// of the partitions round robin on one connection; the glommio client reads every
    /// partition on a connection of its own (to the owner core), all on one more thread.
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Client library driving the load: glommio (few threads, many connections each,
    /// requests pipelined) or blocking (one thread per producer and per consumer).
    #[arg(long, value_enum, default_value = "glommio")]
    pub client: ClientKind,
    /// Executor threads the glommio client's producers are spread over (its consumers run
    /// on one more).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Topics, named `<topic-prefix>-<i>`. They are scratch: one with another partition
    /// count is deleted and created again, and a run that produces deletes the topics it
    /// created when it ends (see --keep-topics).
    #[arg(long, default_value_t = 1)]
    pub topics: usize,
    /// Partitions per topic (1-4096).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub partitions: u32,
    /// Prefix of the topic names.
    #[arg(long, default_value = "bench")]
    pub topic_prefix: String,
    /// Keep the topics this run created (for a later --producers 0 --from earliest run).
    #[arg(long)]
    pub keep_topics: bool,
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
    /// Messages to produce in all, warm-up included (or to consume, with `--producers 0`).
    #[arg(long, conflicts_with = "duration")]
    pub count: Option<u64>,
    /// Seconds to produce for, warm-up included. Without --count or --duration a run
    /// lasts 10 s.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Seconds at the start whose messages and latencies the results leave out (the report
    /// gives both the messages measured and those sent in all).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Where consumers start: `latest` (what this run produces) or `earliest` (catch-up).
    #[arg(long, default_value = "latest")]
    pub from: String,
    /// Connect each producer (and glommio consumer) to the port of the core that owns its
    /// partition.
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
    /// Microseconds the glommio client's threads poll after their last work before they
    /// sleep, as the broker's cores do (`serve --idle-poll-us`); they are then bound to the
    /// CPUs this process may run on, round robin (glommio polls only on a bound executor).
    /// 0, the default, sleeps at once, as most clients do; 200 takes the client's own
    /// wake-ups out of the latencies (with `taskset`, to keep it off the broker's CPUs).
    #[arg(long, default_value_t = 0, value_parser = crate::config::parse_idle_poll_us)]
    pub idle_poll_us: u64,
    /// The broker's `--metrics-listen` address (HOST:PORT): the report then adds the
    /// broker's own share of the produce ack (its `pagurus_produce_ack_duration_seconds`
    /// over the measured window, estimated from its buckets), to set against the ack
    /// latency the client measures.
    #[arg(long, value_name = "ADDR")]
    pub broker_metrics: Option<String>,
    #[command(flatten)]
    pub target: BrokerArgs,
}

/// What the workers share.
pub struct Shared {
    pub args: BenchArgs,
    /// `--broker`, resolved.
    pub broker: SocketAddr,
    pub start: Instant,
    pub measure_from: Instant,
    pub produced: AtomicU64,
    pub consumed: AtomicU64,
    /// Producers still running.
    pub producers_running: AtomicUsize,
    pub stop: AtomicBool,
}

impl Shared {
    pub fn producer_finished(&self) {
        self.producers_running.fetch_sub(1, Ordering::AcqRel);
    }

    /// Whether a consumer can stop: every producer finished and everything produced was
    /// consumed; or, in a consume-only run, the count or duration was reached, or nothing
    /// new came for 2 s.
    pub fn consumer_done(&self, idle_since: Instant) -> bool {
        let args = &self.args;
        let consumed = self.consumed.load(Ordering::Relaxed);
        if args.producers == 0 {
            args.count.is_some_and(|c| consumed >= c)
                || args
                    .duration
                    .is_some_and(|d| self.start.elapsed().as_secs_f64() >= d)
                || idle_since.elapsed() > Duration::from_secs(2)
        } else {
            self.producers_running.load(Ordering::Acquire) == 0
                && consumed >= self.produced.load(Ordering::Relaxed)
        }
    }
}

/// How one producer paces its batches.
pub struct BatchSchedule {
    /// Messages it sends in all, with `--count`.
    pub quota: Option<u64>,
    /// When it stops, with `--duration`.
    pub deadline: Option<Instant>,
    /// Messages per batch.
    pub per_batch: usize,
    /// Time between intended send times, with `--rate`.
    pub interval: Option<Duration>,
}

/// Producer `index`'s share of the count and rate.
pub fn batch_schedule(args: &BenchArgs, index: usize) -> BatchSchedule {
    let producers = args.producers as u64;
    let rate = args.rate as f64 / producers as f64;
    let per_batch = if rate > 0.0 && args.linger_ms > 0 {
        // At a low rate a batch would take longer than the linger to fill: send what
        // arrived within the linger instead.
        ((rate * args.linger_ms as f64 / 1000.0).ceil() as usize).clamp(1, args.batch)
    } else {
        args.batch
    };
    BatchSchedule {
        quota: args
            .count
            .map(|c| c / producers + u64::from((index as u64) < c % producers)),
        deadline: args
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d)),
        per_batch,
        interval: (rate > 0.0).then(|| Duration::from_secs_f64(per_batch as f64 / rate)),
    }
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

/// Seconds a run lasts when neither `--count` nor `--duration` is given: long enough for
/// steady rates past the default one-second warm-up, short enough to just try.
pub const DEFAULT_DURATION_S: f64 = 10.0;

pub fn run(mut args: BenchArgs) -> Result<(), String> {
    if args.count.is_none() && args.duration.is_none() {
        args.duration = Some(DEFAULT_DURATION_S);
    }
    if args.batch == 0 || args.in_flight == 0 {
        return Err("--batch and --in-flight must be at least 1".into());
    }
    if args.target.security.any() {
        // Its load connections are plain and anonymous: a login or TLS on one admin
        // connection would measure nothing of them.
        return Err(
            "bench connects without TLS or a login: run it against a PLAINTEXT listener".into(),
        );
    }
    if args.protocol == Protocol::Kafka && args.client == ClientKind::Blocking {
        return Err("--protocol kafka runs on the glommio client (--client glommio)".into());
    }
    let broker = resolve(&args.target)?;
    let mut admin = args.target.connect(Duration::ZERO)?;
    let created = prepare_topics(&mut admin, &args)?;
    let metadata = admin.metadata(&[]).map_err(|e| e.to_string())?;
    let routes = Routes::new(broker, &metadata);
    let used = used_partitions(&args);
    // Kafka workers connect to each partition's leader as Kafka's Metadata names it.
    let leaders = match args.protocol {
        Protocol::Kafka if args.shard_aware => kafka::leaders(broker, args.target.timeout(), &used)
            .map_err(|e| format!("kafka metadata from {broker}: {e}"))?,
        _ => Default::default(),
    };
    let route = |topic: &str, partition: u32| match leaders.get(&(topic.to_string(), partition)) {
        Some(leader) => *leader,
        None if args.shard_aware => routes.address(topic, partition),
        None => broker,
    };

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
        consumer_starts.push(ConsumerSpec {
            addr: route(topic, *partition),
            topic: topic.clone(),
            partition: *partition,
            offset,
        });
    }
    drop(admin);

    let start = Instant::now();
    let shared = Arc::new(Shared {
        broker,
        measure_from: start + Duration::from_secs_f64(args.warmup.max(0.0)),
        start,
        produced: AtomicU64::new(0),
        consumed: AtomicU64::new(0),
        producers_running: AtomicUsize::new(args.producers),
        stop: AtomicBool::new(false),
        args: args.clone(),
    });

    let producer_specs: Vec<ProducerSpec> = (0..args.producers)
        .map(|index| {
            let (topic, partition) = assignment(&args, index);
            ProducerSpec {
                index,
                addr: route(&topic, partition),
                topic,
                partition,
            }
        })
        .collect();
    // Consumer j reads every partition k with k % consumers == j.
    let consumer_specs: Vec<Vec<ConsumerSpec>> = (0..args.consumers)
        .map(|j| {
            consumer_starts
                .iter()
                .enumerate()
                .filter(|(k, _)| k % args.consumers == j)
                .map(|(_, s)| s.clone())
                .collect::<Vec<_>>()
        })
        .filter(|mine| !mine.is_empty())
        .collect();

    let window = args
        .broker_metrics
        .as_deref()
        .map(|addr| broker_share::Window::open(addr, shared.measure_from));
    let machine_window = machine::Window::open(shared.measure_from);
    let progress = progress::Progress::new(&args);
    let results = match args.client {
        ClientKind::Blocking => run_blocking(&shared, producer_specs, consumer_specs, &progress),
        ClientKind::Glommio => run_glommio(&shared, producer_specs, consumer_specs, &progress),
    };
    // Closed as the workers end: deleting the topics below is not part of the run.
    let machine_cpu = machine_window.close();
    progress.finish();
    if args.producers > 0 && !args.keep_topics {
        delete_topics(&args.target, &created);
    }
    let broker_ack = window.map(broker_share::Window::close);
    let (producer_results, consumer_results) = results?;
    let mut report = report::Report::build(&shared, &producer_results, &consumer_results);
    report.broker_ack = broker_ack;
    report.machine_cpu = Some(machine_cpu);
    report.print(&args);
    if let Some(dir) = &args.out {
        report
            .write_files(dir, &args.label)
            .map_err(|e| format!("cannot write to {}: {e}", dir.display()))?;
    }
    consume_only_shortfall(&args, shared.consumed.load(Ordering::Relaxed))
}

/// A run without producers that stopped before `--count` messages: it read everything there
/// was (nothing new came for 2 s), and a rate over fewer messages than asked is not the
/// measurement that was asked for.
fn consume_only_shortfall(args: &BenchArgs, consumed: u64) -> Result<(), String> {
    match args.count {
        Some(count) if args.producers == 0 && consumed < count => Err(format!(
            "consumed {consumed} of --count {count} messages: nothing new arrived for 2 s"
        )),
        _ => Ok(()),
    }
}

/// The first address `--broker` names (the bench's workers connect to one address).
fn resolve(target: &BrokerArgs) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let address = target.address();
    address
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve --broker {address}: {e}"))?
        .next()
        .ok_or_else(|| format!("--broker {address} resolves to no address"))
}

/// Creates the bench's topics with `--partitions` partitions. A run that produces deletes
/// and creates again one that has another partition count (a bench topic is scratch, and
/// a count left from an earlier run would fail it or skew it); a consume-only run reads
/// what is there. Returns the topics created.
fn prepare_topics(admin: &mut Client, args: &BenchArgs) -> Result<Vec<String>, String> {
    let names: Vec<String> = (0..args.topics.max(1))
        .map(|t| format!("{}-{t}", args.topic_prefix))
        .collect();
    let wanted: Vec<&str> = names.iter().map(String::as_str).collect();
    let metadata = admin.metadata(&wanted).map_err(|e| e.to_string())?;
    let mut created = Vec::new();
    for name in &names {
        let existing = metadata
            .topics
            .iter()
            .find(|t| &t.name == name && t.error == 0)
            .map(|t| t.partitions.len() as u32);
        match existing {
            Some(n) if n == args.partitions => continue,
            Some(n) if args.producers == 0 => {
                if n < args.partitions {
                    return Err(format!(
                        "topic {name} has {n} partitions, fewer than --partitions {}",
                        args.partitions
                    ));
                }
                continue;
            }
            None if args.producers == 0 => {
                return Err(format!(
                    "topic {name} does not exist (a run without producers reads existing topics)"
                ));
            }
            Some(n) => {
                eprintln!(
                    "bench: deleting topic {name} ({n} partitions) to create it with {}",
                    args.partitions
                );
                admin
                    .delete_topic(name)
                    .map_err(|e| format!("cannot delete topic {name}: {e}"))?;
            }
            None => {}
        }
        let settings = TopicSettings {
            partitions: args.partitions,
            ..Default::default()
        };
        match admin.create_topic(name, settings) {
            Ok(()) => created.push(name.clone()),
            // Another bench made it since the metadata was read: use it.
            Err(e) if e.code() == Some(ErrorCode::TopicExists) => {}
            Err(e) => return Err(format!("cannot create topic {name}: {e}")),
        }
    }
    Ok(created)
}

/// Deletes the topics the run created; a failure is reported, not fatal (the results
/// stand).
fn delete_topics(target: &BrokerArgs, topics: &[String]) {
    let mut admin = match target.connect(Duration::ZERO) {
        Ok(admin) => admin,
        Err(e) => {
            eprintln!("bench: cannot delete the bench topics: {e}");
            return;
        }
    };
    for name in topics {
        if let Err(e) = admin.delete_topic(name) {
            eprintln!("bench: cannot delete topic {name}: {e}");
        }
    }
}

pub type Results = (Vec<WorkerResult>, Vec<WorkerResult>);

/// Waits for a thread, ticking the progress bar.
fn join<T>(
    handle: std::thread::JoinHandle<Result<T, String>>,
    shared: &Shared,
    progress: &progress::Progress,
) -> Result<T, String> {
    while !handle.is_finished() {
        progress.tick(shared);
        std::thread::sleep(Duration::from_millis(100));
    }
    handle
        .join()
        .map_err(|_| "a bench thread panicked".to_string())?
}

fn run_blocking(
    shared: &Arc<Shared>,
    producers: Vec<ProducerSpec>,
    consumers: Vec<Vec<ConsumerSpec>>,
    progress: &progress::Progress,
) -> Result<Results, String> {
    let producers: Vec<_> = producers
        .into_iter()
        .map(|spec| {
            let shared = Arc::clone(shared);
            std::thread::spawn(move || workers::produce(shared, spec))
        })
        .collect();
    let consumers: Vec<_> = consumers
        .into_iter()
        .map(|mine| {
            let shared = Arc::clone(shared);
            std::thread::spawn(move || workers::consume(shared, mine))
        })
        .collect();
    let mut results = (Vec::new(), Vec::new());
    for handle in producers {
        results.0.push(join(handle, shared, progress)?);
    }
    for handle in consumers {
        results.1.push(join(handle, shared, progress)?);
    }
    Ok(results)
}

fn run_glommio(
    shared: &Arc<Shared>,
    producers: Vec<ProducerSpec>,
    consumers: Vec<Vec<ConsumerSpec>>,
    progress: &progress::Progress,
) -> Result<Results, String> {
    // Consumers get a thread of their own: on one thread with the producers, every fetch
    // answer would delay acknowledgements (and the other way round), which a real
    // deployment, with producers and consumers in different processes, does not see.
    let threads = shared.args.threads.max(1);
    let mut work: Vec<(Vec<ProducerSpec>, Vec<ConsumerSpec>)> = vec![Default::default(); threads];
    for (i, spec) in producers.into_iter().enumerate() {
        work[i % threads].0.push(spec);
    }
    let consumers: Vec<ConsumerSpec> = consumers.into_iter().flatten().collect();
    if !consumers.is_empty() {
        work.push((Vec::new(), consumers));
    }
    let cpus: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .into_iter()
        .map(|id| id.id)
        .collect();
    let handles: Vec<_> = work
        .into_iter()
        .enumerate()
        .map(|(t, (producers, consumers))| {
            glommio::thread(
                format!("bench-{t}"),
                cpus.get(t % cpus.len().max(1)).copied(),
                Arc::clone(shared),
                producers,
                consumers,
            )
        })
        .collect();
    let mut results = (Vec::new(), Vec::new());
    for handle in handles {
        let (produced, consumed) = join(handle, shared, progress)?;
        results.0.extend(produced);
        results.1.extend(consumed);
    }
    Ok(results)
}
