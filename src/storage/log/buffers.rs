//! Write buffers, recycled. A partition stages batches into its pending buffer; a write
//! takes that buffer and leaves another in its place. The written buffer comes back here
//! (glommio hands it back after a write on the ring too), so after warm-up a write
//! allocates nothing: the ingest path's rule is no allocation per batch, and with one
//! producer a write is a batch (`benches/ingest_alloc.rs` holds it).
//!
//! One pool per thread, that is per core, shared by its partitions. It keeps at most
//! [`POOLED_BUFFERS_MAX`] buffers of at most [`POOLED_CAPACITY_MAX_BYTES`] each, so a burst
//! that grew buffers does not pin its memory: in steady state a core's writes in flight
//! take and give back about as many as it has partitions writing at once.

use std::cell::RefCell;

/// Buffers kept per core.
pub(super) const POOLED_BUFFERS_MAX: usize = 16;
/// Larger buffers (grown by a burst at the maximum rate) are freed, not kept.
pub(super) const POOLED_CAPACITY_MAX_BYTES: usize = 4 << 20;

thread_local! {
    static POOL: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// An empty buffer with room for `capacity_bytes`: a kept one when there is one.
pub(super) fn take(capacity_bytes: usize) -> Vec<u8> {
    match POOL.with_borrow_mut(Vec::pop) {
        Some(mut buf) => {
            debug_assert!(buf.is_empty(), "pooled buffers are cleared");
            buf.reserve(capacity_bytes);
            buf
        }
        None => Vec::with_capacity(capacity_bytes),
    }
}

/// Gives a written buffer back, to be kept or freed.
pub(super) fn give(mut buf: Vec<u8>) {
    if buf.capacity() > POOLED_CAPACITY_MAX_BYTES {
        return;
    }
    buf.clear();
    POOL.with_borrow_mut(|pool| {
        if pool.len() < POOLED_BUFFERS_MAX {
            pool.push(buf);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_given_buffer_comes_back_empty_with_its_allocation() {
        let mut buf = take(4096);
        buf.extend_from_slice(b"written");
        let ptr = buf.as_ptr();
        give(buf);
        let again = take(4096);
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), ptr, "the same allocation, reused");
        assert!(again.capacity() >= 4096);
    }

    #[test]
    fn the_pool_keeps_neither_too_many_nor_too_large_buffers() {
        std::thread::spawn(|| {
            give(Vec::with_capacity(POOLED_CAPACITY_MAX_BYTES + 1));
            assert_eq!(POOL.with_borrow(Vec::len), 0, "a large buffer is freed");
            for _ in 0..POOLED_BUFFERS_MAX + 3 {
                give(Vec::with_capacity(16));
            }
            assert_eq!(POOL.with_borrow(Vec::len), POOLED_BUFFERS_MAX);
        })
        .join()
        .unwrap();
    }
}
