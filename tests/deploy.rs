//! deploy/: the systemd unit passes `systemd-analyze verify`, scripts/install.sh stages
//! what it promises, and the sample config sets only real flags to values the broker takes.

use std::collections::BTreeSet;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const UNIT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/pagurus.service");
const ENV_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/pagurus.env");
const INSTALLED_BIN: &str = "ExecStart=/usr/local/bin/pagurus serve";

/// `systemd-analyze verify` of `unit` whose ExecStart names `bin` instead of
/// /usr/local/bin/pagurus (verify checks the binary exists). Any warning fails.
fn verify_unit(unit: &Path, bin: &Path) {
    let text = std::fs::read_to_string(unit).unwrap();
    assert_eq!(text.matches(INSTALLED_BIN).count(), 1, "{unit:?}");
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("pagurus.service");
    let exec = format!("ExecStart={} serve", bin.display());
    std::fs::write(&copy, text.replace(INSTALLED_BIN, &exec)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&copy)
        .output()
        .unwrap_or_else(|e| {
            panic!("systemd-analyze is needed ({e}); `apt-get install systemd` (.ci/run does)")
        });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "verify failed:\n{said}");
    assert!(said.trim().is_empty(), "verify warned:\n{said}");
}

#[test]
fn systemd_unit_verifies() {
    verify_unit(Path::new(UNIT), Path::new(env!("CARGO_BIN_EXE_pagurus")));
    let unit = std::fs::read_to_string(UNIT).unwrap();
    for line in [
        "User=pagurus",
        "LimitMEMLOCK=infinity",
        "LimitNOFILE=1048576",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "StateDirectory=pagurus",
        "EnvironmentFile=/etc/pagurus/pagurus.env",
        "SystemCallFilter=@system-service",
    ] {
        assert!(unit.lines().any(|l| l == line), "unit lacks {line}");
    }
}

#[test]
fn install_script_stages_binary_unit_config_and_docs() {
    let dest = tempfile::tempdir().unwrap();
    let install = || {
        let out = Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/install.sh"))
            .env("DESTDIR", dest.path())
            .env("PAGURUS_BIN", env!("CARGO_BIN_EXE_pagurus"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "install.sh failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    install();
    let at = |p: &str| -> PathBuf { dest.path().join(p) };
    let mode = |p: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(at(p)).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode("usr/local/bin/pagurus"), 0o755);
    assert_eq!(mode("etc/systemd/system/pagurus.service"), 0o644);
    assert_eq!(mode("etc/pagurus/pagurus.env"), 0o640);
    for doc in ["README.md", "OPERATIONS.md", "TUNING.md"] {
        assert!(
            at(&format!("usr/local/share/doc/pagurus/{doc}")).is_file(),
            "{doc}"
        );
    }
    let version = Command::new(at("usr/local/bin/pagurus"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("pagurus "));
    verify_unit(
        &at("etc/systemd/system/pagurus.service"),
        &at("usr/local/bin/pagurus"),
    );

    // An operator's edited config survives a reinstall; the new sample goes beside it.
    std::fs::write(at("etc/pagurus/pagurus.env"), "PAGURUS_CORES=3\n").unwrap();
    install();
    assert_eq!(
        std::fs::read_to_string(at("etc/pagurus/pagurus.env")).unwrap(),
        "PAGURUS_CORES=3\n"
    );
    assert!(at("etc/pagurus/pagurus.env.new").is_file());
}

/// `(name, value, commented out)` of every `PAGURUS_*` line of the sample config.
fn sample_settings() -> Vec<(String, String, bool)> {
    std::fs::read_to_string(ENV_FILE)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (commented, line) = match line.strip_prefix('#') {
                Some(rest) => (true, rest),
                None => (false, line),
            };
            let (name, value) = line.split_once('=')?;
            name.starts_with("PAGURUS_")
                .then(|| (name.to_string(), value.to_string(), commented))
        })
        .collect()
}

#[test]
fn sample_config_covers_every_serve_flag_and_starts_a_broker() {
    let help = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    // One line: help is wrapped to the terminal, and `[env: X]` may be cut after `env:`.
    let help = String::from_utf8(help.stdout).unwrap();
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let serve_vars: BTreeSet<String> = help
        .split("[env: ")
        .skip(1)
        .map(|rest| rest.split('=').next().unwrap().to_string())
        .collect();
    let settings = sample_settings();
    let sample_vars: BTreeSet<String> = settings.iter().map(|(n, _, _)| n.clone()).collect();
    assert_eq!(
        sample_vars, serve_vars,
        "deploy/pagurus.env must name every serve variable (commented out or set), and no other"
    );

    // The broker starts with the sample's settings, only its addresses and directory moved
    // to this test's own (flags beat the environment).
    let dir = tempfile::tempdir().unwrap();
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
    };
    let (listen, metrics) = (free(), free());
    let mut command = Command::new(env!("CARGO_BIN_EXE_pagurus"));
    command
        .arg("serve")
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--listen", &listen.to_string()])
        .args(["--metrics-listen", &metrics.to_string()])
        .args(["--cores", "1", "--no-shard-ports"])
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("log")).unwrap());
    for (name, value, commented) in &settings {
        if !commented {
            command.env(name, value);
        }
    }
    let mut child = command.spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let up = |addr: SocketAddr| TcpStream::connect(addr).is_ok();
    while !(up(listen) && up(metrics)) {
        if let Some(status) = child.try_wait().unwrap() {
            let log = std::fs::read_to_string(dir.path().join("log")).unwrap_or_default();
            panic!("broker with the sample config exited with {status}:\n{log}");
        }
        assert!(Instant::now() < deadline, "broker did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert!(child.wait().unwrap().success());
}
