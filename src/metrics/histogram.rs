//! Fixed-bucket histograms for one core: plain `Cell`s, so recording is a bucket search over
//! a dozen bounds and two additions, with no atomics, locks or allocation.

use std::cell::Cell;

/// Upper bounds of fsync latency buckets, in microseconds (rendered in seconds). From a
/// fast NVMe flush (~50 us) to a disk in trouble (over a second).
pub const FSYNC_BOUNDS_US: [u64; 15] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000,
];

/// Upper bounds of produce acknowledgement times, in microseconds (rendered in seconds):
/// fine where one message in flight lives (tens to hundreds of microseconds), coarse past
/// a millisecond, up to a produce that waited a second.
pub const PRODUCE_ACK_BOUNDS_US: [u64; 22] = [
    25, 50, 75, 100, 125, 150, 175, 200, 250, 300, 350, 500, 750, 1_000, 2_500, 5_000, 10_000,
    25_000, 50_000, 100_000, 250_000, 1_000_000,
];

/// Upper bounds of group-commit round sizes: batches written by one write (and, under
/// `fsync = always`, made durable by one fdatasync).
pub const GROUP_COMMIT_BOUNDS: [u64; 12] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096];

/// A histogram with `N` finite buckets and an implicit `+Inf` one.
#[derive(Debug)]
pub struct Histogram<const N: usize> {
    bounds: &'static [u64; N],
    /// `counts[i]` holds observations `<= bounds[i]` and `> bounds[i-1]`; `counts[N]` the rest.
    counts: [Cell<u64>; N],
    overflow: Cell<u64>,
    sum: Cell<u64>,
}

impl<const N: usize> Histogram<N> {
    pub const fn new(bounds: &'static [u64; N]) -> Self {
        Histogram {
            bounds,
            counts: [const { Cell::new(0) }; N],
            overflow: Cell::new(0),
            sum: Cell::new(0),
        }
    }

    pub fn observe(&self, value: u64) {
        let bucket = self.bounds.partition_point(|&bound| bound < value);
        let cell = self.counts.get(bucket).unwrap_or(&self.overflow);
        cell.set(cell.get() + 1);
        self.sum.set(self.sum.get().saturating_add(value));
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut counts: Vec<u64> = self.counts.iter().map(Cell::get).collect();
        counts.push(self.overflow.get());
        HistogramSnapshot {
            bounds: self.bounds.to_vec(),
            counts,
            sum: self.sum.get(),
        }
    }
}

/// A histogram's values at one moment, to be sent to the core that renders a scrape.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HistogramSnapshot {
    /// Finite upper bounds, ascending.
    pub bounds: Vec<u64>,
    /// Per-bucket (not cumulative) counts: one per bound, then the `+Inf` bucket.
    pub counts: Vec<u64>,
    pub sum: u64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// `(upper bound, cumulative count)` per finite bucket, as Prometheus wants them.
    pub fn cumulative(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.bounds
            .iter()
            .zip(&self.counts)
            .scan(0u64, |total, (&bound, &count)| {
                *total += count;
                Some((bound, *total))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static BOUNDS: [u64; 3] = [10, 100, 1000];

    #[test]
    fn buckets_are_inclusive_upper_bounds() {
        let h = Histogram::new(&BOUNDS);
        for v in [0, 10, 11, 100, 999, 1000, 1001, u64::MAX] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(s.counts, vec![2, 2, 2, 2]);
        assert_eq!(s.count(), 8);
        assert_eq!(s.sum, u64::MAX, "the sum saturates instead of wrapping");
        let cumulative: Vec<_> = s.cumulative().collect();
        assert_eq!(cumulative, vec![(10, 2), (100, 4), (1000, 6)]);
    }

    #[test]
    fn bounds_ascend() {
        assert!(FSYNC_BOUNDS_US.windows(2).all(|w| w[0] < w[1]));
        assert!(GROUP_COMMIT_BOUNDS.windows(2).all(|w| w[0] < w[1]));
    }
}
