//! `pagurus consume`: prints the records of one partition, or of every partition of the
//! topic, one per line (or as `--format` says), optionally as a consumer group that resumes
//! from, and commits, its offset in each partition.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use crate::cli::format::{Format, Record};
use crate::cli::{BrokerArgs, ReconnectArgs, connection_lost, describe, reconnect};
use crate::client::blocking::Client;
use crate::client::consume::{Batch, StartAt};
use crate::limits::Limits;
use crate::protocol::native::{ErrorCode, OffsetSpec};
use crate::protocol::record::BatchHeader;

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Topic to read (it must exist).
    #[arg(long)]
    pub topic: String,
    /// Partition to read; every partition of the topic if not given (in turns, a fetch
    /// each).
    #[arg(long)]
    pub partition: Option<u32>,
    /// Consumer group: start each partition at its committed offset (unless --from says
    /// otherwise) and commit the next offset after every fetch and at exit.
    #[arg(long)]
    pub group: Option<String>,
    /// Where to start: earliest, latest, an offset, or @TIMESTAMP_MS (the first batch stored
    /// at or after that time, in ms since the Unix epoch). Default: the group's committed
    /// offset with --group (earliest if it has none), earliest without.
    #[arg(long)]
    pub from: Option<StartAt>,
    /// Stop after printing this many records.
    #[arg(long)]
    pub count: Option<u64>,
    /// raw: each record's bytes and a newline. json: one object per line with topic,
    /// partition, offset, timestamp (ms), key and value (UTF-8 strings, or base64 where
    /// key_encoding / value_encoding say so). Else a template, as kcat's -f: %t topic, %p
    /// partition, %o offset, %T timestamp (ms), %k key, %K key length, %s value, %S value
    /// length, %% a percent sign; \n newline, \t tab (a template adds no newline of its own).
    #[arg(long, default_value = "raw", value_name = "raw|json|TEMPLATE")]
    pub format: Format,
    /// Longest one fetch waits for new records when caught up, in ms (the broker caps it
    /// at 30000).
    #[arg(long, default_value_t = 1000)]
    pub wait_ms: u32,
    /// Stop once caught up with the high watermark of every partition read instead of
    /// waiting for more.
    #[arg(long)]
    pub exit_at_end: bool,
    /// Soft limit on the bytes of batches one fetch returns.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_bytes: u32,
    #[command(flatten)]
    pub target: BrokerArgs,
    #[command(flatten)]
    pub reconnect: ReconnectArgs,
}

/// Several partitions are read in turns: once a whole turn found nothing new, each fetch
/// waits this long divided among the partitions, so a record shows up within about this.
const IDLE_TURN: Duration = Duration::from_millis(100);

pub fn run(args: ConsumeArgs) -> Result<(), String> {
    let wait_ms = if args.exit_at_end { 0 } else { args.wait_ms };
    let mut client = args.target.connect(Duration::from_millis(wait_ms.into()))?;
    let partitions = match args.partition {
        Some(partition) => vec![partition],
        None => all_partitions(&mut client, &args.topic)?,
    };
    let mut cursors = Vec::with_capacity(partitions.len());
    for partition in partitions {
        cursors.push(Cursor::start(&mut client, &args, partition)?);
    }
    let mut consumer = Consumer {
        client,
        args: &args,
        out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock()),
        cursors,
        printed: 0,
    };
    match consumer.consume(wait_ms) {
        Err(Stop::OutputClosed) => Ok(()),
        Err(Stop::Failed(e)) => {
            // Keep what was printed: commit it before reporting the error.
            let _ = consumer.commit();
            Err(e)
        }
        Ok(()) => consumer.commit(),
    }
}

/// Every partition of `topic`; an unknown topic is an error (a consumer creates nothing).
fn all_partitions(client: &mut Client, topic: &str) -> Result<Vec<u32>, String> {
    let metadata = client
        .metadata(&[topic])
        .map_err(|e| format!("reading the metadata of {topic}: {}", describe(&e)))?;
    let found = metadata.topics.iter().find(|t| t.name == topic);
    match found {
        Some(t) if t.error == 0 => Ok((0..t.partitions.len() as u32).collect()),
        Some(t) => Err(format!(
            "topic {topic}: {}",
            ErrorCode::from_u16(t.error).map_or("error", ErrorCode::name)
        )),
        None => Err(format!("topic {topic}: UnknownTopic")),
    }
}

/// Where the consumer is in one partition.
struct Cursor {
    partition: u32,
    /// Offset the consumer started at.
    start: u64,
    /// Offset of the next record to print.
    next: u64,
    /// Offset last committed for the group (or found committed at the start).
    committed: Option<u64>,
    /// Whether the last fetch reached the high watermark.
    caught_up: bool,
}

impl Cursor {
    fn start(client: &mut Client, args: &ConsumeArgs, partition: u32) -> Result<Cursor, String> {
        let committed = match &args.group {
            Some(group) => client
                .fetch_offset(group, &args.topic, partition)
                .map_err(|e| format!("reading the offset of group {group}: {}", describe(&e)))?,
            None => None,
        };
        // Asked first in every case: it fails for a topic that does not exist, where a
        // fetch would create it.
        let earliest = list_offset(client, args, partition, OffsetSpec::Earliest)?;
        let start = match (args.from, committed) {
            (None, Some(offset)) => offset,
            (Some(StartAt::Earliest) | None, _) => earliest,
            (Some(at), _) => match at.spec().map_err(|e| describe(&e))? {
                Err(offset) => offset,
                Ok(spec) => list_offset(client, args, partition, spec)?,
            },
        };
        Ok(Cursor {
            partition,
            start,
            next: start,
            committed,
            caught_up: false,
        })
    }
}

