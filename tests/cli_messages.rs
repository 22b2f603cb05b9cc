//! What the command line says, in the first hour: `--help` wrapped to the terminal, one
//! wording for a missing topic, one "I/O error:" per error, a port in use refused at once,
//! and one line (not one multi-line warning per core) when io_uring cannot register its
//! buffers under the locked-memory limit.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Broker;

fn pagurus(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pagurus"));
    for (key, _) in std::env::vars() {
        if key.starts_with("PAGURUS_") || key == "COLUMNS" {
            command.env_remove(key);
        }
    }
    command
        .args(args)
        .envs(env.iter().copied())
        .env("XDG_CONFIG_HOME", "/nonexistent")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn help_is_wrapped_to_the_terminal_width() {
    let commands: &[&[&str]] = &[
        &[],
        &["serve"],
        &["produce"],
        &["consume"],
        &["topics", "create"],
        &["groups", "reset-offsets"],
        &["bench"],
        &["completion"],
    ];
    // No terminal here: $COLUMNS, else 100 columns.
    for (columns, widest) in [(Some("80"), 80), (Some("60"), 60), (None, 100)] {
        for args in commands {
            let env: Vec<(&str, &str)> = columns.iter().map(|c| ("COLUMNS", *c)).collect();
            let out = pagurus(&[args, &["--help"][..]].concat(), &env);
            assert!(out.status.success(), "{args:?}");
            let help = String::from_utf8(out.stdout).unwrap();
            // clap does not wrap the usage line (79 columns at most here).
            let longest = help
                .lines()
                .filter(|l| !l.starts_with("Usage: "))
                .map(|l| l.chars().count())
                .max()
                .unwrap_or(0);
            assert!(
                longest <= widest,
                "{args:?} --help at {columns:?} columns has a line of {longest}:\n{help}"
            );
        }
    }
}

#[test]
fn a_missing_topic_reads_the_same_from_every_subcommand() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let addr = broker.addr.to_string();
    let env = [("PAGURUS_BROKER", addr.as_str())];
    for args in [
        &["consume", "--topic", "nope", "--exit-at-end"][..],
        &[
            "consume",
            "--topic",
            "nope",
            "--partition",
            "0",
            "--exit-at-end",
        ],
        &["topics", "describe", "nope"],
        &["topics", "delete", "nope"],
        &["topics", "compact", "nope"],
        &["topics", "compact", "nope", "--partition", "0"],
        &[
            "groups",
            "reset-offsets",
            "g",
            "--topic",
            "nope",
            "--to",
            "earliest",
        ],
    ] {
        let out = pagurus(args, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("nope") && stderr.contains("broker answered UnknownTopic (10)"),
            "{args:?}: {stderr}"
        );
    }
}

/// A proxy to `broker` for one connection that, after `bytes` from the client, stops
/// relaying and closes with a reset (as a broker that crashes mid-request gives), and
/// listens no more.
fn resetting_proxy(broker: std::net::SocketAddr, bytes: usize) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let (client, _) = listener.accept().unwrap();
        drop(listener);
        let upstream = TcpStream::connect(broker).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let back = {
            let (mut from, mut to) = (upstream.try_clone().unwrap(), client.try_clone().unwrap());
            let stop = Arc::clone(&stop);
            from.set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            std::thread::spawn(move || {
                let mut chunk = [0u8; 65536];
                while !stop.load(Ordering::Acquire) {
                    match from.read(&mut chunk) {
                        Ok(0) => break,
                        Ok(n) => {
                            if to.write_all(&chunk[..n]).is_err() {
                                break;
                            }
                        }
                        Err(_) => continue,
                    }
                }
            })
        };
        let (mut from, mut to) = (client, upstream);
        let mut relayed = 0;
        let mut chunk = [0u8; 65536];
        while relayed < bytes {
            match from.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    to.write_all(&chunk[..n]).unwrap();
                    relayed += n;
                }
            }
        }
        stop.store(true, Ordering::Release);
        back.join().unwrap();
        // Linger 0: the close sends a reset whether or not bytes wait unread (a producer
        // waiting for its acks sends none, and a plain close would then be a clean FIN).
        nix::sys::socket::setsockopt(
            &from,
            nix::sys::socket::sockopt::Linger,
            &nix::libc::linger {
                l_onoff: 1,
                l_linger: 0,
            },
        )
        .unwrap();
        drop(from);
    });
    addr
}

