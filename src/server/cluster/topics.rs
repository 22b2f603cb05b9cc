//! A cluster node's topics follow the controller: a client's create or delete (on any
//! node) is proposed to the controller (`TopicController`), and every node makes what is
//! applied: the topics the controller placed that it lacks (with the partitions the
//! placement gives its cores), the deletions, and settings changes.
//!
//! A topic's settings cross the controller as a string map of the native settings
//! (`fsync`, `fsync.interval.ms`, `segment.bytes`, `retention.bytes`, `retention.ms`,
//! `cleanup`, their wire values; 0 is each node's default). Its id is derived from its
//! name and settings at creation (SHA-256), the same on every node; a settings change
//! carries the id as `topic.id` (32 hex digits), so a node that makes the topic only after
//! the change gives it the same id as the others.

use std::collections::BTreeMap;
use std::rc::{Rc, Weak};
use std::time::Instant;

use futures_lite::future::BoxedLocal;
use glommio::channels::local_channel::LocalReceiver;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use crate::cluster::controller::state::{Command, CommandError};
use crate::cluster::node::{PROPOSE_TIMEOUT, ProposeError, Proposer, TopicChange};
use crate::cluster::status::{ClusterView, PlacedTopic};
use crate::protocol::native::TopicSettings;
use crate::shard::members::{MemberChange, MemberChanged};
use crate::shard::topics::TopicMeta;
use crate::shard::{Shard, ShardError, TopicController};

/// The node's controller core's way to the cluster's controller.
pub(crate) struct ControllerTopics {
    pub(crate) proposer: Proposer,
    pub(crate) shard: Weak<Shard>,
    /// What a member change needs besides the proposer (`members`).
    pub(crate) members: super::members::Members,
}

impl TopicController for ControllerTopics {
    fn create(
        &self,
        meta: TopicMeta,
        replication_factor: u16,
        if_not_exists: bool,
    ) -> BoxedLocal<Result<(), ShardError>> {
        let (proposer, shard) = (self.proposer.clone(), self.shard.clone());
        Box::pin(async move {
            let name = meta.name.clone();
            let command = Command::CreateTopic {
                name: name.clone(),
                partitions: meta.partitions,
                replication_factor,
                settings: settings_map(&meta.settings()),
            };
            match proposer.propose(command).await {
                Ok(()) => {}
                Err(ProposeError::Refused(CommandError::TopicExists { .. })) if if_not_exists => {}
                Err(error) => return Err(failure(&name, error)),
            }
            // Answered once this node has made its part, so the client can use it here.
            made_here(&shard, &name, true).await
        })
    }

    fn alter(&self, meta: TopicMeta) -> BoxedLocal<Result<(), ShardError>> {
        let (proposer, shard) = (self.proposer.clone(), self.shard.clone());
        Box::pin(async move {
            let mut settings = settings_map(&meta.settings());
            settings.insert(ID_KEY.to_string(), format!("{:032x}", meta.id));
            let command = Command::SetTopicSettings {
                name: meta.name.clone(),
                settings,
            };
            proposer
                .propose(command)
                .await
                .map_err(|error| failure(&meta.name, error))?;
            // Answered once this node follows the new settings.
            settled_here(&shard, &meta).await
        })
    }

    fn delete(&self, name: String) -> BoxedLocal<Result<(), ShardError>> {
        let (proposer, shard) = (self.proposer.clone(), self.shard.clone());
        Box::pin(async move {
            proposer
                .propose(Command::DeleteTopic { name: name.clone() })
                .await
                .map_err(|error| failure(&name, error))?;
            made_here(&shard, &name, false).await
        })
    }

    fn change_member(&self, change: MemberChange) -> BoxedLocal<Result<MemberChanged, ShardError>> {
        let (proposer, members) = (self.proposer.clone(), self.members.clone());
        Box::pin(async move { members.change(&proposer, change).await })
    }
}

