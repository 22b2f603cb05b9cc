//! Storage engine: segmented, CRC-checked, group-committed partition logs.
//!
//! - [`index`]: the 32-byte mmapped index entry and its lookups.
//! - [`segment`]: one `.wal` + `.idx` pair, active or sealed.
//! - [`log`]: the partition log: offsets, group commit, read plans.
//! - [`recovery`]: the sans-IO segment scanner that decides what survives a crash.
//! - [`retention`]: deleting whole closed segments by size and age.
//! - [`compaction`]: rewriting closed segments to the newest batch per key, crash-safely.
//! - [`open`]: opening a partition directory: markers, scanning, repair, quarantine.
//! - [`raft_index`]: the per-segment Raft index base of a replicated partition.
//! - [`fs`]: durable file-system steps (sync a directory, replace a file atomically).
//! - [`verify`]: checking bytes read from disk before they are served; corrupt batches.
//! - [`watch`] (re-exported from `crate::watch`): the wake-up signal group commit and
//!   long-polls wait on.
//!
//! The on-disk layout is documented in `docs/STORAGE.md`.

pub mod compaction;
pub mod epochs;
pub mod fs;
pub mod index;
pub mod index_journal;
pub mod log;
pub mod marker;
pub mod open;
pub mod raft_index;
pub mod recovery;
mod repair;
pub mod retention;
pub mod segment;
pub mod truncate;
pub mod verify;
// The signal moved to `crate::watch` (the client uses it too); re-exported for storage.
pub use crate::watch;

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use crate::limits::Limits;
use crate::protocol::record::RecordError;

pub use compaction::{CompactionLimits, CompactionOutcome};
pub use log::{AppendAck, LogStats, PartitionLog, ReadPlan, StoredBatch, Ticket};
pub use retention::{Retention, RetentionOutcome};

/// When appends are made durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Acknowledge only after an fdatasync covering the batch (`.wal` and `.idx`).
    Always,
    /// Acknowledge once written to the page cache; fdatasync at most this long after.
    Interval(Duration),
    /// Acknowledge once written to the page cache; the kernel writes back when it likes.
    Never,
}

impl FromStr for FsyncPolicy {
    type Err = String;

    /// `always`, `never`, or `interval=MS`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "always" => Ok(FsyncPolicy::Always),
            "never" => Ok(FsyncPolicy::Never),
            _ => {
                let ms = s
                    .strip_prefix("interval=")
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .filter(|&ms| ms > 0)
                    .ok_or_else(|| {
                        format!(
                            "fsync policy must be always, never or interval=MS (MS > 0), not {s:?}"
                        )
                    })?;
                Ok(FsyncPolicy::Interval(Duration::from_millis(ms)))
            }
        }
    }
}

impl std::fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FsyncPolicy::Always => write!(f, "always"),
            FsyncPolicy::Never => write!(f, "never"),
            FsyncPolicy::Interval(d) => write!(f, "interval={}", d.as_millis()),
        }
    }
}

/// Largest segment: positions in index entries are 32-bit, and one batch may overshoot the
/// limit by up to the largest batch.
pub const SEGMENT_BYTES_MAX: u64 = 1 << 30;

/// Settings of one partition log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll the active segment before it would exceed this.
    pub segment_bytes: u64,
    /// Roll the active segment once it has been open this long (and holds data).
    pub segment_age: Duration,
    /// Index slots per segment; the segment rolls when they are used up.
    pub index_entries: u32,
    pub fsync: FsyncPolicy,
    pub limits: Limits,
    /// Under `always`, a round that runs alone fdatasyncs the `.wal` alone, its index
    /// entries copied into the `.wal`'s index journal (`index_journal`). Off: every round
    /// fdatasyncs both files (tests of two-file rounds; comparisons).
    pub index_journal: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_bytes: 256 * 1024 * 1024,
            segment_age: Duration::from_secs(7 * 24 * 3600),
            index_entries: 256 * 1024,
            fsync: FsyncPolicy::Always,
            limits: Limits::default(),
            index_journal: true,
        }
    }
}

