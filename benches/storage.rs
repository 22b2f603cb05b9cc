//! Hot paths of the storage engine: the 29-byte header codec, CRC32C of a batch, index
//! lookups in a real mmapped `.idx`, read plans over a log of small batches (plain and
//! replicated, whose plans look for control batches), and `PartitionLog::append`
//! throughput on the real disk under each fsync policy with 1 and 16 concurrent appenders
//! (what group commit buys).
//!
//! Run with `cargo bench --bench storage`. Scratch files go to a temporary directory under
//! `$CARGO_TARGET_DIR` (or `target/`), never tmpfs, so fsync costs are those of the disk.
//! Every append sample opens a fresh partition log, times only the appends, then drops and
//! deletes it, so disk use stays bounded by one sample.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use glommio::LocalExecutorBuilder;
use pagurus::limits::Limits;
use pagurus::protocol::record::{self, BatchHeader, HEADER_LEN, encode_batch};
use pagurus::storage::index::{ENTRY_LEN, Index, IndexEntry};
use pagurus::storage::{FsyncPolicy, LogConfig, PartitionLog};

/// Records per batch and bytes per record: one batch carries 10,000 B of payload.
const RECORDS_PER_BATCH: u32 = 100;
const RECORD_BYTES: usize = 100;
const PAYLOAD_BYTES: usize = RECORDS_PER_BATCH as usize * RECORD_BYTES;
/// Key of every appended batch (the appender's number makes it differ per task).
const KEY: &[u8] = b"bench-key";
/// Entries in the index lookup bench.
const INDEX_ENTRIES: usize = 100_000;

/// Where scratch files go: the bench target directory, which is on the real disk.
fn scratch_root() -> PathBuf {
    let root = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("target"))
        .join("bench-scratch");
    std::fs::create_dir_all(&root).expect("create the bench scratch directory");
    root
}

/// A small deterministic generator for probes (no extra dependency needed).
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn sample_batch() -> Vec<u8> {
    let mut batch = encode_batch(
        1_700_000_000_000_000_000,
        KEY,
        &[0xab; PAYLOAD_BYTES],
        RECORDS_PER_BATCH,
    );
    record::set_offset(&mut batch, 123_456_789);
    batch
}

fn header_codec(c: &mut Criterion) {
    let limits = Limits::default();
    let batch = sample_batch();
    let header = BatchHeader::decode(&batch, &limits).unwrap();
    let mut group = c.benchmark_group("header");
    group.bench_function("decode", |b| {
        b.iter(|| BatchHeader::decode(black_box(&batch[..HEADER_LEN]), &limits))
    });
    group.bench_function("check", |b| {
        b.iter(|| record::check(black_box(&batch), &limits))
    });
    group.bench_function("encode", |b| {
        let mut out = [0u8; HEADER_LEN];
        b.iter(|| {
            black_box(&header).encode(&mut out);
            black_box(&out);
        })
    });
    group.finish();
}

fn crc(c: &mut Criterion) {
    let batch = sample_batch();
    let mut group = c.benchmark_group("crc");
    // One pass over the whole 10,029-byte batch: staging does this twice when the producer
    // sent a CRC (check what arrived, then compute the CRC of what is stored).
    group.throughput(Throughput::Bytes(batch.len() as u64));
    group.bench_function("batch_crc_10029B", |b| {
        b.iter(|| record::batch_crc(black_box(&batch)))
    });
    group.finish();
}