#[test]
fn a_lost_connection_says_i_o_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &["--no-shard-ports"]);
    let proxy = resetting_proxy(broker.addr, 2 << 20).to_string();
    let started = Instant::now();
    let out = pagurus(
        &[
            "produce",
            "--broker",
            &proxy,
            "--topic",
            "t",
            "--partition",
            "0",
            "--count",
            "100000000",
            "--size",
            "100",
            "--reconnect-ms",
            "300",
        ],
        &[],
    );
    assert!(started.elapsed() < Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("lost the broker"), "{stderr}");
    // A reset, whose "I/O error: ..." was carried into the reconnect's error and doubled.
    assert!(stderr.contains("Connection reset"), "{stderr}");
    assert!(!stderr.contains("I/O error: I/O error"), "{stderr}");
}

#[test]
fn a_port_in_use_is_refused_at_once_naming_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let started = Instant::now();
    let out = pagurus(
        &[
            "serve",
            "--cores",
            "1",
            "--listen",
            &broker.addr.to_string(),
        ],
        &[(
            "PAGURUS_DATA_DIR",
            dir.path().join("other").to_str().unwrap(),
        )],
    );
    let took = started.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "address in use by another process (pid {} pagurus)",
            broker.pid()
        )),
        "{stderr}"
    );
    // The probe used to wait 3 s for the listener to go away.
    assert!(took < Duration::from_secs(1), "refused after {took:?}");
}

#[test]
fn a_low_locked_memory_limit_is_one_line_once() {
    let dir = tempfile::tempdir().unwrap();
    // The broker runs as `nobody` when this is root (root is exempt from the limit).
    let root = nix_is_root();
    if root {
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
    }
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get().min(2));
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut command = Command::new("prlimit");
    // 1 MiB: above the 512 KiB glommio refuses to start under, below its 10 MiB per core.
    command.arg("--memlock=1048576:1048576");
    if root {
        command.args([
            "setpriv",
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
        ]);
    }
    let log = dir.path().join("log");
    let mut child = command
        .arg(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--no-shard-ports", "--cores", &cores.to_string()])
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .env_remove("RUST_LOG")
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("prlimit (util-linux) runs");
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.matches("core serving").count() == cores {
            break text;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "broker exited:\n{text}"
        );
        assert!(Instant::now() < deadline, "no start within 30 s:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    // SAFETY: kill(2) on the child's own pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    assert!(child.wait().unwrap().success(), "{text}");
    let memlock_lines = text.lines().filter(|l| l.contains("ulimit -l")).count();
    assert_eq!(memlock_lines, 1, "{text}");
    for glommio in [
        "registering buffers",
        "OutOfMemory",
        "Cannot allocate memory",
    ] {
        assert!(!text.contains(glommio), "{glommio}:\n{text}");
    }
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

#[test]
fn an_interrupted_produce_says_what_was_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args([
            "produce",
            "--topic",
            "ctrl-c",
            "--partition",
            "0",
            "--broker",
        ])
        .arg(broker.addr.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Three lines, and stdin left open: the user is still typing when Ctrl-C comes.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"one\ntwo\nthree\n").unwrap();
    let mut client = broker.client();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .list_offsets("ctrl-c", 0, pagurus::protocol::native::OffsetSpec::Latest)
        .unwrap_or(0)
        < 3
    {
        assert!(Instant::now() < deadline, "the records were not stored");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Stored; the acknowledgement is on its way to the producer.
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: kill(2) on the child's own pid.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "produce ignored Ctrl-C");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    drop(stdin);
    assert_eq!(status.code(), Some(128 + libc::SIGINT), "{stderr}");
    assert!(
        stderr.contains("interrupted: 3 records acknowledged to ctrl-c"),
        "{stderr}"
    );
}
