//! DescribeAcls, CreateAcls and DeleteAcls: the ACLs of `--authorizer acl`, read and changed
//! online. Describe needs Describe on the cluster, the changes Alter on the cluster
//! (CLUSTER_AUTHORIZATION_FAILED otherwise). A change is written to the ACL file durably
//! before it applies (`Security::change_acls`), then every session sees it at its next
//! request. A broker without an authorizer answers SECURITY_DISABLED (54), as Kafka does:
//! its ACLs are made with `pagurus acls` on the stopped broker.

use std::rc::Rc;

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;
use tracing::{info, warn};

use super::acl_codes::{
    self, FilterCodes, operation_code, pattern_type_code, permission_code, resource_type_code,
};
use super::errors::{self, CLUSTER_AUTHORIZATION_FAILED, INVALID_REQUEST};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::actions::KafkaApi;
use crate::security::acl::filter::AclFilter;
use crate::security::acl::{AclBinding, AclError, CLUSTER_NAME, ResourcePattern, ResourceType};

pub const SECURITY_DISABLED: i16 = 54;
const POLICY_VIOLATION: i16 = errors::POLICY_VIOLATION;
/// Most filters of one DeleteAcls applied (each looks at every ACL, on the blocking pool);
/// the rest are INVALID_REQUEST. Kafka's tools send one per binding named.
const DELETE_FILTERS_MAX: usize = 1000;
const NO_AUTHORIZER: &str =
    "no authorizer: the broker runs without --authorizer acl (pagurus acls makes ACLs offline)";

/// Why a request is refused whole, before any item is looked at.
fn refused(conn: &Conn, api: KafkaApi, needs: &'static str) -> Option<(i16, &'static str)> {
    if !conn.security.authorizes() {
        return Some((SECURITY_DISABLED, NO_AUTHORIZER));
    }
    if !conn.may(errors::acl(api), ResourceType::Cluster, CLUSTER_NAME) {
        return Some((CLUSTER_AUTHORIZATION_FAILED, needs));
    }
    None
}

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(super) fn describe(conn: &Rc<Conn>, header: RequestHeader, r: DescribeAclsRequest) -> Pending {
    let mut response = DescribeAclsResponse::default();
    let codes = FilterCodes {
        resource_type: r.resource_type_filter,
        name: r.resource_name_filter.as_ref(),
        pattern_type: r.pattern_type_filter,
        principal: r.principal_filter.as_ref(),
        host: r.host_filter.as_ref(),
        operation: r.operation,
        permission: r.permission_type,
    };
    let outcome = match refused(
        conn,
        KafkaApi::DescribeAcls,
        "needs Describe on the cluster",
    ) {
        Some((code, why)) => Err((code, why.to_string())),
        None => acl_codes::filter(codes).map_err(|why| (INVALID_REQUEST, why)),
    };
    match outcome {
        Err((code, why)) => {
            response = response
                .with_error_code(code)
                .with_error_message(Some(text(&why)));
        }
        Ok(filter) => {
            let authorizer = conn.security.authorizer();
            let matching = authorizer.map_or_else(Vec::new, |a| a.acls().matching(&filter));
            response = response.with_resources(by_resource(matching));
        }
    }
    Pending::Ready(Reply::frame(respond(&header, &response)))
}

/// Bindings grouped by their resource pattern (they come sorted by it).
fn by_resource(bindings: Vec<AclBinding>) -> Vec<DescribeAclsResource> {
    let mut out: Vec<(ResourcePattern, Vec<AclDescription>)> = Vec::new();
    for b in bindings {
        let acl = AclDescription::default()
            .with_principal(text(&b.principal.to_string()))
            .with_host(text(&b.host.to_string()))
            .with_operation(operation_code(b.operation))
            .with_permission_type(permission_code(b.permission));
        match out.last_mut() {
            Some((pattern, acls)) if *pattern == b.pattern => acls.push(acl),
            _ => out.push((b.pattern, vec![acl])),
        }
    }
    out.into_iter()
        .map(|(pattern, acls)| {
            DescribeAclsResource::default()
                .with_resource_type(resource_type_code(pattern.resource_type))
                .with_resource_name(text(&pattern.name))
                .with_pattern_type(pattern_type_code(pattern.pattern_type))
                .with_acls(acls)
        })
        .collect()
}

fn creation_result(code: i16, why: Option<String>) -> AclCreationResult {
    AclCreationResult::default()
        .with_error_code(code)
        .with_error_message(why.map(|w| text(&w)))
}

