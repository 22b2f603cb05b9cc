//! Retention: whole closed segments are deleted once the partition holds more bytes than
//! its limit, once everything in them is older than its age limit, or once every batch in
//! them is below the log start a client moved (`log::start`). The active segment is
//! never deleted; [`PartitionLog::roll_if_aged`] closes it when it grows old, so a topic
//! that receives little still expires.
//!
//! Deletion order keeps a crash harmless: the segment leaves the in-memory list first (a
//! reader planning a fetch from then on gets `OffsetOutOfRange` with the new earliest
//! offset, and a HermitMQ consumer skips forward), then its `.wal` is unlinked, then its
//! `.idx`, then the directory is synced. A crash between the unlinks leaves an index without
//! its WAL, which the next open removes. Descriptors already handed to a sendfile keep the
//! file readable until they are closed.

use std::time::Duration;

use tracing::info;

use crate::clock::now_ns;
use crate::storage::raft_index;
use crate::storage::segment::{idx_path, wal_path};
use crate::storage::{PartitionLog, StorageError};

/// Limits on what a partition keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Retention {
    /// Keep at most this many bytes of segments (the active one always stays).
    pub bytes_max: Option<u64>,
    /// Delete a closed segment once its newest batch timestamp is older than this.
    pub age_max: Option<Duration>,
}

/// What one retention pass deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionOutcome {
    pub segments_deleted: usize,
    pub bytes_deleted: u64,
    /// The log's first offset after the pass.
    pub log_start_offset: u64,
}

impl PartitionLog {
    /// Deletes the oldest closed segments that the limits no longer allow.
    pub async fn enforce_retention(
        &self,
        retention: &Retention,
    ) -> Result<RetentionOutcome, StorageError> {
        let now_ns = now_ns();
        let mut outcome = RetentionOutcome::default();
        let mut retired_bases = Vec::new();
        let age_max_ns = retention
            .age_max
            .map(|age| u64::try_from(age.as_nanos()).unwrap_or(u64::MAX));
        loop {
            let retired = self.retire_oldest_segment(|oldest, total_bytes| {
                let over_size = retention.bytes_max.is_some_and(|max| total_bytes > max);
                let newest_ns = oldest.last_entry().map_or(0, |e| e.max_timestamp_ns);
                let too_old = age_max_ns.is_some_and(|age| now_ns.saturating_sub(newest_ns) > age);
                // Every batch below the start a client moved the log to (DeleteRecords).
                let deleted = oldest
                    .last_entry()
                    .is_some_and(|e| e.next_offset() <= self.deleted_below());
                over_size || too_old || deleted
            });
            let Some((base, size)) = retired else { break };
            for path in [wal_path(self.dir(), base), idx_path(self.dir(), base)] {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(StorageError::io(&path, e)),
                }
            }
            retired_bases.push(base);
            outcome.segments_deleted += 1;
            outcome.bytes_deleted += size;
            info!(dir = %self.dir().display(), base_offset = base, bytes = size, "retention deleted a segment");
            glommio::yield_if_needed().await;
        }
        if outcome.segments_deleted > 0 {
            self.sync_dir().await?;
        }
        if self.is_raft_indexed() && !retired_bases.is_empty() {
            // Only now that the segments' removal is durable (`storage::raft_index`).
            let dir = self.dir().to_path_buf();
            glommio::executor()
                .spawn_blocking(move || raft_index::remove_after_segments(&dir, &retired_bases))
                .await?;
        }
        outcome.log_start_offset = self.log_start_offset();
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record::encode_batch;
    use crate::storage::{FsyncPolicy, LogConfig, StorageError};

    use crate::on_executor::run;

    #[test]
    fn size_and_age_limits_delete_exactly_the_oldest_closed_segments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        run(async move || {
            let config = LogConfig {
                segment_bytes: 1000,
                fsync: FsyncPolicy::Never,
                ..LogConfig::default()
            };
            let log = PartitionLog::open(&path, config).await.unwrap();
            // 10 batches of 229 bytes: 4 per segment (916 B) -> segments at 0, 4, 8.
            for i in 0..10u64 {
                log.append(&encode_batch(1_000 + i, b"", &[0; 200], 1), None)
                    .await
                    .unwrap();
            }
            let before = log.segments();
            assert_eq!(
                before.iter().map(|s| s.0).collect::<Vec<_>>(),
                vec![0, 4, 8]
            );

            // 2000 bytes allowed, 2290 held: the first segment (916 B) goes, then 1374 fit.
            let out = log
                .enforce_retention(&Retention {
                    bytes_max: Some(2000),
                    age_max: None,
                })
                .await
                .unwrap();
            assert_eq!(
                (
                    out.segments_deleted,
                    out.bytes_deleted,
                    out.log_start_offset
                ),
                (1, 916, 4)
            );
            assert!(!path.join("00000000000000000000.wal").exists());
            assert!(!path.join("00000000000000000000.idx").exists());
            assert!(matches!(
                log.read(0, 100),
                Err(StorageError::OffsetOutOfRange { earliest: 4, .. })
            ));
            assert_eq!(log.read(4, 100).unwrap()[0].entry.offset, 4);

            // Timestamps 1004.. are ancient: age deletes every closed segment, never the active.
            let out = log
                .enforce_retention(&Retention {
                    bytes_max: None,
                    age_max: Some(Duration::from_secs(1)),
                })
                .await
                .unwrap();
            assert_eq!((out.segments_deleted, out.log_start_offset), (1, 8));
            assert_eq!(log.segments().len(), 1);
            // Nothing more to do, and the log still takes appends.
            let out = log
                .enforce_retention(&Retention {
                    bytes_max: Some(1),
                    age_max: None,
                })
                .await
                .unwrap();
            assert_eq!(out.segments_deleted, 0);
            assert_eq!(
                log.append(&encode_batch(0, b"", b"x", 1), None)
                    .await
                    .unwrap()
                    .base_offset,
                10
            );
        });
    }
}
