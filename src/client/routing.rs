//! Shard-aware routing: from a metadata answer, the address of the node and core that own
//! each partition, so a client sends a partition's requests straight to its owner: to the
//! owner core's port on the node it asked (sparing that node a hop over its mesh), or to
//! the owner node's address on a cluster (that node hands them to its owner core).
//! [`Routed`] keeps the blocking connections this takes.

use std::net::{SocketAddr, ToSocketAddrs};

use crate::protocol::native::{ErrorCode, MetadataResponse};

mod routed;

/// The address of a group's coordinator from a FindCoordinator answer: `asked` when the node
/// asked is the coordinator, else the host and port it named (an address, or a name the
/// cluster was configured with, resolved here).
pub(crate) fn coordinator_addr(
    found: &crate::protocol::native::CoordinatorResponse,
    asked: SocketAddr,
) -> Result<SocketAddr, crate::client::ClientError> {
    use crate::client::ClientError;
    if found.here {
        return Ok(asked);
    }
    (found.host.as_str(), found.port)
        .to_socket_addrs()
        .map_err(ClientError::Io)?
        .next()
        .ok_or_else(|| {
            let host = &found.host;
            ClientError::Protocol(format!("the coordinator's host {host} has no address"))
        })
}
pub use routed::{Connect, NOT_HERE_RETRIES, Routed};

/// What a client learned from metadata about one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRoute {
    pub name: String,
    /// Owner core of each partition.
    pub owners: Vec<u16>,
    /// Owner node of each partition; `None` for the node asked (a broker alone says none).
    pub nodes: Vec<Option<u16>>,
}

/// Partition owners, the per-core ports of the node asked, and on a cluster every node's
/// address, as of one metadata answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    bootstrap: SocketAddr,
    core_ports: Vec<u16>,
    topics: Vec<TopicRoute>,
    /// The node asked, on a cluster.
    node: Option<u16>,
    /// Every node's client address on a cluster (resolved when the answer came).
    node_addrs: Vec<(u16, SocketAddr)>,
}

impl Routes {
    /// Routes from a metadata answer got through `bootstrap` (a topic the broker reported
    /// an error for is left out). A node's host is resolved here; one that does not
    /// resolve is left out (its partitions go to `bootstrap`, which answers `NotHere`).
    pub fn new(bootstrap: SocketAddr, metadata: &MetadataResponse) -> Routes {
        let node = metadata.cluster.as_ref().map(|c| c.node);
        let node_addrs = metadata
            .cluster
            .iter()
            .flat_map(|c| &c.nodes)
            .filter_map(|n| {
                let addr = (n.host.as_str(), n.port).to_socket_addrs().ok()?.next()?;
                Some((n.id, addr))
            })
            .collect();
        Routes {
            bootstrap,
            core_ports: metadata.core_ports.clone(),
            topics: metadata
                .topics
                .iter()
                .filter(|t| t.error == ErrorCode::None as u16)
                .map(|t| TopicRoute {
                    name: t.name.clone(),
                    owners: t.partitions.iter().map(|p| p.owner_core).collect(),
                    nodes: t
                        .partitions
                        .iter()
                        .map(|p| p.owner_node.filter(|&n| Some(n) != node))
                        .collect(),
                })
                .collect(),
            node,
            node_addrs,
        }
    }

    /// Takes in a newer metadata answer: its core ports, nodes, and its topics (replacing
    /// what was known about them).
    pub fn update(&mut self, metadata: &MetadataResponse) {
        let newer = Routes::new(self.bootstrap, metadata);
        self.core_ports = newer.core_ports;
        self.node = newer.node;
        self.node_addrs = newer.node_addrs;
        for topic in newer.topics {
            match self.topics.iter_mut().find(|t| t.name == topic.name) {
                Some(known) => *known = topic,
                None => self.topics.push(topic),
            }
        }
    }

    pub fn topic(&self, name: &str) -> Option<&TopicRoute> {
        self.topics.iter().find(|t| t.name == name)
    }

    /// Partitions of a known topic.
    pub fn partitions(&self, topic: &str) -> Option<u32> {
        self.topic(topic).map(|t| t.owners.len() as u32)
    }

    /// The core that owns a partition, if the topic and partition are known.
    pub fn owner(&self, topic: &str, partition: u32) -> Option<usize> {
        self.topic(topic)
            .and_then(|t| t.owners.get(partition as usize))
            .map(|&core| usize::from(core))
    }

    /// The node that owns a partition when it is not the node asked (on a cluster).
    pub fn owner_node(&self, topic: &str, partition: u32) -> Option<u16> {
        self.topic(topic)
            .and_then(|t| t.nodes.get(partition as usize).copied())
            .flatten()
    }

