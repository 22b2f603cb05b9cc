//! DescribeConfigs: a topic's settings and the broker's under Kafka's names, with values,
//! sources, read-only flags and types (`configs`). With the ACL authorizer each resource
//! needs DescribeConfigs on its topic (TOPIC_AUTHORIZATION_FAILED) or, for a broker, on
//! the cluster (CLUSTER_AUTHORIZATION_FAILED), checked before it is looked up, as Kafka
//! does; the other resources of the request are still answered.

use std::rc::Rc;

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use tracing::debug;

use super::configs::{self, Entry};
use super::errors::{self, INVALID_REQUEST, UNKNOWN_TOPIC_OR_PARTITION};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::actions::KafkaApi;
use crate::security::acl::{CLUSTER_NAME, ResourceType};

/// Kafka's resource types.
pub const RESOURCE_TOPIC: i8 = 2;
pub const RESOURCE_BROKER: i8 = 4;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: DescribeConfigsRequest,
) -> Pending {
    let docs = request.include_documentation;
    let results = request
        .resources
        .into_iter()
        .map(|r| describe(conn, r, docs))
        .collect();
    Pending::Ready(Reply::frame(respond(
        &header,
        &DescribeConfigsResponse::default().with_results(results),
    )))
}

fn describe(conn: &Conn, resource: DescribeConfigsResource, docs: bool) -> DescribeConfigsResult {
    let result = DescribeConfigsResult::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone());
    let name = &resource.resource_name;
    let described = authorize(
        conn,
        KafkaApi::DescribeConfigs,
        resource.resource_type,
        name,
    )
    .and_then(|()| entries(conn, resource.resource_type, name));
    let entries = match described {
        Ok(entries) => entries,
        Err((code, message)) => {
            debug!(resource = %resource.resource_name.as_str(), %message, "DescribeConfigs refused");
            return result
                .with_error_code(code)
                .with_error_message(Some(StrBytes::from_string(message)));
        }
    };
    let keys = resource.configuration_keys;
    let configs = entries
        .into_iter()
        .filter(|e| {
            keys.as_ref()
                .is_none_or(|keys| keys.iter().any(|k| k.as_str() == e.name))
        })
        .map(|e| {
            DescribeConfigsResourceResult::default()
                .with_name(StrBytes::from_static_str(e.name))
                .with_value(Some(StrBytes::from_string(e.value)))
                .with_read_only(e.read_only)
                .with_config_source(e.source)
                .with_config_type(e.config_type)
                .with_documentation(
                    (docs && !e.doc.is_empty()).then(|| StrBytes::from_static_str(e.doc)),
                )
        })
        .collect();
    result.with_configs(configs)
}

/// `Ok` when the session's principal may make the config request `api` on the resource
/// (`DescribeConfigs` or `AlterConfigs` on the topic, or on the cluster for a broker); else
/// the resource's authorization error and a message. Resource types pagurus does not
/// serve are left to `entries` to refuse.
pub(super) fn authorize(
    conn: &Conn,
    api: KafkaApi,
    resource_type: i8,
    name: &StrBytes,
) -> Result<(), (i16, String)> {
    let (resource, name, code) = match resource_type {
        RESOURCE_TOPIC => (
            ResourceType::Topic,
            name.as_str(),
            errors::TOPIC_AUTHORIZATION_FAILED,
        ),
        RESOURCE_BROKER => (
            ResourceType::Cluster,
            CLUSTER_NAME,
            errors::CLUSTER_AUTHORIZATION_FAILED,
        ),
        _ => return Ok(()),
    };
    if conn.may(errors::acl(api), resource, name) {
        Ok(())
    } else {
        Err((
            code,
            format!("not authorized to {api:?} on {resource} {name:?}"),
        ))
    }
}

/// The entries of one resource, or Kafka's code and a message.
pub(super) fn entries(
    conn: &Conn,
    resource_type: i8,
    name: &StrBytes,
) -> Result<Vec<Entry>, (i16, String)> {
    let broker = &conn.shard.config;
    match resource_type {
        RESOURCE_TOPIC => match conn.shard.topic(name.as_str()) {
            Some(meta) => Ok(configs::describe_topic(&meta, broker)),
            None => Err((
                UNKNOWN_TOPIC_OR_PARTITION,
                format!("unknown topic {}", name.as_str()),
            )),
        },
        // "" is the cluster-wide default; a broker id is one place (node, core).
        RESOURCE_BROKER => match name.as_str() {
            "" => Ok(configs::describe_broker(broker, conn.shard.here())),
            id => match id.parse::<i32>().ok().and_then(|id| {
                let placement = conn.shard.placement();
                placement
                    .place_of_broker(id)
                    .filter(|place| place.node == placement.node())
            }) {
                Some(place) => Ok(configs::describe_broker(broker, place)),
                None => Err((INVALID_REQUEST, format!("no broker {id}"))),
            },
        },
        other => Err((
            INVALID_REQUEST,
            format!("resource type {other}: pagurus describes topics (2) and brokers (4)"),
        )),
    }
}
