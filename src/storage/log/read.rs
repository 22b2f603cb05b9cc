//! Reads: plans of batches for sendfile, checked against their CRCs where the bytes came
//! from disk unchecked, and in-memory reads for tools and compaction.

use std::cell::Cell;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;

use super::PartitionLog;
use crate::storage::StorageError;
use crate::storage::index::IndexEntry;
use crate::storage::verify;

/// Where a reader finds a run of batches: a byte range of one segment file, with the index
/// entries (offsets, lengths, CRCs) of the batches in it. The caller sends the range with
/// sendfile or reads it; the log never copies the bytes.
#[derive(Debug, Clone)]
pub struct ReadPlan {
    /// Read-only descriptor of the segment's `.wal`.
    pub file: Rc<File>,
    /// (device, inode) of that file.
    pub file_id: crate::storage::segment::FileId,
    pub segment_base_offset: u64,
    pub position: u64,
    pub length: u64,
    pub batches: Vec<IndexEntry>,
    pub high_watermark: u64,
    pub log_start_offset: u64,
}

impl ReadPlan {
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Offset after the last batch in the plan.
    pub fn next_offset(&self) -> Option<u64> {
        self.batches.last().map(IndexEntry::next_offset)
    }
}

/// A batch read back into memory, checked against its CRC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredBatch {
    pub entry: IndexEntry,
    pub bytes: Bytes,
}

impl PartitionLog {
    /// Plans a read of batches from `offset` on: at least one batch (even if larger than
    /// `max_bytes`), then as many as fit in `max_bytes`, all from one segment, none of them
    /// a control batch (the plan ends before one; a plan from one starts after it, so a
    /// reader sees a gap of one offset). An offset at the high watermark gives an empty
    /// plan, and so does one where only control batches lie below it; one outside the log
    /// an error.
    pub fn read_plan(&self, offset: u64, max_bytes: u64) -> Result<ReadPlan, StorageError> {
        let high_watermark = self.high_watermark();
        let log_start_offset = self.log_start_offset();
        if offset < log_start_offset || offset > high_watermark {
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                earliest: log_start_offset,
                latest: high_watermark,
            });
        }
        let st = self.state.borrow();
        let first = st.segments.position_for(offset);
        for segment in &st.segments.all()[first..] {
            let visible = segment.index().entries_below(high_watermark);
            let Some(start) = segment.index().find_offset(offset, visible) else {
                continue;
            };
            // Only a replicated partition's segments hold control batches (Raft's own
            // entries, never served): the plan of any other pays nothing for them.
            let planned = if segment.raft_base.is_some() {
                plan_batches::<true>(segment, start, visible, max_bytes)
            } else {
                plan_batches::<false>(segment, start, visible, max_bytes)
            };
            let Some((mut batches, mut length)) = planned else {
                continue;
            };
            // Never serve a batch known to be damaged: stop before it, or refuse a read that
            // starts in it.
            let span = batches[0].offset..batches.last().expect("one batch").next_offset();
            if let Some(bad) = self.checks.borrow().first_corrupt_in(span) {
                batches.retain(|b| b.next_offset() <= bad.start);
                if batches.is_empty() {
                    return Err(StorageError::Corrupt {
                        offset: bad.start,
                        next_offset: bad.end,
                    });
                }
                length = batches.iter().map(|b| u64::from(b.length)).sum();
            }
            return Ok(ReadPlan {
                file: Rc::clone(segment.reader()),
                file_id: segment.file_id,
                segment_base_offset: segment.base_offset,
                position: u64::from(batches[0].position),
                length,
                batches,
                high_watermark,
                log_start_offset,
            });
        }
        let active = st.segments.active();
        Ok(ReadPlan {
            file: Rc::clone(active.reader()),
            file_id: active.file_id,
            segment_base_offset: active.base_offset,
            position: 0,
            length: 0,
            batches: Vec::new(),
            high_watermark,
            log_start_offset,
        })
    }

    /// Checks the plan's batches that came from disk unchecked (see [`verify`]) and returns
    /// the plan cut before the first damaged one, or `Corrupt` if that is its first batch.
    /// The flag says whether bytes were read (so they are in the page cache now); the count
    /// is the damaged batches this call found (each is found once).
    pub async fn check_plan(
        &self,
        plan: ReadPlan,
    ) -> (Result<(ReadPlan, bool), StorageError>, u64) {
        let found = Cell::new(0);
        let checked = self.check_plan_counting(plan, &found).await;
        (checked, found.get())
    }

    async fn check_plan_counting(
        &self,
        mut plan: ReadPlan,
        found: &Cell<u64>,
    ) -> Result<(ReadPlan, bool), StorageError> {
        let base = plan.segment_base_offset;
        let todo: Vec<IndexEntry> = {
            let checks = self.checks.borrow();
            let pending = checks.unchecked_batches(base, &plan.batches);
            pending.into_iter().map(|i| plan.batches[i]).collect()
        };
        if todo.is_empty() {
            return Ok((plan, false));
        }
        let verdicts = verify::check_on_blocking_thread(&plan.file, todo.clone())
            .await
            .map_err(|e| StorageError::io(&self.dir, e))?;
        {
            let mut checks = self.checks.borrow_mut();
            for (entry, verdict) in todo.iter().zip(verdicts) {
                checks.checked(base, u64::from(entry.position)..entry.end_position());
                if let Err(mismatch) = verdict
                    && checks.mark_corrupt(entry)
                {
                    found.set(found.get() + 1);
                    tracing::error!(
                        dir = %self.dir.display(),
                        segment = base,
                        offset = entry.offset,
                        next_offset = entry.next_offset(),
                        position = entry.position,
                        %mismatch,
                        "corrupt batch found on read; it is not served"
                    );
                }
            }
        }
        let span = plan.batches[0].offset..plan.next_offset().expect("not empty");
        if let Some(bad) = self.checks.borrow().first_corrupt_in(span) {
            plan.batches.retain(|b| b.next_offset() <= bad.start);
            if plan.batches.is_empty() {
                return Err(StorageError::Corrupt {
                    offset: bad.start,
                    next_offset: bad.end,
                });
            }
            plan.length = plan.batches.iter().map(|b| u64::from(b.length)).sum();
        }
        Ok((plan, true))
    }

    /// Reads batches from `offset` on into memory and checks each against its CRC. For tools,
    /// compaction and tests; consumers are served by sendfile from a [`ReadPlan`].
    pub fn read(&self, offset: u64, max_bytes: u64) -> Result<Vec<StoredBatch>, StorageError> {
        let plan = self.read_plan(offset, max_bytes)?;
        read_planned(&plan, &self.dir)
    }

    /// Finds the first offset whose batch has a timestamp at or after `timestamp_ns` (by the
    /// running maximum), or `None` if every visible batch is older.
    pub fn offset_for_timestamp(&self, timestamp_ns: u64) -> Option<u64> {
        let high_watermark = self.high_watermark();
        let st = self.state.borrow();
        st.segments
            .all()
            .iter()
            .find_map(|segment| {
                let i = segment
                    .index()
                    .find_timestamp(timestamp_ns, segment.entries())?;
                let entry = segment.entry(i);
                // A control batch keeps the running maximum of the batch before it, so it is
                // found only first in its segment; a fetch from its end skips any that follow.
                let offset = if entry.is_control() {
                    entry.next_offset()
                } else {
                    entry.offset
                };
                (offset < high_watermark).then_some(offset)
            })
            // Never below the start a client moved the log to.
            .map(|offset| offset.max(self.start_floor.get()))
    }
}

