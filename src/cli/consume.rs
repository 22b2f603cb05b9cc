//! `pagurus consume`: prints the records of one partition, one per line; with `--group`,
//! of the partitions the group gives this member (`consume_group`).

use std::io::Write;
use std::time::Duration;

use clap::Args;

use crate::cli::{BrokerArgs, ReconnectArgs, connection_lost, describe, reconnect};
use crate::client::blocking::Client;
use crate::client::consume::{Batch, StartAt};
use crate::limits::Limits;
use crate::protocol::native::OffsetSpec;
use crate::protocol::record::{BatchFormat, BatchHeader};

#[derive(Debug, Args)]
pub struct ConsumeArgs {
    #[command(flatten)]
    pub target: BrokerArgs,
    /// Topic to read (it must exist).
    #[arg(long)]
    pub topic: String,
    /// Partition to read (without --group).
    #[arg(long, default_value_t = 0, conflicts_with = "group")]
    pub partition: u32,
    /// Consumer group: join it and read the partitions of the topic the broker assigns
    /// this member (all of them when alone), each from the group's committed offset;
    /// commit after every fetch and at exit; take over partitions as members come and go.
    #[arg(long)]
    pub group: Option<String>,
    /// Where to start: earliest, latest, an offset, or @TIMESTAMP_MS (the first batch stored
    /// at or after that time, in ms since the Unix epoch). Default: earliest. With --group,
    /// where a partition the group has no committed offset for starts (earliest or latest;
    /// `groups reset-offsets` moves committed ones).
    #[arg(long)]
    pub from: Option<StartAt>,
    /// With --group: the member is removed (and its partitions given to the others) when
    /// the broker hears nothing from it for this long, in ms.
    #[arg(long, default_value_t = 10_000)]
    pub session_timeout_ms: u32,
    /// Stop after printing this many records.
    #[arg(long)]
    pub count: Option<u64>,
    /// raw: each record's bytes and a newline. json: one object per line with offset,
    /// timestamp (ms), key and value (the last two as UTF-8, invalid bytes replaced).
    #[arg(long, value_enum, default_value = "raw")]
    pub format: Format,
    /// Longest one fetch waits for new records when caught up, in ms (the broker caps it
    /// at 30000).
    #[arg(long, default_value_t = 1000)]
    pub wait_ms: u32,
    /// Stop once caught up with the partition's high watermark instead of waiting for more.
    #[arg(long)]
    pub exit_at_end: bool,
    /// Soft limit on the bytes of batches one fetch returns.
    #[arg(long, default_value_t = 1024 * 1024)]
    pub max_bytes: u32,
    #[command(flatten)]
    pub reconnect: ReconnectArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Raw,
    Json,
}

pub fn run(args: ConsumeArgs) -> Result<(), String> {
    if let Some(group) = &args.group {
        return super::consume_group::run(&args, group);
    }
    let wait_ms = if args.exit_at_end { 0 } else { args.wait_ms };
    let mut client = args.target.connect(Duration::from_millis(wait_ms.into()))?;
    // Asked first in every case: it fails for a topic that does not exist, where a fetch
    // would create it.
    let earliest = list_offset(&mut client, &args, OffsetSpec::Earliest)?;
    let start = match args.from {
        None | Some(StartAt::Earliest) => earliest,
        Some(at) => match at.spec().map_err(|e| describe(&e))? {
            Err(offset) => offset,
            Ok(spec) => list_offset(&mut client, &args, spec)?,
        },
    };
    let mut consumer = Consumer {
        client,
        args: &args,
        out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock()),
        next: start,
        printed: 0,
    };
    match consumer.consume(wait_ms) {
        Err(Stop::OutputClosed) | Ok(()) => Ok(()),
        Err(Stop::Failed(e)) => Err(e),
    }
}

