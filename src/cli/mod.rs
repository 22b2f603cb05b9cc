//! The command line: one binary, clap subcommands. Every `serve` flag can also be set by a
//! `PAGURUS_*` environment variable.

mod serve;

use clap::{Parser, Subcommand};

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
    /// Drive a running broker and report throughput and latency percentiles.
    Bench(crate::bench::BenchArgs),
}

/// Parses the command line and runs the chosen subcommand.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    init_logging(&cli.log_level, cli.log_format);
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
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

fn init_logging(level: &str, format: LogFormat) {
    let filter = std::env::var("RUST_LOG")
        .ok()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .or_else(|| tracing_subscriber::EnvFilter::try_new(level).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Human => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
