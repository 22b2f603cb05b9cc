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
/// it, so the new directories survive a power cut (a partition created, acknowledged, and
/// then lost with its directory entry would lose acknowledged data). When `dir` already
/// exists its parent is fsynced anyway: an earlier run may have made it and been killed
/// before that fsync, leaving an entry that exists but is not durable.
///
/// Power cut: a prefix of the missing directories exists afterwards (each empty); calling
/// this again finishes the job.
pub fn create_dir_durable(dir: &Path) -> Result<(), StorageError> {
    if create_missing(dir)? {
        return Ok(());
    }
    match parent_of(dir) {
        Some(parent) => sync_dir(parent),
        None => Ok(()),
    }
}

/// Creates what is missing of `dir`, each new directory fsynced in its parent; true when
/// `dir` itself was created here.
fn create_missing(dir: &Path) -> Result<bool, StorageError> {
    if dir.is_dir() {
        return Ok(false);
    }
    if let Some(parent) = parent_of(dir) {
        create_missing(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        // Another core made it meanwhile; the caller fsyncs the parent.
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
        Err(e) => return Err(StorageError::io(dir, e)),
    }
    if let Some(parent) = parent_of(dir) {
        sync_dir(parent)?;
    }
    Ok(true)
}

fn parent_of(path: &Path) -> Option<&Path> {
    path.parent().filter(|p| !p.as_os_str().is_empty())
}

/// Prepares the data directory at start: creates it (and its missing parents) durably, so
/// the data directory itself is durable in its parent at first start, then fsyncs it, so
/// the entries directly in it (`topics/`, `offsets/`, `trash/`) that a killed earlier run
/// made are durable before anything is stored under them.
///
/// Power cut: as [`create_dir_durable`]; nothing is written.
pub fn prepare_data_dir(dir: &Path) -> Result<(), StorageError> {
    create_dir_durable(dir)?;
    sync_dir(dir)
}

/// Renames `from` to `to` (atomically replacing `to` if it exists) and makes both ends
/// durable: fsyncs the directory `to` is in, then, when it is another one, the directory
/// `from` was in. In that order a power cut can never leave the entry in neither place.
///
/// Power cut: before the first fsync returns, the old name or the new (POSIX does not say
/// which); between the two, across directories, possibly both; afterwards, the new.
pub fn rename_durable(from: &Path, to: &Path) -> Result<(), StorageError> {
    fs::rename(from, to).map_err(|e| StorageError::io(from, e))?;
    let (old_dir, new_dir) = (parent_of(from), parent_of(to));
    if let Some(dir) = new_dir {
        sync_dir(dir)?;
    }
    match old_dir {
        Some(dir) if old_dir != new_dir => sync_dir(dir),
        _ => Ok(()),
    }
}

/// Removes the file `path` (a missing one is fine) and fsyncs its directory.
///
/// Power cut: before the fsync returns, the file may still be there, whole.
pub fn remove_file_durable(path: &Path) -> Result<(), StorageError> {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(StorageError::io(path, e)),
    }
    match parent_of(path) {
        Some(dir) => sync_dir(dir),
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

/// [`write_file_durable`] relative to an open directory: the file lands in that directory
/// even if it was renamed meanwhile, never in another directory that took its name. (A
/// deleted topic's partition directory moves to `trash/` while a task of its log may still
/// be finishing; a topic made again under the name has a new directory at the old path.)
///
/// Power cut: as [`write_file_durable`].
pub fn write_file_durable_in(dir: &File, name: &str, contents: &[u8]) -> std::io::Result<()> {
    use nix::fcntl::{OFlag, openat, renameat};
    use nix::sys::stat::Mode;
    let tmp = format!("{name}.tmp");
    let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_TRUNC | OFlag::O_CLOEXEC;
    let written = openat(dir, tmp.as_str(), flags, Mode::from_bits_truncate(0o644))
        .map_err(std::io::Error::from)
        .map(File::from)
        .and_then(|mut file| file.write_all(contents).and_then(|()| file.sync_data()))
        .and_then(|()| renameat(dir, tmp.as_str(), dir, name).map_err(Into::into));
    if let Err(error) = written {
        let _ = nix::unistd::unlinkat(dir, tmp.as_str(), nix::unistd::UnlinkatFlags::NoRemoveDir);
        return Err(error);
    }
    dir.sync_all()
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

/// True when `dir` is on tmpfs, where nothing is ever flushed to a device (pre-extension and
/// the index journal are off there). False when it cannot be told.
pub fn is_tmpfs(dir: &Path) -> bool {
    nix::sys::statfs::statfs(dir)
        .map(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_through_a_directory_descriptor_follows_the_directory() {
        let root = tempfile::tempdir().unwrap();
        let (old, moved) = (root.path().join("p"), root.path().join("trash-p"));
        fs::create_dir(&old).unwrap();
        let dir = File::open(&old).unwrap();
        // The directory moves away and another one takes its name.
        fs::rename(&old, &moved).unwrap();
        fs::create_dir(&old).unwrap();
        write_file_durable_in(&dir, "point", b"7 9\n").unwrap();
        assert_eq!(fs::read(moved.join("point")).unwrap(), b"7 9\n");
        assert!(!old.join("point").exists());
        assert!(!moved.join("point.tmp").exists());
        // Replacing works as with a path.
        write_file_durable_in(&dir, "point", b"8 9\n").unwrap();
        assert_eq!(fs::read(moved.join("point")).unwrap(), b"8 9\n");
    }
}
