//! Applying a scan's verdict to a segment's files (`storage::recovery` decides, this
//! module writes): the index rebuilt and synced before the WAL is cut, since the cut also
//! removes the WAL's index journal (`storage::index_journal`), then the index cut; and what
//! the scan reads of the files (the index up to its data, the hole before the journal's
//! region skipped). Called by `storage::open` for every segment that must be scanned.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use tracing::{info, warn};

use crate::storage::fs::{map, sync_dir};
use crate::storage::index::{ENTRY_LEN, IndexEntry};
use crate::storage::open::Recovered;
use crate::storage::recovery::{self, ScanOutcome};
use crate::storage::segment::{idx_path, wal_path};
use crate::storage::{LogConfig, StorageError};

/// Scans one segment and makes its files agree with the verdict: the WAL truncated to the
/// last good batch, the index holding exactly the good batches' entries. Both are synced
/// before the log is used, so a second crash cannot resurrect what was cut.
pub(crate) fn scan_and_repair(
    dir: &Path,
    base: u64,
    config: &LogConfig,
) -> Result<Recovered, StorageError> {
    let wal = wal_path(dir, base);
    let idx = idx_path(dir, base);
    let wal_file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&wal)
        .map_err(|e| StorageError::io(&wal, e))?;
    let wal_len = wal_file
        .metadata()
        .map_err(|e| StorageError::io(&wal, e))?
        .len();
    let idx_file = match OpenOptions::new().read(true).write(true).open(&idx) {
        Ok(file) => Some(file),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(StorageError::io(&idx, e)),
    };
    let idx_len = match &idx_file {
        Some(f) => f.metadata().map_err(|e| StorageError::io(&idx, e))?.len(),
        None => 0,
    };
    let outcome = {
        let wal_map = map(&wal_file, wal_len).map_err(|e| StorageError::io(&wal, e))?;
        let idx_bytes = match &idx_file {
            Some(f) => Some(read_index_data(f, idx_len).map_err(|e| StorageError::io(&idx, e))?),
            None => None,
        };
        let known_zeros = hole_before_region(&wal_file, wal_len);
        recovery::scan_sparse_segment(
            base,
            wal_map.as_deref().unwrap_or(&[]),
            idx_bytes.as_deref(),
            known_zeros,
            &config.limits,
        )
    };
    report(dir, base, wal_len, idx_file.is_some(), &outcome);

    let idx_exact = (outcome.entries.len() * ENTRY_LEN) as u64;
    let cut_wal = |wal_file: &File| {
        if outcome.wal_len_valid == wal_len {
            return Ok(());
        }
        wal_file
            .set_len(outcome.wal_len_valid)
            .and_then(|()| wal_file.sync_data())
            .map_err(|e| StorageError::io(&wal, e))
    };
    let fix_idx = !outcome.is_clean(wal_len) || idx_file.is_none() || idx_len != idx_exact;
    match idx_file {
        Some(file) if fix_idx => {
            // Entries first, the WAL cut second: the cut also removes the WAL's index
            // journal, which may be the only durable copy of entries rebuilt here.
            repair_index(&file, &idx, idx_len, &outcome.entries, || {
                cut_wal(&wal_file)
            })?;
            sync_dir(dir)?;
        }
        Some(_) => cut_wal(&wal_file)?,
        None => {
            // No index: cut the WAL first, or a crash before the new index is durable would
            // leave the cut bytes to be rebuilt and trusted (a missing slot is).
            cut_wal(&wal_file)?;
            let file = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&idx)
                .map_err(|e| StorageError::io(&idx, e))?;
            repair_index(&file, &idx, 0, &outcome.entries, || Ok(()))?;
            sync_dir(dir)?;
        }
    }
    Ok(Recovered {
        entries: outcome.entries.len(),
        size_bytes: outcome.wal_len_valid,
        next_offset: outcome.next_offset,
        was_cut: outcome.cut.is_some() || outcome.entries_dropped > 0,
    })
}

