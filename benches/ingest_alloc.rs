//! Heap allocations on the ingest path, counted by a global allocator: a native produce
//! request is decoded, its batch staged on a partition log, committed per the fsync policy,
//! and its response encoded, by 16 concurrent producers on one core, as the broker's
//! connection tasks do it (the socket reads and writes themselves are left out).
//!
//! Nothing on that path allocates per batch, nor per write or flush: with one producer a
//! flush is a batch. Write buffers are recycled per core (`storage::log::buffers`), the
//! commit rounds' queue lives as long as the log's I/O task, and the vendored glommio
//! reuses the state of its io_uring operations (vendor/README.md). What still allocates is
//! per mebibyte written, not per batch: the background jobs that pre-extend the WAL under
//! `always` and write it back under `never`/`interval` (a few allocations per job). The
//! bench fails when any row makes more than [`ALLOCATIONS_PER_BATCH_MAX`].
//!
//!   cargo bench --bench ingest_alloc     (`cargo test --all-targets` runs it, shorter)

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use glommio::LocalExecutorBuilder;
use pagurus::limits::Limits;
use pagurus::protocol::native::{self, ProduceBatches, Request};
use pagurus::protocol::record::encode_batch;
use pagurus::storage::{FsyncPolicy, LogConfig, PartitionLog};

struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Well under one: an allocation per batch, write or flush makes a row 1.0 or more, while the
/// per-mebibyte background jobs cost 0.01-0.09 per 10 KiB batch (measured on a 2-vCPU VM).
const ALLOCATIONS_PER_BATCH_MAX: f64 = 0.25;

struct Outcome {
    batches: u64,
    allocations: u64,
    /// Batches per fsync (always) or per write (otherwise): how many share a flush.
    batches_per_flush: f64,
    elapsed: Duration,
}

/// One producer's request frame, encoded once: a produce of one batch of 100 x 100 B.
fn request_frame() -> Vec<u8> {
    let mut payload = Vec::new();
    for _ in 0..100 {
        pagurus::protocol::payload::push_record(&mut payload, &[0x5a; 100]);
    }
    let batch = encode_batch(0, b"", &payload, 100);
    let mut bytes = Vec::new();
    native::push_produce_batch(&mut bytes, &batch);
    let limits = Limits::default();
    let mut frame = Vec::new();
    native::encode_request(
        &mut frame,
        1,
        &Request::Produce {
            topic: b"t",
            partition: 0,
            batches: ProduceBatches::from_validated(1, &bytes, limits),
        },
    );
    frame
}

fn run(fsync: FsyncPolicy, producers: usize, batches_per_producer: u64) -> Outcome {
    LocalExecutorBuilder::default()
        .spawn(move || async move {
            let dir = tempfile::tempdir_in(
                std::env::var("CARGO_TARGET_DIR").unwrap_or_else(|_| "target".into()),
            )
            .unwrap();
            let config = LogConfig {
                segment_bytes: 1 << 30,
                fsync,
                ..LogConfig::default()
            };
            let log = PartitionLog::open(dir.path(), config).await.unwrap();
            let frame = Rc::new(request_frame());
            let measure = |count: u64| {
                let tasks: Vec<_> = (0..producers)
                    .map(|_| {
                        let (log, frame) = (log.clone(), frame.clone());
                        glommio::spawn_local(async move {
                            let limits = Limits::default();
                            let out = RefCell::new(Vec::with_capacity(64));
                            for _ in 0..count {
                                let body = &frame[native::FRAME_LEN_BYTES..];
                                let (header, request) =
                                    native::decode_request(body, &limits).unwrap();
                                let Request::Produce { batches, .. } = request else {
                                    unreachable!()
                                };
                                let (crc, batch) = batches.iter().next().unwrap();
                                let ticket = log.stage(batch, Some(crc)).await.unwrap();
                                log.kick();
                                log.commit(ticket).await.unwrap();
                                let mut out = out.borrow_mut();
                                out.clear();
                                native::encode_produce_response(
                                    &mut out,
                                    header.correlation_id,
                                    ticket.base_offset,
                                    ticket.end_offset,
                                );
                            }
                        })
                    })
                    .collect();
                async move {
                    for task in tasks {
                        task.await;
                    }
                }
            };
            // Warm up: buffers, maps and the index reach their steady size.
            measure(batches_per_producer / 4).await;
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            let started = Instant::now();
            let segments_before = log.segments().len();
            let stats_before = log.stats();
            measure(batches_per_producer).await;
            let stats = log.stats();
            let flushes = match fsync {
                FsyncPolicy::Always => stats.syncs - stats_before.syncs,
                _ => stats.writes - stats_before.writes,
            };
            let elapsed = started.elapsed();
            let allocations = ALLOCATIONS.load(Ordering::Relaxed) - before;
            assert_eq!(
                log.segments().len(),
                segments_before,
                "no roll while measuring"
            );
            Outcome {
                batches: batches_per_producer * producers as u64,
                allocations,
                batches_per_flush: (stats.batches - stats_before.batches) as f64
                    / flushes.max(1) as f64,
                elapsed,
            }
        })
        .unwrap()
        .join()
        .unwrap()
}

fn main() {
    // `cargo test --all-targets` runs bench binaries too: keep that pass short.
    let quick =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let per_producer = if quick { 2_000 } else { 5_000 };
    println!(
        "ingest path allocations (decode + stage + commit + encode response), 100 x 100 B per batch"
    );
    println!(
        "{:<12} {:>9} {:>9} {:>12} {:>13} {:>16} {:>11}",
        "fsync",
        "producers",
        "batches",
        "allocations",
        "allocs/batch",
        "batches/flush",
        "batches/s"
    );
    let mut over = Vec::new();
    for (name, fsync) in [
        ("always", FsyncPolicy::Always),
        (
            "interval=5",
            FsyncPolicy::Interval(Duration::from_millis(5)),
        ),
        ("never", FsyncPolicy::Never),
    ] {
        for producers in [1, 16] {
            let o = run(fsync, producers, per_producer);
            let per_batch = o.allocations as f64 / o.batches as f64;
            if per_batch > ALLOCATIONS_PER_BATCH_MAX {
                over.push(format!("{name} with {producers} producers: {per_batch:.3}"));
            }
            println!(
                "{:<12} {:>9} {:>9} {:>12} {:>13.3} {:>16.1} {:>11.0}",
                name,
                producers,
                o.batches,
                o.allocations,
                per_batch,
                o.batches_per_flush,
                o.batches as f64 / o.elapsed.as_secs_f64()
            );
        }
    }
    if !over.is_empty() {
        eprintln!(
            "allocations per batch above {ALLOCATIONS_PER_BATCH_MAX}: {}",
            over.join("; ")
        );
        std::process::exit(1);
    }
}
