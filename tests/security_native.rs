//! The native protocol's login and TLS, through the real CLI: `pagurus produce`, `consume`
//! and `topics` log in with SCRAM (`--user`, `--password-file`) on SASL_PLAINTEXT and
//! SASL_SSL, present a client certificate on SSL (`--tls-cert`), and are held to the ACLs
//! as Kafka clients are. Refusals: a wrong password and an unknown user (the same answer),
//! no login on a SASL listener, plaintext on a TLS port, an action the ACLs do not allow.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::pki::Pki;
use common::security::{create_user, pagurus_ok};
use common::{Broker, free_ports};
use pagurus::client::blocking::Client;
use pagurus::client::secure::ConnectOptions;
use pagurus::protocol::native::TopicSettings;

const PASSWORD: &str = "alice-Secret-4711";
const WRONG_PASSWORD: &str = "mallory-Guess-0815";
const ADMIN_PASSWORD: &str = "admin-Secret-1234";
const BOB_PASSWORD: &str = "bob-Secret-9876";

struct Secured {
    dir: tempfile::TempDir,
    broker: Broker,
    pki: Pki,
    sasl_ssl: SocketAddr,
    ssl: SocketAddr,
    sasl_plain: SocketAddr,
}

fn acl(data: &Path, principal: &str, operation: &str, resource: &[&str]) {
    let data = data.display().to_string();
    let mut args = vec!["acls", "add", "--data-dir", &data];
    args.extend(["--principal", principal, "--operation", operation]);
    args.extend(resource);
    pagurus_ok(&args, "");
}

/// alice (SCRAM) may write and read `orders`; the certificate `CN=carol` may read it;
/// the harness (ANONYMOUS, on the PLAINTEXT listener) may create topics.
fn start() -> Secured {
    let cores = 2;
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("pki"));
    pki.client("carol", "carol");
    let data = dir.path().join("data");
    create_user(&data, "alice", PASSWORD);
    create_user(&data, "admin", ADMIN_PASSWORD);
    acl(&data, "User:alice", "Write", &["--topic", "orders"]);
    acl(&data, "User:alice", "Read", &["--topic", "orders"]);
    acl(&data, "User:CN=carol", "Read", &["--topic", "orders"]);
    acl(&data, "User:ANONYMOUS", "Create", &["--cluster"]);
    let base = free_ports(3 * (cores as u16 + 1));
    let at = |i: u16| SocketAddr::from(([127, 0, 0, 1], base + i * (cores as u16 + 1)));
    let (sasl_ssl, ssl, sasl_plain) = (at(0), at(1), at(2));
    let listeners = [
        format!("SEC=SASL_SSL://{sasl_ssl}"),
        format!("MTLS=SSL://{ssl}"),
        format!("SP=SASL_PLAINTEXT://{sasl_plain}"),
    ];
    let (cert, key, ca) = (
        pki.path("broker.pem"),
        pki.path("broker.key"),
        pki.path("ca.pem"),
    );
    let mut args = vec!["--fsync", "never", "--authorizer", "acl"];
    args.extend(["--super-users", "User:admin"]);
    for listener in &listeners {
        args.extend(["--listener", listener]);
    }
    args.extend([
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--tls-client-ca",
        &ca,
    ]);
    let broker = Broker::start_in(&data, cores, &args);
    for topic in ["orders", "payments"] {
        let settings = TopicSettings {
            partitions: 1,
            ..Default::default()
        };
        broker.client().create_topic(topic, settings).unwrap();
    }
    Secured {
        dir,
        broker,
        pki,
        sasl_ssl,
        ssl,
        sasl_plain,
    }
}

impl Secured {
    /// A password file holding `password`.
    fn password_file(&self, password: &str) -> String {
        let path = self.dir.path().join(format!("pw-{password}"));
        std::fs::write(&path, format!("{password}\n")).unwrap();
        path.display().to_string()
    }

    /// The connection flags of a SCRAM login as `user` at `broker`, over TLS if `tls`.
    fn login(&self, broker: SocketAddr, user: &str, password: &str, tls: bool) -> Vec<String> {
        let mut args = vec!["--broker".to_string(), broker.to_string()];
        args.extend(["--user".into(), user.into()]);
        args.extend(["--password-file".into(), self.password_file(password)]);
        if tls {
            args.extend(["--tls-ca".into(), self.pki.path("ca.pem")]);
        }
        args
    }

    /// The connection flags of carol's client certificate on the SSL listener.
    fn certificate(&self) -> Vec<String> {
        vec![
            "--broker".into(),
            self.ssl.to_string(),
            "--tls-ca".into(),
            self.pki.path("ca.pem"),
            "--tls-cert".into(),
            self.pki.path("carol.pem"),
            "--tls-key".into(),
            self.pki.path("carol.key"),
        ]
    }
}

