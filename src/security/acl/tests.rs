use std::net::IpAddr;

use super::actions::{Denied, HermitRole, KafkaApi, NativeApi, Need, RequestKind, actions};
use super::*;

const CLIENT: &str = "10.0.0.7";

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

fn acl(
    principal: &str,
    permission: Permission,
    operation: Operation,
    resource_type: ResourceType,
    pattern_type: PatternType,
    name: &str,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern::new(resource_type, pattern_type, name).unwrap(),
        principal: Principal::parse(principal).unwrap(),
        host: Host::Any,
        operation,
        permission,
    }
}

fn allow_topic(principal: &str, operation: Operation, name: &str) -> AclBinding {
    acl(
        principal,
        Permission::Allow,
        operation,
        ResourceType::Topic,
        PatternType::Literal,
        name,
    )
}

fn authorizer(bindings: Vec<AclBinding>) -> Authorizer {
    let mut acls = Acls::default();
    for binding in bindings {
        assert!(acls.add(binding).unwrap());
    }
    Authorizer::new(acls, [Principal::user("admin")])
}

fn may(
    authorizer: &Authorizer,
    user: &str,
    resource_type: ResourceType,
    name: &str,
    operation: Operation,
) -> bool {
    authorizer.allowed(
        &Principal::user(user),
        ip(CLIENT),
        resource_type,
        name,
        operation,
    )
}

use Operation::*;
use ResourceType::{Cluster, Group, Topic};

#[test]
fn nothing_is_allowed_by_default() {
    let a = authorizer(vec![]);
    for &operation in Operation::ALL {
        assert!(!may(&a, "alice", Topic, "orders", operation), "{operation}");
    }
    assert!(!may(&a, "alice", Cluster, CLUSTER_NAME, Describe));
}

#[test]
fn an_allow_applies_to_its_principal_resource_and_operation_only() {
    let a = authorizer(vec![allow_topic("User:alice", Write, "orders")]);
    assert!(may(&a, "alice", Topic, "orders", Write));
    assert!(!may(&a, "alice", Topic, "payments", Write));
    assert!(!may(&a, "alice", Topic, "orders", Read));
    assert!(!may(&a, "bob", Topic, "orders", Write));
    assert!(
        !may(&a, "alice", Group, "orders", Write),
        "a group is not a topic"
    );
}

#[test]
fn deny_wins_over_allow() {
    let deny = |operation| {
        acl(
            "User:alice",
            Permission::Deny,
            operation,
            Topic,
            PatternType::Literal,
            "orders",
        )
    };
    let a = authorizer(vec![allow_topic("User:alice", All, "orders"), deny(Write)]);
    assert!(!may(&a, "alice", Topic, "orders", Write));
    assert!(may(&a, "alice", Topic, "orders", Read));
    // A Deny of everyone (User:*) on every topic (*) refuses alice's own Allow.
    let everyone = acl(
        "User:*",
        Permission::Deny,
        Read,
        Topic,
        PatternType::Literal,
        "*",
    );
    let a = authorizer(vec![allow_topic("User:alice", Read, "orders"), everyone]);
    assert!(!may(&a, "alice", Topic, "orders", Read));
    // Deny All refuses every operation, Describe included.
    let a = authorizer(vec![allow_topic("User:alice", Read, "orders"), deny(All)]);
    assert!(!may(&a, "alice", Topic, "orders", Describe));
    // A Deny of Describe does not refuse Read (Kafka matches Deny on the operation or All).
    let a = authorizer(vec![
        allow_topic("User:alice", Read, "orders"),
        deny(Describe),
    ]);
    assert!(may(&a, "alice", Topic, "orders", Read));
    assert!(!may(&a, "alice", Topic, "orders", Describe));
}

#[test]
fn super_users_may_do_everything_even_when_denied() {
    let deny = acl(
        "User:*",
        Permission::Deny,
        All,
        Topic,
        PatternType::Literal,
        "*",
    );
    let a = authorizer(vec![deny]);
    assert!(may(&a, "admin", Topic, "orders", Delete));
    assert!(may(&a, "admin", Cluster, CLUSTER_NAME, Alter));
    assert!(a.is_super_user(&Principal::user("admin")));
    assert!(!a.is_super_user(&Principal::user("alice")));
}