pub(super) fn create(conn: &Rc<Conn>, header: RequestHeader, r: CreateAclsRequest) -> Pending {
    if let Some((code, why)) = refused(conn, KafkaApi::CreateAcls, "needs Alter on the cluster") {
        let results = r
            .creations
            .iter()
            .map(|_| creation_result(code, Some(why.to_string())))
            .collect();
        let response = CreateAclsResponse::default().with_results(results);
        return Pending::Ready(Reply::frame(respond(&header, &response)));
    }
    let parsed: Vec<Result<AclBinding, String>> = r
        .creations
        .iter()
        .map(|c| {
            acl_codes::binding(
                c.resource_type,
                c.resource_name.as_str(),
                c.resource_pattern_type,
                c.principal.as_str(),
                c.host.as_str(),
                c.operation,
                c.permission_type,
            )
        })
        .collect();
    let valid: Vec<AclBinding> = parsed.iter().filter_map(|p| p.clone().ok()).collect();
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let count = valid.len();
        let added = conn
            .security
            .change_acls(move |acls| {
                valid
                    .into_iter()
                    .map(|b| acls.add(b).map(|_| ()))
                    .collect::<Vec<Result<(), AclError>>>()
            })
            .await;
        if let Err(error) = &added {
            warn!(%error, "CreateAcls: not written");
        } else {
            info!(target: "pagurus::audit", principal = ?conn.principal().map(|p| p.to_string()), peer = %conn.peer, count, "ACLs created online");
        }
        let mut added = added.map(Vec::into_iter);
        let results = parsed
            .into_iter()
            .map(|p| match (p, &mut added) {
                (Err(why), _) => creation_result(INVALID_REQUEST, Some(why)),
                (Ok(_), Err(error)) => {
                    creation_result(errors::UNKNOWN_SERVER_ERROR, Some(error.to_string()))
                }
                (Ok(_), Ok(each)) => match each.next() {
                    Some(Ok(())) => creation_result(errors::NONE, None),
                    Some(Err(e)) => creation_result(POLICY_VIOLATION, Some(e.to_string())),
                    None => creation_result(errors::UNKNOWN_SERVER_ERROR, None),
                },
            })
            .collect();
        let response = CreateAclsResponse::default().with_results(results);
        Reply::frame(respond(&header, &response))
    })
}

fn filter_result(code: i16, why: Option<String>) -> DeleteAclsFilterResult {
    DeleteAclsFilterResult::default()
        .with_error_code(code)
        .with_error_message(why.map(|w| text(&w)))
}

fn matching_acl(b: &AclBinding) -> DeleteAclsMatchingAcl {
    DeleteAclsMatchingAcl::default()
        .with_resource_type(resource_type_code(b.pattern.resource_type))
        .with_resource_name(text(&b.pattern.name))
        .with_pattern_type(pattern_type_code(b.pattern.pattern_type))
        .with_principal(text(&b.principal.to_string()))
        .with_host(text(&b.host.to_string()))
        .with_operation(operation_code(b.operation))
        .with_permission_type(permission_code(b.permission))
}

pub(super) fn delete(conn: &Rc<Conn>, header: RequestHeader, r: DeleteAclsRequest) -> Pending {
    if let Some((code, why)) = refused(conn, KafkaApi::DeleteAcls, "needs Alter on the cluster") {
        let results = r
            .filters
            .iter()
            .map(|_| filter_result(code, Some(why.to_string())))
            .collect();
        let response = DeleteAclsResponse::default().with_filter_results(results);
        return Pending::Ready(Reply::frame(respond(&header, &response)));
    }
    let parsed: Vec<Result<AclFilter, String>> = r
        .filters
        .iter()
        .enumerate()
        .map(|(n, f)| {
            if n >= DELETE_FILTERS_MAX {
                return Err(format!("at most {DELETE_FILTERS_MAX} filters a request"));
            }
            acl_codes::filter(FilterCodes {
                resource_type: f.resource_type_filter,
                name: f.resource_name_filter.as_ref(),
                pattern_type: f.pattern_type_filter,
                principal: f.principal_filter.as_ref(),
                host: f.host_filter.as_ref(),
                operation: f.operation,
                permission: f.permission_type,
            })
        })
        .collect();
    let valid: Vec<AclFilter> = parsed.iter().filter_map(|p| p.clone().ok()).collect();
    let conn = Rc::clone(conn);
    Pending::later(async move {
        // Filters apply in order: a binding two filters match is reported by the first.
        let removed = conn
            .security
            .change_acls(move |acls| {
                valid
                    .iter()
                    .map(|f| acls.remove_where(|b| f.matches(b)))
                    .collect::<Vec<_>>()
            })
            .await;
        match &removed {
            Err(error) => warn!(%error, "DeleteAcls: not written"),
            Ok(each) => {
                let count: usize = each.iter().map(Vec::len).sum();
                info!(target: "pagurus::audit", principal = ?conn.principal().map(|p| p.to_string()), peer = %conn.peer, count, "ACLs deleted online");
            }
        }
        let mut removed = removed.map(Vec::into_iter);
        let results = parsed
            .into_iter()
            .map(|p| match (p, &mut removed) {
                (Err(why), _) => filter_result(INVALID_REQUEST, Some(why)),
                (Ok(_), Err(error)) => {
                    filter_result(errors::UNKNOWN_SERVER_ERROR, Some(error.to_string()))
                }
                (Ok(_), Ok(each)) => filter_result(errors::NONE, None).with_matching_acls(
                    each.next()
                        .unwrap_or_default()
                        .iter()
                        .map(matching_acl)
                        .collect(),
                ),
            })
            .collect();
        let response = DeleteAclsResponse::default().with_filter_results(results);
        Reply::frame(respond(&header, &response))
    })
}
