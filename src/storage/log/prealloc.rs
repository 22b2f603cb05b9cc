//! Pre-extension of the active segment under `fsync = always`, so that a commit round's
//! `fdatasync`s write data only and commit no ext4 journal transaction.
//!
//! An `fdatasync` must also make durable the metadata needed to read the data back: a new
//! file size, or blocks allocated for pages written into a hole. On ext4 either one means a
//! journal commit, which is most of a round's cost (docs/LATENCY.md, (a) and (d)). A WAL that
//! grows with every write changes its size every round, and the sparse `.idx` gets blocks
//! allocated each time entries reach a new page. So, ahead of the write position and off
//! the round's path, this module
//!
//! - writes zeros into the `.wal` past its end, [`WAL_CHUNK_BYTES`] at a time (not
//!   `fallocate`: unwritten extents are converted at write-back, which is a journal commit
//!   too, measured at ~3.3 ms per fdatasync), and
//! - faults in the next [`IDX_AHEAD_ENTRIES`] slots of the mapped `.idx` for writing,
//!
//! and fdatasyncs the files, so the blocks and the size are durable before a round writes
//! batches over them. A round's `fdatasync` then flushes data pages and the device cache.
//!
//! The job runs on glommio's blocking pool with descriptors of its own, opened by path and
//! checked to name the segment's files. Its own descriptors matter: the kernel reports a
//! write-back error once per open file description, and the job must not be the one that
//! takes an error a round needs to see (the round would then acknowledge lost bytes).
//!
//! The job zeroes only WAL bytes past everything written. A round that would write into the
//! range a job is zeroing waits for the job first ([`PartitionLog::wait_prealloc`]), and
//! whatever cuts or trims the WAL waits for it too, so zeros never land on batches.
//!
//! What recovery sees: a `.wal` whose tail past the last batch is zeros (the scanner's
//! zero tail, which is not a cut), and `.idx` slots that read as empty. A batch whose slot
//! is empty inside the file was never covered by a sync, so recovery cuts it instead of
//! rebuilding its entry (`storage::recovery`): a torn batch inside pre-extended space reads
//! as a valid header followed by zeros, which only the CRC in its entry can reject. Sealing
//! and clean shutdown cut the zeros off (`trim_active_files`), so a sealed segment still
//! ends exactly where its last entry does.
//!
//! Off under `never` and `interval` (their rounds do not fdatasync, and writing every byte
//! twice would halve their throughput) and on tmpfs (nothing to flush).
//!
//! Under `always` the zeros pay only while rounds are small. A round's journal commit or
//! inode write costs about the same whatever the round holds, while the zeros cost the
//! disk a second write of every byte. At a moderate rate rounds carry a batch or two and
//! the saved commit is most of their time (bench.sh d, 500 k msg/s: ack p50 0.5-0.8 ms
//! with the zeros against 1.0-3.1 ms without, on ext4 with and without a journal and on
//! XFS); at the maximum rate rounds carry hundreds of KiB, the disk's bandwidth is what
//! runs out, and the zeros cost 12-18 % of the throughput and double the ack p99
//! (docs/LATENCY.md, (m)). So the WAL is zeroed ahead only while the rounds written
//! average under [`ZEROING_PAUSE_ROUND_BYTES`], and again once they fall under
//! [`ZEROING_RESUME_ROUND_BYTES`] ([`ZeroingPace`]); past the zeroed space, writes extend
//! the file as they do without pre-extension.

use std::cell::Cell;
use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::rc::Rc;
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::PartitionLog;
use crate::storage::FsyncPolicy;
use crate::storage::segment::{FileId, file_id, idx_path, wal_path};
use crate::watch::Watch;

