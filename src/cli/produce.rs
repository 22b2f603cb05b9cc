//! `pagurus produce`: records from stdin (one per line) or generated, packed into batches by
//! the client's [`Accumulator`] and sent with several produce requests in flight on one
//! connection.

use std::collections::VecDeque;
use std::io::BufRead;
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use clap::Args;

use crate::cli::{ANSWER_TIMEOUT, DEFAULT_BROKER, connect, describe};
use crate::client::blocking::Client;
use crate::client::produce::{Accumulator, BatchLimits};

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Broker address (host:port).
    #[arg(long, env = "PAGURUS_BROKER", default_value = DEFAULT_BROKER)]
    pub broker: String,
    /// Topic to append to; the broker creates an unknown topic with one partition.
    #[arg(long)]
    pub topic: String,
    /// Partition to append to.
    #[arg(long, default_value_t = 0)]
    pub partition: u32,
    /// Key of every batch (used by compaction); empty if not given.
    #[arg(long)]
    pub key: Option<String>,
    /// Generate this many records instead of reading lines from stdin.
    #[arg(long)]
    pub count: Option<u64>,
    /// Size in bytes of each generated record (with --count): its number, padded with '.'.
    #[arg(long, default_value_t = 100, requires = "count")]
    pub size: usize,
    /// Records per batch at most.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub batch: u32,
    /// Payload bytes per batch at most (a larger record still goes, alone in its batch).
    #[arg(long, default_value_t = 1024 * 1024)]
    pub batch_bytes: usize,
    /// Send a partial batch once its first record has waited this long, in ms (stdin input;
    /// a partial batch is also sent at end of input).
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Produce requests (one batch each) sent before the oldest must be acknowledged.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub in_flight: u64,
}

pub fn run(args: ProduceArgs) -> Result<(), String> {
    let client = connect(&args.broker, ANSWER_TIMEOUT)?;
    let started = Instant::now();
    let mut producer = Producer {
        client,
        topic: &args.topic,
        partition: args.partition,
        key: args.key.as_deref().unwrap_or("").as_bytes(),
        accumulator: Accumulator::new(BatchLimits {
            records_max: args.batch,
            bytes_max: args.batch_bytes,
            linger: Duration::from_millis(args.linger_ms),
        }),
        in_flight: args.in_flight as usize,
        pending: VecDeque::new(),
        acked_records: 0,
        acked_batches: 0,
        offsets: None,
    };
    let result = match args.count {
        Some(count) => produce_generated(&mut producer, count, args.size),
        None => produce_stdin(&mut producer),
    }
    .and_then(|()| producer.finish());
    if let Err(e) = result {
        return Err(format!(
            "{e} (after {} records were acknowledged)",
            producer.acked_records
        ));
    }
    let elapsed = started.elapsed();
    let rate = producer.acked_records as f64 / elapsed.as_secs_f64().max(1e-9);
    let offsets = producer
        .offsets
        .map_or(String::from("none"), |(first, last)| {
            format!("{first}..={last}")
        });
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    eprintln!(
        "produced {} in {} to {}/{}: offsets {offsets}, {:.3} s, {rate:.0} records/s",
        plural(producer.acked_records, "record", "records"),
        plural(producer.acked_batches, "batch", "batches"),
        args.topic,
        args.partition,
        elapsed.as_secs_f64(),
    );
    Ok(())
}

/// `count` records of `size` bytes: the record's number, then '.' up to the size.
fn produce_generated(producer: &mut Producer<'_>, count: u64, size: usize) -> Result<(), String> {
    let mut record = Vec::with_capacity(size);
    for i in 0..count {
        record.clear();
        record.extend(i.to_string().bytes().take(size));
        record.resize(size, b'.');
        producer.add(&record)?;
    }
    Ok(())
}

