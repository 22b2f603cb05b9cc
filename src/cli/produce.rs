//! `pagurus produce`: records from stdin (one per line, optionally `key<SEP>value`) or
//! generated, packed into batches by the client's [`Accumulator`] and sent with several
//! produce requests in flight on one connection.
//!
//! A lost connection (the broker stopped or restarted) is re-established for up to
//! `--reconnect-ms`; the batches that were in flight then are sent again, because the
//! broker may or may not have stored them: delivery is at least once, and such a batch can
//! be stored twice. A broker in a clean stop answers `ShuttingDown` to a batch it did not
//! store; the producer then collects the answers to the batches sent after it (a stopping
//! broker answers every request it read), and sends again only the refused and unanswered
//! ones on a new connection, so a clean stop stores nothing twice. Nothing read is dropped
//! silently: a failure says how many records were acknowledged and how many were in doubt.

use std::collections::VecDeque;
use std::io::BufRead;
use std::net::SocketAddr;
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use clap::Args;

use crate::cli::routed::{reconnect_at, routed};
use crate::cli::{
    BrokerArgs, ReconnectArgs, broker_stopping, connection_lost, describe, on_interrupt,
};
use crate::client::ClientError;
use crate::client::produce::{Accumulator, BatchLimits, ProduceFrame};
use crate::client::routing::{NOT_HERE_RETRIES, Routed};
use crate::protocol::native::{ErrorCode, MetadataResponse};

#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Topic to append to; the broker creates an unknown topic with one partition.
    #[arg(long)]
    pub topic: String,
    /// Partition to append to. Without it, a keyed record goes to the partition of its
    /// key's hash and unkeyed records spread over the topic's partitions.
    #[arg(long)]
    pub partition: Option<u32>,
    /// Key of every record (used by compaction); empty if not given.
    #[arg(long, conflicts_with = "key_separator")]
    pub key: Option<String>,
    /// Read each line as KEY<SEP>VALUE (split at the first SEP); a line without SEP has an
    /// empty key. A batch has one key, so a change of key on a partition starts a new
    /// batch; each partition keeps the input order.
    #[arg(long, value_name = "SEP", conflicts_with = "count")]
    pub key_separator: Option<String>,
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
    /// Longest line (record) read from stdin; a longer one stops the run before it is
    /// read whole. Keep it at or under the broker's --max-payload-bytes.
    #[arg(long, default_value_t = 50 * 1024 * 1024)]
    pub max_line_bytes: usize,
    /// Send a partial batch once its first record has waited this long, in ms (stdin input;
    /// a partial batch is also sent at end of input).
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Produce requests (one batch each) sent before the oldest must be acknowledged.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    pub in_flight: u64,
    #[command(flatten)]
    pub target: BrokerArgs,
    #[command(flatten)]
    pub reconnect: ReconnectArgs,
}

/// Open batches at most (one per partition): past it, all are sent, so a topic with very
/// many partitions cannot make the producer hold an unbounded number of batches.
const OPEN_BATCHES_MAX: usize = 1024;

/// Records acknowledged so far, for the line a Ctrl-C'd run writes.
static ACKED_RECORDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

