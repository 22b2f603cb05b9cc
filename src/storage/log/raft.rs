//! The Raft numbering of a replicated partition's batches (`docs/REPLICATION.md`): each
//! segment's Raft index base (`storage::raft_index`) plus an entry's position in the
//! segment's index. Opened with [`PartitionLog::open_raft`]; a log opened with
//! [`PartitionLog::open`] has no Raft numbering and every lookup here answers `None`.
//!
//! The lookups cover every staged batch (written or not, durable or not): raft-rs asks for
//! entries its driver appended, and the driver knows which of them are persisted. In a
//! segment that compaction rewrote, entries are gone and the ones left are renumbered by
//! position, so lookups there are wrong; replication compacts only below the Raft
//! snapshot, where raft-rs never asks for entries.

use super::PartitionLog;
use crate::storage::StorageError;
use crate::storage::raft_index::{self, Numbering};
use crate::storage::segment::Segment;

/// Where the batch of one Raft index is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftEntry {
    /// Its Raft index.
    pub index: u64,
    /// Its first offset, and the offset after it.
    pub offset: u64,
    pub next_offset: u64,
    /// The segment that holds it, and the batch's byte position and length in its `.wal`.
    pub segment_base_offset: u64,
    pub position: u64,
    pub length: u32,
    /// Raft's own entry (`index::CONTROL_BIT`), never served to readers.
    pub control: bool,
}

impl PartitionLog {
    /// True when the log was opened with a Raft numbering ([`PartitionLog::open_raft`]).
    pub fn is_raft_indexed(&self) -> bool {
        self.state.borrow().segments.active().raft_base.is_some()
    }

    /// How the log is numbered, to open it again the same way (after a truncation).
    pub(super) fn numbering(&self) -> Numbering {
        match self.state.borrow().segments.oldest().raft_base {
            Some(first_index) => Numbering::Raft { first_index },
            None => Numbering::Offsets,
        }
    }

    /// The Raft index of the batch that holds `offset`; `None` if no staged batch holds it
    /// (outside the log, in a gap compaction left) or the log has no Raft numbering.
    pub fn raft_index_of(&self, offset: u64) -> Option<u64> {
        let st = self.state.borrow();
        let segment = &st.segments.all()[st.segments.position_for(offset)];
        let raft_base = segment.raft_base?;
        let i = segment.index().find_offset(offset, segment.entries())?;
        (segment.entry(i).offset <= offset).then_some(raft_base + i as u64)
    }

    /// The batch with Raft index `index`, if the log holds it.
    pub fn offset_of_raft_index(&self, index: u64) -> Option<RaftEntry> {
        let st = self.state.borrow();
        let segments = st.segments.all();
        let holding = segments
            .partition_point(|s| s.raft_base.is_some_and(|base| base <= index))
            .checked_sub(1)?;
        let segment = &segments[holding];
        let i = usize::try_from(index - segment.raft_base?).ok()?;
        (i < segment.entries()).then(|| {
            let entry = segment.entry(i);
            RaftEntry {
                index,
                offset: entry.offset,
                next_offset: entry.next_offset(),
                segment_base_offset: segment.base_offset,
                position: u64::from(entry.position),
                length: entry.length,
                control: entry.is_control(),
            }
        })
    }

    /// The first and last Raft index the log holds; `None` when it holds no batch or has
    /// no Raft numbering.
    pub fn raft_range(&self) -> Option<(u64, u64)> {
        let first = self.state.borrow().segments.oldest().raft_base?;
        let next = self.next_raft_index()?;
        (next > first).then(|| (first, next - 1))
    }

    /// The Raft index the next staged batch gets; `None` without a Raft numbering.
    pub fn next_raft_index(&self) -> Option<u64> {
        next_of(self.state.borrow().segments.active())
    }

    /// The Raft index base of the segment a roll makes now: where the active one's
    /// numbering ends (`None` without a Raft numbering).
    pub(super) fn rolled_raft_base(&self) -> Option<u64> {
        self.next_raft_index()
    }

    /// Writes segment `base_offset`'s `.raft` durably on the blocking pool, before the
    /// segment's files are made (`storage::raft_index`). A roll of a replicated partition
    /// pays its fdatasync and directory fsync.
    pub(super) async fn write_raft_base(
        &self,
        base_offset: u64,
        raft_base: u64,
    ) -> Result<(), StorageError> {
        let dir = self
            .dir_file
            .try_clone()
            .map_err(|e| StorageError::io(&self.dir, e))?;
        glommio::executor()
            .spawn_blocking(move || raft_index::write_in(&dir, base_offset, raft_base))
            .await
            .map_err(|e| StorageError::io(&raft_index::raft_path(&self.dir, base_offset), e))
    }
}

fn next_of(segment: &Segment) -> Option<u64> {
    Some(segment.raft_base? + segment.entries() as u64)
}