/// Zeros written per WAL pre-extension.
pub(crate) const WAL_CHUNK_BYTES: u64 = 4 << 20;
/// Zeros written and written back at a time within a pre-extension; a round's fdatasync
/// finds at most two pieces of them dirty or in flight ([`zero_and_write_back`]).
const ZERO_PIECE_BYTES: u64 = 64 << 10;
/// A new pre-extension starts once fewer than this many zeroed bytes are left ahead.
const WAL_LOW_WATER_BYTES: u64 = WAL_CHUNK_BYTES / 2;
/// The first extension of a segment starts this far past the written end, so the rounds
/// that follow right away need not wait for it.
const WAL_MARGIN_BYTES: u64 = 16 << 10;
/// Index slots kept faulted in ahead of the entries (128 KiB).
const IDX_AHEAD_ENTRIES: usize = 4096;
/// After a failed job, the next one waits this long.
const RETRY_AFTER: Duration = Duration::from_secs(1);
/// Rounds averaging more than this get no zeros ahead: the second write of their bytes
/// costs the disk more than the commit it saves (about 100-300 µs of a disk writing
/// ~450 MB/s is 45-135 KiB).
const ZEROING_PAUSE_ROUND_BYTES: u64 = 96 << 10;
/// Zeroing resumes once rounds average less than this (hysteresis: no flapping).
const ZEROING_RESUME_ROUND_BYTES: u64 = 48 << 10;

/// Whether the WAL is zeroed ahead of the rounds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Zeroing {
    #[default]
    Ahead,
    Paused,
}

/// The rounds' average size (a moving average over about the last 8 writes) and what it
/// says about zeroing. Sans-IO: fed each round's write.
#[derive(Debug, Default)]
struct ZeroingPace {
    round_bytes_avg: u64,
    zeroing: Zeroing,
}

impl ZeroingPace {
    /// Records a round that wrote `bytes`; returns the state it leaves, and whether that
    /// changed.
    fn note_round(&mut self, bytes: u64) -> (Zeroing, bool) {
        self.round_bytes_avg = self.round_bytes_avg - self.round_bytes_avg / 8 + bytes / 8;
        let next = match self.zeroing {
            Zeroing::Ahead if self.round_bytes_avg > ZEROING_PAUSE_ROUND_BYTES => Zeroing::Paused,
            Zeroing::Paused if self.round_bytes_avg < ZEROING_RESUME_ROUND_BYTES => Zeroing::Ahead,
            same => same,
        };
        let changed = next != self.zeroing;
        self.zeroing = next;
        (next, changed)
    }
}

/// Where pre-extension of the active segment stands. Shared with the running job.
#[derive(Default)]
pub(super) struct Prealloc {
    /// Decided at open: `always`, and not on tmpfs.
    enabled: Cell<bool>,
    /// Whether the rounds are small enough for zeros to pay.
    pace: std::cell::RefCell<ZeroingPace>,
    shared: Rc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// The active segment the positions refer to (its base offset).
    segment_base: Cell<u64>,
    /// Bumped whenever the WAL is cut; a job that started before does not vouch for its
    /// range afterwards.
    generation: Cell<u64>,
    /// WAL bytes below this are allocated (batches or written zeros).
    zeroed_to: Cell<u64>,
    /// A job is running; it zeroes the WAL from this position on (`u64::MAX` when it only
    /// syncs the index).
    running_from: Cell<Option<u64>>,
    /// Woken when a job ends.
    done: Watch,
    /// Jobs started, for tests.
    jobs: Cell<u64>,
    /// After a failed job (a full disk, say), none starts before this.
    retry_at: Cell<Option<Instant>>,
}

/// One job: what to zero and sync.
struct Job {
    wal: PathBuf,
    idx: PathBuf,
    file_id: FileId,
    /// WAL range to zero, if any.
    zero: Option<(u64, u64)>,
    sync_idx: bool,
}

impl Prealloc {
    /// Turns pre-extension on for a log in `dir` with `policy`.
    pub(super) fn enable_for(&self, dir: &std::path::Path, policy: FsyncPolicy) {
        let tmpfs = crate::storage::fs::is_tmpfs(dir);
        self.enabled.set(policy == FsyncPolicy::Always && !tmpfs);
    }

