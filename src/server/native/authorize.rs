//! The ACL check of a native request, once, before it is started: every topic and group it
//! names must meet what the actions table asks of its API. A refusal answers with the
//! resource type's authorization error; nothing of the request is done.

use crate::protocol::native::request::Request;
use crate::protocol::native::{ApiKey, ErrorCode};
use crate::security::acl::actions::{Denied, NativeApi, Need, RequestKind};
use crate::security::acl::{CLUSTER_NAME, Operation, ResourceType};
use crate::server::native::refusal::Refusal;
use crate::server::session::Session;

/// `Err` with the refusal when the session's principal may not make `request`.
pub fn check(session: &Session, api: ApiKey, request: &Request) -> Result<(), Refusal> {
    if !session.security.authorizes() {
        return Ok(());
    }
    let kind = RequestKind::Native(NativeApi::from(api));
    let (topics, groups) = named(request);
    let may = |resource_type, name: &[u8]| match std::str::from_utf8(name) {
        Ok(name) => session.may(kind, resource_type, name),
        Err(_) => false,
    };
    if let Some(group) = groups.iter().find(|g| !may(ResourceType::Group, g)) {
        return Err(refused(ErrorCode::GroupAuthorizationFailed, "group", group));
    }
    if let Some(topic) = topics.iter().find(|t| !may(ResourceType::Topic, t)) {
        return Err(refused(ErrorCode::TopicAuthorizationFailed, "topic", topic));
    }
    // The apis on the cluster itself (cluster status, users, ACLs).
    if !may(ResourceType::Cluster, CLUSTER_NAME.as_bytes()) {
        return Err(Refusal::new(
            ErrorCode::ClusterAuthorizationFailed,
            format!("not authorized on the cluster to {}", api.name()),
        ));
    }
    let lists_all = match request {
        // Every topic: as Kafka filters a listing, but the native answer has no way to
        // leave topics out, so it needs Describe on the cluster (or a super user).
        Request::Metadata { topics } => topics.is_empty(),
        _ => false,
    };
    let describe_cluster = Need::On(ResourceType::Cluster, Operation::Describe, Denied::Request);
    if lists_all && !session.allowed(describe_cluster, CLUSTER_NAME) {
        return Err(Refusal::new(
            ErrorCode::ClusterAuthorizationFailed,
            "listing every topic needs Describe on the cluster; name the topics",
        ));
    }
    if let Request::ListGroups = request
        && !session.may(kind, ResourceType::Group, "*")
    {
        return Err(Refusal::new(
            ErrorCode::ClusterAuthorizationFailed,
            "not authorized to list groups",
        ));
    }
    Ok(())
}

fn refused(code: ErrorCode, what: &str, name: &[u8]) -> Refusal {
    Refusal::new(
        code,
        format!(
            "not authorized on {what} {:?}",
            String::from_utf8_lossy(name)
        ),
    )
}

/// The topics and groups a request names.
fn named<'a>(request: &Request<'a>) -> (Vec<&'a [u8]>, Vec<&'a [u8]>) {
    match request {
        Request::Produce { topic, .. }
        | Request::Fetch { topic, .. }
        | Request::ListOffsets { topic, .. }
        | Request::Compact { topic, .. } => (vec![*topic], vec![]),
        Request::CreateTopic { name, .. } | Request::DeleteTopic { name } => (vec![*name], vec![]),
        Request::Metadata { topics } => (topics.clone(), vec![]),
        Request::CommitOffset { group, topic, .. }
        | Request::FetchOffset { group, topic, .. }
        | Request::CommitGroupOffset { group, topic, .. } => (vec![*topic], vec![*group]),
        Request::JoinGroup(join) => (join.topics.clone(), vec![join.group]),
        Request::DescribeGroup { group }
        | Request::Heartbeat { group, .. }
        | Request::LeaveGroup { group, .. }
        | Request::DeleteGroup { group }
        | Request::FindCoordinator { group } => (vec![], vec![*group]),
        Request::ListGroups
        | Request::ClusterStatus
        | Request::Authenticate { .. }
        | Request::ListUsers
        | Request::SetUser { .. }
        | Request::DeleteUser { .. }
        | Request::ListAcls
        | Request::ChangeAcl { .. }
        | Request::ChangeMember { .. } => (vec![], vec![]),
    }
}
