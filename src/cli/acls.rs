//! `pagurus acls add|remove|list`. With `--data-dir`, offline: on a stopped broker's data
//! directory, as `pagurus users` (the broker reads `<data-dir>/security/acls` at start).
//! Without it, online: through the broker at `--broker` (`security_online`), applied to
//! open sessions at their next request.

use std::path::Path;

use clap::{Args, Subcommand};
use serde_json::json;

use crate::cli::users::DataDir;
use crate::cli::{BrokerArgs, Output, print_json, print_out, table};
use crate::security::acl::{
    AclBinding, Acls, Host, Operation, PatternType, Permission, Principal, ResourcePattern,
    ResourceType,
};

#[derive(Debug, Args)]
pub struct AclsArgs {
    #[command(subcommand)]
    pub command: AclsCommand,
}

#[derive(Debug, Subcommand)]
pub enum AclsCommand {
    /// Add an ACL.
    Add(Binding),
    /// Remove an ACL (the same fields it was added with).
    Remove(Binding),
    /// Print every ACL.
    List {
        #[command(flatten)]
        dir: DataDir,
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
        #[command(flatten)]
        target: BrokerArgs,
    },
}

impl AclsCommand {
    pub(super) fn target(&mut self) -> &mut BrokerArgs {
        match self {
            AclsCommand::Add(binding) | AclsCommand::Remove(binding) => &mut binding.target,
            AclsCommand::List { target, .. } => target,
        }
    }
}

/// One ACL, as Kafka's kafka-acls.sh names its parts.
#[derive(Debug, Args)]
pub struct Binding {
    #[command(flatten)]
    pub dir: DataDir,
    #[command(flatten)]
    pub target: BrokerArgs,
    /// Who: User:NAME, or User:* for every user.
    #[arg(long, value_parser = parse_principal)]
    pub principal: Principal,
    /// What: Read, Write, Create, Delete, Alter, Describe, DescribeConfigs, AlterConfigs,
    /// IdempotentWrite, ClusterAction or All.
    #[arg(long, value_parser = parse_operation)]
    pub operation: Operation,
    /// On a topic (a name, or * for all).
    #[arg(long, group = "resource")]
    pub topic: Option<String>,
    /// On a consumer group (a name, or * for all).
    #[arg(long, group = "resource")]
    pub group: Option<String>,
    /// On the cluster.
    #[arg(long, group = "resource")]
    pub cluster: bool,
    /// The name is a prefix: the ACL covers every resource whose name starts with it.
    #[arg(long)]
    pub prefixed: bool,
    /// Deny instead of allow (a deny wins over every allow).
    #[arg(long)]
    pub deny: bool,
    /// Only for clients connecting from this address (default: any).
    #[arg(long)]
    pub host: Option<String>,
}

fn parse_principal(s: &str) -> Result<Principal, String> {
    Principal::parse(s).map_err(|e| e.to_string())
}

fn parse_operation(s: &str) -> Result<Operation, String> {
    Operation::from_name(s).ok_or_else(|| format!("unknown operation {s:?}"))
}

impl Binding {
    pub(super) fn binding(&self) -> Result<AclBinding, String> {
        let (resource_type, name) = match (&self.topic, &self.group, self.cluster) {
            (Some(topic), None, false) => (ResourceType::Topic, topic.as_str()),
            (None, Some(group), false) => (ResourceType::Group, group.as_str()),
            (None, None, true) => (ResourceType::Cluster, crate::security::acl::CLUSTER_NAME),
            _ => return Err("name one resource: --topic, --group or --cluster".to_string()),
        };
        let pattern_type = if self.prefixed {
            PatternType::Prefixed
        } else {
            PatternType::Literal
        };
        let pattern =
            ResourcePattern::new(resource_type, pattern_type, name).map_err(|e| e.to_string())?;
        let host = match &self.host {
            None => Host::Any,
            Some(host) => Host::parse(host).map_err(|e| e.to_string())?,
        };
        Ok(AclBinding {
            pattern,
            principal: self.principal.clone(),
            host,
            operation: self.operation,
            permission: if self.deny {
                Permission::Deny
            } else {
                Permission::Allow
            },
        })
    }
}

