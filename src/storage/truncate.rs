//! Cutting a partition log back to an offset: the tail a replica drops when its log
//! diverged from its leader's (batches of an older term that were never committed).
//!
//! [`PartitionLog::truncate_to`] closes the log, cuts its files ([`truncate_closed`]) and
//! opens it again. The cut works on a cleanly closed partition directory: there every
//! segment is trimmed and synced and each `.idx` holds exactly its segment's entries, so
//! the index alone says where each batch starts. It is a sequence of [`Step`]s, each
//! durable before the next begins:
//!
//! 1. `Prepare`: `recovery-point` moves down to the segment that holds the cut (the
//!    *holding* segment), then the clean-shutdown marker is removed. An open after a crash
//!    then scans the holding segment and every later one, and may cut them (a segment
//!    below `sealed` is never cut: damage there is rot, and everything after it would be
//!    quarantined).
//! 2. `DeleteSegment`, for each segment after the holding one, newest first: its `.wal`,
//!    its `.idx`, then a sync of the directory; in a replicated partition then its `.raft`
//!    and another sync (`storage::raft_index`). What is left on disk stays contiguous.
//! 3. `CutWal`: the holding segment's `.wal` is cut where the first dropped batch starts
//!    (fsync: the size is metadata).
//! 4. `CutIndex`: its `.idx` is cut to the entries before that batch (fsync).
//! 5. `MarkClean`: the clean-shutdown marker again, so the open that follows trusts the
//!    files (cheap checks) instead of scanning the holding segment.
//!
//! # A crash during a truncation
//!
//! | crash after | on disk | the next open |
//! |---|---|---|
//! | nothing | the log, closed cleanly | the whole log: nothing was cut |
//! | 1 | the whole log, not marked clean | scans the holding segment and later ones: the whole log |
//! | some of 2 | the segments up to some later one (a `.wal` whose `.idx` is gone is rebuilt from the WAL; an `.idx` without its `.wal` is removed) | the log up to that segment's end |
//! | some of 2, replicated partition | as above; the last deleted segment's `.raft` may be left, never a `.wal` without its `.raft` | removes the orphan `.raft`; as above |
//! | 3 | the holding `.wal` ends at the cut, its `.idx` is longer | drops the entries past the WAL's end: the log ends at the cut |
//! | 4 | the log ends at the cut, not marked clean | scans the holding segment: the log ends at the cut |
//! | 5 | done | the log ends at the cut |
//!
//! So a crash leaves a prefix of the log at least as long as the cut asked for: never a
//! gap, never a batch that was not in the log. Cutting again finishes it. A replica
//! decides again after a restart what its log must hold, so an unfinished cut is redone,
//! never trusted.
//!
//! [`PartitionLog::truncate_to`]: crate::storage::PartitionLog::truncate_to

use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};

use tracing::info;

use crate::storage::StorageError;
use crate::storage::fs::{remove_file_durable, sync_dir};
use crate::storage::index::{ENTRY_LEN, IndexEntry};
use crate::storage::open::{self, CLEAN_MARKER, RecoveryPoint};
use crate::storage::raft_index;
use crate::storage::segment::{idx_path, wal_path};

/// Why a log cannot be cut at an offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TruncateRefusal {
    #[error("the partition directory was not closed cleanly (open and close the log first)")]
    NotClosedCleanly,
    #[error("it is below the log start {log_start}")]
    BelowLogStart { log_start: u64 },
    #[error("it is past the log's end {next_offset}")]
    PastEnd { next_offset: u64 },
    /// Inside a batch, or in a gap compaction left: only a batch's first offset (or a
    /// segment's base) is a place to cut.
    #[error("no batch starts there (the nearest batch holds {batch_offset}..{batch_next})")]
    NotABatchStart { batch_offset: u64, batch_next: u64 },
    #[error("the index of segment {base_offset} is damaged ({reason})")]
    DamagedIndex {
        base_offset: u64,
        reason: &'static str,
    },
}

/// One durable step of a cut (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    Prepare { holding_base: u64 },
    DeleteSegment { base_offset: u64 },
    CutWal { base_offset: u64, position: u64 },
    CutIndex { base_offset: u64, entries: u64 },
    MarkClean,
}

