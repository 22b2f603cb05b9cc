use std::collections::BTreeMap;

use proptest::prelude::*;

use super::encode::{DecodeError, FORMAT_VERSION};
use super::*;

fn register(id: u16, cores: u16) -> Command {
    Command::RegisterNode {
        id: NodeId(id),
        client_addr: format!("10.0.0.{id}:9092"),
        cluster_addr: format!("10.0.0.{id}:9093"),
        cores,
    }
}

fn create(name: &str, partitions: u32, replication_factor: u16) -> Command {
    Command::CreateTopic {
        name: name.to_string(),
        partitions,
        replication_factor,
        settings: BTreeMap::from([("retention.ms".to_string(), "60000".to_string())]),
    }
}

/// A state with nodes 1..=n of `cores` cores each.
fn nodes(n: u16, cores: u16) -> ClusterState {
    let mut state = ClusterState::default();
    for id in 1..=n {
        state.apply(register(id, cores)).unwrap();
    }
    state
}

/// Partitions led by each node, and by each (node, core).
fn leaders(state: &ClusterState) -> (BTreeMap<u16, u32>, BTreeMap<Replica, u32>) {
    let (mut per_node, mut per_core) = (BTreeMap::new(), BTreeMap::new());
    for p in state.topics().flat_map(|t| &t.partitions) {
        *per_node.entry(p.replicas[0].node.0).or_default() += 1;
        *per_core.entry(p.replicas[0]).or_default() += 1;
    }
    (per_node, per_core)
}

#[test]
fn twelve_partitions_on_three_nodes_are_led_four_four_four() {
    for rf in [1, 2, 3] {
        let mut state = nodes(3, 2);
        state.apply(create("orders", 12, rf)).unwrap();
        let (per_node, per_core) = leaders(&state);
        assert_eq!(
            per_node,
            BTreeMap::from([(1, 4), (2, 4), (3, 4)]),
            "rf {rf}"
        );
        assert!(per_core.values().all(|&n| n == 2), "rf {rf}: {per_core:?}");
        let topic = state.topic("orders").unwrap();
        let mut replicas_per_node = BTreeMap::<u16, u32>::new();
        for p in &topic.partitions {
            assert_eq!(p.replicas.len(), usize::from(rf));
            assert_eq!(p.leader_hint, Some(p.replicas[0]));
            let mut distinct: Vec<_> = p.replicas.iter().map(|r| r.node).collect();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), usize::from(rf), "two replicas on one node");
            for r in &p.replicas {
                assert!(r.core < 2);
                *replicas_per_node.entry(r.node.0).or_default() += 1;
            }
        }
        let each = 12 * u32::from(rf) / 3;
        assert!(
            replicas_per_node.values().all(|&n| n == each),
            "{replicas_per_node:?}"
        );
    }
}

#[test]
fn a_new_topic_fills_the_lighter_nodes_first() {
    let mut state = nodes(3, 1);
    state.apply(create("a", 1, 1)).unwrap();
    state.apply(create("b", 2, 1)).unwrap();
    let (per_node, _) = leaders(&state);
    assert_eq!(per_node, BTreeMap::from([(1, 1), (2, 1), (3, 1)]));
}

#[test]
fn a_replication_factor_above_the_live_nodes_is_refused() {
    let mut state = nodes(3, 1);
    state
        .apply(Command::SetLiveness {
            node: NodeId(2),
            live: false,
        })
        .unwrap();
    let before = state.clone();
    assert_eq!(
        state.apply(create("t", 3, 3)),
        Err(CommandError::InvalidReplicationFactor {
            requested: 3,
            live_nodes: 2
        })
    );
    assert_eq!(
        state.apply(create("t", 3, 0)),
        Err(CommandError::InvalidReplicationFactor {
            requested: 0,
            live_nodes: 2
        })
    );
    assert_eq!(state, before, "a refused command changes nothing");
    // RF 2 fits, and the down node gets nothing.
    state.apply(create("t", 6, 2)).unwrap();
    let t = state.topic("t").unwrap();
    assert!(
        t.partitions
            .iter()
            .flat_map(|p| &p.replicas)
            .all(|r| r.node != NodeId(2))
    );
}

