//! Metadata: the shard's domain answer, encoded as the native response.

use std::rc::Rc;

use crate::protocol::native::{
    self, ErrorCode, MetadataResponse, PartitionMetadata, TopicMetadata,
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
        let mut out = Vec::new();
        native::encode_metadata_response(&mut out, tag.1, &response(metadata));
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
                            // The native wire names a core of the node it asks
                            // (one node, for now): the place's core.
                            owner_core: p.owner.core.0,
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
    }
}
