//! Who is on the other end of a session, and what they may do.
//!
//! A session's [`Auth`] is a state machine: a PLAINTEXT listener's client is
//! `User:ANONYMOUS` from the start; an SSL listener's is its certificate's subject, known at
//! the end of the TLS handshake; a SASL listener's client is no one until its SASL exchange
//! succeeds, and is served nothing but that exchange until then ([`Session::authenticated`]).
//! Authorization is asked here, once per request and resource, through
//! [`Session::allowed`]: a refusal is counted, and logged as an audit line with the
//! principal and the client's address.

use std::time::Instant;

use tracing::warn;

use crate::metrics::counters::Metrics;
use crate::security::acl::actions::{Need, RequestKind, actions};
use crate::security::acl::{Principal, ResourceType};
use crate::security::scram::Mechanism;
use crate::security::scram::server::ServerExchange;

use super::Session;

/// A SASL mechanism a client may choose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    Scram(Mechanism),
}

impl SaslMechanism {
    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
        }
    }

    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        match name {
            "PLAIN" => Some(SaslMechanism::Plain),
            other => Mechanism::from_name(other).map(SaslMechanism::Scram),
        }
    }
}

/// Where a SASL login stands.
pub enum Sasl {
    /// Nothing chosen yet.
    Start,
    /// SaslHandshake chose the mechanism; the first SaslAuthenticate is awaited.
    Chosen(SaslMechanism),
    /// SCRAM's server-first message went out; the client-final message is awaited.
    Scram(Box<ServerExchange>),
    /// A PLAIN password is being checked (on the blocking pool).
    Verifying,
    /// Logged in as `principal`, until `expires` (KIP-368) when there is a session lifetime.
    Done {
        principal: Principal,
        expires: Option<Instant>,
    },
    /// The login failed: the connection closes after the answer.
    Failed,
}

/// A session's authentication.
pub enum Auth {
    /// A PLAINTEXT listener: `User:ANONYMOUS`, nothing asked.
    Anonymous,
    /// An SSL listener: the subject of the verified client certificate.
    Certificate(Principal),
    /// A SASL listener: the login, and the principal of an earlier login being renewed
    /// (re-authentication keeps serving it meanwhile, and must end as the same one).
    Sasl {
        state: Sasl,
        renewing: Option<Principal>,
    },
}

impl Auth {
    pub fn sasl() -> Auth {
        Auth::Sasl {
            state: Sasl::Start,
            renewing: None,
        }
    }
}

impl Session {
    /// The principal requests are served as; `None` before a SASL login succeeds, after it
    /// failed, or once its session lifetime is over.
    pub fn principal(&self) -> Option<Principal> {
        self.with_principal(|principal| principal.cloned())
    }

    /// `f` of the principal requests are served as (see [`Session::principal`]), borrowed.
    pub fn with_principal<R>(&self, f: impl FnOnce(Option<&Principal>) -> R) -> R {
        let anonymous;
        let auth = self.auth.borrow();
        let principal = match &*auth {
            Auth::Anonymous => {
                anonymous = Principal::anonymous();
                Some(&anonymous)
            }
            Auth::Certificate(principal) => Some(principal),
            Auth::Sasl {
                state: Sasl::Done { principal, expires },
                ..
            } => match expires {
                Some(at) if Instant::now() >= *at => None,
                _ => Some(principal),
            },
            Auth::Sasl {
                renewing: Some(principal),
                state,
            } if !matches!(state, Sasl::Failed) => Some(principal),
            Auth::Sasl { .. } => None,
        };
        f(principal)
    }

    /// True when requests other than the login itself may be served.
    pub fn authenticated(&self) -> bool {
        match &*self.auth.borrow() {
            Auth::Anonymous | Auth::Certificate(_) => true,
            _ => self.with_principal(|p| p.is_some()),
        }
    }

    /// Counts and logs a request that came before its login (or after it expired): the
    /// connection is closed without serving it.
    pub fn refuse_unauthenticated(&self, what: &str) {
        Metrics::inc(&self.shard.metrics.auth_unauthenticated_refused);
        warn!(peer = %self.peer, listener = %self.listener_name, protocol = self.protocol.label(), request = what, "request before authentication; connection closed");
    }

    /// True when this session's principal may make the request `kind` on the resource of
    /// type `resource_type` named `name`: every need the actions table gives `kind` for
    /// that type is met. Always true without an authorizer.
    pub fn may(&self, kind: RequestKind, resource_type: ResourceType, name: &str) -> bool {
        if !self.security.authorizes() {
            return true;
        }
        actions(kind)
            .iter()
            .filter(|need| need.resource_type() == resource_type)
            .all(|need| self.allowed(*need, name))
    }

    /// [`Session::may`] for a listing that leaves out what the principal may not see
    /// (Metadata of every topic, ListGroups, OffsetFetch of every topic): what is left out
    /// is not a refusal, so nothing is counted or logged (as Kafka's authorizer does for
    /// filtered listings); clients poll these, and one line per hidden resource per poll
    /// would bury the refusals that matter.
    pub fn may_list(&self, kind: RequestKind, resource_type: ResourceType, name: &str) -> bool {
        if !self.security.authorizes() {
            return true;
        }
        actions(kind)
            .iter()
            .filter(|need| need.resource_type() == resource_type)
            .all(|need| self.permits(*need, name))
    }

    /// True when this session's principal meets `need` on the resource `name`, asked
    /// quietly: nothing counted or logged (what a principal may do, listed for it in a
    /// describe answer, KIP-430). Always true without an authorizer.
    pub fn permits(&self, need: Need, name: &str) -> bool {
        self.with_principal(|principal| {
            principal.is_some_and(|p| self.security.meets(p, self.peer, need, name))
        })
    }

    /// True when this session's principal meets `need` on the resource `name` (the
    /// cluster's name for cluster needs). A refusal is counted by resource type and logged
    /// as an audit line.
    pub fn allowed(&self, need: Need, name: &str) -> bool {
        if !self.security.authorizes() {
            return true;
        }
        let met = self.with_principal(|principal| {
            principal.map(|p| self.security.meets(p, self.peer, need, name))
        });
        let principal = match met {
            Some(true) => return true,
            Some(false) => self.principal().map_or_else(String::new, |p| p.to_string()),
            None => "(none)".to_string(),
        };
        let (resource, operation) = match need {
            Need::On(resource, operation, _) | Need::ClusterOr(resource, operation, _) => {
                (resource, operation.name())
            }
            Need::IdempotentProducer => (ResourceType::Cluster, "IdempotentWrite"),
        };
        let metrics = &self.shard.metrics;
        Metrics::inc(match resource {
            ResourceType::Topic => &metrics.authz_denied_topic,
            ResourceType::Group => &metrics.authz_denied_group,
            ResourceType::Cluster | ResourceType::TransactionalId => &metrics.authz_denied_cluster,
        });
        warn!(target: "pagurus::audit", %principal, peer = %self.peer, listener = %self.listener_name, resource = resource.name(), name, operation, "denied");
        false
    }
}
