use super::*;
use crate::shard::ShardError;

fn config(cores: usize, shard_ports: bool) -> BrokerConfig {
    BrokerConfig {
        cores,
        shard_ports,
        ..BrokerConfig::default()
    }
}

fn core(place: Place) -> usize {
    assert_eq!(place.node, NodeId(0), "a one-node table places on node 0");
    place.core.index()
}

#[test]
fn fnv_known_values_give_the_documented_owner() {
    // docs/PROTOCOL.md: fnv1a32("orders/0") = 0xAC2A786B, owner 1 of 2 cores, 3 of 4.
    assert_eq!(fnv1a32(b"orders/0"), 0xac2a_786b);
    assert_eq!(core(OneNode::new(&config(2, true)).owner("orders", 0)), 1);
    assert_eq!(core(OneNode::new(&config(4, true)).owner("orders", 0)), 3);
}

#[test]
fn owner_matches_the_formatted_key() {
    for (topic, partition) in [
        ("t", 0),
        ("orders", 7),
        ("x", 1234567890),
        ("load_test", u32::MAX),
    ] {
        let key = format!("{topic}/{partition}");
        for cores in 1..5 {
            let table = OneNode::new(&config(cores, true));
            assert_eq!(
                core(table.owner(topic, partition)),
                fnv1a32(key.as_bytes()) as usize % cores
            );
            assert_eq!(
                table.replicas(topic, partition),
                vec![table.owner(topic, partition)]
            );
        }
    }
}

#[test]
fn answers_are_stable_and_on_a_core_that_exists() {
    for cores in [1, 2, 3, 8] {
        let table = OneNode::new(&config(cores, true));
        let again = OneNode::new(&config(cores, true));
        let places = table.places();
        assert_eq!(places.len(), cores);
        let mut used = vec![false; cores];
        for partition in 0..64 {
            let owner = table.owner("events", partition);
            assert!(core(owner) < cores);
            assert_eq!(owner, again.owner("events", partition));
            assert!(places.contains(&owner));
            used[core(owner)] = true;
        }
        assert!(
            used.iter().all(|&u| u),
            "64 partitions reach every one of {cores} cores"
        );
        for group in ["g", "payments", "a-much-longer-group-name.with.dots"] {
            let coordinator = table.coordinator(group);
            assert!(core(coordinator) < cores);
            assert_eq!(coordinator, again.coordinator(group));
            assert_eq!(
                core(coordinator),
                fnv1a32(group.as_bytes()) as usize % cores
            );
        }
        for shard in 0..crate::shard::offsets::SHARDS {
            assert_eq!(core(table.offsets_owner(shard)), shard % cores);
        }
        assert_eq!(table.controller(), places[0]);
    }
}

#[test]
fn addresses_and_broker_ids_round_trip() {
    let table = OneNode::new(&config(3, true));
    for place in table.places() {
        let address = table.address(place).expect("every place has an address");
        assert_eq!(
            address.host, None,
            "this node advertises the address a client used"
        );
        assert_eq!(address.main_port, 9092);
        let port = address.shard_port.expect("shard ports are on");
        assert_eq!(address.port(), port);
        assert_eq!(port, 9093 + place.core.0);
        assert_eq!(table.listening_on(port), Some(place));
        // Node 0's broker ids are its core numbers, as Kafka clients have always seen.
        assert_eq!(place.broker_id(), i32::from(place.core.0));
        assert_eq!(table.place_of_broker(place.broker_id()), Some(place));
    }
    assert_eq!(
        table.listening_on(9092),
        None,
        "the main port reaches any core"
    );
    assert_eq!(table.place_of_broker(3), None, "no core 3");
    assert_eq!(table.place_of_broker(-1), None);
    let elsewhere = Place {
        node: NodeId(1),
        core: CoreId(0),
    };
    assert_eq!(table.address(elsewhere), None);
    assert_eq!(table.place_of_broker(elsewhere.broker_id()), None);
}

#[test]
fn without_shard_ports_every_place_is_the_main_port() {
    let table = OneNode::new(&config(2, false));
    for place in table.places() {
        let address = table.address(place).unwrap();
        assert_eq!(address.shard_port, None);
        assert_eq!(address.port(), 9092);
    }
    assert_eq!(table.listening_on(9093), None);
}