#[test]
fn refused_commands_say_why() {
    let mut state = nodes(2, 1);
    state.apply(create("t", 2, 1)).unwrap();
    let cases = [
        (
            create("t", 1, 1),
            CommandError::TopicExists { name: "t".into() },
        ),
        (
            create("u", 0, 1),
            CommandError::InvalidPartitions { requested: 0 },
        ),
        (
            create("u", PARTITIONS_MAX + 1, 1),
            CommandError::InvalidPartitions {
                requested: PARTITIONS_MAX + 1,
            },
        ),
        (
            create("..", 1, 1),
            CommandError::InvalidName(NameError::DotName),
        ),
        (
            Command::DeleteTopic { name: "x".into() },
            CommandError::UnknownTopic { name: "x".into() },
        ),
        (
            Command::SetLiveness {
                node: NodeId(9),
                live: true,
            },
            CommandError::UnknownNode { node: NodeId(9) },
        ),
        (register(0, 1), CommandError::InvalidNodeId { node: 0 }),
        (
            register(0x8000, 1),
            CommandError::InvalidNodeId { node: 0x8000 },
        ),
        (register(3, 0), CommandError::InvalidCores { cores: 0 }),
        (
            Command::SetLeaderHint {
                topic: "t".into(),
                partition: 2,
                leader: Replica {
                    node: NodeId(1),
                    core: 0,
                },
            },
            CommandError::UnknownPartition {
                topic: "t".into(),
                partition: 2,
            },
        ),
    ];
    for (command, expected) in cases {
        let before = state.clone();
        assert_eq!(state.apply(command.clone()), Err(expected), "{command:?}");
        assert_eq!(state, before);
    }
    let p0 = state.topic("t").unwrap().partitions[0].clone();
    let other = Replica {
        node: if p0.replicas[0].node == NodeId(1) {
            NodeId(2)
        } else {
            NodeId(1)
        },
        core: 0,
    };
    let hint = |leader| Command::SetLeaderHint {
        topic: "t".into(),
        partition: 0,
        leader,
    };
    assert!(matches!(
        state.apply(hint(other)),
        Err(CommandError::NotAReplica { .. })
    ));
    state.apply(hint(p0.replicas[0])).unwrap();
}

#[test]
fn topics_are_deleted_and_their_settings_replaced() {
    let mut state = nodes(1, 1);
    state.apply(create("t", 1, 1)).unwrap();
    let settings = BTreeMap::from([("cleanup.policy".to_string(), "compact".to_string())]);
    state
        .apply(Command::SetTopicSettings {
            name: "t".into(),
            settings: settings.clone(),
        })
        .unwrap();
    assert_eq!(state.topic("t").unwrap().settings, settings);
    state
        .apply(Command::DeleteTopic { name: "t".into() })
        .unwrap();
    assert!(state.topic("t").is_none());
}

#[test]
fn broker_ids_are_node_shifted_16_or_core() {
    let r = |node, core| Replica {
        node: NodeId(node),
        core,
    };
    assert_eq!(
        r(0, 3).broker_id(),
        Ok(3),
        "a broker started alone keeps its ids"
    );
    assert_eq!(r(2, 5).broker_id(), Ok(2 * 65536 + 5));
    assert_eq!(r(0x7fff, 0xffff).broker_id(), Ok(i32::MAX));
    assert_eq!(
        r(0x8000, 0).broker_id(),
        Err(BrokerIdError::NodeTooLarge { node: 0x8000 })
    );
    assert_eq!(
        Replica::from_broker_id(-1),
        Err(BrokerIdError::NotABrokerId { id: -1 })
    );
    for (node, core) in [(0, 0), (1, 7), (3, 1023), (0x7fff, 0xffff)] {
        let id = r(node, core).broker_id().unwrap();
        assert_eq!(Replica::from_broker_id(id), Ok(r(node, core)));
        // The same formula as the shard's placement table.
        let place = crate::shard::placement::Place {
            node: crate::shard::placement::NodeId(node),
            core: crate::shard::placement::CoreId(core),
        };
        assert_eq!(place.broker_id(), id);
    }
}

#[test]
fn limits_match_the_shards() {
    assert_eq!(PARTITIONS_MAX, crate::shard::topics::PARTITIONS_MAX);
    assert_eq!(NodeId::MAX.0, crate::shard::placement::NodeId::MAX.0);
}

