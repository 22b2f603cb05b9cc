//! Consumer group offsets: 256 shards, each an internal log on the core that owns it.
//!
//! A committed offset is keyed by (group, topic, partition), encoded without ambiguity as
//! `[u16 len][group][u16 len][topic][u32 partition]` (HermitMQ's `group:topic:partition`
//! string collides as soon as a name contains `:`; this cannot). The key picks a shard,
//! `fnv1a32(key) & 255` (fixed: it names the shard's directory), and the placement says
//! where shard `s` lives (`Placement::offsets_owner`; on one node core `s % cores`), in
//! `<data>/offsets/<s>/` as a partition log of the storage engine: every commit appends a
//! batch whose key is the encoded key and whose payload is `[u64 offset][u64 commit time ns]`,
//! followed by the commit's metadata string when it has one (Kafka's OffsetCommit carries
//! one; at most [`COMMIT_METADATA_BYTES_MAX`]), acknowledged per the broker's fsync policy.
//! A 16-byte payload (every commit before metadata was kept, and every commit without
//! one) is a commit with no metadata. The newest batch per key wins; at start each
//! shard is replayed into memory. Logs are opened on first use, so an idle broker does not
//! create 256 directories. Deleting a topic appends a tombstone (the key, an empty payload)
//! for each of its committed offsets, so they do not come back at the next start.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use crate::protocol::record::{self, BatchHeader, encode_batch};
use crate::protocol::routing::fnv1a32;
use crate::protocol::wire::{Put, Reader};
use crate::shard::ShardError;
use crate::storage::{LogConfig, PartitionLog, StorageError};

pub const SHARDS: usize = 256;
const OFFSETS_DIR: &str = "offsets";

/// Bytes of an offset record's payload before its metadata.
const VALUE_LEN: usize = 16;
/// Longest metadata string kept with a commit, as Kafka's `offset.metadata.max.bytes`.
pub const COMMIT_METADATA_BYTES_MAX: usize = 4096;

/// The shard of an encoded key. Which core serves the shard is the placement's answer.
pub fn shard_of(key: &[u8]) -> usize {
    (fnv1a32(key) & 255) as usize
}

/// Encodes (group, topic, partition) as an offsets key.
pub fn encode_key(group: &str, topic: &str, partition: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(8 + group.len() + topic.len());
    key.put_string(group.as_bytes());
    key.put_string(topic.as_bytes());
    key.put_u32(partition);
    key
}

/// Decodes an offsets key.
pub fn decode_key(key: &[u8]) -> Option<(String, String, u32)> {
    let mut r = Reader::new(key);
    let group = std::str::from_utf8(r.string("group").ok()?)
        .ok()?
        .to_string();
    let topic = std::str::from_utf8(r.string("topic").ok()?)
        .ok()?
        .to_string();
    let partition = r.u32("partition").ok()?;
    r.finish("key").ok()?;
    Some((group, topic, partition))
}

/// One committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    pub offset: u64,
    pub committed_at_ns: u64,
    /// The commit's metadata string ("" for none).
    pub metadata: String,
    /// Where the commit sits in the shard's log: of two commits to one key, the later in
    /// the log wins, whichever task resumes first after their shared fsync.
    log_offset: u64,
}

/// A shard's place in the store: empty until first opened.
type ShardSlot = Rc<RefCell<Option<OffsetShard>>>;

struct OffsetShard {
    log: Rc<PartitionLog>,
    latest: HashMap<Vec<u8>, Committed>,
}

/// The offset shards one core owns.
pub struct OffsetStore {
    data_dir: std::path::PathBuf,
    config: LogConfig,
    shards: RefCell<HashMap<usize, Rc<RefCell<Option<OffsetShard>>>>>,
    /// Single-flight for lazy opens: two first commits to one shard must not both open
    /// (and repair) its log. Opens are rare (once per shard), so one lock serves them all.
    opening: glommio::sync::Semaphore,
}

impl OffsetStore {
    /// `defaults` are the broker's log settings; internal logs use small segments
    /// (`segment_bytes`), so that compaction, which rewrites closed segments, keeps them small.
    pub fn new(data_dir: &Path, defaults: &LogConfig, segment_bytes: u64) -> OffsetStore {
        OffsetStore {
            data_dir: data_dir.to_path_buf(),
            config: LogConfig {
                segment_bytes,
                segment_age: Duration::from_secs(24 * 3600),
                index_entries: 64 * 1024,
                ..defaults.clone()
            },
            shards: RefCell::new(HashMap::new()),
            opening: glommio::sync::Semaphore::new(1),
        }
    }

    /// Opens the shards that exist on disk and are `here` (placed on this core).
    pub async fn load(&self, here: impl Fn(usize) -> bool) -> Result<(), StorageError> {
        let dir = self.data_dir.join(OFFSETS_DIR);
        if !dir.exists() {
            return Ok(());
        }
        for shard in (0..SHARDS).filter(|&s| here(s)) {
            if dir.join(shard.to_string()).exists() {
                self.shard(shard).await?;
            }
        }
        Ok(())
    }