/// The batches of a plan in `segment` from entry `start` (below `visible`) and their bytes:
/// at least one, then as many as fit in `max_bytes`. With `CONTROLS` (a replicated
/// partition), a control batch is never taken: the plan starts after any at `start` and
/// stops before the next one (`None` when only control batches are left). Without it the
/// loop is the one every partition ran before control batches existed.
fn plan_batches<const CONTROLS: bool>(
    segment: &crate::storage::segment::Segment,
    mut start: usize,
    visible: usize,
    max_bytes: u64,
) -> Option<(Vec<IndexEntry>, u64)> {
    if CONTROLS {
        while start < visible && segment.entry(start).is_control() {
            start += 1;
        }
        if start == visible {
            return None;
        }
    }
    let mut batches = Vec::new();
    let mut length = 0u64;
    for i in start..visible {
        let entry = segment.entry(i);
        if (CONTROLS && entry.is_control())
            || (!batches.is_empty() && length + u64::from(entry.length) > max_bytes)
        {
            break;
        }
        length += u64::from(entry.length);
        batches.push(entry);
    }
    Some((batches, length))
}

/// Reads a plan's bytes with `pread` and checks every batch against its entry; stops before
/// the first that fails (`Corrupt` if that is the first).
pub fn read_planned(plan: &ReadPlan, dir: &Path) -> Result<Vec<StoredBatch>, StorageError> {
    let mut buf = vec![0u8; usize::try_from(plan.length).expect("plan fits memory")];
    plan.file
        .read_exact_at(&mut buf, plan.position)
        .map_err(|e| match e.kind() {
            // The index points past the end of the file: it is damaged.
            std::io::ErrorKind::UnexpectedEof => StorageError::Corrupt {
                offset: plan.batches.first().map_or(0, |b| b.offset),
                next_offset: plan.batches.first().map_or(0, IndexEntry::next_offset),
            },
            _ => StorageError::io(dir, e),
        })?;
    let buf = Bytes::from(buf);
    let mut batches = Vec::with_capacity(plan.batches.len());
    for entry in &plan.batches {
        let at = usize::try_from(u64::from(entry.position) - plan.position).expect("in plan");
        let bytes = buf.slice(at..at + entry.length as usize);
        if verify::check_batch(&bytes, entry).is_err() {
            // Serve what comes before; the read that starts at it gets the error.
            if !batches.is_empty() {
                break;
            }
            return Err(StorageError::Corrupt {
                offset: entry.offset,
                next_offset: entry.next_offset(),
            });
        }
        batches.push(StoredBatch {
            entry: *entry,
            bytes,
        });
    }
    Ok(batches)
}