#[test]
fn implied_operations_follow_kafka() {
    for granted in [Read, Write, Delete, Alter, All] {
        let a = authorizer(vec![allow_topic("User:alice", granted, "orders")]);
        assert!(
            may(&a, "alice", Topic, "orders", Describe),
            "{granted} implies Describe"
        );
    }
    for granted in [
        Create,
        ClusterAction,
        DescribeConfigs,
        AlterConfigs,
        IdempotentWrite,
    ] {
        let a = authorizer(vec![allow_topic("User:alice", granted, "orders")]);
        assert!(
            !may(&a, "alice", Topic, "orders", Describe),
            "{granted} does not imply Describe"
        );
    }
    let a = authorizer(vec![allow_topic("User:alice", AlterConfigs, "orders")]);
    assert!(may(&a, "alice", Topic, "orders", DescribeConfigs));
    let a = authorizer(vec![allow_topic("User:alice", Describe, "orders")]);
    assert!(
        !may(&a, "alice", Topic, "orders", Read),
        "Describe implies nothing"
    );
    let a = authorizer(vec![allow_topic("User:alice", All, "orders")]);
    assert!(
        Operation::ALL
            .iter()
            .all(|&op| may(&a, "alice", Topic, "orders", op))
    );
}

#[test]
fn patterns_principals_and_hosts_match_as_kafka_does() {
    let prefixed = acl(
        "User:alice",
        Permission::Allow,
        Read,
        Topic,
        PatternType::Prefixed,
        "orders.",
    );
    let wildcard = allow_topic("User:bob", Read, "*");
    let everyone = allow_topic("User:*", Describe, "public");
    let a = authorizer(vec![prefixed, wildcard, everyone]);
    assert!(may(&a, "alice", Topic, "orders.eu", Read));
    assert!(
        !may(&a, "alice", Topic, "orders", Read),
        "the prefix is orders."
    );
    assert!(may(&a, "bob", Topic, "anything", Read));
    assert!(may(&a, "carol", Topic, "public", Describe));
    assert!(!may(&a, "carol", Topic, "private", Describe));
    // A literal name is only itself: a topic named "orders.*" is not a pattern.
    let literal = allow_topic("User:dave", Read, "orders.*");
    let a = authorizer(vec![literal]);
    assert!(!may(&a, "dave", Topic, "orders.eu", Read));
    // Hosts: one address, or any.
    let mut from_host = allow_topic("User:alice", Read, "orders");
    from_host.host = Host::parse(CLIENT).unwrap();
    let a = authorizer(vec![from_host]);
    assert!(a.allowed(&Principal::user("alice"), ip(CLIENT), Topic, "orders", Read));
    assert!(a.allowed(
        &Principal::user("alice"),
        ip("::ffff:10.0.0.7"),
        Topic,
        "orders",
        Read
    ));
    assert!(!a.allowed(
        &Principal::user("alice"),
        ip("10.0.0.8"),
        Topic,
        "orders",
        Read
    ));
}

#[test]
fn names_principals_and_hosts_are_checked() {
    assert_eq!(Principal::parse("User:alice").unwrap().name(), "alice");
    assert!(Principal::parse("User:*").unwrap().is_wildcard());
    for bad in ["alice", "User:", "Group:x", ""] {
        assert!(Principal::parse(bad).is_err(), "{bad}");
    }
    assert_eq!(Host::parse("*"), Ok(Host::Any));
    assert!(Host::parse("example.com").is_err());
    assert_eq!(Host::parse("::1").unwrap().to_string(), "::1");
    assert!(ResourcePattern::new(Topic, PatternType::Literal, "").is_err());
    assert!(ResourcePattern::new(Topic, PatternType::Literal, &"t".repeat(256)).is_err());
    assert!(ResourcePattern::new(Cluster, PatternType::Literal, CLUSTER_NAME).is_ok());
    assert!(matches!(
        ResourcePattern::new(Cluster, PatternType::Prefixed, "kafka"),
        Err(AclError::BadClusterName(_))
    ));
    assert_eq!(Operation::from_name("CLUSTER_ACTION"), Some(ClusterAction));
    assert_eq!(
        Operation::from_name("describe-configs"),
        Some(DescribeConfigs)
    );
    assert_eq!(
        ResourceType::from_name("transactionalid"),
        Some(ResourceType::TransactionalId)
    );
    assert_eq!(Permission::from_name("nope"), None);
}

