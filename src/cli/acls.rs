//! `pagurus acls add|remove|list`, offline: on a stopped broker's data directory, as
//! `pagurus users` (the broker reads `<data-dir>/security/acls` at start). Online changes
//! go through Kafka's CreateAcls and DeleteAcls once they are served (docs/SECURITY.md).

use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use serde_json::json;

use crate::cli::{Output, print_json, print_out, table};
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
        /// The broker's data directory (the broker must not be running).
        #[arg(long, env = "PAGURUS_DATA_DIR", default_value = "./pagurus-data")]
        data_dir: PathBuf,
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
}

/// One ACL, as Kafka's kafka-acls.sh names its parts.
#[derive(Debug, Args)]
pub struct Binding {
    /// The broker's data directory (the broker must not be running).
    #[arg(long, env = "PAGURUS_DATA_DIR", default_value = "./pagurus-data")]
    pub data_dir: PathBuf,
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
    fn binding(&self) -> Result<AclBinding, String> {
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
    match args.command {
        AclsCommand::Add(binding) => change(&binding, true),
        AclsCommand::Remove(binding) => change(&binding, false),
        AclsCommand::List { data_dir, output } => list(&data_dir, output),
    }
}

fn change(binding: &Binding, add: bool) -> Result<(), String> {
    let acl = binding.binding()?;
    let data_dir = &binding.data_dir;
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
    let what = match (add, changed) {
        (true, true) => "added",
        (true, false) => "already there",
        (false, true) => "removed",
        (false, false) => "no such ACL",
    };
    print_out(&format!("{what}: {acl}\n"))
}

fn list(data_dir: &Path, output: Output) -> Result<(), String> {
    let _lock = super::users::lock(data_dir, false)?;
    let acls = Acls::load(data_dir).map_err(|e| e.to_string())?;
    match output {
        Output::Json => {
            let all: Vec<_> = acls
                .iter()
                .map(|b| {
                    json!({
                        "principal": b.principal.to_string(),
                        "permission": b.permission.name(),
                        "operation": b.operation.name(),
                        "host": b.host.to_string(),
                        "resource_type": b.pattern.resource_type.name(),
                        "pattern_type": b.pattern.pattern_type.name(),
                        "name": b.pattern.name,
                    })
                })
                .collect();
            print_json(&json!({ "acls": all }))
        }
        Output::Text => {
            let rows: Vec<Vec<String>> = acls
                .iter()
                .map(|b| {
                    vec![
                        b.principal.to_string(),
                        b.permission.name().to_string(),
                        b.operation.name().to_string(),
                        b.host.to_string(),
                        b.pattern.resource_type.name().to_string(),
                        b.pattern.pattern_type.name().to_string(),
                        b.pattern.name.clone(),
                    ]
                })
                .collect();
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
