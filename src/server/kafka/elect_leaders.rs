//! ElectLeaders, answered for one node: every partition has one copy, led by the core that
//! owns it, which is always its preferred leader. So no election is ever needed: a named
//! partition gets `ELECTION_NOT_NEEDED` (84), as Kafka answers for a partition already led by
//! its preferred replica (preferred and unclean elections alike), and a request for every
//! partition (a null list) lists each topic with no partition, as Kafka leaves out the
//! partitions that needed none. An unknown topic or partition is
//! `UNKNOWN_TOPIC_OR_PARTITION` (3). With the ACL authorizer it needs Alter on the
//! cluster: else every partition asked, and (v1+) the whole answer, get
//! CLUSTER_AUTHORIZATION_FAILED, as Kafka answers.

use std::rc::Rc;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::errors::{self, CLUSTER_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_OR_PARTITION};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::actions::KafkaApi;
use crate::security::acl::{CLUSTER_NAME, ResourceType};

const ELECTION_NOT_NEEDED: i16 = 84;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: ElectLeadersRequest,
) -> Pending {
    let api = errors::acl(KafkaApi::ElectLeaders);
    if !conn.may(api, ResourceType::Cluster, CLUSTER_NAME) {
        return Pending::Ready(Reply::frame(respond(&header, &refused(&header, request))));
    }
    let shard = &conn.shard;
    let results = match request.topic_partitions {
        None => shard
            .topic_names()
            .into_iter()
            .map(|name| {
                ReplicaElectionResult::default().with_topic(TopicName(StrBytes::from_string(name)))
            })
            .collect(),
        Some(topics) => topics
            .into_iter()
            .map(|topic| {
                let meta = shard.topic(topic.topic.0.as_str());
                let partitions = topic
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let exists = meta
                            .as_ref()
                            .is_some_and(|m| u32::try_from(p).is_ok_and(|p| p < m.partitions));
                        let (code, message) = if exists {
                            (
                                ELECTION_NOT_NEEDED,
                                "led by its only replica, its owner core",
                            )
                        } else {
                            (UNKNOWN_TOPIC_OR_PARTITION, "no such topic or partition")
                        };
                        PartitionResult::default()
                            .with_partition_id(p)
                            .with_error_code(code)
                            .with_error_message(Some(StrBytes::from_static_str(message)))
                    })
                    .collect();
                ReplicaElectionResult::default()
                    .with_topic(topic.topic)
                    .with_partition_result(partitions)
            })
            .collect(),
    };
    Pending::Ready(Reply::frame(respond(
        &header,
        &ElectLeadersResponse::default().with_replica_election_results(results),
    )))
}

/// The answer to a principal not allowed Alter on the cluster: each partition asked is
/// refused.
fn refused(header: &RequestHeader, request: ElectLeadersRequest) -> ElectLeadersResponse {
    let why = || Some(StrBytes::from_static_str("needs Alter on the cluster"));
    let results = request
        .topic_partitions
        .unwrap_or_default()
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .into_iter()
                .map(|p| {
                    PartitionResult::default()
                        .with_partition_id(p)
                        .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
                        .with_error_message(why())
                })
                .collect();
            ReplicaElectionResult::default()
                .with_topic(topic.topic)
                .with_partition_result(partitions)
        })
        .collect();
    let response = ElectLeadersResponse::default().with_replica_election_results(results);
    if header.api_version >= 1 {
        response.with_error_code(CLUSTER_AUTHORIZATION_FAILED)
    } else {
        response
    }
}