/// `pagurus ARGS CONNECTION` with `stdin`, bounded in time.
fn pagurus(args: &[&str], connection: &[String], stdin: &str) -> Output {
    use std::io::Write;
    let mut child = Command::new("timeout")
        .arg("60")
        .arg(env!("CARGO_BIN_EXE_pagurus"))
        .args(args)
        .args(connection)
        .args(["--timeout-ms", "10000"])
        .env_remove("PAGURUS_BROKER")
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

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn consume_orders(connection: &[String]) -> Output {
    pagurus(
        &[
            "consume",
            "--topic",
            "orders",
            "--exit-at-end",
            "--count",
            "10",
        ],
        connection,
        "",
    )
}

#[test]
fn the_cli_logs_in_with_scram_over_sasl_plaintext_and_sasl_ssl() {
    let s = start();
    let over_sasl = s.login(s.sasl_plain, "alice", PASSWORD, false);
    let produced = pagurus(&["produce", "--topic", "orders"], &over_sasl, "one\ntwo\n");
    assert!(produced.status.success(), "{}", stderr(&produced));
    // SASL_SSL, with the other SCRAM mechanism.
    let mut over_tls = s.login(s.sasl_ssl, "alice", PASSWORD, true);
    over_tls.extend(["--sasl-mechanism".into(), "SCRAM-SHA-256".into()]);
    let produced = pagurus(&["produce", "--topic", "orders"], &over_tls, "three\n");
    assert!(produced.status.success(), "{}", stderr(&produced));
    for connection in [&over_sasl, &over_tls] {
        let consumed = consume_orders(connection);
        assert!(consumed.status.success(), "{}", stderr(&consumed));
        assert_eq!(
            String::from_utf8_lossy(&consumed.stdout),
            "one\ntwo\nthree\n"
        );
    }
    let log = s.broker.log_text();
    assert!(
        log.contains("SASL login") && log.contains("principal=User:alice"),
        "{log}"
    );
    assert!(log.contains("protocol=\"native\"") || log.contains("protocol=native"));
    assert!(
        !log.contains(PASSWORD),
        "the password is in the broker's log"
    );
}

#[test]
fn the_cli_is_held_to_the_acls_as_its_login_and_its_certificate() {
    let s = start();
    let alice = s.login(s.sasl_plain, "alice", PASSWORD, false);
    let refused = pagurus(&["produce", "--topic", "payments"], &alice, "x\n");
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("TopicAuthorizationFailed (36)"),
        "{}",
        stderr(&refused)
    );
    let produced = pagurus(&["produce", "--topic", "orders"], &alice, "for carol\n");
    assert!(produced.status.success(), "{}", stderr(&produced));
    // carol's certificate reads orders, and may not write it.
    let carol = s.certificate();
    let consumed = consume_orders(&carol);
    assert!(consumed.status.success(), "{}", stderr(&consumed));
    assert_eq!(String::from_utf8_lossy(&consumed.stdout), "for carol\n");
    let refused = pagurus(&["produce", "--topic", "orders"], &carol, "x\n");
    assert!(
        stderr(&refused).contains("TopicAuthorizationFailed (36)"),
        "{}",
        stderr(&refused)
    );
    let log = s.broker.log_text();
    assert!(log.contains("principal=User:CN=carol"), "{log}");
}

#[test]
fn bad_logins_and_missing_tls_are_refused_alike_and_serve_nothing() {
    let s = start();
    let wrong = pagurus(
        &["topics", "list"],
        &s.login(s.sasl_plain, "alice", WRONG_PASSWORD, false),
        "",
    );
    let unknown = pagurus(
        &["topics", "list"],
        &s.login(s.sasl_ssl, "mallory", PASSWORD, true),
        "",
    );
    for out in [&wrong, &unknown] {
        assert!(!out.status.success());
        let text = stderr(out);
        assert!(
            text.contains("AuthenticationFailed (35): Authentication failed: invalid credentials"),
            "{text}"
        );
        assert!(!text.contains("orders"), "{text}");
    }
    // No login on a SASL listener: the first request closes the connection unanswered.
    let anonymous = pagurus(
        &["topics", "list"],
        &["--broker".into(), s.sasl_plain.to_string()],
        "",
    );
    assert!(!anonymous.status.success());
    assert!(!String::from_utf8_lossy(&anonymous.stdout).contains("orders"));
    // Plaintext on a TLS port: no greeting comes back.
    let plain = Client::connect_with(
        &s.ssl.to_string(),
        Duration::from_secs(5),
        &ConnectOptions::default(),
    );
    assert!(
        plain.is_err(),
        "a plaintext client was greeted on the SSL port"
    );
    let log = s.broker.log_text();
    assert!(log.contains("SASL login failed"), "{log}");
    assert!(log.contains("request before authentication"), "{log}");
    for password in [PASSWORD, WRONG_PASSWORD] {
        assert!(!log.contains(password), "a password is in the broker's log");
    }
}

