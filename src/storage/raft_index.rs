//! The Raft index base of each segment of a replicated partition (`docs/REPLICATION.md`):
//! the Raft index of the segment's first batch, in `<base offset, 20 digits>.raft` next to
//! its `.wal` and `.idx`. The Raft index of index entry `i` of the segment is that base
//! plus `i`. A partition that is not replicated has no such files.
//!
//! # The file
//!
//! 20 bytes, little-endian: the magic `PRFT`, a `u32` version (1), the `u64` Raft index
//! base, and the CRC32C of the 16 bytes before it. It is written once, before the
//! segment's own files exist, through [`crate::storage::fs::write_file_durable_in`] (temp
//! file, fdatasync, rename, directory fsync), and never changed.
//!
//! # Why the order makes recovery simple
//!
//! The `.raft` is durable in its directory before the segment's `.wal` is even named
//! (made in place, or renamed from the spare), so after any crash a `.wal` of a
//! raft-indexed partition has its `.raft`. Removals go the other way round: a segment's
//! `.wal` and `.idx` go first, and its `.raft` only once their removal is durable (retention,
//! truncation, quarantine). So:
//!
//! | crash | on disk | the next open |
//! |---|---|---|
//! | while the `.raft` is written | maybe `<base>.raft.tmp`, maybe `<base>.raft`; no segment at `base` | removes both (a `.raft` without its `.wal` is an orphan) |
//! | after the `.raft`, before or while the segment's files are made | `<base>.raft`, maybe an `.idx` without a `.wal` | removes them all; the previous segment is still the active one |
//! | after the segment's files | the segment and its `.raft` | as any segment |
//! | removing a segment, after its `.wal` and `.idx` | its `.raft` alone | removes the orphan |
//!
//! A `.wal` of a raft-indexed partition without its `.raft`, or with one that does not
//! decode (magic, version, CRC, or a base that does not follow the segment before), is
//! damage: opening the partition fails with [`StorageError::Damaged`] naming the file,
//! and nothing is guessed. A plain open of a directory that holds `.raft` files fails the
//! same way (a replicated partition opened as a plain one would roll segments without
//! them).

use std::fs::{self, File};
use std::path::{Path, PathBuf};

use tracing::warn;

use crate::storage::StorageError;
use crate::storage::fs::{sync_dir, write_file_durable_in};
use crate::storage::segment;

/// How a partition numbers its batches besides offsets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    /// Offsets only: no `.raft` files (every partition that is not replicated).
    Offsets,
    /// Every segment has a `.raft` file; a new partition's first batch gets `first_index`
    /// (ignored when the partition already has segments: their files say).
    Raft { first_index: u64 },
}

const MAGIC: [u8; 4] = *b"PRFT";
const VERSION: u32 = 1;
/// Bytes of a `.raft` file.
pub const FILE_LEN: usize = 20;
/// Extension of the file.
const EXT: &str = "raft";

/// File name of a segment's Raft index base.
pub fn raft_path(dir: &Path, base_offset: u64) -> PathBuf {
    dir.join(file_name(base_offset))
}

fn file_name(base_offset: u64) -> String {
    format!("{base_offset:020}.{EXT}")
}

/// The file's bytes for `raft_base`.
pub fn encode(raft_base: u64) -> [u8; FILE_LEN] {
    let mut out = [0u8; FILE_LEN];
    out[0..4].copy_from_slice(&MAGIC);
    out[4..8].copy_from_slice(&VERSION.to_le_bytes());
    out[8..16].copy_from_slice(&raft_base.to_le_bytes());
    let crc = crc32c::crc32c(&out[..16]);
    out[16..20].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The Raft index base in a file's bytes, or why they are not one.
pub fn decode(bytes: &[u8]) -> Result<u64, String> {
    if bytes.len() != FILE_LEN {
        return Err(format!("{} bytes, not {FILE_LEN}", bytes.len()));
    }
    let crc = u32::from_le_bytes(bytes[16..20].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..16]) != crc {
        return Err("CRC mismatch".to_string());
    }
    if bytes[0..4] != MAGIC {
        return Err("bad magic".to_string());
    }
    let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(format!("unknown version {version}"));
    }
    Ok(u64::from_le_bytes(
        bytes[8..16].try_into().expect("8 bytes"),
    ))
}

