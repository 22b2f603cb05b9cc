//! DescribeLogDirs: one log directory, the broker's data directory, holding the partitions
//! this broker (core) leads, as a Kafka broker lists the replicas it hosts; clients ask
//! every broker and add the answers up. Each partition's size is the bytes of its segment files, from its owner;
//! its offset lag is 0 and no partition is a "future" replica (no replica moves). v4's
//! total and usable bytes are the file system's (statvfs). A topic or partition asked for
//! that does not exist is left out, as Kafka does. With the ACL authorizer it needs
//! Describe on the cluster: else no directory, and (v3+) CLUSTER_AUTHORIZATION_FAILED.

use std::rc::Rc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::warn;

use super::errors::{self, CLUSTER_AUTHORIZATION_FAILED};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::actions::KafkaApi;
use crate::security::acl::{CLUSTER_NAME, ResourceType};

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: DescribeLogDirsRequest,
) -> Pending {
    let api = errors::acl(KafkaApi::DescribeLogDirs);
    if !conn.may(api, ResourceType::Cluster, CLUSTER_NAME) {
        let mut response = DescribeLogDirsResponse::default();
        // The top-level error exists from v3; before, an empty answer is all Kafka sends.
        if header.api_version >= 3 {
            response = response.with_error_code(CLUSTER_AUTHORIZATION_FAILED);
        }
        return Pending::Ready(Reply::frame(respond(&header, &response)));
    }
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let shard = &conn.shard;
        // The broker the client asked: the place of the shard port, or on the main port the
        // core that accepted the connection.
        let broker = match conn.listener {
            super::Listener::Shard(place) => place,
            super::Listener::Main => shard.here(),
        };
        let here = |name: &str, p: u32| shard.placement().owner(name, p) == broker;
        // (topic, partitions) asked for, existing ones this broker leads only.
        let asked: Vec<(String, Vec<u32>)> = match request.topics {
            None => shard
                .topic_names()
                .into_iter()
                .filter_map(|name| {
                    let meta = shard.topic(&name)?;
                    let partitions = (0..meta.partitions).filter(|&p| here(&name, p)).collect();
                    Some((name, partitions))
                })
                .collect(),
            Some(topics) => topics
                .into_iter()
                .filter_map(|t| {
                    let meta = shard.topic(t.topic.0.as_str())?;
                    let partitions = t
                        .partitions
                        .into_iter()
                        .filter_map(|p| u32::try_from(p).ok())
                        .filter(|&p| p < meta.partitions && here(&meta.name, p))
                        .collect();
                    Some((meta.name.clone(), partitions))
                })
                .collect(),
        };
        let flat: Vec<(String, u32)> = asked
            .iter()
            .flat_map(|(name, parts)| parts.iter().map(|p| (name.clone(), *p)))
            .collect();
        let mut states = shard.partition_states(&flat).await.into_iter();
        let topics = asked
            .into_iter()
            .map(|(name, parts)| {
                let partitions = parts
                    .into_iter()
                    .filter_map(|p| {
                        let state = states.next().flatten()?;
                        Some(
                            DescribeLogDirsPartition::default()
                                .with_partition_index(i32::try_from(p).unwrap_or(i32::MAX))
                                .with_partition_size(
                                    i64::try_from(state.size_bytes).unwrap_or(i64::MAX),
                                )
                                .with_offset_lag(0),
                        )
                    })
                    .collect();
                DescribeLogDirsTopic::default()
                    .with_name(TopicName(StrBytes::from_string(name)))
                    .with_partitions(partitions)
            })
            .collect();
        let dir = &shard.config.data_dir;
        let (total, usable) = match nix::sys::statvfs::statvfs(dir) {
            Ok(fs) => {
                let block = fs.fragment_size();
                (
                    i64::try_from(fs.blocks().saturating_mul(block)).unwrap_or(i64::MAX),
                    i64::try_from(fs.blocks_available().saturating_mul(block)).unwrap_or(i64::MAX),
                )
            }
            Err(error) => {
                warn!(dir = %dir.display(), %error, "statvfs of the data directory failed");
                (-1, -1)
            }
        };
        let result = DescribeLogDirsResult::default()
            .with_log_dir(StrBytes::from_string(dir.display().to_string()))
            .with_topics(topics)
            .with_total_bytes(total)
            .with_usable_bytes(usable);
        Reply::frame(respond(
            &header,
            &DescribeLogDirsResponse::default().with_results(vec![result]),
        ))
    })
}
