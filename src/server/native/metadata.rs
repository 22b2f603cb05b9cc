//! Metadata: the shard's domain answer, encoded as the native response.

use std::rc::Rc;

use crate::protocol::native::{
    self, ClusterMetadata, ErrorCode, MetadataResponse, NodeAddress, PartitionMetadata,
    TopicMetadata,
};
use crate::server::native::{Pending, Tag, later};
use crate::shard::Shard;
use crate::shard::data::Metadata;

pub(super) fn metadata(shard: &Rc<Shard>, tag: Tag, topics: Vec<&[u8]>) -> Pending {
    let names: Vec<String> = topics
        .into_iter()
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    later(shard, tag, async move |shard: Rc<Shard>| {
        let metadata = shard.metadata(names).await;
        let mut response = response(metadata);
        response.cluster = cluster_section(&shard);
        let mut out = Vec::new();
        native::encode_metadata_response(&mut out, tag.1, &response);
        Ok(out)
    })
}

fn response(metadata: Metadata) -> MetadataResponse {
    let topics = metadata
        .topics
        .into_iter()
        .map(|topic| match topic.meta {
            None => TopicMetadata {
                name: topic.name,
                error: ErrorCode::UnknownTopic as u16,
                settings: Default::default(),
                partitions: Vec::new(),
            },
            Some(meta) => TopicMetadata {
                name: topic.name,
                error: 0,
                settings: meta.settings(),
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let state = p.state.unwrap_or_default();
                        PartitionMetadata {
                            owner_core: p.owner.core.0,
                            owner_node: Some(p.owner.node.0),
                            log_start_offset: state.log_start_offset,
                            high_watermark: state.high_watermark,
                        }
                    })
                    .collect(),
            },
        })
        .collect();
    MetadataResponse {
        core_ports: metadata.core_ports,
        topics,
        cluster: None,
    }
}

/// On a cluster node, the section naming this node and every node's client address (as
/// registered with the controller); `None` on a broker alone, whose answer keeps the
/// bytes it always had.
fn cluster_section(shard: &Shard) -> Option<ClusterMetadata> {
    shard.config.cluster.as_ref()?;
    let status = shard.cluster_view()?.status();
    let nodes = status
        .nodes
        .iter()
        .filter_map(|node| {
            let (host, port) = node.client_addr.rsplit_once(':')?;
            Some(NodeAddress {
                id: node.id.0,
                host: host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
                port: port.parse().ok()?,
            })
        })
        .collect();
    Some(ClusterMetadata {
        node: shard.placement().node().0,
        nodes,
    })
}
