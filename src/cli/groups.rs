//! `pagurus groups list|describe`.

use clap::{Args, Subcommand};

use serde_json::json;

use crate::cli::{BrokerArgs, Output, describe, print_json, print_out, table};

#[derive(Debug, Args)]
pub struct GroupsArgs {
    #[command(flatten)]
    pub target: BrokerArgs,
    #[command(subcommand)]
    pub command: GroupsCommand,
}

#[derive(Debug, Subcommand)]
pub enum GroupsCommand {
    /// Print the name of every group with a committed offset, one per line.
    List {
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Print, per topic and partition, the group's committed offset, the log end offset
    /// (high watermark) and the lag between them.
    Describe {
        /// Consumer group.
        group: String,
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
}

pub fn run(args: GroupsArgs) -> Result<(), String> {
    let mut client = args.target.connect(std::time::Duration::ZERO)?;
    match args.command {
        GroupsCommand::List { output } => {
            let groups = client.list_groups().map_err(|e| describe(&e))?;
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
            let mut partitions = client
                .describe_group(&group)
                .map_err(|e| format!("describing group {group}: {}", describe(&e)))?;
            partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
            if output == Output::Json {
                let rows: Vec<_> = partitions
                    .iter()
                    .map(|p| {
                        json!({
                            "topic": p.topic,
                            "partition": p.partition,
                            "committed_offset": p.committed_offset,
                            "log_end_offset": p.log_end_offset,
                            "lag": p.lag,
                        })
                    })
                    .collect();
                return print_json(&json!({ "group": group, "partitions": rows }));
            }
            let rows: Vec<Vec<String>> = partitions
                .iter()
                .map(|p| {
                    vec![
                        p.topic.clone(),
                        p.partition.to_string(),
                        p.committed_offset.to_string(),
                        p.log_end_offset.to_string(),
                        p.lag.to_string(),
                    ]
                })
                .collect();
            print_out(&table(
                &["TOPIC", "PARTITION", "COMMITTED", "LOG END", "LAG"],
                &rows,
            ))?;
        }
    }
    Ok(())
}