pub fn run(args: ProduceArgs) -> Result<(), String> {
    let topic = args.topic.clone();
    on_interrupt(move || {
        let acked = ACKED_RECORDS.load(std::sync::atomic::Ordering::Relaxed);
        format!(
            "{acked} records acknowledged to {topic}; any sent after them may or may not be stored"
        )
    });
    // Routed: on a cluster, a partition of another node goes to that node.
    let (routed, metadata) = routed(&args.target, Duration::ZERO, &[&args.topic])?;
    let partitions = match args.partition {
        Some(_) => 1,
        None => partition_count(&metadata, &args.topic),
    };
    let started = Instant::now();
    let mut producer = Producer {
        routed,
        moved_tries: 0,
        args: &args,
        partitions,
        accumulator: Accumulator::new(BatchLimits {
            records_max: args.batch,
            bytes_max: args.batch_bytes,
            linger: Duration::from_millis(args.linger_ms),
        }),
        pending: VecDeque::new(),
        acked_records: 0,
        acked_batches: 0,
        resent_batches: 0,
        refused_batches: 0,
        retried_batches: 0,
        partitions_written: std::collections::BTreeSet::new(),
        offsets: None,
    };
    let result = match args.count {
        Some(count) => produce_generated(&mut producer, count, args.size),
        None => produce_stdin(&mut producer),
    }
    .and_then(|()| producer.finish());
    if let Err(e) = result {
        let in_doubt: u64 = producer
            .pending
            .iter()
            .map(|(_, _, f)| u64::from(f.records()))
            .sum();
        return Err(format!(
            "{e} ({} records acknowledged; {in_doubt} sent and not acknowledged, which may or may not be stored; {} not sent)",
            producer.acked_records,
            producer.accumulator.open_records()
        ));
    }
    let elapsed = started.elapsed();
    let rate = producer.acked_records as f64 / elapsed.as_secs_f64().max(1e-9);
    let offsets = match (producer.offsets, producer.partitions_written.len()) {
        (Some((first, last)), 1) => format!("offsets {first}..={last}"),
        (None, _) => String::from("offsets none"),
        (Some(_), n) => format!("{n} partitions"),
    };
    let partition = match (args.partition, producer.partitions_written.iter().next()) {
        (Some(p), _) => p.to_string(),
        (None, Some(p)) if producer.partitions_written.len() == 1 => p.to_string(),
        _ => String::from("*"),
    };
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let mut resent = String::new();
    if producer.retried_batches > 0 {
        resent.push_str(&format!(
            "; {} not stored by the stopping broker sent again",
            plural(producer.retried_batches, "batch", "batches")
        ));
    }
    if producer.resent_batches > 0 {
        resent.push_str(&format!(
            "; {} re-sent after reconnecting (may be stored twice)",
            plural(producer.resent_batches, "batch", "batches")
        ));
    }
    eprintln!(
        "produced {} in {} to {}/{partition}: {offsets}, {:.3} s, {rate:.0} records/s{resent}",
        plural(producer.acked_records, "record", "records"),
        plural(producer.acked_batches, "batch", "batches"),
        args.topic,
        elapsed.as_secs_f64(),
    );
    Ok(())
}

/// The topic's partition count, or 1 for a topic that does not exist yet (the first
/// produce creates it with one partition).
fn partition_count(metadata: &MetadataResponse, topic: &str) -> u32 {
    metadata
        .topics
        .iter()
        .find(|t| t.name == topic && t.error == 0)
        .map_or(1, |t| (t.partitions.len() as u32).max(1))
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

/// Reads one line (without its `\n` or `\r\n`) of at most `max` bytes; `None` at the end.
/// A longer line is an error before more than `max + 1` of its bytes are held.
fn read_line(
    input: &mut impl BufRead,
    max: usize,
    number: u64,
) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut line = Vec::new();
    let limit = u64::try_from(max).unwrap_or(u64::MAX).saturating_add(2);
    loop {
        match input.by_ref().take(limit).read_until(b'\n', &mut line) {
            Ok(0) if line.is_empty() => return Ok(None),
            Ok(_) => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    if line.last() == Some(&b'\n') {
        line.pop();
        if line.last() == Some(&b'\r') {
            line.pop();
        }
    }
    if line.len() > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("line {number} is longer than --max-line-bytes ({max} bytes)"),
        ));
    }
    Ok(Some(line))
}