#[test]
fn acls_survive_a_save_and_load_and_damage_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    assert!(Acls::load(dir.path()).unwrap().is_empty());
    let mut acls = Acls::default();
    let odd = acl(
        "User:al ice%",
        Permission::Deny,
        Write,
        Group,
        PatternType::Prefixed,
        "billing team\t%",
    );
    let mut from_host = allow_topic("User:bob", Read, "orders");
    from_host.host = Host::parse("fe80::1").unwrap();
    for binding in [
        odd.clone(),
        from_host.clone(),
        allow_topic("User:*", Describe, "*"),
    ] {
        assert!(acls.add(binding).unwrap());
    }
    assert!(!acls.add(odd.clone()).unwrap(), "no duplicates");
    acls.save(dir.path()).unwrap();
    let loaded = Acls::load(dir.path()).unwrap();
    assert_eq!(loaded, acls);
    let removed = acls.remove_where(|b| b.principal.name() == "bob");
    assert_eq!(removed, [from_host]);
    assert!(acls.remove(&odd));
    assert_eq!(acls.len(), 1);

    let path = dir.path().join("security").join(store::ACLS_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("Deny", "Allo", 1)).unwrap();
    let error = Acls::load(dir.path()).unwrap_err().to_string();
    assert!(
        error.contains(&path.display().to_string()) && error.contains("computed"),
        "{error}"
    );
    for (body, reason) in [
        (
            "format 1\nacl Topic Literal t User:a * Fly Allow\n",
            "unknown operation \"Fly\"",
        ),
        (
            "format 1\nacl Topic Literal t alice * Read Allow\n",
            "not User:NAME",
        ),
        (
            "format 1\nacl Cluster Literal c User:a * Read Allow\n",
            "kafka-cluster",
        ),
        ("format 1\nacl Topic Literal t User:a * Read\n", "8 fields"),
        (
            "acl Topic Literal t User:a * Read Allow\n",
            "no format line",
        ),
    ] {
        std::fs::write(&path, crate::security::store::with_checksum(body)).unwrap();
        let error = Acls::load(dir.path()).unwrap_err().to_string();
        assert!(error.contains(reason), "{body}: {error}");
    }
}

#[test]
fn the_acl_count_is_limited() {
    let mut acls = Acls::default();
    for i in 0..ACLS_MAX {
        acls.add(allow_topic("User:a", Read, &format!("t{i}")))
            .unwrap();
    }
    assert_eq!(
        acls.add(allow_topic("User:a", Read, "one-more")),
        Err(AclError::TooMany)
    );
    assert_eq!(acls.add(allow_topic("User:a", Read, "t0")), Ok(false));
}

#[test]
fn every_served_api_of_every_protocol_has_a_row() {
    for served in crate::protocol::kafka::apis::SERVED {
        let api = KafkaApi::from_key(served.key);
        assert!(api.is_some(), "Kafka {} has no row", served.name);
    }
    for &key in crate::protocol::native::ApiKey::ALL {
        // Exhaustive by construction; every API but the login needs something.
        let needs = actions(RequestKind::Native(NativeApi::from(key)));
        let login = key == crate::protocol::native::ApiKey::Authenticate;
        assert_eq!(needs.is_empty(), login, "{key:?}");
    }
    let nothing = [
        KafkaApi::ApiVersions,
        KafkaApi::SaslHandshake,
        KafkaApi::SaslAuthenticate,
        // As Kafka's broker: the brokers of Metadata, which everyone is shown.
        KafkaApi::DescribeCluster,
    ];
    for &api in KafkaApi::ALL {
        let needs = actions(RequestKind::Kafka(api));
        assert_eq!(needs.is_empty(), nothing.contains(&api), "{api:?}");
    }
}