    /// Where to send a partition's requests: on another node, that node's address; on the
    /// node asked, its owner core's port on the bootstrap host, or the bootstrap address
    /// when the owner is unknown or the broker has no shard ports.
    pub fn address(&self, topic: &str, partition: u32) -> SocketAddr {
        if let Some(node) = self.owner_node(topic, partition) {
            return self.node_address(node).unwrap_or(self.bootstrap);
        }
        self.owner(topic, partition)
            .and_then(|core| self.core_address(core))
            .unwrap_or(self.bootstrap)
    }

    /// A node's client address, if the metadata named it.
    pub fn node_address(&self, node: u16) -> Option<SocketAddr> {
        self.node_addrs
            .iter()
            .find(|&&(id, _)| id == node)
            .map(|&(_, addr)| addr)
    }

    /// The address clients started from.
    pub fn bootstrap(&self) -> SocketAddr {
        self.bootstrap
    }

    /// The port of exactly `core`, if the broker listens on one.
    pub fn core_address(&self, core: usize) -> Option<SocketAddr> {
        match self.core_ports.get(core) {
            Some(&port) if port != 0 => Some(SocketAddr::new(self.bootstrap.ip(), port)),
            _ => None,
        }
    }

    pub fn cores(&self) -> usize {
        self.core_ports.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::native::{PartitionMetadata, TopicMetadata};

    #[test]
    fn partitions_route_to_their_owner_port() {
        let partition = |owner_core| PartitionMetadata {
            owner_core,
            owner_node: None,
            log_start_offset: 0,
            high_watermark: 0,
        };
        let bootstrap: SocketAddr = "127.0.0.1:9092".parse().unwrap();
        let metadata = MetadataResponse {
            core_ports: vec![9093, 0],
            topics: vec![
                TopicMetadata {
                    name: "t".into(),
                    error: 0,
                    settings: Default::default(),
                    partitions: vec![partition(0), partition(1)],
                },
                TopicMetadata {
                    name: "gone".into(),
                    error: ErrorCode::UnknownTopic as u16,
                    settings: Default::default(),
                    partitions: vec![],
                },
            ],
            cluster: None,
        };
        let routes = Routes::new(bootstrap, &metadata);
        assert_eq!(routes.partitions("t"), Some(2));
        assert_eq!(routes.address("t", 0), "127.0.0.1:9093".parse().unwrap());
        assert_eq!(routes.address("t", 1), bootstrap, "core 1 has no port");
        assert_eq!(routes.address("t", 9), bootstrap, "unknown partition");
        assert_eq!(routes.partitions("gone"), None);
        let mut routes = routes;
        let mut more = metadata.clone();
        more.topics[0].partitions.push(partition(0));
        more.topics[1] = TopicMetadata {
            name: "new".into(),
            error: 0,
            settings: Default::default(),
            partitions: vec![partition(1)],
        };
        routes.update(&more);
        assert_eq!(
            (routes.partitions("t"), routes.partitions("new")),
            (Some(3), Some(1))
        );
    }

    #[test]
    fn a_partition_of_another_node_routes_to_that_node() {
        use crate::protocol::native::{ClusterMetadata, NodeAddress};
        let partition = |owner_core, owner_node| PartitionMetadata {
            owner_core,
            owner_node: Some(owner_node),
            log_start_offset: 0,
            high_watermark: 0,
        };
        let node = |id, port| NodeAddress {
            id,
            host: "127.0.0.1".into(),
            port,
        };
        let bootstrap: SocketAddr = "127.0.0.1:9092".parse().unwrap();
        let metadata = MetadataResponse {
            core_ports: vec![9093, 9094],
            topics: vec![TopicMetadata {
                name: "t".into(),
                error: 0,
                settings: Default::default(),
                partitions: vec![partition(1, 1), partition(0, 3), partition(1, 2)],
            }],
            cluster: Some(ClusterMetadata {
                node: 1,
                nodes: vec![node(1, 9092), node(3, 9300)],
            }),
        };
        let routes = Routes::new(bootstrap, &metadata);
        assert_eq!(routes.owner_node("t", 0), None, "the node asked");
        assert_eq!(routes.address("t", 0), "127.0.0.1:9094".parse().unwrap());
        assert_eq!(routes.owner_node("t", 1), Some(3));
        assert_eq!(routes.address("t", 1), "127.0.0.1:9300".parse().unwrap());
        assert_eq!(routes.address("t", 2), bootstrap, "node 2 has no address");
    }
}
