//! One segment of a partition: `<base offset, 20 digits>.wal` holding raw batches, and
//! `.idx` holding one 32-byte entry per batch (see [`crate::storage::index`]).
//!
//! The active segment (the last one) is appended to through glommio's io_uring buffered file
//! API; its index file is extended sparsely (ftruncate, never fallocate: an fdatasync over
//! fallocated, unwritten extents was measured at ~3.3 ms against ~160 µs for a growing file)
//! to its capacity and mapped writable. Sealing truncates the index to its entries and maps
//! it read-only; closed segments are never written again.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use glommio::io::{BufferedFile, OpenOptions as GlommioOpenOptions};

use crate::storage::StorageError;
use crate::storage::index::{ENTRY_LEN, Index, IndexEntry};
use crate::storage::index_journal::{self, Journal};

/// File name of a segment's WAL.
pub fn wal_path(dir: &Path, base_offset: u64) -> PathBuf {
    dir.join(format!("{base_offset:020}.wal"))
}

/// File name of a segment's index.
pub fn idx_path(dir: &Path, base_offset: u64) -> PathBuf {
    dir.join(format!("{base_offset:020}.idx"))
}

/// The files of the next segment, made ahead of the roll that needs them
/// (`storage::log::spare`). Not segment names: opening a partition ignores them.
pub const SPARE_WAL: &str = "next-segment.wal";
pub const SPARE_IDX: &str = "next-segment.idx";

/// Whether an active index's extended length is durable already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexLength {
    /// Extend it if needed and fdatasync it now.
    SyncNow,
    /// A spare made it durable when it was made.
    Durable,
}

/// What [`make_spare`] did about the space of the spare WAL.
#[derive(Debug)]
pub enum WalReservation {
    /// None was asked for.
    NotAsked,
    /// The blocks are allocated past the (empty) file's end.
    Reserved,
    /// The file system refused (full, or no `fallocate`); the WAL is empty and holds no
    /// blocks. The segment works as one made without a reservation.
    Refused(std::io::Error),
}

/// Makes the spare files in `dir` (replacing any left over): an empty WAL, and an index
/// extended to `index_entries` slots whose length is durable. Blocking. Works through the
/// directory's descriptor, so a spare made for a topic deleted meanwhile never lands in the
/// directory of a topic made again under its name.
///
/// With `wal_reserve_bytes > 0`, the WAL's first bytes are allocated past its end
/// (`FALLOC_FL_KEEP_SIZE`: its size stays 0, so nothing changes for readers or recovery),
/// and the buffered writes that fill the segment and their write-back allocate no blocks
/// (`storage::log::spare`).
pub fn make_spare(
    dir: &File,
    index_entries: u32,
    wal_reserve_bytes: u64,
) -> std::io::Result<WalReservation> {
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    use nix::unistd::{UnlinkatFlags, unlinkat};
    for name in [SPARE_WAL, SPARE_IDX] {
        match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
            Err(e) => return Err(e.into()),
        }
    }
    let create = |name: &str| -> std::io::Result<File> {
        let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_CLOEXEC;
        Ok(File::from(openat(
            dir,
            name,
            flags,
            Mode::from_bits_truncate(0o644),
        )?))
    };
    let idx = create(SPARE_IDX)?;
    idx.set_len(u64::from(index_entries.max(1)) * ENTRY_LEN as u64)?;
    idx.sync_data()?;
    let wal = create(SPARE_WAL)?;
    if wal_reserve_bytes == 0 {
        return Ok(WalReservation::NotAsked);
    }
    Ok(reserve(&wal, wal_reserve_bytes))
}

/// Allocates `bytes` past the end of the empty `wal`, or none at all.
fn reserve(wal: &File, bytes: u64) -> WalReservation {
    use nix::fcntl::{FallocateFlags, fallocate};
    let Ok(len) = i64::try_from(bytes) else {
        return WalReservation::Refused(std::io::Error::other("reservation too large"));
    };
    match fallocate(wal, FallocateFlags::FALLOC_FL_KEEP_SIZE, 0, len) {
        Ok(()) => WalReservation::Reserved,
        Err(errno) => {
            // A full disk may have allocated part of it: give that back.
            let _ = wal.set_len(0);
            WalReservation::Refused(errno.into())
        }
    }
}

/// Parses `<20 digits>.<ext>` into the base offset.
pub fn parse_file_name(name: &str, ext: &str) -> Option<u64> {
    let stem = name.strip_suffix(ext)?.strip_suffix('.')?;
    (stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()))
        .then(|| stem.parse().ok())
        .flatten()
}

/// (device, inode): which file a descriptor or path names.
pub type FileId = (u64, u64);

