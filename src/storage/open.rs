//! Opening a partition directory: which segments to trust, which to scan, what to repair.
//!
//! Two small files steer this:
//!
//! - `clean-shutdown`: written (and its directory synced) by [`PartitionLog::close`] after
//!   every segment was synced and the active index trimmed to its entries. When it is there,
//!   nothing is scanned. It is removed, and the removal made durable, *before* anything else
//!   happens, so a crash later can never be mistaken for a clean stop.
//! - `recovery-point`: two base offsets, `opened sealed`.
//!   - `opened`, the base of the active segment as of the last open. Every segment below it
//!     was sealed (synced, index trimmed) before that open; every segment at or above it
//!     may have been written since. Without the marker, exactly those segments are checked
//!     (recovery checks every segment written since the last clean shutdown, docs/STORAGE.md).
//!   - `sealed`: every segment below it is sealed *and durable*. A roll seals the old
//!     segment off the path of new batches (`storage::log::seal`) and moves `sealed` up
//!     once the seal's fdatasyncs are done. A closed segment at or above it may have lost
//!     any part of its tail to a power cut, so it is scanned and may be cut like the
//!     active segment; a closed segment below it is complete, so damage found in it is rot,
//!     and it is never cut (see `verify`).
//!
//!   A missing or unreadable file means "scan everything". A file with one number (written
//!   before seals left the roll's path, when every roll was durable before the next
//!   segment took batches) has `sealed` = infinity.
//!
//! A replicated partition's segments also have a `.raft` file each (`storage::raft_index`):
//! they are all checked before anything is repaired, orphans are removed, and a plain open
//! of a directory that has them is refused.
//!
//! A trusted segment still gets a cheap check (its `.idx` exists, and its `.wal` ends where
//! its last entry ends); if that fails it is scanned too.
//!
//! # A cut in the middle of the log
//!
//! Scanning can cut a segment that is not the last (a closed segment damaged on disk). The
//! log must stay a prefix of what was appended, with no gap, so the segments after the cut
//! cannot be served; they are not deleted either. They are moved to `quarantine/` inside the
//! partition directory, with an error logged naming them and their sizes, for an operator to
//! inspect. Nothing is ever silently dropped.
//!
//! [`PartitionLog::close`]: crate::storage::PartitionLog::close

use std::fs::{self, File};
use std::path::Path;

use tracing::{error, info, warn};

use crate::storage::fs::{self as fs_durable, create_dir_durable, map, sync_dir};
use crate::storage::index::ENTRY_LEN;
use crate::storage::raft_index::{self, Numbering};
use crate::storage::repair;
use crate::storage::segment::{self, Segment, idx_path, wal_path};
use crate::storage::verify::{self, Checks};
use crate::storage::{LogConfig, StorageError};

pub const CLEAN_MARKER: &str = "clean-shutdown";
pub const RECOVERY_POINT: &str = "recovery-point";
pub const QUARANTINE_DIR: &str = "quarantine";

/// What the `recovery-point` file says (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecoveryPoint {
    /// The active segment's base offset as of the last open.
    pub opened: u64,
    /// Every segment below this base offset is sealed and durable.
    pub sealed: u64,
}

impl RecoveryPoint {
    /// Nothing is known: every segment is scanned, and any may be cut.
    const NONE: RecoveryPoint = RecoveryPoint {
        opened: 0,
        sealed: 0,
    };
    /// After a clean shutdown: every segment was sealed and synced.
    const CLEAN: RecoveryPoint = RecoveryPoint {
        opened: u64::MAX,
        sealed: u64::MAX,
    };

    fn text(self) -> String {
        assert!(self.sealed >= self.opened, "{self:?}");
        format!("{} {}\n", self.opened, self.sealed)
    }

    fn parse(text: &str) -> Option<RecoveryPoint> {
        let mut fields = text.split_whitespace().map(str::parse::<u64>);
        let opened = fields.next()?.ok()?;
        let sealed = match fields.next() {
            Some(sealed) => sealed.ok()?,
            None => u64::MAX,
        };
        fields
            .next()
            .is_none()
            .then_some(RecoveryPoint { opened, sealed })
    }
}

/// What recovery found in one segment and left on disk.
pub(crate) struct Recovered {
    pub(crate) entries: usize,
    pub(crate) size_bytes: u64,
    pub(crate) next_offset: u64,
    /// The scan cut batches off this segment.
    pub(crate) was_cut: bool,
}

