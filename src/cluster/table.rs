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
use crate::shard::placement::{Address, CoreId, NodeId, OneNode, Place, Placement};

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
        vec![self.owner(topic, partition)]
    }

    fn coordinator(&self, group: &str) -> Place {
        self.local.coordinator(group)
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