fn failure(name: &str, error: ProposeError) -> ShardError {
    match error {
        ProposeError::Refused(CommandError::TopicExists { .. }) => ShardError::TopicExists {
            topic: name.to_string(),
        },
        ProposeError::Refused(CommandError::UnknownTopic { .. }) => ShardError::UnknownTopic {
            topic: name.to_string(),
        },
        ProposeError::Refused(refused) => ShardError::invalid_config(refused.to_string()),
        other => ShardError::internal(format!("topic {name}: {other}")),
    }
}

/// Waits until this node has the topic (`present`) or no longer has it.
async fn made_here(shard: &Weak<Shard>, name: &str, present: bool) -> Result<(), ShardError> {
    let deadline = Instant::now() + PROPOSE_TIMEOUT;
    loop {
        let Some(shard) = shard.upgrade() else {
            return Err(ShardError::internal("the broker is stopping"));
        };
        if shard.topic(name).is_some() == present {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(ShardError::internal(format!(
                "topic {name}: applied by the controller but not yet made on this node"
            )));
        }
        drop(shard);
        glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Waits until this node's topic has `meta`'s settings.
async fn settled_here(shard: &Weak<Shard>, meta: &TopicMeta) -> Result<(), ShardError> {
    let deadline = Instant::now() + PROPOSE_TIMEOUT;
    let name = &meta.name;
    loop {
        let Some(shard) = shard.upgrade() else {
            return Err(ShardError::internal("the broker is stopping"));
        };
        match shard.topic(name) {
            Some(now) if now.settings() == meta.settings() => return Ok(()),
            Some(_) => {}
            None => return Err(shard.unknown_topic(name)),
        }
        if Instant::now() >= deadline {
            return Err(ShardError::internal(format!(
                "topic {name}: settings applied by the controller but not yet on this node"
            )));
        }
        drop(shard);
        glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
    }
}

/// Follows the controller's topics on this node until the driver stops.
pub(crate) async fn follow(
    shard: Rc<Shard>,
    view: std::sync::Arc<ClusterView>,
    changes: LocalReceiver<TopicChange>,
) {
    while let Some(change) = changes.recv().await {
        match change {
            // A deletion the controller applies again at a restart (its log replayed from
            // the last snapshot) must not delete a topic made again under that name since:
            // the view, published after the whole round, has it then.
            TopicChange::Deleted(name) if view.has_topic(&name) => {
                info!(topic = %name, "a deletion applied again at start; the topic made since is kept");
            }
            TopicChange::Deleted(name) => {
                if shard.topic(&name).is_some() {
                    match shard.remove_topic(&name).await {
                        Ok(()) => info!(topic = %name, "topic deleted by the controller"),
                        Err(error) => {
                            warn!(topic = %name, %error, "cannot delete a topic the controller deleted")
                        }
                    }
                }
            }
            TopicChange::Changed => {
                for (name, placed) in view.topics().iter() {
                    match shard.topic(name) {
                        None => make(&shard, name, placed).await,
                        Some(meta) => settle(&shard, &meta, placed).await,
                    }
                }
            }
        }
    }
}

/// Gives a topic this node has the controller's settings, when they differ.
async fn settle(shard: &Rc<Shard>, meta: &TopicMeta, placed: &PlacedTopic) {
    let settings = settings_of(&placed.settings, placed.owners.len());
    // Another partition count is another topic (one this node had before it joined).
    if meta.settings() == settings || meta.partitions as usize != placed.owners.len() {
        return;
    }
    let mut altered = match TopicMeta::from_settings(&meta.name, &settings, &shard.config.log) {
        Ok(altered) => altered,
        Err(error) => {
            warn!(topic = %meta.name, %error, "the controller's topic settings are refused here; the old ones stay");
            return;
        }
    };
    altered.id = meta.id;
    if let Err(error) = shard.apply_settings(altered).await {
        warn!(topic = %meta.name, %error, "cannot apply the controller's topic settings");
    }
}

async fn make(shard: &Rc<Shard>, name: &str, placed: &PlacedTopic) {
    let settings = settings_of(&placed.settings, placed.owners.len());
    let mut meta = match TopicMeta::from_settings(name, &settings, &shard.config.log) {
        Ok(meta) => meta,
        Err(error) => {
            warn!(topic = %name, %error, "the controller's topic has settings this node refuses; not made here");
            return;
        }
    };
    meta.id = topic_id(name, &placed.settings, placed.owners.len());
    let here = placed
        .owners
        .iter()
        .filter(|(node, _)| node.0 == shard.here().node.0)
        .count();
    match shard.install_topic(meta, true).await {
        Ok(()) => {
            info!(topic = %name, partitions = placed.owners.len(), here, "topic made as the controller placed it")
        }
        Err(error) => warn!(topic = %name, %error, "cannot make a topic the controller created"),
    }
}

/// The settings key that carries a topic's id once its settings changed.
const ID_KEY: &str = "topic.id";

const KEYS: [&str; 6] = [
    "fsync",
    "fsync.interval.ms",
    "segment.bytes",
    "retention.bytes",
    "retention.ms",
    "cleanup",
];

fn settings_map(s: &TopicSettings) -> BTreeMap<String, String> {
    let values = [
        u64::from(s.fsync),
        u64::from(s.fsync_interval_ms),
        s.segment_bytes,
        s.retention_bytes,
        s.retention_ms,
        u64::from(s.cleanup),
    ];
    KEYS.iter()
        .zip(values)
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn settings_of(map: &BTreeMap<String, String>, partitions: usize) -> TopicSettings {
    let get = |key: &str| {
        map.get(key)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    TopicSettings {
        partitions: u32::try_from(partitions).unwrap_or(u32::MAX),
        fsync: u8::try_from(get("fsync")).unwrap_or(0),
        fsync_interval_ms: u32::try_from(get("fsync.interval.ms")).unwrap_or(0),
        segment_bytes: get("segment.bytes"),
        retention_bytes: get("retention.bytes"),
        retention_ms: get("retention.ms"),
        cleanup: u8::try_from(get("cleanup")).unwrap_or(0),
    }
}

fn topic_id(name: &str, settings: &BTreeMap<String, String>, partitions: usize) -> u128 {
    if let Some(id) = settings
        .get(ID_KEY)
        .and_then(|id| u128::from_str_radix(id, 16).ok())
        .filter(|&id| id != 0)
    {
        return id;
    }
    let mut hash = Sha256::new();
    hash.update(b"pagurus cluster topic v1\0");
    hash.update(name.as_bytes());
    hash.update((partitions as u64).to_be_bytes());
    for (k, v) in settings {
        hash.update(k.as_bytes());
        hash.update(b"=");
        hash.update(v.as_bytes());
        hash.update(b"\0");
    }
    let digest = hash.finalize();
    let id = u128::from_be_bytes(digest[..16].try_into().expect("16 bytes"));
    id.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_cross_the_controller_unchanged() {
        let settings = TopicSettings {
            partitions: 12,
            fsync: 3,
            fsync_interval_ms: 50,
            segment_bytes: 1 << 20,
            retention_bytes: 7,
            retention_ms: 9,
            cleanup: 1,
        };
        assert_eq!(settings_of(&settings_map(&settings), 12), settings);
        let map = settings_map(&settings);
        assert_eq!(topic_id("t", &map, 12), topic_id("t", &map, 12));
        assert_ne!(topic_id("t", &map, 12), topic_id("u", &map, 12));
        // Once the settings changed, the id they carry is the topic's.
        let mut altered = map.clone();
        altered.insert(ID_KEY.into(), format!("{:032x}", topic_id("t", &map, 12)));
        altered.insert("retention.ms".into(), "1000".into());
        assert_eq!(topic_id("t", &altered, 12), topic_id("t", &map, 12));
        assert_eq!(settings_of(&altered, 12).retention_ms, 1000);
    }
}
