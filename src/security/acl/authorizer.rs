//! Kafka's authorization rules over a set of bindings.

use std::collections::BTreeSet;
use std::net::IpAddr;

use super::actions::Need;
use super::{
    AclBinding, Acls, CLUSTER_NAME, Operation, PatternType, Permission, Principal, ResourcePattern,
    ResourceType, WILDCARD,
};

/// Answers whether a principal may do an operation on a resource, as Kafka's
/// StandardAuthorizer does:
///
/// 1. a super user may do everything;
/// 2. else a matching Deny for the operation (or for `All`) refuses, whatever allows it;
/// 3. else a matching Allow for the operation, for `All`, or for one that implies it
///    (Read, Write, Delete and Alter imply Describe; AlterConfigs implies DescribeConfigs)
///    allows;
/// 4. else it is refused: nothing is allowed that no binding allows.
///
/// A binding matches when its pattern covers the resource, its principal is the one asking
/// or `User:*`, and its host is the client's address or `*`.
#[derive(Debug, Clone, Default)]
pub struct Authorizer {
    acls: Acls,
    super_users: BTreeSet<Principal>,
}

impl Authorizer {
    pub fn new(acls: Acls, super_users: impl IntoIterator<Item = Principal>) -> Authorizer {
        Authorizer {
            acls,
            super_users: super_users.into_iter().collect(),
        }
    }

    /// The same super users with other bindings (an online ACL change).
    pub fn with_acls(&self, acls: Acls) -> Authorizer {
        Authorizer {
            acls,
            super_users: self.super_users.clone(),
        }
    }

    pub fn acls(&self) -> &Acls {
        &self.acls
    }

    pub fn is_super_user(&self, principal: &Principal) -> bool {
        self.super_users.contains(principal)
    }

    /// True when `principal`, connected from `host`, may do `operation` on the resource of
    /// type `resource_type` named `name` (the cluster's is [`super::CLUSTER_NAME`]).
    pub fn allowed(
        &self,
        principal: &Principal,
        host: IpAddr,
        resource_type: ResourceType,
        name: &str,
        operation: Operation,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let matching = || {
            self.applying(principal, host)
                .filter(move |b| b.pattern.matches(resource_type, name))
        };
        let denied = matching().any(|b| {
            b.permission == Permission::Deny
                && (b.operation == operation || b.operation == Operation::All)
        });
        !denied
            && matching()
                .any(|b| b.permission == Permission::Allow && implies(b.operation, operation))
    }
}

impl Authorizer {
    /// True when `need` (from [`super::actions::actions`]) is met for the resource `name`
    /// (not used for the cluster, which has one name).
    pub fn meets(&self, principal: &Principal, host: IpAddr, need: Need, name: &str) -> bool {
        let on_cluster = |operation| {
            self.allowed(
                principal,
                host,
                ResourceType::Cluster,
                CLUSTER_NAME,
                operation,
            )
        };
        match need {
            Need::On(ResourceType::Cluster, operation, _) => on_cluster(operation),
            Need::On(resource_type, operation, _) => {
                self.allowed(principal, host, resource_type, name, operation)
            }
            Need::ClusterOr(resource_type, operation, _) => {
                on_cluster(operation)
                    || self.allowed(principal, host, resource_type, name, operation)
            }
            Need::IdempotentProducer => {
                on_cluster(Operation::IdempotentWrite)
                    || self.allowed_on_some(principal, host, ResourceType::Topic, Operation::Write)
            }
        }
    }

    /// True when `principal` may do `operation` on at least one resource of the type, as
    /// Kafka's authorizeByResourceType: some Allow applies that no Deny covers whole (a
    /// Deny of `*`, of a prefix of the allowed name, or of the same literal name).
    pub fn allowed_on_some(
        &self,
        principal: &Principal,
        host: IpAddr,
        resource_type: ResourceType,
        operation: Operation,
    ) -> bool {
        if self.is_super_user(principal) {
            return true;
        }
        let of_type = || {
            self.applying(principal, host)
                .filter(move |b| b.pattern.resource_type == resource_type)
        };
        let denies = |allowed: &ResourcePattern| {
            of_type().any(|b| {
                b.permission == Permission::Deny
                    && (b.operation == operation || b.operation == Operation::All)
                    && covers(&b.pattern, allowed)
            })
        };
        of_type().any(|b| {
            b.permission == Permission::Allow
                && implies(b.operation, operation)
                && !denies(&b.pattern)
        })
    }

    /// The bindings whose principal and host match.
    fn applying<'a>(
        &'a self,
        principal: &'a Principal,
        host: IpAddr,
    ) -> impl Iterator<Item = &'a AclBinding> + 'a {
        self.acls.iter().filter(move |b| {
            (b.principal == *principal || b.principal.is_wildcard()) && b.host.matches(host)
        })
    }
}

/// True when every name `inner` covers, `outer` covers too.
fn covers(outer: &ResourcePattern, inner: &ResourcePattern) -> bool {
    match (outer.pattern_type, inner.pattern_type) {
        (PatternType::Literal, _) if outer.name == WILDCARD => true,
        (PatternType::Literal, PatternType::Literal) => outer.name == inner.name,
        (PatternType::Literal, PatternType::Prefixed) => false,
        (PatternType::Prefixed, _) => inner.name.starts_with(outer.name.as_str()),
    }
}

/// True when allowing `granted` allows `wanted` too.
pub fn implies(granted: Operation, wanted: Operation) -> bool {
    use Operation::*;
    granted == All
        || granted == wanted
        || (wanted == Describe && matches!(granted, Read | Write | Delete | Alter))
        || (wanted == DescribeConfigs && granted == AlterConfigs)
}