/// (device, inode) of an open file.
pub fn file_id(file: &File) -> std::io::Result<FileId> {
    use std::os::unix::fs::MetadataExt;
    let meta = file.metadata()?;
    Ok((meta.dev(), meta.ino()))
}

/// Extends the `.wal` (holding `size_bytes` of batches) with zeros up to the end of an index
/// journal region at `region_at`. Sparse, and not synced here: the first round that writes a
/// record fdatasyncs the `.wal`, which makes the length durable with it. Bytes past the
/// batches are cut first, so no record of an earlier life of the file survives (recovery and
/// close cut them already; this holds whatever opened the file).
pub(crate) async fn make_region(
    wal: &BufferedFile,
    path: &Path,
    size_bytes: u64,
    region_at: u64,
) -> Result<(), StorageError> {
    assert!(region_at >= size_bytes, "the region lies past the batches");
    let io = |e: glommio::GlommioError<()>| StorageError::io(path, e.into());
    let len = wal.file_size().await.map_err(io)?;
    if len > size_bytes {
        wal.truncate(size_bytes).await.map_err(io)?;
    }
    wal.truncate(region_at + index_journal::REGION_BYTES)
        .await
        .map_err(io)
}

/// A descriptor of `path` of its own, only for fdatasync (which works on a read-only one).
async fn open_for_sync(path: &Path) -> Result<BufferedFile, StorageError> {
    GlommioOpenOptions::new()
        .read(true)
        .buffered_open(path)
        .await
        .map_err(|e| StorageError::io(path, e.into()))
}

/// Handles the active segment writes through.
pub(crate) struct Writer {
    pub wal: Rc<BufferedFile>,
    pub idx: Rc<BufferedFile>,
    /// What each commit round in flight fdatasyncs, one pair per slot
    /// (`storage::log::rounds`): slot 0 is `wal` and `idx`; every other slot has
    /// descriptors of its own (its own open file descriptions, so the kernel reports each
    /// write-back error to every slot), opened with these, before anything is written.
    pub sync_files: Vec<SyncFiles>,
    /// The index journal in the `.wal` (`storage::index_journal`): under `always`, not on
    /// tmpfs.
    pub journal: Option<Journal>,
}

/// How an active segment's writer is set up (from the log's config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterSetup {
    /// Descriptor pairs kept for commit rounds in flight (see [`Writer`]).
    pub sync_slots: usize,
    /// With an index journal: the segment size limit, which its region lies past.
    pub journal: Option<u64>,
}

/// The `.wal` and `.idx` descriptors one commit round fdatasyncs.
#[derive(Clone)]
pub(crate) struct SyncFiles {
    pub wal: Rc<BufferedFile>,
    pub idx: Rc<BufferedFile>,
}

pub struct Segment {
    pub base_offset: u64,
    /// (device, inode) of the `.wal`: tells a descriptor opened by path elsewhere whether it
    /// still names this file (compaction and topic re-creation replace files at one path).
    pub file_id: FileId,
    /// Offset after the last batch staged into this segment.
    pub next_offset: u64,
    /// Bytes of batches staged into this segment (written or still pending).
    pub size_bytes: u64,
    pub(crate) index: Index,
    /// Read-only descriptor of the `.wal`, for reads and sendfile.
    reader: Rc<File>,
    idx_file: File,
    pub(crate) writer: Option<Writer>,
    pub(crate) opened_at: Instant,
    dir: PathBuf,
    /// Raft index of the segment's first batch, in a replicated partition
    /// (`storage::raft_index`); `None` in any other. Set by whoever opens the log.
    pub(crate) raft_base: Option<u64>,
}