/// One record per line of stdin. A thread reads stdin so that a partial batch can be sent
/// when its linger time is up even while no line arrives.
fn produce_stdin(producer: &mut Producer<'_>) -> Result<(), String> {
    let (tx, rx) = mpsc::sync_channel::<std::io::Result<Vec<u8>>>(4096);
    let max = producer.args.max_line_bytes;
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        for number in 1.. {
            match read_line(&mut stdin, max, number) {
                Ok(None) => return,
                Ok(Some(line)) => {
                    if tx.send(Ok(line)).is_err() {
                        return;
                    }
                }
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
/// `--in-flight` produce requests outstanding.
struct Producer<'a> {
    /// The connections: the bootstrap one, and one per other node written to.
    routed: Routed,
    /// Route refreshes in a row that a `NotHere` caused (bounded by NOT_HERE_RETRIES).
    moved_tries: u32,
    args: &'a ProduceArgs,
    /// Partitions of the topic (1 with --partition).
    partitions: u32,
    accumulator: Accumulator,
    /// Connection, correlation id and frame of each request sent and not yet
    /// acknowledged, oldest first; kept whole, to be sent again on a new connection.
    pending: VecDeque<(SocketAddr, u32, ProduceFrame)>,
    acked_records: u64,
    acked_batches: u64,
    /// Batches sent again after a lost connection: they may be stored twice.
    resent_batches: u64,
    /// Oldest batches in flight known refused (`ShuttingDown`), not yet sent again.
    refused_batches: u64,
    /// Batches sent again after a `ShuttingDown`: stored once.
    retried_batches: u64,
    partitions_written: std::collections::BTreeSet<u32>,
    /// First and last offset acknowledged (meaningful for one partition).
    offsets: Option<(u64, u64)>,
}

impl Producer<'_> {
    /// When the open batch must be sent, if there is one.
    fn deadline(&self) -> Option<Instant> {
        self.accumulator.next_deadline()
    }

    /// Adds a record (a line, split into key and value with --key-separator) to its
    /// batch, sending the batches that are full.
    fn add(&mut self, line: &[u8]) -> Result<(), String> {
        let (key, value) = match &self.args.key_separator {
            Some(sep) => split_key(line, sep.as_bytes()),
            None => (self.args.key.as_deref().unwrap_or("").as_bytes(), line),
        };
        let partition = match self.args.partition {
            Some(partition) => partition,
            None => self
                .accumulator
                .partition_for(&self.args.topic, key, self.partitions),
        };
        self.accumulator
            .push(&self.args.topic, partition, key, value, Instant::now());
        if self.accumulator.open_batches() > OPEN_BATCHES_MAX {
            self.accumulator.close_all();
        }
        self.send_ready()
    }

    /// Sends the open batches.
    fn flush(&mut self) -> Result<(), String> {
        self.accumulator.close_all();
        self.send_ready()
    }

    /// Sends closed batches, each once a slot in flight is free.
    fn send_ready(&mut self) -> Result<(), String> {
        while let Some(frame) = self.accumulator.pop_ready() {
            while self.pending.len() >= self.args.in_flight as usize {
                self.acknowledge()?;
            }
            self.send(frame)?;
        }
        Ok(())
    }

    /// Sends a batch to its partition's owner (its node's connection).
    fn send(&mut self, mut frame: ProduceFrame) -> Result<(), String> {
        let addr = self.routed.address(&self.args.topic, frame.partition());
        let sent = self
            .routed
            .client_at(addr)
            .and_then(|client| client.send_frame(&mut frame, 0));
        match sent {
            Ok(correlation_id) => self.pending.push_back((addr, correlation_id, frame)),
            Err(e) if connection_lost(&e) => {
                self.pending.push_back((addr, 0, frame));
                self.reconnect(addr, &e)?;
            }
            Err(e) => return Err(describe(&e)),
        }
        Ok(())
    }

    /// Waits for the oldest request's acknowledgement.
    fn acknowledge(&mut self) -> Result<(), String> {
        loop {
            let Some(&(addr, correlation_id, _)) = self.pending.front() else {
                return Ok(());
            };
            let answer = self
                .routed
                .client_at(addr)
                .and_then(|client| client.expect(correlation_id));
            match answer {
                Ok(()) => break,
                Err(e) if broker_stopping(&e) => {
                    self.settle(addr, broker_stopping)?;
                    self.refused_batches += self.pending_at(addr) as u64;
                    self.reconnect(addr, &e)?;
                }
                Err(e) if e.code() == Some(ErrorCode::NotHere) => self.moved(addr, &e)?,
                Err(e) if connection_lost(&e) => self.reconnect(addr, &e)?,
                Err(e) => return Err(describe(&e)),
            }
        }
        self.moved_tries = 0;
        let (addr, _, frame) = self.pending.pop_front().expect("checked above");
        self.acknowledged(addr, frame)
    }

    /// After the oldest batch in flight on `addr` was refused (`ShuttingDown`, `NotHere`):
    /// reads the answers to the batches sent there after it, keeping those refused the same
    /// way or left unanswered when the broker closes the connection, so only they are sent
    /// again. A batch that was stored must not be: it would be stored twice.
    fn settle(
        &mut self,
        addr: SocketAddr,
        refused: fn(&ClientError) -> bool,
    ) -> Result<(), String> {
        let mut at = 1;
        while at < self.pending.len() {
            let (to, correlation_id, _) = self.pending[at];
            if to != addr {
                at += 1;
                continue;
            }
            let answer = self
                .routed
                .client_at(addr)
                .and_then(|client| client.expect(correlation_id));
            match answer {
                Ok(()) => {
                    let (_, _, frame) = self.pending.remove(at).expect("in range");
                    self.acknowledged(addr, frame)?;
                }
                Err(e) if refused(&e) => at += 1,
                Err(e) if connection_lost(&e) => break,
                Err(e) => return Err(describe(&e)),
            }
        }
        Ok(())
    }

    fn pending_at(&self, addr: SocketAddr) -> usize {
        self.pending.iter().filter(|(to, ..)| *to == addr).count()
    }

    /// The oldest batch in flight was answered `NotHere` by `addr` (the routes were stale):
    /// settles the others sent there, learns the routes again and sends the refused ones
    /// (nothing of them was stored) to their owners, in their order.
    fn moved(&mut self, addr: SocketAddr, why: &ClientError) -> Result<(), String> {
        self.moved_tries += 1;
        if self.moved_tries > NOT_HERE_RETRIES {
            return Err(describe(why));
        }
        self.settle(addr, |e| e.code() == Some(ErrorCode::NotHere))?;
        self.routed.refresh(&[&self.args.topic]).map_err(|e| {
            format!(
                "reading the metadata of {}: {}",
                self.args.topic,
                describe(&e)
            )
        })?;
        let (refused, kept) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition::<VecDeque<_>, _>(|(to, ..)| *to == addr);
        self.pending = kept;
        for (_, _, frame) in refused {
            self.send(frame)?;
        }
        Ok(())
    }

    /// Counts a batch the broker acknowledged (its answer is `addr`'s last reply).
    fn acknowledged(&mut self, addr: SocketAddr, frame: ProduceFrame) -> Result<(), String> {
        let client = self.routed.client_at(addr).map_err(|e| describe(&e))?;
        let (base, next) = client.reply().produced().map_err(|e| describe(&e))?;
        let last = next.saturating_sub(1);
        self.offsets = Some(match self.offsets {
            None => (base, last),
            Some((first, _)) => (first, last),
        });
        self.partitions_written.insert(frame.partition());
        self.acked_records += u64::from(frame.records());
        ACKED_RECORDS.store(self.acked_records, std::sync::atomic::Ordering::Relaxed);
        self.acked_batches += 1;
        self.accumulator.recycle(frame);
        Ok(())
    }

    /// A new connection to `addr`, on which every batch in flight there is sent again
    /// (the broker may or may not have stored it before the connection was lost).
    fn reconnect(&mut self, addr: SocketAddr, why: &ClientError) -> Result<(), String> {
        let (target, retry) = (&self.args.target, &self.args.reconnect);
        // The error itself goes to `reconnect`, so its message names what happened (a
        // reset, `ShuttingDown`) without an "I/O error" wrapped around it.
        let mut client = reconnect_at(target, &self.routed, addr, retry, Duration::ZERO, why)?;
        loop {
            self.routed.replace(addr, client);
            match self.resend(addr) {
                Ok(()) => return Ok(()),
                Err(e) if connection_lost(&e) => {
                    client = reconnect_at(target, &self.routed, addr, retry, Duration::ZERO, &e)?;
                }
                Err(e) => return Err(describe(&e)),
            }
        }
    }

    fn resend(&mut self, addr: SocketAddr) -> Result<(), ClientError> {
        let client = self.routed.client_at(addr)?;
        let mut sent = 0;
        for (to, correlation_id, frame) in self.pending.iter_mut() {
            if *to == addr {
                *correlation_id = client.send_frame(frame, 0)?;
                sent += 1;
            }
        }
        // Those known refused were not stored; the others may have been.
        let refused = std::mem::take(&mut self.refused_batches).min(sent);
        self.resent_batches += sent - refused;
        self.retried_batches += refused;
        Ok(())
    }

    /// Waits for every request in flight.
    fn drain(&mut self) -> Result<(), String> {
        while !self.pending.is_empty() {
            self.acknowledge()?;
        }
        Ok(())
    }

    /// Sends the last partial batches and waits for everything.
    fn finish(&mut self) -> Result<(), String> {
        self.flush()?;
        self.drain()
    }
}

/// `key<sep>value` split at the first `sep`; a line without it is all value.
fn split_key<'l>(line: &'l [u8], sep: &[u8]) -> (&'l [u8], &'l [u8]) {
    if sep.is_empty() {
        return (&[], line);
    }
    match line.windows(sep.len()).position(|w| w == sep) {
        Some(at) => (&line[..at], &line[at + sep.len()..]),
        None => (&[], line),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_split_at_the_first_separator() {
        assert_eq!(split_key(b"k:v:w", b":"), (&b"k"[..], &b"v:w"[..]));
        assert_eq!(split_key(b"novalue", b":"), (&b""[..], &b"novalue"[..]));
        assert_eq!(split_key(b"a<=>b", b"<=>"), (&b"a"[..], &b"b"[..]));
    }

    #[test]
    fn a_long_line_is_refused_before_it_is_read_whole() {
        let mut input = std::io::Cursor::new(b"short\nmuch too long a line\nx\n".to_vec());
        assert_eq!(read_line(&mut input, 8, 1).unwrap().unwrap(), b"short");
        let e = read_line(&mut input, 8, 2).unwrap_err();
        assert!(e.to_string().contains("line 2 is longer"), "{e}");
        assert!(
            input.position() <= 6 + 10,
            "read {} bytes",
            input.position()
        );
        let mut crlf = std::io::Cursor::new(b"12345678\r\n".to_vec());
        assert_eq!(read_line(&mut crlf, 8, 1).unwrap().unwrap(), b"12345678");
    }
}
