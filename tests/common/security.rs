//! What the security tests share: running `pagurus` with stdin (users and ACLs made offline),
//! and kcat logging in with SCRAM on a SASL_PLAINTEXT listener.

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs `pagurus ARGS` with `stdin`, failing the test unless it succeeds.
pub fn pagurus_ok(args: &[&str], stdin: &str) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .args(args)
        .env_remove("PAGURUS_DATA_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).unwrap();
    drop(input);
    assert!(child.wait().unwrap().success(), "pagurus {args:?}");
}

/// Makes user `name` with `password` in the (stopped) broker's data directory `data`.
pub fn create_user(data: &Path, name: &str, password: &str) {
    let data = data.display().to_string();
    pagurus_ok(
        &[
            "users",
            "create",
            name,
            "--password-stdin",
            "--data-dir",
            &data,
        ],
        &format!("{password}\n"),
    );
}

/// kcat with `args`, logged in as `user` with SCRAM-SHA-512 on the SASL_PLAINTEXT listener
/// at `sasl`; `stdin` is what it produces.
pub fn kcat_scram(
    sasl: SocketAddr,
    user: &str,
    password: &str,
    args: &[&str],
    stdin: &[u8],
) -> Output {
    let mut child = Command::new("timeout")
        .args(["30", "kcat", "-b", &sasl.to_string()])
        .args(args)
        .args(["-X", "security.protocol=SASL_PLAINTEXT"])
        .args(["-X", "sasl.mechanisms=SCRAM-SHA-512"])
        .arg("-X")
        .arg(format!("sasl.username={user}"))
        .arg("-X")
        .arg(format!("sasl.password={password}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}
