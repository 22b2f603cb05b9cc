//! `pagurus groups list|describe|delete|reset-offsets`.

use std::collections::BTreeSet;

use clap::{Args, Subcommand};
use serde_json::json;

use crate::cli::{BrokerArgs, Output, describe, print_json, print_out, table, topic_error};
use crate::client::blocking::Client;
use crate::client::consume::StartAt;
use crate::client::routing::Routed;
use crate::protocol::native::{ErrorCode, GroupDescription, OffsetSpec};

#[derive(Debug, Args)]
pub struct GroupsArgs {
    #[command(flatten)]
    pub target: BrokerArgs,
    #[command(subcommand)]
    pub command: GroupsCommand,
}

#[derive(Debug, Subcommand)]
pub enum GroupsCommand {
    /// Print the name of every group (with members or committed offsets), one per line;
    /// on a cluster, the groups of every node.
    List {
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Print the group's state, generation and members with their partitions, then per
    /// topic and partition its committed offset, the log end offset (high watermark), the
    /// lag between them and the member that reads it.
    Describe {
        /// Consumer group.
        group: String,
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Delete a group with no members, and its committed offsets.
    Delete {
        /// Consumer group.
        group: String,
    },
    /// Set the group's committed offsets of a topic (refused while the group has members).
    /// An offset outside the log (before its start, past its end) is refused, and then no
    /// partition's offset is set.
    ResetOffsets {
        /// Consumer group.
        group: String,
        /// Topic whose offsets are set.
        #[arg(long)]
        topic: String,
        /// Only this partition (default: every partition of the topic).
        #[arg(long)]
        partition: Option<u32>,
        /// earliest, latest, an offset, or @TIMESTAMP_MS.
        #[arg(long)]
        to: StartAt,
    },
}

pub fn run(args: GroupsArgs) -> Result<(), String> {
    // A group's calls go to its coordinator's node, found from a `NotHere` answer.
    let mut routed = super::routed::bare(&args.target, std::time::Duration::ZERO)?;
    match args.command {
        GroupsCommand::List { output } => {
            let groups = list_everywhere(&args.target, routed.bootstrap_client())?;
            match output {
                Output::Text => {
                    let text: String = groups.iter().map(|g| format!("{g}\n")).collect();
                    print_out(&text)?;
                }
                Output::Json => print_json(&json!(
                    groups
                        .iter()
                        .map(|g| json!({ "name": g }))
                        .collect::<Vec<_>>()
                ))?,
            }
        }
        GroupsCommand::Describe { group, output } => {
            let mut described = routed
                .on_coordinator(&group, |client| client.describe_group(&group))
                .map_err(|e| format!("describing group {group}: {}", describe(&e)))?;
            log_ends_from_owners(&args.target, &mut routed, &mut described);
            described
                .partitions
                .sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
            match output {
                Output::Text => print_out(&describe_text(&group, &described))?,
                Output::Json => print_json(&describe_json(&group, &described))?,
            }
        }
        GroupsCommand::Delete { group } => {
            routed
                .on_coordinator(&group, |client| client.delete_group(&group))
                .map_err(|e| format!("deleting group {group}: {}", describe(&e)))?;
            print_out(&format!("deleted group {group}\n"))?;
        }
        GroupsCommand::ResetOffsets {
            group,
            topic,
            partition,
            to,
        } => reset_offsets(&mut routed, &group, &topic, partition, to)?,
    }
    Ok(())
}

/// The groups of the node asked and, on a cluster, of every other registered node (each
/// lists the groups it coordinates or holds offsets of, as a Kafka broker does): merged,
/// sorted, each once. A node that does not answer is named on stderr and left out.
fn list_everywhere(target: &BrokerArgs, client: &mut Client) -> Result<Vec<String>, String> {
    let mine = client.list_groups().map_err(|e| describe(&e))?;
    let others = match super::routed::on_other_nodes(target, client, Client::list_groups) {
        Ok(others) if others.is_empty() => return Ok(mine),
        Ok(others) => others,
        Err(e) => {
            eprintln!("pagurus: only the groups of the node asked are listed: {e}");
            return Ok(mine);
        }
    };
    let mut groups: BTreeSet<String> = mine.into_iter().collect();
    for (node, answer) in others {
        match answer {
            Ok(theirs) => groups.extend(theirs),
            Err(e) => eprintln!("pagurus: node {node}'s groups are not listed: {e}"),
        }
    }
    Ok(groups.into_iter().collect())
}

/// On a cluster, the coordinator knows the log end of its own node's partitions only (it
/// gives 0 for the others): each partition's log end is asked of its owner node, as
/// `topics describe` does, and the lag follows. A broker alone is left as it answered; a
/// partition whose end cannot be had keeps the coordinator's figures (with a warning).
fn log_ends_from_owners(
    target: &BrokerArgs,
    routed: &mut Routed,
    described: &mut GroupDescription,
) {
    let mut names: Vec<&str> = described
        .partitions
        .iter()
        .map(|p| p.topic.as_str())
        .collect();
    names.sort_unstable();
    names.dedup();
    if names.is_empty() {
        return;
    }
    let mut metadata = match routed.bootstrap_client().metadata(&names) {
        Ok(metadata) if metadata.cluster.is_none() => return,
        Ok(metadata) => metadata,
        Err(e) => {
            let e = describe(&e);
            eprintln!(
                "pagurus: the log ends shown are the coordinator's (0 for partitions of other nodes): {e}"
            );
            return;
        }
    };
    let bootstrap = routed.routes().bootstrap();
    super::routed::remote_offsets(target, bootstrap, &names, &mut metadata);
    for p in &mut described.partitions {
        let owner = metadata
            .topics
            .iter()
            .find(|t| t.name == p.topic && t.error == ErrorCode::None as u16)
            .and_then(|t| t.partitions.get(p.partition as usize));
        // Each side gives 0 for what it does not know (the coordinator another node's
        // partition, the metadata a node that did not answer), and a log end only grows.
        if let Some(owner) = owner {
            p.log_end_offset = p.log_end_offset.max(owner.high_watermark);
            p.lag = p.log_end_offset.saturating_sub(p.committed_offset);
        }
    }
}

/// The member of the group that reads a partition, if any.
fn reader_of<'d>(described: &'d GroupDescription, topic: &str, partition: u32) -> Option<&'d str> {
    described
        .members
        .iter()
        .find(|m| {
            m.partitions
                .iter()
                .any(|(t, p)| t == topic && *p == partition)
        })
        .map(|m| m.member_id.as_str())
}

