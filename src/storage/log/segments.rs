//! The segment list of a partition: oldest first, the last one active. Its methods are the
//! only way to change it, and each keeps the list contiguous (every segment begins at the
//! offset where the one before it ends) and never without an active segment.

use crate::storage::segment::{FileId, Segment};

pub(crate) struct SegmentList {
    segments: Vec<Segment>,
}

impl SegmentList {
    /// Takes the segments `open` recovered. Panics unless they are contiguous and there is
    /// at least one (open creates the first segment of a new partition).
    pub(crate) fn new(segments: Vec<Segment>) -> SegmentList {
        assert!(!segments.is_empty(), "a log always has an active segment");
        let list = SegmentList { segments };
        assert!(list.is_contiguous(), "segments must continue each other");
        list
    }

    fn is_contiguous(&self) -> bool {
        self.segments
            .windows(2)
            .all(|pair| pair[1].base_offset == pair[0].next_offset)
    }

    /// After every change (rolls, retention, compaction: rare, so in every build).
    fn check(&self) {
        assert!(
            !self.segments.is_empty(),
            "a log always has an active segment"
        );
        assert!(self.is_contiguous(), "segments must continue each other");
    }

    /// Every segment, oldest first.
    pub(crate) fn all(&self) -> &[Segment] {
        &self.segments
    }

    /// The sealed segments, oldest first (all but the active one).
    pub(crate) fn closed(&self) -> &[Segment] {
        &self.segments[..self.segments.len() - 1]
    }

    pub(crate) fn oldest(&self) -> &Segment {
        &self.segments[0]
    }

    pub(crate) fn active(&self) -> &Segment {
        self.segments
            .last()
            .expect("a log always has an active segment")
    }

    /// The active segment, to stage into or cut back. Only its end may change: its base
    /// offset stays where the previous segment ends.
    pub(crate) fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a log always has an active segment")
    }

    /// Index of the first segment that can hold `offset` (the last whose base is at or
    /// below it, or the first).
    pub(crate) fn position_for(&self, offset: u64) -> usize {
        self.segments
            .partition_point(|s| s.base_offset <= offset)
            .saturating_sub(1)
    }

    /// The closed segment with this base offset, if it is still the file `file_id` (a
    /// compaction pass or a retention delete may have replaced or removed it).
    pub(crate) fn find_closed(&self, base_offset: u64, file_id: FileId) -> Option<usize> {
        self.closed()
            .iter()
            .position(|s| s.base_offset == base_offset && s.file_id == file_id)
    }

    /// The segment with this base offset if it is still the file `file_id`.
    pub(crate) fn find(&self, base_offset: u64, file_id: FileId) -> Option<&Segment> {
        self.segments
            .iter()
            .find(|s| s.base_offset == base_offset && s.file_id == file_id)
    }

    /// Makes `segment` the new active segment, after the old one was sealed.
    pub(crate) fn push_active(&mut self, segment: Segment) {
        let previous = self.active();
        assert!(
            !previous.is_active(),
            "the old active segment is sealed first"
        );
        assert_eq!(
            segment.base_offset, previous.next_offset,
            "a new segment begins where the active one ends"
        );
        self.segments.push(segment);
        self.check();
    }

    /// Removes the oldest closed segment (never the active one); `None` if there is none.
    pub(crate) fn remove_oldest_closed(&mut self) -> Option<Segment> {
        if self.segments.len() < 2 {
            return None;
        }
        let removed = self.segments.remove(0);
        self.check();
        Some(removed)
    }

    /// Replaces closed segment `i` by a rewrite of it (compaction), which must cover the
    /// same offsets: same base, same end.
    pub(crate) fn replace_closed(&mut self, i: usize, segment: Segment) {
        assert!(
            i + 1 < self.segments.len(),
            "only closed segments are replaced"
        );
        let old = &self.segments[i];
        assert_eq!(
            (segment.base_offset, segment.next_offset),
            (old.base_offset, old.next_offset),
            "a rewritten segment keeps its base and end offsets"
        );
        // Same first batch, so the same Raft index base (`storage::raft_index`).
        let mut segment = segment;
        segment.raft_base = old.raft_base;
        self.segments[i] = segment;
        self.check();
    }

    /// Drops every segment's index mapping, for a closed log whose files are about to be
    /// cut (a mapping must not outlive the bytes it maps). The log reads as empty after.
    pub(crate) fn unmap_indexes(&mut self) {
        for segment in &mut self.segments {
            segment.index = crate::storage::index::Index::empty();
        }
    }
}
