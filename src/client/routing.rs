//! Shard-aware routing: from a metadata answer, the address of the core that owns each
//! partition, so a client can send a partition's requests straight to its owner and spare
//! the broker a hop over its mesh.

use std::net::SocketAddr;

use crate::protocol::native::{ErrorCode, MetadataResponse};

/// What a client learned from metadata about one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRoute {
    pub name: String,
    /// Owner core of each partition.
    pub owners: Vec<u16>,
}

/// Partition owners and the per-core ports, as of one metadata answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routes {
    bootstrap: SocketAddr,
    core_ports: Vec<u16>,
    topics: Vec<TopicRoute>,
}

impl Routes {
    /// Routes from a metadata answer got through `bootstrap` (a topic the broker reported
    /// an error for is left out).
    pub fn new(bootstrap: SocketAddr, metadata: &MetadataResponse) -> Routes {
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
                })
                .collect(),
        }
    }

    /// Takes in a newer metadata answer: its core ports, and its topics (replacing what was
    /// known about them).
    pub fn update(&mut self, metadata: &MetadataResponse) {
        let newer = Routes::new(self.bootstrap, metadata);
        self.core_ports = newer.core_ports;
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

    /// Where to send a partition's requests: its owner core's port on the bootstrap host,
    /// or the bootstrap address when the owner is unknown or the broker has no shard ports.
    pub fn address(&self, topic: &str, partition: u32) -> SocketAddr {
        self.owner(topic, partition)
            .and_then(|core| self.core_address(core))
            .unwrap_or(self.bootstrap)
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
}
