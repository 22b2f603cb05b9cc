//! Bounded write-back of the active WAL under `fsync = never | interval`.
//!
//! Without it, written batches stay dirty in the page cache until the kernel's thresholds
//! (10 % / 20 % of memory by default, gigabytes on a big machine) are crossed. Then the
//! kernel throttles the writer in `balance_dirty_pages` for up to hundreds of
//! milliseconds, and every ack of the partition waits behind it (docs/LATENCY.md, (c)).
//! Here, each time [`WINDOW_BYTES`] more bytes have been written, the log starts the
//! write-out of the new window with `sync_file_range(SYNC_FILE_RANGE_WRITE)`. First it
//! waits for the window before it to finish. This runs on glommio's blocking pool, never on
//! the executor, one job per log at a time. The dirty bytes of a partition then stay
//! below about two windows while the disk keeps up. When it does not keep up, the kernel's
//! own throttling is still the back-pressure.
//!
//! None of this makes anything durable: `sync_file_range` neither flushes the device cache
//! nor writes metadata. The acknowledgement rules do not change, and `always` (which
//! fdatasyncs every round) does not use it.
//!
//! The job opens the WAL by path (checked to be the segment's file), never a `dup` of the
//! writer's descriptor: the kernel reports a write-back error once per open file
//! description, and a `sync_file_range` wait that took it on the writer's description
//! would leave the next `fdatasync` there (the `interval` sync, the seal at a roll)
//! reporting success over lost pages.

use std::cell::Cell;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::rc::Rc;

use tracing::warn;

use super::PartitionLog;
use crate::storage::segment::{self, wal_path};

/// Written bytes per write-out window.
pub(crate) const WINDOW_BYTES: u64 = 8 << 20;

/// Where the write-out of the active WAL stands.
#[derive(Default)]
pub(super) struct Writeback {
    /// The active segment the positions refer to (its base offset).
    segment_base: Cell<u64>,
    /// Write-out was started for WAL bytes below this position.
    started_to: Cell<u64>,
    /// The last window whose write-out was started: the next job waits for it.
    last_window_from: Cell<u64>,
    /// A job is on the blocking pool.
    running: Rc<Cell<bool>>,
    /// Jobs started, for tests and stats.
    jobs: Cell<u64>,
}

#[cfg(test)]
impl Writeback {
    pub(super) fn jobs(&self) -> u64 {
        self.jobs.get()
    }
}

impl PartitionLog {
    /// Whether a write-out job is on the blocking pool now.
    pub(super) fn writing_back(&self) -> bool {
        self.writeback.running.get()
    }

    /// After a write that ended at WAL position `written_to` of the active segment: start
    /// the next window's write-out if a whole window is waiting and no job is running.
    pub(super) fn write_back(&self, written_to: u64) {
        let wb = &self.writeback;
        let (base, file_id) = {
            let st = self.state.borrow();
            let active = st.segments.active();
            (active.base_offset, active.file_id)
        };
        if wb.segment_base.get() != base || written_to < wb.started_to.get() {
            // A new segment (a roll), or the file was cut: start counting from here.
            wb.segment_base.set(base);
            wb.started_to.set(written_to);
            wb.last_window_from.set(written_to);
            return;
        }
        let from = wb.started_to.get();
        if written_to - from < WINDOW_BYTES || wb.running.get() {
            return;
        }
        let wal = wal_path(&self.dir, base);
        let previous = (wb.last_window_from.get(), from);
        wb.last_window_from.set(from);
        wb.started_to.set(written_to);
        wb.jobs.set(wb.jobs.get() + 1);
        wb.running.set(true);
        let running = Rc::clone(&wb.running);
        let dir = self.dir.clone();
        let job = glommio::executor().spawn_blocking(move || {
            let file = File::open(&wal)?;
            if segment::file_id(&file)? != file_id {
                return Err(std::io::Error::other("the segment file was replaced"));
            }
            write_out(&file, previous, (from, written_to))
        });
        glommio::spawn_local(async move {
            if let Err(error) = job.await {
                // Advisory only: a real I/O error surfaces at the next fdatasync or close.
                warn!(dir = %dir.display(), %error, "write-back failed");
            }
            running.set(false);
        })
        .detach();
    }
}

