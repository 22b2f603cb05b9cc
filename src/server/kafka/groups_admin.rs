//! ListGroups, DescribeGroups, DeleteGroups: the groups every coordinator holds and those
//! known by their committed offsets alone (listed `Empty`, type `consumer`).
//!
//! With the ACL authorizer, as Kafka's broker: ListGroups lists every group to a principal
//! allowed Describe on the cluster, else only the groups it may describe; DescribeGroups and
//! DeleteGroups answer GROUP_AUTHORIZATION_FAILED for each group not allowed (Describe,
//! Delete) and serve the others.

use std::rc::Rc;

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

use super::acl_codes::authorized_operations;
use super::errors::{self, GROUP_AUTHORIZATION_FAILED, NONE};
use super::groups::{code, name_code};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::ResourceType;
use crate::security::acl::actions::KafkaApi;
use crate::shard::ShardError;

/// Kafka's type of a group pagurus knows only by its offsets.
const OFFSETS_ONLY_TYPE: &str = "consumer";

pub(super) fn list(conn: &Rc<Conn>, header: RequestHeader, request: ListGroupsRequest) -> Pending {
    let conn = Rc::clone(conn);
    // v5+ filters by group type; every pagurus group is a classic one (KIP-848's
    // `consumer` groups are not served).
    let classic = request.types_filter.is_empty()
        || request
            .types_filter
            .iter()
            .any(|t| t.eq_ignore_ascii_case("classic"));
    Pending::later(async move {
        // Describe on the cluster lists every group; else each group's own Describe.
        let describable = |name: &str| {
            conn.may_list(errors::acl(KafkaApi::ListGroups), ResourceType::Group, name)
        };
        let body = match conn.shard.group_listings().await {
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
                    .filter(|(name, _, _)| describable(name))
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
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let shard = &conn.shard;
        let mut groups = Vec::with_capacity(request.groups.len());
        for group_id in request.groups {
            let described = DescribedGroup::default()
                .with_group_id(group_id.clone())
                .with_authorized_operations(i32::MIN);
            let api = errors::acl(KafkaApi::DescribeGroups);
            if !conn.may(api, ResourceType::Group, group_id.as_str()) {
                groups.push(described.with_error_code(GROUP_AUTHORIZATION_FAILED));
                continue;
            }
            // KIP-430: what the principal may do on the group, when asked.
            let described = if request.include_authorized_operations {
                let group = group_id.as_str();
                described.with_authorized_operations(authorized_operations(
                    &conn,
                    ResourceType::Group,
                    group,
                ))
            } else {
                described
            };
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
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let mut results = Vec::with_capacity(request.groups_names.len());
        for group_id in request.groups_names {
            let api = errors::acl(KafkaApi::DeleteGroups);
            let code = if conn.may(api, ResourceType::Group, group_id.as_str()) {
                let deleted = conn.shard.delete_group(group_id.as_bytes()).await;
                deleted.err().map_or(NONE, |f| name_code(&f))
            } else {
                GROUP_AUTHORIZATION_FAILED
            };
            results.push(
                DeletableGroupResult::default()
                    .with_group_id(group_id)
                    .with_error_code(code),
            );
        }
        Reply::frame(respond(
            &header,
            &DeleteGroupsResponse::default().with_results(results),
        ))
    })
}
