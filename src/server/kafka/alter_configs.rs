//! AlterConfigs and IncrementalAlterConfigs: change a topic's alterable settings
//! (`configs`). The new settings are written to `topic.meta` durably on the controller and
//! then published to every core before the answer, so they survive a restart and the next
//! retention or compaction pass uses them. Broker configs are static: refused. With the
//! ACL authorizer each resource needs AlterConfigs on its topic (or on the cluster, for a
//! broker), checked first; a refused resource gets TOPIC_AUTHORIZATION_FAILED (or
//! CLUSTER_AUTHORIZATION_FAILED) and the others are still changed.

use std::collections::HashSet;
use std::rc::Rc;

use kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse, alter_configs_response, incremental_alter_configs_response,
};
use kafka_protocol::protocol::StrBytes;
use tracing::warn;

use super::configs;
use super::describe_configs::{RESOURCE_BROKER, RESOURCE_TOPIC, authorize, entries};
use super::errors::{self, INVALID_CONFIG, INVALID_REQUEST, NONE};
use super::{Conn, Pending, Reply, respond};
use crate::metrics::counters::Metrics;
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::actions::KafkaApi;
use crate::shard::topics::TopicMeta;

/// IncrementalAlterConfigs' operations.
const OP_SET: i8 = 0;
const OP_DELETE: i8 = 1;

/// One change of a resource: a name, its operation (SET for AlterConfigs), its value.
struct Change {
    name: String,
    op: i8,
    value: Option<String>,
}

pub(super) fn handle_incremental(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: IncrementalAlterConfigsRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let mut responses = Vec::with_capacity(request.resources.len());
        for r in request.resources {
            let changes = r
                .configs
                .into_iter()
                .map(|c| Change {
                    name: c.name.to_string(),
                    op: c.config_operation,
                    value: c.value.map(|v| v.to_string()),
                })
                .collect();
            let (code, message) = alter(
                &conn,
                KafkaApi::IncrementalAlterConfigs,
                r.resource_type,
                &r.resource_name,
                changes,
                request.validate_only,
            )
            .await;
            responses.push(
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_string))
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name),
            );
        }
        Reply::frame(respond(
            &header,
            &IncrementalAlterConfigsResponse::default().with_responses(responses),
        ))
    })
}

/// AlterConfigs replaces a resource's whole set: an alterable config it leaves out goes
/// back to its default, as in Kafka.
pub(super) fn handle_legacy(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: AlterConfigsRequest,
) -> Pending {
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let mut responses = Vec::with_capacity(request.resources.len());
        for r in request.resources {
            let changes = r
                .configs
                .into_iter()
                .map(|c| Change {
                    name: c.name.to_string(),
                    op: OP_SET,
                    value: c.value.map(|v| v.to_string()),
                })
                .collect();
            let (code, message) = alter(
                &conn,
                KafkaApi::AlterConfigs,
                r.resource_type,
                &r.resource_name,
                changes,
                request.validate_only,
            )
            .await;
            responses.push(
                alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_error_code(code)
                    .with_error_message(message.map(StrBytes::from_string))
                    .with_resource_type(r.resource_type)
                    .with_resource_name(r.resource_name),
            );
        }
        Reply::frame(respond(
            &header,
            &AlterConfigsResponse::default().with_responses(responses),
        ))
    })
}

/// Applies one resource's changes for `api` (AlterConfigs replaces the whole set); the
/// code and message of the outcome. Every refusal is logged and counted.
async fn alter(
    conn: &Rc<Conn>,
    api: KafkaApi,
    resource_type: i8,
    name: &StrBytes,
    changes: Vec<Change>,
    validate_only: bool,
) -> (i16, Option<String>) {
    let replace = api == KafkaApi::AlterConfigs;
    let planned = authorize(conn, api, resource_type, name)
        .and_then(|()| plan(conn, resource_type, name, changes, replace));
    match planned {
        Ok(None) => (NONE, None),
        Ok(Some(_)) if validate_only => (NONE, None),
        Ok(Some(meta)) => match conn.shard.alter_topic(meta).await {
            Ok(()) => (NONE, None),
            Err(f) => (errors::of(&f), Some(f.to_string())),
        },
        Err((code, message)) => {
            if code == INVALID_CONFIG {
                Metrics::inc(&conn.shard.metrics.kafka_configs_refused);
            }
            warn!(resource = %name.as_str(), resource_type, %message, "Kafka config change refused");
            (code, Some(message))
        }
    }
}

/// The topic's new settings (`None`: nothing to change), or Kafka's code and a message.
fn plan(
    conn: &Conn,
    resource_type: i8,
    name: &StrBytes,
    changes: Vec<Change>,
    replace: bool,
) -> Result<Option<TopicMeta>, (i16, String)> {
    let described = entries(conn, resource_type, name)?;
    let mut seen = HashSet::with_capacity(changes.len());
    if let Some(twice) = changes.iter().find(|c| !seen.insert(c.name.as_str())) {
        return Err((
            INVALID_REQUEST,
            format!("config {} named twice", twice.name),
        ));
    }
    if resource_type == RESOURCE_BROKER {
        return match changes.first() {
            None => Ok(None),
            Some(c) => Err((
                INVALID_CONFIG,
                format!(
                    "broker config {}: the broker's settings are static (pagurus serve's options)",
                    c.name
                ),
            )),
        };
    }
    debug_assert_eq!(resource_type, RESOURCE_TOPIC);
    let meta = conn
        .shard
        .topic(name.as_str())
        .expect("described above, on this core, with no await between");
    let mut settings = meta.settings();
    if replace {
        // AlterConfigs: what the request leaves out goes back to its default.
        for name in ["cleanup.policy", "retention.ms", "retention.bytes"] {
            configs::apply(&mut settings, name, None, false, &described)
                .map_err(|m| (INVALID_CONFIG, m))?;
        }
    }
    for change in &changes {
        let invalid = |m| (INVALID_CONFIG, m);
        let value = match (change.op, change.value.as_deref()) {
            (OP_SET, None) => return Err(invalid(format!("config {}: no value", change.name))),
            (OP_SET, value) => value.map(str::to_string),
            (OP_DELETE, _) => None,
            (op @ (2 | 3), Some(value)) if change.name == "cleanup.policy" => {
                let current = if settings.cleanup == 1 {
                    "compact"
                } else {
                    "delete"
                };
                Some(configs::list_op(current, op, value).map_err(invalid)?)
            }
            (op, _) => {
                return Err(invalid(format!(
                    "config {}: operation {op} (append and subtract apply to cleanup.policy only)",
                    change.name
                )));
            }
        };
        configs::apply(
            &mut settings,
            &change.name,
            value.as_deref(),
            false,
            &described,
        )
        .map_err(invalid)?;
    }
    let mut altered = TopicMeta::from_settings(&meta.name, &settings, &conn.shard.config.log)
        .map_err(|m| (INVALID_CONFIG, m))?;
    altered.id = meta.id;
    Ok((altered != *meta).then_some(altered))
}