fn list_offset(
    client: &mut Client,
    args: &ConsumeArgs,
    partition: u32,
    spec: OffsetSpec,
) -> Result<u64, String> {
    client
        .list_offsets(&args.topic, partition, spec)
        .map_err(|e| {
            format!(
                "finding the start offset in {}/{partition}: {}",
                args.topic,
                describe(&e)
            )
        })
}

/// Why consuming stopped early.
enum Stop {
    /// Whoever reads stdout went away (e.g. `| head`): a normal end.
    OutputClosed,
    Failed(String),
}

impl From<String> for Stop {
    fn from(e: String) -> Self {
        Stop::Failed(e)
    }
}

struct Consumer<'a, W: Write> {
    client: Client,
    args: &'a ConsumeArgs,
    out: W,
    cursors: Vec<Cursor>,
    printed: u64,
}

impl<W: Write> Consumer<'_, W> {
    fn done(&self) -> bool {
        self.args.count.is_some_and(|count| self.printed >= count)
    }

    /// Fetches from each partition in turn until --count, or, with --exit-at-end, until
    /// every partition is caught up.
    fn consume(&mut self, wait_ms: u32) -> Result<(), Stop> {
        let wait = Duration::from_millis(wait_ms.into());
        let several = self.cursors.len() > 1;
        // With several partitions, a fetch waits only once a whole turn found nothing.
        let idle_wait = wait.min(IDLE_TURN / self.cursors.len() as u32);
        let mut idle = false;
        while !self.done() {
            let mut found = false;
            for i in 0..self.cursors.len() {
                let wait = match (several, idle) {
                    (false, _) => wait,
                    (true, false) => Duration::ZERO,
                    (true, true) => idle_wait,
                };
                found |= self.fetch(i, wait)? > 0;
                if self.done() {
                    break;
                }
            }
            self.out.flush().map_err(output_error)?;
            self.commit()?;
            if self.args.exit_at_end && self.cursors.iter().all(|c| c.caught_up) {
                break;
            }
            idle = !found;
        }
        Ok(())
    }

    /// One fetch from cursor `i`'s partition; returns the records printed.
    fn fetch(&mut self, i: usize, wait: Duration) -> Result<u64, Stop> {
        let limits = Limits {
            max_key_bytes: u64::MAX,
            max_payload_bytes: u64::MAX,
        };
        let (partition, next) = (self.cursors[i].partition, self.cursors[i].next);
        let fetched = loop {
            match self
                .client
                .fetch(&self.args.topic, partition, next, self.args.max_bytes, wait)
            {
                Ok(fetched) => break fetched,
                // A restarted broker: go on at the next offset on a new connection.
                Err(e) if connection_lost(&e) => {
                    self.client = reconnect(&self.args.target, &self.args.reconnect, wait, &e)
                        .map_err(|e| self.fetch_error(i, e))?;
                }
                Err(e) => return Err(self.fetch_error(i, describe(&e)).into()),
            }
        };
        let before = self.printed;
        for batch in &fetched.batches {
            let header = BatchHeader::decode(batch, &limits).expect("checked by the client");
            self.print_batch(i, batch, &header)?;
            if self.done() {
                break;
            }
            let cursor = &mut self.cursors[i];
            cursor.next = cursor.next.max(header.offset + header.records());
        }
        let cursor = &mut self.cursors[i];
        cursor.caught_up = cursor.next >= fetched.high_watermark;
        Ok(self.printed - before)
    }

    fn fetch_error(&self, i: usize, why: String) -> String {
        let cursor = &self.cursors[i];
        format!(
            "fetching {}/{} at offset {}: {why}",
            self.args.topic, cursor.partition, cursor.next
        )
    }

    /// Prints the records of a batch from the cursor's next offset on, until `--count` is
    /// reached. A payload in another encoding (e.g. from a HermitMQ client) is one record.
    fn print_batch(&mut self, i: usize, batch: &[u8], header: &BatchHeader) -> Result<(), Stop> {
        let batch = Batch {
            header: *header,
            bytes: batch,
        };
        for record in batch.records() {
            if record.offset < self.cursors[i].next {
                continue;
            }
            if self.done() {
                break;
            }
            let printed = Record {
                topic: &self.args.topic,
                partition: self.cursors[i].partition,
                offset: record.offset,
                timestamp_ms: record.timestamp_ns / 1_000_000,
                key: record.key,
                value: record.value,
            };
            self.args
                .format
                .write(&mut self.out, &printed)
                .map_err(output_error)?;
            self.printed += 1;
            self.cursors[i].next = record.offset + 1;
        }
        Ok(())
    }

    /// Commits the next offset of each partition for the group, if there is a group and
    /// the consumer moved past where it started.
    fn commit(&mut self) -> Result<(), String> {
        let Some(group) = &self.args.group else {
            return Ok(());
        };
        for cursor in &mut self.cursors {
            if cursor.next == cursor.start || cursor.committed == Some(cursor.next) {
                continue;
            }
            self.client
                .commit_offset(group, &self.args.topic, cursor.partition, cursor.next)
                .map_err(|e| {
                    format!(
                        "committing offset {} of {}/{} for group {group}: {}",
                        cursor.next,
                        self.args.topic,
                        cursor.partition,
                        describe(&e)
                    )
                })?;
            cursor.committed = Some(cursor.next);
        }
        Ok(())
    }
}

fn output_error(e: std::io::Error) -> Stop {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Stop::OutputClosed
    } else {
        Stop::Failed(format!("writing to stdout: {e}"))
    }
}
