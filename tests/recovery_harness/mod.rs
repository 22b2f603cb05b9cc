//! What the recovery tests share: an executor to run on, logs that crash, batches to
//! append and check, and files to damage. `damage` models the damage the property draws.

// Each test crate that includes this module uses only part of it.
#![allow(dead_code, unused_imports)]

pub use glommio::{LocalExecutor, LocalExecutorBuilder};
pub use pagurus::protocol::record::{self, BatchHeader, HEADER_LEN, encode_batch};
pub use pagurus::storage::index::{ENTRY_LEN, IndexEntry};
pub use pagurus::storage::open::{
    CLEAN_MARKER, QUARANTINE_DIR, RECOVERY_POINT, read_recovery_point,
};
pub use pagurus::storage::segment::{idx_path, parse_file_name, wal_path};
pub use pagurus::storage::{FsyncPolicy, LogConfig, PartitionLog, StorageError, StoredBatch};
pub use std::cell::RefCell;
pub use std::fs;
pub use std::os::unix::fs::FileExt;
pub use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
pub use std::path::{Path, PathBuf};
pub use std::rc::Rc;
pub use std::time::Duration;

// ---------------------------------------------------------------------------------------
// Harness

/// Runs `f` on a fresh glommio executor (for the deterministic tests).
pub fn run<T: Send + 'static>(f: impl AsyncFnOnce() -> T + Send + 'static) -> T {
    LocalExecutorBuilder::default()
        .spawn(move || async move { f().await })
        .expect("executor")
        .join()
        .expect("executor ran")
}

thread_local! {
    static EXECUTOR: RefCell<Option<LocalExecutor>> = const { RefCell::new(None) };
}

/// Runs `f` on this thread's glommio executor, made on first use and reused by every case:
/// glommio 0.9 leaks an eventfd per executor, so an executor per case would run into a
/// 1024-descriptor limit before 1000 cases.
pub fn run_local<T>(f: impl Future<Output = T>) -> T {
    EXECUTOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let executor =
            slot.get_or_insert_with(|| LocalExecutorBuilder::default().make().expect("executor"));
        match catch_unwind(AssertUnwindSafe(|| executor.run(f))) {
            Ok(t) => t,
            Err(panic) => {
                // Start the next case on a clean executor.
                *slot = None;
                resume_unwind(panic)
            }
        }
    })
}

/// `return Err(format!(...))` unless `cond`.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

pub type Outcome<T = ()> = Result<T, String>;

pub fn config(segment_bytes: u64, index_entries: u32, fsync: FsyncPolicy) -> LogConfig {
    LogConfig {
        segment_bytes,
        segment_age: Duration::from_secs(3600),
        index_entries,
        fsync,
        ..LogConfig::default()
    }
}

pub async fn open(path: &Path, config: &LogConfig, what: &str) -> Outcome<Rc<PartitionLog>> {
    PartitionLog::open(path, config.clone())
        .await
        .map_err(|e| format!("{what}: open failed: {e}"))
}

/// How long `crash` waits for the log's background tasks before it calls the test failed.
const CRASH_WAIT_MAX: Duration = Duration::from_secs(30);

/// Simulates kill -9: drops the log without `close()`, once no I/O task holds it any more, so
/// that the next open is the only user of the files.
///
/// It sleeps between looks rather than yielding: a task that only yields keeps the executor
/// busy, so it polls the io_uring that the tasks it waits for need far less often (1000
/// property cases took ~12 min with `yield_now`, 35 s with a 1 ms sleep).
pub async fn crash(log: Rc<PartitionLog>) {
    let deadline = std::time::Instant::now() + CRASH_WAIT_MAX;
    while Rc::strong_count(&log) > 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "crash: the log's background tasks still hold it after {CRASH_WAIT_MAX:?}"
        );
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    drop(log);
}

/// One batch as the producer sends it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    /// 0 asks the broker to set it.
    pub timestamp_ns: u64,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub record_count: u32,
}

