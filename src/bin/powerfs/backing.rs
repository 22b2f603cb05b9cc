//! The backing directory's side of powerfs: open files and their handles, attributes of
//! backing files, and the one place a truncation passes through the model.

use std::collections::HashMap;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::time::{Duration, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileHandle, FileType, INodeNo};
use nix::libc;

use crate::model::Model;

pub(crate) struct Handle {
    pub(crate) ino: u64,
    pub(crate) file: File,
}

pub struct Inner {
    pub model: Model,
    pub(crate) handles: HashMap<u64, Handle>,
    pub(crate) next_fh: u64,
}

pub(crate) fn errno(e: io::Error) -> Errno {
    Errno::from(e)
}

pub(crate) fn attr(ino: u64, meta: &Metadata) -> FileAttr {
    let time = |secs: i64, nsecs: i64| {
        if secs >= 0 {
            UNIX_EPOCH + Duration::new(secs as u64, nsecs as u32)
        } else {
            UNIX_EPOCH
        }
    };
    FileAttr {
        ino: INodeNo(ino),
        size: meta.len(),
        blocks: meta.blocks(),
        atime: time(meta.atime(), meta.atime_nsec()),
        mtime: time(meta.mtime(), meta.mtime_nsec()),
        ctime: time(meta.ctime(), meta.ctime_nsec()),
        crtime: UNIX_EPOCH,
        kind: if meta.is_dir() {
            FileType::Directory
        } else {
            FileType::RegularFile
        },
        perm: (meta.mode() & 0o7777) as u16,
        nlink: if meta.is_dir() { 2 } else { 1 },
        uid: meta.uid(),
        gid: meta.gid(),
        rdev: 0,
        blksize: 4096,
        flags: 0,
    }
}

impl Inner {
    pub(crate) fn stat(&self, ino: u64) -> Result<FileAttr, Errno> {
        let path = self.model.path(ino).ok_or(Errno::ENOENT)?;
        let meta = fs::symlink_metadata(path).map_err(errno)?;
        Ok(attr(ino, &meta))
    }

    /// The file to work on: the request's handle, or the node opened by path.
    pub(crate) fn file_of(&self, ino: u64, fh: Option<FileHandle>) -> Result<File, Errno> {
        if let Some(handle) = fh.and_then(|fh| self.handles.get(&fh.0))
            && handle.ino == ino
        {
            return handle.file.try_clone().map_err(errno);
        }
        let path = self.model.path(ino).ok_or(Errno::ENOENT)?;
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .map_err(errno)
    }

    pub(crate) fn add_handle(&mut self, ino: u64, file: File) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, Handle { ino, file });
        fh
    }

    pub(crate) fn set_len(&mut self, ino: u64, file: &File, len: u64) -> Result<(), Errno> {
        let old = file.metadata().map_err(errno)?.len();
        self.model
            .before_set_len(ino, file, old, len)
            .map_err(errno)?;
        file.set_len(len).map_err(errno)
    }
}

/// Open flags for the backing file: what the kernel already handled is dropped (creation,
/// append positions, direct I/O; truncation is done through the model). Always read and
/// write: the kernel checked the access mode, and it may read through any handle of the
/// file (to fill a page) or write back a mapping through it.
pub(crate) fn backing_open(path: &std::path::Path, flags: i32) -> io::Result<File> {
    let keep = flags
        & !(libc::O_ACCMODE
            | libc::O_CREAT
            | libc::O_EXCL
            | libc::O_TRUNC
            | libc::O_APPEND
            | libc::O_DIRECT);
    OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(keep)
        .open(path)
}
