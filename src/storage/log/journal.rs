//! Single-flush commit rounds under `fsync = always`.
//!
//! A round that runs alone (no other round in flight) writes its batches, then an index
//! journal record holding the entries of every batch written since the last entry known
//! durable in the `.idx` (`storage::index_journal`), and fdatasyncs the `.wal` alone: one
//! device flush instead of two. The `.idx` is synced only when a round cannot use the
//! journal: a record would need more than `index_journal::ENTRIES_MAX` entries, rounds
//! overlap (large backlogs, where the second flush is shared by many batches), the record
//! write fails, or the segment is trimmed (roll and close sync the `.idx` first: the trim
//! cuts the region off).
//!
//! Why only alone: records alternate between two slots, and a record may be written only
//! while the one in the other slot is durable and covers every acknowledged batch. With one
//! journaled round in flight at a time, the record before it belongs to a round already
//! applied.
//!
//! # A crash around a journaled round
//!
//! | when | on disk (strict POSIX: anything not fdatasynced may be lost or torn) | the next open |
//! |---|---|---|
//! | before the round's fdatasync returns | the round's batches and record whole, torn or absent; the record before it whole | keeps the round's batches that match a whole record's entries; cuts the first that does not (never acknowledged) |
//! | after it | batches and record durable | keeps them: their entries come from the record and are written into the `.idx` before the WAL is cut |
//! | during recovery's repair | the `.idx` holds the rebuilt entries (synced) before the WAL is cut | the same verdict again |

use std::rc::Rc;

use glommio::io::BufferedFile;

use super::inline::{self, RingWrite, Route};
use super::{PartitionLog, buffers};
use crate::storage::index_journal;
use crate::storage::segment::SyncFiles;

/// How one commit round makes its batches durable.
pub(super) enum RoundSync {
    /// fdatasync of the `.wal` and the `.idx`.
    Both,
    /// Every entry the round needs is in a journal record written to the `.wal` (or
    /// already durable in the `.idx`): fdatasync of the `.wal` alone.
    WalOnly,
    /// The record goes through io_uring first (the core's writes go there for now), then
    /// as `WalOnly`; as `Both` if that write fails.
    RingRecord {
        wal: Rc<BufferedFile>,
        record: Vec<u8>,
        at: u64,
    },
}

/// One round's fdatasync, as `how` says. `Ok(true)` when it synced the `.idx` too.
pub(super) async fn sync_round(files: SyncFiles, how: RoundSync) -> std::io::Result<bool> {
    let wal_only = match how {
        RoundSync::Both => false,
        RoundSync::WalOnly => true,
        RoundSync::RingRecord { wal, record, at } => {
            let len = record.len();
            let _in_flight = RingWrite::start();
            let (written, record) = wal.write_at_reuse(record, at).await;
            buffers::give(record);
            matches!(written, Ok(n) if n == len)
        }
    };
    if wal_only {
        return files
            .wal
            .fdatasync()
            .await
            .map(|()| false)
            .map_err(Into::into);
    }
    let (wal, idx) = futures_lite::future::zip(files.wal.fdatasync(), files.idx.fdatasync()).await;
    wal.and(idx).map(|()| true).map_err(Into::into)
}

impl PartitionLog {
    /// How the round about to be issued syncs: through the journal when it runs `alone` and
    /// the active segment has one, writing its record now if it can be written inline.
    pub(super) fn journal_round(&self, alone: bool) -> RoundSync {
        let st = self.state.borrow();
        let writer = st.active_writer();
        let Some(journal) = writer.journal.as_ref().filter(|_| alone) else {
            return RoundSync::Both;
        };
        if st.pending_position > journal.region_at {
            // A batch larger than the segment limit wrote over the region.
            return RoundSync::Both;
        }
        let index = &st.segments.active().index;
        let written = index.entries_below(st.written_offset);
        let from = journal.idx_synced.get();
        assert!(from <= written, "only written entries are synced");
        if written == from {
            return RoundSync::WalOnly;
        }
        if written - from > index_journal::ENTRIES_MAX {
            return RoundSync::Both;
        }
        let sequence = journal.sequence.get();
        journal.sequence.set(sequence + 1);
        let at = index_journal::slot_at(journal.region_at, sequence);
        let mut record = journal.buf.borrow_mut();
        let first = u32::try_from(from).expect("index slots fit u32");
        index_journal::encode(
            sequence,
            first,
            (from..written).map(|i| index.get(i)),
            &mut record,
        );
        match inline::route(record.len(), self.pre_extending() || self.writing_back()) {
            Route::Inline => match inline::write(&writer.wal, &record, at) {
                Ok(n) if n == record.len() => RoundSync::WalOnly,
                _ => RoundSync::Both,
            },
            Route::Ring => RoundSync::RingRecord {
                wal: Rc::clone(&writer.wal),
                record: {
                    let mut copy = buffers::take(record.len());
                    copy.extend_from_slice(&record);
                    copy
                },
                at,
            },
        }
    }

