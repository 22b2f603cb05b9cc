//! Kafka's wire codes for ACLs (its `ResourceType`, `PatternType`, `AclOperation` and
//! `AclPermissionType` enums) and the bindings and filters they make. A code Kafka does not
//! know (UNKNOWN, or out of range) is INVALID_REQUEST; a kind Kafka knows but pagurus keeps
//! no ACL of (delegation tokens, users as resources, token and two-phase-commit operations)
//! cannot be created, and matches nothing in a filter.

use kafka_protocol::protocol::StrBytes;

use crate::security::acl::actions::{Denied, Need};
use crate::security::acl::filter::{AclFilter, PatternFilter, Wanted};
use crate::security::acl::{
    AclBinding, Host, Operation, PatternType, Permission, Principal, ResourcePattern, ResourceType,
};
use crate::server::session::Session;

/// ANY in every filter field's enum.
const ANY: i8 = 1;
/// PatternType MATCH (filters only).
const MATCH: i8 = 2;

/// What one code names.
enum Code<T> {
    /// A value pagurus keeps.
    Is(T),
    /// A value Kafka knows that no pagurus binding has.
    Unserved(&'static str),
}

fn resource_type(code: i8) -> Option<Code<ResourceType>> {
    Some(match code {
        2 => Code::Is(ResourceType::Topic),
        3 => Code::Is(ResourceType::Group),
        4 => Code::Is(ResourceType::Cluster),
        5 => Code::Is(ResourceType::TransactionalId),
        6 => Code::Unserved("DELEGATION_TOKEN"),
        7 => Code::Unserved("USER"),
        _ => return None,
    })
}

pub fn resource_type_code(t: ResourceType) -> i8 {
    match t {
        ResourceType::Topic => 2,
        ResourceType::Group => 3,
        ResourceType::Cluster => 4,
        ResourceType::TransactionalId => 5,
    }
}

/// The operations Kafka has on each type of resource (its `AclEntry.supportedOperations`).
fn supported_operations(t: ResourceType) -> &'static [Operation] {
    use Operation::*;
    match t {
        ResourceType::Topic => &[
            Read,
            Write,
            Create,
            Describe,
            Delete,
            Alter,
            DescribeConfigs,
            AlterConfigs,
        ],
        ResourceType::Group => &[Read, Describe, Delete],
        ResourceType::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
        ],
        ResourceType::TransactionalId => &[Describe, Write],
    }
}

/// KIP-430's authorized operations of a describe answer: bit `code` set for each operation
/// Kafka has on the resource that `session`'s principal may do (every one without an
/// authorizer, as Kafka answers). Asked quietly: none of these is a refusal.
pub fn authorized_operations(session: &Session, t: ResourceType, name: &str) -> i32 {
    supported_operations(t)
        .iter()
        .filter(|op| session.permits(Need::On(t, **op, Denied::Item), name))
        .fold(0, |bits, op| bits | 1 << operation_code(*op))
}

fn pattern_type(code: i8) -> Option<PatternType> {
    match code {
        3 => Some(PatternType::Literal),
        4 => Some(PatternType::Prefixed),
        _ => None,
    }
}

pub fn pattern_type_code(t: PatternType) -> i8 {
    match t {
        PatternType::Literal => 3,
        PatternType::Prefixed => 4,
    }
}

const OPERATIONS: [(i8, Operation); 11] = [
    (2, Operation::All),
    (3, Operation::Read),
    (4, Operation::Write),
    (5, Operation::Create),
    (6, Operation::Delete),
    (7, Operation::Alter),
    (8, Operation::Describe),
    (9, Operation::ClusterAction),
    (10, Operation::DescribeConfigs),
    (11, Operation::AlterConfigs),
    (12, Operation::IdempotentWrite),
];

fn operation(code: i8) -> Option<Code<Operation>> {
    if let Some((_, op)) = OPERATIONS.iter().find(|(c, _)| *c == code) {
        return Some(Code::Is(*op));
    }
    Some(match code {
        13 => Code::Unserved("CREATE_TOKENS"),
        14 => Code::Unserved("DESCRIBE_TOKENS"),
        15 => Code::Unserved("TWO_PHASE_COMMIT"),
        _ => return None,
    })
}

pub fn operation_code(op: Operation) -> i8 {
    OPERATIONS
        .iter()
        .find(|(_, o)| *o == op)
        .map_or(0, |(code, _)| *code)
}

fn permission(code: i8) -> Option<Permission> {
    match code {
        2 => Some(Permission::Deny),
        3 => Some(Permission::Allow),
        _ => None,
    }
}

pub fn permission_code(p: Permission) -> i8 {
    match p {
        Permission::Deny => 2,
        Permission::Allow => 3,
    }
}

