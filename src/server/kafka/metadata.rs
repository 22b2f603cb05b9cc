//! Metadata: every place (node, core) is a broker, with the id, host and port the placement
//! gives it (on one node: id = core, host = the address the client reached, port = that
//! core's shard port); a partition's leader and replicas are the placement's. Topics named
//! and missing are created on demand when the request allows it, as Kafka's
//! `auto.create.topics.enable` does (topics are created on demand for every protocol),
//! except a topic deleted since this connection used it (`shard::used`).
//!
//! Authorized operations (KIP-430, v8+), when asked, are what the principal may do on each
//! topic listed, and (v8-v10) on the cluster if it may describe the cluster (else 0), as
//! Kafka answers; librdkafka's describe_cluster and describe_topics read them here.

use crate::security::acl::actions::{Denied, KafkaApi, Need};
use crate::security::acl::{CLUSTER_NAME, Operation, ResourceType};
use std::rc::Rc;

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use super::acl_codes::authorized_operations;
use super::errors::{self, INVALID_TOPIC_EXCEPTION, UNKNOWN_TOPIC_OR_PARTITION};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::shard::placement::Place;

/// The cluster id every Metadata answer carries.
pub const CLUSTER_ID: &str = "pagurus";

pub(super) fn handle(conn: &Rc<Conn>, header: RequestHeader, request: MetadataRequest) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let body = metadata(&conn, &header, request).await;
        Reply::frame(respond(&header, &body))
    })
}

/// The brokers list: one per place.
pub(super) fn brokers(conn: &Conn) -> Vec<MetadataResponseBroker> {
    let places = conn.shard.placement().places();
    places
        .into_iter()
        .filter_map(|place| broker(conn, place))
        .collect()
}

/// The broker of `place` as a client reaches it; `None` for a place that does not exist.
pub(super) fn broker(conn: &Conn, place: Place) -> Option<MetadataResponseBroker> {
    let address = conn.shard.placement().address(place)?;
    // The placement knows the main listener's ports; another listener's are at the same
    // distance from its own port.
    let port = match (conn.listener_index, address.shard_port) {
        (0, _) => address.port(),
        (_, Some(shard)) => conn.listener_port + (shard - address.main_port),
        (_, None) => conn.listener_port,
    };
    Some(
        MetadataResponseBroker::default()
            .with_node_id(node_id(place))
            .with_host(StrBytes::from_string(
                address.host.clone().unwrap_or_else(|| conn.host.clone()),
            ))
            .with_port(i32::from(port)),
    )
}

pub(super) fn node_id(place: Place) -> BrokerId {
    BrokerId(place.broker_id())
}