/// Makes the index file hold exactly `entries`: writes them over the old slots (unless they
/// are already its first bytes) and syncs, runs `between` (the WAL's cut), then cuts the
/// file to them and syncs again. A crash anywhere leaves every slot either as it was or as it
/// must be, never a kept entry zeroed (which the next scan would take for one that never
/// became durable).
fn repair_index(
    file: &File,
    path: &Path,
    len: u64,
    entries: &[IndexEntry],
    between: impl FnOnce() -> Result<(), StorageError>,
) -> Result<(), StorageError> {
    let io = |e| StorageError::io(path, e);
    let mut bytes = vec![0u8; entries.len() * ENTRY_LEN];
    for (slot, entry) in bytes.chunks_exact_mut(ENTRY_LEN).zip(entries) {
        entry.encode(slot);
    }
    // Usually the kept entries are already the file's first bytes (after kill -9 the index
    // only has extra slots): then cutting it is enough, and needs no free space, so a broker
    // can restart on a full disk.
    let mut head = vec![0u8; bytes.len()];
    let exact = bytes.len() as u64;
    let is_prefix = len >= exact && file.read_exact_at(&mut head, 0).is_ok() && head == bytes;
    if !is_prefix {
        file.write_all_at(&bytes, 0)
            .and_then(|()| file.sync_data())
            .map_err(io)?;
    }
    between()?;
    file.set_len(exact)
        .and_then(|()| file.sync_data())
        .map_err(io)
}

/// The hole that ends where a WAL of `len` bytes would hold its index journal's region
/// (`index_journal`): from the end of the last data extent before it. Empty when the file
/// system cannot tell holes from data.
fn hole_before_region(file: &File, len: u64) -> std::ops::Range<usize> {
    use nix::unistd::{Whence, lseek};
    let limit = len.saturating_sub(crate::storage::index_journal::REGION_BYTES);
    let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
    let mut data_end = 0i64;
    let mut at = 0i64;
    while at < limit_i {
        let data = match lseek(file, at, Whence::SeekData) {
            Ok(data) => data,
            Err(nix::errno::Errno::ENXIO) => break,
            // No SEEK_DATA here: nothing is known, every byte is read.
            Err(_) => return 0..0,
        };
        if data >= limit_i {
            break;
        }
        let Ok(hole) = lseek(file, data, Whence::SeekHole) else {
            return 0..0;
        };
        data_end = hole.min(limit_i);
        at = hole;
    }
    let start = usize::try_from(data_end).expect("a mapped file fits memory");
    let end = usize::try_from(limit).expect("a mapped file fits memory");
    start..end
}

/// The bytes of an index file up to the end of its last data extent. An active index is
/// sparse up to its capacity (8 MiB by default); past the data it holds only holes, which
/// read as empty slots, so they are not read. (Mapping them instead would, on tmpfs, allocate
/// every page of the hole on a read fault, and die with SIGBUS on a full file system.)
fn read_index_data(file: &File, len: u64) -> std::io::Result<Vec<u8>> {
    use nix::unistd::{Whence, lseek};
    let mut end = 0i64;
    let mut at = 0i64;
    loop {
        let data = match lseek(file, at, Whence::SeekData) {
            Ok(data) => data,
            Err(nix::errno::Errno::ENXIO) => break, // no data at or after `at`
            // No SEEK_DATA support: read it all.
            Err(nix::errno::Errno::EINVAL) => {
                end = i64::try_from(len).unwrap_or(i64::MAX);
                break;
            }
            Err(e) => return Err(e.into()),
        };
        end = lseek(file, data, Whence::SeekHole)?;
        at = end;
    }
    let end = u64::try_from(end).unwrap_or(0).min(len);
    let mut bytes = vec![0u8; usize::try_from(end).expect("index fits memory")];
    file.read_exact_at(&mut bytes, 0)?;
    Ok(bytes)
}

fn report(dir: &Path, base: u64, wal_len: u64, idx_exists: bool, outcome: &ScanOutcome) {
    if outcome.is_whole() && idx_exists {
        info!(
            dir = %dir.display(),
            base,
            batches = outcome.entries.len(),
            zero_tail_bytes = outcome.zero_tail_bytes,
            "segment scanned clean"
        );
        return;
    }
    warn!(
        dir = %dir.display(),
        base,
        kept_batches = outcome.entries.len(),
        kept_bytes = outcome.wal_len_valid,
        cut_bytes = wal_len - outcome.wal_len_valid,
        entries_rebuilt = outcome.entries_rebuilt,
        entries_dropped = outcome.entries_dropped,
        index_missing = !idx_exists,
        cut = ?outcome.cut,
        "segment repaired by recovery"
    );
}