fn index_lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir_in(scratch_root()).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(dir.path().join("00000000000000000000.idx"))
        .unwrap();
    file.set_len((INDEX_ENTRIES * ENTRY_LEN) as u64).unwrap();
    let mut index = Index::writable(&file, 0).unwrap();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let (mut offset, mut position, mut max_ts) = (0u64, 0u32, 0u64);
    let batch_len = (HEADER_LEN + KEY.len() + PAYLOAD_BYTES) as u32;
    for i in 0..INDEX_ENTRIES as u64 {
        // Producer timestamps about 1 ms apart with jitter, so the running maximum is not
        // simply the batch's own timestamp.
        let ts = 1_700_000_000_000_000_000 + i * 1_000_000 + rng.next() % 3_000_000;
        max_ts = max_ts.max(ts);
        index.push(&IndexEntry {
            offset,
            max_timestamp_ns: max_ts,
            position,
            length: batch_len,
            records: RECORDS_PER_BATCH,
            crc: rng.next() as u32,
            format: pagurus::protocol::record::BatchFormat::Native,
        });
        offset += u64::from(RECORDS_PER_BATCH);
        position = position.wrapping_add(batch_len);
    }
    let len = index.len();
    let (first_ts, last_ts) = (index.get(0).max_timestamp_ns, max_ts);
    const PROBES: usize = 4096;
    let offsets: Vec<u64> = (0..PROBES).map(|_| rng.next() % offset).collect();
    let timestamps: Vec<u64> = (0..PROBES)
        .map(|_| first_ts + rng.next() % (last_ts - first_ts + 1))
        .collect();
    // The lookups must agree with what the index holds.
    for &probe in &offsets[..64] {
        let i = index.find_offset(probe, len).unwrap();
        let e = index.get(i);
        assert!(e.offset <= probe && probe < e.next_offset());
    }
    for &ts in &timestamps[..64] {
        let i = index.find_timestamp(ts, len).unwrap();
        assert!(index.get(i).max_timestamp_ns >= ts);
        assert!(i == 0 || index.get(i - 1).max_timestamp_ns < ts);
    }

    let mut group = c.benchmark_group("index_100k");
    group.bench_function("find_offset_random", |b| {
        let mut k = 0usize;
        b.iter(|| {
            k = (k + 1) % PROBES;
            index.find_offset(black_box(offsets[k]), len)
        })
    });
    group.bench_function("find_timestamp_random", |b| {
        let mut k = 0usize;
        b.iter(|| {
            k = (k + 1) % PROBES;
            index.find_timestamp(black_box(timestamps[k]), len)
        })
    });
    group.finish();
    drop(index);
    drop(dir);
}

/// Opens a fresh log, appends `iters` batches from `appenders` concurrent tasks on one
/// executor, and returns the time the appends took (open and cleanup untimed).
fn timed_appends(fsync: FsyncPolicy, appenders: usize, iters: u64) -> Duration {
    let scratch = scratch_root();
    LocalExecutorBuilder::default()
        .name("append-bench")
        .spawn(move || async move {
            let dir = tempfile::tempdir_in(&scratch).unwrap();
            let config = LogConfig {
                segment_bytes: 64 * 1024 * 1024,
                segment_age: Duration::from_secs(3600),
                fsync,
                ..LogConfig::default()
            };
            let log = PartitionLog::open(dir.path().join("p"), config)
                .await
                .unwrap();
            // A few untimed appends so the executor, ring and files are warm.
            let warm = encode_batch(0, KEY, &[0x5a; PAYLOAD_BYTES], RECORDS_PER_BATCH);
            for _ in 0..4 {
                log.append(&warm, None).await.unwrap();
            }
            let start_offset = log.next_offset();

            let per_task = iters / appenders as u64;
            let extra = iters % appenders as u64;
            let started = Instant::now();
            let tasks: Vec<_> = (0..appenders as u64)
                .map(|t| {
                    let log = log.clone();
                    let n = per_task + u64::from(t < extra);
                    glommio::spawn_local(async move {
                        let mut key = KEY.to_vec();
                        key.push(b'0' + (t % 10) as u8);
                        let batch =
                            encode_batch(0, &key, &[0x5a; PAYLOAD_BYTES], RECORDS_PER_BATCH);
                        let crc = record::batch_crc(&batch);
                        for _ in 0..n {
                            log.append(&batch, Some(crc)).await.unwrap();
                        }
                    })
                })
                .collect();
            for task in tasks {
                task.await;
            }
            let elapsed = started.elapsed();

            let end = start_offset + iters * u64::from(RECORDS_PER_BATCH);
            assert_eq!(log.next_offset(), end, "every batch got its offsets");
            assert_eq!(
                log.high_watermark(),
                end,
                "every acknowledged batch is visible"
            );
            // Not `close()`: it would fdatasync everything the sample left unsynced (up to a
            // whole segment under `never`), spending disk bandwidth and wall time on work that
            // is not measured. Dropping the log and deleting its files discards those pages.
            drop(log);
            // Let the reactor submit the asynchronous closes of the dropped glommio files
            // before the executor exits, so no descriptor keeps a deleted file alive.
            glommio::timer::sleep(Duration::from_millis(1)).await;
            drop(dir);
            elapsed
        })
        .expect("start the bench executor")
        .join()
        .expect("the bench executor ran")
}

