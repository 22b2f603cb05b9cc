//! Where a WAL write runs: on the executor thread itself (a plain `pwrite` into the page
//! cache), or as an io_uring write.
//!
//! ext4 takes no buffered write without blocking (`pwritev2(RWF_NOWAIT)` returns
//! `EOPNOTSUPP`), so io_uring hands every WAL write to an io-wq worker thread: a wake-up and
//! two context switches each time. With one request in flight that hand-off is a large part
//! of the broker's time per request (docs/LATENCY.md, (g)); written in place, an append of a
//! few hundred bytes into the page cache takes a few microseconds. But a buffered write can
//! sleep (dirty-page throttling, reclaim, a lock held by write-back), and on the executor a
//! sleep stalls every connection of the core, not one partition. So a write runs inline only
//! where the hand-off is a large share of its cost and a sleep is unlikely, and a core stops
//! writing inline for a while after one write that was not cheap:
//!
//! - the round is small ([`INLINE_BYTES_MAX`]): a large round amortises the hand-off, and is
//!   the kind a loaded core makes;
//! - no WAL write of this core is on the ring: a core with disk writes queued is busy, and
//!   that is when a write is most likely to sleep;
//! - nothing else is writing to the same WAL: under `always` the pre-extension job writes
//!   megabytes of zeros past the end (`prealloc`), and ext4 holds the file's lock for each
//!   write, so a write that comes while it runs waits for all of it (measured: 1.9 ms);
//!   under `never` and `interval` a write-out job (`writeback`) makes ext4 allocate the
//!   window's blocks, holding the lock on the file's block map that a write needs to look up
//!   its page (measured: 7.3 ms);
//! - no inline write of this core took longer than [`STALL_LIMIT`] within the last
//!   [`STALL_BACKOFF`]: one that did sends every write of the core to the ring for that long
//!   (a warning, and `pagurus_wal_inline_stalls_total`).
//!
//! Either way the bytes land in the same page cache through the same description of the
//! file, so nothing else (write-back, syncs, recovery) can tell the two apart.

use std::cell::Cell;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use glommio::io::BufferedFile;
use tracing::warn;

/// The largest round written inline.
pub(super) const INLINE_BYTES_MAX: usize = 16 << 10;
/// An inline write slower than this turns inline writes off on its core.
pub(super) const STALL_LIMIT: Duration = Duration::from_millis(1);
/// For how long.
pub(super) const STALL_BACKOFF: Duration = Duration::from_secs(10);

/// How one WAL write is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Route {
    /// `pwrite` on the executor thread.
    Inline,
    /// An io_uring write (an io-wq worker on ext4).
    Ring,
}

/// This core's WAL writes, as far as routing them goes.
struct CoreWrites {
    /// io_uring WAL writes in flight.
    ring_in_flight: Cell<u32>,
    /// While inline writes are off after a slow one.
    inline_off_until: Cell<Option<Instant>>,
}

thread_local! {
    static CORE: CoreWrites = const {
        CoreWrites { ring_in_flight: Cell::new(0), inline_off_until: Cell::new(None) }
    };
}

/// The route of a round of `len` bytes on this core, now; `wal_busy` when something else
/// is writing to the same WAL.
pub(super) fn route(len: usize, wal_busy: bool) -> Route {
    CORE.with(|core| {
        let backing_off = core
            .inline_off_until
            .get()
            .is_some_and(|until| Instant::now() < until);
        if len <= INLINE_BYTES_MAX && core.ring_in_flight.get() == 0 && !wal_busy && !backing_off {
            Route::Inline
        } else {
            Route::Ring
        }
    })
}

/// Counts an io_uring WAL write of this core as in flight while it lives.
pub(super) struct RingWrite(());

impl RingWrite {
    pub(super) fn start() -> Self {
        CORE.with(|core| core.ring_in_flight.set(core.ring_in_flight.get() + 1));
        crate::metrics::io::record_wal_write_ring();
        RingWrite(())
    }
}

impl Drop for RingWrite {
    fn drop(&mut self) {
        CORE.with(|core| {
            let in_flight = core.ring_in_flight.get();
            assert!(in_flight > 0, "a ring write ends that was not counted");
            core.ring_in_flight.set(in_flight - 1);
        });
    }
}

/// Writes `buf` at `position` of `wal` on this thread, all of it unless an error stops it
/// (as an io_uring write would: a short count is the caller's to handle). A write slower
/// than [`STALL_LIMIT`] turns inline writes off on this core for [`STALL_BACKOFF`].
pub(super) fn write(wal: &BufferedFile, buf: &[u8], position: u64) -> std::io::Result<usize> {
    let offset = i64::try_from(position).map_err(|_| std::io::ErrorKind::InvalidInput)?;
    // SAFETY: the descriptor belongs to `wal`, which the caller borrows for the whole call,
    // so it stays open (and is not reused for another file) while it is borrowed here.
    let fd = unsafe { BorrowedFd::borrow_raw(wal.as_raw_fd()) };
    let started = Instant::now();
    let result = loop {
        match nix::sys::uio::pwrite(fd, buf, offset) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => break other.map_err(std::io::Error::from),
        }
    };
    let elapsed = started.elapsed();
    let stalled = elapsed > STALL_LIMIT;
    crate::metrics::io::record_wal_write_inline(stalled);
    if stalled {
        CORE.with(|core| {
            core.inline_off_until
                .set(Some(Instant::now() + STALL_BACKOFF))
        });
        warn!(
            elapsed_us = elapsed.as_micros() as u64,
            bytes = buf.len(),
            backoff_s = STALL_BACKOFF.as_secs(),
            "an inline WAL write stalled the core; WAL writes go through io_uring for a while"
        );
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_rounds_go_inline_only_while_the_core_has_no_ring_write() {
        std::thread::spawn(|| {
            assert_eq!(route(100, false), Route::Inline);
            assert_eq!(route(INLINE_BYTES_MAX, false), Route::Inline);
            assert_eq!(route(INLINE_BYTES_MAX + 1, false), Route::Ring);
            assert_eq!(
                route(100, true),
                Route::Ring,
                "another write to the WAL runs"
            );
            let first = RingWrite::start();
            assert_eq!(route(100, false), Route::Ring);
            let second = RingWrite::start();
            drop(first);
            assert_eq!(
                route(100, false),
                Route::Ring,
                "one ring write still in flight"
            );
            drop(second);
            assert_eq!(route(100, false), Route::Inline);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_stall_turns_inline_writes_off_for_the_backoff() {
        std::thread::spawn(|| {
            CORE.with(|core| {
                core.inline_off_until
                    .set(Some(Instant::now() + Duration::from_secs(60)))
            });
            assert_eq!(route(100, false), Route::Ring);
            CORE.with(|core| core.inline_off_until.set(Some(Instant::now())));
            assert_eq!(route(100, false), Route::Inline, "the backoff is over");
        })
        .join()
        .unwrap();
    }
}
