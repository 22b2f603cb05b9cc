//! The FUSE side of powerfs: every request passes through to the backing directory, and
//! tells the model (`model.rs`) what changed and what was synced: one `fuser::Filesystem`
//! impl, one short method per FUSE request, over the open files of `backing.rs`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{self, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, FileExt, OpenOptionsExt, PermissionsExt};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};
use nix::libc;

use crate::backing::{Inner, attr, backing_open, errno};
use crate::fault::FsyncFault;
use crate::model::{Kind, Model};

const TTL: Duration = Duration::from_secs(1);

/// Shared between the FUSE thread and the signal handler of `main`.
#[derive(Clone)]
pub struct PowerFs {
    pub inner: Arc<Mutex<Inner>>,
    pub fault: Arc<FsyncFault>,
}

impl PowerFs {
    pub fn new(model: Model, fault: FsyncFault) -> PowerFs {
        PowerFs {
            inner: Arc::new(Mutex::new(Inner {
                model,
                handles: HashMap::new(),
                next_fh: 1,
            })),
            fault: Arc::new(fault),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Filesystem for PowerFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let inner = self.lock();
        match inner.model.child(parent.0, name).map(|ino| inner.stat(ino)) {
            Some(Ok(attr)) => reply.entry(&TTL, &attr, Generation(0)),
            Some(Err(e)) => reply.error(e),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let inner = self.lock();
        let from_handle = fh
            .and_then(|fh| inner.handles.get(&fh.0))
            .filter(|h| h.ino == ino.0)
            .map(|h| h.file.metadata());
        match from_handle {
            Some(Ok(meta)) => reply.attr(&TTL, &attr(ino.0, &meta)),
            _ => match inner.stat(ino.0) {
                Ok(attr) => reply.attr(&TTL, &attr),
                Err(e) => reply.error(e),
            },
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut inner = self.lock();
        let result = (|| {
            let path = inner.model.path(ino.0).ok_or(Errno::ENOENT)?;
            if let Some(size) = size {
                let file = inner.file_of(ino.0, fh)?;
                inner.set_len(ino.0, &file, size)?;
            }
            if let Some(mode) = mode {
                fs::set_permissions(&path, fs::Permissions::from_mode(mode & 0o7777))
                    .map_err(errno)?;
            }
            inner.stat(ino.0)
        })();
        match result {
            Ok(attr) => reply.attr(&TTL, &attr),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let mut inner = self.lock();
        let result = (|| {
            if inner.model.child(parent.0, name).is_some() {
                return Err(Errno::EEXIST);
            }
            let path = inner
                .model
                .child_path(parent.0, name)
                .ok_or(Errno::ENOENT)?;
            fs::DirBuilder::new()
                .mode(mode & !umask & 0o7777)
                .create(&path)
                .map_err(errno)?;
            let ino = inner.model.created(parent.0, name, true);
            inner.stat(ino)
        })();
        match result {
            Ok(attr) => reply.entry(&TTL, &attr, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut inner = self.lock();
        let result = (|| {
            let path = inner
                .model
                .child_path(parent.0, name)
                .ok_or(Errno::ENOENT)?;
            let ino = match inner.model.child(parent.0, name) {
                Some(_) if flags & libc::O_EXCL != 0 => return Err(Errno::EEXIST),
                Some(ino) => ino,
                None => {
                    OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(mode & !umask & 0o7777)
                        .open(&path)
                        .map_err(errno)?;
                    inner.model.created(parent.0, name, false)
                }
            };
            let file = backing_open(&path, flags).map_err(errno)?;
            if flags & libc::O_TRUNC != 0 {
                inner.set_len(ino, &file, 0)?;
            }
            let attr = attr(ino, &file.metadata().map_err(errno)?);
            let fh = inner.add_handle(ino, file);
            Ok((attr, fh))
        })();
        match result {
            Ok((attr, fh)) => reply.created(
                &TTL,
                &attr,
                Generation(0),
                FileHandle(fh),
                FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut inner = self.lock();
        match inner
            .model
            .child(parent.0, name)
            .map(|i| inner.model.node(i))
        {
            Some(Some(node)) if matches!(node.kind, Kind::Dir) => reply.error(Errno::EISDIR),
            Some(Some(_)) => match inner.model.remove(parent.0, name) {
                Ok(_) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            },
            _ => reply.error(Errno::ENOENT),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut inner = self.lock();
        let Some(ino) = inner.model.child(parent.0, name) else {
            return reply.error(Errno::ENOENT);
        };
        if !matches!(inner.model.node(ino).map(|n| &n.kind), Some(Kind::Dir)) {
            return reply.error(Errno::ENOTDIR);
        }
        if inner.model.children(ino).is_some_and(|c| !c.is_empty()) {
            return reply.error(Errno::ENOTEMPTY);
        }
        match inner.model.remove(parent.0, name) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.lock();
        let bits = flags.bits();
        if bits & !libc::RENAME_NOREPLACE != 0 {
            return reply.error(Errno::EINVAL);
        }
        if bits & libc::RENAME_NOREPLACE != 0 && inner.model.child(newparent.0, newname).is_some() {
            return reply.error(Errno::EEXIST);
        }
        if let Some(target) = inner.model.child(newparent.0, newname)
            && inner.model.children(target).is_some_and(|c| !c.is_empty())
        {
            return reply.error(Errno::ENOTEMPTY);
        }
        match inner.model.rename(parent.0, name, newparent.0, newname) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut inner = self.lock();
        let result = (|| {
            let path = inner.model.path(ino.0).ok_or(Errno::ENOENT)?;
            let file = backing_open(&path, flags.0).map_err(errno)?;
            if flags.0 & libc::O_TRUNC != 0 {
                inner.set_len(ino.0, &file, 0)?;
            }
            Ok(inner.add_handle(ino.0, file))
        })();
        match result {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::FOPEN_KEEP_CACHE),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let inner = self.lock();
        let file = match inner.file_of(ino.0, Some(fh)) {
            Ok(file) => file,
            Err(e) => return reply.error(e),
        };
        drop(inner);
        let mut buf = vec![0u8; size as usize];
        let mut done = 0;
        while done < buf.len() {
            match file.read_at(&mut buf[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => return reply.error(errno(e)),
            }
        }
        reply.data(&buf[..done]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut inner = self.lock();
        let result = (|| {
            let file = inner.file_of(ino.0, Some(fh))?;
            let end = offset + data.len() as u64;
            inner
                .model
                .before_change(ino.0, &file, offset, end)
                .map_err(errno)?;
            file.write_all_at(data, offset).map_err(errno)
        })();
        match result {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.lock().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // The kernel has written every dirty page of the file (mmap included) before it
        // sends this. Nothing needs to reach the backing disk: durability is simulated.
        let name = self.lock().model.node(ino.0).map(|n| n.name.clone());
        let Some(reply) = self.fault.strike(name.as_deref(), reply) else {
            return;
        };
        let mut inner = self.lock();
        let len = inner
            .file_of(ino.0, Some(fh))
            .and_then(|f| f.metadata().map_err(errno));
        match len {
            Ok(meta) => {
                inner.model.sync_file(ino.0, meta.len());
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let inner = self.lock();
        let Some(children) = inner.model.children(ino.0) else {
            return reply.error(Errno::ENOTDIR);
        };
        let parent = inner.model.node(ino.0).map_or(1, |n| n.parent);
        let mut entries = vec![
            (ino.0, FileType::Directory, OsStr::new(".")),
            (parent, FileType::Directory, OsStr::new("..")),
        ];
        for (name, &child) in children {
            let kind = match inner.model.node(child).map(|n| &n.kind) {
                Some(Kind::Dir) => FileType::Directory,
                _ => FileType::RegularFile,
            };
            entries.push((child, kind, name.as_os_str()));
        }
        for (i, (child, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(child), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.lock().model.sync_dir(ino.0);
        reply.ok();
    }

    fn statfs(&self, _req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let inner = self.lock();
        let path = inner.model.path(ino.0).unwrap_or_default();
        match nix::sys::statvfs::statvfs(&path) {
            Ok(s) => reply.statfs(
                s.blocks(),
                s.blocks_free(),
                s.blocks_available(),
                s.files(),
                s.files_free(),
                s.block_size() as u32,
                255,
                s.fragment_size() as u32,
            ),
            Err(e) => reply.error(Errno::from_i32(e as i32)),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let mut inner = self.lock();
        let result = (|| {
            let file = inner.file_of(ino.0, Some(fh))?;
            let len = file.metadata().map_err(errno)?.len();
            // Allocation changes no bytes below the old end; punching or zeroing does.
            let end = if mode & (libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE) != 0 {
                offset + length
            } else {
                (offset + length).max(len)
            };
            let start = if end > len && mode & libc::FALLOC_FL_KEEP_SIZE == 0 {
                offset.min(len)
            } else {
                offset
            };
            inner
                .model
                .before_change(ino.0, &file, start, end)
                .map_err(errno)?;
            // SAFETY: fallocate on an owned, open descriptor with plain integer arguments.
            let rc =
                unsafe { libc::fallocate(file.as_raw_fd(), mode, offset as i64, length as i64) };
            if rc != 0 {
                return Err(errno(io::Error::last_os_error()));
            }
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let inner = self.lock();
        let file = match inner.file_of(ino.0, Some(fh)) {
            Ok(file) => file,
            Err(e) => return reply.error(e),
        };
        // SAFETY: lseek on an owned, open descriptor (a clone, so the handle's own position
        // is not what moves; SEEK_DATA/SEEK_HOLE do not depend on it).
        let at = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
        if at < 0 {
            return reply.error(errno(io::Error::last_os_error()));
        }
        reply.offset(at);
    }
}
