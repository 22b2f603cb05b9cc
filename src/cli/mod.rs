//! The command line: one binary, clap subcommands. Every `serve` flag can also be set by a
//! `PAGURUS_*` environment variable; the client subcommands read `--broker` from
//! `PAGURUS_BROKER`, or from the client configuration file ([`profile`]).

mod acls;
mod client_security;
mod cluster;
mod consume;
mod consume_group;
mod format;
mod groups;
mod io_buffers_log;
mod log_limit;
mod produce;
mod profile;
mod routed;
mod security_online;
mod serve;
mod serve_security;
mod topics;
mod users;

use std::time::Duration;

use clap::{ArgMatches, CommandFactory, FromArgMatches, Parser, Subcommand};

use crate::client::ClientError;
use crate::client::blocking::Client;
use crate::protocol::native::ErrorCode;
use crate::security::scram::Mechanism;

#[derive(Debug, Parser)]
#[command(
    name = "pagurus",
    version,
    about = "A persistent, thread-per-core message broker"
)]
pub struct Cli {
    /// Log level (error, warn, info, debug, trace, off) or filter (RUST_LOG syntax:
    /// TARGET=LEVEL, comma-separated), e.g. debug, warn,pagurus::storage=trace.
    #[arg(
        long,
        global = true,
        env = "PAGURUS_LOG_LEVEL",
        default_value = "info",
        help_heading = "Logging"
    )]
    pub log_level: String,
    /// Log format.
    #[arg(
        long,
        global = true,
        env = "PAGURUS_LOG_FORMAT",
        value_enum,
        default_value = "human",
        help_heading = "Logging"
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
    /// Print the records of a topic (one partition or all), one per line or as --format says.
    Consume(consume::ConsumeArgs),
    /// List, create, describe, delete and compact topics.
    Topics(topics::TopicsArgs),
    /// List consumer groups and show their committed offsets and lag.
    Groups(groups::GroupsArgs),
    /// Show the cluster as the node asked knows it: nodes, their liveness, the controller
    /// leader and term.
    Cluster(cluster::ClusterArgs),
    /// Create, delete and list users: online, or on a stopped broker's data directory.
    Users(users::UsersArgs),
    /// Add, remove and list ACLs: online, or on a stopped broker's data directory.
    Acls(acls::AclsArgs),
    /// Drive a running broker and report throughput and latency percentiles.
    Bench(crate::bench::BenchArgs),
    /// Print a shell completion script: `source <(pagurus completion bash)`.
    Completion(CompletionArgs),
}

#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// Shell to complete in.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

impl Command {
    /// The broker settings of a client subcommand, and its reconnect settings if it has
    /// them.
    fn client_args(&mut self) -> Option<(&mut BrokerArgs, Option<&mut ReconnectArgs>)> {
        match self {
            Command::Produce(a) => Some((&mut a.target, Some(&mut a.reconnect))),
            Command::Consume(a) => Some((&mut a.target, Some(&mut a.reconnect))),
            Command::Topics(a) => Some((&mut a.target, None)),
            Command::Groups(a) => Some((&mut a.target, None)),
            Command::Cluster(a) => Some((&mut a.target, None)),
            Command::Bench(a) => Some((&mut a.target, None)),
            Command::Users(a) => Some((a.command.target(), None)),
            Command::Acls(a) => Some((a.command.target(), None)),
            Command::Serve(_) | Command::Completion(_) => None,
        }
    }
}

