//! Kafka's config names for pagurus' topic and broker settings (`docs/KAFKA.md`, "Topic
//! configs"): one table used by CreateTopics, DescribeConfigs and (Incremental)AlterConfigs,
//! so a config is honoured everywhere or refused everywhere, never dropped.
//!
//! - Alterable: `cleanup.policy`, `retention.ms`, `retention.bytes`. The background
//!   retention and compaction tasks read them from the topic registry at every pass, so an
//!   alter takes effect on the open partitions.
//! - Set at creation only: `segment.bytes`, `flush.messages`, `flush.ms` (the partition logs
//!   are opened with them).
//! - Fixed: `segment.ms`, `max.message.bytes`, `compression.type`, `message.timestamp.type`,
//!   `min.insync.replicas`: what pagurus does, described; a request that sets one to the value
//!   it already has is accepted (tools write whole config sets back), any other value is
//!   INVALID_CONFIG.
//! - Any other name: INVALID_CONFIG.

use crate::config::BrokerConfig;
use crate::protocol::native::TopicSettings;
use crate::shard::placement::Place;
use crate::shard::topics::TopicMeta;
use crate::storage::FsyncPolicy;

/// Kafka's `ConfigSource` values (DescribeConfigs v1+).
pub const SOURCE_DYNAMIC_TOPIC: i8 = 1;
pub const SOURCE_STATIC_BROKER: i8 = 4;
pub const SOURCE_DEFAULT: i8 = 5;

/// Kafka's `ConfigType` values (DescribeConfigs v3+).
const TYPE_BOOLEAN: i8 = 1;
const TYPE_STRING: i8 = 2;
const TYPE_INT: i8 = 3;
const TYPE_LONG: i8 = 5;
const TYPE_LIST: i8 = 7;

/// Kafka's "no limit" and "never" for long configs.
const LONG_MAX: &str = "9223372036854775807";

/// One described config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: &'static str,
    pub value: String,
    pub source: i8,
    pub read_only: bool,
    pub config_type: i8,
    pub doc: &'static str,
}

/// The names an alter may change; every other described name is read-only.
const ALTERABLE: [&str; 3] = ["cleanup.policy", "retention.ms", "retention.bytes"];
/// The names a CreateTopics may set besides the alterable ones.
const AT_CREATION: [&str; 3] = ["segment.bytes", "flush.messages", "flush.ms"];

fn entry(
    name: &'static str,
    value: String,
    overridden: bool,
    config_type: i8,
    doc: &'static str,
) -> Entry {
    Entry {
        name,
        value,
        source: if overridden {
            SOURCE_DYNAMIC_TOPIC
        } else {
            SOURCE_DEFAULT
        },
        read_only: !ALTERABLE.contains(&name),
        config_type,
        doc,
    }
}

/// A topic's configs under Kafka's names. A value is `DYNAMIC_TOPIC_CONFIG` when it differs
/// from what a topic created with no configs gets, else `DEFAULT_CONFIG`.
pub fn describe_topic(meta: &TopicMeta, broker: &BrokerConfig) -> Vec<Entry> {
    let s = meta.settings();
    let defaults = &broker.log;
    let (flush_messages, flush_ms) = flush_values(meta.fsync.unwrap_or(defaults.fsync));
    let segment_age = meta.log_config(defaults).segment_age;
    vec![
        entry(
            "cleanup.policy",
            if s.cleanup == 1 { "compact" } else { "delete" }.into(),
            s.cleanup != 0,
            TYPE_LIST,
            "delete or compact (one of them; pagurus does not combine them)",
        ),
        entry(
            "retention.ms",
            limit(s.retention_ms),
            s.retention_ms != 0,
            TYPE_LONG,
            "age after which sealed segments are deleted; -1: no limit",
        ),
        entry(
            "retention.bytes",
            limit(s.retention_bytes),
            s.retention_bytes != 0,
            TYPE_LONG,
            "size per partition above which the oldest segments are deleted; -1: no limit",
        ),
        entry(
            "segment.bytes",
            s.segment_bytes.to_string(),
            s.segment_bytes != defaults.segment_bytes,
            TYPE_INT,
            "segment size; set at creation",
        ),
        entry(
            "flush.messages",
            flush_messages.into(),
            meta.fsync.is_some(),
            TYPE_LONG,
            "1: fsync before every acknowledgement; set at creation",
        ),
        entry(
            "flush.ms",
            flush_ms,
            meta.fsync.is_some(),
            TYPE_LONG,
            "fsync interval; set at creation",
        ),
        entry(
            "segment.ms",
            segment_age.as_millis().to_string(),
            false,
            TYPE_LONG,
            "the broker's segment age, or retention.ms if shorter",
        ),
        entry(
            "max.message.bytes",
            broker.log.limits.max_payload_bytes.to_string(),
            false,
            TYPE_INT,
            "the broker's batch size limit",
        ),
        entry(
            "compression.type",
            "producer".into(),
            false,
            TYPE_STRING,
            "batches are stored as produced",
        ),
        entry(
            "message.timestamp.type",
            "CreateTime".into(),
            false,
            TYPE_STRING,
            "the producer's timestamps are kept",
        ),
        entry(
            "min.insync.replicas",
            "1".into(),
            false,
            TYPE_INT,
            "one copy",
        ),
    ]
}