impl Segment {
    /// Creates a new, empty active segment.
    /// `sync_slots` pairs of descriptors are kept for commit rounds (see [`Writer`]).
    pub async fn create(
        dir: &Path,
        base_offset: u64,
        index_entries: u32,
        setup: WriterSetup,
    ) -> Result<Segment, StorageError> {
        let wal = wal_path(dir, base_offset);
        let writer_wal = GlommioOpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .buffered_open(&wal)
            .await
            .map_err(|e| StorageError::io(&wal, e.into()))?;
        let idx = idx_path(dir, base_offset);
        let idx_file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&idx)
            .map_err(|e| StorageError::io(&idx, e))?;
        drop(idx_file);
        Self::open_active(
            dir,
            base_offset,
            base_offset,
            0,
            0,
            (index_entries, IndexLength::SyncNow),
            setup,
            Some(writer_wal),
        )
        .await
    }

    /// Makes the spare files (see [`make_spare`]) the new, empty active segment at
    /// `base_offset`: the index first, so that a WAL under its new name never goes without
    /// its index. Nothing is synced: the renames are durable once the directory is fsynced,
    /// which is the caller's business.
    pub async fn install_spare(
        dir: &Path,
        dir_file: &File,
        base_offset: u64,
        index_entries: u32,
        setup: WriterSetup,
    ) -> Result<Segment, StorageError> {
        let (wal, idx) = (wal_path(dir, base_offset), idx_path(dir, base_offset));
        for (from, to) in [(SPARE_IDX, &idx), (SPARE_WAL, &wal)] {
            if to.exists() {
                return Err(StorageError::io(
                    to,
                    std::io::Error::from(std::io::ErrorKind::AlreadyExists),
                ));
            }
            let name = to.file_name().expect("segment files have names");
            nix::fcntl::renameat(dir_file, from, dir_file, name)
                .map_err(|e| StorageError::io(to, e.into()))?;
        }
        Self::open_active(
            dir,
            base_offset,
            base_offset,
            0,
            0,
            (index_entries, IndexLength::Durable),
            setup,
            None,
        )
        .await
    }

    /// Opens a recovered segment as the active one: `entries` valid index entries, `size_bytes`
    /// of valid WAL ending at `next_offset`.
    #[allow(clippy::too_many_arguments)]
    pub async fn open_active(
        dir: &Path,
        base_offset: u64,
        next_offset: u64,
        entries: usize,
        size_bytes: u64,
        (index_entries, index_length): (u32, IndexLength),
        setup: WriterSetup,
        wal_writer: Option<BufferedFile>,
    ) -> Result<Segment, StorageError> {
        let wal = wal_path(dir, base_offset);
        let idx = idx_path(dir, base_offset);
        let wal_writer = match wal_writer {
            Some(file) => file,
            None => GlommioOpenOptions::new()
                .read(true)
                .write(true)
                .buffered_open(&wal)
                .await
                .map_err(|e| StorageError::io(&wal, e.into()))?,
        };
        let idx_writer = GlommioOpenOptions::new()
            .read(true)
            .write(true)
            .buffered_open(&idx)
            .await
            .map_err(|e| StorageError::io(&idx, e.into()))?;
        let (wal_writer, idx_writer) = (Rc::new(wal_writer), Rc::new(idx_writer));
        let mut sync_files = vec![SyncFiles {
            wal: Rc::clone(&wal_writer),
            idx: Rc::clone(&idx_writer),
        }];
        for _ in 1..setup.sync_slots {
            sync_files.push(SyncFiles {
                wal: Rc::new(open_for_sync(&wal).await?),
                idx: Rc::new(open_for_sync(&idx).await?),
            });
        }
        let idx_file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&idx)
            .map_err(|e| StorageError::io(&idx, e))?;
        let capacity = entries.max(index_entries as usize).max(1);
        // The extended length is made durable before any batch is staged: after a power
        // cut every slot of an active index is then inside the file, so a batch whose entry
        // never reached the disk reads as an empty slot and is cut, never rebuilt from bytes
        // that may be torn (`storage::recovery`, `Unindexed`).
        let length = (capacity * ENTRY_LEN) as u64;
        match index_length {
            IndexLength::SyncNow => {
                idx_file
                    .set_len(length)
                    .map_err(|e| StorageError::io(&idx, e))?;
                idx_writer
                    .fdatasync()
                    .await
                    .map_err(|e| StorageError::io(&idx, e.into()))?;
            }
            IndexLength::Durable => {
                let found = idx_file
                    .metadata()
                    .map_err(|e| StorageError::io(&idx, e))?
                    .len();
                assert_eq!(found, length, "a spare index has the configured capacity");
            }
        }
        let index = Index::writable(&idx_file, entries).map_err(|e| StorageError::io(&idx, e))?;
        let reader = File::open(&wal).map_err(|e| StorageError::io(&wal, e))?;
        let file_id = file_id(&reader).map_err(|e| StorageError::io(&wal, e))?;
        let journal = match setup.journal {
            Some(segment_bytes) => {
                let region_at = index_journal::region_at(segment_bytes, size_bytes);
                make_region(&wal_writer, &wal, size_bytes, region_at).await?;
                Some(Journal::new(region_at))
            }
            None => None,
        };
        Ok(Segment {
            file_id,
            base_offset,
            next_offset,
            size_bytes,
            index,
            reader: Rc::new(reader),
            idx_file,
            writer: Some(Writer {
                wal: wal_writer,
                idx: idx_writer,
                sync_files,
                journal,
            }),
            opened_at: Instant::now(),
            dir: dir.to_path_buf(),
            raft_base: None,
        })
    }

    /// Opens a closed segment whose index file holds exactly its entries.
    pub fn open_sealed(dir: &Path, base_offset: u64) -> Result<Segment, StorageError> {
        let wal = wal_path(dir, base_offset);
        let idx = idx_path(dir, base_offset);
        let idx_file = File::open(&idx).map_err(|e| StorageError::io(&idx, e))?;
        let index = Index::sealed(&idx_file).map_err(|e| StorageError::io(&idx, e))?;
        let (next_offset, size_bytes) = index
            .last()
            .map_or((base_offset, 0), |e| (e.next_offset(), e.end_position()));
        let reader = File::open(&wal).map_err(|e| StorageError::io(&wal, e))?;
        let file_id = file_id(&reader).map_err(|e| StorageError::io(&wal, e))?;
        Ok(Segment {
            file_id,
            base_offset,
            next_offset,
            size_bytes,
            index,
            reader: Rc::new(reader),
            idx_file,
            writer: None,
            opened_at: Instant::now(),
            dir: dir.to_path_buf(),
            raft_base: None,
        })
    }

    /// Cuts the index file to exactly its entries and maps it read-only, so the next open
    /// can trust its size. The caller makes the cut durable (fdatasync through
    /// [`Segment::index_sync_handle`]) and stages nothing more into this segment.
    pub fn trim_index(&mut self) -> Result<(), StorageError> {
        let idx = idx_path(&self.dir, self.base_offset);
        let entries = self.index.len();
        // The mapping must not outlive the bytes it maps: unmap, cut, map again.
        self.index = Index::empty();
        self.idx_file
            .set_len((entries * ENTRY_LEN) as u64)
            .map_err(|e| StorageError::io(&idx, e))?;
        self.index = Index::sealed(&self.idx_file).map_err(|e| StorageError::io(&idx, e))?;
        assert_eq!(self.index.len(), entries, "trimming the index lost entries");
        Ok(())
    }

    /// The io_uring handle that fdatasyncs the index, while the segment is writable.
    pub fn index_sync_handle(&self) -> Option<Rc<BufferedFile>> {
        self.writer.as_ref().map(|w| Rc::clone(&w.idx))
    }

    /// Drops the write handles: the segment is closed for good.
    pub fn seal(&mut self) {
        self.writer = None;
    }

    pub fn is_active(&self) -> bool {
        self.writer.is_some()
    }

    pub fn reader(&self) -> &Rc<File> {
        &self.reader
    }

    pub fn last_entry(&self) -> Option<IndexEntry> {
        self.index.last()
    }

    pub fn entries(&self) -> usize {
        self.index.len()
    }

    pub fn entry(&self, i: usize) -> IndexEntry {
        self.index.get(i)
    }

    pub fn index(&self) -> &Index {
        &self.index
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::*;

    /// Whether two descriptors share one open file description (as a `dup` does): the
    /// status flags belong to the description, so a flag set through one shows through
    /// the other only then. O_NONBLOCK does nothing to a regular file.
    fn same_description(a: i32, b: i32) -> bool {
        use nix::libc::{F_GETFL, F_SETFL, O_NONBLOCK, fcntl};
        // SAFETY: plain fcntl calls on descriptors the segment keeps open meanwhile.
        unsafe {
            let flags = fcntl(a, F_GETFL);
            assert!(flags >= 0 && flags & O_NONBLOCK == 0);
            assert_eq!(fcntl(a, F_SETFL, flags | O_NONBLOCK), 0);
            let shared = fcntl(b, F_GETFL) & O_NONBLOCK != 0;
            assert_eq!(fcntl(a, F_SETFL, flags), 0);
            shared
        }
    }

    /// The kernel reports a write-back error once per open file description, so each
    /// commit round slot must fdatasync through descriptions of its own
    /// (`storage::log::rounds`): a `dup` would let one round take another's error.
    #[test]
    fn every_commit_round_slot_syncs_through_descriptions_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_path_buf();
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let segment = Segment::create(
                    &path,
                    0,
                    64,
                    WriterSetup {
                        sync_slots: 3,
                        journal: None,
                    },
                )
                .await
                .unwrap();
                let writer = segment.writer.as_ref().unwrap();
                let fds: Vec<(i32, i32)> = writer
                    .sync_files
                    .iter()
                    .map(|f| (f.wal.as_raw_fd(), f.idx.as_raw_fd()))
                    .collect();
                assert_eq!(fds.len(), 3);
                assert!(same_description(fds[0].0, writer.wal.as_raw_fd()));
                assert!(same_description(fds[0].1, writer.idx.as_raw_fd()));
                for i in 0..fds.len() {
                    for j in i + 1..fds.len() {
                        assert!(!same_description(fds[i].0, fds[j].0), "wal {i} {j}");
                        assert!(!same_description(fds[i].1, fds[j].1), "idx {i} {j}");
                    }
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