#[test]
fn broker_ids_of_other_nodes_round_trip() {
    // `--node-id` takes no more than the broker ids can hold.
    assert_eq!(
        u32::from(NodeId::MAX.0),
        crate::storage::marker::NODE_ID_MAX
    );
    for (node, core) in [(0, 0), (1, 0), (1, 5), (NodeId::MAX.0, u16::MAX)] {
        let place = Place {
            node: NodeId(node),
            core: CoreId(core),
        };
        let id = place.broker_id();
        assert!(id >= 0, "{place}: broker ids are never negative");
        assert_eq!(Place::from_broker_id(id), Some(place));
    }
    assert_eq!(Place::from_broker_id(-1), None);
}

#[test]
fn another_node_is_not_served_here() {
    let place = Place {
        node: NodeId(2),
        core: CoreId(1),
    };
    let failure = ShardError::from(NotHere { place });
    assert_eq!(failure, ShardError::NotHere(NotHere { place }));
    assert_eq!(
        failure.to_string(),
        "served by node 2 core 1, not by this node"
    );
}

/// A placement of a two-node cluster seen from node 0, which has one core: every partition,
/// group, offsets shard and the controller is on node 1.
struct AllOnNodeOne;

const NODE_ONE: Place = Place {
    node: NodeId(1),
    core: CoreId(0),
};

impl Placement for AllOnNodeOne {
    fn node(&self) -> NodeId {
        NodeId(0)
    }
    fn places(&self) -> Vec<Place> {
        vec![
            Place {
                node: NodeId(0),
                core: CoreId(0),
            },
            NODE_ONE,
        ]
    }
    fn owner(&self, _: &str, _: u32) -> Place {
        NODE_ONE
    }
    fn replicas(&self, _: &str, _: u32) -> Vec<Place> {
        vec![NODE_ONE]
    }
    fn coordinator(&self, _: &str) -> Place {
        NODE_ONE
    }
    fn offsets_owner(&self, _: usize) -> Place {
        NODE_ONE
    }
    fn controller(&self) -> Place {
        NODE_ONE
    }
    fn address(&self, place: Place) -> Option<Address> {
        self.places().contains(&place).then(|| Address {
            host: (place.node != NodeId(0)).then(|| "node1.example".to_string()),
            shard_port: None,
            main_port: 9092,
        })
    }
    fn listening_on(&self, _: u16) -> Option<Place> {
        None
    }
}

/// A shard routes on the placement's answer: what another node serves is refused with
/// `NotHere`, never run on a local core, and nothing about it is created here.
#[test]
fn a_shard_refuses_what_another_node_serves() {
    use std::rc::Rc;
    use std::sync::Arc;

    use crate::protocol::native::OffsetSpec;
    use crate::shard::mesh::Mesh;
    use crate::shard::topics::TopicMeta;
    use crate::shard::used::UsedTopics;
    use crate::shard::{Hop, Shard};

    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(BrokerConfig {
        data_dir: dir.path().to_path_buf(),
        ..BrokerConfig::default()
    });
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            let shard = Rc::new(Shard::with_placement(
                0,
                config,
                Mesh::new(0, None),
                Box::new(AllOnNodeOne),
            ));
            assert_eq!(shard.hop(shard.here()), Ok(Hop::Here));
            assert_eq!(shard.hop(NODE_ONE), Err(NotHere { place: NODE_ONE }));
            assert_eq!(shard.local_places(), vec![shard.here()]);
            let not_here = |result: Result<_, ShardError>, what: &str| {
                let failure = result
                    .err()
                    .unwrap_or_else(|| panic!("{what} was served here"));
                assert!(
                    matches!(failure, ShardError::NotHere(_)),
                    "{what}: {failure}"
                );
            };
            let used = UsedTopics::default();
            let settings = crate::protocol::native::TopicSettings::default();
            // A topic every node knows (the metadata is everywhere), served elsewhere.
            let known = TopicMeta::from_settings("known", &settings, &shard.config.log).unwrap();
            shard.publish_topic(known);
            not_here(
                shard
                    .list_offsets(&used, b"known", 0, OffsetSpec::Latest)
                    .await
                    .map(|_| ()),
                "list offsets",
            );
            not_here(
                shard.create_topic(&used, b"t", &settings, 1).await,
                "create topic",
            );
            not_here(shard.delete_topic(&used, b"t").await, "delete topic");
            not_here(
                shard.fetch_offset(b"g", b"t", 0).await.map(|_| ()),
                "fetch offset",
            );
            not_here(shard.heartbeat(b"g", "m", 1).await, "heartbeat");
            assert!(shard.topic("t").is_none(), "nothing was created here");
        })
        .unwrap()
        .join()
        .unwrap();
}
