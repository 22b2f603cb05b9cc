//! `pagurus consume`: prints the records of one partition, one per line, optionally as a
//! consumer group that resumes from, and commits, its offset.

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
    /// Partition to read.
    #[arg(long, default_value_t = 0)]
    pub partition: u32,
    /// Consumer group: start at its committed offset (unless --from says otherwise) and
    /// commit the next offset after every fetch and at exit.
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
    let wait_ms = if args.exit_at_end { 0 } else { args.wait_ms };
    let mut client = args.target.connect(Duration::from_millis(wait_ms.into()))?;
    let committed = match &args.group {
        Some(group) => client
            .fetch_offset(group, &args.topic, args.partition)
            .map_err(|e| format!("reading the offset of group {group}: {}", describe(&e)))?,
        None => None,
    };
    // Asked first in every case: it fails for a topic that does not exist, where a fetch
    // would create it.
    let earliest = list_offset(&mut client, &args, OffsetSpec::Earliest)?;
    let start = match (args.from, committed) {
        (None, Some(offset)) => offset,
        (Some(StartAt::Earliest) | None, _) => earliest,
        (Some(at), _) => match at.spec().map_err(|e| describe(&e))? {
            Err(offset) => offset,
            Ok(spec) => list_offset(&mut client, &args, spec)?,
        },
    };
    let mut consumer = Consumer {
        client,
        args: &args,
        out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock()),
        start,
        next: start,
        committed,
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
    /// Offset the consumer started at.
    start: u64,
    /// Offset of the next record to print.
    next: u64,
    /// Offset last committed for the group (or found committed at the start).
    committed: Option<u64>,
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
            self.commit()?;
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
        match self.args.format {
            Format::Raw => {
                self.out.write_all(value)?;
                self.out.write_all(b"\n")
            }
            Format::Json => writeln!(
                self.out,
                "{{\"offset\":{offset},\"timestamp\":{timestamp_ms},\"key\":{},\"value\":{}}}",
                json_string(key),
                json_string(value)
            ),
        }
    }

    /// Commits the next offset for the group, if there is a group and the consumer moved
    /// past where it started.
    fn commit(&mut self) -> Result<(), String> {
        let Some(group) = &self.args.group else {
            return Ok(());
        };
        if self.next == self.start || self.committed == Some(self.next) {
            return Ok(());
        }
        self.client
            .commit_offset(group, &self.args.topic, self.args.partition, self.next)
            .map_err(|e| {
                format!(
                    "committing offset {} for group {group}: {}",
                    self.next,
                    describe(&e)
                )
            })?;
        self.committed = Some(self.next);
        Ok(())
    }
}

fn json_string(bytes: &[u8]) -> String {
    serde_json::to_string(&String::from_utf8_lossy(bytes)).expect("a string serializes")
}

fn output_error(e: std::io::Error) -> Stop {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        Stop::OutputClosed
    } else {
        Stop::Failed(format!("writing to stdout: {e}"))
    }
}