impl Batch {
    pub fn new(i: usize) -> Batch {
        Batch {
            timestamp_ns: 1000 + i as u64,
            key: format!("key-{i}").into_bytes(),
            payload: vec![i as u8; 40 + i % 50],
            record_count: (i % 4) as u32,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_batch(
            self.timestamp_ns,
            &self.key,
            &self.payload,
            self.record_count,
        )
    }

    pub fn len(&self) -> u64 {
        (HEADER_LEN + self.key.len() + self.payload.len()) as u64
    }

    pub fn offsets(&self) -> u64 {
        u64::from(self.record_count.max(1))
    }
}

/// Offset of every batch of `batches` appended to an empty log.
pub fn offsets_of(batches: &[Batch]) -> Vec<u64> {
    batches
        .iter()
        .scan(0, |next, b| {
            let offset = *next;
            *next += b.offsets();
            Some(offset)
        })
        .collect()
}

/// Appends `batches` and checks the offsets they get continue `*next`.
pub async fn append_all(log: &Rc<PartitionLog>, batches: &[Batch], next: &mut u64) -> Outcome {
    for (i, batch) in batches.iter().enumerate() {
        let bytes = batch.encode();
        let ack = log
            .append(&bytes, Some(record::batch_crc(&bytes)))
            .await
            .map_err(|e| format!("append {i} failed: {e}"))?;
        ensure!(
            ack.base_offset == *next && ack.next_offset == *next + batch.offsets(),
            "append {i}: ack {ack:?}, expected base offset {next}"
        );
        *next = ack.next_offset;
    }
    Ok(())
}

/// Checks that `got` is `want`, stored at `offset`.
pub fn check_batch(got: &StoredBatch, want: &Batch, offset: u64) -> Outcome {
    let header = BatchHeader::decode(&got.bytes, &Default::default())
        .map_err(|e| format!("bad header: {e}"))?;
    ensure!(
        got.entry.offset == offset && header.offset == offset,
        "entry offset {} and header offset {}, expected {offset}",
        got.entry.offset,
        header.offset
    );
    ensure!(
        header.batch_len() == got.bytes.len() && got.entry.length as usize == got.bytes.len(),
        "length: header {}, entry {}, bytes {}",
        header.batch_len(),
        got.entry.length,
        got.bytes.len()
    );
    ensure!(
        record::key_of(&got.bytes, &header) == &want.key[..],
        "key differs"
    );
    ensure!(
        record::payload_of(&got.bytes, &header) == &want.payload[..],
        "payload differs"
    );
    ensure!(
        header.record_count == want.record_count && u64::from(got.entry.records) == want.offsets(),
        "record count {} (entry {}), expected {}",
        header.record_count,
        got.entry.records,
        want.record_count
    );
    ensure!(
        want.timestamp_ns == 0 || header.timestamp_ns == want.timestamp_ns,
        "timestamp {}, expected {}",
        header.timestamp_ns,
        want.timestamp_ns
    );
    Ok(())
}

/// Reads the log from its start to the high watermark, `max_bytes` at a time, and checks that
/// it holds exactly the first n batches of `appended` at offsets 0, 1, ..., with no gap and
/// nothing else, and that every read passes its CRC, except that reading a batch numbered in
/// `corrupt` must fail with `StorageError::Corrupt`. Returns the batches read.
pub fn check_log(
    log: &PartitionLog,
    appended: &[Batch],
    max_bytes: u64,
    corrupt: &[usize],
    what: &str,
) -> Outcome<Vec<StoredBatch>> {
    let fail = |e: String| format!("{what}: {e}");
    ensure!(
        log.log_start_offset() == 0,
        "{what}: log start offset is {}, expected 0",
        log.log_start_offset()
    );
    let high_watermark = log.high_watermark();
    ensure!(
        log.next_offset() == high_watermark,
        "{what}: next offset {} but high watermark {high_watermark}",
        log.next_offset()
    );
    let mut out = Vec::new();
    let (mut offset, mut i) = (0u64, 0usize);
    while offset < high_watermark {
        ensure!(
            i < appended.len(),
            "{what}: the log goes on to offset {high_watermark} after the {} appended batches \
             (offset {offset})",
            appended.len()
        );
        if corrupt.contains(&i) {
            match log.read(offset, 1) {
                Err(StorageError::Corrupt { offset: at, .. }) if at == offset => {}
                Err(e) => return Err(fail(format!("damaged batch {i}: read gave {e}"))),
                Ok(b) => {
                    return Err(fail(format!(
                        "damaged batch {i} at offset {offset} was read back: {:?}",
                        b.first().map(|b| b.entry)
                    )));
                }
            }
            offset += appended[i].offsets();
            i += 1;
            continue;
        }
        let limit = if corrupt.is_empty() { max_bytes } else { 1 };
        let batches = log
            .read(offset, limit)
            .map_err(|e| fail(format!("read at offset {offset} (batch {i}) failed: {e}")))?;
        ensure!(
            !batches.is_empty(),
            "{what}: read at offset {offset} below the high watermark returned nothing"
        );
        for got in batches {
            ensure!(
                i < appended.len(),
                "{what}: a batch at offset {offset} after all appended ones"
            );
            check_batch(&got, &appended[i], offset).map_err(|e| fail(format!("batch {i}: {e}")))?;
            offset += appended[i].offsets();
            i += 1;
            out.push(got);
        }
    }
    ensure!(
        offset == high_watermark,
        "{what}: the batches read end at offset {offset}, the high watermark is {high_watermark}"
    );
    Ok(out)
}

/// Base offsets of the segments (`.wal` files) directly in `dir`, sorted.
pub fn wal_bases(dir: &Path) -> Vec<u64> {
    let mut bases: Vec<u64> = match fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| parse_file_name(e.ok()?.file_name().to_str()?, "wal"))
            .collect(),
        Err(_) => Vec::new(),
    };
    bases.sort_unstable();
    bases
}

/// Base offsets of the segments moved to `quarantine/` (one directory per event, or directly
/// in it), sorted.
pub fn quarantined_bases(partition: &Path) -> Vec<u64> {
    let quarantine = partition.join(QUARANTINE_DIR);
    let mut bases = wal_bases(&quarantine);
    if let Ok(entries) = fs::read_dir(&quarantine) {
        for entry in entries.flatten() {
            if entry.path().is_dir() {
                bases.extend(wal_bases(&entry.path()));
            }
        }
    }
    bases.sort_unstable();
    bases
}

pub fn read_file(path: &Path) -> Vec<u8> {
    fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

pub fn write_at(path: &Path, bytes: &[u8], at: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.write_all_at(bytes, at))
        .unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

pub fn truncate(path: &Path, len: u64) {
    fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len))
        .unwrap_or_else(|e| panic!("truncating {}: {e}", path.display()));
}

pub fn flip_bit(path: &Path, at: u64, bit: u8) {
    let mut byte = [0u8];
    fs::File::open(path)
        .and_then(|f| f.read_exact_at(&mut byte, at))
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    byte[0] ^= 1 << bit;
    write_at(path, &byte, at);
}

pub mod damage;