    /// An fdatasync of the active `.idx` that was issued when it held `entries` entries of
    /// written batches succeeded: records need not hold them any more.
    pub(super) fn idx_synced_to(&self, entries: usize) {
        let st = self.state.borrow();
        if let Some(journal) = st.active_writer().journal.as_ref() {
            journal.idx_synced_to(entries);
        }
    }

    /// Entries of the active segment's written batches.
    pub(super) fn written_entries(&self) -> usize {
        let st = self.state.borrow();
        st.segments.active().index.entries_below(st.written_offset)
    }

    /// The active `.idx` holds entries the journal covers and it does not: the `.idx` must
    /// be synced before the journal's region is cut off.
    pub(super) fn idx_behind_journal(&self) -> bool {
        let written = self.written_entries();
        let st = self.state.borrow();
        // A segment that is no longer writable has no journal to fall behind.
        st.segments
            .active()
            .writer
            .as_ref()
            .and_then(|w| w.journal.as_ref())
            .is_some_and(|j| j.idx_synced.get() < written)
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::path::Path;

    use crate::protocol::record::encode_batch;
    use crate::storage::index::ENTRY_LEN;
    use crate::storage::index_journal::REGION_BYTES;
    use crate::storage::segment::{idx_path, wal_path};
    use crate::storage::{FsyncPolicy, LogConfig, PartitionLog};

    const BATCHES: u64 = 20;
    /// Entries the test leaves in the `.idx` file, as if only they had been written back.
    const IDX_KEPT: u64 = 5;

    /// Appends `BATCHES` one at a time under `always` and drops the log (no close, as after
    /// kill -9); then zeros the `.idx` past `IDX_KEPT` entries, and the journal's region
    /// too if `lose_journal`; then opens the log again and returns where it ends.
    fn recovered_end(dir: &Path, lose_journal: bool) -> u64 {
        let path = dir.join("p");
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let config = LogConfig {
                    fsync: FsyncPolicy::Always,
                    segment_bytes: 1 << 20,
                    ..LogConfig::default()
                };
                let log = PartitionLog::open(&path, config.clone()).await.unwrap();
                let batch = encode_batch(0, b"", &[7u8; 300], 1);
                for _ in 0..BATCHES {
                    log.append(&batch, None).await.unwrap();
                }
                let stats = log.stats();
                assert_eq!(
                    stats.journaled_rounds, stats.syncs,
                    "rounds that run alone sync the .wal alone: {stats:?}"
                );
                assert_eq!(stats.syncs, BATCHES);
                log.settle_pre_extension().await;
                drop(log);
                let idx = std::fs::OpenOptions::new()
                    .write(true)
                    .open(idx_path(&path, 0))
                    .unwrap();
                let lost = vec![0u8; ((BATCHES - IDX_KEPT) as usize) * ENTRY_LEN];
                idx.write_all_at(&lost, IDX_KEPT * ENTRY_LEN as u64)
                    .unwrap();
                if lose_journal {
                    let wal = std::fs::OpenOptions::new()
                        .write(true)
                        .open(wal_path(&path, 0))
                        .unwrap();
                    let len = wal.metadata().unwrap().len();
                    wal.write_all_at(&vec![0u8; REGION_BYTES as usize], len - REGION_BYTES)
                        .unwrap();
                }
                let log = PartitionLog::open(&path, config).await.unwrap();
                let end = log.next_offset();
                log.close().await.unwrap();
                end
            })
            .unwrap()
            .join()
            .unwrap()
    }

    /// What a power cut can leave under strict POSIX: the `.wal` synced by every round, the
    /// `.idx` never. The journal holds the entries recovery needs; without it the batches
    /// whose entries were lost are cut, although every one of them was acknowledged.
    #[test]
    fn acknowledged_batches_survive_a_lost_idx_through_the_journal() {
        let dir = tempfile::tempdir().unwrap();
        if nix::sys::statfs::statfs(dir.path())
            .unwrap()
            .filesystem_type()
            == nix::sys::statfs::TMPFS_MAGIC
        {
            eprintln!("SKIPPED: the temporary directory is on tmpfs, where the journal is off");
            return;
        }
        assert_eq!(recovered_end(&dir.path().join("a"), false), BATCHES);
        assert_eq!(
            recovered_end(&dir.path().join("b"), true),
            IDX_KEPT,
            "without the journal the same files lose what the .idx lacks"
        );
    }
}