/// Opens every segment of the partition in `dir`, recovering as needed; the last returned
/// segment is active. Creates the directory and a first segment when there is none. Also
/// returns the recovery point written for this open (both bases at the active segment).
pub async fn open_segments(
    dir: &Path,
    config: &LogConfig,
    numbering: Numbering,
) -> Result<(Vec<Segment>, Checks, RecoveryPoint), StorageError> {
    create_dir_durable(dir)?;
    let marker = dir.join(CLEAN_MARKER);
    let clean = marker.exists();
    if clean {
        fs_durable::remove_file_durable(&marker)?;
    }
    let point = if clean {
        RecoveryPoint::CLEAN
    } else {
        read_recovery_point(dir)
    };
    crate::storage::compaction::finish_interrupted(dir)?;
    let bases = list_segments(dir)?;
    // Every segment's Raft index base is checked before anything is repaired: a damaged
    // replicated partition is refused as it was found (`storage::raft_index`).
    let raft_files = raft_index::remove_orphans(dir, &bases)?;
    match numbering {
        Numbering::Offsets => raft_index::refuse_plain_open(dir, &raft_files)?,
        Numbering::Raft { .. } => {
            for &base in &bases {
                raft_index::read(dir, base)?;
            }
        }
    }
    let mut checks = Checks::default();

    // First decide what survives, segment by segment, oldest first...
    let mut kept: Vec<(u64, Recovered)> = Vec::with_capacity(bases.len());
    for (i, &base) in bases.iter().enumerate() {
        if let Some((_, previous)) = kept.last()
            && base != previous.next_offset
        {
            // Each segment starts where the one before it ends (compaction keeps each
            // segment's last batch so this still holds). A gap or an overlap means a
            // segment before this one lost batches or is damaged.
            error!(dir = %dir.display(), base, previous_next = previous.next_offset, "segment does not continue the one before it");
            quarantine(dir, &bases[i..])?;
            break;
        }
        let closed = i + 1 < bases.len();
        let sealed = looks_sealed(dir, base, bases.get(i + 1).copied());
        let recovered = if closed && sealed && base >= point.opened && base < point.sealed {
            // Written since the last open, but durably sealed: damage is rot, not a torn
            // tail. It is checked now and never cut (see `verify`).
            check_closed(dir, base, &mut checks)?
        } else if base >= point.opened || !sealed {
            // A closed segment at or above `point.sealed` lands here too: its seal may not
            // have been durable when the power went, so its tail may be torn like the
            // active segment's, and it is cut at the first bad batch.
            repair::scan_and_repair(dir, base, config)?
        } else {
            let recovered = trusted(dir, base)?;
            checks.trust(base, recovered.size_bytes);
            recovered
        };
        glommio::yield_if_needed().await;
        let was_cut = recovered.was_cut;
        kept.push((base, recovered));
        if was_cut {
            quarantine(dir, &bases[i + 1..])?;
            break;
        }
    }
    // ...then open them: the last one is the active segment.
    let mut segments: Vec<Segment> = Vec::with_capacity(kept.len() + 1);
    let last = kept.len().saturating_sub(1);
    for (i, (base, recovered)) in kept.into_iter().enumerate() {
        if i < last {
            segments.push(Segment::open_sealed(dir, base)?);
        } else {
            let active = Segment::open_active(
                dir,
                base,
                recovered.next_offset,
                recovered.entries,
                recovered.size_bytes,
                (config.index_entries, segment::IndexLength::SyncNow),
                config.writer_setup(dir),
                None,
            )
            .await?;
            segments.push(active);
        }
    }
    if segments.is_empty() {
        if let Numbering::Raft { first_index } = numbering {
            // Durable before the segment's files are named (`storage::raft_index`).
            raft_index::write(dir, 0, first_index)?;
        }
        segments
            .push(Segment::create(dir, 0, config.index_entries, config.writer_setup(dir)).await?);
        sync_dir(dir)?;
    }
    if let Numbering::Raft { .. } = numbering {
        let bases: Vec<u64> = segments.iter().map(|s| s.base_offset).collect();
        let raft_bases = raft_index::load(dir, &bases, |i| segments[i].entries())?;
        for (segment, raft_base) in segments.iter_mut().zip(raft_bases) {
            segment.raft_base = Some(raft_base);
        }
    }
    let active_base = segments.last().expect("at least one segment").base_offset;
    // A process killed before its fdatasync leaves bytes in the page cache that the scan
    // above counts as stored. Sync them before anything is acknowledged on top of them: a
    // power cut would otherwise take them and leave a gap under acknowledged batches (the
    // next open would then quarantine everything after it). Found by tests/powerloss.rs.
    // That is the active segment, and every closed one whose seal was still running when
    // the process died (at or above `point.sealed`): the new recovery point vouches for them.
    for segment in segments
        .iter()
        .filter(|s| s.base_offset >= point.sealed.min(active_base))
    {
        let base = segment.base_offset;
        for path in [wal_path(dir, base), idx_path(dir, base)] {
            if path.exists() {
                fs::File::open(&path)
                    .and_then(|file| file.sync_data())
                    .map_err(|e| StorageError::io(&path, e))?;
            }
        }
    }
    let opened = RecoveryPoint {
        opened: active_base,
        sealed: active_base,
    };
    match write_recovery_point(dir, opened) {
        // The old recovery point stays, which is lower: the next start scans more, never
        // less. Refusing to start on a full disk would stop reads too.
        Err(StorageError::Io { path, source })
            if source.kind() == std::io::ErrorKind::StorageFull =>
        {
            warn!(path = %path.display(), error = %source, "recovery point not updated: no space");
        }
        other => other?,
    }
    Ok((segments, checks, opened))
}