    #[cfg(test)]
    pub(super) fn jobs(&self) -> u64 {
        self.shared.jobs.get()
    }
}

impl PartitionLog {
    /// After a round's write of `round_bytes` that ended at WAL position `written_to` of
    /// the active segment (or a roll, with 0 and 0): start a job if the zeroed space ahead
    /// (while rounds are small) or the faulted-in index slots run low and no job is running.
    pub(super) fn pre_extend(&self, written_to: u64, round_bytes: u64) {
        let pre = &self.prealloc;
        let shared = &pre.shared;
        if !pre.enabled.get() {
            return;
        }
        let zeroing = if round_bytes > 0 {
            let (zeroing, changed) = pre.pace.borrow_mut().note_round(round_bytes);
            if changed {
                debug!(dir = %self.dir.display(), ?zeroing, "WAL zeroing ahead");
            }
            zeroing
        } else {
            pre.pace.borrow().zeroing
        };
        if shared.running_from.get().is_some()
            || shared.running_from.get().is_some()
            || shared.retry_at.get().is_some_and(|at| Instant::now() < at)
        {
            return;
        }
        let job = {
            let mut st = self.state.borrow_mut();
            if st.check_open().is_err() || st.is_rolling() {
                return;
            }
            let active = st.segments.active_mut();
            if shared.segment_base.get() != active.base_offset {
                shared.segment_base.set(active.base_offset);
                shared.zeroed_to.set(written_to);
                shared.generation.set(shared.generation.get() + 1);
            }
            let sync_idx = match active.index.reserve_ahead(IDX_AHEAD_ENTRIES) {
                Ok(new_pages) => new_pages,
                Err(error) => {
                    // Staging reserves its own page and refuses the batch if that fails.
                    debug!(dir = %self.dir.display(), %error, "index not pre-extended");
                    false
                }
            };
            let cap = self.config.segment_bytes.next_multiple_of(4096);
            let zeroed_to = shared.zeroed_to.get();
            let from = zeroed_to.max(written_to + WAL_MARGIN_BYTES);
            let zero = (zeroing == Zeroing::Ahead
                && written_to + WAL_LOW_WATER_BYTES > zeroed_to
                && from < cap)
                .then(|| (from, (from + WAL_CHUNK_BYTES).min(cap)));
            if zero.is_none() && !sync_idx {
                return;
            }
            Job {
                wal: wal_path(&self.dir, active.base_offset),
                idx: idx_path(&self.dir, active.base_offset),
                file_id: active.file_id,
                zero,
                sync_idx,
            }
        };
        let zero_to = job.zero.map(|(_, to)| to);
        shared
            .running_from
            .set(Some(job.zero.map_or(u64::MAX, |(from, _)| from)));
        shared.jobs.set(shared.jobs.get() + 1);
        let generation = shared.generation.get();
        let shared = Rc::clone(shared);
        let dir = self.dir.clone();
        let work = glommio::executor().spawn_blocking(move || run(&job));
        glommio::spawn_local(async move {
            match work.await {
                Ok(()) => {
                    if let Some(to) = zero_to
                        && shared.generation.get() == generation
                    {
                        shared.zeroed_to.set(shared.zeroed_to.get().max(to));
                    }
                }
                // Only an optimisation: rounds then pay for the journal commit, as before.
                // An I/O error also reaches the rounds' own fdatasync, which fences.
                Err(error) => {
                    warn!(dir = %dir.display(), %error, "segment pre-extension failed; retried in 1 s");
                    shared.retry_at.set(Some(Instant::now() + RETRY_AFTER));
                }
            }
            shared.running_from.set(None);
            shared.done.notify_all();
        })
        .detach();
    }

    /// Waits until no job is zeroing WAL bytes below `end()` (any WAL bytes, with
    /// `u64::MAX`). `end` is asked again after each wait: staging goes on meanwhile.
    pub(super) async fn wait_prealloc(&self, end: impl Fn() -> u64) {
        let shared = &self.prealloc.shared;
        loop {
            let done = shared.done.changed();
            match shared.running_from.get() {
                Some(from) if end() > from => done.await,
                _ => return,
            }
        }
    }

