//! `pagurus users` and `pagurus acls` on a running broker: the security admin apis through
//! `--broker`, logged in as the connection flags say (a super user, or a principal with
//! Alter on the cluster). The broker writes each change durably before it answers.

use std::time::Duration;

use crate::cli::{BrokerArgs, Output, describe, print_out};
use crate::security::acl::AclBinding;
use crate::security::scram::Mechanism;

fn connect(target: &BrokerArgs) -> Result<crate::client::blocking::Client, String> {
    target
        .connect(Duration::ZERO)
        .map_err(|e| format!("{e} (to change a stopped broker's files instead, give --data-dir)"))
}

pub(super) fn create_user(
    target: &BrokerArgs,
    name: &str,
    password: &[u8],
    mechanisms: &[Mechanism],
) -> Result<(), String> {
    let mut client = connect(target)?;
    client
        .set_user(name, password, mechanisms)
        .map_err(|e| format!("user {name}: {}", describe(&e)))?;
    let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
    print_out(&format!("created user {name} ({})\n", names.join(", ")))
}

pub(super) fn delete_user(target: &BrokerArgs, name: &str) -> Result<(), String> {
    let mut client = connect(target)?;
    let deleted = client
        .delete_user(name)
        .map_err(|e| format!("user {name}: {}", describe(&e)))?;
    if !deleted {
        return Err(format!("there is no user {name:?}"));
    }
    print_out(&format!("deleted user {name}\n"))
}

pub(super) fn list_users(target: &BrokerArgs, output: Output) -> Result<(), String> {
    let mut client = connect(target)?;
    let users = client
        .list_users()
        .map_err(|e| format!("listing users: {}", describe(&e)))?;
    let rows: Vec<(String, Vec<String>)> = users
        .into_iter()
        .map(|u| (u.name, u.credentials.into_iter().map(|(m, _)| m).collect()))
        .collect();
    super::users::print(&rows, output)
}

/// Adds or removes `acl`; whether that changed anything.
pub(super) fn change_acl(target: &BrokerArgs, add: bool, acl: &AclBinding) -> Result<bool, String> {
    let mut client = connect(target)?;
    client
        .change_acl(add, acl)
        .map_err(|e| format!("ACL {acl}: {}", describe(&e)))
}

pub(super) fn list_acls(target: &BrokerArgs, output: Output) -> Result<(), String> {
    let mut client = connect(target)?;
    let acls = client
        .list_acls()
        .map_err(|e| format!("listing ACLs: {}", describe(&e)))?;
    let rows: Vec<super::acls::Row> = acls
        .into_iter()
        .map(|a| {
            [
                a.principal,
                a.permission,
                a.operation,
                a.host,
                a.resource_type,
                a.pattern_type,
                a.name,
            ]
        })
        .collect();
    super::acls::print(&rows, output)
}