/// The broker's configs: all static (set by `pagurus serve`'s options), read-only.
/// The settings of the broker at `place`, a place of this node (another node's settings
/// are that node's to describe).
pub fn describe_broker(broker: &BrokerConfig, place: Place) -> Vec<Entry> {
    let id = place.broker_id().to_string();
    let log = &broker.log;
    let (flush_messages, flush_ms) = flush_values(log.fsync);
    let fixed = |name, value: String, config_type, doc| Entry {
        name,
        value,
        source: SOURCE_STATIC_BROKER,
        read_only: true,
        config_type,
        doc,
    };
    vec![
        fixed("node.id", id.clone(), TYPE_INT, "this core"),
        fixed("broker.id", id, TYPE_INT, "this core"),
        fixed(
            "log.segment.bytes",
            log.segment_bytes.to_string(),
            TYPE_INT,
            "--segment-bytes",
        ),
        fixed(
            "log.roll.ms",
            log.segment_age.as_millis().to_string(),
            TYPE_LONG,
            "segment age",
        ),
        fixed("log.retention.ms", "-1".into(), TYPE_LONG, "no limit"),
        fixed("log.retention.bytes", "-1".into(), TYPE_LONG, "no limit"),
        fixed("log.cleanup.policy", "delete".into(), TYPE_LIST, ""),
        fixed(
            "log.flush.interval.messages",
            flush_messages.into(),
            TYPE_LONG,
            "--fsync",
        ),
        fixed("log.flush.interval.ms", flush_ms, TYPE_LONG, "--fsync"),
        fixed(
            "message.max.bytes",
            log.limits.max_payload_bytes.to_string(),
            TYPE_INT,
            "payload limit",
        ),
        fixed("num.partitions", "1".into(), TYPE_INT, "on-demand topics"),
        fixed("default.replication.factor", "1".into(), TYPE_INT, ""),
        fixed("auto.create.topics.enable", "true".into(), TYPE_BOOLEAN, ""),
    ]
}

/// `flush.messages` and `flush.ms` for an fsync policy.
fn flush_values(fsync: FsyncPolicy) -> (&'static str, String) {
    match fsync {
        FsyncPolicy::Always => ("1", LONG_MAX.into()),
        FsyncPolicy::Interval(every) => (LONG_MAX, every.as_millis().to_string()),
        FsyncPolicy::Never => (LONG_MAX, LONG_MAX.into()),
    }
}

/// Kafka's spelling of a pagurus limit where 0 means none.
fn limit(value: u64) -> String {
    if value == 0 {
        "-1".into()
    } else {
        value.to_string()
    }
}

/// A limit as Kafka spells it (`-1`: none) to pagurus' (0: none). Kafka's 0 ("keep
/// nothing") has no pagurus equivalent.
fn parse_limit(name: &str, value: &str) -> Result<u64, String> {
    match value.trim().parse::<i64>() {
        Ok(-1) => Ok(0),
        Ok(v) if v > 0 => Ok(v as u64),
        _ => Err(format!(
            "{name}={value}: must be -1 (no limit) or a positive number"
        )),
    }
}