    /// Whether a job is writing zeros to the WAL now (one that only syncs the index is not).
    pub(super) fn pre_extending(&self) -> bool {
        self.prealloc
            .shared
            .running_from
            .get()
            .is_some_and(|from| from != u64::MAX)
    }

    /// Waits until no pre-extension job is running, so a test's next fdatasync is a round's.
    #[doc(hidden)]
    pub async fn settle_pre_extension(&self) {
        self.wait_prealloc(|| u64::MAX).await;
    }

    /// The WAL was cut to `len` bytes (a rolled-back write, or sealing).
    pub(super) fn prealloc_cut(&self, len: u64) {
        let shared = &self.prealloc.shared;
        shared.generation.set(shared.generation.get() + 1);
        shared.zeroed_to.set(shared.zeroed_to.get().min(len));
    }
}

/// Writes zeros over `[from, to)` of the WAL one piece at a time, each written back as soon
/// as it is written, with at most two pieces written and not yet on disk.
///
/// Why: a round's `fdatasync` writes back every dirty page of the file, not only the
/// round's. Zeros left dirty by a 4 MiB chunk made the round that came next write them
/// too: at half load under `always` the ack p99 was 12-14 ms against 4-5 ms without
/// pre-extension (docs/LATENCY.md, (l)). Written back piece by piece, a round finds at most
/// two pieces of zeros dirty or in flight, and the pages stay cached and up to date, so
/// the batches written over them later read nothing from disk. The write-out of a piece
/// runs while the next is written (waiting for each piece in turn halved one partition's
/// maximum rate: the job fell behind the rounds).
fn zero_and_write_back(wal: &std::fs::File, from: u64, to: u64) -> std::io::Result<()> {
    use super::writeback::sync_file_range;
    use nix::libc::{
        SYNC_FILE_RANGE_WAIT_AFTER, SYNC_FILE_RANGE_WAIT_BEFORE, SYNC_FILE_RANGE_WRITE,
    };
    static ZEROS: [u8; ZERO_PIECE_BYTES as usize] = [0; ZERO_PIECE_BYTES as usize];
    let mut previous: Option<(u64, u64)> = None;
    let mut at = from;
    while at < to {
        let end = (at + ZERO_PIECE_BYTES).min(to);
        let len = usize::try_from(end - at).expect("a piece fits usize");
        wal.write_all_at(&ZEROS[..len], at)?;
        sync_file_range(wal, (at, end), SYNC_FILE_RANGE_WRITE)?;
        if let Some(range) = previous {
            let wait =
                SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER;
            sync_file_range(wal, range, wait)?;
        }
        previous = Some((at, end));
        at = end;
    }
    Ok(())
}

