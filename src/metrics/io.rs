//! Storage I/O metrics of the core the calling thread runs (one glommio executor per
//! thread), kept in a thread-local so partition logs need no handle to the core's
//! counters. A per-core total also keeps counting when a topic is deleted and its logs go,
//! as Prometheus counters must.
//!
//! The produce ack time lives here too: it times the storage path (with the hop to the
//! owner core) as a client sees it, less the network, and is read beside the fsync rounds
//! it is made of.

use std::time::Duration;

use crate::metrics::histogram::{
    FSYNC_BOUNDS_US, GROUP_COMMIT_BOUNDS, Histogram, HistogramSnapshot, PRODUCE_ACK_BOUNDS_US,
};

struct IoMetrics {
    fsync_us: Histogram<{ FSYNC_BOUNDS_US.len() }>,
    fsync_errors: std::cell::Cell<u64>,
    group_commit_batches: Histogram<{ GROUP_COMMIT_BOUNDS.len() }>,
    wal_writes_inline: std::cell::Cell<u64>,
    wal_writes_ring: std::cell::Cell<u64>,
    wal_inline_stalls: std::cell::Cell<u64>,
    commit_rounds_wal: std::cell::Cell<u64>,
    commit_rounds_wal_idx: std::cell::Cell<u64>,
    produce_ack_us: Histogram<{ PRODUCE_ACK_BOUNDS_US.len() }>,
}

thread_local! {
    static IO: IoMetrics = const {
        IoMetrics {
            fsync_us: Histogram::new(&FSYNC_BOUNDS_US),
            fsync_errors: std::cell::Cell::new(0),
            group_commit_batches: Histogram::new(&GROUP_COMMIT_BOUNDS),
            wal_writes_inline: std::cell::Cell::new(0),
            wal_writes_ring: std::cell::Cell::new(0),
            wal_inline_stalls: std::cell::Cell::new(0),
            commit_rounds_wal: std::cell::Cell::new(0),
            commit_rounds_wal_idx: std::cell::Cell::new(0),
            produce_ack_us: Histogram::new(&PRODUCE_ACK_BOUNDS_US),
        }
    };
}

/// Records one data fsync round (the `.wal` and `.idx` of a segment synced together).
pub fn record_fsync(elapsed: Duration, ok: bool) {
    IO.with(|io| {
        io.fsync_us
            .observe(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
        if !ok {
            io.fsync_errors.set(io.fsync_errors.get() + 1);
        }
    });
}

/// Records one group-commit write round of `batches` batches.
pub fn record_write_round(batches: u64) {
    IO.with(|io| io.group_commit_batches.observe(batches));
}

/// Records one WAL write made on the executor thread (`storage::log::inline`), and whether
/// it was slow enough to turn inline writes off.
pub fn record_wal_write_inline(stalled: bool) {
    IO.with(|io| {
        io.wal_writes_inline.set(io.wal_writes_inline.get() + 1);
        if stalled {
            io.wal_inline_stalls.set(io.wal_inline_stalls.get() + 1);
        }
    });
}

/// Records one WAL write handed to io_uring.
pub fn record_wal_write_ring() {
    IO.with(|io| io.wal_writes_ring.set(io.wal_writes_ring.get() + 1));
}

/// Records one commit round under `fsync = always`, by what its fdatasync covers: the
/// `.wal` alone (its index entries in the index journal) or `.wal` and `.idx`.
pub fn record_commit_round(wal_only: bool) {
    IO.with(|io| {
        let counter = if wal_only {
            &io.commit_rounds_wal
        } else {
            &io.commit_rounds_wal_idx
        };
        counter.set(counter.get() + 1);
    });
}

/// Records one produce acknowledged to a connection of this core: the time from its
/// batches handed to the shard (read whole, parsed and checked) to their acknowledgement
/// (durable under `fsync = always`, written under the others), the hop to the owner core
/// included. Reading the request and sending the answer are not in it: it is the broker's
/// share of an ack, to set against what a client measures.
pub fn record_produce_ack(elapsed: Duration) {
    IO.with(|io| {
        io.produce_ack_us
            .observe(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX))
    });
}

/// This core's storage I/O metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IoSnapshot {
    /// Microseconds.
    pub fsync_us: HistogramSnapshot,
    pub fsync_errors: u64,
    pub group_commit_batches: HistogramSnapshot,
    pub wal_writes_inline: u64,
    pub wal_writes_ring: u64,
    pub wal_inline_stalls: u64,
    pub commit_rounds_wal: u64,
    pub commit_rounds_wal_idx: u64,
    /// Microseconds.
    pub produce_ack_us: HistogramSnapshot,
}

pub fn snapshot() -> IoSnapshot {
    IO.with(|io| IoSnapshot {
        fsync_us: io.fsync_us.snapshot(),
        fsync_errors: io.fsync_errors.get(),
        group_commit_batches: io.group_commit_batches.snapshot(),
        wal_writes_inline: io.wal_writes_inline.get(),
        wal_writes_ring: io.wal_writes_ring.get(),
        wal_inline_stalls: io.wal_inline_stalls.get(),
        commit_rounds_wal: io.commit_rounds_wal.get(),
        commit_rounds_wal_idx: io.commit_rounds_wal_idx.get(),
        produce_ack_us: io.produce_ack_us.snapshot(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_on_this_thread_only() {
        std::thread::spawn(|| {
            record_fsync(Duration::from_micros(70), true);
            record_fsync(Duration::from_millis(3), false);
            record_write_round(5);
            record_wal_write_inline(false);
            record_wal_write_inline(true);
            record_wal_write_ring();
            record_produce_ack(Duration::from_micros(180));
            let s = snapshot();
            assert_eq!(s.produce_ack_us.count(), 1);
            assert_eq!(s.produce_ack_us.sum, 180);
            assert_eq!(
                (s.wal_writes_inline, s.wal_writes_ring, s.wal_inline_stalls),
                (2, 1, 1)
            );
            assert_eq!(s.fsync_us.count(), 2);
            assert_eq!(s.fsync_us.sum, 3_070);
            assert_eq!(s.fsync_errors, 1);
            assert_eq!(s.group_commit_batches.count(), 1);
            assert_eq!(s.group_commit_batches.sum, 5);
        })
        .join()
        .unwrap();
        std::thread::spawn(|| assert_eq!(snapshot().fsync_us.count(), 0))
            .join()
            .unwrap();
    }
}
