//! The shard's placement table on a cluster node: a partition of a topic the controller
//! placed lives where the controller's applied state says (`cluster::status`'s topics);
//! everything else (groups, offsets, the node's topic core, topics made before the node
//! joined a cluster) follows this node's one-node rules ([`OneNode::for_node`]). A place
//! on another node is answered `NotHere` by the shard, as the placement design says.
//!
//! Read on every produce and fetch: one read lock and a hash lookup per call on a cluster
//! node (a broker started alone keeps [`OneNode`] and pays nothing).

use std::sync::Arc;

use crate::cluster::status::ClusterView;
use crate::config::BrokerConfig;
use crate::protocol::routing::fnv1a32;
use crate::shard::placement::{Address, CoreId, NodeId, OneNode, Place, Placement, ReplicaSet};

/// A group's coordinator among the registered nodes (`members`: id and cores, sorted by
/// id): every core of every registered node, in node then core order, is one place, and
/// the group's is place `fnv1a32(group) % places`. The same on every node that applied the
/// same nodes, stable while they and their cores are unchanged, and on one node the
/// one-node rule (`fnv1a32(group) % cores`). Liveness is left out on purpose: a group's
/// committed offsets are on its coordinator's node, so a group waits for a node that is
/// down rather than move to one without its offsets. `None` when no node is registered.
pub fn coordinator_among(
    members: &[(crate::cluster::NodeId, u16)],
    group: &str,
) -> Option<(crate::cluster::NodeId, u16)> {
    let places: u64 = members.iter().map(|&(_, cores)| u64::from(cores)).sum();
    if places == 0 {
        return None;
    }
    let mut at = u64::from(fnv1a32(group.as_bytes())) % places;
    for &(node, cores) in members {
        let cores = u64::from(cores);
        if at < cores {
            return Some((node, at as u16));
        }
        at -= cores;
    }
    None
}

pub struct ClusterTable {
    local: OneNode,
    node: NodeId,
    cores: usize,
    view: Arc<ClusterView>,
}

impl ClusterTable {
    pub fn new(
        config: &BrokerConfig,
        node: crate::cluster::NodeId,
        view: Arc<ClusterView>,
    ) -> Self {
        let node = NodeId(node.0);
        ClusterTable {
            local: OneNode::for_node(config, node),
            node,
            cores: config.cores.max(1),
            view,
        }
    }
}

impl Placement for ClusterTable {
    fn node(&self) -> NodeId {
        self.node
    }

    fn places(&self) -> Vec<Place> {
        let mut places = self.local.places();
        for node in self.view.status().nodes {
            if node.id.0 == self.node.0 {
                continue;
            }
            places.extend((0..node.cores).map(|core| Place {
                node: NodeId(node.id.0),
                core: CoreId(core),
            }));
        }
        places
    }

    fn owner(&self, topic: &str, partition: u32) -> Place {
        match self.view.owner(topic, partition) {
            // A core this node no longer has (started with fewer cores since): its own
            // rule keeps the partition on one of the cores it has.
            Some((node, core)) if node.0 == self.node.0 && usize::from(core) >= self.cores => {
                self.local.owner(topic, partition)
            }
            Some((node, core)) => Place {
                node: NodeId(node.0),
                core: CoreId(core),
            },
            None => self.local.owner(topic, partition),
        }
    }

    fn replicas(&self, topic: &str, partition: u32) -> Vec<Place> {
        let owner = self.owner(topic, partition);
        let Some(set) = self.replica_set(topic, partition) else {
            return vec![owner];
        };
        let mut places = vec![owner];
        places.extend(set.places.into_iter().filter(|p| *p != owner));
        places
    }

    fn replica_set(&self, topic: &str, partition: u32) -> Option<ReplicaSet> {
        let (group, replicas) = self.view.replica_set(topic, partition)?;
        let places = replicas
            .into_iter()
            .map(|(node, core)| Place {
                node: NodeId(node.0),
                core: CoreId(core),
            })
            .collect();
        Some(ReplicaSet { group, places })
    }

    fn coordinator(&self, group: &str) -> Place {
        match coordinator_among(&self.view.members(), group) {
            // A core this node no longer has (started with fewer cores since its last
            // registration): its own rule until it registers its cores again.
            Some((node, core)) if node.0 == self.node.0 && usize::from(core) >= self.cores => {
                self.local.coordinator(group)
            }
            Some((node, core)) => Place {
                node: NodeId(node.0),
                core: CoreId(core),
            },
            // No node registered yet (a first start before the controller applied one).
            None => self.local.coordinator(group),
        }
    }

    fn offsets_owner(&self, shard: usize) -> Place {
        self.local.offsets_owner(shard)
    }

    fn controller(&self) -> Place {
        self.local.controller()
    }

    fn address(&self, place: Place) -> Option<Address> {
        if place.node == self.node {
            return self.local.address(place);
        }
        let status = self.view.status();
        let node = status.nodes.iter().find(|n| n.id.0 == place.node.0)?;
        if place.core.0 >= node.cores {
            return None;
        }
        let (host, port) = node.client_addr.rsplit_once(':')?;
        Some(Address {
            host: Some(
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
            ),
            shard_port: None,
            main_port: port.parse().ok()?,
        })
    }

    fn listening_on(&self, port: u16) -> Option<Place> {
        self.local.listening_on(port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::NodeId as Id;
    use crate::shard::placement::group_coordinator;

    #[test]
    fn a_group_coordinator_is_the_hash_over_every_registered_core() {
        let members = [(Id(1), 2), (Id(2), 2), (Id(3), 2)];
        for group in ["g", "orders", "billing-7", "x"] {
            let at = fnv1a32(group.as_bytes()) % 6;
            let want = (Id(1 + (at / 2) as u16), (at % 2) as u16);
            assert_eq!(coordinator_among(&members, group), Some(want), "{group}");
        }
        // Nodes with different core counts: place 0..3 on node 1, 3 on node 5.
        let uneven = [(Id(1), 3), (Id(5), 1)];
        let places: Vec<_> = (0..200)
            .map(|i| coordinator_among(&uneven, &format!("g{i}")).unwrap())
            .collect();
        assert!(places.contains(&(Id(5), 0)) && places.contains(&(Id(1), 2)));
        assert!(
            places
                .iter()
                .all(|&(n, c)| (n == Id(1) && c < 3) || (n == Id(5) && c == 0))
        );
        assert_eq!(coordinator_among(&[], "g"), None);
        assert_eq!(coordinator_among(&[(Id(1), 0)], "g"), None);
    }

    #[test]
    fn one_registered_node_is_the_one_node_rule() {
        for cores in 1..6u16 {
            for group in ["a", "orders", "consumers-of-things"] {
                let (node, core) = coordinator_among(&[(Id(4), cores)], group).unwrap();
                assert_eq!(node, Id(4));
                assert_eq!(
                    usize::from(core),
                    group_coordinator(group, usize::from(cores))
                );
            }
        }
    }
}
