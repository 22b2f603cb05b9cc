//! Kafka's admin APIs under `--authorizer acl`, checked per resource as Kafka's broker
//! checks them (`tests/kafka/acl_resources.py`: confluent-kafka's AdminClient and
//! kafka-python's KafkaAdminClient). alice logs in with SCRAM on a SASL_PLAINTEXT listener
//! with ACLs made before the start: Describe on the group `billing` (not `audit`), Read and
//! DescribeConfigs on the topic `orders` (nothing on `payments`). Each refusal lands in its
//! own resource's entry while the other resources of the same request are served; granting
//! AlterConfigs, Delete and Alter on `orders` online lets her change its settings, delete
//! its records and grow it. The super user (User:ANONYMOUS on PLAINTEXT) does everything.

mod common;

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use common::security::{create_user, pagurus_ok};
use common::{Broker, free_ports, have_python};
use serde_json::{Value, json};

const PASSWORD: &str = "alice-Secret-4711";

fn acl(data: &Path, operation: &str, resource: &[&str]) {
    let data = data.display().to_string();
    let mut args = vec![
        "acls",
        "add",
        "--data-dir",
        &data,
        "--principal",
        "User:alice",
        "--operation",
        operation,
    ];
    args.extend(resource);
    pagurus_ok(&args, "");
}

/// A broker with alice and her ACLs, the super user User:ANONYMOUS on PLAINTEXT, a
/// SASL_PLAINTEXT listener, and (made by the super user) the topics `orders` and
/// `payments` with records and the groups `billing` and `audit` with offsets on both.
fn start() -> (tempfile::TempDir, Broker, SocketAddr) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    create_user(&data, "alice", PASSWORD);
    acl(&data, "Describe", &["--group", "billing"]);
    acl(&data, "Read", &["--topic", "orders"]);
    acl(&data, "DescribeConfigs", &["--topic", "orders"]);
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
            "--super-users",
            "User:ANONYMOUS",
        ],
    );
    assert_eq!(driver(broker.addr, false, &["setup"])["setup"], "done");
    (dir, broker, sasl)
}