#[test]
fn an_unknown_version_or_tag_is_refused() {
    let mut bytes = Command::DeleteTopic { name: "t".into() }.encode();
    bytes[0] = FORMAT_VERSION + 1;
    assert_eq!(
        Command::decode(&bytes),
        Err(DecodeError::UnknownVersion {
            version: FORMAT_VERSION + 1
        })
    );
    // The member commands came with version 2: in version 1 bytes their tags are unknown.
    let mut bytes = Command::RemoveMember { id: NodeId(4) }.encode();
    bytes[0] = 1;
    assert_eq!(
        Command::decode(&bytes),
        Err(DecodeError::UnknownCommand { tag: 8 })
    );
    bytes[0] = FORMAT_VERSION;
    bytes[1] = 99;
    assert_eq!(
        Command::decode(&bytes),
        Err(DecodeError::UnknownCommand { tag: 99 })
    );
}

#[test]
fn a_member_is_known_by_its_address_until_removed_with_its_registration() {
    let mut state = nodes(3, 2);
    let add = Command::AddMember {
        id: NodeId(4),
        cluster_addr: "10.0.0.4:7000".into(),
    };
    state.apply(add).unwrap();
    assert_eq!(state.cluster_addr(NodeId(4)), Some("10.0.0.4:7000"));
    assert!(state.node(NodeId(4)).is_none(), "not registered yet");
    assert_eq!(state.cluster_addr(NodeId(2)), Some("10.0.0.2:9093"));
    // Another member's address would reach that member instead.
    let taken = Command::AddMember {
        id: NodeId(5),
        cluster_addr: "10.0.0.2:9093".into(),
    };
    assert_eq!(
        state.apply(taken),
        Err(CommandError::AddressInUse {
            addr: "10.0.0.2:9093".into(),
            node: NodeId(2)
        })
    );
    let again = Command::AddMember {
        id: NodeId(4),
        cluster_addr: "10.0.0.4:7000".into(),
    };
    state.apply(again).unwrap();
    state.apply(register(4, 2)).unwrap();
    // The address it was added with stays the one peers use.
    assert_eq!(state.cluster_addr(NodeId(4)), Some("10.0.0.4:7000"));
    state
        .apply(Command::RemoveMember { id: NodeId(4) })
        .unwrap();
    assert!(state.node(NodeId(4)).is_none());
    assert_eq!(state.cluster_addr(NodeId(4)), None);
    assert_eq!(state.members().count(), 0);
    assert_eq!(
        state.apply(Command::RemoveMember { id: NodeId(4) }),
        Err(CommandError::UnknownNode { node: NodeId(4) })
    );
    assert_eq!(
        state.apply(Command::AddMember {
            id: NodeId(0),
            cluster_addr: "h:1".into()
        }),
        Err(CommandError::InvalidNodeId { node: 0 })
    );
}

#[test]
fn a_node_holding_partitions_is_not_removed() {
    let mut state = nodes(3, 1);
    state.apply(create("orders", 3, 1)).unwrap();
    let err = state
        .apply(Command::RemoveMember { id: NodeId(2) })
        .unwrap_err();
    assert_eq!(
        err,
        CommandError::NodeHoldsPartitions {
            node: NodeId(2),
            partitions: 1,
            example: "orders".into()
        }
    );
    assert!(
        err.to_string().contains("delete those topics first"),
        "{err}"
    );
    assert!(state.node(NodeId(2)).is_some(), "a refusal changes nothing");
    state
        .apply(Command::DeleteTopic {
            name: "orders".into(),
        })
        .unwrap();
    state
        .apply(Command::RemoveMember { id: NodeId(2) })
        .unwrap();
    state.apply(create("later", 4, 1)).unwrap();
    let on_two = state.partitions_on(NodeId(2)).0;
    assert_eq!(on_two, 0, "new topics are placed on the remaining nodes");
}