/// The binding of a CreateAcls creation, or why it is refused (INVALID_REQUEST).
pub fn binding(
    resource_type_code: i8,
    name: &str,
    pattern_type_code: i8,
    principal: &str,
    host: &str,
    operation_code: i8,
    permission_code: i8,
) -> Result<AclBinding, String> {
    let resource_type = match resource_type(resource_type_code) {
        Some(Code::Is(t)) => t,
        Some(Code::Unserved(what)) => return Err(format!("pagurus keeps no ACLs on {what}")),
        None => return Err(format!("invalid resource type {resource_type_code}")),
    };
    let pattern_type = pattern_type(pattern_type_code)
        .ok_or_else(|| format!("invalid pattern type {pattern_type_code}"))?;
    let operation = match operation(operation_code) {
        Some(Code::Is(op)) => op,
        Some(Code::Unserved(what)) => return Err(format!("pagurus has no operation {what}")),
        None => return Err(format!("invalid operation {operation_code}")),
    };
    let permission = permission(permission_code)
        .ok_or_else(|| format!("invalid permission type {permission_code}"))?;
    Ok(AclBinding {
        pattern: ResourcePattern::new(resource_type, pattern_type, name)
            .map_err(|e| e.to_string())?,
        principal: Principal::parse(principal).map_err(|e| e.to_string())?,
        host: Host::parse(host).map_err(|e| e.to_string())?,
        operation,
        permission,
    })
}

/// The fields of a DescribeAcls or DeleteAcls filter, as they come.
pub struct FilterCodes<'a> {
    pub resource_type: i8,
    pub name: Option<&'a StrBytes>,
    pub pattern_type: i8,
    pub principal: Option<&'a StrBytes>,
    pub host: Option<&'a StrBytes>,
    pub operation: i8,
    pub permission: i8,
}

/// The filter, or why it is refused (INVALID_REQUEST: an UNKNOWN or out-of-range code).
pub fn filter(codes: FilterCodes<'_>) -> Result<AclFilter, String> {
    let resource_type = match codes.resource_type {
        ANY => Wanted::Any,
        code => match resource_type(code) {
            Some(Code::Is(t)) => Wanted::Only(t),
            Some(Code::Unserved(_)) => Wanted::Nothing,
            None => return Err(format!("invalid resource type filter {code}")),
        },
    };
    let pattern_type = match codes.pattern_type {
        ANY => PatternFilter::Any,
        MATCH => PatternFilter::Match,
        code => PatternFilter::Only(
            pattern_type(code).ok_or_else(|| format!("invalid pattern type filter {code}"))?,
        ),
    };
    let operation = match codes.operation {
        ANY => Wanted::Any,
        code => match operation(code) {
            Some(Code::Is(op)) => Wanted::Only(op),
            Some(Code::Unserved(_)) => Wanted::Nothing,
            None => return Err(format!("invalid operation filter {code}")),
        },
    };
    let permission = match codes.permission {
        ANY => Wanted::Any,
        code => Wanted::Only(
            permission(code).ok_or_else(|| format!("invalid permission type filter {code}"))?,
        ),
    };
    let text = |s: Option<&StrBytes>| s.map(|s| s.as_str().to_string());
    Ok(AclFilter {
        resource_type,
        pattern_type,
        name: text(codes.name),
        principal: text(codes.principal),
        host: text(codes.host),
        operation,
        permission,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_kafkas_both_ways() {
        for t in ResourceType::ALL {
            let code = resource_type_code(*t);
            assert!(matches!(resource_type(code), Some(Code::Is(back)) if back == *t));
        }
        for t in PatternType::ALL {
            assert_eq!(pattern_type(pattern_type_code(*t)), Some(*t));
        }
        for op in Operation::ALL {
            let code = operation_code(*op);
            assert!(matches!(operation(code), Some(Code::Is(back)) if back == *op));
        }
        for p in Permission::ALL {
            assert_eq!(permission(permission_code(*p)), Some(*p));
        }
        // Kafka's numbers, from its enums.
        assert_eq!(resource_type_code(ResourceType::Topic), 2);
        assert_eq!(operation_code(Operation::IdempotentWrite), 12);
        assert_eq!(permission_code(Permission::Allow), 3);
        assert_eq!(pattern_type_code(PatternType::Prefixed), 4);
    }

    #[test]
    fn unknown_codes_are_refused_and_unserved_ones_match_nothing() {
        let ok = |rt, op| binding(rt, "orders", 3, "User:alice", "*", op, 3);
        assert!(ok(2, 4).is_ok());
        for (rt, op) in [(0, 4), (1, 4), (99, 4), (6, 4), (2, 0), (2, 1), (2, 13)] {
            assert!(ok(rt, op).is_err(), "{rt} {op}");
        }
        assert!(
            binding(2, "orders", 2, "User:a", "*", 4, 3).is_err(),
            "MATCH"
        );
        assert!(binding(2, "orders", 3, "Group:a", "*", 4, 3).is_err());
        assert!(binding(2, "orders", 3, "User:a", "host", 4, 3).is_err());
        assert!(binding(4, "other", 3, "User:a", "*", 7, 3).is_err());
        let codes = |resource_type, pattern_type, operation, permission| FilterCodes {
            resource_type,
            name: None,
            pattern_type,
            principal: None,
            host: None,
            operation,
            permission,
        };
        assert!(filter(codes(1, 1, 1, 1)).is_ok());
        assert!(filter(codes(1, 2, 1, 1)).is_ok());
        let tokens = filter(codes(6, 1, 1, 1)).unwrap();
        assert_eq!(tokens.resource_type, Wanted::Nothing);
        for bad in [
            codes(0, 1, 1, 1),
            codes(1, 0, 1, 1),
            codes(1, 1, 0, 1),
            codes(1, 1, 1, 0),
        ] {
            assert!(filter(bad).is_err());
        }
    }
}
