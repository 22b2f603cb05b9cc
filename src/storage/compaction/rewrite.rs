//! Rewriting one closed segment: the file dance of the parent module's docs (write aside,
//! commit point, install), each step checked before the next.

use std::fs;
use std::path::Path;
use std::rc::Rc;

use glommio::io::BufferedFile;
use tracing::info;

use super::batches::{
    Runs, check_batch, close, create, index_end, key_of, open_reader, read_exact, write_all,
};
use super::{
    KeyMap, Snapshot, Step, WRITE_CHUNK_BYTES, cleaning_paths, crash_point, remove_if_exists,
    rename, swap_paths,
};
use crate::limits::Limits;
use crate::storage::index::{ENTRY_LEN, IndexEntry};
use crate::storage::segment::{Segment, idx_path, wal_path};
use crate::storage::{PartitionLog, StorageError};

impl PartitionLog {
    /// Rewrites one closed segment without its superseded batches. Returns (bytes before,
    /// bytes after, batches removed), or `None` when nothing in it is superseded.
    pub(super) async fn rewrite(
        self: &Rc<Self>,
        snap: &Snapshot,
        map: &KeyMap,
        limits: &Limits,
    ) -> Result<Option<(u64, u64, u64)>, StorageError> {
        let dir = self.dir().to_path_buf();
        let base = snap.base_offset;
        let wal = wal_path(&dir, base);
        let last_offset = self.last_entry_offset(snap)?;

        // A read-only look first: most segments of a settled log have nothing to drop.
        let reader = open_reader(&wal).await?;
        let mut droppable = 0u64;
        let scan = self
            .for_each_batch(&reader, snap, limits, |entry, key| {
                if entry.offset != last_offset && map.superseded(key, entry.offset) {
                    droppable += 1;
                }
            })
            .await;
        if let Err(e) = scan {
            close(reader).await;
            return Err(e);
        }
        if droppable == 0 {
            close(reader).await;
            return Ok(None);
        }

        let (wal_cleaning, idx_cleaning) = cleaning_paths(&dir, base);
        remove_if_exists(&wal_cleaning)?;
        remove_if_exists(&idx_cleaning)?;
        let written = self
            .write_aside(
                &reader,
                snap,
                map,
                limits,
                last_offset,
                &wal_cleaning,
                &idx_cleaning,
            )
            .await;
        close(reader).await;
        let (kept, size_after) = match written {
            Ok(done) => done,
            Err(e) => {
                remove_if_exists(&wal_cleaning)?;
                remove_if_exists(&idx_cleaning)?;
                return Err(e);
            }
        };
        crash_point(Step::Written);

        // Step 2, the commit point. Nothing awaits between the check and the renames, so
        // no other task of this core (topic deletion, close) can slip in between.
        let still_ours = self.with_open_segments(|segments| {
            let i = segments.find_closed(base, snap.file_id)?;
            Some(segments.all()[i].size_bytes)
        });
        let Ok(Some(size_before)) = still_ours else {
            remove_if_exists(&wal_cleaning)?;
            remove_if_exists(&idx_cleaning)?;
            return Err(StorageError::Closed);
        };
        let (wal_swap, idx_swap) = swap_paths(&dir, base);
        rename(&wal_cleaning, &wal_swap)?;
        crash_point(Step::WalSwapped);
        rename(&idx_cleaning, &idx_swap)?;
        self.sync_dir().await?;
        crash_point(Step::Committed);

        // Step 3: install. Again no await between the check, the renames and the swap of
        // the in-memory segment, so readers see either the old segment or the new one. If
        // the log was closed or the segment deleted after the commit point, nothing is
        // renamed here: the next open finishes the swap from the names on disk (if the
        // directory still exists).
        self.replace_closed_segment(base, snap.file_id, || {
            rename(&wal_swap, &wal)?;
            crash_point(Step::WalInstalled);
            rename(&idx_swap, &idx_path(&dir, base))?;
            let replacement = Segment::open_sealed(&dir, base)?;
            assert_eq!(
                (replacement.entries(), replacement.size_bytes),
                (kept, size_after),
                "the installed segment is the one written aside"
            );
            Ok(replacement)
        })?;
        self.sync_dir().await?;
        crash_point(Step::Installed);
        let removed = droppable;
        info!(dir = %dir.display(), base, bytes_before = size_before, bytes_after = size_after, batches_removed = removed, "compacted a segment");
        Ok(Some((size_before, size_after, removed)))
    }