/// Base offsets of the segments in `dir`, sorted. Removes index files that have no WAL
/// (a roll or a retention delete interrupted between the two unlinks).
pub(crate) fn list_segments(dir: &Path) -> Result<Vec<u64>, StorageError> {
    let mut wals = Vec::new();
    let mut idxs = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))? {
        let entry = entry.map_err(|e| StorageError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(base) = segment::parse_file_name(name, "wal") {
            wals.push(base);
        } else if let Some(base) = segment::parse_file_name(name, "idx") {
            idxs.push(base);
        }
    }
    wals.sort_unstable();
    for base in idxs {
        if wals.binary_search(&base).is_err() {
            let path = idx_path(dir, base);
            warn!(path = %path.display(), "removing an index without its WAL");
            fs::remove_file(&path).map_err(|e| StorageError::io(&path, e))?;
        }
    }
    Ok(wals)
}

/// A sealed segment passes the cheap check: its index exists, holds whole entries that
/// chain (each batch starts where the previous one ended in bytes, at or after where it
/// ended in offsets — compaction leaves gaps — with sane lengths and a running-maximum
/// timestamp), starts at or after the segment's base offset, and
/// the WAL ends exactly where the last entry does. This reads the index only, never the
/// WAL: bit rot in the WAL of a trusted segment is caught by the CRC on every read (and by
/// clients, which get each batch's CRC); rot in its index is caught here.
///
/// For a closed segment, `next_base` is the next segment's base offset, and the last entry
/// must end exactly there: otherwise a damaged record count in the last entry would pass.
fn looks_sealed(dir: &Path, base: u64, next_base: Option<u64>) -> bool {
    let (Ok(file), Ok(wal)) = (
        File::open(idx_path(dir, base)),
        fs::metadata(wal_path(dir, base)),
    ) else {
        return false;
    };
    let Ok(index) = crate::storage::index::Index::sealed(&file) else {
        return false;
    };
    let Ok(meta) = file.metadata() else {
        return false;
    };
    if meta.len() % ENTRY_LEN as u64 != 0 {
        return false;
    }
    let (mut offset, mut position, mut max_ts) = (base, 0u64, 0u64);
    for i in 0..index.len() {
        let e = index.get(i);
        if e.offset < offset
            || u64::from(e.position) != position
            || (e.length as usize) < crate::protocol::record::HEADER_LEN
            || e.records == 0
            || e.max_timestamp_ns < max_ts
        {
            return false;
        }
        offset = e.next_offset();
        position = e.end_position();
        max_ts = e.max_timestamp_ns;
    }
    position == wal.len() && next_base.is_none_or(|next| next == offset)
}

/// Opens a closed segment whose index chains, checking every batch against its entry. A
/// batch that fails is marked corrupt, never cut: everything after it stays served.
fn check_closed(dir: &Path, base: u64, checks: &mut Checks) -> Result<Recovered, StorageError> {
    let recovered = trusted(dir, base)?;
    let wal = wal_path(dir, base);
    let idx = idx_path(dir, base);
    let wal_file = File::open(&wal).map_err(|e| StorageError::io(&wal, e))?;
    let idx_file = File::open(&idx).map_err(|e| StorageError::io(&idx, e))?;
    let index =
        crate::storage::index::Index::sealed(&idx_file).map_err(|e| StorageError::io(&idx, e))?;
    let entries: Vec<_> = (0..index.len()).map(|i| index.get(i)).collect();
    // `looks_sealed` checked that the file is exactly as long as the entries say.
    let map = map(&wal_file, recovered.size_bytes).map_err(|e| StorageError::io(&wal, e))?;
    let bad = verify::check_segment(map.as_deref().unwrap_or(&[]), &entries);
    for (entry, mismatch) in &bad {
        if let verify::Mismatch::Timestamp { .. } = mismatch {
            // The bytes are intact; only a lookup by timestamp can be misled.
            warn!(dir = %dir.display(), segment = base, offset = entry.offset, %mismatch, "index timestamp damaged; the batch is served");
            continue;
        }
        checks.mark_corrupt(entry);
        error!(
            dir = %dir.display(),
            segment = base,
            offset = entry.offset,
            next_offset = entry.next_offset(),
            position = entry.position,
            %mismatch,
            "corrupt batch in a closed segment; kept on disk, not served"
        );
    }
    if bad.is_empty() {
        info!(dir = %dir.display(), base, batches = entries.len(), "closed segment checked clean");
    }
    Ok(recovered)
}

