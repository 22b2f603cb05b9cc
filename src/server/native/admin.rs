//! The security admin apis (ListUsers, SetUser, DeleteUser, ListAcls, ChangeAcl): users and
//! ACLs changed on a running broker, as Kafka's AlterUserScramCredentials and CreateAcls do.
//! A change is written durably on the blocking pool, one at a time, then published to every
//! core (`Security::change_users`, `change_acls`); a failed write changes nothing and is
//! answered `StorageError`. Reading needs Describe on the cluster, changing Alter (the
//! actions table); a broker without `--authorizer acl` answers the ACL apis
//! `SecurityDisabled`.

use std::rc::Rc;

use tracing::{info, warn};

use crate::protocol::native::{self, ErrorCode, UserEntry, WireAcl, WireCredential};
use crate::security::acl::{
    AclBinding, Host, Operation, PatternType, Permission, Principal, ResourcePattern, ResourceType,
};
use crate::security::runtime::ChangeError;
use crate::security::scram::{
    ITERATIONS_MAX, ITERATIONS_MIN, Mechanism, SALT_BYTES_MAX, ScramCredential,
};
use crate::security::users::UsersError;
use crate::server::native::refusal::Refusal;
use crate::server::native::{Answer, Pending, Tag};
use crate::server::session::Session;

pub(super) fn list_users(session: &Session, tag: Tag) -> Pending {
    let users = session.security.users();
    let entries: Vec<UserEntry> = users
        .list()
        .map(|(name, mechanisms)| UserEntry {
            name: name.to_string(),
            credentials: mechanisms
                .iter()
                .filter_map(|m| users.credential(name, *m))
                .map(|c| (c.mechanism.name().to_string(), c.iterations))
                .collect(),
        })
        .collect();
    let mut frame = Vec::new();
    native::encode_list_users_response(&mut frame, tag.1, &entries);
    Pending::Ready(Answer::Frame { frame, error: None })
}