/// Parses the command line and runs the chosen subcommand.
pub fn main() -> std::process::ExitCode {
    let matches = Cli::command().get_matches();
    let mut cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    if let Err(message) = init_logging(&cli.log_level, cli.log_format) {
        eprintln!("pagurus: {message}");
        return std::process::ExitCode::from(2);
    }
    if let Err(message) = apply_config_file(&mut cli.command, &matches) {
        eprintln!("pagurus: {message}");
        return std::process::ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Produce(args) => produce::run(args),
        Command::Consume(args) => consume::run(args),
        Command::Topics(args) => topics::run(args),
        Command::Groups(args) => groups::run(args),
        Command::Cluster(args) => cluster::run(args),
        Command::Users(args) => users::run(args),
        Command::Acls(args) => acls::run(args),
        Command::Bench(args) => crate::bench::run(args),
        Command::Completion(args) => completion(args.shell),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("pagurus: {message}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn completion(shell: clap_complete::Shell) -> Result<(), String> {
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "pagurus", &mut script);
    print_out(&String::from_utf8_lossy(&script))
}

/// Fills the client settings that neither a flag nor an environment variable gave from the
/// configuration file, so a flag wins over its variable, which wins over the file, which
/// wins over the built-in default.
fn apply_config_file(command: &mut Command, matches: &ArgMatches) -> Result<(), String> {
    let Some((target, reconnect)) = command.client_args() else {
        return Ok(());
    };
    let file = profile::load(target.profile.as_deref())?;
    let from_default =
        |id: &str| value_source(matches, id) == Some(clap::parser::ValueSource::DefaultValue);
    if let Some(broker) = file.broker.filter(|_| from_default("broker")) {
        target.broker = broker;
    }
    if let Some(timeout_ms) = file.timeout_ms.filter(|_| from_default("timeout_ms")) {
        if timeout_ms == 0 {
            return Err(String::from(
                "the configuration file's timeout-ms must be above 0",
            ));
        }
        target.timeout_ms = timeout_ms;
    }
    if let (Some(reconnect), Some(ms)) = (reconnect, file.reconnect_ms)
        && from_default("reconnect_ms")
    {
        reconnect.reconnect_ms = ms;
    }
    let given = |id: &str| value_source(matches, id).is_some();
    let security = &mut target.security;
    if let Some(mechanism) = file
        .sasl_mechanism
        .filter(|_| from_default("sasl_mechanism"))
    {
        if Mechanism::from_name(&mechanism).is_none() {
            return Err(format!(
                "the configuration file's sasl-mechanism {mechanism:?} is not SCRAM-SHA-256 or SCRAM-SHA-512"
            ));
        }
        security.sasl_mechanism = mechanism;
    }
    // A login or TLS set on the command line (or by a variable) is taken whole, not
    // mixed with the file's: a --user with the file's password file would be a surprise.
    if !given("user") && !given("password_file") {
        security.user = file.user;
        security.password_file = file.password_file;
    }
    if !given("tls_ca") && !given("tls_cert") && !given("tls_key") {
        security.tls_ca = file.tls_ca;
        security.tls_cert = file.tls_cert;
        security.tls_key = file.tls_key;
    }
    Ok(())
}

/// Where the value of argument `id` came from, at the deepest subcommand that has it (a
/// global flag is propagated down to every subcommand).
fn value_source(matches: &ArgMatches, id: &str) -> Option<clap::parser::ValueSource> {
    let mut found = None;
    let mut level = Some(matches);
    while let Some(m) = level {
        if m.ids().any(|i| i.as_str() == id) {
            found = m.value_source(id).or(found);
        }
        level = m.subcommand().map(|(_, sub)| sub);
    }
    found
}

/// Logs go to stderr: `RUST_LOG`, when set, overrides `--log-level`. Human logs are
/// colored only on a terminal, so files and the journal get plain text; JSON logs are one
/// object per line, with the thread (`pagurus-N` is core N) in each. No place in the code
/// writes more than 50 warnings or errors a second (`log_limit`).
fn init_logging(level: &str, format: LogFormat) -> Result<(), String> {
    use std::io::IsTerminal;
    let level_filter =
        log_filter(level).map_err(|e| format!("invalid --log-level {level:?}: {e}"))?;
    let rust_log = std::env::var("RUST_LOG").ok().filter(|f| !f.is_empty());
    let (filter, bad_rust_log) = match rust_log.map(|f| (log_filter(&f), f)) {
        Some((Ok(filter), _)) => (filter, None),
        Some((Err(e), f)) => (level_filter, Some((f, e))),
        None => (level_filter, None),
    };
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let limit = log_limit::LogLimit::default();
    let lines = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_thread_names(true);
    use tracing_subscriber::filter::FilterExt;
    let registry = tracing_subscriber::registry().with(filter);
    let filters = || io_buffers_log::GlommioBuffers.and(limit.clone());
    match format {
        LogFormat::Human => registry
            .with(
                lines
                    .with_ansi(std::io::stderr().is_terminal())
                    .with_filter(filters()),
            )
            .init(),
        LogFormat::Json => registry.with(lines.json().with_filter(filters())).init(),
    }
    limit.report_dropped();
    if let Some((value, error)) = bad_rust_log {
        tracing::warn!(rust_log = %value, %error, "RUST_LOG is not a valid filter; using --log-level");
    }
    Ok(())
}

/// The accepted forms of `--log-level`, for its error message.
const LOG_LEVEL_FORMS: &str = "give a level (error, warn, info, debug, trace, off) or a filter: \
comma-separated levels and TARGET=LEVEL directives (RUST_LOG syntax, \
e.g. `warn,pagurus::server=debug`)";

/// `--log-level` (or `RUST_LOG`) as a filter. EnvFilter reads a bare word that is not a
/// level as a target to log at every level, so `warning` or `verbose` would silence every
/// line of pagurus (whose targets start with `pagurus`) while looking accepted: each
/// directive must be a level or name one (`TARGET=LEVEL`, or a `[span]` form).
fn log_filter(text: &str) -> Result<tracing_subscriber::EnvFilter, String> {
    use tracing_subscriber::filter::LevelFilter;
    if text.trim().is_empty() {
        return Err(format!("empty; {LOG_LEVEL_FORMS}"));
    }
    // Commas inside `[span{field=a,b}]` do not separate directives.
    let mut depth = 0i32;
    let mut start = 0;
    let mut directives = Vec::new();
    for (i, c) in text.char_indices() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                directives.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    directives.push(&text[start..]);
    for directive in directives.iter().map(|d| d.trim()) {
        let names_level = directive.contains('=') || directive.contains('[');
        if !directive.is_empty() && !names_level && directive.parse::<LevelFilter>().is_err() {
            return Err(format!(
                "{directive:?} is not a level (a bare name would enable only that target); {LOG_LEVEL_FORMS}"
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(text).map_err(|e| format!("{e}; {LOG_LEVEL_FORMS}"))
}

/// Broker address the client subcommands use unless told otherwise.
const DEFAULT_BROKER: &str = "127.0.0.1:9092";

/// Port of a `--broker` given without one.
const DEFAULT_PORT: u16 = 9092;

/// Where the client subcommands find the broker, and how long they wait for it.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Connection")]
pub struct BrokerArgs {
    /// Broker address: host:port, or a host alone for port 9092 (the configuration file's
    /// `broker` when neither the flag nor the variable is given).
    #[arg(long, global = true, env = "PAGURUS_BROKER", default_value = DEFAULT_BROKER)]
    pub broker: String,
    /// Longest wait for the broker, in ms: to connect, to greet, and to answer a request
    /// (a fetch waits its --wait-ms on top).
    #[arg(long, global = true, env = "PAGURUS_TIMEOUT_MS", default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,
    /// Take the defaults from [profile.NAME] of the configuration file
    /// ($PAGURUS_CONFIG or ~/.config/pagurus/config.toml) instead of its top level.
    #[arg(long, global = true, env = "PAGURUS_PROFILE", value_name = "NAME")]
    pub profile: Option<String>,
    #[command(flatten)]
    pub security: client_security::ClientSecurityArgs,
}

impl BrokerArgs {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    /// `--broker` with the default port added when it names none (`localhost`, `[::1]`).
    pub fn address(&self) -> String {
        with_default_port(&self.broker)
    }

    /// Connects (over TLS and logged in, as the flags ask); reads then wait up to
    /// `timeout + extra` (a fetch's long poll).
    pub fn connect(&self, extra: Duration) -> Result<Client, String> {
        let options = self.security.options()?;
        connect(
            &self.address(),
            &options,
            self.timeout(),
            self.timeout() + extra,
        )
    }
}

fn with_default_port(broker: &str) -> String {
    let has_port = match broker.rsplit_once(':') {
        // `[v6]:port`, `host:port`; a bare IPv6 address has several colons and no port.
        Some((host, port)) => {
            port.parse::<u16>().is_ok() && (!host.contains(':') || host.ends_with(']'))
        }
        None => false,
    };
    if has_port {
        broker.to_string()
    } else if broker.contains(':') && !broker.starts_with('[') {
        format!("[{broker}]:{DEFAULT_PORT}")
    } else {
        format!("{broker}:{DEFAULT_PORT}")
    }
}

/// Connects to the broker within `timeout`; answers may then take `read_timeout`. The
/// error names the address.
fn connect(
    broker: &str,
    options: &crate::client::secure::ConnectOptions,
    timeout: Duration,
    read_timeout: Duration,
) -> Result<Client, String> {
    let client = Client::connect_with(broker, timeout, options).map_err(|e| {
        let why = match &e {
            ClientError::Io(io)
                if matches!(
                    io.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                format!("no connection within {} ms", timeout.as_millis())
            }
            other => describe(other),
        };
        format!("cannot connect to the broker at {broker}: {why}")
    })?;
    client
        .set_read_timeout(Some(read_timeout))
        .map_err(|e| describe(&e))?;
    Ok(client)
}

/// Whether an error means the connection is gone or going (the broker stopped, restarted
/// or is stopping), so a new connection may succeed; another answer of the broker, or a
/// timeout, is not.
fn connection_lost(e: &ClientError) -> bool {
    use std::io::ErrorKind::*;
    broker_stopping(e)
        || matches!(e, ClientError::Io(io) if matches!(
            io.kind(),
            UnexpectedEof | ConnectionReset | ConnectionAborted | BrokenPipe | ConnectionRefused | NotConnected
        ))
}

/// `ShuttingDown`: a broker in a clean stop refused the request (it closed the partition,
/// or the core that owns it stopped) and stored nothing of it; it closes the connection
/// once it has answered what it read.
fn broker_stopping(e: &ClientError) -> bool {
    e.code() == Some(crate::protocol::native::ErrorCode::ShuttingDown)
}

/// How long `produce` and `consume` keep trying to reconnect after losing the broker.
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Connection")]
pub struct ReconnectArgs {
    /// After the connection is lost (the broker stopped or restarted), keep trying to
    /// reconnect for this long, in ms, with growing pauses; 0: fail at once.
    #[arg(long, env = "PAGURUS_RECONNECT_MS", default_value_t = 30_000)]
    pub reconnect_ms: u64,
}

/// First and longest pause between reconnection attempts.
const RECONNECT_PAUSE_MIN: Duration = Duration::from_millis(100);
const RECONNECT_PAUSE_MAX: Duration = Duration::from_secs(2);

/// A new connection after `why` lost the old one, tried with doubling pauses for at most
/// `reconnect.reconnect_ms`. Says on stderr what happened, once per loss.
fn reconnect(
    target: &BrokerArgs,
    reconnect: &ReconnectArgs,
    extra: Duration,
    why: &ClientError,
) -> Result<Client, String> {
    reconnect_to(&target.address(), reconnect, why, || target.connect(extra))
}

/// [`reconnect`] to `address`, each attempt made by `connect`.
fn reconnect_to(
    address: &str,
    reconnect: &ReconnectArgs,
    why: &ClientError,
    mut connect: impl FnMut() -> Result<Client, String>,
) -> Result<Client, String> {
    let budget = Duration::from_millis(reconnect.reconnect_ms);
    if budget.is_zero() {
        return Err(describe(why));
    }
    eprintln!(
        "pagurus: lost the broker at {address} ({}); reconnecting for up to {} ms",
        describe(why),
        budget.as_millis()
    );
    let deadline = std::time::Instant::now() + budget;
    let mut pause = RECONNECT_PAUSE_MIN;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        std::thread::sleep(pause.min(left));
        pause = (pause * 2).min(RECONNECT_PAUSE_MAX);
        match connect() {
            Ok(client) => {
                eprintln!("pagurus: reconnected to {address}");
                return Ok(client);
            }
            Err(e) if std::time::Instant::now() >= deadline => {
                return Err(format!(
                    "{} and no reconnection within {} ms: {e}",
                    describe(why),
                    budget.as_millis()
                ));
            }
            Err(_) => {}
        }
    }
}

/// On SIGINT (Ctrl-C) or SIGTERM, writes `summary()` to stderr and exits with 128 + the
/// signal, as a shell reports a process killed by it: a client interrupted mid-run still
/// says what the broker confirmed. The main thread may be blocked in a read (of stdin, of an
/// answer), so the line comes from a thread of its own.
fn on_interrupt(summary: impl Fn() -> String + Send + 'static) {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let Ok(mut signals) = signal_hook::iterator::Signals::new([SIGINT, SIGTERM]) else {
        return;
    };
    std::thread::spawn(move || {
        if let Some(signal) = signals.forever().next() {
            eprintln!("pagurus: interrupted: {}", summary());
            std::process::exit(128 + signal);
        }
    });
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
        // An error that was described once already and carried on in an I/O error (a lost
        // connection passed to `reconnect`) keeps its one "I/O error: ".
        ClientError::Io(io) => {
            let text = io.to_string();
            format!(
                "I/O error: {}",
                text.strip_prefix("I/O error: ").unwrap_or(&text)
            )
        }
        other => other.to_string(),
    }
}

/// A topic's error code from the metadata, worded as the broker's answers are
/// (`broker answered UnknownTopic (10)`), so a topic missing reads the same from every
/// subcommand.
pub(crate) fn topic_error(topic: &str, code: u16) -> String {
    let name = ErrorCode::from_u16(code).map_or("Unknown", ErrorCode::name);
    format!("topic {topic}: broker answered {name} ({code})")
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

/// `--output` of the listing subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    // Plain comments: documented values would switch `--help` to clap's long layout.
    // Lines and tables for people.
    Text,
    // One JSON document (an array, or an object for `groups describe`).
    Json,
}

/// Writes a JSON document and a newline to stdout.
fn print_json(value: &serde_json::Value) -> Result<(), String> {
    let text = serde_json::to_string_pretty(value).expect("a JSON value serializes");
    print_out(&format!("{text}\n"))
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