    /// The shard, opened (and replayed) on first use.
    async fn shard(&self, shard: usize) -> Result<Rc<RefCell<Option<OffsetShard>>>, StorageError> {
        let slot = Rc::clone(self.shards.borrow_mut().entry(shard).or_default());
        if slot.borrow().is_some() {
            return Ok(slot);
        }
        let dir = self.data_dir.join(OFFSETS_DIR).join(shard.to_string());
        let _opening = self
            .opening
            .acquire_permit(1)
            .await
            .map_err(|e| StorageError::Io {
                path: dir.clone(),
                source: std::io::Error::other(e.to_string()),
            })?;
        // Another task opened it while this one waited for the lock.
        if slot.borrow().is_some() {
            return Ok(slot);
        }
        let log = PartitionLog::open(&dir, self.config.clone()).await?;
        let latest = replay(&log)?;
        *slot.borrow_mut() = Some(OffsetShard { log, latest });
        Ok(slot)
    }

    /// Stores an offset durably (per the fsync policy) and returns once acknowledged.
    pub async fn commit(
        &self,
        key: Vec<u8>,
        offset: u64,
        metadata: String,
    ) -> Result<(), ShardError> {
        if metadata.len() > COMMIT_METADATA_BYTES_MAX {
            return Err(ShardError::CommitMetadataTooLarge {
                bytes: metadata.len(),
                max: COMMIT_METADATA_BYTES_MAX,
            });
        }
        let slot = self.shard(shard_of(&key)).await?;
        let log = Rc::clone(&slot.borrow().as_ref().expect("opened").log);
        let committed_at_ns = crate::clock::now_ns();
        let mut value = Vec::with_capacity(VALUE_LEN + metadata.len());
        value.put_u64(offset);
        value.put_u64(committed_at_ns);
        value.extend_from_slice(metadata.as_bytes());
        let batch = encode_batch(committed_at_ns, &key, &value, 1);
        let ticket = log.stage(&batch, None).await?;
        log.commit(ticket).await?;
        // Visible only once durable (per the policy); the log order decides between
        // concurrent commits to one key.
        let committed = Committed {
            offset,
            committed_at_ns,
            metadata,
            log_offset: ticket.base_offset,
        };
        let mut guard = slot.borrow_mut();
        let shard = guard.as_mut().expect("opened");
        let newer = shard
            .latest
            .get(&key)
            .is_none_or(|old| old.log_offset < committed.log_offset);
        if newer {
            shard.latest.insert(key, committed);
        }
        Ok(())
    }

    /// Forgets every committed offset of `topic` in this core's shards (the topic was
    /// deleted): a tombstone per key is appended, and acknowledged per the fsync policy,
    /// before this returns. Returns how many offsets were forgotten.
    pub async fn forget_topic(&self, topic: &str) -> Result<usize, ShardError> {
        let slots: Vec<_> = self.shards.borrow().values().cloned().collect();
        let mut forgotten = 0;
        for slot in slots {
            let (log, keys) = {
                let guard = slot.borrow();
                let Some(shard) = guard.as_ref() else {
                    continue;
                };
                let keys: Vec<Vec<u8>> = shard
                    .latest
                    .keys()
                    .filter(|key| decode_key(key).is_some_and(|(_, t, _)| t == topic))
                    .cloned()
                    .collect();
                (Rc::clone(&shard.log), keys)
            };
            let now_ns = crate::clock::now_ns();
            let mut staged = Vec::with_capacity(keys.len());
            for key in keys {
                let ticket = log.stage(&encode_batch(now_ns, &key, &[], 1), None).await?;
                staged.push((key, ticket));
            }
            let Some(&(_, last)) = staged.last() else {
                continue;
            };
            log.commit(last).await?;
            // Gone once durable. A commit to one of these keys that landed after its
            // tombstone in the log stays (a consumer of the topic made again meanwhile).
            let mut guard = slot.borrow_mut();
            let shard = guard.as_mut().expect("opened");
            for (key, ticket) in &staged {
                if shard
                    .latest
                    .get(key)
                    .is_some_and(|c| c.log_offset < ticket.base_offset)
                {
                    shard.latest.remove(key);
                }
            }
            forgotten += staged.len();
        }
        Ok(forgotten)
    }

    pub async fn fetch(&self, key: &[u8]) -> Result<Option<Committed>, ShardError> {
        let shard = shard_of(key);
        let dir = self.data_dir.join(OFFSETS_DIR).join(shard.to_string());
        if !self.shards.borrow().contains_key(&shard) && !dir.exists() {
            return Ok(None);
        }
        let slot = self.shard(shard).await?;
        let guard = slot.borrow();
        Ok(guard.as_ref().and_then(|s| s.latest.get(key).cloned()))
    }