#[test]
fn a_login_on_a_listener_without_sasl_is_refused() {
    let s = start();
    // The PLAINTEXT listener (the harness's) takes no login.
    let out = pagurus(
        &["topics", "list"],
        &s.login(s.broker.addr, "alice", PASSWORD, false),
        "",
    );
    assert!(!out.status.success());
    assert!(stderr(&out).contains("takes no login"), "{}", stderr(&out));
    // ... and it closed that connection only: the listener serves the next one.
    let created = Client::connect(s.broker.addr)
        .unwrap()
        .create_topic("made-anonymously", TopicSettings::default());
    assert!(created.is_ok(), "{created:?}");
}

#[test]
fn users_and_acls_change_online_and_hold_at_the_next_request() {
    let s = start();
    let admin = s.login(s.sasl_plain, "admin", ADMIN_PASSWORD, false);
    let made = pagurus(
        &["users", "create", "bob", "--password-stdin"],
        &admin,
        &format!("{BOB_PASSWORD}\n"),
    );
    assert!(made.status.success(), "{}", stderr(&made));
    let listed = pagurus(&["users", "list"], &admin, "");
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    for user in ["admin", "alice", "bob"] {
        assert!(listed.contains(user), "{listed}");
    }
    // bob logs in at once, and may do nothing yet.
    let bob = s.login(s.sasl_ssl, "bob", BOB_PASSWORD, true);
    let refused = pagurus(&["produce", "--topic", "orders"], &bob, "x\n");
    assert!(
        stderr(&refused).contains("TopicAuthorizationFailed (36)"),
        "{}",
        stderr(&refused)
    );
    let acl = [
        "--principal",
        "User:bob",
        "--operation",
        "Write",
        "--topic",
        "orders",
    ];
    let added = pagurus(&[&["acls", "add"][..], &acl].concat(), &admin, "");
    assert!(added.status.success(), "{}", stderr(&added));
    assert!(String::from_utf8_lossy(&added.stdout).starts_with("added"));
    let produced = pagurus(&["produce", "--topic", "orders"], &bob, "from bob\n");
    assert!(produced.status.success(), "{}", stderr(&produced));
    let acls = pagurus(&["acls", "list", "--output", "json"], &admin, "");
    let acls: serde_json::Value = serde_json::from_slice(&acls.stdout).unwrap();
    let bobs = acls["acls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["principal"] == "User:bob");
    assert_eq!(bobs.count(), 1, "{acls}");
    // alice is no super user: she may not make users or see the ACLs.
    let alice = s.login(s.sasl_plain, "alice", PASSWORD, false);
    let refused = pagurus(
        &["users", "create", "eve", "--password-stdin"],
        &alice,
        "eve-pw\n",
    );
    assert!(
        stderr(&refused).contains("ClusterAuthorizationFailed (38)"),
        "{}",
        stderr(&refused)
    );
    let refused = pagurus(&["acls", "list"], &alice, "");
    assert!(
        stderr(&refused).contains("ClusterAuthorizationFailed (38)"),
        "{}",
        stderr(&refused)
    );
    // Removing the ACL and then bob: each holds at once.
    let removed = pagurus(&[&["acls", "remove"][..], &acl].concat(), &admin, "");
    assert!(String::from_utf8_lossy(&removed.stdout).starts_with("removed"));
    let refused = pagurus(&["produce", "--topic", "orders"], &bob, "x\n");
    assert!(
        stderr(&refused).contains("TopicAuthorizationFailed (36)"),
        "{}",
        stderr(&refused)
    );
    let deleted = pagurus(&["users", "delete", "bob"], &admin, "");
    assert!(deleted.status.success(), "{}", stderr(&deleted));
    let gone = pagurus(&["topics", "list"], &bob, "");
    assert!(
        stderr(&gone).contains("AuthenticationFailed (35)"),
        "{}",
        stderr(&gone)
    );
    let again = pagurus(&["users", "delete", "bob"], &admin, "");
    assert!(
        stderr(&again).contains("no user \"bob\""),
        "{}",
        stderr(&again)
    );
    let log = s.broker.log_text();
    assert!(
        log.contains("user credentials set") && log.contains("ACL added"),
        "{log}"
    );
    assert!(!log.contains(BOB_PASSWORD) && !log.contains(ADMIN_PASSWORD));
}

#[test]
fn acls_online_need_an_authorizer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &["--fsync", "never"]);
    let connection = ["--broker".to_string(), broker.addr.to_string()];
    let out = pagurus(&["acls", "list"], &connection, "");
    assert!(
        stderr(&out).contains("SecurityDisabled (39)"),
        "{}",
        stderr(&out)
    );
    // Users may still be made online (as Kafka allows without an authorizer).
    let made = pagurus(
        &["users", "create", "bob", "--password-stdin"],
        &connection,
        "pw-bob\n",
    );
    assert!(made.status.success(), "{}", stderr(&made));
    let listed = pagurus(&["users", "list", "--output", "json"], &connection, "");
    assert!(String::from_utf8_lossy(&listed.stdout).contains("\"bob\""));
}