/// Where a segment is cut to drop every batch from `offset` on: (WAL position, entries
/// kept). The segment's index has `len` entries, `entry(i)` each in order; `offset` is at
/// or above its base and below its end.
pub(crate) fn cut_point(
    base_offset: u64,
    len: usize,
    entry: impl Fn(usize) -> IndexEntry,
    offset: u64,
) -> Result<(u64, u64), TruncateRefusal> {
    debug_assert!(offset >= base_offset);
    if offset == base_offset {
        return Ok((0, 0));
    }
    // The first batch that ends past `offset`: it holds `offset`, or follows a gap.
    let (mut lo, mut hi) = (0, len);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if entry(mid).next_offset() <= offset {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    assert!(lo < len, "offset {offset} is inside the segment");
    let found = entry(lo);
    if found.offset == offset {
        Ok((u64::from(found.position), lo as u64))
    } else {
        Err(TruncateRefusal::NotABatchStart {
            batch_offset: found.offset,
            batch_next: found.next_offset(),
        })
    }
}

/// Cuts the cleanly closed partition log in `dir` so that it ends at `offset`: every batch
/// from `offset` on is gone, durably, when this returns. Nothing happens when the log
/// already ends there. Blocking: run it on the blocking pool.
pub fn truncate_closed(dir: &Path, offset: u64) -> Result<(), StorageError> {
    let steps = plan(dir, offset)?;
    apply(dir, &steps)?;
    if !steps.is_empty() {
        info!(dir = %dir.display(), offset, segments_deleted = steps.iter().filter(|s| matches!(s, Step::DeleteSegment { .. })).count(), "log truncated");
    }
    Ok(())
}

/// The steps that cut the log in `dir` at `offset`, in order; none if it ends there.
pub(crate) fn plan(dir: &Path, offset: u64) -> Result<Vec<Step>, StorageError> {
    let refused = |reason| StorageError::Truncate {
        dir: dir.to_path_buf(),
        offset,
        reason,
    };
    if !dir.join(CLEAN_MARKER).exists() {
        return Err(refused(TruncateRefusal::NotClosedCleanly));
    }
    let bases = open::list_segments(dir)?;
    let (Some(&first), Some(&last)) = (bases.first(), bases.last()) else {
        return Err(refused(TruncateRefusal::NotClosedCleanly));
    };
    let log_start = first.max(crate::storage::log::start_floor(dir));
    let last_entries = read_entries(dir, last).map_err(&refused)?;
    let next_offset = last_entries.last().map_or(last, IndexEntry::next_offset);
    if offset < log_start {
        return Err(refused(TruncateRefusal::BelowLogStart { log_start }));
    }
    if offset > next_offset {
        return Err(refused(TruncateRefusal::PastEnd { next_offset }));
    }
    if offset == next_offset {
        return Ok(Vec::new());
    }
    let holding = bases.partition_point(|&base| base <= offset) - 1;
    let holding_base = bases[holding];
    let entries = read_entries(dir, holding_base).map_err(&refused)?;
    let (position, kept) =
        cut_point(holding_base, entries.len(), |i| entries[i], offset).map_err(&refused)?;
    let mut steps = vec![Step::Prepare { holding_base }];
    steps.extend(
        bases[holding + 1..]
            .iter()
            .rev()
            .map(|&base_offset| Step::DeleteSegment { base_offset }),
    );
    steps.push(Step::CutWal {
        base_offset: holding_base,
        position,
    });
    steps.push(Step::CutIndex {
        base_offset: holding_base,
        entries: kept,
    });
    steps.push(Step::MarkClean);
    Ok(steps)
}

/// Runs `steps` in order, each durable before the next.
pub(crate) fn apply(dir: &Path, steps: &[Step]) -> Result<(), StorageError> {
    for step in steps {
        match *step {
            Step::Prepare { holding_base } => {
                let point = RecoveryPoint {
                    opened: holding_base,
                    sealed: holding_base,
                };
                open::write_recovery_point(dir, point)?;
                remove_file_durable(&dir.join(CLEAN_MARKER))?;
            }
            Step::DeleteSegment { base_offset } => {
                for path in [wal_path(dir, base_offset), idx_path(dir, base_offset)] {
                    match fs::remove_file(&path) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(StorageError::io(&path, e));
                        }
                        _ => {}
                    }
                }
                sync_dir(dir)?;
                // A replicated partition's `.raft` goes once the segment's removal is
                // durable (`storage::raft_index`).
                raft_index::remove_after_segments(dir, &[base_offset])?;
            }
            Step::CutWal {
                base_offset,
                position,
            } => cut_file(&wal_path(dir, base_offset), position)?,
            Step::CutIndex {
                base_offset,
                entries,
            } => cut_file(&idx_path(dir, base_offset), entries * ENTRY_LEN as u64)?,
            Step::MarkClean => {
                open::write_clean_marker(dir)?;
                sync_dir(dir)?;
            }
        }
    }
    Ok(())
}

/// Cuts the file at `path` to `len` bytes (never longer: asserted) and fsyncs it, then
/// reads its length back.
fn cut_file(path: &PathBuf, len: u64) -> Result<(), StorageError> {
    let io = |e| StorageError::io(path, e);
    let file = OpenOptions::new().write(true).open(path).map_err(io)?;
    let before = file.metadata().map_err(io)?.len();
    assert!(len <= before, "a cut never lengthens {}", path.display());
    file.set_len(len).map_err(io)?;
    file.sync_all().map_err(io)?;
    let after = file.metadata().map_err(io)?.len();
    assert_eq!(after, len, "{} was cut", path.display());
    Ok(())
}

/// The entries of a closed segment's `.idx`, read (not mapped: the file is about to be
/// cut) and checked to chain.
fn read_entries(dir: &Path, base_offset: u64) -> Result<Vec<IndexEntry>, TruncateRefusal> {
    let damaged = |reason| TruncateRefusal::DamagedIndex {
        base_offset,
        reason,
    };
    let bytes = fs::read(idx_path(dir, base_offset)).map_err(|_| damaged("unreadable"))?;
    if bytes.len() % ENTRY_LEN != 0 {
        return Err(damaged("not whole entries"));
    }
    let entries: Vec<IndexEntry> = bytes
        .chunks_exact(ENTRY_LEN)
        .map(IndexEntry::decode)
        .collect();
    let mut next = base_offset;
    for entry in &entries {
        if entry.offset < next || entry.records == 0 {
            return Err(damaged("entries do not follow each other"));
        }
        next = entry.next_offset();
    }
    Ok(entries)
}

#[cfg(test)]
mod tests;
