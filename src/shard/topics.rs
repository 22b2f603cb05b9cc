//! Topic metadata: what a topic is (partitions, durability, segment size, retention,
//! cleanup), how it is stored (`<data>/topics/<name>/topic.meta`), and the per-core registry.
//!
//! Core 0 is the controller: it alone creates and deletes topics, so two clients racing to
//! create the same topic cannot both win. Every core reads the metadata files at start and
//! learns of later changes from the controller over the mesh.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::protocol::native::TopicSettings;
use crate::storage::fs::{create_dir_durable, rename_durable, sync_dir, write_file_durable};
use crate::storage::{FsyncPolicy, LogConfig, SEGMENT_BYTES_MAX, StorageError};

/// File holding a topic's settings inside its directory.
pub const META_FILE: &str = "topic.meta";
/// Most partitions one topic may have.
pub const PARTITIONS_MAX: u32 = 4096;

/// How old data leaves a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleanup {
    Delete,
    Compact,
}

/// A topic's settings. Its name, id and partition count are fixed at creation; retention
/// and cleanup may be altered (`Shard::alter_topic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMeta {
    pub name: String,
    /// Random, never zero, new for every topic created (also one made again under the name of
    /// a deleted one): the topic's identity, kept in `topic.meta` (Kafka's topic id, a UUID).
    pub id: u128,
    pub partitions: u32,
    /// `None`: the broker's policy.
    pub fsync: Option<FsyncPolicy>,
    pub segment_bytes: u64,
    pub retention_bytes: Option<u64>,
    pub retention: Option<Duration>,
    pub cleanup: Cleanup,
}

/// Directory of all topics.
pub fn topics_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("topics")
}

/// Directory of one partition.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: u32) -> PathBuf {
    topics_dir(data_dir).join(topic).join(partition.to_string())
}

impl TopicMeta {
    /// Settings from a create request, defaults filled in from the broker's.
    pub fn from_settings(
        name: &str,
        settings: &TopicSettings,
        defaults: &LogConfig,
    ) -> Result<TopicMeta, String> {
        let invalid = |why: String| Err(why);
        let partitions = if settings.partitions == 0 {
            1
        } else {
            settings.partitions
        };
        if partitions > PARTITIONS_MAX {
            return invalid(format!("{partitions} partitions; at most {PARTITIONS_MAX}"));
        }
        let fsync = match settings.fsync {
            0 => None,
            1 => Some(FsyncPolicy::Always),
            2 => Some(FsyncPolicy::Never),
            3 if settings.fsync_interval_ms > 0 => Some(FsyncPolicy::Interval(
                Duration::from_millis(settings.fsync_interval_ms.into()),
            )),
            other => {
                return invalid(format!(
                    "fsync setting {other} (interval {} ms)",
                    settings.fsync_interval_ms
                ));
            }
        };
        let segment_bytes = if settings.segment_bytes == 0 {
            defaults.segment_bytes
        } else {
            settings.segment_bytes
        };
        if !(1..=SEGMENT_BYTES_MAX).contains(&segment_bytes) {
            return invalid(format!("segment bytes {segment_bytes}; must be 1 B..1 GiB"));
        }
        let cleanup = match settings.cleanup {
            0 => Cleanup::Delete,
            1 => Cleanup::Compact,
            other => return invalid(format!("cleanup policy {other}")),
        };
        Ok(TopicMeta {
            name: name.to_string(),
            id: 0,
            partitions,
            fsync,
            segment_bytes,
            retention_bytes: (settings.retention_bytes > 0).then_some(settings.retention_bytes),
            retention: (settings.retention_ms > 0)
                .then(|| Duration::from_millis(settings.retention_ms)),
            cleanup,
        })
    }

    /// The settings as they travel in metadata responses.
    pub fn settings(&self) -> TopicSettings {
        let (fsync, fsync_interval_ms) = match self.fsync {
            None => (0, 0),
            Some(FsyncPolicy::Always) => (1, 0),
            Some(FsyncPolicy::Never) => (2, 0),
            Some(FsyncPolicy::Interval(d)) => (3, u32::try_from(d.as_millis()).unwrap_or(u32::MAX)),
        };
        TopicSettings {
            partitions: self.partitions,
            fsync,
            fsync_interval_ms,
            segment_bytes: self.segment_bytes,
            retention_bytes: self.retention_bytes.unwrap_or(0),
            retention_ms: self
                .retention
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            cleanup: match self.cleanup {
                Cleanup::Delete => 0,
                Cleanup::Compact => 1,
            },
        }
    }

    /// The log settings of this topic's partitions. With an age limit, segments also roll
    /// at that age, so data leaves at most about twice the limit after it arrived.
    pub fn log_config(&self, defaults: &LogConfig) -> LogConfig {
        LogConfig {
            segment_bytes: self.segment_bytes,
            segment_age: self
                .retention
                .map_or(defaults.segment_age, |age| age.min(defaults.segment_age)),
            fsync: self.fsync.unwrap_or(defaults.fsync),
            ..defaults.clone()
        }
    }

