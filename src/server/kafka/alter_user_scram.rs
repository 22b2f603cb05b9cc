//! AlterUserScramCredentials: users made, changed and removed online. Needs Alter on the
//! cluster (CLUSTER_AUTHORIZATION_FAILED for every user named otherwise). An upsertion
//! carries what the client computed from the password (mechanism, iterations, salt,
//! SaltedPassword), so the password never reaches the broker; the broker keeps StoredKey
//! and ServerKey derived from it, never the SaltedPassword (it would log a client in).
//!
//! As Kafka's controller answers: a user altered twice in one request (deletions and
//! upsertions together) is DUPLICATE_RESOURCE (92) and left alone; an unknown mechanism
//! UNSUPPORTED_SASL_MECHANISM (33); iterations outside 4096..=16384, a bad salt or name
//! UNACCEPTABLE_CREDENTIAL (93); deleting a credential there is not RESOURCE_NOT_FOUND (91).
//! Every other alteration is written to the users file in one durable write
//! (`Security::change_users`) and applies to logins from then on.

use std::collections::BTreeSet;
use std::rc::Rc;

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;
use tracing::{info, warn};

use super::errors::{self, CLUSTER_AUTHORIZATION_FAILED};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::actions::KafkaApi;
use crate::security::acl::{CLUSTER_NAME, ResourceType};
use crate::security::check_user_name;
use crate::security::scram::{Mechanism, ScramCredential};
use crate::security::users::Users;

pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
pub const RESOURCE_NOT_FOUND: i16 = 91;
pub const DUPLICATE_RESOURCE: i16 = 92;
pub const UNACCEPTABLE_CREDENTIAL: i16 = 93;

/// Kafka's `ScramMechanism` type codes.
pub fn mechanism_code(m: Mechanism) -> i8 {
    match m {
        Mechanism::ScramSha256 => 1,
        Mechanism::ScramSha512 => 2,
    }
}

fn mechanism(code: i8) -> Result<Mechanism, Failure> {
    Mechanism::ALL
        .into_iter()
        .find(|m| mechanism_code(*m) == code)
        .ok_or((
            UNSUPPORTED_SASL_MECHANISM,
            "Unknown SCRAM mechanism".to_string(),
        ))
}

/// An error code and its message.
type Failure = (i16, String);
/// A user and why their alteration was refused.
type Refused = Vec<(String, Failure)>;

/// One user's alteration, checked.
enum Change {
    Delete(Mechanism),
    Set(ScramCredential),
}

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: AlterUserScramCredentialsRequest,
) -> Pending {
    let allowed = conn.may(
        errors::acl(KafkaApi::AlterUserScramCredentials),
        ResourceType::Cluster,
        CLUSTER_NAME,
    );
    if !allowed {
        let users: BTreeSet<&str> = request
            .deletions
            .iter()
            .map(|d| d.name.as_str())
            .chain(request.upsertions.iter().map(|u| u.name.as_str()))
            .collect();
        let failure = (CLUSTER_AUTHORIZATION_FAILED, "needs Alter on the cluster");
        let results = users
            .into_iter()
            .map(|user| result(user, Some((failure.0, failure.1.to_string()))))
            .collect();
        let response = AlterUserScramCredentialsResponse::default().with_results(results);
        return Pending::Ready(Reply::frame(respond(&header, &response)));
    }
    let (changes, mut failed) = plan(&request);
    let conn = Rc::clone(conn);
    Pending::later(async move {
        let count = changes.len();
        let applied = conn
            .security
            .change_users(move |users| apply(users, changes))
            .await;
        match applied {
            Ok(more_failed) => {
                info!(target: "pagurus::audit", principal = ?conn.principal().map(|p| p.to_string()), peer = %conn.peer, count = count - more_failed.len(), "SCRAM credentials altered online");
                failed.extend(more_failed);
            }
            Err(error) => {
                warn!(%error, "AlterUserScramCredentials: not written");
                let names = request.deletions.iter().map(|d| &d.name);
                let names = names.chain(request.upsertions.iter().map(|u| &u.name));
                for name in names {
                    let name = name.as_str();
                    if !failed.iter().any(|(user, _)| user == name) {
                        let why = (errors::UNKNOWN_SERVER_ERROR, error.to_string());
                        failed.push((name.to_string(), why));
                    }
                }
            }
        }
        Reply::frame(respond(&header, &answer(&request, &failed)))
    })
}

