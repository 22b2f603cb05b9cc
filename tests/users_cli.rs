//! `pagurus users create|delete|list` on a real data directory, through the real binary:
//! what it stores logs in (a SCRAM exchange against the stored credential), the password
//! is in no file, the broker then starts on the directory, and the command refuses while
//! the broker runs, on someone else's directory, and on a damaged users file.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use pagurus::security::scram::client::ScramClient;
use pagurus::security::scram::server::ServerExchange;
use pagurus::security::scram::{Mechanism, ScramError, new_nonce};
use pagurus::security::users::Users;

const PASSWORD: &str = "correct horse battery staple";

/// Runs `pagurus users ARGS` with `stdin` as its standard input.
fn users(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .arg("users")
        .args(args)
        .env_remove("PAGURUS_DATA_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn refused(out: &Output, reason: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected a refusal ({reason})");
    assert!(stderr.contains(reason), "expected {reason:?} in: {stderr}");
}

/// A whole SCRAM exchange against `data_dir`'s users file.
fn log_in(
    data_dir: &Path,
    mechanism: Mechanism,
    user: &str,
    password: &str,
) -> Result<(), ScramError> {
    let users = Users::load(data_dir).unwrap().unwrap();
    let (client, first) = ScramClient::start(mechanism, user, password.as_bytes(), &new_nonce()?)?;
    let first = pagurus::security::scram::ClientFirst::parse(first.as_bytes())?;
    let credential = users.credential(&first.user, mechanism);
    let (server, server_first) =
        ServerExchange::start(mechanism, first, credential, users.secret(), &new_nonce()?)?;
    let (client, last) = client.server_first(server_first.as_bytes())?;
    let done = server.finish(last.as_bytes())?;
    client.server_final(done.server_final.as_bytes())
}

/// Every byte of every file under `dir`.
fn all_bytes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(all_bytes(&path));
        } else {
            found.push((path.display().to_string(), std::fs::read(&path).unwrap()));
        }
    }
    found
}

#[test]
fn users_are_created_listed_deleted_and_log_in() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let dir = data.to_str().unwrap();
    let created = ok(&users(
        &["create", "alice", "--data-dir", dir, "--password-stdin"],
        &format!("{PASSWORD}\n"),
    ));
    assert!(
        created.contains("created user alice (SCRAM-SHA-256, SCRAM-SHA-512)"),
        "{created}"
    );
    let bob = [
        "create",
        "bob",
        "--data-dir",
        dir,
        "--password-stdin",
        "--mechanism",
        "SCRAM-SHA-512",
    ];
    ok(&users(&bob, "bobs-password"));
    refused(
        &users(&bob, "again"),
        "already has a SCRAM-SHA-512 credential",
    );
    let listed = ok(&users(&["list", "--data-dir", dir], ""));
    assert!(
        listed.contains("alice  SCRAM-SHA-256,SCRAM-SHA-512"),
        "{listed}"
    );
    assert!(listed.contains("bob    SCRAM-SHA-512"), "{listed}");
    let json: serde_json::Value = serde_json::from_str(&ok(&users(
        &["list", "--data-dir", dir, "--output", "json"],
        "",
    )))
    .unwrap();
    assert_eq!(json[1]["name"], "bob");
    assert_eq!(json[1]["mechanisms"], serde_json::json!(["SCRAM-SHA-512"]));

    // What was stored logs in with the password, and only with it.
    for mechanism in Mechanism::ALL {
        log_in(&data, mechanism, "alice", PASSWORD).unwrap();
        assert_eq!(
            log_in(&data, mechanism, "alice", "wrong"),
            Err(ScramError::AuthenticationFailed)
        );
    }
    log_in(&data, Mechanism::ScramSha512, "bob", "bobs-password").unwrap();
    assert_eq!(
        log_in(&data, Mechanism::ScramSha256, "bob", "bobs-password"),
        Err(ScramError::AuthenticationFailed),
        "bob has no SCRAM-SHA-256 credential"
    );

    // No password anywhere in the data directory.
    for (path, bytes) in all_bytes(&data) {
        for password in [PASSWORD, "bobs-password"] {
            let found = bytes
                .windows(password.len())
                .any(|w| w == password.as_bytes());
            assert!(!found, "{path} holds a password");
        }
    }

    ok(&users(&["delete", "bob", "--data-dir", dir], ""));
    refused(
        &users(&["delete", "bob", "--data-dir", dir], ""),
        "there is no user \"bob\"",
    );
    let listed = ok(&users(&["list", "--data-dir", dir], ""));
    assert!(
        listed.contains("alice") && !listed.contains("bob"),
        "{listed}"
    );
}

#[test]
fn users_refuses_bad_requests_with_the_reason() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let dir = data.to_str().unwrap();
    refused(
        &users(&["create", "alice", "--data-dir", dir], PASSWORD),
        "--password-stdin",
    );
    refused(
        &users(
            &["create", "alice", "--data-dir", dir, "--password-stdin"],
            "\n",
        ),
        "empty",
    );
    refused(
        &users(
            &["create", "a b", "--data-dir", dir, "--password-stdin"],
            PASSWORD,
        ),
        "whitespace",
    );
    assert!(!data.exists(), "nothing is made for a refused request");
    refused(
        &users(&["list", "--data-dir", dir], ""),
        "is not a directory",
    );
    std::fs::create_dir(&data).unwrap();
    refused(&users(&["list", "--data-dir", dir], ""), "has no users");

    // Someone else's directory is left alone.
    let foreign = root.path().join("foreign");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("thesis.txt"), b"years").unwrap();
    let args = [
        "create",
        "alice",
        "--data-dir",
        foreign.to_str().unwrap(),
        "--password-stdin",
    ];
    refused(&users(&args, PASSWORD), "is not a pagurus data directory");
    assert!(!foreign.join("security").exists());
}

#[test]
fn a_damaged_users_file_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let dir = data.to_str().unwrap();
    ok(&users(
        &["create", "alice", "--data-dir", dir, "--password-stdin"],
        PASSWORD,
    ));
    let path = data.join("security/users");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("alice", "alicf", 1)).unwrap();
    let out = users(&["list", "--data-dir", dir], "");
    refused(&out, &path.display().to_string());
    refused(&out, "is damaged");
    refused(
        &users(
            &["create", "bob", "--data-dir", dir, "--password-stdin"],
            PASSWORD,
        ),
        "is damaged",
    );
    assert_eq!(
        std::fs::read_to_string(&path).unwrap(),
        text.replacen("alice", "alicf", 1),
        "left as it was"
    );
}

#[test]
fn users_made_offline_then_the_broker_starts_and_locks_out_the_command() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let dir = data.to_str().unwrap();
    ok(&users(
        &["create", "admin", "--data-dir", dir, "--password-stdin"],
        PASSWORD,
    ));
    let mut broker = common::Broker::start_in(&data, 1, &[]);
    refused(
        &users(
            &["create", "eve", "--data-dir", dir, "--password-stdin"],
            PASSWORD,
        ),
        "the broker is running",
    );
    refused(
        &users(&["list", "--data-dir", dir], ""),
        "the broker is running",
    );
    broker.terminate();
    let listed = ok(&users(&["list", "--data-dir", dir], ""));
    assert!(
        listed.contains("admin") && !listed.contains("eve"),
        "{listed}"
    );
}
