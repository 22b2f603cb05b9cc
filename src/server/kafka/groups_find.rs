//! FindCoordinator: a group's coordinator is the placement's answer, advertised as the
//! broker of that place, as Metadata lists it. Transaction coordinators (key type 1) are refused: pagurus has no
//! transactions.

use super::errors;
use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use std::rc::Rc;

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::errors::COORDINATOR_NOT_AVAILABLE;
use super::groups::INVALID_GROUP_ID;
use super::metadata::broker;
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: FindCoordinatorRequest,
) -> Pending {
    let keys: Vec<StrBytes> = if header.api_version >= 4 {
        request.coordinator_keys
    } else {
        vec![request.key]
    };
    let found: Vec<Coordinator> = keys
        .into_iter()
        .map(|key| coordinator(conn, key, request.key_type))
        .collect();
    let mut body = FindCoordinatorResponse::default();
    if header.api_version >= 4 {
        body = body.with_coordinators(found);
    } else if let Some(c) = found.into_iter().next() {
        body = body
            .with_error_code(c.error_code)
            .with_error_message(c.error_message)
            .with_node_id(c.node_id)
            .with_host(c.host)
            .with_port(c.port);
    }
    Pending::Ready(Reply::frame(respond(&header, &body)))
}

fn coordinator(conn: &Conn, key: StrBytes, key_type: i8) -> Coordinator {
    let refused = |code: i16, why: &str| {
        Coordinator::default()
            .with_key(key.clone())
            .with_node_id((-1).into())
            .with_port(-1)
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(why.to_string())))
    };
    if key_type != 0 {
        return refused(
            COORDINATOR_NOT_AVAILABLE,
            "pagurus has no transaction coordinator",
        );
    }
    if conn.shard.valid_name(key.as_bytes(), "group").is_err() {
        return refused(INVALID_GROUP_ID, "invalid group name");
    }
    if !conn.may(
        errors::acl(KafkaApi::FindCoordinator),
        ResourceType::Group,
        key.as_str(),
    ) {
        return refused(
            errors::GROUP_AUTHORIZATION_FAILED,
            "not authorized to describe the group",
        );
    }
    let place = conn.shard.placement().coordinator(&key);
    let Some(broker) = broker(conn, place) else {
        return refused(
            COORDINATOR_NOT_AVAILABLE,
            "the coordinator's broker has no address",
        );
    };
    Coordinator::default()
        .with_key(key)
        .with_node_id(broker.node_id)
        .with_host(broker.host)
        .with_port(broker.port)
}