fn append(c: &mut Criterion) {
    let policies = [
        ("always", FsyncPolicy::Always),
        (
            "interval_5ms",
            FsyncPolicy::Interval(Duration::from_millis(5)),
        ),
        ("never", FsyncPolicy::Never),
    ];
    let mut group = c.benchmark_group("append_100x100B");
    group
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        // One element = one batch (100 records, 10,029 bytes on disk).
        .throughput(Throughput::Elements(1));
    for (name, fsync) in policies {
        for appenders in [1usize, 16] {
            group.bench_with_input(
                BenchmarkId::new(name, format!("{appenders}_appenders")),
                &appenders,
                |b, &appenders| b.iter_custom(|iters| timed_appends(fsync, appenders, iters)),
            );
        }
    }
    group.finish();
}

/// Batches in the read-plan bench's log: small ones (100 B of payload), so a plan of
/// `READ_PLAN_BYTES` walks a few hundred index entries, the loop a control flag could slow.
const READ_PLAN_BATCHES: u64 = 20_000;
const READ_PLAN_BYTES: u64 = 64 * 1024;

/// Opens a log of `READ_PLAN_BATCHES` small batches (untimed) and returns the time `iters`
/// read plans from random offsets take.
/// `replicated`: a replicated partition's log (`open_raft`), whose plans check every batch
/// for a control flag; there is none in it, the common case.
fn timed_read_plans(iters: u64, replicated: bool) -> Duration {
    let scratch = scratch_root();
    LocalExecutorBuilder::default()
        .name("read-plan-bench")
        .spawn(move || async move {
            let dir = tempfile::tempdir_in(&scratch).unwrap();
            let config = LogConfig {
                fsync: FsyncPolicy::Never,
                ..LogConfig::default()
            };
            let path = dir.path().join("p");
            let log = if replicated {
                PartitionLog::open_raft(path, config, 1).await.unwrap()
            } else {
                PartitionLog::open(path, config).await.unwrap()
            };
            let batch = encode_batch(0, KEY, &[0x5a; 100], 1);
            for _ in 0..READ_PLAN_BATCHES {
                // Staged only: the sync below writes them all at once.
                let _ticket = log.stage(&batch, None).await.unwrap();
            }
            log.sync().await.unwrap();
            assert_eq!(log.high_watermark(), READ_PLAN_BATCHES);
            let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
            let probes: Vec<u64> = (0..4096).map(|_| rng.next() % READ_PLAN_BATCHES).collect();
            let mut planned = 0usize;
            let started = Instant::now();
            for k in 0..iters as usize {
                let plan = log
                    .read_plan(black_box(probes[k % probes.len()]), READ_PLAN_BYTES)
                    .unwrap();
                planned += plan.batches.len();
            }
            let elapsed = started.elapsed();
            assert!(planned >= iters as usize, "every plan holds a batch");
            drop(log);
            glommio::timer::sleep(Duration::from_millis(1)).await;
            drop(dir);
            elapsed
        })
        .expect("start the bench executor")
        .join()
        .expect("the bench executor ran")
}

/// With `READ_PLAN_ITERS=N` set, the read-plan bench runs exactly N plans once and prints
/// the time, for counting instructions (`perf stat`) on a loaded machine, where wall time
/// is noise: run it with N and 2N, and the difference is N plans' worth.
fn read_plan(c: &mut Criterion) {
    if let Some(iters) = std::env::var("READ_PLAN_ITERS")
        .ok()
        .and_then(|n| n.parse::<u64>().ok())
    {
        let replicated = std::env::var_os("READ_PLAN_REPLICATED").is_some();
        let took = timed_read_plans(iters, replicated);
        println!("read_plan fixed (replicated: {replicated}): {iters} plans in {took:?}");
        return;
    }
    let mut group = c.benchmark_group("read_plan_20k_small");
    group.sample_size(20).throughput(Throughput::Elements(1));
    group.bench_function("64KiB_random", |b| {
        b.iter_custom(|iters| timed_read_plans(iters, false))
    });
    group.bench_function("64KiB_random_replicated", |b| {
        b.iter_custom(|iters| timed_read_plans(iters, true))
    });
    group.finish();
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2))
}

criterion_group! {
    name = benches;
    config = config();
    targets = header_codec, crc, index_lookup, read_plan, append
}
criterion_main!(benches);