/// One record per line of stdin (without its `\n` or `\r\n`). A thread reads stdin so that
/// a partial batch can be sent when its linger time is up even while no line arrives.
fn produce_stdin(producer: &mut Producer<'_>) -> Result<(), String> {
    let (tx, rx) = mpsc::sync_channel::<std::io::Result<Vec<u8>>>(4096);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut line = Vec::new();
            match stdin.read_until(b'\n', &mut line) {
                Ok(0) => return,
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                    }
                    if tx.send(Ok(line)).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
    });
    loop {
        let line = match producer.deadline() {
            Some(deadline) => {
                match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                    Ok(line) => line,
                    Err(RecvTimeoutError::Timeout) => {
                        producer.flush()?;
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return Ok(()),
                }
            }
            None => match rx.try_recv() {
                Ok(line) => line,
                Err(TryRecvError::Empty) => {
                    // Nothing to send until input arrives: collect the acknowledgements, so
                    // a broker error shows up now rather than after the next line.
                    producer.drain()?;
                    match rx.recv() {
                        Ok(line) => line,
                        Err(_) => return Ok(()),
                    }
                }
                Err(TryRecvError::Disconnected) => return Ok(()),
            },
        };
        let line = line.map_err(|e| format!("reading stdin: {e}"))?;
        producer.add(&line)?;
    }
}

/// Packs records into batches (the client's sans-IO [`Accumulator`]) and keeps up to
/// `in_flight` produce requests outstanding.
struct Producer<'a> {
    client: Client,
    topic: &'a str,
    partition: u32,
    key: &'a [u8],
    accumulator: Accumulator,
    in_flight: usize,
    /// Correlation id and record count of each request sent and not yet acknowledged.
    pending: VecDeque<(u32, u32)>,
    acked_records: u64,
    acked_batches: u64,
    /// First and last offset acknowledged.
    offsets: Option<(u64, u64)>,
}

impl Producer<'_> {
    /// When the open batch must be sent, if there is one.
    fn deadline(&self) -> Option<Instant> {
        self.accumulator.next_deadline()
    }

    /// Adds a record to the open batch, sending it when it is full.
    fn add(&mut self, record: &[u8]) -> Result<(), String> {
        self.accumulator
            .push(self.topic, self.partition, self.key, record, Instant::now());
        self.send_ready()
    }

    /// Sends the open batch, if it has records.
    fn flush(&mut self) -> Result<(), String> {
        self.accumulator.close_all();
        self.send_ready()
    }

    /// Sends closed batches, each once a slot in flight is free.
    fn send_ready(&mut self) -> Result<(), String> {
        while let Some(mut frame) = self.accumulator.pop_ready() {
            while self.pending.len() >= self.in_flight {
                self.acknowledge()?;
            }
            let correlation_id = self
                .client
                .send_frame(&mut frame, 0)
                .map_err(|e| describe(&e))?;
            self.pending.push_back((correlation_id, frame.records()));
            self.accumulator.recycle(frame);
        }
        Ok(())
    }

    /// Waits for the oldest request's acknowledgement.
    fn acknowledge(&mut self) -> Result<(), String> {
        let Some((correlation_id, records)) = self.pending.pop_front() else {
            return Ok(());
        };
        self.client
            .expect(correlation_id)
            .map_err(|e| describe(&e))?;
        let (base, next) = self.client.reply().produced().map_err(|e| describe(&e))?;
        let last = next.saturating_sub(1);
        self.offsets = Some(match self.offsets {
            None => (base, last),
            Some((first, _)) => (first, last),
        });
        self.acked_records += u64::from(records);
        self.acked_batches += 1;
        Ok(())
    }

    /// Waits for every request in flight.
    fn drain(&mut self) -> Result<(), String> {
        while !self.pending.is_empty() {
            self.acknowledge()?;
        }
        Ok(())
    }

    /// Sends the last partial batch and waits for everything.
    fn finish(&mut self) -> Result<(), String> {
        self.flush()?;
        self.drain()
    }
}