/// Zeroes and syncs what `job` says, through descriptors of its own. Runs on the blocking
/// pool.
fn run(job: &Job) -> std::io::Result<()> {
    if let Some((from, to)) = job.zero {
        let wal = OpenOptions::new().write(true).open(&job.wal)?;
        if file_id(&wal)? != job.file_id {
            return Err(std::io::Error::other("the segment file was replaced"));
        }
        zero_and_write_back(&wal, from, to)?;
        wal.sync_data()?;
    }
    if job.sync_idx {
        OpenOptions::new().write(true).open(&job.idx)?.sync_data()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;
    use std::time::Duration;

    use crate::protocol::record::encode_batch;
    use crate::storage::segment::{idx_path, wal_path};
    use crate::storage::{FsyncPolicy, LogConfig, PartitionLog};

    use super::{ZEROING_PAUSE_ROUND_BYTES, ZEROING_RESUME_ROUND_BYTES, Zeroing, ZeroingPace};

    /// Feeds `rounds` rounds of `bytes` each; the state after them and how many changes.
    fn feed(pace: &mut ZeroingPace, bytes: u64, rounds: usize) -> (Zeroing, usize) {
        let mut changes = 0;
        let mut state = pace.zeroing;
        for _ in 0..rounds {
            let (next, changed) = pace.note_round(bytes);
            changes += usize::from(changed);
            state = next;
        }
        (state, changes)
    }

    #[test]
    fn zeroing_pauses_for_large_rounds_and_resumes_for_small_ones_without_flapping() {
        let between = (ZEROING_PAUSE_ROUND_BYTES + ZEROING_RESUME_ROUND_BYTES) / 2;
        // (round bytes, rounds, the state after them, how many changes on the way)
        let steps = [
            ("small rounds", 10 << 10, 1000, Zeroing::Ahead, 0),
            ("large rounds", 512 << 10, 20, Zeroing::Paused, 1),
            ("stays paused", between, 1000, Zeroing::Paused, 0),
            ("small again", 10 << 10, 40, Zeroing::Ahead, 1),
            ("stays ahead", between, 1000, Zeroing::Ahead, 0),
            // One large round among small ones is an outlier, not a regime.
            ("small before an outlier", 10 << 10, 100, Zeroing::Ahead, 0),
            ("one large round", 512 << 10, 1, Zeroing::Ahead, 0),
        ];
        let mut pace = ZeroingPace::default();
        for (label, round_bytes, rounds, state, changes) in steps {
            assert_eq!(
                feed(&mut pace, round_bytes, rounds),
                (state, changes),
                "{label}"
            );
        }
    }

    /// Runs `test` on an executor of its own with a log directory's path on the machine's
    /// disk and an `always` config of `segment_bytes`; skipped (and says so) when the
    /// temporary directory is on tmpfs, where pre-extension is off.
    fn on_disk_always<F, Fut>(segment_bytes: u64, test: F)
    where
        F: FnOnce(std::path::PathBuf, LogConfig) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + 'static,
    {
        let dir = tempfile::tempdir().unwrap();
        if crate::storage::fs::is_tmpfs(dir.path()) {
            eprintln!("SKIPPED: the temporary directory is on tmpfs, where pre-extension is off");
            return;
        }
        let path = dir.path().join("p");
        let config = LogConfig {
            fsync: FsyncPolicy::Always,
            segment_bytes,
            ..LogConfig::default()
        };
        glommio::LocalExecutorBuilder::default()
            .spawn(move || test(path, config))
            .unwrap()
            .join()
            .unwrap();
    }

    fn file_len(path: &std::path::Path) -> u64 {
        std::fs::metadata(path).unwrap().len()
    }

    /// Pre-extended space is zeros past the batches while the log runs; a crash leaves it
    /// there and recovery ends the log at the last batch without a cut; a roll and a clean
    /// close cut it, so sealed files end where their entries do. (Not on tmpfs, where it is
    /// off: the test runs in a directory of the machine's disk.)
    #[test]
    fn zeros_ahead_are_cut_at_seal_close_and_recovery() {
        on_disk_always(1 << 20, |path, config| async move {
            let batch = encode_batch(0, b"", &[7u8; 1000], 1);
            let log = PartitionLog::open(&path, config.clone()).await.unwrap();
            for _ in 0..100 {
                log.append(&batch, None).await.unwrap();
            }
            // The job runs on the blocking pool; wait for it.
            log.wait_prealloc(|| u64::MAX).await;
            assert!(log.prealloc.jobs() >= 1, "no pre-extension job ran");
            let size = log.segments()[0].1;
            let wal = wal_path(&path, 0);
            let region_at = log
                .state
                .borrow()
                .active_writer()
                .journal
                .as_ref()
                .map(|j| j.region_at);
            let region_at = region_at.expect("an index journal under always");
            assert_eq!(
                file_len(&wal),
                region_at + crate::storage::index_journal::REGION_BYTES,
                "the WAL ends with the index journal's region"
            );
            let mut bytes = vec![0u8; 1 << 20];
            std::fs::File::open(&wal)
                .unwrap()
                .read_exact_at(&mut bytes, 0)
                .unwrap();
            assert!(
                bytes[size as usize..].iter().all(|&b| b == 0),
                "the WAL is zeroed up to segment_bytes"
            );
            let zeroed = log.prealloc.shared.zeroed_to.get();
            assert_eq!(zeroed, 1 << 20, "zeroed up to segment_bytes");
            drop(log); // kill -9: no trim, no marker

            let log = PartitionLog::open(&path, config.clone()).await.unwrap();
            assert_eq!(log.next_offset(), 100, "recovery keeps every batch");
            assert_eq!(log.segments(), vec![(0, size)]);
            // Fill past the segment size: the roll trims the sealed WAL and index.
            for _ in 0..1100 {
                log.append(&batch, None).await.unwrap();
            }
            let segments = log.segments();
            assert!(segments.len() >= 2, "{segments:?}");
            for &(base, size) in &segments[..segments.len() - 1] {
                assert_eq!(file_len(&wal_path(&path, base)), size);
                let entries = file_len(&idx_path(&path, base)) / 32;
                assert!(entries > 0 && size / entries == batch.len() as u64);
            }
            glommio::timer::sleep(Duration::from_millis(50)).await;
            log.close().await.unwrap();
            let &(base, size) = segments.last().unwrap();
            assert_eq!(
                file_len(&wal_path(&path, base)),
                size,
                "close trims the WAL"
            );
            let log = PartitionLog::open(&path, config).await.unwrap();
            assert_eq!(log.next_offset(), 1200);
            log.close().await.unwrap();
        });
    }

    /// Rounds of 200 KiB stop the zeros ahead: writes go past the zeroed space. Small rounds
    /// bring them back. (Skipped on tmpfs, as above.)
    #[test]
    fn large_rounds_pause_the_zeros_ahead_and_small_ones_resume_them() {
        on_disk_always(64 << 20, |path, config| async move {
            let log = PartitionLog::open(&path, config).await.unwrap();
            // Appends `rounds` batches of `payload_bytes`, each its own round; returns the
            // bytes written then, and where the zeros reach.
            let rounds = async |payload_bytes: usize, rounds: usize| {
                let batch = encode_batch(0, b"", &vec![7u8; payload_bytes], 1);
                for _ in 0..rounds {
                    log.append(&batch, None).await.unwrap();
                    log.wait_prealloc(|| u64::MAX).await;
                }
                (log.segments()[0].1, log.prealloc.shared.zeroed_to.get())
            };
            let (written, zeroed) = rounds(200 << 10, 40).await;
            assert_eq!(log.prealloc.pace.borrow().zeroing, Zeroing::Paused);
            assert!(
                zeroed < written,
                "zeroed to {zeroed} while {written} bytes were written"
            );
            let (written, zeroed) = rounds(1000, 100).await;
            assert_eq!(log.prealloc.pace.borrow().zeroing, Zeroing::Ahead);
            assert!(
                zeroed > written,
                "zeroing resumed ahead of the {written} bytes written"
            );
            log.close().await.unwrap();
        });
    }

    /// Zeros go over exactly the range asked, piece by piece, whatever its length: the bytes
    /// around it (batches before, the index journal after) are untouched.
    #[test]
    fn zeroing_covers_exactly_its_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wal");
        let len = 3 * super::ZERO_PIECE_BYTES + 12_345;
        std::fs::write(&path, vec![0xAB; len as usize]).unwrap();
        let wal = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let (from, to) = (777, 2 * super::ZERO_PIECE_BYTES + 5_000);
        super::zero_and_write_back(&wal, from, to).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, len);
        assert!(bytes[..from as usize].iter().all(|&b| b == 0xAB));
        assert!(bytes[from as usize..to as usize].iter().all(|&b| b == 0));
        assert!(bytes[to as usize..].iter().all(|&b| b == 0xAB));
        // Past the end, it extends the file, as a pre-extension does.
        super::zero_and_write_back(&wal, len, len + 100).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), len + 100);
    }
}