    /// Every (key, committed) in the shards of this core whose group is `group` (all groups
    /// when `None`).
    pub fn entries(&self, group: Option<&str>) -> Vec<(String, String, u32, Committed)> {
        let mut out = Vec::new();
        for slot in self.shards.borrow().values() {
            let guard = slot.borrow();
            let Some(shard) = guard.as_ref() else {
                continue;
            };
            for (key, committed) in &shard.latest {
                if let Some((g, topic, partition)) = decode_key(key)
                    && group.is_none_or(|want| want == g)
                {
                    out.push((g, topic, partition, committed.clone()));
                }
            }
        }
        out.sort_by(|a, b| (&a.0, &a.1, a.2).cmp(&(&b.0, &b.1, b.2)));
        out
    }

    /// Deletes every committed offset of this core's shards whose (group, topic, partition)
    /// matches: a tombstone (the key with an empty value) per key, durable before the key
    /// is forgotten. Returns how many went.
    pub async fn delete_matching(
        &self,
        matches: impl Fn(&str, &str, u32) -> bool,
    ) -> Result<u64, ShardError> {
        let mut doomed: Vec<(ShardSlot, Vec<u8>)> = Vec::new();
        for slot in self.shards.borrow().values() {
            let guard = slot.borrow();
            let Some(shard) = guard.as_ref() else {
                continue;
            };
            for key in shard.latest.keys() {
                if let Some((g, t, p)) = decode_key(key)
                    && matches(&g, &t, p)
                {
                    doomed.push((Rc::clone(slot), key.clone()));
                }
            }
        }
        let mut deleted = 0;
        for (slot, key) in doomed {
            let log = Rc::clone(&slot.borrow().as_ref().expect("opened").log);
            let at_ns = crate::clock::now_ns();
            let batch = encode_batch(at_ns, &key, &[], 1);
            let ticket = log.stage(&batch, None).await?;
            log.commit(ticket).await?;
            let mut guard = slot.borrow_mut();
            let shard = guard.as_mut().expect("opened");
            // A commit logged after the tombstone stands.
            if shard
                .latest
                .get(&key)
                .is_some_and(|c| c.log_offset < ticket.base_offset)
            {
                shard.latest.remove(&key);
                deleted += 1;
            }
        }
        Ok(deleted)
    }

    /// Every offset log this core has open.
    pub fn logs(&self) -> Vec<Rc<PartitionLog>> {
        self.shards
            .borrow()
            .values()
            .filter_map(|slot| slot.borrow().as_ref().map(|s| Rc::clone(&s.log)))
            .collect()
    }
}

/// Reads a whole offsets log into a map of the newest value per key.
fn replay(log: &PartitionLog) -> Result<HashMap<Vec<u8>, Committed>, StorageError> {
    let mut latest = HashMap::new();
    let mut offset = log.log_start_offset();
    let limits = log.config().limits;
    while offset < log.high_watermark() {
        let batches = match log.read(offset, 1 << 20) {
            Ok(batches) => batches,
            Err(StorageError::Corrupt {
                offset: bad,
                next_offset,
            }) => {
                // One damaged commit must not take every group of the shard down: the key's
                // previous commit (if any) stands.
                tracing::error!(dir = %log.dir().display(), offset = bad, next_offset, "offsets record damaged on disk; skipped");
                offset = next_offset.max(offset + 1);
                continue;
            }
            Err(e) => return Err(e),
        };
        let Some(last) = batches.last() else { break };
        offset = last.entry.next_offset();
        for batch in batches {
            let header = BatchHeader::decode(&batch.bytes, &limits)?;
            let value = record::payload_of(&batch.bytes, &header);
            if value.is_empty() {
                // A tombstone: the offset was deleted (its group or its topic was).
                latest.remove(record::key_of(&batch.bytes, &header));
                continue;
            }
            let metadata = value
                .get(VALUE_LEN..)
                .filter(|m| m.len() <= COMMIT_METADATA_BYTES_MAX)
                .and_then(|m| std::str::from_utf8(m).ok());
            let Some(metadata) = metadata else {
                tracing::warn!(
                    offset = header.offset,
                    "offsets record with a bad value; skipped"
                );
                continue;
            };
            let key = record::key_of(&batch.bytes, &header).to_vec();
            let committed = Committed {
                offset: u64::from_be_bytes(value[..8].try_into().expect("8")),
                committed_at_ns: u64::from_be_bytes(value[8..16].try_into().expect("8")),
                metadata: metadata.to_string(),
                log_offset: header.offset,
            };
            latest.insert(key, committed);
        }
    }
    Ok(latest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_unambiguous() {
        // With HermitMQ's "group:topic:partition" these two would be the same string.
        let a = encode_key("a:b", "c", 1);
        let b = encode_key("a", "b:c", 1);
        assert_ne!(a, b);
        assert_eq!(decode_key(&a), Some(("a:b".into(), "c".into(), 1)));
        assert_eq!(decode_key(&b), Some(("a".into(), "b:c".into(), 1)));
        assert!(shard_of(&a) < SHARDS);
    }
}
