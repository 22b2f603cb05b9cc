//! Kafka's ACL model: a binding says that a principal (`User:alice`, or `User:*` for
//! everyone) from a host (an address, or `*`) is allowed or denied an operation on the
//! resources a pattern names (a topic, group, transactional id, or the cluster; by literal
//! name, `*` for all, or by prefix).
//!
//! - [`Authorizer`]: answers "may this principal do this" with Kafka's rules.
//! - [`Acls`]: the set of bindings, stored in `<data-dir>/security/acls` ([`store`]).
//! - [`actions`]: which (resource, operation) each request of each protocol needs.
//! - [`filter`]: Kafka's binding filters (DescribeAcls, DeleteAcls).

pub mod actions;
mod authorizer;
pub mod filter;
pub mod store;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;
use std::net::IpAddr;

pub use authorizer::Authorizer;

/// Longest resource name or prefix in a binding.
pub const RESOURCE_NAME_BYTES_MAX: usize = 255;
/// Most bindings (each is checked at each request until they are indexed).
pub const ACLS_MAX: usize = 10_000;
/// The one cluster resource's name, as Kafka names it.
pub const CLUSTER_NAME: &str = "kafka-cluster";
/// The literal resource name (and host, and principal name) that matches every one.
pub const WILDCARD: &str = "*";

/// Declares an enum whose variants have names (Kafka's spelling), with `ALL`, `name()`,
/// `Display`, and a case-insensitive `from_name`.
macro_rules! named {
    ($(#[$m:meta])* $name:ident { $($variant:ident),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn name(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant)),+ }
            }

            /// The variant named `text` (any case, `_` and `-` ignored: `CLUSTER_ACTION`).
            pub fn from_name(text: &str) -> Option<$name> {
                let wanted: String = text.chars().filter(|c| *c != '_' && *c != '-').collect();
                $name::ALL.iter().copied().find(|v| v.name().eq_ignore_ascii_case(&wanted))
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

named!(
    /// What a binding's pattern names.
    ResourceType { Topic, Group, Cluster, TransactionalId }
);

named!(
    /// How a binding's name matches: the name itself (`*` for all), or every name it starts.
    PatternType { Literal, Prefixed }
);

named!(
    /// What may be done. `All` stands for every operation.
    Operation {
        All,
        Read,
        Write,
        Create,
        Delete,
        Alter,
        Describe,
        ClusterAction,
        DescribeConfigs,
        AlterConfigs,
        IdempotentWrite,
    }
);

named!(
    /// Whether a binding allows or denies.
    Permission { Allow, Deny }
);

/// Why a binding or principal is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("principal {0:?} is not User:NAME (or User:* for every user)")]
    BadPrincipal(String),
    #[error("host {0:?} is not an IP address or *")]
    BadHost(String),
    #[error("a resource name of {len} bytes is outside 1..={RESOURCE_NAME_BYTES_MAX}")]
    BadName { len: usize },
    #[error("the cluster resource is named {CLUSTER_NAME:?}, literally; not {0:?}")]
    BadClusterName(String),
    #[error("there are already {ACLS_MAX} ACLs, the limit")]
    TooMany,
}

/// Who a request comes from: `User:NAME`, or in a binding `User:*` for every user.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Principal(String);

impl Principal {
    const PREFIX: &'static str = "User:";

    /// `User:name` (for an authenticated user, or a certificate subject).
    pub fn user(name: &str) -> Principal {
        Principal(format!("{}{name}", Principal::PREFIX))
    }

    /// `User:*`: every user, in a binding.
    pub fn wildcard() -> Principal {
        Principal::user(WILDCARD)
    }

    /// `User:ANONYMOUS`: Kafka's principal for a client that did not authenticate (on a
    /// PLAINTEXT listener, or SSL without a client certificate).
    pub fn anonymous() -> Principal {
        Principal::user("ANONYMOUS")
    }

    pub fn parse(text: &str) -> Result<Principal, AclError> {
        match text.strip_prefix(Principal::PREFIX) {
            Some(name) if !name.is_empty() && name.len() <= RESOURCE_NAME_BYTES_MAX => {
                Ok(Principal(text.to_string()))
            }
            _ => Err(AclError::BadPrincipal(text.to_string())),
        }
    }

    /// The name after `User:`.
    pub fn name(&self) -> &str {
        &self.0[Principal::PREFIX.len()..]
    }

    pub fn is_wildcard(&self) -> bool {
        self.name() == WILDCARD
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The hosts a binding applies to: one address, or every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Host {
    Any,
    Addr(IpAddr),
}

impl Host {
    pub fn parse(text: &str) -> Result<Host, AclError> {
        if text == WILDCARD {
            return Ok(Host::Any);
        }
        text.parse()
            .map(Host::Addr)
            .map_err(|_| AclError::BadHost(text.to_string()))
    }

    fn matches(self, peer: IpAddr) -> bool {
        match self {
            Host::Any => true,
            // An IPv4 client on a dual-stack socket shows as ::ffff:a.b.c.d.
            Host::Addr(addr) => addr == peer || addr == peer.to_canonical(),
        }
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Any => f.write_str(WILDCARD),
            Host::Addr(addr) => addr.fmt(f),
        }
    }
}

/// Which resources a binding covers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub pattern_type: PatternType,
    pub name: String,
}

impl ResourcePattern {
    pub fn new(
        resource_type: ResourceType,
        pattern_type: PatternType,
        name: &str,
    ) -> Result<ResourcePattern, AclError> {
        if name.is_empty() || name.len() > RESOURCE_NAME_BYTES_MAX {
            return Err(AclError::BadName { len: name.len() });
        }
        let cluster_ok = name == CLUSTER_NAME && pattern_type == PatternType::Literal;
        if resource_type == ResourceType::Cluster && !cluster_ok {
            return Err(AclError::BadClusterName(name.to_string()));
        }
        Ok(ResourcePattern {
            resource_type,
            pattern_type,
            name: name.to_string(),
        })
    }

    /// True when the pattern covers the resource `name` of type `resource_type`.
    fn matches(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.name == name || self.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(self.name.as_str()),
            }
    }
}

/// One ACL: `principal` from `host` is `permission`ed `operation` on `pattern`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub principal: Principal,
    pub host: Host,
    pub operation: Operation,
    pub permission: Permission,
}

