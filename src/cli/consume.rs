//! `pagurus consume`: prints the records of one partition, or of every partition of the
//! topic, one per line (or as `--format` says); with `--group`, of the partitions the group
//! gives this member (`consume_group`).

use std::io::Write;
use std::time::Duration;

use clap::Args;

use crate::cli::format::{Format, Record};
use crate::cli::routed::{reconnect_at, routed};
use crate::cli::{BrokerArgs, ReconnectArgs, connection_lost, describe};
use crate::client::consume::{Batch, StartAt};
use crate::client::routing::Routed;
use crate::limits::Limits;
use crate::protocol::native::{ErrorCode, MetadataResponse, OffsetSpec};
use crate::protocol::record::{BatchFormat, BatchHeader};

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Topic to read (it must exist).
    #[arg(long)]
    pub topic: String,
    /// Partition to read (without --group); every partition of the topic if not given (in
    /// turns, a fetch each).
    #[arg(long, conflicts_with = "group")]
    pub partition: Option<u32>,
    /// Consumer group: join it and read the partitions of the topic the broker assigns
    /// this member (all of them when alone), each from the group's committed offset;
    /// commit after every fetch and at exit; take over partitions as members come and go.
    #[arg(long)]
    pub group: Option<String>,
    /// Where to start: earliest, latest, an offset, or @TIMESTAMP_MS (the first batch stored
    /// at or after that time, in ms since the Unix epoch). Default: earliest. With --group:
    /// where partitions with no committed offset start (earliest or latest).
    #[arg(long)]
    pub from: Option<StartAt>,
    /// With --group: the member is removed (and its partitions given to the others) when
    /// the broker hears nothing from it for this long, in ms.
    #[arg(long, default_value_t = 10_000)]
    pub session_timeout_ms: u32,
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
    if let Some(group) = &args.group {
        return super::consume_group::run(&args, group);
    }
    let wait_ms = if args.exit_at_end { 0 } else { args.wait_ms };
    // Routed: on a cluster, a partition of another node is read from that node.
    let extra = Duration::from_millis(wait_ms.into());
    let (mut routed, metadata) = routed(&args.target, extra, &[&args.topic])?;
    let partitions = match args.partition {
        Some(partition) => vec![partition],
        None => all_partitions(&metadata, &args.topic)?,
    };
    let mut cursors = Vec::with_capacity(partitions.len());
    for partition in partitions {
        cursors.push(Cursor::start(&mut routed, &args, partition)?);
    }
    let mut consumer = Consumer {
        routed,
        args: &args,
        out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock()),
        cursors,
        printed: 0,
    };
    match consumer.consume(wait_ms) {
        Err(Stop::OutputClosed) | Ok(()) => Ok(()),
        Err(Stop::Failed(e)) => Err(e),
    }
}

/// Every partition of `topic`; an unknown topic is an error (a consumer creates nothing).
fn all_partitions(metadata: &MetadataResponse, topic: &str) -> Result<Vec<u32>, String> {
    let found = metadata.topics.iter().find(|t| t.name == topic);
    match found {
        Some(t) if t.error == 0 => Ok((0..t.partitions.len() as u32).collect()),
        Some(t) => Err(super::topic_error(topic, t.error)),
        None => Err(super::topic_error(topic, ErrorCode::UnknownTopic as u16)),
    }
}

/// Where the consumer is in one partition.
struct Cursor {
    partition: u32,
    /// Offset of the next record to print.
    next: u64,
    /// Whether the last fetch reached the high watermark.
    caught_up: bool,
}

impl Cursor {
    fn start(client: &mut Routed, args: &ConsumeArgs, partition: u32) -> Result<Cursor, String> {
        // Asked first in every case: it fails for a topic that does not exist, where a
        // fetch would create it.
        let earliest = list_offset(client, args, partition, OffsetSpec::Earliest)?;
        let start = match args.from {
            None | Some(StartAt::Earliest) => earliest,
            Some(at) => match at.spec().map_err(|e| describe(&e))? {
                Err(offset) => offset,
                Ok(spec) => list_offset(client, args, partition, spec)?,
            },
        };
        Ok(Cursor {
            partition,
            next: start,
            caught_up: false,
        })
    }
}

