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
//! # The spare WAL's space, reserved under `never` and `interval`
//!
//! There the WAL grows by buffered writes, and ext4 allocates its blocks at write-back
//! (delayed allocation), holding the inode's block map lock and reading block bitmaps from
//! a disk busy with seals and write-out. A WAL write that needs the lock meanwhile waits
//! with every ack of its partition: stalls of tens to hundreds of milliseconds at the
//! maximum rate (docs/LATENCY.md, (h) and (k)). So the spare's WAL gets its whole segment
//! allocated past its end when it is made (`fallocate` with `FALLOC_FL_KEEP_SIZE`, off the
//! path, before anyone writes to it): its size stays 0, readers and recovery see the same
//! file as without it, and filling it allocates nothing. The seal gives back what the
//! segment did not fill (`super::seal`); a crash leaves the reservation past the end of
//! the active segment, which goes on filling it.
//!
//! The cost is disk space: a partition holds its next segment's space ahead of its data.
//! So only a partition that filled half its active segment within
//! [`RESERVE_IF_HALF_FULL_WITHIN`] reserves (it fills the reservation within minutes; a
//! slow one allocates a little at a time, without the stalls), and a file system that
//! refuses (full, or without `fallocate`) gets a spare without a reservation. Not under `always`, whose
//! pre-extension writes zeros ahead instead (`super::prealloc`), nor on tmpfs, where it
//! would pin memory.
//!
//! # A crash around a spare
//!
//! | when | on disk | the next open |
//! |---|---|---|
//! | while the spare is made, or once it is | `next-segment.*`, whole or not | ignores them (not segment names); the next spare made replaces them |
//! | after the renames, before the directory's fsync | the old names, or the new ones (an index under its new name at least whenever the WAL has its new one) | a new segment without data, or with batches that were never durable: scanned like any active segment |
//! | replicated partition: after the new segment's `.raft` (durable before the renames), before the renames | `<base>.raft` without `<base>.wal` (maybe `<base>.idx`) | removes the orphans (`storage::raft_index`); the old segment is still the active one |
//! | replicated partition: after the renames | the new segment with its `.raft` | as above; its `.raft` is there whenever its `.wal` is |

use std::rc::Rc;
use std::time::Duration;

use tracing::warn;