    /// What retention keeps of each partition (`cleanup = compact` topics keep everything
    /// here; compaction bounds them instead).
    pub fn retention(&self) -> crate::storage::Retention {
        match self.cleanup {
            Cleanup::Delete => crate::storage::Retention {
                bytes_max: self.retention_bytes,
                age_max: self.retention,
            },
            Cleanup::Compact => crate::storage::Retention::default(),
        }
    }

    fn encode(&self) -> String {
        let s = self.settings();
        format!(
            "id={:032x}\npartitions={}\nfsync={}\nfsync_interval_ms={}\nsegment_bytes={}\nretention_bytes={}\nretention_ms={}\ncleanup={}\n",
            self.id,
            s.partitions,
            s.fsync,
            s.fsync_interval_ms,
            s.segment_bytes,
            s.retention_bytes,
            s.retention_ms,
            s.cleanup
        )
    }

    fn decode(name: &str, text: &str, defaults: &LogConfig) -> Option<TopicMeta> {
        let mut s = TopicSettings::default();
        let mut id = 0;
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let (key, value) = line.split_once('=')?;
            let value = value.trim();
            match key.trim() {
                "id" => id = u128::from_str_radix(value, 16).ok()?,
                "partitions" => s.partitions = value.parse().ok()?,
                "fsync" => s.fsync = value.parse().ok()?,
                "fsync_interval_ms" => s.fsync_interval_ms = value.parse().ok()?,
                "segment_bytes" => s.segment_bytes = value.parse().ok()?,
                "retention_bytes" => s.retention_bytes = value.parse().ok()?,
                "retention_ms" => s.retention_ms = value.parse().ok()?,
                "cleanup" => s.cleanup = value.parse().ok()?,
                _ => {}
            }
        }
        let mut meta = TopicMeta::from_settings(name, &s, defaults).ok()?;
        meta.id = id;
        Some(meta)
    }

    /// Writes the metadata file durably (temp file, fsync, rename, fsync directories).
    pub fn persist(&self, data_dir: &Path) -> Result<(), StorageError> {
        let topics = topics_dir(data_dir);
        let dir = topics.join(&self.name);
        create_dir_durable(&dir)?;
        write_file_durable(&dir, META_FILE, self.encode().as_bytes())?;
        sync_dir(&topics)
    }
}