fn list_offset(
    routed: &mut Routed,
    args: &ConsumeArgs,
    partition: u32,
    spec: OffsetSpec,
) -> Result<u64, String> {
    routed
        .on_owner(&args.topic, partition, |client| {
            client.list_offsets(&args.topic, partition, spec)
        })
        .map_err(|e| {
            format!(
                "finding the start offset in {}/{partition}: {}",
                args.topic,
                describe(&e)
            )
        })
}

/// Why consuming stopped early.
pub(super) enum Stop {
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
    routed: Routed,
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
        let (topic, max_bytes) = (&self.args.topic, self.args.max_bytes);
        let fetched = loop {
            let fetched = self.routed.on_owner(topic, partition, |client| {
                client.fetch(topic, partition, next, max_bytes, wait)
            });
            match fetched {
                Ok(fetched) => break fetched,
                // A restarted broker: go on at the next offset on a new connection.
                Err(e) if connection_lost(&e) => {
                    let addr = self.routed.address(topic, partition);
                    let (target, retry) = (&self.args.target, &self.args.reconnect);
                    let client = reconnect_at(target, &self.routed, addr, retry, wait, &e)
                        .map_err(|e| self.fetch_error(i, e))?;
                    self.routed.replace(addr, client);
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
    /// reached.
    fn print_batch(&mut self, i: usize, batch: &[u8], header: &BatchHeader) -> Result<(), Stop> {
        let budget = self.args.count.map(|count| count - self.printed);
        let cursor = &mut self.cursors[i];
        let at = Position {
            topic: &self.args.topic,
            partition: cursor.partition,
            from: cursor.next,
        };
        let (next, written) =
            write_batch(&mut self.out, &self.args.format, at, batch, header, budget)?;
        cursor.next = next;
        self.printed += written;
        Ok(())
    }
}

/// Where a consumer is in the partition a batch came from.
pub(super) struct Position<'a> {
    pub topic: &'a str,
    pub partition: u32,
    /// Offset of the next record to print: records before it are skipped.
    pub from: u64,
}

/// Writes the records of one fetched batch from `at.from` on, at most `budget` of them.
/// Returns the offset after the last record written (`at.from` if none) and how many were
/// written. A batch a Kafka client produced is a RecordBatch, decoded (and decompressed);
/// a payload in another encoding (e.g. from a HermitMQ client) is one record.
pub(super) fn write_batch(
    out: &mut impl Write,
    format: &Format,
    at: Position<'_>,
    bytes: &[u8],
    header: &BatchHeader,
    budget: Option<u64>,
) -> Result<(u64, u64), Stop> {
    let batch = Batch {
        header: *header,
        bytes,
    };
    let kafka;
    // (offset, timestamp in ms, key, value)
    let records: Vec<(u64, u64, &[u8], &[u8])> = if batch.format() == BatchFormat::Kafka {
        kafka = batch
            .kafka_records()
            .map_err(|e| Stop::Failed(describe(&e)))?;
        kafka
            .iter()
            .map(|r| {
                let timestamp_ms = u64::try_from(r.timestamp_ms).unwrap_or(0);
                let key = r.key.as_deref().unwrap_or_default();
                let value = r.value.as_deref().unwrap_or_default();
                (r.offset, timestamp_ms, key, value)
            })
            .collect()
    } else {
        batch
            .records()
            .map(|r| (r.offset, r.timestamp_ns / 1_000_000, r.key, r.value))
            .collect()
    };
    let (mut next, mut written) = (at.from, 0u64);
    for (offset, timestamp_ms, key, value) in records {
        if offset < at.from {
            continue;
        }
        if budget.is_some_and(|budget| written >= budget) {
            break;
        }
        let record = Record {
            topic: at.topic,
            partition: at.partition,
            offset,
            timestamp_ms,
            key,
            value,
        };
        format.write(out, &record).map_err(output_error)?;
        written += 1;
        next = offset + 1;
    }
    Ok((next, written))
}

pub(super) fn output_error(e: std::io::Error) -> Stop {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Stop::OutputClosed
    } else {
        Stop::Failed(format!("writing to stdout: {e}"))
    }
}
