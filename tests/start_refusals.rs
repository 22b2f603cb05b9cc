//! Starts that cannot work fail at once with one clear line: a second broker on a port or
//! a data directory in use, more cores than CPUs, a locked-memory limit glommio cannot run
//! under.

mod common;

use std::process::Command;

use common::Broker;

fn serve(data: &std::path::Path, listen: &str, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--data-dir"])
        .arg(data)
        .args(["--listen", listen, "--cores", "1"])
        .args(extra)
        .env_remove("PAGURUS_CORES")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "second start succeeded: {stderr}");
    stderr
}

#[test]
fn a_second_broker_on_a_port_or_a_data_dir_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let addr = broker.addr.to_string();
    let stderr = serve(&dir.path().join("other"), &addr, &[]);
    assert!(
        stderr.contains("address in use by another process"),
        "{stderr}"
    );
    // A shard port (listen port + 1) in use is refused the same way.
    let below = format!("127.0.0.1:{}", broker.addr.port() - 1);
    let stderr = serve(&dir.path().join("other2"), &below, &[]);
    assert!(
        stderr.contains("address in use by another process"),
        "{stderr}"
    );
    let stderr = serve(
        &dir.path().join("data"),
        "127.0.0.1:0",
        &["--no-shard-ports"],
    );
    assert!(
        stderr.contains("in use by another pagurus process"),
        "{stderr}"
    );
    // The first broker still serves.
    broker.client().metadata(&[]).unwrap();
}

#[test]
fn more_cores_than_cpus_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let cpus = std::thread::available_parallelism().unwrap().get();
    let cores = (cpus + 1).to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--cores", &cores])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("--cores {cores} but this process may run on")),
        "{stderr}"
    );
}

#[test]
fn a_tiny_locked_memory_limit_names_what_to_raise() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("prlimit")
        .arg("--memlock=65536")
        .arg(env!("CARGO_BIN_EXE_pagurus"))
        .args(["serve", "--data-dir"])
        .arg(dir.path())
        .args(["--listen", "127.0.0.1:0", "--cores", "1"])
        .output()
        .expect("prlimit (util-linux) is installed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(
        stderr.contains("ulimit -l") && stderr.contains("LimitMEMLOCK"),
        "{stderr}"
    );
}
