//! The next segment's files, made ahead of the roll that needs them.
//!
//! Making a segment syncs twice: the index's extended length (`storage::segment`, so that
//! after a power cut a batch whose entry never became durable reads as an empty slot), and
//! the directory. While the old segment's seal (`super::seal`) or any heavy write-back keeps
//! the disk busy, each of those flushes waits behind it: up to 1.4 s measured under `never`
//! at the maximum rate, on a roll's path, with every ack of the partition waiting.
//!
//! So each log keeps a *spare*: `next-segment.idx` (extended, its length synced) and an
//! empty `next-segment.wal`, made on the blocking pool once the active segment is half
//! full (a partition that never fills half a segment has no spare files). A roll renames them to the new segment's names (the index
//! first) and syncs nothing on its path: under `always` it fsyncs the directory before the
//! new segment takes batches, as before (an acknowledged batch's file must be durable in its
//! directory); under `never` and `interval` the seal of the old segment does it, and
//! whatever makes the new segment's batches durable waits for that seal first.
//!
//! A roll that finds no spare ready makes the segment in place, syncs included.
//!
//! # A crash around a spare
//!
//! | when | on disk | the next open |
//! |---|---|---|
//! | while the spare is made, or once it is | `next-segment.*`, whole or not | ignores them (not segment names); the next spare made replaces them |
//! | after the renames, before the directory's fsync | the old names, or the new ones (an index under its new name at least whenever the WAL has its new one) | a new segment without data, or with batches that were never durable: scanned like any active segment |

use std::rc::Rc;

use tracing::warn;

use super::PartitionLog;
use crate::storage::segment::{self, Segment};
use crate::storage::{FsyncPolicy, StorageError};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Spare {
    Absent,
    /// A job on the blocking pool makes it.
    Making,
    Ready,
}

impl PartitionLog {
    /// Starts making the spare unless there is one or it is being made.
    pub(super) fn make_spare(&self) {
        if self.spare.get() != Spare::Absent {
            return;
        }
        let dir = match self.dir_file.try_clone() {
            Ok(dir) => dir,
            Err(error) => {
                warn!(dir = %self.dir.display(), %error, "could not make the next segment ahead");
                return;
            }
        };
        self.spare.set(Spare::Making);
        let spare = Rc::clone(&self.spare);
        let path = self.dir.clone();
        let index_entries = self.config.index_entries;
        glommio::spawn_local(async move {
            let made = glommio::executor()
                .spawn_blocking(move || segment::make_spare(&dir, index_entries))
                .await;
            match made {
                Ok(()) => spare.set(Spare::Ready),
                Err(error) => {
                    // The next roll makes its segment in place.
                    warn!(dir = %path.display(), %error, "could not make the next segment ahead");
                    spare.set(Spare::Absent);
                }
            }
        })
        .detach();
    }

    /// The next active segment, at `base`: the spare if it is ready, else one made now.
    pub(super) async fn next_segment(&self, base: u64) -> Result<Segment, StorageError> {
        let (entries, slots) = (self.config.index_entries, self.writer_setup);
        if self.spare.get() != Spare::Ready {
            let created = Segment::create(&self.dir, base, entries, slots).await?;
            self.sync_dir().await?;
            return Ok(created);
        }
        self.spare.set(Spare::Absent);
        let installed =
            Segment::install_spare(&self.dir, &self.dir_file, base, entries, slots).await?;
        if self.config.fsync == FsyncPolicy::Always {
            self.sync_dir().await?;
        }
        Ok(installed)
    }
}
