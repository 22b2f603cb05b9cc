//! Kafka's ACL binding filters (DescribeAcls, DeleteAcls): each field keeps any value, one
//! value, or (for a kind Kafka knows and pagurus keeps no ACL of, a delegation token, say)
//! nothing. Matching is Kafka's `AclBindingFilter.matches`.

use super::{AclBinding, Acls, PatternType, ResourcePattern, WILDCARD};

/// Which values of one field a filter keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wanted<T> {
    Any,
    Only(T),
    /// A value no binding of pagurus can have: the filter keeps no binding.
    Nothing,
}

impl<T: PartialEq> Wanted<T> {
    fn keeps(&self, value: &T) -> bool {
        match self {
            Wanted::Any => true,
            Wanted::Only(wanted) => wanted == value,
            Wanted::Nothing => false,
        }
    }
}

/// A filter's pattern type: any, one, or MATCH (every pattern that covers the filter's name:
/// the literal name, the literal `*`, and every prefix of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFilter {
    Any,
    Match,
    Only(PatternType),
}

/// A filter over bindings; a `None` string field keeps any value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclFilter {
    pub resource_type: Wanted<super::ResourceType>,
    pub pattern_type: PatternFilter,
    pub name: Option<String>,
    /// `User:NAME`, compared as text, as Kafka compares it.
    pub principal: Option<String>,
    /// An address or `*`, compared as text.
    pub host: Option<String>,
    pub operation: Wanted<super::Operation>,
    pub permission: Wanted<super::Permission>,
}

impl AclFilter {
    /// Keeps every binding.
    pub fn any() -> AclFilter {
        AclFilter {
            resource_type: Wanted::Any,
            pattern_type: PatternFilter::Any,
            name: None,
            principal: None,
            host: None,
            operation: Wanted::Any,
            permission: Wanted::Any,
        }
    }

    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.matches_pattern(&binding.pattern)
            && self
                .principal
                .as_ref()
                .is_none_or(|p| *p == binding.principal.to_string())
            && self
                .host
                .as_ref()
                .is_none_or(|h| *h == binding.host.to_string())
            && self.operation.keeps(&binding.operation)
            && self.permission.keeps(&binding.permission)
    }

    fn matches_pattern(&self, pattern: &ResourcePattern) -> bool {
        if !self.resource_type.keeps(&pattern.resource_type) {
            return false;
        }
        let name = match (&self.pattern_type, &self.name) {
            (PatternFilter::Only(wanted), _) if *wanted != pattern.pattern_type => return false,
            (_, None) => return true,
            (_, Some(name)) => name,
        };
        match self.pattern_type {
            PatternFilter::Any | PatternFilter::Only(_) => *name == pattern.name,
            PatternFilter::Match => match pattern.pattern_type {
                PatternType::Literal => *name == pattern.name || pattern.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(pattern.name.as_str()),
            },
        }
    }
}

impl Acls {
    /// The bindings `filter` keeps, in the set's order.
    pub fn matching(&self, filter: &AclFilter) -> Vec<AclBinding> {
        self.iter().filter(|b| filter.matches(b)).cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Host, Operation, Permission, Principal, ResourceType};
    use super::*;

    fn binding(pattern_type: PatternType, name: &str, operation: Operation) -> AclBinding {
        AclBinding {
            pattern: ResourcePattern::new(ResourceType::Topic, pattern_type, name).unwrap(),
            principal: Principal::user("alice"),
            host: Host::Any,
            operation,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn filters_match_as_kafka_matches() {
        let literal = binding(PatternType::Literal, "orders", Operation::Write);
        let all = binding(PatternType::Literal, "*", Operation::Read);
        let prefix = binding(PatternType::Prefixed, "ord", Operation::Read);
        let other = binding(PatternType::Literal, "payments", Operation::Read);
        let mut acls = Acls::default();
        for b in [&literal, &all, &prefix, &other] {
            acls.add(b.clone()).unwrap();
        }
        assert_eq!(acls.matching(&AclFilter::any()).len(), 4);
        let named = |pattern_type, name: &str| AclFilter {
            pattern_type,
            name: Some(name.to_string()),
            ..AclFilter::any()
        };
        // MATCH: every pattern that covers the name.
        let mut matched = acls.matching(&named(PatternFilter::Match, "orders"));
        matched.sort();
        let mut expected = vec![literal.clone(), all.clone(), prefix.clone()];
        expected.sort();
        assert_eq!(matched, expected);
        // ANY and a pattern type: the name itself, literally.
        assert_eq!(
            acls.matching(&named(PatternFilter::Any, "ord")),
            std::slice::from_ref(&prefix)
        );
        assert_eq!(
            acls.matching(&named(PatternFilter::Only(PatternType::Literal), "ord")),
            []
        );
        let reads = AclFilter {
            operation: Wanted::Only(Operation::Read),
            principal: Some("User:alice".to_string()),
            host: Some("*".to_string()),
            ..AclFilter::any()
        };
        assert_eq!(acls.matching(&reads).len(), 3);
        let nobody = AclFilter {
            principal: Some("User:bob".to_string()),
            ..AclFilter::any()
        };
        assert!(acls.matching(&nobody).is_empty());
        let tokens = AclFilter {
            resource_type: Wanted::Nothing,
            ..AclFilter::any()
        };
        assert!(acls.matching(&tokens).is_empty());
    }
}