/// Writes segment `base_offset`'s `.raft` durably through the partition directory's
/// descriptor (see [`write_file_durable_in`]). Blocking.
pub fn write_in(dir: &File, base_offset: u64, raft_base: u64) -> std::io::Result<()> {
    write_file_durable_in(dir, &file_name(base_offset), &encode(raft_base))
}

/// [`write_in`] by path, for the first segment of a new partition. Blocking.
pub fn write(dir: &Path, base_offset: u64, raft_base: u64) -> Result<(), StorageError> {
    crate::storage::fs::write_file_durable(dir, &file_name(base_offset), &encode(raft_base))
}

/// Reads segment `base_offset`'s Raft index base; a missing or damaged file is `Damaged`.
pub fn read(dir: &Path, base_offset: u64) -> Result<u64, StorageError> {
    let path = raft_path(dir, base_offset);
    let damaged = |reason: String| StorageError::Damaged {
        path: path.clone(),
        reason: format!("Raft index base of segment {base_offset}: {reason}"),
    };
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(damaged(
                "missing (a replicated partition's segment always has one)".to_string(),
            ));
        }
        Err(e) => return Err(StorageError::io(&path, e)),
    };
    decode(&bytes).map_err(damaged)
}

/// Removes the `.raft` files (and leftover temp files) of segments that have no `.wal`
/// (`wals`: the segments' base offsets, sorted), each removal durable, and returns the
/// base offsets of the `.raft` files left.
pub(crate) fn remove_orphans(dir: &Path, wals: &[u64]) -> Result<Vec<u64>, StorageError> {
    let mut kept = Vec::new();
    let mut removed = false;
    for entry in fs::read_dir(dir).map_err(|e| StorageError::io(dir, e))? {
        let entry = entry.map_err(|e| StorageError::io(dir, e))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let base = segment::parse_file_name(name, EXT);
        let tmp = name
            .strip_suffix(".tmp")
            .and_then(|n| segment::parse_file_name(n, EXT));
        let orphan = match (base, tmp) {
            (Some(base), _) if wals.binary_search(&base).is_ok() => {
                kept.push(base);
                false
            }
            (Some(_), _) | (None, Some(_)) => true,
            (None, None) => false,
        };
        if orphan {
            let path = entry.path();
            warn!(path = %path.display(), "removing a Raft index file without its segment");
            fs::remove_file(&path).map_err(|e| StorageError::io(&path, e))?;
            removed = true;
        }
    }
    if removed {
        sync_dir(dir)?;
    }
    kept.sort_unstable();
    Ok(kept)
}

/// The Raft index bases of the segments at `bases` (sorted), checked: each file is there
/// and whole (`read`), and each segment's numbering starts at or after where the previous
/// one's could end (`entries`: each segment's index entries as the scan kept them;
/// compaction only lowers them).
pub(crate) fn load(
    dir: &Path,
    bases: &[u64],
    entries: impl Fn(usize) -> usize,
) -> Result<Vec<u64>, StorageError> {
    let mut raft_bases: Vec<u64> = Vec::with_capacity(bases.len());
    for (i, &base) in bases.iter().enumerate() {
        let raft_base = read(dir, base)?;
        if let Some(&previous) = raft_bases.last() {
            let previous_end = previous.saturating_add(entries(i - 1) as u64);
            if raft_base < previous_end {
                return Err(StorageError::Damaged {
                    path: raft_path(dir, base),
                    reason: format!(
                        "Raft index base {raft_base} of segment {base} is inside the previous segment's indices (it ends at {previous_end})"
                    ),
                });
            }
        }
        raft_bases.push(raft_base);
    }
    Ok(raft_bases)
}

/// Refuses a plain open of a directory that holds `.raft` files (see the module docs).
pub(crate) fn refuse_plain_open(dir: &Path, raft_files: &[u64]) -> Result<(), StorageError> {
    match raft_files.first() {
        None => Ok(()),
        Some(&base) => Err(StorageError::Damaged {
            path: raft_path(dir, base),
            reason: "the partition is replicated (it has Raft index files) and was opened as a plain one".to_string(),
        }),
    }
}

/// Removes the `.raft` files of segments whose `.wal` and `.idx` are gone, once that is
/// durable (the caller synced the directory), and syncs the directory if any was there.
pub(crate) fn remove_after_segments(dir: &Path, bases: &[u64]) -> Result<(), StorageError> {
    let mut removed = false;
    for &base in bases {
        let path = raft_path(dir, base);
        match fs::remove_file(&path) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(StorageError::io(&path, e)),
        }
    }
    if removed {
        sync_dir(dir)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