pub(super) fn set_user(
    session: &Rc<Session>,
    tag: Tag,
    name: &[u8],
    credentials: &[WireCredential<'_>],
) -> Pending {
    let checked = user_name(name).and_then(|name| {
        let credentials = credentials
            .iter()
            .map(credential)
            .collect::<Result<Vec<_>, _>>()?;
        Ok((name, credentials))
    });
    let (name, credentials) = match checked {
        Ok(checked) => checked,
        Err(refusal) => return Pending::Ready(Answer::failed(tag.1, refusal)),
    };
    let session = Rc::clone(session);
    Pending::Later(Box::pin(async move {
        let user = name.clone();
        let mechanisms: Vec<&str> = credentials.iter().map(|c| c.mechanism.name()).collect();
        let changed = session
            .security
            .change_users(move |users| {
                credentials
                    .into_iter()
                    .try_for_each(|credential| users.set(&user, credential))
            })
            .await;
        match changed
            .map_err(refusal)
            .and_then(|set| set.map_err(users_refusal))
        {
            Ok(()) => {
                info!(target: "pagurus::audit", principal = %principal(&session), peer = %session.peer, user = %name, ?mechanisms, "user credentials set");
                empty(tag)
            }
            Err(refusal) => Answer::failed(tag.1, refusal),
        }
    }))
}

pub(super) fn delete_user(session: &Rc<Session>, tag: Tag, name: &[u8]) -> Pending {
    let name = match user_name(name) {
        Ok(name) => name,
        Err(refusal) => return Pending::Ready(Answer::failed(tag.1, refusal)),
    };
    let session = Rc::clone(session);
    Pending::Later(Box::pin(async move {
        let user = name.clone();
        let deleted = session
            .security
            .change_users(move |users| match users.delete(&user) {
                Ok(()) => Ok(true),
                Err(UsersError::NoSuchUser { .. }) => Ok(false),
                Err(other) => Err(other),
            })
            .await;
        match deleted
            .map_err(refusal)
            .and_then(|d| d.map_err(users_refusal))
        {
            Ok(deleted) => {
                if deleted {
                    info!(target: "pagurus::audit", principal = %principal(&session), peer = %session.peer, user = %name, "user deleted");
                }
                flag(tag, deleted)
            }
            Err(refusal) => Answer::failed(tag.1, refusal),
        }
    }))
}

pub(super) fn list_acls(session: &Session, tag: Tag) -> Pending {
    let Some(authorizer) = session.security.authorizer() else {
        return Pending::Ready(Answer::failed(tag.1, refusal(ChangeError::NoAuthorizer)));
    };
    let acls: Vec<WireAcl<String>> = authorizer.acls().iter().map(wire).collect();
    let mut frame = Vec::new();
    native::encode_list_acls_response(&mut frame, tag.1, &acls);
    Pending::Ready(Answer::Frame { frame, error: None })
}

pub(super) fn change_acl(
    session: &Rc<Session>,
    tag: Tag,
    add: bool,
    acl: &WireAcl<&[u8]>,
) -> Pending {
    let binding = match binding(acl) {
        Ok(binding) => binding,
        Err(refusal) => return Pending::Ready(Answer::failed(tag.1, refusal)),
    };
    let session = Rc::clone(session);
    Pending::Later(Box::pin(async move {
        let changed_one = binding.clone();
        let changed = session
            .security
            .change_acls(move |acls| {
                if add {
                    acls.add(changed_one)
                } else {
                    Ok(acls.remove(&changed_one))
                }
            })
            .await;
        let changed = changed
            .map_err(refusal)
            .and_then(|c| c.map_err(|e| Refusal::new(ErrorCode::InvalidConfig, e.to_string())));
        match changed {
            Ok(changed) => {
                if changed {
                    let change = if add { "ACL added" } else { "ACL removed" };
                    info!(target: "pagurus::audit", principal = %principal(&session), peer = %session.peer, acl = %binding, "{change}");
                }
                flag(tag, changed)
            }
            Err(refusal) => Answer::failed(tag.1, refusal),
        }
    }))
}

fn principal(session: &Session) -> String {
    session
        .principal()
        .map_or_else(|| "(none)".to_string(), |p| p.to_string())
}

fn empty(tag: Tag) -> Answer {
    let mut frame = Vec::new();
    native::encode_empty_response(&mut frame, tag.1, ErrorCode::None);
    Answer::Frame { frame, error: None }
}

fn flag(tag: Tag, flag: bool) -> Answer {
    let mut frame = Vec::new();
    native::encode_flag_response(&mut frame, tag.1, flag);
    Answer::Frame { frame, error: None }
}

fn user_name(name: &[u8]) -> Result<String, Refusal> {
    let name = std::str::from_utf8(name)
        .map_err(|_| Refusal::new(ErrorCode::InvalidName, "a user name is UTF-8"))?;
    crate::security::check_user_name(name)
        .map_err(|e| Refusal::new(ErrorCode::InvalidName, e.to_string()))?;
    Ok(name.to_string())
}

/// A stored credential from the wire, every size checked against its mechanism.
fn credential(c: &WireCredential<'_>) -> Result<ScramCredential, Refusal> {
    let bad = |why: String| Refusal::new(ErrorCode::InvalidConfig, why);
    let mechanism = std::str::from_utf8(c.mechanism)
        .ok()
        .and_then(Mechanism::from_name)
        .ok_or_else(|| bad("the mechanism is SCRAM-SHA-256 or SCRAM-SHA-512".into()))?;
    if !(ITERATIONS_MIN..=ITERATIONS_MAX).contains(&c.iterations) {
        return Err(bad(format!(
            "iterations {} outside {ITERATIONS_MIN}..={ITERATIONS_MAX}",
            c.iterations
        )));
    }
    if c.salt.is_empty() || c.salt.len() > SALT_BYTES_MAX {
        return Err(bad(format!("a salt of {} bytes", c.salt.len())));
    }
    let key_len = mechanism.key_len();
    if c.stored_key.len() != key_len || c.server_key.len() != key_len {
        return Err(bad(format!(
            "{} keys are {key_len} bytes",
            mechanism.name()
        )));
    }
    Ok(ScramCredential {
        mechanism,
        salt: c.salt.to_vec(),
        iterations: c.iterations,
        stored_key: c.stored_key.to_vec(),
        server_key: c.server_key.to_vec(),
    })
}

fn binding(acl: &WireAcl<&[u8]>) -> Result<AclBinding, Refusal> {
    let bad = |what: &str| Refusal::new(ErrorCode::InvalidConfig, format!("bad ACL {what}"));
    let text = |bytes: &[u8], what: &str| {
        std::str::from_utf8(bytes)
            .map(str::to_string)
            .map_err(|_| bad(what))
    };
    let resource_type = ResourceType::from_name(&text(acl.resource_type, "resource type")?)
        .ok_or(bad("resource type"))?;
    let pattern_type = PatternType::from_name(&text(acl.pattern_type, "pattern type")?)
        .ok_or(bad("pattern type"))?;
    let invalid =
        |e: crate::security::acl::AclError| Refusal::new(ErrorCode::InvalidConfig, e.to_string());
    let pattern = ResourcePattern::new(resource_type, pattern_type, &text(acl.name, "name")?)
        .map_err(invalid)?;
    Ok(AclBinding {
        pattern,
        principal: Principal::parse(&text(acl.principal, "principal")?).map_err(invalid)?,
        host: Host::parse(&text(acl.host, "host")?).map_err(invalid)?,
        operation: Operation::from_name(&text(acl.operation, "operation")?)
            .ok_or(bad("operation"))?,
        permission: Permission::from_name(&text(acl.permission, "permission")?)
            .ok_or(bad("permission"))?,
    })
}

fn wire(b: &AclBinding) -> WireAcl<String> {
    WireAcl {
        resource_type: b.pattern.resource_type.name().to_string(),
        pattern_type: b.pattern.pattern_type.name().to_string(),
        name: b.pattern.name.clone(),
        principal: b.principal.to_string(),
        host: b.host.to_string(),
        operation: b.operation.name().to_string(),
        permission: b.permission.name().to_string(),
    }
}

fn refusal(e: ChangeError) -> Refusal {
    match e {
        ChangeError::NoAuthorizer => Refusal::new(
            ErrorCode::SecurityDisabled,
            "the broker runs without --authorizer acl: there are no ACLs",
        ),
        other => {
            warn!(error = %other, "security change not written");
            Refusal::new(ErrorCode::StorageError, other.to_string())
        }
    }
}

fn users_refusal(e: UsersError) -> Refusal {
    let code = match &e {
        UsersError::BadName(_) => ErrorCode::InvalidName,
        UsersError::Store(_) => ErrorCode::StorageError,
        _ => ErrorCode::InvalidConfig,
    };
    Refusal::new(code, e.to_string())
}