pub fn run(args: AclsArgs) -> Result<(), String> {
    use super::security_online as online;
    match args.command {
        AclsCommand::Add(binding) => change(&binding, true),
        AclsCommand::Remove(binding) => change(&binding, false),
        AclsCommand::List {
            dir,
            output,
            target,
        } => match dir.data_dir {
            Some(data_dir) => list(&data_dir, output),
            None => online::list_acls(&target, output),
        },
    }
}

fn change(binding: &Binding, add: bool) -> Result<(), String> {
    let acl = binding.binding()?;
    let Some(data_dir) = &binding.dir.data_dir else {
        let changed = super::security_online::change_acl(&binding.target, add, &acl)?;
        return print_out(&format!("{}: {acl}\n", what(add, changed)));
    };
    // As `serve` does, before anything is written: make the directory durably, refuse one
    // of someone else's files, mark a new one, then lock it.
    crate::storage::fs::prepare_data_dir(data_dir)
        .map_err(|e| format!("cannot prepare the data directory: {e}"))?;
    crate::storage::marker::check_and_mark(data_dir).map_err(|e| e.to_string())?;
    let _lock = super::users::lock(data_dir, true)?;
    let mut acls = Acls::load(data_dir).map_err(|e| e.to_string())?;
    let changed = if add {
        acls.add(acl.clone()).map_err(|e| e.to_string())?
    } else {
        acls.remove(&acl)
    };
    if changed {
        acls.save(data_dir).map_err(|e| e.to_string())?;
    }
    print_out(&format!("{}: {acl}\n", what(add, changed)))
}

fn what(add: bool, changed: bool) -> &'static str {
    match (add, changed) {
        (true, true) => "added",
        (true, false) => "already there",
        (false, true) => "removed",
        (false, false) => "no such ACL",
    }
}

fn list(data_dir: &Path, output: Output) -> Result<(), String> {
    let _lock = super::users::lock(data_dir, false)?;
    let acls = Acls::load(data_dir).map_err(|e| e.to_string())?;
    let rows: Vec<Row> = acls.iter().map(row).collect();
    print(&rows, output)
}

/// One ACL as printed: principal, permission, operation, host, resource type, pattern
/// type, name.
pub(super) type Row = [String; 7];

fn row(b: &AclBinding) -> Row {
    [
        b.principal.to_string(),
        b.permission.name().to_string(),
        b.operation.name().to_string(),
        b.host.to_string(),
        b.pattern.resource_type.name().to_string(),
        b.pattern.pattern_type.name().to_string(),
        b.pattern.name.clone(),
    ]
}

/// Prints ACLs, the same offline and online.
pub(super) fn print(rows: &[Row], output: Output) -> Result<(), String> {
    match output {
        Output::Json => {
            let all: Vec<_> = rows
                .iter()
                .map(
                    |[
                        principal,
                        permission,
                        operation,
                        host,
                        resource_type,
                        pattern_type,
                        name,
                    ]| {
                        json!({
                            "principal": principal,
                            "permission": permission,
                            "operation": operation,
                            "host": host,
                            "resource_type": resource_type,
                            "pattern_type": pattern_type,
                            "name": name,
                        })
                    },
                )
                .collect();
            print_json(&json!({ "acls": all }))
        }
        Output::Text => {
            let rows: Vec<Vec<String>> = rows.iter().map(|r| r.to_vec()).collect();
            let header = [
                "PRINCIPAL",
                "PERMISSION",
                "OPERATION",
                "HOST",
                "RESOURCE",
                "PATTERN",
                "NAME",
            ];
            print_out(&table(&header, &rows))
        }
    }
}