    fn last_entry_offset(&self, snap: &Snapshot) -> Result<u64, StorageError> {
        self.with_segments(|segments| {
            segments
                .find(snap.base_offset, snap.file_id)
                .and_then(Segment::last_entry)
                .map(|e| e.offset)
                .ok_or(StorageError::Closed)
        })
    }

    /// Step 1: writes the kept batches and their new index to the `.cleaning` files, syncs
    /// them, and reads them back. Returns (entries kept, WAL bytes).
    #[allow(clippy::too_many_arguments)]
    async fn write_aside(
        &self,
        reader: &BufferedFile,
        snap: &Snapshot,
        map: &KeyMap,
        limits: &Limits,
        last_offset: u64,
        wal_cleaning: &Path,
        idx_cleaning: &Path,
    ) -> Result<(usize, u64), StorageError> {
        let wal_out = create(wal_cleaning).await?;
        let idx_out = create(idx_cleaning).await?;
        let mut pending = Vec::with_capacity(WRITE_CHUNK_BYTES);
        let mut index = Vec::new();
        let mut new_entries = Vec::new();
        // Bytes of the new WAL already handed to the kernel; `pending` follows them.
        let mut written = 0u64;
        let mut max_timestamp_ns = 0u64;
        let copied = async {
            let mut runs = Runs::new(self, reader, snap);
            while let Some(run) = runs.next().await? {
                for (entry, batch) in run.batches() {
                    let header = check_batch(entry, batch, limits)?;
                    if entry.offset != last_offset
                        && !entry.is_control()
                        && map.superseded(key_of(&header, batch), entry.offset)
                    {
                        continue;
                    }
                    max_timestamp_ns = max_timestamp_ns.max(header.timestamp_ns);
                    let position = written + pending.len() as u64;
                    let kept = IndexEntry {
                        offset: entry.offset,
                        max_timestamp_ns,
                        position: u32::try_from(position).expect("a rewrite only shrinks"),
                        length: entry.length,
                        records: entry.records,
                        crc: entry.crc,
                        format: entry.format,
                    };
                    let mut slot = [0u8; ENTRY_LEN];
                    kept.encode(&mut slot);
                    index.extend_from_slice(&slot);
                    new_entries.push(kept);
                    pending.extend_from_slice(batch);
                }
                if pending.len() >= WRITE_CHUNK_BYTES {
                    let len = pending.len() as u64;
                    let chunk =
                        std::mem::replace(&mut pending, Vec::with_capacity(WRITE_CHUNK_BYTES));
                    write_all(&wal_out, wal_cleaning, chunk, written).await?;
                    written += len;
                }
            }
            let len = pending.len() as u64;
            write_all(
                &wal_out,
                wal_cleaning,
                std::mem::take(&mut pending),
                written,
            )
            .await?;
            written += len;
            write_all(&idx_out, idx_cleaning, std::mem::take(&mut index), 0).await?;
            wal_out
                .fdatasync()
                .await
                .map_err(|e| StorageError::io(wal_cleaning, e.into()))?;
            idx_out
                .fdatasync()
                .await
                .map_err(|e| StorageError::io(idx_cleaning, e.into()))
        }
        .await;
        close(wal_out).await;
        close(idx_out).await;
        copied?;
        assert_eq!(
            written,
            index_end(&new_entries),
            "WAL and index agree on the size"
        );

        // Read back what was written and check it as a reader would: the new files must
        // serve exactly the kept batches.
        let check = open_reader(wal_cleaning).await?;
        let first = new_entries.first().expect("a segment keeps its last batch");
        let back = read_exact(&check, wal_cleaning, first, 0, written).await;
        close(check).await;
        let back = back?;
        for entry in &new_entries {
            let batch = &back[entry.position as usize..entry.end_position() as usize];
            check_batch(entry, batch, limits)?;
        }
        let idx_back = fs::read(idx_cleaning).map_err(|e| StorageError::io(idx_cleaning, e))?;
        assert_eq!(idx_back.len(), new_entries.len() * ENTRY_LEN);
        for (slot, entry) in idx_back.chunks_exact(ENTRY_LEN).zip(&new_entries) {
            assert_eq!(
                IndexEntry::decode(slot),
                *entry,
                "index read back as written"
            );
        }
        Ok((new_entries.len(), written))
    }
}