async fn metadata(
    conn: &Conn,
    header: &RequestHeader,
    request: MetadataRequest,
) -> MetadataResponse {
    let shard = &conn.shard;
    let topic_operations = header.api_version >= 8 && request.include_topic_authorized_operations;
    let cluster_operations =
        (8..=10).contains(&header.api_version) && request.include_cluster_authorized_operations;
    let mut unknown_ids = Vec::new();
    // v1+: a null list asks for every topic; v0: an empty list does.
    let asked: Option<Vec<String>> = match request.topics {
        None => None,
        Some(topics) if topics.is_empty() && header.api_version == 0 => None,
        Some(topics) => Some(
            topics
                .into_iter()
                .filter_map(|t| match t.name {
                    Some(name) => Some(name.0.to_string()),
                    // v10+ may name a topic by its id alone.
                    None if !t.topic_id.is_nil() => match shard.topic_by_id(t.topic_id.as_u128()) {
                        Some(meta) => Some(meta.name.clone()),
                        None => {
                            unknown_ids.push(t.topic_id);
                            None
                        }
                    },
                    _ => None,
                })
                .collect(),
        ),
    };
    let auto_create = header.api_version < 4 || request.allow_auto_topic_creation;
    let mut invalid = Vec::new();
    let mut gone = Vec::new();
    let mut denied = Vec::new();
    let describable =
        |name: &str| conn.may(errors::acl(KafkaApi::Metadata), ResourceType::Topic, name);
    let names = match asked {
        None => Vec::new(),
        Some(names) => {
            let mut valid = Vec::with_capacity(names.len());
            for name in names {
                if shard.valid_name(name.as_bytes(), "topic").is_err() {
                    invalid.push(name);
                    continue;
                }
                if !describable(&name) {
                    denied.push(name);
                    continue;
                }
                if conn.shard.hidden_from(&conn.used, &name, auto_create) {
                    gone.push(name);
                    continue;
                }
                if auto_create
                    && shard.topic(&name).is_none()
                    && conn.may(
                        errors::acl(KafkaApi::CreateTopics),
                        ResourceType::Topic,
                        &name,
                    )
                    && let Err(failure) = shard.topic_on_demand(name.as_bytes()).await
                {
                    debug!(topic = %name, error = %failure, "topic not created for Metadata");
                }
                valid.push(name);
            }
            if valid.is_empty() {
                // Nothing (valid) asked: an empty name keeps the shard from listing every topic.
                valid.push(String::new());
            }
            valid
        }
    };
    let metadata = shard.metadata(names).await;
    let mut topics: Vec<MetadataResponseTopic> = metadata
        .topics
        .into_iter()
        .filter(|t| !t.name.is_empty())
        // A listing of every topic leaves out those the principal may not describe.
        .filter(|t| {
            conn.may_list(
                errors::acl(KafkaApi::Metadata),
                ResourceType::Topic,
                &t.name,
            )
        })
        .map(|t| {
            let name = Some(TopicName(StrBytes::from_string(t.name)));
            let Some(meta) = t.meta else {
                return MetadataResponseTopic::default()
                    .with_name(name)
                    .with_error_code(UNKNOWN_TOPIC_OR_PARTITION);
            };
            let partitions = t
                .partitions
                .iter()
                .enumerate()
                .map(|(index, p)| {
                    let leader = node_id(p.owner);
                    let replicas: Vec<BrokerId> = p.replicas.iter().map(|&r| node_id(r)).collect();
                    // Another node's partition has no state here: its leader is that node's
                    // broker, which the client asks (docs/CLUSTER.md).
                    let elsewhere = p.owner.node != shard.here().node;
                    MetadataResponsePartition::default()
                        .with_partition_index(i32::try_from(index).expect("partitions fit i32"))
                        .with_error_code(if p.state.is_some() || elsewhere {
                            errors::NONE
                        } else {
                            errors::UNKNOWN_TOPIC_OR_PARTITION
                        })
                        .with_leader_id(leader)
                        // v7+ only; -1 (unknown) is what older versions imply.
                        .with_leader_epoch(if header.api_version >= 7 { 0 } else { -1 })
                        // Every replica is in sync until replication exists.
                        .with_isr_nodes(replicas.clone())
                        .with_replica_nodes(replicas)
                })
                .collect();
            let mut topic = MetadataResponseTopic::default()
                .with_name(name)
                .with_partitions(partitions);
            // The field exists from v10; an older version may not carry a non-zero one.
            if header.api_version >= 10 {
                topic = topic.with_topic_id(uuid::Uuid::from_u128(meta.id));
            }
            if topic_operations {
                let name = topic.name.as_ref().map_or("", |n| n.0.as_str());
                let operations = authorized_operations(conn, ResourceType::Topic, name);
                topic = topic.with_topic_authorized_operations(operations);
            }
            topic
        })
        .collect();
    topics.extend(unknown_ids.into_iter().map(|id| {
        MetadataResponseTopic::default()
            .with_topic_id(id)
            .with_error_code(errors::UNKNOWN_TOPIC_ID)
    }));
    topics.extend(gone.into_iter().map(|name| {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name))))
            .with_error_code(UNKNOWN_TOPIC_OR_PARTITION)
    }));
    topics.extend(denied.into_iter().map(|name| {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name))))
            .with_error_code(errors::TOPIC_AUTHORIZATION_FAILED)
    }));
    topics.extend(invalid.into_iter().map(|name| {
        MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(name))))
            .with_error_code(INVALID_TOPIC_EXCEPTION)
    }));
    let response = MetadataResponse::default()
        .with_brokers(brokers(conn))
        .with_cluster_id(Some(StrBytes::from_static_str(CLUSTER_ID)))
        .with_controller_id(node_id(shard.placement().controller()))
        .with_topics(topics);
    if !cluster_operations {
        return response;
    }
    let describe = Need::On(ResourceType::Cluster, Operation::Describe, Denied::Request);
    let operations = if conn.allowed(describe, CLUSTER_NAME) {
        authorized_operations(conn, ResourceType::Cluster, CLUSTER_NAME)
    } else {
        0
    };
    response.with_cluster_authorized_operations(operations)
}
