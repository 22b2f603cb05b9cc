//! JoinGroup and SyncGroup: the classic rebalance protocol on the shard's coordinator. A
//! join answer waits until the generation forms; a follower's sync until the leader brought
//! the assignment (both bounded by the member's rebalance timeout). From v4 a first join
//! (no member id, not static) is answered MEMBER_ID_REQUIRED with an id to join with
//! (KIP-394), as Kafka does.

use std::rc::Rc;

use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{
    JoinGroupRequest, JoinGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::groups::{INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED, name_code};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::shard::coordinator::calls::JoinAnswer;
use crate::shard::membership::JoinRequest;

pub(super) fn join(conn: &Rc<Conn>, header: RequestHeader, request: JoinGroupRequest) -> Pending {
    let shard = Rc::clone(&conn.shard);
    Pending::later(async move {
        let failed = |code: i16| {
            JoinGroupResponse::default()
                .with_error_code(code)
                .with_generation_id(-1)
                .with_member_id(request.member_id.clone())
        };
        if request.session_timeout_ms < 0 || request.rebalance_timeout_ms < -1 {
            return Reply::frame(respond(&header, &failed(INVALID_SESSION_TIMEOUT)));
        }
        // v0 has no rebalance timeout (-1 there): the session timeout stands in, as in Kafka.
        let rebalance_timeout_ms = if request.rebalance_timeout_ms < 0 {
            request.session_timeout_ms
        } else {
            request.rebalance_timeout_ms
        };
        let join = JoinRequest {
            member_id: request.member_id.to_string(),
            instance_id: request.group_instance_id.as_ref().map(|i| i.to_string()),
            client_id: header.client_id.clone().unwrap_or_default(),
            session_timeout_ms: request.session_timeout_ms as u64,
            rebalance_timeout_ms: rebalance_timeout_ms as u64,
            protocol_type: request.protocol_type.to_string(),
            protocols: request
                .protocols
                .iter()
                .map(|p| (p.name.to_string(), p.metadata.to_vec()))
                .collect(),
            topics: Vec::new(),
            // KIP-394, as Kafka: from v4 a first join gets MEMBER_ID_REQUIRED and an id.
            member_id_required: header.api_version >= 4,
        };
        let body = match shard.join_group(request.group_id.as_bytes(), join).await {
            Ok(JoinAnswer::MemberIdRequired { member_id }) => JoinGroupResponse::default()
                .with_error_code(MEMBER_ID_REQUIRED)
                .with_generation_id(-1)
                .with_member_id(StrBytes::from_string(member_id)),
            Ok(JoinAnswer::Joined(joined)) => JoinGroupResponse::default()
                .with_generation_id(joined.generation)
                .with_protocol_type(Some(StrBytes::from_string(joined.protocol_type)))
                .with_protocol_name(joined.protocol.map(StrBytes::from_string))
                .with_leader(StrBytes::from_string(joined.leader))
                .with_member_id(StrBytes::from_string(joined.member_id))
                .with_members(
                    joined
                        .members
                        .into_iter()
                        .map(|(id, instance, metadata)| {
                            JoinGroupResponseMember::default()
                                .with_member_id(StrBytes::from_string(id))
                                .with_group_instance_id(instance.map(StrBytes::from_string))
                                .with_metadata(metadata.into())
                        })
                        .collect(),
                ),
            Err(failure) => failed(name_code(&failure)),
        };
        Reply::frame(respond(&header, &body))
    })
}

pub(super) fn sync(conn: &Rc<Conn>, header: RequestHeader, request: SyncGroupRequest) -> Pending {
    let shard = Rc::clone(&conn.shard);
    Pending::later(async move {
        let assignments = request
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.to_vec()))
            .collect();
        let synced = shard
            .sync_group(
                request.group_id.as_bytes(),
                &request.member_id,
                request.generation_id,
                assignments,
            )
            .await;
        let body = match synced {
            Ok(synced) => SyncGroupResponse::default()
                .with_protocol_type(Some(StrBytes::from_string(synced.protocol_type)))
                .with_protocol_name(synced.protocol.map(StrBytes::from_string))
                .with_assignment(synced.assignment.into()),
            Err(failure) => SyncGroupResponse::default().with_error_code(name_code(&failure)),
        };
        Reply::frame(respond(&header, &body))
    })
}