#[test]
fn the_table_says_what_kafka_does() {
    let kafka = |api| actions(RequestKind::Kafka(api));
    let native = |api| actions(RequestKind::Native(api));
    assert_eq!(
        kafka(KafkaApi::Produce),
        [Need::On(Topic, Write, Denied::Item)]
    );
    assert_eq!(
        kafka(KafkaApi::Fetch),
        [Need::On(Topic, Read, Denied::Item)]
    );
    assert_eq!(
        kafka(KafkaApi::Metadata),
        [Need::On(Topic, Describe, Denied::Omitted)]
    );
    assert_eq!(
        kafka(KafkaApi::CreateTopics),
        [Need::ClusterOr(Topic, Create, Denied::Item)]
    );
    assert_eq!(
        kafka(KafkaApi::DeleteTopics),
        [Need::On(Topic, Delete, Denied::Item)]
    );
    for api in [
        KafkaApi::JoinGroup,
        KafkaApi::SyncGroup,
        KafkaApi::Heartbeat,
    ] {
        assert_eq!(
            kafka(api),
            [Need::On(Group, Read, Denied::Request)],
            "{api:?}"
        );
    }
    assert!(kafka(KafkaApi::OffsetCommit).contains(&Need::On(Group, Read, Denied::Request)));
    assert!(kafka(KafkaApi::OffsetCommit).contains(&Need::On(Topic, Read, Denied::Item)));
    assert_eq!(
        kafka(KafkaApi::CreateAcls),
        [Need::On(Cluster, Alter, Denied::Request)]
    );
    assert_eq!(native(NativeApi::Produce), kafka(KafkaApi::Produce));
    assert_eq!(native(NativeApi::Fetch), kafka(KafkaApi::Fetch));
    assert_eq!(native(NativeApi::JoinGroup), kafka(KafkaApi::JoinGroup));
    assert_eq!(
        native(NativeApi::CommitGroupOffset),
        kafka(KafkaApi::OffsetCommit)
    );
    assert_eq!(
        actions(RequestKind::Hermit(HermitRole::Producer)),
        [Need::On(Topic, Write, Denied::Request)]
    );
    assert!(
        actions(RequestKind::Hermit(HermitRole::Consumer)).contains(&Need::On(
            Topic,
            Read,
            Denied::Request
        ))
    );
    assert_eq!(Topic.kafka_error_code(), 29);
    assert_eq!(Cluster.kafka_error_code(), 31);
}

#[test]
fn needs_are_met_as_kafka_decides() {
    let host = ip(CLIENT);
    let alice = Principal::user("alice");
    let cluster_create = acl(
        "User:alice",
        Permission::Allow,
        Create,
        Cluster,
        PatternType::Literal,
        CLUSTER_NAME,
    );
    let a = authorizer(vec![cluster_create]);
    let create = Need::ClusterOr(Topic, Create, Denied::Item);
    assert!(
        a.meets(&alice, host, create, "anything"),
        "Create on the cluster creates any topic"
    );
    let a = authorizer(vec![allow_topic("User:alice", Create, "mine")]);
    assert!(a.meets(&alice, host, create, "mine"));
    assert!(!a.meets(&alice, host, create, "theirs"));
    // An idempotent producer: Write on some topic is enough, unless a Deny covers it.
    assert!(!a.meets(&alice, host, Need::IdempotentProducer, ""));
    let a = authorizer(vec![allow_topic("User:alice", Write, "orders")]);
    assert!(a.meets(&alice, host, Need::IdempotentProducer, ""));
    let deny_all = acl(
        "User:alice",
        Permission::Deny,
        Write,
        Topic,
        PatternType::Prefixed,
        "ord",
    );
    let a = authorizer(vec![allow_topic("User:alice", Write, "orders"), deny_all]);
    assert!(!a.meets(&alice, host, Need::IdempotentProducer, ""));
    let idempotent = acl(
        "User:alice",
        Permission::Allow,
        IdempotentWrite,
        Cluster,
        PatternType::Literal,
        CLUSTER_NAME,
    );
    let a = authorizer(vec![idempotent]);
    assert!(a.meets(&alice, host, Need::IdempotentProducer, ""));
    assert!(a.meets(
        &Principal::user("admin"),
        host,
        Need::On(Cluster, Alter, Denied::Request),
        ""
    ));
}
