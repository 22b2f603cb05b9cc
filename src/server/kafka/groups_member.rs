//! Heartbeat and LeaveGroup.

use std::rc::Rc;

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, LeaveGroupRequest, LeaveGroupResponse,
};

use super::groups::name_code;
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;

pub(super) fn heartbeat(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: HeartbeatRequest,
) -> Pending {
    let shard = Rc::clone(&conn.shard);
    Pending::later(async move {
        let beat = shard
            .heartbeat(
                request.group_id.as_bytes(),
                &request.member_id,
                request.generation_id,
            )
            .await;
        let code = beat.err().map_or(0, |f| name_code(&f));
        Reply::frame(respond(
            &header,
            &HeartbeatResponse::default().with_error_code(code),
        ))
    })
}

/// v0-2 name one member; v3+ a list, each by member id or instance id, with a result each.
pub(super) fn leave(conn: &Rc<Conn>, header: RequestHeader, request: LeaveGroupRequest) -> Pending {
    let shard = Rc::clone(&conn.shard);
    Pending::later(async move {
        let batch = header.api_version >= 3;
        let members: Vec<(String, Option<String>)> = if batch {
            request
                .members
                .iter()
                .map(|m| {
                    (
                        m.member_id.to_string(),
                        m.group_instance_id.as_ref().map(|i| i.to_string()),
                    )
                })
                .collect()
        } else {
            vec![(request.member_id.to_string(), None)]
        };
        let left = shard
            .leave_group(request.group_id.as_bytes(), members)
            .await;
        let body = match left {
            Err(failure) => LeaveGroupResponse::default().with_error_code(name_code(&failure)),
            Ok(results) if batch => LeaveGroupResponse::default().with_members(
                request
                    .members
                    .into_iter()
                    .zip(results)
                    .map(|(m, result)| {
                        MemberResponse::default()
                            .with_member_id(m.member_id)
                            .with_group_instance_id(m.group_instance_id)
                            .with_error_code(result.err().map_or(0, |f| name_code(&f)))
                    })
                    .collect(),
            ),
            Ok(results) => LeaveGroupResponse::default().with_error_code(
                results
                    .into_iter()
                    .next()
                    .and_then(Result::err)
                    .map_or(0, |f| name_code(&f)),
            ),
        };
        Reply::frame(respond(&header, &body))
    })
}
