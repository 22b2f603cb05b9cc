//! `--authorizer acl` through real clients: ACLs made with `pagurus acls add` before the
//! start; alice (SCRAM on SASL_PLAINTEXT, kcat) may write and read `orders` and read the
//! group `billing`, and nothing else; User:ANONYMOUS (the PLAINTEXT listener: the native
//! client and HermitMQ v1) may create topics and write `orders` only.

mod common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;

use common::hermit::{V1Producer, load_batch};
use common::security::{create_user, kcat_scram, pagurus_ok};
use common::{Broker, free_ports, have};

fn kcat(sasl: SocketAddr, args: &[&str], stdin: &[u8]) -> std::process::Output {
    kcat_scram(sasl, "alice", PASSWORD, args, stdin)
}
use pagurus::client::ClientError;
use pagurus::protocol::native::{ErrorCode, TopicSettings};

const PASSWORD: &str = "alice-Secret-4711";

fn acl(data: &Path, principal: &str, operation: &str, resource: &[&str]) {
    let data = data.display().to_string();
    let mut args = vec![
        "acls",
        "add",
        "--data-dir",
        &data,
        "--principal",
        principal,
        "--operation",
        operation,
    ];
    args.extend(resource);
    pagurus_ok(&args, "");
}

fn start() -> (tempfile::TempDir, Broker, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create_user(&data, "alice", PASSWORD);
    acl(&data, "User:alice", "Write", &["--topic", "orders"]);
    acl(&data, "User:alice", "Read", &["--topic", "orders"]);
    acl(&data, "User:alice", "Read", &["--group", "billing"]);
    acl(&data, "User:ANONYMOUS", "Create", &["--cluster"]);
    acl(&data, "User:ANONYMOUS", "Write", &["--topic", "orders"]);
    let sasl = SocketAddr::from(([127, 0, 0, 1], free_ports(3)));
    let listener = format!("SP=SASL_PLAINTEXT://{sasl}");
    let broker = Broker::start_in(
        &data,
        2,
        &[
            "--fsync",
            "never",
            "--listener",
            &listener,
            "--authorizer",
            "acl",
        ],
    );
    for topic in ["orders", "payments"] {
        let settings = TopicSettings {
            partitions: 2,
            ..Default::default()
        };
        broker.client().create_topic(topic, settings).unwrap();
    }
    (dir, broker, sasl)
}

#[test]
fn alice_writes_orders_joins_billing_and_sees_nothing_else() {
    if !have("kcat", "kcat", &["-V"]) {
        return;
    }
    let (_dir, broker, sasl) = start();
    let produced = kcat(sasl, &["-P", "-t", "orders"], b"one\ntwo\n");
    assert!(produced.status.success());
    assert!(produced.stderr.is_empty(), "{produced:?}");
    let refused = kcat(sasl, &["-P", "-t", "payments"], b"three\n");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("Topic authorization failed"), "{stderr}");
    // A listing of every topic leaves payments out quietly: what a listing hides is not a
    // refusal, so no audit line (clients poll metadata).
    let payments_denials = |log: &str| {
        log.lines()
            .filter(|l| l.contains("pagurus::audit") && l.contains("name=\"payments\""))
            .count()
    };
    let denials_before = payments_denials(&broker.log_text());
    let meta = kcat(sasl, &["-L"], b"");
    let meta = String::from_utf8_lossy(&meta.stdout);
    assert!(meta.contains("topic \"orders\""), "{meta}");
    assert!(!meta.contains("payments"), "{meta}");
    assert_eq!(payments_denials(&broker.log_text()), denials_before);
    // A consumer group: billing may be joined, another may not.
    let read = kcat(
        sasl,
        &[
            "-C",
            "-G",
            "billing",
            "orders",
            "-e",
            "-q",
            "-X",
            "auto.offset.reset=earliest",
        ],
        b"",
    );
    let mut got: Vec<String> = String::from_utf8_lossy(&read.stdout)
        .lines()
        .map(String::from)
        .collect();
    got.sort();
    assert_eq!(got, ["one", "two"], "{read:?}");
    let other = kcat(sasl, &["-C", "-G", "other", "orders", "-e"], b"");
    let stderr = String::from_utf8_lossy(&other.stderr);
    assert!(stderr.contains("not authorized"), "{stderr}");
    let log = broker.log_text();
    assert!(log.contains("pagurus::audit"), "{log}");
    assert!(log.contains("name=\"payments\""), "{log}");
}

#[test]
fn native_and_hermit_clients_are_held_to_the_same_acls() {
    let (_dir, broker, _) = start();
    let mut client = broker.client();
    let batch = load_batch(0, 0);
    client
        .produce("orders", 0, std::slice::from_ref(&batch))
        .unwrap();
    let refused = client.produce("payments", 0, std::slice::from_ref(&batch));
    let code = refused.as_ref().err().and_then(ClientError::code);
    assert_eq!(
        code,
        Some(ErrorCode::TopicAuthorizationFailed),
        "{refused:?}"
    );
    // Reading is not granted to User:ANONYMOUS at all.
    let read = client.fetch("orders", 0, 0, 1 << 20, std::time::Duration::ZERO);
    let code = read.as_ref().err().and_then(ClientError::code);
    assert_eq!(code, Some(ErrorCode::TopicAuthorizationFailed));
    // Changing the cluster's members needs Alter on the cluster, checked before anything.
    let changed = client.change_member(2, Some("127.0.0.1:9"));
    let code = changed.as_ref().err().and_then(ClientError::code);
    assert_eq!(
        code,
        Some(ErrorCode::ClusterAuthorizationFailed),
        "{changed:?}"
    );
    // HermitMQ v1: allowed on orders; on payments the connection closes at the handshake.
    let mut allowed = V1Producer::connect(&broker, "orders", 1);
    assert_eq!(allowed.send(&batch).0, 0);
    let mut refused = V1Producer::connect(&broker, "payments", 1);
    refused.stream.write_all(&batch).unwrap_or(());
    let mut rest = Vec::new();
    let _ = refused.stream.read_to_end(&mut rest);
    assert!(rest.is_empty(), "no ack for a refused producer: {rest:?}");
    assert!(broker.log_text().contains("operation=\"Write\""));
}
