//! ListGroups, DescribeGroups, DeleteGroups: the groups every coordinator holds and those
//! known by their committed offsets alone (listed `Empty`, type `consumer`).

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::errors::NONE;
use super::groups::{code, name_code};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::shard::ShardError;

/// Kafka's type of a group pagurus knows only by its offsets.
const OFFSETS_ONLY_TYPE: &str = "consumer";

pub(super) fn list(conn: &Rc<Conn>, header: RequestHeader, request: ListGroupsRequest) -> Pending {
    let shard = Rc::clone(&conn.shard);
    // v5+ filters by group type; every pagurus group is a classic one (KIP-848's
    // `consumer` groups are not served).
    let classic = request.types_filter.is_empty()
        || request
            .types_filter
            .iter()
            .any(|t| t.eq_ignore_ascii_case("classic"));
    Pending::later(async move {
        let body = match shard.group_listings().await {
            Ok(_) if !classic => ListGroupsResponse::default(),
            Ok(groups) => ListGroupsResponse::default().with_groups(
                groups
                    .into_iter()
                    .filter(|(_, state, _)| {
                        request.states_filter.is_empty()
                            || request
                                .states_filter
                                .iter()
                                .any(|s| s.eq_ignore_ascii_case(state))
                    })
                    .map(|(name, state, protocol_type)| {
                        let protocol_type = if protocol_type.is_empty() {
                            OFFSETS_ONLY_TYPE.to_string()
                        } else {
                            protocol_type
                        };
                        ListedGroup::default()
                            .with_group_id(StrBytes::from_string(name).into())
                            .with_protocol_type(StrBytes::from_string(protocol_type))
                            .with_group_state(StrBytes::from_string(state))
                            .with_group_type(StrBytes::from_static_str("classic"))
                    })
                    .collect(),
            ),
            Err(failure) => ListGroupsResponse::default().with_error_code(code(&failure)),
        };
        Reply::frame(respond(&header, &body))
    })
}

pub(super) fn describe(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: DescribeGroupsRequest,
) -> Pending {
    let shard = Rc::clone(&conn.shard);
    Pending::later(async move {
        let mut groups = Vec::with_capacity(request.groups.len());
        for group_id in request.groups {
            let described = DescribedGroup::default()
                .with_group_id(group_id.clone())
                .with_authorized_operations(i32::MIN);
            groups.push(match shard.describe_group_full(group_id.as_bytes()).await {
                Ok(found) => match found.view {
                    Some(view) => described
                        .with_group_state(StrBytes::from_string(view.state))
                        .with_protocol_type(StrBytes::from_string(view.protocol_type))
                        .with_protocol_data(StrBytes::from_string(view.protocol))
                        .with_members(
                            view.members
                                .into_iter()
                                .map(|m| {
                                    DescribedGroupMember::default()
                                        .with_member_id(StrBytes::from_string(m.member_id))
                                        .with_group_instance_id(
                                            m.instance_id.map(StrBytes::from_string),
                                        )
                                        .with_client_id(StrBytes::from_string(m.client_id))
                                        .with_member_metadata(m.metadata.into())
                                        .with_member_assignment(m.assignment.into())
                                })
                                .collect(),
                        ),
                    None => described
                        .with_group_state(StrBytes::from_static_str("Empty"))
                        .with_protocol_type(StrBytes::from_static_str(OFFSETS_ONLY_TYPE)),
                },
                // Kafka describes a group it does not know as Dead, with no error.
                Err(ShardError::UnknownGroup { .. }) => {
                    described.with_group_state(StrBytes::from_static_str("Dead"))
                }
                Err(f) => described.with_error_code(name_code(&f)),
            });
        }
        Reply::frame(respond(
            &header,
            &DescribeGroupsResponse::default().with_groups(groups),
        ))
    })
}

pub(super) fn delete(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: DeleteGroupsRequest,
) -> Pending {
    let shard = Rc::clone(&conn.shard);
    Pending::later(async move {
        let mut results = Vec::with_capacity(request.groups_names.len());
        for group_id in request.groups_names {
            let deleted = shard.delete_group(group_id.as_bytes()).await;
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(group_id)
                    .with_error_code(deleted.err().map_or(NONE, |f| name_code(&f))),
            );
        }
        Reply::frame(respond(
            &header,
            &DeleteGroupsResponse::default().with_results(results),
        ))
    })
}
