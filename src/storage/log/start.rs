//! A log start moved by a client (Kafka's DeleteRecords): every offset below it is gone
//! for readers, even inside a segment that still holds it. Retention deletes whole
//! segments, so the start it gives is always a segment base; a client may ask for any
//! offset up to the high watermark. That offset is kept in `log.start` in the partition
//! directory (written durably, temp file and rename, before it takes effect), read back
//! at open, and the log's start is the larger of it and the oldest segment's base.
//!
//! Readers see it through [`PartitionLog::log_start_offset`]: a fetch below it gets
//! `OffsetOutOfRange` with it as the earliest offset (Kafka, native and HermitMQ alike),
//! ListOffsets earliest answers it, and a time lookup never answers below it. Retention
//! deletes a closed segment once all of its batches are below it, whatever the topic's
//! limits; compaction rewrites segments but never the start.

use std::path::Path;

use tracing::{info, warn};

use super::PartitionLog;
use crate::storage::StorageError;

/// The file that keeps a moved log start.
pub const LOG_START_FILE: &str = "log.start";

/// The moved start kept in `dir`, or 0 (none, or unreadable: logged; 0 hides nothing).
pub(crate) fn read(dir: &Path) -> u64 {
    let path = dir.join(LOG_START_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => match text.trim().parse() {
            Ok(offset) => offset,
            Err(error) => {
                warn!(path = %path.display(), %error, "unreadable log start; records below it are visible again");
                0
            }
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => 0,
        Err(error) => {
            warn!(path = %path.display(), %error, "unreadable log start; records below it are visible again");
            0
        }
    }
}

impl PartitionLog {
    /// Moves the log start to `offset` (records below it are deleted for every reader), or
    /// to the high watermark for `None`. Durable before it takes effect. Returns the start
    /// after the move: unchanged when it was already at or past `offset`. An offset past
    /// the high watermark is `OffsetOutOfRange`.
    pub async fn delete_records_before(&self, offset: Option<u64>) -> Result<u64, StorageError> {
        // One move at a time: a smaller offset's file written after a larger one's would
        // bring records back at the next open.
        let _turn = self
            .start_lock
            .acquire_permit(1)
            .await
            .map_err(|_| StorageError::Closed)?;
        self.state.borrow().check_open()?;
        let high_watermark = self.high_watermark();
        let offset = offset.unwrap_or(high_watermark);
        let start = self.log_start_offset();
        if offset > high_watermark {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                earliest: start,
                latest: high_watermark,
            });
        }
        if offset <= start {
            return Ok(start);
        }
        let dir = self
            .dir_file
            .try_clone()
            .map_err(|e| StorageError::io(&self.dir, e))?;
        let text = format!("{offset}\n");
        glommio::executor()
            .spawn_blocking(move || {
                crate::storage::fs::write_file_durable_in(&dir, LOG_START_FILE, text.as_bytes())
            })
            .await
            .map_err(|e| StorageError::io(&self.dir.join(LOG_START_FILE), e))?;
        self.start_floor.set(offset);
        info!(dir = %self.dir.display(), log_start = offset, "records deleted below a new log start");
        Ok(self.log_start_offset())
    }

    /// The start a client moved the log to (0 if none).
    pub fn deleted_below(&self) -> u64 {
        self.start_floor.get()
    }

    /// True when the oldest closed segment holds only batches below the moved start, so
    /// retention should delete it whatever the topic's limits.
    pub fn has_segment_below_start(&self) -> bool {
        let floor = self.start_floor.get();
        floor > 0
            && self.with_segments(|segments| {
                segments
                    .closed()
                    .first()
                    .is_some_and(|s| s.last_entry().is_some_and(|e| e.next_offset() <= floor))
            })
    }
}
