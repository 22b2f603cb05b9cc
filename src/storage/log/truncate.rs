//! Cutting the log back to an offset, through a close and a reopen: the files are cut
//! while nothing writes or maps them (`storage::truncate` has the steps and their crash
//! table).

use std::rc::Rc;

use super::PartitionLog;
use crate::storage::StorageError;
use crate::storage::truncate::{self, TruncateRefusal};

impl PartitionLog {
    /// Drops every batch from `offset` on, durably, and returns the log opened again, which
    /// the caller uses from now on. `offset` must be a batch's first offset (or the end:
    /// then nothing is dropped) at or above the log start; any other offset is refused
    /// before anything changes.
    ///
    /// This handle is closed by then: staging on it fails with `Closed`, and it reads as
    /// empty (its index mappings are dropped before the files under them are cut). A read
    /// plan made earlier keeps its descriptor; a byte range in it past the cut reads short.
    /// Callers cut only what no reader was shown (a replica's uncommitted tail).
    pub async fn truncate_to(
        self: &Rc<Self>,
        offset: u64,
    ) -> Result<Rc<PartitionLog>, StorageError> {
        self.check_cut(offset)?;
        let numbering = self.numbering();
        self.close().await?;
        self.state.borrow_mut().segments.unmap_indexes();
        let dir = self.dir.clone();
        glommio::executor()
            .spawn_blocking(move || truncate::truncate_closed(&dir, offset))
            .await?;
        let log = PartitionLog::open_numbered(&self.dir, self.config.clone(), numbering).await?;
        assert_eq!(log.next_offset(), offset, "the log ends at the cut");
        Ok(log)
    }

    /// Refuses a cut at `offset` that [`truncate::truncate_closed`] would refuse, while
    /// the log is still open.
    fn check_cut(&self, offset: u64) -> Result<(), StorageError> {
        let refused = |reason| StorageError::Truncate {
            dir: self.dir.clone(),
            offset,
            reason,
        };
        let log_start = self.log_start_offset();
        let next_offset = self.next_offset();
        if offset < log_start {
            return Err(refused(TruncateRefusal::BelowLogStart { log_start }));
        }
        if offset > next_offset {
            return Err(refused(TruncateRefusal::PastEnd { next_offset }));
        }
        if offset == next_offset {
            return Ok(());
        }
        let st = self.state.borrow();
        let segment = &st.segments.all()[st.segments.position_for(offset)];
        truncate::cut_point(
            segment.base_offset,
            segment.entries(),
            |i| segment.entry(i),
            offset,
        )
        .map(|_| ())
        .map_err(refused)
    }
}
