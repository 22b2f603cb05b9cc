//! `pagurus groups list|describe`.

use clap::{Args, Subcommand};

use crate::cli::{BrokerArgs, describe, print_out, table};

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
    List,
    /// Print, per topic and partition, the group's committed offset, the log end offset
    /// (high watermark) and the lag between them.
    Describe {
        /// Consumer group.
        group: String,
    },
}

pub fn run(args: GroupsArgs) -> Result<(), String> {
    let mut client = args.target.connect(std::time::Duration::ZERO)?;
    match args.command {
        GroupsCommand::List => {
            let groups = client.list_groups().map_err(|e| describe(&e))?;
            let text: String = groups.iter().map(|g| format!("{g}\n")).collect();
            print_out(&text)?;
        }
        GroupsCommand::Describe { group } => {
            let mut partitions = client
                .describe_group(&group)
                .map_err(|e| format!("describing group {group}: {}", describe(&e)))?;
            partitions.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
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
