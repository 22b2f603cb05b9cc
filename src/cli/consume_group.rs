//! `pagurus consume --group`: a member of a native group, printing the records of the
//! partitions the broker assigns it and committing them, until stopped.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::cli::consume::{ConsumeArgs, Position, Stop, output_error, write_batch};
use crate::cli::{connection_lost, describe, reconnect};
use crate::client::ClientError;
use crate::client::blocking::{GroupConsumer, GroupFetch};
use crate::client::consume::StartAt;
use crate::client::group::GroupConfig;
use crate::limits::Limits;
use crate::protocol::native::OffsetSpec;
use crate::protocol::record::BatchHeader;

pub fn run(args: &ConsumeArgs, group: &str) -> Result<(), String> {
    let reset = match args.from {
        None | Some(StartAt::Earliest) => OffsetSpec::Earliest,
        Some(StartAt::Latest) => OffsetSpec::Latest,
        Some(_) => {
            return Err(String::from(
                "with --group, --from is earliest or latest (where partitions with no committed offset start); move a group's offsets with `pagurus groups reset-offsets`",
            ));
        }
    };
    let wait_ms = if args.exit_at_end { 0 } else { args.wait_ms };
    let wait = Duration::from_millis(wait_ms.into());
    let mut routed = crate::cli::routed::bare(&args.target, wait)?;
    // Fails for a topic that does not exist (a member of a group creates no topic).
    routed
        .on_owner(&args.topic, 0, |client| {
            client.list_offsets(&args.topic, 0, OffsetSpec::Earliest)
        })
        .map_err(|e| format!("reading topic {}: {}", args.topic, describe(&e)))?;
    let mut config = GroupConfig::new(group, &[args.topic.as_str()]);
    config.client_id = String::from("pagurus-consume");
    config.session_timeout = Duration::from_millis(args.session_timeout_ms.into());
    let (stop, signal) = stop_on_signals()?;
    let mut member = Member {
        consumer: GroupConsumer::routed(routed, config, reset, args.target.timeout() + wait),
        args,
        stop,
        out: std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout().lock()),
        printed: 0,
    };
    member.consumer.set_max_bytes(args.max_bytes);
    let outcome = member.consume(wait);
    let Member {
        consumer, printed, ..
    } = member;
    // Commit what was printed and leave, so the others take the partitions at once.
    let closed = consumer
        .close()
        .map_err(|e| format!("leaving group {group}: {}", describe(&e)));
    let signal = signal.load(Ordering::Relaxed);
    if signal != 0 && outcome.is_ok() {
        closed?;
        // As a shell reports a process killed by the signal, like an interrupted produce.
        eprintln!(
            "pagurus: interrupted: left group {group}; {printed} records printed, and committed"
        );
        std::process::exit(128 + signal as i32);
    }
    match outcome {
        Err(Stop::OutputClosed) => Ok(()),
        Err(Stop::Failed(e)) => Err(e),
        Ok(()) => closed,
    }
}

/// A flag set by the first SIGINT (Ctrl-C) or SIGTERM, so the member stops after its
/// current poll, commits and leaves the group: without that it would stay in the group
/// until its session timed out, holding its partitions from the others and keeping
/// `groups reset-offsets` and `groups delete` refused. A second signal ends the process at
/// once (exit status 1), for a member stuck on an unresponsive broker. Also returns which
/// signal came (0 for none).
fn stop_on_signals() -> Result<(Arc<AtomicBool>, Arc<AtomicUsize>), String> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let stop = Arc::new(AtomicBool::new(false));
    let which = Arc::new(AtomicUsize::new(0));
    for signal in [SIGINT, SIGTERM] {
        // Registered first, so it sees the flag as the first signal left it.
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&stop))
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(&stop)))
            .and_then(|_| {
                signal_hook::flag::register_usize(signal, Arc::clone(&which), signal as usize)
            })
            .map_err(|e| format!("handling signal {signal}: {e}"))?;
    }
    Ok((stop, which))
}

struct Member<'a, W: Write> {
    consumer: GroupConsumer,
    args: &'a ConsumeArgs,
    /// Set by SIGINT or SIGTERM: leave the group.
    stop: Arc<AtomicBool>,
    out: W,
    printed: u64,
}

impl<W: Write> Member<'_, W> {
    fn done(&self) -> bool {
        self.args.count.is_some_and(|count| self.printed >= count)
            || self.stop.load(Ordering::Relaxed)
    }

    fn consume(&mut self, wait: Duration) -> Result<(), Stop> {
        while !self.done() {
            let polled = match self.consumer.poll(wait) {
                Ok(polled) => polled,
                Err(e) if connection_lost(&e) => {
                    let client = reconnect(&self.args.target, &self.args.reconnect, wait, &e)?;
                    self.consumer.reconnected(client);
                    continue;
                }
                Err(e) => return Err(self.failed("reading", &e)),
            };
            let Some(fetch) = polled else {
                // With --exit-at-end every poll is a look without waiting: nothing in any
                // of this member's partitions means it is caught up.
                if self.args.exit_at_end && self.consumer.member().generation().is_some() {
                    break;
                }
                continue;
            };
            self.print_fetch(&fetch)?;
            self.out.flush().map_err(output_error)?;
            if let Err(e) = self.consumer.commit() {
                return Err(self.failed("committing", &e));
            }
        }
        Ok(())
    }

    fn failed(&self, what: &str, e: &ClientError) -> Stop {
        Stop::Failed(format!(
            "{what} topic {} as group {}: {}",
            self.args.topic,
            self.consumer.member().config.group,
            describe(e)
        ))
    }

    /// Prints the fetched records from the consumer's position on, until `--count`; the
    /// position then is the record after the last printed.
    fn print_fetch(&mut self, fetch: &GroupFetch) -> Result<(), Stop> {
        let limits = Limits {
            max_key_bytes: u64::MAX,
            max_payload_bytes: u64::MAX,
        };
        let mut next = fetch.from;
        for bytes in &fetch.fetched.batches {
            let header = BatchHeader::decode(bytes, &limits).expect("checked by the client");
            let at = Position {
                topic: &fetch.topic,
                partition: fetch.partition,
                from: next,
            };
            let budget = self.args.count.map(|count| count - self.printed);
            let (after, written) =
                write_batch(&mut self.out, &self.args.format, at, bytes, &header, budget)?;
            self.printed += written;
            next = after;
            if self.done() {
                self.consumer.seek(&fetch.topic, fetch.partition, next);
                return Ok(());
            }
            next = next.max(header.offset + header.records());
        }
        Ok(())
    }
}