/// The driver's JSON line; as alice (SCRAM) when `alice`, else as the super user.
fn driver(addr: SocketAddr, alice: bool, phase: &[&str]) -> Value {
    let script = format!(
        "{}/tests/kafka/acl_resources.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut command = Command::new("timeout");
    command.args(["180", "python3", &script, &addr.to_string()]);
    if alice {
        command
            .arg("user=alice")
            .arg(format!("password={PASSWORD}"));
    }
    let out = command.args(phase).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "acl_resources.py {phase:?}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("acl_resources.py printed no JSON ({e}): {stdout}"))
}

fn error(name: &str) -> Value {
    json!({ "error": name })
}

/// The cluster operations Kafka has, as librdkafka names them.
const CLUSTER_OPERATIONS: [&str; 7] = [
    "ALTER",
    "ALTER_CONFIGS",
    "CLUSTER_ACTION",
    "CREATE",
    "DESCRIBE",
    "DESCRIBE_CONFIGS",
    "IDEMPOTENT_WRITE",
];

#[test]
fn admin_apis_are_authorized_per_resource() {
    if !have_python("confluent_kafka") || !have_python("kafka") {
        return;
    }
    let (_dir, mut broker, sasl) = start();
    let topic_denied = error("TOPIC_AUTHORIZATION_FAILED");
    let group_denied = error("GROUP_AUTHORIZATION_FAILED");
    let cluster_denied = error("CLUSTER_AUTHORIZATION_FAILED");
    let both = |orders: Value, payments: Value| json!({"orders": orders, "payments": payments});

    // alice's ACLs as made before the start.
    let alice = driver(sasl, true, &["probe", "2", "3600000"]);
    assert_eq!(
        alice["describe_groups"],
        json!({"billing": "EMPTY", "audit": group_denied}),
        "{alice}"
    );
    assert_eq!(alice["list_groups"], json!(["billing"]), "{alice}");
    assert_eq!(alice["offsets_all"], json!({"orders/0": 2}), "{alice}");
    assert_eq!(
        alice["offsets_named"],
        json!({"orders/0": 2, "payments/0": topic_denied}),
        "{alice}"
    );
    assert_eq!(
        alice["describe_configs"],
        both(json!("-1"), topic_denied.clone()),
        "{alice}"
    );
    assert_eq!(
        alice["broker_configs"],
        json!({"0": cluster_denied}),
        "{alice}"
    );
    let refused = both(topic_denied.clone(), topic_denied.clone());
    for api in [
        "incremental_alter",
        "alter",
        "delete_records",
        "create_partitions",
    ] {
        assert_eq!(alice[api], refused, "{api}: {alice}");
    }
    assert_eq!(
        alice["after_alter"],
        both(json!("-1"), topic_denied.clone()),
        "unchanged: {alice}"
    );
    assert_eq!(alice["cluster_operations"], json!([]), "{alice}");
    assert_eq!(alice["elect_leaders"], cluster_denied, "{alice}");
    assert_eq!(alice["log_dirs"], json!([]), "{alice}");
    assert_eq!(
        alice["offset_delete"],
        json!({"error": "GroupAuthorizationFailedError"}),
        "{alice}"
    );
    assert_eq!(
        alice["delete_groups"],
        json!({"audit": group_denied}),
        "{alice}"
    );

    // Granted online by the super user: AlterConfigs, Delete and Alter on orders, and
    // Describe on audit (so her DeleteGroups reaches its coordinator, which refuses it).
    for (operation, resource, name) in [
        ("ALTER_CONFIGS", "TOPIC", "orders"),
        ("DELETE", "TOPIC", "orders"),
        ("ALTER", "TOPIC", "orders"),
        ("DESCRIBE", "GROUP", "audit"),
    ] {
        let granted = driver(
            broker.addr,
            false,
            &["grant", "alice", operation, resource, name],
        );
        assert_eq!(granted["created"], json!([null]), "{granted}");
    }
    let alice = driver(sasl, true, &["probe", "2", "3600000"]);
    let accepted = both(Value::Null, topic_denied.clone());
    for api in ["incremental_alter", "alter", "create_partitions"] {
        assert_eq!(alice[api], accepted, "{api}: {alice}");
    }
    assert_eq!(
        alice["after_incremental"],
        both(json!("3600000"), topic_denied.clone()),
        "{alice}"
    );
    assert_eq!(
        alice["after_alter"],
        both(json!("3600001"), topic_denied.clone()),
        "{alice}"
    );
    assert_eq!(
        alice["delete_records"],
        both(json!(1), topic_denied.clone()),
        "{alice}"
    );
    // Still nothing on the groups and the cluster.
    assert_eq!(
        alice["delete_groups"],
        json!({"audit": group_denied}),
        "{alice}"
    );
    assert_eq!(alice["elect_leaders"], cluster_denied, "{alice}");

    // The super user does everything, on every resource.
    let admin = driver(broker.addr, false, &["probe", "3", "7200000"]);
    assert_eq!(
        admin["describe_groups"],
        json!({"billing": "EMPTY", "audit": "EMPTY"}),
        "{admin}"
    );
    assert_eq!(admin["list_groups"], json!(["audit", "billing"]), "{admin}");
    assert_eq!(
        admin["offsets_all"],
        json!({"orders/0": 2, "payments/0": 2}),
        "{admin}"
    );
    assert_eq!(
        admin["describe_configs"],
        both(json!("3600001"), json!("-1")),
        "{admin}"
    );
    assert_eq!(
        admin["after_alter"],
        both(json!("7200001"), json!("7200001")),
        "{admin}"
    );
    for api in ["incremental_alter", "alter", "create_partitions"] {
        assert_eq!(admin[api], both(Value::Null, Value::Null), "{api}: {admin}");
    }
    assert_eq!(admin["delete_records"], both(json!(1), json!(1)), "{admin}");
    assert_eq!(
        admin["cluster_operations"],
        json!(CLUSTER_OPERATIONS),
        "{admin}"
    );
    assert_eq!(
        admin["elect_leaders"],
        json!({"orders/0": error("ELECTION_NOT_NEEDED")}),
        "{admin}"
    );
    assert_eq!(admin["log_dirs"], json!(["orders", "payments"]), "{admin}");
    assert_eq!(admin["delete_groups"], json!({"audit": null}), "{admin}");

    // Each refusal was logged with alice's principal and counted by resource type.
    let log = broker.log_text();
    for (resource, name, operation) in [
        ("Group", "audit", "Describe"),
        ("Group", "audit", "Delete"),
        ("Group", "billing", "Delete"),
        ("Topic", "payments", "DescribeConfigs"),
        ("Topic", "payments", "AlterConfigs"),
        // (librdkafka refuses DeleteRecords on payments itself: Metadata did not show it.)
        ("Topic", "orders", "Delete"),
        ("Topic", "orders", "Alter"),
        ("Cluster", "kafka-cluster", "Alter"),
        ("Cluster", "kafka-cluster", "Describe"),
    ] {
        let line = format!(
            r#"principal=User:alice peer=127.0.0.1 listener=SP resource="{resource}" name="{name}" operation="{operation}""#
        );
        assert!(log.contains(&line), "no audit line {line}");
    }
    let counters = common::raw::counters(&mut broker);
    for kind in ["topic", "group", "cluster"] {
        let counted = counters.get(&format!("authz_denied_{kind}")).copied();
        assert!(counted.unwrap_or(0) > 0, "{kind}: {counters:?}");
    }
}