use super::PartitionLog;
use crate::storage::segment::{self, Segment, WalReservation};
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
        let wal_reserve_bytes = self.spare_reserve_bytes();
        glommio::spawn_local(async move {
            let made = glommio::executor()
                .spawn_blocking(move || segment::make_spare(&dir, index_entries, wal_reserve_bytes))
                .await;
            match made {
                Ok(reservation) => {
                    if let WalReservation::Refused(error) = reservation {
                        warn!(
                            dir = %path.display(),
                            %error,
                            "could not reserve the next segment's space; its writes allocate it"
                        );
                    }
                    spare.set(Spare::Ready);
                }
                Err(error) => {
                    // The next roll makes its segment in place.
                    warn!(dir = %path.display(), %error, "could not make the next segment ahead");
                    spare.set(Spare::Absent);
                }
            }
        })
        .detach();
    }

    /// Whether this log's WAL files may hold space reserved past their end (see the
    /// module's documentation): the seal and close give it back.
    pub(super) fn reserves_wal_space(&self) -> bool {
        self.config.fsync != FsyncPolicy::Always && !crate::storage::fs::is_tmpfs(&self.dir)
    }

    /// The bytes to reserve for the spare's WAL, now that the active segment is half full.
    fn spare_reserve_bytes(&self) -> u64 {
        if !self.reserves_wal_space() {
            return 0;
        }
        let half_full_after = self.state.borrow().segments.active().opened_at.elapsed();
        reserve_bytes(half_full_after, self.config.segment_bytes)
    }

    /// The next active segment, at `base`: the spare if it is ready, else one made now. In
    /// a replicated partition its `.raft` (Raft index base `raft_base`) is durable first.
    pub(super) async fn next_segment(
        &self,
        base: u64,
        raft_base: Option<u64>,
    ) -> Result<Segment, StorageError> {
        if let Some(raft_base) = raft_base {
            self.write_raft_base(base, raft_base).await?;
        }
        let mut segment = self.make_next_segment(base).await?;
        segment.raft_base = raft_base;
        Ok(segment)
    }

    async fn make_next_segment(&self, base: u64) -> Result<Segment, StorageError> {
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

/// A partition whose active segment took longer than this to fill half way gets a spare
/// without a reservation: its writes come slowly enough that write-back allocates a little
/// at a time, and a reservation would hold a segment of disk space for a long while. At
/// the default segment size, half a segment in a minute is 2.2 MB/s.
const RESERVE_IF_HALF_FULL_WITHIN: Duration = Duration::from_secs(60);

/// The bytes to reserve for a spare whose active segment filled half way in
/// `half_full_after` (0: none).
fn reserve_bytes(half_full_after: Duration, segment_bytes: u64) -> u64 {
    if half_full_after <= RESERVE_IF_HALF_FULL_WITHIN {
        segment_bytes
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;
    use std::path::Path;
    use std::time::{Duration, Instant};

    use super::Spare;
    use crate::protocol::record::encode_batch;
    use crate::storage::segment::{SPARE_WAL, wal_path};
    use crate::storage::{FsyncPolicy, LogConfig, PartitionLog};

    const SEGMENT_BYTES: u64 = 1 << 20;

    /// (file size, bytes allocated to it).
    fn sizes(path: &Path) -> (u64, u64) {
        let meta = std::fs::metadata(path).unwrap();
        (meta.len(), meta.blocks() * 512)
    }

    async fn until_spare_ready(log: &PartitionLog) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while log.spare.get() != Spare::Ready {
            assert!(Instant::now() < deadline, "no spare within 10 s");
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
    }

    #[test]
    fn only_a_partition_that_fills_fast_reserves() {
        let segment_bytes = 256 << 20;
        let within = super::RESERVE_IF_HALF_FULL_WITHIN;
        assert_eq!(
            super::reserve_bytes(Duration::ZERO, segment_bytes),
            segment_bytes
        );
        assert_eq!(super::reserve_bytes(within, segment_bytes), segment_bytes);
        let slow = within + Duration::from_millis(1);
        assert_eq!(super::reserve_bytes(slow, segment_bytes), 0);
    }

    /// Under `never` a spare's WAL holds its whole segment's blocks before anything is
    /// written to it; the seal of a segment that stopped short of full, and a clean close,
    /// give back what it did not fill. Under `always` no spare reserves anything. (Not on
    /// tmpfs, where reservation is off: the test runs in a directory of the machine's disk.)
    #[test]
    fn a_spare_reserves_its_segment_and_seal_and_close_give_back_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        if crate::storage::fs::is_tmpfs(dir.path()) {
            eprintln!("SKIPPED: the temporary directory is on tmpfs, where reservation is off");
            return;
        }
        let root = dir.path().to_path_buf();
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                for fsync in [FsyncPolicy::Never, FsyncPolicy::Always] {
                    let path = root.join(format!("{fsync:?}"));
                    let config = LogConfig {
                        fsync,
                        segment_bytes: SEGMENT_BYTES,
                        ..LogConfig::default()
                    };
                    // Three fill 900 KB of a 1 MiB segment; the fourth rolls it.
                    let batch = encode_batch(0, b"", &[7u8; 300_000], 1);
                    let log = PartitionLog::open(&path, config).await.unwrap();
                    for _ in 0..2 {
                        log.append(&batch, None).await.unwrap();
                    }
                    until_spare_ready(&log).await;
                    let (len, allocated) = sizes(&path.join(SPARE_WAL));
                    assert_eq!(len, 0, "a reservation does not change the size");
                    if fsync == FsyncPolicy::Always {
                        assert_eq!(allocated, 0, "no reservation under always");
                        log.close().await.unwrap();
                        continue;
                    }
                    assert!(allocated >= SEGMENT_BYTES, "reserved {allocated}");
                    // The spare becomes the second segment at the fourth batch, and rolls
                    // at the seventh with 900 KB of its 1 MiB filled.
                    for _ in 3..=6 {
                        log.append(&batch, None).await.unwrap();
                    }
                    until_spare_ready(&log).await;
                    let (base, size) = *log.segments().last().unwrap();
                    assert_eq!(size, 3 * batch.len() as u64);
                    let (len, allocated) = sizes(&wal_path(&path, base));
                    assert_eq!(len, size);
                    assert!(allocated >= SEGMENT_BYTES, "the active segment is reserved");
                    log.append(&batch, None).await.unwrap();
                    let segments = log.segments();
                    assert_eq!(segments.len(), 3, "{segments:?}");
                    assert_eq!(segments[1], (base, size));
                    log.settle_seal().await.unwrap();
                    let (len, allocated) = sizes(&wal_path(&path, base));
                    assert_eq!(len, size);
                    assert_eq!(
                        allocated,
                        size.next_multiple_of(4096),
                        "the seal gave back the rest"
                    );

                    let (base, size) = segments[2];
                    assert!(sizes(&wal_path(&path, base)).1 >= SEGMENT_BYTES);
                    log.close().await.unwrap();
                    assert_eq!(
                        sizes(&wal_path(&path, base)),
                        (size, size.next_multiple_of(4096)),
                        "close gave back the rest"
                    );
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
