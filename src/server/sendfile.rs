//! Zero-copy sends: segment bytes go from the page cache to the socket with sendfile(2),
//! never through user space.
//!
//! glommio 0.9 has no public sendfile and no public "wait until writable". So:
//! - The socket is non-blocking; sendfile runs inline on the executor as long as the socket
//!   takes bytes.
//! - When the socket is full (`EAGAIN`), the next single byte is read from the file and
//!   written through glommio's own async write, which parks the task until the socket is
//!   writable (an io_uring poll); then sendfile resumes. One byte per full socket buffer
//!   passes through user space; the rest never does.
//! - A socket that never drains is bounded by the stream's write timeout.
//! - Cold data (not in the active segment) is first pulled into the page cache on glommio's
//!   blocking thread (see [`populate`]), so sendfile never stalls the executor on disk.

use std::cell::RefCell;
use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use crate::server::stream::Stream;

use crate::server::io::write_all;
use crate::storage::segment::FileId;

/// Bytes per sendfile call: large enough to amortise the syscall, small enough that the task
/// yields to others between calls.
const SENDFILE_CHUNK_BYTES: usize = 1 << 20;

/// Sends `length` bytes of `file` from `position` to the socket.
pub async fn send_range(
    stream: &RefCell<Stream>,
    file: &Rc<File>,
    position: u64,
    length: u64,
    hot: bool,
) -> io::Result<()> {
    if length == 0 {
        return Ok(());
    }
    if !stream.borrow().sends_files() {
        return send_range_buffered(stream, file, position, length, hot).await;
    }
    if !hot {
        populate(file, position, length).await;
    }
    let mut offset = position as i64;
    let end = (position + length) as i64;
    while offset < end {
        let chunk = ((end - offset) as usize).min(SENDFILE_CHUNK_BYTES);
        let result = {
            let stream = stream.borrow();
            // SAFETY: the descriptor belongs to `stream`, borrowed for the duration of the call.
            let socket = unsafe { std::os::fd::BorrowedFd::borrow_raw(stream.tcp().as_raw_fd()) };
            nix::sys::sendfile::sendfile(socket, file.as_fd(), Some(&mut offset), chunk)
        };
        match result {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "segment file shorter than its index says",
                ));
            }
            Ok(_) => glommio::yield_if_needed().await,
            Err(nix::errno::Errno::EAGAIN) => {
                // Socket full: let glommio wait for room by writing the next byte itself.
                let mut byte = [0u8; 1];
                file.read_exact_at(&mut byte, offset as u64)?;
                write_all(stream, &byte).await?;
                offset += 1;
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(errno) => return Err(errno.into()),
        }
    }
    Ok(())
}

/// [`send_range`] for a stream that encrypts in user space (TLS without the kernel's help):
/// the range is read into memory a chunk at a time and written through the stream.
async fn send_range_buffered(
    stream: &RefCell<Stream>,
    file: &Rc<File>,
    position: u64,
    length: u64,
    hot: bool,
) -> io::Result<()> {
    let end = position + length;
    let mut at = position;
    while at < end {
        let chunk = (end - at).min(SENDFILE_CHUNK_BYTES as u64);
        let bytes = read_range(file, at, chunk, hot).await?;
        write_all(stream, &bytes).await?;
        at += chunk;
    }
    Ok(())
}

/// Brings a cold range into the page cache on glommio's blocking thread, waiting until it is
/// there, so the sendfile that follows never waits on the disk inside the executor.
/// `MADV_POPULATE_READ` (Linux 5.14) faults the whole range in and returns when it is read;
/// on older kernels one byte of each page is touched instead. (readahead(2) would only
/// start the reads.)
async fn populate(file: &Rc<File>, position: u64, length: u64) {
    let Ok(len) = usize::try_from(length) else {
        return;
    };
    // A descriptor of its own for the blocking thread, closed when the job ends: if this
    // future is dropped (the connection went away) the job still runs, and a raw fd could
    // by then name another file.
    let Ok(file) = file.try_clone() else {
        return;
    };
    glommio::executor()
        .spawn_blocking(move || {
            // SAFETY: segment bytes below the high watermark are never truncated or
            // rewritten in place while the broker runs, so the mapping stays valid.
            let Ok(map) = (unsafe {
                memmap2::MmapOptions::new()
                    .offset(position)
                    .len(len)
                    .map(&file)
            }) else {
                return;
            };
            if map.advise(memmap2::Advice::PopulateRead).is_err() {
                let touched = (0..map.len())
                    .step_by(4096)
                    .fold(0u8, |acc, i| acc ^ map[i]);
                std::hint::black_box(touched);
            }
        })
        .await;
}

/// Read-only descriptors of segment files, opened once per core and shared by every
/// connection on it. A descriptor keeps its file readable even after retention or
/// compaction unlinks it, so a fetch planned just before never fails midway. Entries are
/// checked against the (device, inode) in the plan, so a path that now names another file
/// (compaction's rename, a topic deleted and created again) is opened afresh.
/// One per core (a thread-local: each core is one thread), kept by the server, not the shard.
#[derive(Default)]
pub struct SegmentFiles {
    files: RefCell<HashMap<PathBuf, (Rc<File>, FileId)>>,
}