fn trusted(dir: &Path, base: u64) -> Result<Recovered, StorageError> {
    let path = idx_path(dir, base);
    let file = File::open(&path).map_err(|e| StorageError::io(&path, e))?;
    let index =
        crate::storage::index::Index::sealed(&file).map_err(|e| StorageError::io(&path, e))?;
    let last = index.last();
    Ok(Recovered {
        entries: index.len(),
        size_bytes: last.map_or(0, |e| e.end_position()),
        next_offset: last.map_or(base, |e| e.next_offset()),
        was_cut: false,
    })
}

/// Moves the given segments to `quarantine/` (see the module docs).
fn quarantine(dir: &Path, bases: &[u64]) -> Result<(), StorageError> {
    if bases.is_empty() {
        return Ok(());
    }
    // One directory per event: a later cut can reuse base offsets, and a rename onto an
    // existing name would silently replace what an earlier event kept.
    let target = dir
        .join(QUARANTINE_DIR)
        .join(crate::clock::now_ns().to_string());
    create_dir_durable(&target)?;
    for &base in bases {
        for path in [wal_path(dir, base), idx_path(dir, base)] {
            let Ok(meta) = fs::metadata(&path) else {
                continue;
            };
            let name = path.file_name().expect("segment files have names");
            fs::rename(&path, target.join(name)).map_err(|e| StorageError::io(&path, e))?;
            error!(path = %path.display(), bytes = meta.len(), "segment behind a damaged one moved to quarantine; it is not served");
        }
    }
    sync_dir(&target)?;
    sync_dir(dir)?;
    // Their Raft index files follow once the segments' moves are durable, so a segment
    // still in place never lacks its own (`storage::raft_index`).
    let mut moved = false;
    for &base in bases {
        let path = raft_index::raft_path(dir, base);
        if path.exists() {
            let name = path.file_name().expect("raft files have names");
            fs::rename(&path, target.join(name)).map_err(|e| StorageError::io(&path, e))?;
            moved = true;
        }
    }
    if moved {
        sync_dir(&target)?;
        sync_dir(dir)?;
    }
    Ok(())
}

/// What `recovery-point` in `dir` says (nothing known when it is missing or unreadable).
pub fn read_recovery_point(dir: &Path) -> RecoveryPoint {
    fs::read_to_string(dir.join(RECOVERY_POINT))
        .ok()
        .and_then(|text| RecoveryPoint::parse(&text))
        .unwrap_or(RecoveryPoint::NONE)
}

/// Replaces `recovery-point` durably (written aside, synced, renamed, directory synced), so
/// a power cut leaves the old point or the new one.
pub(crate) fn write_recovery_point(dir: &Path, point: RecoveryPoint) -> Result<(), StorageError> {
    fs_durable::write_file_durable(dir, RECOVERY_POINT, point.text().as_bytes())
}

/// [`write_recovery_point`] through the partition directory's descriptor, as a seal does:
/// blocking (the log calls it on the blocking pool), and into that directory even after
/// the topic was deleted and made again under its name.
pub fn write_recovery_point_in(dir: &File, point: RecoveryPoint) -> std::io::Result<()> {
    fs_durable::write_file_durable_in(dir, RECOVERY_POINT, point.text().as_bytes())
}

/// Writes the clean-shutdown marker; the caller syncs the directory.
pub fn write_clean_marker(dir: &Path) -> Result<(), StorageError> {
    let path = dir.join(CLEAN_MARKER);
    File::create(&path)
        .and_then(|f| f.sync_data())
        .map_err(|e| StorageError::io(&path, e))
}

#[cfg(test)]
mod tests {
    use super::RecoveryPoint;

    #[test]
    fn recovery_point_files_old_and_new() {
        let point = |opened, sealed| Some(RecoveryPoint { opened, sealed });
        assert_eq!(RecoveryPoint::parse("7 12\n"), point(7, 12));
        // Written before seals left the roll's path: every closed segment was durable.
        assert_eq!(RecoveryPoint::parse("7\n"), point(7, u64::MAX));
        for damaged in ["", "x", "7 x", "7 12 13", "-1 3"] {
            assert_eq!(RecoveryPoint::parse(damaged), None, "{damaged:?}");
        }
    }
}
