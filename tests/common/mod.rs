//! A real broker process for integration tests: started from the built binary on free
//! 127.0.0.1 ports with its own data directory, stopped by SIGTERM or `kill -9`.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use pagurus::client::blocking::Client;

pub mod cluster;
pub mod hermit;
pub mod kafka;
pub mod ledger;
pub mod pki;
pub mod powerfs;
pub mod raw;
pub mod security;
pub mod small_fs;

/// True if `program args` runs (a probe such as `--version`). A missing Kafka client fails
/// the test where `PAGURUS_KAFKA_CLIENTS=required` (set by `.ci/run`); elsewhere the test
/// prints why it skipped.
pub fn have(what: &str, program: &str, args: &[&str]) -> bool {
    let ok = Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let required = std::env::var("PAGURUS_KAFKA_CLIENTS").is_ok_and(|v| v == "required");
        assert!(!required, "{what} is not installed (.ci/run installs it)");
        eprintln!("SKIPPED: {what} is not installed");
    }
    ok
}

/// [`have`] for a Python module.
pub fn have_python(module: &str) -> bool {
    have(module, "python3", &["-c", &format!("import {module}")])
}

/// Runs `f` on a glommio executor thread of its own and returns its result.
pub fn on_glommio<T, F, Fut>(f: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T> + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .spawn(f)
        .expect("executor starts")
        .join()
        .expect("executor thread ends")
}

/// Creates `topic` with `partitions` partitions and default settings.
pub fn create_topic(broker: &Broker, topic: &str, partitions: u32) {
    broker
        .client()
        .create_topic(
            topic,
            pagurus::protocol::native::TopicSettings {
                partitions,
                ..Default::default()
            },
        )
        .unwrap();
}

pub struct Broker {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    args: Vec<String>,
    /// Extra environment of the next start (test hooks such as `PAGURUS_TEST_CRASH_AT`).
    env: Vec<(String, String)>,
    cores: usize,
    log: PathBuf,
}

/// A port P such that P ..= P + extra are all free right now, below the kernel's ephemeral
/// range (32768-60999 by default). A broker is restarted on the same ports, and a port from
/// the ephemeral range can meanwhile become the local end of some outgoing connection (a
/// test's own client, even), which makes the restart fail with "address in use".
///
/// A range is handed out once per test process: a test that picks ports for its own
/// listeners and then starts a broker (which picks its main port) must not get the same,
/// still unbound, ports twice.
pub fn free_ports(extra: u16) -> u16 {
    use std::hash::{BuildHasher, Hasher};
    const LOW: u64 = 10_000;
    const HIGH: u64 = 32_000;
    static HANDED_OUT: std::sync::Mutex<Vec<(u16, u16)>> = std::sync::Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for attempt in 0..1000u64 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(attempt);
        hasher.write_u32(std::process::id());
        let port = (LOW + hasher.finish() % (HIGH - LOW)) as u16;
        let last = port + extra;
        let taken = handed_out.iter().any(|&(a, b)| port <= b && a <= last);
        let all_free =
            !taken && (0..=extra).all(|i| TcpListener::bind(("127.0.0.1", port + i)).is_ok());
        if all_free {
            handed_out.push((port, last));
            return port;
        }
    }
    panic!("no free port range found");
}

impl Broker {
    /// Starts a broker with `cores` cores and extra `serve` arguments, in `data_dir`.
    pub fn start_in(data_dir: &Path, cores: usize, args: &[&str]) -> Broker {
        Broker::start_with_log(data_dir, &data_dir.with_extension("log"), cores, args)
    }

    /// [`Broker::start_in`] with the broker's log at `log` (for a data directory on a file
    /// system that a test cuts the power of).
    pub fn start_with_log(data_dir: &Path, log: &Path, cores: usize, args: &[&str]) -> Broker {
        let port = free_ports(cores as u16 + 1);
        let mut broker = Broker {
            child: None,
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            data_dir: data_dir.to_path_buf(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: Vec::new(),
            cores,
            log: log.to_path_buf(),
        };
        broker.spawn();
        broker
    }

    /// Starts the process and waits until it accepts connections. A start that fails (the
    /// broker exits, e.g. after glommio's mesh join timed out on a loaded machine) is tried
    /// again, up to three times; starts are serialized across a test binary's threads.
    fn spawn(&mut self) {
        static STARTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = STARTING.lock().unwrap_or_else(|e| e.into_inner());
        for attempt in 1..=3 {
            match self.try_spawn() {
                Ok(()) => return,
                Err(why) if attempt < 3 => eprintln!("broker start failed ({why}); trying again"),
                Err(why) => panic!("broker did not start: {why}; log:\n{}", self.log_text()),
            }
        }
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        // With listeners of its own (`--listener`), the main one is a PLAINTEXT listener at
        // `addr`, named MAIN: `--listen` is not given with `--listener`.
        let main = if self.args.iter().any(|a| a == "--listener") {
            [
                "--listener".to_string(),
                format!("MAIN=PLAINTEXT://{}", self.addr),
            ]
        } else {
            ["--listen".to_string(), self.addr.to_string()]
        };
        let child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
            .arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(main)
            .arg("--cores")
            .arg(self.cores.to_string())
            .args(&self.args)
            .env("RUST_LOG", "info,pagurus=debug")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("broker binary starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            // Ready when the main port and every core's shard port answer: each core binds
            // its own listeners, so the main port can be up before another core's port.
            let shard_ports = !self.args.iter().any(|a| a == "--no-shard-ports");
            if Client::connect(self.addr).is_ok()
                && (!shard_ports
                    || (0..self.cores).all(|core| {
                        let port = self.addr.port() + 1 + core as u16;
                        Client::connect(SocketAddr::from(([127, 0, 0, 1], port))).is_ok()
                    }))
            {
                return Ok(());
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                return Err(format!("exited at start with {status}"));
            }
            if Instant::now() >= deadline {
                let mut child = self.child.take().unwrap();
                let _ = child.kill();
                let _ = child.wait();
                return Err("not accepting connections after 60 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn client(&self) -> Client {
        Client::connect(self.addr).expect("connect")
    }

    /// A client connected to the port of exactly `core`.
    pub fn core_client(&self, core: usize) -> Client {
        Client::connect(SocketAddr::from((
            [127, 0, 0, 1],
            self.addr.port() + 1 + core as u16,
        )))
        .expect("connect core")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// SIGTERM, then wait for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "broker ignored SIGTERM; log:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `kill -9`.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Sets (or with `None` removes) an environment variable for the next start.
    pub fn set_env(&mut self, key: &str, value: Option<&str>) {
        self.env.retain(|(k, _)| k != key);
        if let Some(value) = value {
            self.env.push((key.to_string(), value.to_string()));
        }
    }

    /// Waits for the broker to exit by itself (e.g. at a crash hook).
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("broker did not exit; log:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Starts the broker again on the same port and data directory.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop the broker first");
        self.spawn();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            let log = self.log_text();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- broker log (last 60 lines) ---");
            for line in tail.into_iter().rev() {
                eprintln!("{line}");
            }
        }
    }
}

/// Waits up to `timeout` for `child` to exit; its status and its stderr (which must be
/// piped). `None` when it is still running then: it is killed.
pub fn exit_and_stderr(child: &mut Child, timeout: Duration) -> Option<(ExitStatus, String)> {
    use std::io::Read;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        pipe.read_to_string(&mut stderr).unwrap();
    }
    Some((status, stderr))
}
