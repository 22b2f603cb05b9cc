//! Durable file-system steps: each function makes one change to the directory tree and
//! says what a power cut at any instant inside it can leave behind.
//!
//! POSIX makes a new, renamed or removed directory entry durable only once its parent
//! directory is fsynced; a file's bytes only once the file is. Everything the broker
//! depends on goes through these functions so that rule is kept in one place.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use memmap2::Mmap;

use crate::storage::StorageError;

/// fsyncs a directory, making new, renamed and removed entries in it durable.
///
/// Power cut: before it returns, any entry change made since the last sync of `dir` may or
/// may not have reached the disk (each one whole: a name is old or new, never torn).
pub fn sync_dir(dir: &Path) -> Result<(), StorageError> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StorageError::io(dir, e))
}

/// Creates `dir` and any missing parents, fsyncing each parent after an entry is added to
/// it, so the new directories survive a crash (a partition created, acknowledged, and then
/// lost with its directory entry would lose acknowledged data).
///
/// Power cut: a prefix of the missing directories exists afterwards (each empty); calling
/// this again finishes the job.
pub fn create_dir_durable(dir: &Path) -> Result<(), StorageError> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_durable(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(()),
        Err(e) => return Err(StorageError::io(dir, e)),
    }
    match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Replaces `dir/name` with `contents` atomically and durably: writes `dir/name.tmp`,
/// fdatasyncs it, renames it over `dir/name`, and fsyncs `dir`. On an error the temp file
/// is removed (best effort) and `dir/name` is as it was.
///
/// Power cut: `dir/name` holds either its old contents (or is missing, if it was) or all
/// of `contents`, never a mix; a stale `dir/name.tmp` may be left, which the next call
/// replaces.
pub fn write_file_durable(dir: &Path, name: &str, contents: &[u8]) -> Result<(), StorageError> {
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let written = File::create(&tmp)
        .and_then(|mut file| file.write_all(contents).and_then(|()| file.sync_data()))
        .map_err(|e| StorageError::io(&tmp, e))
        .and_then(|()| fs::rename(&tmp, &path).map_err(|e| StorageError::io(&path, e)));
    if let Err(error) = written {
        let _ = fs::remove_file(&tmp);
        return Err(error);
    }
    sync_dir(dir)
}

/// Maps `len` bytes of `file` read-only (`None` for an empty file, which cannot be mapped).
///
/// The caller must ensure that nothing truncates or writes the file while the map lives
/// (recovery maps segments before the partition is served, and drops the map before it cuts
/// a file); a truncation under a live map turns reads into SIGBUS.
pub fn map(file: &File, len: u64) -> std::io::Result<Option<Mmap>> {
    if len == 0 {
        return Ok(None);
    }
    // SAFETY: see the doc comment; every caller maps files no other code writes meanwhile.
    unsafe { Mmap::map(file) }.map(Some)
}