/// One config of a request applied to `settings`; `None` reverts it to its default.
/// `creating`: the topic is being created, so `segment.bytes` and `flush.*` may be set too.
/// `described`: the topic's current description, for the fixed names.
pub fn apply(
    settings: &mut TopicSettings,
    name: &str,
    value: Option<&str>,
    creating: bool,
    described: &[Entry],
) -> Result<(), String> {
    let settable = ALTERABLE.contains(&name) || (creating && AT_CREATION.contains(&name));
    if !settable {
        let Some(current) = described.iter().find(|e| e.name == name) else {
            return Err(format!("config {name} is not supported by pagurus"));
        };
        return match value {
            Some(v) if v.trim() == current.value => Ok(()),
            _ if AT_CREATION.contains(&name) => Err(format!(
                "config {name} is set when a topic is created; it cannot be altered"
            )),
            _ => Err(format!(
                "config {name} is {} in pagurus and cannot be changed",
                current.value
            )),
        };
    }
    let Some(value) = value else {
        match name {
            "cleanup.policy" => settings.cleanup = 0,
            "retention.ms" => settings.retention_ms = 0,
            "retention.bytes" => settings.retention_bytes = 0,
            // Creation only: reverting is leaving it out.
            _ => {}
        }
        return Ok(());
    };
    let value = value.trim();
    match name {
        "cleanup.policy" => {
            settings.cleanup = match value {
                "delete" => 0,
                "compact" => 1,
                _ => {
                    return Err(format!(
                        "cleanup.policy={value}: pagurus supports delete or compact, not both"
                    ));
                }
            }
        }
        "retention.ms" => settings.retention_ms = parse_limit(name, value)?,
        "retention.bytes" => settings.retention_bytes = parse_limit(name, value)?,
        "segment.bytes" => {
            settings.segment_bytes = match value.parse::<u64>() {
                Ok(v @ 1..) => v,
                _ => return Err(format!("segment.bytes={value}: not a positive number")),
            }
        }
        "flush.messages" => match value {
            "1" if settings.fsync != 3 => settings.fsync = 1,
            LONG_MAX => {}
            _ => {
                return Err(format!(
                    "flush.messages={value}: pagurus fsyncs every batch (1) or by flush.ms"
                ));
            }
        },
        "flush.ms" => match value.parse::<u32>() {
            _ if value == LONG_MAX => {}
            Ok(ms @ 1..) if settings.fsync != 1 => {
                settings.fsync = 3;
                settings.fsync_interval_ms = ms;
            }
            _ => {
                return Err(format!(
                    "flush.ms={value}: 1..{} ms, and not with flush.messages=1",
                    u32::MAX
                ));
            }
        },
        _ => unreachable!("every settable name is matched"),
    }
    Ok(())
}

/// The list operations of IncrementalAlterConfigs on `cleanup.policy` (the one list config):
/// the resulting list must be a single policy.
pub fn list_op(current: &str, op: i8, value: &str) -> Result<String, String> {
    let mut list: Vec<&str> = current.split(',').filter(|s| !s.is_empty()).collect();
    let value = value.trim();
    match op {
        2 if !list.contains(&value) => list.push(value),
        2 => {}
        3 => list.retain(|v| *v != value),
        _ => return Err(format!("config operation {op}")),
    }
    match list[..] {
        [one] => Ok(one.to_string()),
        _ => Err(format!(
            "cleanup.policy would be [{}]; pagurus takes exactly one of delete, compact",
            list.join(",")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described() -> Vec<Entry> {
        let broker = BrokerConfig::default();
        let meta = TopicMeta::from_settings("t", &TopicSettings::default(), &broker.log).unwrap();
        describe_topic(&meta, &broker)
    }

    #[test]
    fn kafka_values_map_onto_settings() {
        let d = described();
        let mut s = TopicSettings::default();
        for (name, value) in [
            ("cleanup.policy", "compact"),
            ("retention.ms", "60000"),
            ("retention.bytes", "-1"),
            ("segment.bytes", "1048576"),
            ("flush.ms", "50"),
            ("compression.type", "producer"),
        ] {
            apply(&mut s, name, Some(value), true, &d).unwrap();
        }
        assert_eq!(
            (s.cleanup, s.retention_ms, s.retention_bytes),
            (1, 60_000, 0)
        );
        assert_eq!(
            (s.segment_bytes, s.fsync, s.fsync_interval_ms),
            (1 << 20, 3, 50)
        );
        apply(&mut s, "retention.ms", None, false, &d).unwrap();
        assert_eq!(s.retention_ms, 0);
    }

    #[test]
    fn what_pagurus_cannot_do_is_refused() {
        let d = described();
        let refused = [
            ("no.such.config", Some("1"), true),
            ("cleanup.policy", Some("compact,delete"), true),
            ("retention.ms", Some("0"), true),
            ("retention.bytes", Some("lots"), true),
            ("compression.type", Some("zstd"), true),
            ("segment.bytes", Some("1048576"), false),
            ("flush.messages", Some("1000"), true),
            ("min.insync.replicas", None, false),
        ];
        for (name, value, creating) in refused {
            let mut s = TopicSettings::default();
            assert!(
                apply(&mut s, name, value, creating, &d).is_err(),
                "{name}={value:?}"
            );
        }
        let mut s = TopicSettings::default();
        apply(&mut s, "flush.messages", Some("1"), true, &d).unwrap();
        assert!(apply(&mut s, "flush.ms", Some("10"), true, &d).is_err());
    }

    #[test]
    fn cleanup_policy_lists_must_end_as_one_policy() {
        assert_eq!(list_op("delete", 2, "delete").unwrap(), "delete");
        assert!(list_op("delete", 2, "compact").is_err());
        assert!(list_op("delete", 3, "delete").is_err());
        assert!(list_op("delete", 9, "delete").is_err());
    }
}