impl LogConfig {
    /// Commit rounds that may be in flight at once, and so pairs of descriptors the active
    /// segment keeps for their fdatasyncs: overlapping rounds only under `always` (the
    /// other policies do not fdatasync per round).
    pub(crate) fn sync_slots(&self) -> usize {
        match self.fsync {
            FsyncPolicy::Always => log::ROUNDS_IN_FLIGHT_MAX,
            _ => 1,
        }
    }

    /// How the active segment of a log in `dir` writes: its sync slots, and under `always`
    /// (not on tmpfs, where nothing is flushed) the index journal of a single-flush round
    /// (`index_journal`).
    pub(crate) fn writer_setup(&self, dir: &std::path::Path) -> segment::WriterSetup {
        let tmpfs = fs::is_tmpfs(dir);
        segment::WriterSetup {
            sync_slots: self.sync_slots(),
            journal: (self.index_journal && self.fsync == FsyncPolicy::Always && !tmpfs)
                .then_some(self.segment_bytes),
        }
    }

    pub fn validate(&self) -> Result<(), StorageError> {
        let bad = |reason: &str| {
            Err(StorageError::Config {
                reason: reason.to_string(),
            })
        };
        if self.segment_bytes == 0 || self.segment_bytes > SEGMENT_BYTES_MAX {
            return bad("segment_bytes must be in 1..=1 GiB");
        }
        // The index keeps a batch's length in 31 bits (the top bit is its format).
        if self.limits.max_payload_bytes
            + self.limits.max_key_bytes
            + crate::protocol::record::HEADER_LEN as u64
            > u64::from(u32::MAX) / 2
        {
            return bad("max payload plus max key must stay under 2 GiB");
        }
        if self.index_entries == 0 || self.index_entries > 1 << 24 {
            return bad("index_entries must be in 1..=16777216");
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("I/O error on {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("bad batch: {0}")]
    BadBatch(#[from] RecordError),
    /// The top bit of a batch's record count marks Raft's own entries
    /// (`index::CONTROL_BIT`); a client's batch never carries it.
    #[error("a batch's record count must be below 2^31, not {record_count}")]
    RecordCount { record_count: u32 },
    /// Control batches (Raft's own entries) belong in a replicated partition's log only.
    #[error("control batches are stored only in a replicated partition's log")]
    NotReplicated,
    #[error("batch header says {header_bytes} bytes but {given_bytes} were given")]
    BatchLength {
        header_bytes: usize,
        given_bytes: usize,
    },
    #[error("offset {requested} is out of range; the log holds {earliest}..{latest}")]
    OffsetOutOfRange {
        requested: u64,
        earliest: u64,
        latest: u64,
    },
    #[error("offsets would overflow u64")]
    OffsetOverflow,
    #[error("the write failed ({kind}); the batch was not stored")]
    WriteFailed { kind: std::io::ErrorKind },
    #[error("partition fenced ({reason}); restart the broker to recover it")]
    Fenced { reason: String },
    /// A stored batch disagrees with its index entry (CRC, header, or past the file's end).
    /// It is not served; `offset..next_offset` are its offsets.
    #[error("batch at offsets {offset}..{next_offset} is damaged on disk and is not served")]
    Corrupt { offset: u64, next_offset: u64 },
    #[error("the partition is closed")]
    Closed,
    #[error("bad storage configuration: {reason}")]
    Config { reason: String },
    #[error("{path} is damaged: {reason}")]
    Damaged { path: PathBuf, reason: String },
    #[error("cannot truncate {dir} to offset {offset}: {reason}")]
    Truncate {
        dir: PathBuf,
        offset: u64,
        reason: truncate::TruncateRefusal,
    },
}

impl StorageError {
    pub fn io(path: &Path, source: std::io::Error) -> StorageError {
        StorageError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fsync_policy_parses() {
        assert_eq!("always".parse(), Ok(FsyncPolicy::Always));
        assert_eq!("never".parse(), Ok(FsyncPolicy::Never));
        assert_eq!(
            "interval=5".parse(),
            Ok(FsyncPolicy::Interval(Duration::from_millis(5)))
        );
        assert!("interval=0".parse::<FsyncPolicy>().is_err());
        assert!("sometimes".parse::<FsyncPolicy>().is_err());
        assert_eq!(
            FsyncPolicy::Interval(Duration::from_millis(7)).to_string(),
            "interval=7"
        );
    }
}