#[test]
fn replicated_topics_get_groups_never_handed_out_twice() {
    let mut state = nodes(3, 1);
    state.apply(create("one-copy", 4, 1)).unwrap();
    assert_eq!(state.topic("one-copy").unwrap().group_of(0), None);
    state.apply(create("a", 3, 3)).unwrap();
    state.apply(create("b", 2, 2)).unwrap();
    let groups = |state: &ClusterState, name: &str| -> Vec<Option<u64>> {
        let topic = state.topic(name).unwrap();
        (0..=topic.partitions.len() as u32)
            .map(|p| topic.group_of(p))
            .collect()
    };
    assert_eq!(groups(&state, "a"), [Some(1), Some(2), Some(3), None]);
    assert_eq!(groups(&state, "b"), [Some(4), Some(5), None]);
    // Made again under its name, a topic gets new groups.
    let delete = Command::DeleteTopic { name: "a".into() };
    state.apply(delete).unwrap();
    state.apply(create("a", 3, 3)).unwrap();
    assert_eq!(groups(&state, "a"), [Some(6), Some(7), Some(8), None]);
    // A refused creation hands out nothing.
    assert!(state.apply(create("b", 2, 2)).is_err());
    state.apply(create("c", 1, 2)).unwrap();
    assert_eq!(groups(&state, "c"), [Some(9), None]);
    // And the counter survives a snapshot.
    let mut restored = ClusterState::decode_snapshot(&state.encode_snapshot()).unwrap();
    restored.apply(create("d", 1, 2)).unwrap();
    assert_eq!(groups(&restored, "d"), [Some(10), None]);
}

#[test]
fn a_version_1_snapshot_decodes_with_no_members() {
    let mut state = nodes(2, 1);
    state.apply(create("t", 2, 1)).unwrap();
    let mut bytes = state.encode_snapshot();
    // Version 1 is version 2 without the topics' groups (0 for a topic of one copy), the
    // member list (an empty one is a zero count) and the next group (1: none handed out).
    let tail = [[0u8; 4].as_slice(), &1u64.to_be_bytes()].concat();
    assert_eq!(bytes[bytes.len() - 12..], tail[..]);
    bytes.truncate(bytes.len() - 12);
    let topic_end = bytes.len();
    assert_eq!(bytes[topic_end - 8..], [0; 8], "the topic's group");
    bytes.truncate(topic_end - 8);
    bytes[0] = 1;
    assert_eq!(ClusterState::decode_snapshot(&bytes), Ok(state));
}

fn name() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9._-]{0,20}"
}

fn settings() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(name(), ".{0,30}", 0..5)
}

fn command() -> impl Strategy<Value = Command> {
    let node = 1u16..6;
    prop_oneof![
        (node.clone(), 1u16..4).prop_map(|(id, cores)| register(id, cores)),
        (node.clone(), any::<bool>()).prop_map(|(n, live)| Command::SetLiveness {
            node: NodeId(n),
            live
        }),
        (name(), 1u32..20, 1u16..4, settings()).prop_map(|(name, partitions, rf, settings)| {
            Command::CreateTopic {
                name,
                partitions,
                replication_factor: rf,
                settings,
            }
        }),
        name().prop_map(|name| Command::DeleteTopic { name }),
        (name(), settings())
            .prop_map(|(name, settings)| Command::SetTopicSettings { name, settings }),
        (node.clone(), 0u16..4).prop_map(|(n, port)| Command::AddMember {
            id: NodeId(n),
            cluster_addr: format!("10.1.0.{n}:{}", 7000 + port),
        }),
        node.clone()
            .prop_map(|n| Command::RemoveMember { id: NodeId(n) }),
        (name(), 0u32..20, node, 0u16..4).prop_map(|(topic, partition, n, core)| {
            Command::SetLeaderHint {
                topic,
                partition,
                leader: Replica {
                    node: NodeId(n),
                    core,
                },
            }
        }),
    ]
}

proptest! {
    #[test]
    fn commands_round_trip(c in command()) {
        prop_assert_eq!(Command::decode(&c.encode()), Ok(c));
    }

    #[test]
    fn a_cut_command_is_refused(c in command(), cut in any::<prop::sample::Index>()) {
        let bytes = c.encode();
        let cut = cut.index(bytes.len());
        prop_assert!(Command::decode(&bytes[..cut]).is_err());
    }

    /// A state built by any sequence of commands comes back whole from its snapshot, and
    /// a cut snapshot is refused.
    #[test]
    fn snapshots_round_trip(commands in prop::collection::vec(command(), 0..40)) {
        let mut state = ClusterState::default();
        for c in commands {
            let _ = state.apply(c);
        }
        let bytes = state.encode_snapshot();
        prop_assert_eq!(ClusterState::decode_snapshot(&bytes), Ok(state));
        prop_assert!(ClusterState::decode_snapshot(&bytes[..bytes.len() - 1]).is_err());
    }

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Command::decode(&bytes);
        let _ = ClusterState::decode_snapshot(&bytes);
    }
}