/// The checked changes, one per user, and the users refused before any is applied.
fn plan(request: &AlterUserScramCredentialsRequest) -> (Vec<(String, Change)>, Refused) {
    let mut seen = BTreeSet::new();
    let mut twice = BTreeSet::new();
    let names = request.deletions.iter().map(|d| d.name.as_str());
    for name in names.chain(request.upsertions.iter().map(|u| u.name.as_str())) {
        if !seen.insert(name) {
            twice.insert(name);
        }
    }
    let mut changes = Vec::new();
    let mut failed = Vec::new();
    for name in &twice {
        let why = "A user credential cannot be altered twice in the same request";
        failed.push((name.to_string(), (DUPLICATE_RESOURCE, why.to_string())));
    }
    let deletions = request
        .deletions
        .iter()
        .map(|d| (d.name.as_str(), mechanism(d.mechanism).map(Change::Delete)));
    let upsertions = request.upsertions.iter().map(|u| {
        let change = mechanism(u.mechanism).and_then(|m| {
            credential(m, u.iterations, &u.salt, &u.salted_password).map(Change::Set)
        });
        (u.name.as_str(), change)
    });
    for (name, change) in deletions.chain(upsertions) {
        if twice.contains(name) {
            continue;
        }
        match check_user_name(name)
            .map_err(|e| (UNACCEPTABLE_CREDENTIAL, e.to_string()))
            .and(change)
        {
            Ok(change) => changes.push((name.to_string(), change)),
            Err(failure) => failed.push((name.to_string(), failure)),
        }
    }
    (changes, failed)
}

fn credential(
    mechanism: Mechanism,
    iterations: i32,
    salt: &[u8],
    salted_password: &[u8],
) -> Result<ScramCredential, Failure> {
    let unacceptable = |why: String| (UNACCEPTABLE_CREDENTIAL, why);
    let iterations =
        u32::try_from(iterations).map_err(|_| unacceptable(format!("{iterations} iterations")))?;
    ScramCredential::from_salted_password(mechanism, salted_password, salt, iterations)
        .map_err(|e| unacceptable(e.to_string()))
}

/// Applies the changes to `users`; returns the users whose change failed there.
fn apply(users: &mut Users, changes: Vec<(String, Change)>) -> Refused {
    let mut failed = Vec::new();
    for (name, change) in changes {
        let outcome = match change {
            Change::Delete(m) if users.remove_credential(&name, m) => Ok(()),
            Change::Delete(_) => Err((
                RESOURCE_NOT_FOUND,
                "Attempt to delete a user credential that does not exist".to_string(),
            )),
            Change::Set(credential) => users
                .set(&name, credential)
                .map_err(|e| (UNACCEPTABLE_CREDENTIAL, e.to_string())),
        };
        if let Err(failure) = outcome {
            failed.push((name, failure));
        }
    }
    failed
}

/// Kafka's order: the deletions that went through, the upsertions that did, then each
/// refused user once.
fn answer(
    request: &AlterUserScramCredentialsRequest,
    failed: &[(String, Failure)],
) -> AlterUserScramCredentialsResponse {
    let refused = |name: &str| failed.iter().any(|(user, _)| user == name);
    let names = request.deletions.iter().map(|d| d.name.as_str());
    let names = names.chain(request.upsertions.iter().map(|u| u.name.as_str()));
    let mut results: Vec<_> = names
        .filter(|name| !refused(name))
        .map(|name| result(name, None))
        .collect();
    results.extend(
        failed
            .iter()
            .map(|(user, failure)| result(user, Some(failure.clone()))),
    );
    AlterUserScramCredentialsResponse::default().with_results(results)
}

fn result(user: &str, failure: Option<Failure>) -> AlterUserScramCredentialsResult {
    let (code, message) = failure.map_or((errors::NONE, None), |(code, why)| {
        (code, Some(StrBytes::from_string(why)))
    });
    AlterUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_string()))
        .with_error_code(code)
        .with_error_message(message)
}