impl std::fmt::Display for AclBinding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {} {} on {} {} {:?}",
            self.principal,
            self.permission,
            self.operation,
            self.host,
            self.pattern.pattern_type,
            self.pattern.resource_type,
            self.pattern.name
        )
    }
}

/// The set of bindings (no duplicates; at most [`ACLS_MAX`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acls {
    bindings: BTreeSet<AclBinding>,
}

impl Acls {
    /// Adds `binding`; false if it was there already.
    pub fn add(&mut self, binding: AclBinding) -> Result<bool, AclError> {
        if self.bindings.len() >= ACLS_MAX && !self.bindings.contains(&binding) {
            return Err(AclError::TooMany);
        }
        Ok(self.bindings.insert(binding))
    }

    /// Removes `binding`; false if it was not there.
    pub fn remove(&mut self, binding: &AclBinding) -> bool {
        self.bindings.remove(binding)
    }

    /// Removes every binding `filter` keeps; returns them (Kafka's DeleteAcls).
    pub fn remove_where(&mut self, filter: impl Fn(&AclBinding) -> bool) -> Vec<AclBinding> {
        let removed: Vec<AclBinding> = self
            .bindings
            .iter()
            .filter(|b| filter(b))
            .cloned()
            .collect();
        for binding in &removed {
            self.bindings.remove(binding);
        }
        removed
    }

    pub fn iter(&self) -> impl Iterator<Item = &AclBinding> {
        self.bindings.iter()
    }

    pub fn len(&self) -> usize {
        self.bindings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty()
    }
}