/// Waits until the window `previous` is on disk (written back, not flushed), then starts
/// the write-out of `window`. Runs on the blocking pool.
fn write_out(fd: &File, previous: (u64, u64), window: (u64, u64)) -> std::io::Result<()> {
    use nix::libc::{
        SYNC_FILE_RANGE_WAIT_AFTER, SYNC_FILE_RANGE_WAIT_BEFORE, SYNC_FILE_RANGE_WRITE,
    };
    if previous.1 > previous.0 {
        sync_file_range(
            fd,
            previous,
            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER,
        )?;
    }
    sync_file_range(fd, window, SYNC_FILE_RANGE_WRITE)
}

/// `sync_file_range(2)` over `[from, to)` of `fd`.
pub(super) fn sync_file_range(
    fd: &File,
    (from, to): (u64, u64),
    flags: u32,
) -> std::io::Result<()> {
    let (Ok(offset), Ok(len)) = (i64::try_from(from), i64::try_from(to - from)) else {
        return Err(std::io::Error::other("write-back range beyond i64"));
    };
    // SAFETY: a plain syscall on a descriptor this function borrows; no memory is passed.
    let rc = unsafe { nix::libc::sync_file_range(fd.as_raw_fd(), offset, len, flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::time::{Duration, Instant};

    use super::WINDOW_BYTES;
    use crate::protocol::record::encode_batch;
    use crate::storage::segment::wal_path;
    use crate::storage::{FsyncPolicy, LogConfig, PartitionLog};

    /// Pages of `path` in `[0, len)` that are dirty or under write-back, from the
    /// `cachestat` syscall (Linux 6.5); `None` where the kernel has no such call.
    fn unwritten_pages(path: &std::path::Path, len: u64) -> Option<u64> {
        #[repr(C)]
        struct Range {
            off: u64,
            len: u64,
        }
        #[repr(C)]
        #[derive(Default)]
        struct CacheStat {
            nr_cache: u64,
            nr_dirty: u64,
            nr_writeback: u64,
            nr_evicted: u64,
            nr_recently_evicted: u64,
        }
        const SYS_CACHESTAT: nix::libc::c_long = 451; // the same on x86_64 and aarch64
        let file = std::fs::File::open(path).unwrap();
        let range = Range { off: 0, len };
        let mut stat = CacheStat::default();
        // SAFETY: both pointers are to live, properly laid out structs for the call.
        let rc = unsafe {
            nix::libc::syscall(
                SYS_CACHESTAT,
                file.as_raw_fd(),
                &range as *const Range,
                &mut stat as *mut CacheStat,
                0u32,
            )
        };
        if rc != 0 {
            let error = std::io::Error::last_os_error();
            assert_eq!(
                error.raw_os_error(),
                Some(nix::libc::ENOSYS),
                "cachestat: {error}"
            );
            return None;
        }
        Some(stat.nr_dirty + stat.nr_writeback)
    }

    #[test]
    fn written_windows_are_written_back_without_a_sync() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p");
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let config = LogConfig {
                    fsync: FsyncPolicy::Never,
                    ..LogConfig::default()
                };
                let log = PartitionLog::open(&path, config).await.unwrap();
                let batch = encode_batch(0, b"", &vec![7u8; 1 << 20], 1);
                let batches = 3 * WINDOW_BYTES / (1 << 20) + 1;
                for _ in 0..batches {
                    log.append(&batch, None).await.unwrap();
                }
                assert!(log.writeback.jobs() >= 1, "no write-back was started");
                let wal = wal_path(&path, 0);
                let Some(mut unwritten) = unwritten_pages(&wal, WINDOW_BYTES) else {
                    eprintln!("SKIPPED: this kernel has no cachestat (Linux 6.5)");
                    return;
                };
                // The kernel's own write-back takes 30 s (dirty_expire_centisecs) for
                // pages this new on a machine far below its dirty thresholds; stop
                // looking well before that, so only the log's write-back can pass.
                let deadline = Instant::now() + Duration::from_secs(20);
                while unwritten > 0 && Instant::now() < deadline {
                    glommio::timer::sleep(Duration::from_millis(20)).await;
                    unwritten = unwritten_pages(&wal, WINDOW_BYTES).unwrap();
                }
                assert_eq!(
                    unwritten, 0,
                    "pages of the first window still not written back"
                );
                log.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
