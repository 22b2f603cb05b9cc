//! DescribeUserScramCredentials: each user's SCRAM mechanisms and iteration counts, never a
//! salt or a key. Needs Describe on the cluster (CLUSTER_AUTHORIZATION_FAILED for the whole
//! request otherwise). No names (or none listed) describes every user; an unknown user is
//! RESOURCE_NOT_FOUND (91) and a name asked twice DUPLICATE_RESOURCE (92), as Kafka answers.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::alter_user_scram::{DUPLICATE_RESOURCE, RESOURCE_NOT_FOUND, mechanism_code};
use super::errors::{self, CLUSTER_AUTHORIZATION_FAILED};
use super::{Conn, Pending, Reply, respond};
use crate::protocol::kafka::RequestHeader;
use crate::security::acl::actions::KafkaApi;
use crate::security::acl::{CLUSTER_NAME, ResourceType};
use crate::security::scram::Mechanism;
use crate::security::users::Users;

pub(super) fn handle(
    conn: &Rc<Conn>,
    header: RequestHeader,
    request: DescribeUserScramCredentialsRequest,
) -> Pending {
    let allowed = conn.may(
        errors::acl(KafkaApi::DescribeUserScramCredentials),
        ResourceType::Cluster,
        CLUSTER_NAME,
    );
    let response = if allowed {
        DescribeUserScramCredentialsResponse::default()
            .with_results(describe(&conn.security.users(), request))
    } else {
        // As Kafka's error response: the error at the top and for each user asked about.
        let why = || Some(StrBytes::from_static_str("needs Describe on the cluster"));
        let results = request.users.unwrap_or_default().into_iter().map(|user| {
            DescribeUserScramCredentialsResult::default()
                .with_user(user.name)
                .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
                .with_error_message(why())
        });
        DescribeUserScramCredentialsResponse::default()
            .with_error_code(CLUSTER_AUTHORIZATION_FAILED)
            .with_error_message(why())
            .with_results(results.collect())
    };
    Pending::Ready(Reply::frame(respond(&header, &response)))
}

fn describe(
    users: &Users,
    request: DescribeUserScramCredentialsRequest,
) -> Vec<DescribeUserScramCredentialsResult> {
    // Each name once, and whether it was asked twice.
    let mut asked = BTreeMap::<String, bool>::new();
    match request.users.filter(|names| !names.is_empty()) {
        None => asked.extend(users.list().map(|(name, _)| (name.to_string(), false))),
        Some(names) => {
            for name in names {
                asked
                    .entry(name.name.as_str().to_string())
                    .and_modify(|twice| *twice = true)
                    .or_insert(false);
            }
        }
    }
    asked
        .into_iter()
        .map(|(user, twice)| result(users, user, twice))
        .collect()
}

fn result(users: &Users, user: String, twice: bool) -> DescribeUserScramCredentialsResult {
    let infos: Vec<CredentialInfo> = Mechanism::ALL
        .into_iter()
        .filter_map(|m| {
            users.credential(&user, m).map(|c| {
                CredentialInfo::default()
                    .with_mechanism(mechanism_code(m))
                    .with_iterations(i32::try_from(c.iterations).unwrap_or(i32::MAX))
            })
        })
        .collect();
    let (code, message, infos) = if twice {
        let why = "Cannot describe SCRAM credentials for the same user twice in a single request";
        (DUPLICATE_RESOURCE, Some(why), Vec::new())
    } else if infos.is_empty() {
        let why = "Attempt to describe a user credential that does not exist";
        (RESOURCE_NOT_FOUND, Some(why), Vec::new())
    } else {
        (errors::NONE, None, infos)
    };
    let message = message.map(|m| StrBytes::from_string(format!("{m}: {user}")));
    DescribeUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user))
        .with_error_code(code)
        .with_error_message(message)
        .with_credential_infos(infos)
}
