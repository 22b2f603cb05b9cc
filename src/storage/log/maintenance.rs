//! The narrow API through which compaction and retention see and change a log's segments.
//! Each mutation is synchronous (nothing can interleave with it on this core) and goes
//! through [`SegmentList`], which keeps the list contiguous.

use super::{PartitionLog, SegmentList};
use crate::storage::StorageError;
use crate::storage::segment::{FileId, Segment};

impl PartitionLog {
    /// Looks at the segment list as it is now.
    pub(crate) fn with_segments<R>(&self, f: impl FnOnce(&SegmentList) -> R) -> R {
        f(&self.state.borrow().segments)
    }

    /// Looks at the segment list, if the log is still open (not closing, closed or fenced).
    pub(crate) fn with_open_segments<R>(
        &self,
        f: impl FnOnce(&SegmentList) -> R,
    ) -> Result<R, StorageError> {
        let st = self.state.borrow();
        st.check_open()?;
        Ok(f(&st.segments))
    }

    /// Replaces the closed segment `base_offset` (if it is still the file `file_id` and the
    /// log is open) by what `install` returns. `install` runs first and synchronously: it
    /// renames the rewritten files into place and opens them. The replacement must cover
    /// the same offsets. `Closed` if the segment is gone (deleted, or the log closed): then
    /// `install` does not run.
    pub(crate) fn replace_closed_segment(
        &self,
        base_offset: u64,
        file_id: FileId,
        install: impl FnOnce() -> Result<Segment, StorageError>,
    ) -> Result<(), StorageError> {
        let mut st = self.state.borrow_mut();
        st.check_open()?;
        let i = st
            .segments
            .find_closed(base_offset, file_id)
            .ok_or(StorageError::Closed)?;
        let replacement = install()?;
        st.segments.replace_closed(i, replacement);
        self.checks.borrow_mut().replaced(base_offset);
        Ok(())
    }

    /// Removes the oldest closed segment from the list if `expired(oldest, bytes of all
    /// segments)` says so, and returns its base offset and size; the caller deletes its
    /// files. Readers that plan a fetch from then on no longer see it. `None` when there is
    /// no closed segment or it has not expired.
    pub(crate) fn retire_oldest_segment(
        &self,
        expired: impl FnOnce(&Segment, u64) -> bool,
    ) -> Option<(u64, u64)> {
        let mut st = self.state.borrow_mut();
        let closed = st.segments.closed();
        let oldest = closed.first()?;
        let total: u64 = st.segments.all().iter().map(|s| s.size_bytes).sum();
        if !expired(oldest, total) {
            return None;
        }
        let retired = st
            .segments
            .remove_oldest_closed()
            .expect("a closed segment exists");
        Some((retired.base_offset, retired.size_bytes))
    }
}