/// Reads every topic's metadata. Directories without a readable `topic.meta` are reported
/// and skipped (a create that crashed before its rename).
pub fn load_all(data_dir: &Path, defaults: &LogConfig) -> Result<Vec<TopicMeta>, StorageError> {
    let topics = topics_dir(data_dir);
    // Durable in the data directory, and every topic entry in it durable too (a killed
    // earlier run may have made one and not fsynced `topics/`).
    create_dir_durable(&topics)?;
    sync_dir(&topics)?;
    let mut out = Vec::new();
    for entry in fs::read_dir(&topics).map_err(|e| StorageError::io(&topics, e))? {
        let entry = entry.map_err(|e| StorageError::io(&topics, e))?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if crate::limits::validate_name(name.as_bytes()).is_err() {
            continue;
        }
        let path = entry.path().join(META_FILE);
        match fs::read_to_string(&path)
            .ok()
            .and_then(|text| TopicMeta::decode(&name, &text, defaults))
        {
            // Written before topics had ids: given one now, durably, so it stays.
            Some(mut meta) if meta.id == 0 => {
                meta.id = new_topic_id()?;
                meta.persist(data_dir)?;
                tracing::info!(topic = %meta.name, id = %format_args!("{:032x}", meta.id), "topic given an id");
                out.push(meta);
            }
            Some(meta) => out.push(meta),
            None => {
                tracing::warn!(path = %path.display(), "topic directory without valid metadata; ignored")
            }
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// A fresh topic id: a random (version 4) UUID from the kernel's generator, never zero.
pub fn new_topic_id() -> Result<u128, StorageError> {
    use std::io::Read;
    let path = Path::new("/dev/urandom");
    let mut bytes = [0u8; 16];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| StorageError::io(path, e))?;
    // Version 4, variant 1 (RFC 9562): as Kafka's own ids look, and never all zero.
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    Ok(u128::from_be_bytes(bytes))
}

/// Removes a topic's directory: renamed into `<data>/trash/` first (atomic), then deleted,
/// so a crash midway never leaves a half-deleted topic that looks alive.
pub fn remove_topic_dir(data_dir: &Path, name: &str) -> Result<(), StorageError> {
    let dir = topics_dir(data_dir).join(name);
    if !dir.exists() {
        return Ok(());
    }
    let trash = data_dir.join("trash");
    create_dir_durable(&trash)?;
    let target = trash.join(format!("{name}.{}", crate::clock::now_ns()));
    // Durable in trash/ first, then gone from topics/: the deletion is acknowledged after
    // this, and a power cut can no longer bring the topic back.
    rename_durable(&dir, &target)?;
    // Not fsynced: what a power cut leaves of it stays in trash/, emptied at the next start.
    fs::remove_dir_all(&target).map_err(|e| StorageError::io(&target, e))
}

/// Deletes what a crash left in `<data>/trash/`: only entries named as
/// [`remove_topic_dir`] names them (`{topic}.{nanoseconds}`, a valid topic name and digits).
/// Anything else there is someone else's: it is left alone and logged, never deleted.
pub fn empty_trash(data_dir: &Path) {
    let trash = data_dir.join("trash");
    let Ok(entries) = fs::read_dir(&trash) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let ours = entry
            .file_name()
            .to_str()
            .is_some_and(is_trashed_topic_name);
        if !ours {
            tracing::warn!(path = %path.display(), "not deleting an entry of the trash that pagurus did not put there");
            continue;
        }
        if let Err(error) = fs::remove_dir_all(&path) {
            tracing::warn!(path = %path.display(), %error, "could not empty the trash");
        }
    }
}

/// `{topic}.{digits}`, as [`remove_topic_dir`] names a topic directory it moves to trash.
fn is_trashed_topic_name(name: &str) -> bool {
    let Some((topic, stamp)) = name.rsplit_once('.') else {
        return false;
    };
    !stamp.is_empty()
        && stamp.bytes().all(|b| b.is_ascii_digit())
        && crate::limits::validate_name(topic.as_bytes()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trash_keeps_what_pagurus_did_not_put_there() {
        let data = tempfile::tempdir().unwrap();
        let trash = data.path().join("trash");
        fs::create_dir_all(trash.join("orders.1764633600000000000/0")).unwrap();
        fs::create_dir_all(trash.join("important")).unwrap();
        fs::write(trash.join("important/thesis.txt"), b"years of work").unwrap();
        fs::write(trash.join("notes.txt"), b"mine").unwrap();
        empty_trash(data.path());
        assert!(!trash.join("orders.1764633600000000000").exists());
        assert_eq!(
            fs::read(trash.join("important/thesis.txt")).unwrap(),
            b"years of work"
        );
        assert_eq!(fs::read(trash.join("notes.txt")).unwrap(), b"mine");
    }

    #[test]
    fn meta_round_trips_through_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let defaults = LogConfig::default();
        let settings = TopicSettings {
            partitions: 3,
            fsync: 3,
            fsync_interval_ms: 20,
            segment_bytes: 1 << 20,
            retention_bytes: 1 << 30,
            retention_ms: 60_000,
            cleanup: 1,
        };
        let mut meta = TopicMeta::from_settings("t", &settings, &defaults).unwrap();
        meta.id = new_topic_id().unwrap();
        meta.persist(dir.path()).unwrap();
        assert_eq!(load_all(dir.path(), &defaults).unwrap(), vec![meta.clone()]);
        assert_eq!(meta.settings(), settings);
        remove_topic_dir(dir.path(), "t").unwrap();
        assert!(load_all(dir.path(), &defaults).unwrap().is_empty());
    }

    #[test]
    fn a_topic_written_before_ids_gets_one_that_stays() {
        let dir = tempfile::tempdir().unwrap();
        let defaults = LogConfig::default();
        let topic = topics_dir(dir.path()).join("old");
        fs::create_dir_all(&topic).unwrap();
        fs::write(topic.join(META_FILE), "partitions=2\ncleanup=1\n").unwrap();
        let first = load_all(dir.path(), &defaults).unwrap();
        assert_ne!(first[0].id, 0);
        assert_eq!(first[0].id >> 76 & 0xf, 4, "a version-4 UUID");
        assert_eq!(load_all(dir.path(), &defaults).unwrap(), first);
        assert_ne!(new_topic_id().unwrap(), new_topic_id().unwrap());
    }

    #[test]
    fn bad_settings_are_refused() {
        let defaults = LogConfig::default();
        let bad = [
            TopicSettings {
                partitions: PARTITIONS_MAX + 1,
                ..Default::default()
            },
            TopicSettings {
                fsync: 3,
                ..Default::default()
            },
            TopicSettings {
                fsync: 9,
                ..Default::default()
            },
            TopicSettings {
                segment_bytes: 2 << 30,
                ..Default::default()
            },
            TopicSettings {
                cleanup: 2,
                ..Default::default()
            },
        ];
        for settings in bad {
            let refused = TopicMeta::from_settings("t", &settings, &defaults);
            assert!(refused.is_err(), "{settings:?} was taken");
        }
    }
}
