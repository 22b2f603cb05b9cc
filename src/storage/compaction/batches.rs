//! Reading a segment for a compaction pass: index entries copied out of the live log a
//! step at a time, batches read in runs and checked against their entries, and the small
//! file helpers the pass uses.

use std::path::{Path, PathBuf};

use glommio::io::BufferedFile;
use tracing::error;

use super::{ENTRIES_PER_STEP, READ_RUN_BYTES_MAX, Snapshot};
use crate::limits::Limits;
use crate::protocol::record::{self, BatchHeader, HEADER_LEN};
use crate::storage::index::IndexEntry;
use crate::storage::segment::wal_path;
use crate::storage::{PartitionLog, StorageError};

impl PartitionLog {
    /// Copies entries `from..` (at most [`ENTRIES_PER_STEP`]) of the segment, if it is still
    /// the one the pass snapshotted.
    pub(super) fn entries_of(
        &self,
        snap: &Snapshot,
        from: usize,
        out: &mut Vec<IndexEntry>,
    ) -> Result<(), StorageError> {
        out.clear();
        self.with_open_segments(|segments| {
            let segment = segments
                .find(snap.base_offset, snap.file_id)
                .ok_or(StorageError::Closed)?;
            let to = (from + ENTRIES_PER_STEP).min(snap.entries);
            out.extend((from..to).map(|i| segment.entry(i)));
            Ok(())
        })?
    }

    /// Reads every batch of a snapshotted segment in order, checks it against its index
    /// entry, and hands it (entry, key) to `visit`.
    pub(super) async fn for_each_batch(
        &self,
        file: &BufferedFile,
        snap: &Snapshot,
        limits: &Limits,
        mut visit: impl FnMut(&IndexEntry, &[u8]),
    ) -> Result<(), StorageError> {
        let mut runs = Runs::new(self, file, snap);
        while let Some(run) = runs.next().await? {
            for (entry, batch) in run.batches() {
                let header = check_batch(entry, batch, limits)?;
                visit(entry, key_of(&header, batch));
            }
        }
        Ok(())
    }
}

/// Reads a snapshotted segment in runs of consecutive batches, one read per run.
pub(super) struct Runs<'a> {
    log: &'a PartitionLog,
    file: &'a BufferedFile,
    path: PathBuf,
    snap: &'a Snapshot,
    /// Entries copied from the index, and the first of them not yet read.
    entries: Vec<IndexEntry>,
    next: usize,
    /// Entries of the segment copied so far.
    copied: usize,
}

/// Consecutive batches and their bytes.
pub(super) struct Run {
    entries: Vec<IndexEntry>,
    start: u64,
    bytes: glommio::io::ReadResult,
}

impl Run {
    pub(super) fn batches(&self) -> impl Iterator<Item = (&IndexEntry, &[u8])> {
        self.entries.iter().map(|entry| {
            let at = usize::try_from(u64::from(entry.position) - self.start).expect("in run");
            (entry, &self.bytes[at..at + entry.length as usize])
        })
    }
}

impl<'a> Runs<'a> {
    pub(super) fn new(
        log: &'a PartitionLog,
        file: &'a BufferedFile,
        snap: &'a Snapshot,
    ) -> Runs<'a> {
        Runs {
            log,
            file,
            path: wal_path(log.dir(), snap.base_offset),
            snap,
            entries: Vec::with_capacity(ENTRIES_PER_STEP),
            next: 0,
            copied: 0,
        }
    }

    pub(super) async fn next(&mut self) -> Result<Option<Run>, StorageError> {
        // Yield between reads: a pass runs beside produce and fetch on this core.
        glommio::yield_if_needed().await;
        if self.next == self.entries.len() {
            if self.copied == self.snap.entries {
                return Ok(None);
            }
            self.log
                .entries_of(self.snap, self.copied, &mut self.entries)?;
            self.copied += self.entries.len();
            self.next = 0;
        }
        let first = self.next;
        let start = u64::from(self.entries[first].position);
        let mut end = first + 1;
        while end < self.entries.len()
            && self.entries[end].end_position() - start <= READ_RUN_BYTES_MAX
        {
            end += 1;
        }
        self.next = end;
        let run_len = self.entries[end - 1].end_position() - start;
        let bytes = read_exact(self.file, &self.path, &self.entries[first], start, run_len).await?;
        Ok(Some(Run {
            entries: self.entries[first..end].to_vec(),
            start,
            bytes,
        }))
    }
}

/// The key of a checked batch.
pub(super) fn key_of<'b>(header: &BatchHeader, batch: &'b [u8]) -> &'b [u8] {
    &batch[HEADER_LEN..HEADER_LEN + header.key_len as usize]
}

pub(super) fn index_end(entries: &[IndexEntry]) -> u64 {
    entries.last().map_or(0, IndexEntry::end_position)
}

/// Checks a batch read from a segment against its index entry: the same checks a reader
/// makes (sane header, the offset and length the entry says, the CRC it stores).
pub(super) fn check_batch(
    entry: &IndexEntry,
    batch: &[u8],
    limits: &Limits,
) -> Result<BatchHeader, StorageError> {
    let corrupt = || StorageError::Corrupt {
        offset: entry.offset,
        next_offset: entry.next_offset(),
    };
    let header = record::check(batch, limits).map_err(|_| corrupt())?;
    if header.offset != entry.offset
        || header.batch_len() != batch.len()
        || crate::storage::index::stored_records(header.record_count) != Some(entry.records)
        || record::batch_crc(batch) != entry.crc
    {
        return Err(corrupt());
    }
    Ok(header)
}

pub(super) async fn open_reader(path: &Path) -> Result<BufferedFile, StorageError> {
    BufferedFile::open(path)
        .await
        .map_err(|e| StorageError::io(path, e.into()))
}

pub(super) async fn create(path: &Path) -> Result<BufferedFile, StorageError> {
    glommio::io::OpenOptions::new()
        .write(true)
        .create_new(true)
        .buffered_open(path)
        .await
        .map_err(|e| StorageError::io(path, e.into()))
}

pub(super) async fn close(file: BufferedFile) {
    let _ = file.close().await;
}

pub(super) async fn read_exact(
    file: &BufferedFile,
    path: &Path,
    first: &IndexEntry,
    position: u64,
    len: u64,
) -> Result<glommio::io::ReadResult, StorageError> {
    let len_usize = usize::try_from(len).expect("runs fit memory");
    let bytes = file
        .read_at(position, len_usize)
        .await
        .map_err(|e| StorageError::io(path, e.into()))?;
    if bytes.len() != len_usize {
        // The index points past the end of the WAL: the segment is damaged.
        error!(path = %path.display(), position, len, got = bytes.len(), "segment shorter than its index");
        return Err(StorageError::Corrupt {
            offset: first.offset,
            next_offset: first.next_offset(),
        });
    }
    Ok(bytes)
}

pub(super) async fn write_all(
    file: &BufferedFile,
    path: &Path,
    buf: Vec<u8>,
    position: u64,
) -> Result<(), StorageError> {
    let len = buf.len();
    let written = file
        .write_at(buf, position)
        .await
        .map_err(|e| StorageError::io(path, e.into()))?;
    if written != len {
        return Err(StorageError::io(
            path,
            std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                format!("short write: {written} of {len} bytes"),
            ),
        ));
    }
    Ok(())
}
