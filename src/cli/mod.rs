//! The command line: one binary, clap subcommands. Every `serve` flag can also be set by a
//! `PAGURUS_*` environment variable; the client subcommands read `--broker` from
//! `PAGURUS_BROKER`.

mod consume;
mod groups;
mod produce;
mod serve;
mod topics;

use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::client::ClientError;
use crate::client::blocking::Client;

#[derive(Debug, Parser)]
#[command(
    name = "pagurus",
    version,
    about = "A persistent, thread-per-core message broker"
)]
pub struct Cli {
    /// Log level or filter (RUST_LOG syntax), e.g. info, debug, pagurus=trace.
    #[arg(long, global = true, env = "PAGURUS_LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Log format.
    #[arg(
        long,
        global = true,
        env = "PAGURUS_LOG_FORMAT",
        value_enum,
        default_value = "human"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the broker.
    Serve(serve::ServeArgs),
    /// Produce records: one per line of stdin, or generated with --count and --size.
    Produce(produce::ProduceArgs),
    /// Print the records of a partition, one per line.
    Consume(consume::ConsumeArgs),
    /// List, create, describe and delete topics.
    Topics(topics::TopicsArgs),
    /// List consumer groups and show their committed offsets and lag.
    Groups(groups::GroupsArgs),
    /// Drive a running broker and report throughput and latency percentiles.
    Bench(crate::bench::BenchArgs),
}

/// Parses the command line and runs the chosen subcommand.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    if let Err(message) = init_logging(&cli.log_level, cli.log_format) {
        eprintln!("pagurus: {message}");
        return std::process::ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Topics(args) => topics::run(args),
        Command::Groups(args) => groups::run(args),
        Command::Bench(args) => crate::bench::run(args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("pagurus: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Logs go to stderr: `RUST_LOG`, when set, overrides `--log-level`. Human logs are
/// colored only on a terminal, so files and the journal get plain text; JSON logs are one
/// object per line, with the thread (`pagurus-N` is core N) in each.
fn init_logging(level: &str, format: LogFormat) -> Result<(), String> {
    use std::io::IsTerminal;
    use tracing_subscriber::EnvFilter;
    let level_filter =
        EnvFilter::try_new(level).map_err(|e| format!("invalid --log-level {level:?}: {e}"))?;
    let rust_log = std::env::var("RUST_LOG").ok().filter(|f| !f.is_empty());
    let (filter, bad_rust_log) = match rust_log.map(|f| (EnvFilter::try_new(&f), f)) {
        Some((Ok(filter), _)) => (filter, None),
        Some((Err(e), f)) => (level_filter, Some((f, e))),
        None => (level_filter, None),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_thread_names(true);
    match format {
        LogFormat::Human => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().init(),
    }
    if let Some((value, error)) = bad_rust_log {
        tracing::warn!(rust_log = %value, %error, "RUST_LOG is not a valid filter; using --log-level");
    }
    Ok(())
}

/// Broker address the client subcommands use unless told otherwise.
const DEFAULT_BROKER: &str = "127.0.0.1:9092";

/// How long a client subcommand waits for an answer beyond what the request itself asks
/// for (a long poll), before it gives up on the broker.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// Connects to the broker; the error names the address.
fn connect(broker: &str, read_timeout: Duration) -> Result<Client, String> {
    let client = Client::connect(broker)
        .map_err(|e| format!("cannot connect to the broker at {broker}: {}", describe(&e)))?;
    client
        .set_read_timeout(Some(read_timeout))
        .map_err(|e| describe(&e))?;
    Ok(client)
}

/// One line for a client error; a read timeout says so instead of "resource unavailable".
fn describe(e: &ClientError) -> String {
    match e {
        ClientError::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            String::from("the broker did not answer in time")
        }
        ClientError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            String::from("the broker closed the connection")
        }
        other => other.to_string(),
    }
}

/// Writes `text` to stdout; a reader that went away (`| head`) is not an error.
fn print_out(text: &str) -> Result<(), String> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(format!("writing to stdout: {e}"))
        }
        _ => Ok(()),
    }
}

/// Lays out rows under headers in left-aligned columns two spaces apart.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.len());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, cell) in cells.enumerate() {
            if i > 0 {
                text.push_str("  ");
            }
            text.push_str(cell);
            text.extend(std::iter::repeat_n(
                ' ',
                widths[i].saturating_sub(cell.len()),
            ));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}
