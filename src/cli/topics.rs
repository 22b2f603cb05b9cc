//! `pagurus topics list|create|describe|delete|compact`; `list` and `describe` print text
//! or JSON (`--output json`).

use clap::{Args, Subcommand, ValueEnum};
use serde_json::json;

use crate::cli::{BrokerArgs, Output, describe, print_json, print_out, table};
use crate::protocol::native::{ErrorCode, TopicMetadata, TopicSettings};
use crate::storage::FsyncPolicy;

#[derive(Debug, Args)]
pub struct TopicsArgs {
    #[command(flatten)]
    pub target: BrokerArgs,
    #[command(subcommand)]
    pub command: TopicsCommand,
}

#[derive(Debug, Subcommand)]
pub enum TopicsCommand {
    /// Print the name of every topic, one per line.
    List {
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Create a topic.
    Create(CreateArgs),
    /// Print a topic's settings and, per partition, its owner core, log start offset and
    /// high watermark.
    Describe {
        /// Topics to describe; every topic if none is named.
        names: Vec<String>,
        /// text, or json: one JSON document, for scripts.
        #[arg(long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Delete a topic and all its data.
    Delete {
        /// Topic to delete.
        name: String,
    },
    /// Compact a `cleanup = compact` topic now (every partition, or one), and print what
    /// each pass removed.
    Compact {
        /// Topic to compact.
        name: String,
        /// Only this partition.
        #[arg(long)]
        partition: Option<u32>,
    },
}

/// Partitions a topic may have (the broker refuses more).
const PARTITIONS_MAX: u32 = 4096;

/// A compaction pass over a large partition reads and rewrites it: wait this long.
const COMPACT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Topic name: 1-249 characters of [A-Za-z0-9._-], not "." or "..".
    pub name: String,
    /// Number of partitions (1-4096).
    #[arg(long, default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..=i64::from(PARTITIONS_MAX)))]
    pub partitions: u32,
    /// Copies of each partition, on as many nodes of the cluster (each partition is then a
    /// Raft group; a produce is acknowledged once a majority holds it); at most the live
    /// nodes. 1 on a broker started alone.
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub replication_factor: i32,
    /// When a produce is acknowledged: always, never or interval=MS; the broker's --fsync
    /// if not given.
    #[arg(long)]
    pub fsync: Option<FsyncPolicy>,
    /// Segment size at which the active segment rolls; the broker's --segment-bytes if not
    /// given.
    #[arg(long)]
    pub segment_bytes: Option<u64>,
    /// Keep at most this many bytes per partition (whole closed segments are deleted); no
    /// size limit if not given.
    #[arg(long)]
    pub retention_bytes: Option<u64>,
    /// Delete closed segments older than this many ms; no age limit if not given.
    #[arg(long)]
    pub retention_ms: Option<u64>,
    /// What happens to old segments: delete (retention) or compact (keep the newest batch
    /// per key).
    #[arg(long, value_enum, default_value = "delete")]
    pub cleanup: Cleanup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Cleanup {
    Delete,
    Compact,
}

pub fn run(args: TopicsArgs) -> Result<(), String> {
    let mut client = args.target.connect(std::time::Duration::ZERO)?;
    match args.command {
        TopicsCommand::List { output } => {
            let metadata = client.metadata(&[]).map_err(|e| describe(&e))?;
            match output {
                Output::Text => {
                    let names: String = metadata
                        .topics
                        .iter()
                        .map(|t| format!("{}\n", t.name))
                        .collect();
                    print_out(&names)?;
                }
                Output::Json => print_json(&json!(
                    metadata
                        .topics
                        .iter()
                        .map(|t| json!({"name": t.name, "partitions": t.partitions.len()}))
                        .collect::<Vec<_>>()
                ))?,
            }
        }
        TopicsCommand::Create(create) => {
            let settings = settings(&create)?;
            // -1: the default, one copy.
            let replication_factor = u16::try_from(create.replication_factor).unwrap_or(1).max(1);
            if create.replication_factor != 1 {
                // Checked here as the broker checks Kafka's CreateTopics: against the live
                // nodes the node asked knows of.
                let status = client.cluster_status().map_err(|e| describe(&e))?;
                let live = status.nodes.iter().filter(|n| n.live).count();
                crate::cluster::check_replication_factor(create.replication_factor, live)
                    .map_err(|why| format!("creating topic {}: {why}", create.name))?;
            }
            client
                .create_replicated_topic(&create.name, settings, replication_factor)
                .map_err(|e| format!("creating topic {}: {}", create.name, describe(&e)))?;
            print_out(&format!(
                "created topic {} with {} partition{}\n",
                create.name,
                create.partitions,
                if create.partitions == 1 { "" } else { "s" }
            ))?;
        }
        TopicsCommand::Describe { names, output } => {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            let mut metadata = client.metadata(&names).map_err(|e| describe(&e))?;
            if let Some(unknown) = metadata.topics.iter().find(|t| t.error != 0) {
                return Err(super::topic_error(&unknown.name, unknown.error));
            }
            // On a cluster: each partition's node, and the offsets its node knows.
            let clustered = metadata.cluster.is_some();
            if clustered {
                let peer = client
                    .stream()
                    .tcp()
                    .peer_addr()
                    .map_err(|e| e.to_string())?;
                super::routed::remote_offsets(&args.target, peer, &names, &mut metadata);
            }
            match output {
                Output::Text => {
                    let text: Vec<String> = metadata
                        .topics
                        .iter()
                        .map(|t| describe_topic(t, clustered))
                        .collect();
                    print_out(&text.join("\n"))?;
                }
                Output::Json => print_json(&json!(
                    metadata
                        .topics
                        .iter()
                        .map(|t| topic_json(t, clustered))
                        .collect::<Vec<_>>()
                ))?,
            }
        }
        TopicsCommand::Delete { name } => {
            client
                .delete_topic(&name)
                .map_err(|e| format!("deleting topic {name}: {}", describe(&e)))?;
            print_out(&format!("deleted topic {name}\n"))?;
        }
        TopicsCommand::Compact { name, partition } => {
            let partitions = match partition {
                Some(p) => vec![p],
                None => {
                    let metadata = client.metadata(&[&name]).map_err(|e| describe(&e))?;
                    let topic = match metadata.topics.first() {
                        Some(t) if t.error == 0 => t,
                        Some(t) => return Err(super::topic_error(&name, t.error)),
                        None => {
                            return Err(super::topic_error(&name, ErrorCode::UnknownTopic as u16));
                        }
                    };
                    (0..topic.partitions.len() as u32).collect()
                }
            };
            let mut client = args.target.connect(COMPACT_TIMEOUT)?;
            let mut text = String::new();
            for p in partitions {
                let done = client
                    .compact(&name, p)
                    .map_err(|e| format!("compacting {name}/{p}: {}", describe(&e)))?;
                text.push_str(&format!(
                    "{name}/{p}: {} rewritten, {} removed, {} -> {} bytes in {} ms\n",
                    plural(done.segments_rewritten.into(), "segment"),
                    plural(done.batches_removed, "batch"),
                    done.bytes_before,
                    done.bytes_after,
                    done.duration_us / 1000
                ));
            }
            print_out(&text)?;
        }
    }
    Ok(())
}

/// The settings block of a create request; zeros leave a setting to the broker.
fn settings(create: &CreateArgs) -> Result<TopicSettings, String> {
    let (fsync, fsync_interval_ms) = match create.fsync {
        None => (0, 0),
        Some(FsyncPolicy::Always) => (1, 0),
        Some(FsyncPolicy::Never) => (2, 0),
        Some(FsyncPolicy::Interval(interval)) => (
            3,
            u32::try_from(interval.as_millis())
                .map_err(|_| String::from("the fsync interval must be under 2^32 ms"))?,
        ),
    };
    let positive = |value: Option<u64>, flag: &str| match value {
        Some(0) => Err(format!("--{flag} must be above 0")),
        other => Ok(other.unwrap_or(0)),
    };
    Ok(TopicSettings {
        partitions: create.partitions,
        fsync,
        fsync_interval_ms,
        segment_bytes: positive(create.segment_bytes, "segment-bytes")?,
        retention_bytes: positive(create.retention_bytes, "retention-bytes")?,
        retention_ms: positive(create.retention_ms, "retention-ms")?,
        cleanup: match create.cleanup {
            Cleanup::Delete => 0,
            Cleanup::Compact => 1,
        },
    })
}

/// "1 segment", "2 segments", "3 batches".
fn plural(n: u64, one: &str) -> String {
    match (n, one.ends_with(['s', 'h'])) {
        (1, _) => format!("1 {one}"),
        (_, true) => format!("{n} {one}es"),
        (_, false) => format!("{n} {one}s"),
    }
}

fn fsync_name(s: &TopicSettings) -> String {
    match s.fsync {
        0 => String::from("broker default"),
        1 => String::from("always"),
        2 => String::from("never"),
        3 => format!("interval={}", s.fsync_interval_ms),
        other => format!("unknown ({other})"),
    }
}

fn cleanup_name(s: &TopicSettings) -> String {
    match s.cleanup {
        0 => String::from("delete"),
        1 => String::from("compact"),
        other => format!("unknown ({other})"),
    }
}

/// A topic as one JSON object; a limit of 0 (none) is null. On a cluster each partition
/// also has its `owner_node`.
fn topic_json(topic: &TopicMetadata, clustered: bool) -> serde_json::Value {
    let s = &topic.settings;
    let limit = |value: u64| (value > 0).then_some(value);
    json!({
        "name": topic.name,
        "partitions": topic.partitions.iter().enumerate().map(|(i, p)| {
            let mut partition = json!({
                "partition": i,
                "owner_core": p.owner_core,
                "log_start_offset": p.log_start_offset,
                "high_watermark": p.high_watermark,
            });
            if clustered {
                partition["owner_node"] = json!(p.owner_node);
            }
            partition
        }).collect::<Vec<_>>(),
        "fsync": fsync_name(s),
        "segment_bytes": s.segment_bytes,
        "retention_bytes": limit(s.retention_bytes),
        "retention_ms": limit(s.retention_ms),
        "cleanup": cleanup_name(s),
    })
}

/// Settings, one per line, then the partition table (with each partition's node on a
/// cluster).
fn describe_topic(topic: &TopicMetadata, clustered: bool) -> String {
    let s = &topic.settings;
    let fsync = fsync_name(s);
    let limit = |value: u64| {
        if value == 0 {
            String::from("none")
        } else {
            value.to_string()
        }
    };
    let cleanup = cleanup_name(s);
    let mut out = format!(
        "topic:            {}\n\
         partitions:       {}\n\
         fsync:            {fsync}\n\
         segment bytes:    {}\n\
         retention bytes:  {}\n\
         retention ms:     {}\n\
         cleanup:          {cleanup}\n\n",
        topic.name,
        topic.partitions.len(),
        s.segment_bytes,
        limit(s.retention_bytes),
        limit(s.retention_ms),
    );
    let rows: Vec<Vec<String>> = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut row = vec![i.to_string()];
            if clustered {
                row.push(p.owner_node.map_or_else(|| "?".into(), |n| n.to_string()));
            }
            row.extend([
                p.owner_core.to_string(),
                p.log_start_offset.to_string(),
                p.high_watermark.to_string(),
            ]);
            row
        })
        .collect();
    let headers: &[&str] = if clustered {
        &[
            "PARTITION",
            "NODE",
            "OWNER CORE",
            "LOG START",
            "HIGH WATERMARK",
        ]
    } else {
        &["PARTITION", "OWNER CORE", "LOG START", "HIGH WATERMARK"]
    };
    out.push_str(&table(headers, &rows));
    out
}