fn describe_json(group: &str, described: &GroupDescription) -> serde_json::Value {
    let members: Vec<_> = described
        .members
        .iter()
        .map(|m| {
            let partitions: Vec<_> = m
                .partitions
                .iter()
                .map(|(t, p)| json!({ "topic": t, "partition": p }))
                .collect();
            json!({ "member_id": m.member_id, "client_id": m.client_id, "partitions": partitions })
        })
        .collect();
    let partitions: Vec<_> = described
        .partitions
        .iter()
        .map(|p| {
            json!({
                "topic": p.topic,
                "partition": p.partition,
                "committed_offset": p.committed_offset,
                "log_end_offset": p.log_end_offset,
                "lag": p.lag,
                "member": reader_of(described, &p.topic, p.partition),
            })
        })
        .collect();
    json!({
        "group": group,
        "state": described.state.to_string(),
        "generation": described.generation,
        "members": members,
        "partitions": partitions,
    })
}

fn describe_text(group: &str, described: &GroupDescription) -> String {
    let mut text = format!(
        "group {group}: {} generation {} ({} members)\n",
        described.state,
        described.generation,
        described.members.len()
    );
    if !described.members.is_empty() {
        let rows: Vec<Vec<String>> = described
            .members
            .iter()
            .map(|m| {
                let partitions: Vec<String> = m
                    .partitions
                    .iter()
                    .map(|(t, p)| format!("{t}/{p}"))
                    .collect();
                vec![
                    m.member_id.clone(),
                    m.client_id.clone(),
                    partitions.join(","),
                ]
            })
            .collect();
        text.push_str(&table(&["MEMBER", "CLIENT", "PARTITIONS"], &rows));
    }
    let reader = |topic: &str, partition: u32| {
        reader_of(described, topic, partition)
            .unwrap_or("-")
            .to_string()
    };
    let rows: Vec<Vec<String>> = described
        .partitions
        .iter()
        .map(|p| {
            vec![
                p.topic.clone(),
                p.partition.to_string(),
                p.committed_offset.to_string(),
                p.log_end_offset.to_string(),
                p.lag.to_string(),
                reader(&p.topic, p.partition),
            ]
        })
        .collect();
    text.push_str(&table(
        &[
            "TOPIC",
            "PARTITION",
            "COMMITTED",
            "LOG END",
            "LAG",
            "MEMBER",
        ],
        &rows,
    ));
    text
}