thread_local! {
    static SEGMENT_FILES: SegmentFiles = SegmentFiles::default();
}

/// A read-only descriptor of the segment file `path`, from this core's cache; `NotFound`
/// when the path now names another file than `file_id`.
pub fn open_segment(path: &Path, file_id: FileId) -> io::Result<Rc<File>> {
    SEGMENT_FILES.with(|files| files.open(path, file_id))
}

/// Descriptors kept open per core; past this the cache starts over.
const SEGMENT_FILES_MAX: usize = 1024;

impl SegmentFiles {
    pub fn open(&self, path: &Path, file_id: FileId) -> io::Result<Rc<File>> {
        if let Some((file, id)) = self.files.borrow().get(path)
            && *id == file_id
        {
            return Ok(Rc::clone(file));
        }
        let file = Rc::new(File::open(path)?);
        let id = crate::storage::segment::file_id(&file)?;
        if id != file_id {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{} was replaced; fetch again", path.display()),
            ));
        }
        let mut files = self.files.borrow_mut();
        if files.len() >= SEGMENT_FILES_MAX {
            files.clear();
        }
        files.insert(path.to_path_buf(), (Rc::clone(&file), id));
        Ok(file)
    }
}

/// `length` bytes of a segment from `position`, for conversion or a look inside a batch.
/// A range of the active segment (`hot`: in the page cache, a memory copy) is read inline; any other on the
/// blocking pool, so a cold read never stalls the executor. At most one fetch's bytes
/// (`FETCH_BYTES_MAX`, or one batch over it).
pub async fn read_range(
    file: &Rc<File>,
    position: u64,
    length: u64,
    hot: bool,
) -> io::Result<Vec<u8>> {
    let len = usize::try_from(length).map_err(|_| io::Error::other("read range too large"))?;
    let read = move |file: &File| {
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, position).map(|()| buf)
    };
    if hot {
        return read(file.as_ref());
    }
    // A descriptor of its own for the job, which runs on even if this future is dropped.
    let file = file.try_clone()?;
    glommio::executor()
        .spawn_blocking(move || read(&file))
        .await
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::path::Path;
    use std::pin::pin;

    use futures_lite::future::poll_once;
    use glommio::LocalExecutorBuilder;
    use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};

    use super::*;

    const FILE_BYTES: usize = 4 << 20;
    const PAGE_BYTES: usize = 4096;

    /// A file of `FILE_BYTES` written, synced, and dropped from the page cache.
    fn cold_file(path: &Path) -> File {
        let mut file = File::create(path).unwrap();
        file.write_all(&vec![0x5a; FILE_BYTES]).unwrap();
        file.sync_all().unwrap();
        posix_fadvise(file.as_fd(), 0, 0, PosixFadviseAdvice::POSIX_FADV_DONTNEED).unwrap();
        file
    }

    /// Pages of `path` in the page cache.
    fn resident_pages(path: &Path) -> usize {
        let file = File::open(path).unwrap();
        // SAFETY: a read-only mapping of a file no one truncates during the test.
        let map = unsafe { memmap2::Mmap::map(&file).unwrap() };
        let mut pages = vec![0u8; map.len().div_ceil(PAGE_BYTES)];
        // SAFETY: `pages` has one byte per page of the mapping.
        let rc = unsafe { libc::mincore(map.as_ptr() as *mut _, map.len(), pages.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", io::Error::last_os_error());
        pages.iter().filter(|p| **p & 1 == 1).count()
    }

    /// Issue 13, bug 6: the blocking job of a populate whose caller went away (the
    /// connection closed) and whose descriptor was closed meanwhile still reads the file it
    /// was given, not whatever file got that descriptor number next.
    #[test]
    fn populate_reads_its_own_file_after_the_caller_is_gone() {
        LocalExecutorBuilder::default()
            .spawn(|| async {
                let dir = tempfile::tempdir().unwrap();
                let (wanted, other) = (dir.path().join("wanted"), dir.path().join("other"));
                drop((cold_file(&wanted), cold_file(&other)));
                if resident_pages(&wanted) > FILE_BYTES / PAGE_BYTES / 2 {
                    eprintln!("the page cache keeps the test file (tmpfs?); nothing to check");
                    return;
                }
                let file = Rc::new(File::open(&wanted).unwrap());
                // Holds glommio's (single) blocking thread, so the populate job waits in its
                // queue until after its caller and its descriptor are gone.
                let mut busy = pin!(glommio::executor().spawn_blocking(|| {
                    std::thread::sleep(std::time::Duration::from_millis(300))
                }));
                assert!(poll_once(busy.as_mut()).await.is_none());
                {
                    let populating = pin!(populate(&file, 0, FILE_BYTES as u64));
                    assert!(poll_once(populating).await.is_none());
                }
                drop(file);
                // The number the dropped descriptor had now names another file.
                let reused = File::open(&other).unwrap();
                busy.await;
                // Jobs run in order on the one blocking thread: this one ends after populate's.
                glommio::executor().spawn_blocking(|| ()).await;
                drop(reused);
                assert_eq!(
                    resident_pages(&wanted),
                    FILE_BYTES / PAGE_BYTES,
                    "the populate job read another file"
                );
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
