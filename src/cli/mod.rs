//! The command line: one binary, clap subcommands.

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "pagurus",
    version,
    about = "A persistent, thread-per-core message broker"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {}

/// Parses the command line and runs the chosen subcommand.
pub fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    match cli.command {}
}