fn reset_offsets(
    routed: &mut Routed,
    group: &str,
    topic: &str,
    partition: Option<u32>,
    to: StartAt,
) -> Result<(), String> {
    let metadata = routed
        .bootstrap_client()
        .metadata(&[topic])
        .map_err(|e| format!("reading topic {topic}: {}", describe(&e)))?;
    // Worded as every other subcommand words a missing topic.
    let count = match metadata.topics.iter().find(|t| t.name == topic) {
        Some(t) if t.error == 0 => t.partitions.len() as u32,
        Some(t) => return Err(topic_error(topic, t.error)),
        None => return Err(topic_error(topic, ErrorCode::UnknownTopic as u16)),
    };
    let partitions: Vec<u32> = match partition {
        Some(p) if p >= count => {
            return Err(format!(
                "topic {topic} has {count} partitions; {p} does not exist"
            ));
        }
        Some(p) => vec![p],
        None => (0..count).collect(),
    };
    let spec = to.spec().map_err(|e| describe(&e))?;
    // Every partition's offset is found (and an explicit one checked) before any is set,
    // so a refusal leaves the group's offsets as they were.
    let mut offsets = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let find = |routed: &mut Routed, spec| {
            routed
                .on_owner(topic, partition, |client| {
                    client.list_offsets(topic, partition, spec)
                })
                .map_err(|e| {
                    format!(
                        "finding the offset of {topic}/{partition}: {}",
                        describe(&e)
                    )
                })
        };
        let offset = match spec {
            Ok(spec) => find(routed, spec)?,
            Err(offset) => {
                let start = find(routed, OffsetSpec::Earliest)?;
                let end = find(routed, OffsetSpec::Latest)?;
                check_in_log(topic, partition, offset, start, end)?;
                offset
            }
        };
        offsets.push((partition, offset));
    }
    let mut rows = Vec::new();
    for (partition, offset) in offsets {
        routed
            .on_coordinator(group, |client| {
                client.commit_offset(group, topic, partition, offset)
            })
            .map_err(|e| {
                format!(
                    "setting {topic}/{partition} of group {group}: {}",
                    describe(&e)
                )
            })?;
        rows.push(vec![
            topic.to_string(),
            partition.to_string(),
            offset.to_string(),
        ]);
    }
    print_out(&table(&["TOPIC", "PARTITION", "COMMITTED"], &rows))
}

/// An explicit offset must lie in the log, from its start to its end (the next offset to
/// be written, where a consumer waits for new records): one outside would make the group's
/// consumers fail with `OffsetOutOfRange`, and a lag of 0 would hide that.
fn check_in_log(
    topic: &str,
    partition: u32,
    offset: u64,
    start: u64,
    end: u64,
) -> Result<(), String> {
    if (start..=end).contains(&offset) {
        return Ok(());
    }
    let side = if offset > end {
        "past the log end"
    } else {
        "before the log start"
    };
    Err(format!(
        "offset {offset} is {side} of {topic}/{partition} (log start {start}, log end {end}); \
         give an offset from {start} to {end}, or --to earliest, latest or @TIMESTAMP_MS; \
         no offset was set"
    ))
}

#[cfg(test)]
mod tests {
    use super::check_in_log;

    #[test]
    fn offsets_from_the_log_start_to_its_end_are_accepted() {
        assert!(check_in_log("t", 0, 5, 5, 9).is_ok());
        assert!(
            check_in_log("t", 0, 9, 5, 9).is_ok(),
            "the end: wait for new records"
        );
        let past = check_in_log("t", 0, 10, 5, 9).unwrap_err();
        assert!(
            past.contains("offset 10 is past the log end of t/0"),
            "{past}"
        );
        let before = check_in_log("t", 1, 4, 5, 9).unwrap_err();
        assert!(
            before.contains("before the log start of t/1 (log start 5, log end 9)"),
            "{before}"
        );
    }
}