fn list_offset(client: &mut Client, args: &ConsumeArgs, spec: OffsetSpec) -> Result<u64, String> {
    client
        .list_offsets(&args.topic, args.partition, spec)
        .map_err(|e| {
            format!(
                "finding the start offset in {}/{}: {}",
                args.topic,
                args.partition,
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
    client: Client,
    args: &'a ConsumeArgs,
    out: W,
    /// Offset of the next record to print.
    next: u64,
    printed: u64,
}

impl<W: Write> Consumer<'_, W> {
    fn done(&self) -> bool {
        self.args.count.is_some_and(|count| self.printed >= count)
    }

    fn consume(&mut self, wait_ms: u32) -> Result<(), Stop> {
        let limits = Limits {
            max_key_bytes: u64::MAX,
            max_payload_bytes: u64::MAX,
        };
        while !self.done() {
            let fetched = match self.client.fetch(
                &self.args.topic,
                self.args.partition,
                self.next,
                self.args.max_bytes,
                Duration::from_millis(wait_ms.into()),
            ) {
                Ok(fetched) => fetched,
                // A restarted broker: go on at the next offset on a new connection.
                Err(e) if connection_lost(&e) => {
                    self.client = reconnect(
                        &self.args.target,
                        &self.args.reconnect,
                        Duration::from_millis(wait_ms.into()),
                        &e,
                    )
                    .map_err(|e| self.fetch_error(e))?;
                    continue;
                }
                Err(e) => return Err(self.fetch_error(describe(&e)).into()),
            };
            for batch in &fetched.batches {
                let header = BatchHeader::decode(batch, &limits).expect("checked by the client");
                self.print_batch(batch, &header)?;
                if self.done() {
                    break;
                }
                self.next = self.next.max(header.offset + header.records());
            }
            self.out.flush().map_err(output_error)?;
            if self.args.exit_at_end && self.next >= fetched.high_watermark {
                break;
            }
        }
        Ok(())
    }

    fn fetch_error(&self, why: String) -> String {
        format!(
            "fetching {}/{} at offset {}: {why}",
            self.args.topic, self.args.partition, self.next
        )
    }

    /// Prints the records of a batch from `self.next` on, until `--count` is reached. A
    /// payload in another encoding (e.g. from a HermitMQ client) is one record.
    fn print_batch(&mut self, batch: &[u8], header: &BatchHeader) -> Result<(), Stop> {
        let batch = Batch {
            header: *header,
            bytes: batch,
        };
        if batch.format() == BatchFormat::Kafka {
            return self.print_kafka_batch(&batch);
        }
        for record in batch.records() {
            if record.offset < self.next {
                continue;
            }
            if self.done() {
                break;
            }
            self.print(
                record.offset,
                record.timestamp_ns / 1_000_000,
                record.key,
                record.value,
            )
            .map_err(output_error)?;
            self.printed += 1;
            self.next = record.offset + 1;
        }
        Ok(())
    }

    /// Prints the records of a batch a Kafka client produced (a RecordBatch, maybe
    /// compressed), from `self.next` on. Null keys and values print as empty.
    fn print_kafka_batch(&mut self, batch: &Batch<'_>) -> Result<(), Stop> {
        let records = batch
            .kafka_records()
            .map_err(|e| Stop::Failed(describe(&e)))?;
        for record in records {
            if record.offset < self.next {
                continue;
            }
            if self.done() {
                break;
            }
            let timestamp_ms = u64::try_from(record.timestamp_ms).unwrap_or(0);
            let key = record.key.as_deref().unwrap_or_default();
            let value = record.value.as_deref().unwrap_or_default();
            self.print(record.offset, timestamp_ms, key, value)
                .map_err(output_error)?;
            self.printed += 1;
            self.next = record.offset + 1;
        }
        Ok(())
    }

    fn print(
        &mut self,
        offset: u64,
        timestamp_ms: u64,
        key: &[u8],
        value: &[u8],
    ) -> std::io::Result<()> {
        print_record(
            &mut self.out,
            self.args.format,
            Printed {
                partition: None,
                offset,
                timestamp_ms,
                key,
                value,
            },
        )
    }
}

/// One record as printed.
pub(super) struct Printed<'a> {
    /// Given when the consumer reads several partitions (JSON only).
    pub partition: Option<u32>,
    pub offset: u64,
    pub timestamp_ms: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
}

pub(super) fn print_record(
    out: &mut impl Write,
    format: Format,
    record: Printed<'_>,
) -> std::io::Result<()> {
    match format {
        Format::Raw => {
            out.write_all(record.value)?;
            out.write_all(b"\n")
        }
        Format::Json => {
            let partition = record
                .partition
                .map_or_else(String::new, |p| format!("\"partition\":{p},"));
            writeln!(
                out,
                "{{{partition}\"offset\":{},\"timestamp\":{},\"key\":{},\"value\":{}}}",
                record.offset,
                record.timestamp_ms,
                json_string(record.key),
                json_string(record.value)
            )
        }
    }
}

fn json_string(bytes: &[u8]) -> String {
    serde_json::to_string(&String::from_utf8_lossy(bytes)).expect("a string serializes")
}

pub(super) fn output_error(e: std::io::Error) -> Stop {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Stop::OutputClosed
    } else {
        Stop::Failed(format!("writing to stdout: {e}"))
    }
}
