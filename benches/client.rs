//! The client's CPU work per batch, without sockets: encoding 100 records of 100 B into a
//! produce request (in place, with its CRC32C), the same through the accumulator (batching
//! by count), the older path that built the batch and then copied it into a request, and
//! checking a fetch answer of 100 such batches against their CRCs and iterating its
//! records.
//!
//!   cargo bench --bench client

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use pagurus::client::consume::FetchedBatches;
use pagurus::client::produce::{Accumulator, BatchLimits, ProduceFrame};
use pagurus::limits::Limits;
use pagurus::protocol::native::{self, ProduceBatches, Request};
use pagurus::protocol::payload::push_record;
use pagurus::protocol::record::{self, encode_batch};

const RECORDS_PER_BATCH: u32 = 100;
const RECORD_BYTES: usize = 100;
const TOPIC: &str = "bench-topic";

fn encode(c: &mut Criterion) {
    let record = [0x5au8; RECORD_BYTES];
    let mut group = c.benchmark_group("produce_request_100x100B");
    group.throughput(Throughput::Elements(u64::from(RECORDS_PER_BATCH)));
    let mut frame = ProduceFrame::new(TOPIC, 0, b"");
    group.bench_function("in_place", |b| {
        b.iter(|| {
            frame.reset(TOPIC, 0, b"");
            for _ in 0..RECORDS_PER_BATCH {
                frame.push(black_box(&record));
            }
            black_box(frame.finish(7, 1_700_000_000_000_000_000).len())
        })
    });
    let mut accumulator = Accumulator::new(BatchLimits {
        records_max: RECORDS_PER_BATCH,
        bytes_max: 1 << 20,
        linger: Duration::from_millis(5),
    });
    let now = Instant::now();
    group.bench_function("accumulator", |b| {
        b.iter(|| {
            for _ in 0..RECORDS_PER_BATCH {
                accumulator.push(TOPIC, 0, b"", black_box(&record), now);
            }
            let mut frame = accumulator.pop_ready().expect("full by count");
            black_box(frame.finish(7, 0).len());
            accumulator.recycle(frame);
        })
    });
    let mut payload = Vec::new();
    let mut out = Vec::new();
    group.bench_function("batch_then_request", |b| {
        b.iter(|| {
            payload.clear();
            for _ in 0..RECORDS_PER_BATCH {
                push_record(&mut payload, black_box(&record));
            }
            let batch = encode_batch(0, b"", &payload, RECORDS_PER_BATCH);
            let mut bytes = Vec::with_capacity(batch.len() + 4);
            native::push_produce_batch(&mut bytes, &batch);
            out.clear();
            native::encode_request(
                &mut out,
                7,
                &Request::Produce {
                    topic: TOPIC.as_bytes(),
                    partition: 0,
                    batches: ProduceBatches::from_validated(1, &bytes, Limits::default()),
                },
            );
            black_box(out.len())
        })
    });
    group.finish();
}

fn fetch(c: &mut Criterion) {
    let batches: Vec<Vec<u8>> = (0..100u64)
        .map(|i| {
            let mut payload = Vec::new();
            for _ in 0..RECORDS_PER_BATCH {
                push_record(&mut payload, &[0x5a; RECORD_BYTES]);
            }
            let mut batch = encode_batch(1, b"", &payload, RECORDS_PER_BATCH);
            record::set_offset(&mut batch, i * u64::from(RECORDS_PER_BATCH));
            batch
        })
        .collect();
    let data = batches.concat();
    let mut frame = Vec::new();
    native::encode_fetch_head(
        &mut frame,
        1,
        0,
        0,
        batches.iter().map(|b| record::batch_crc(b)),
        data.len() as u32,
    );
    frame.extend_from_slice(&data);
    let body = &frame[native::FRAME_LEN_BYTES + native::RESPONSE_HEADER_LEN..];
    let mut group = c.benchmark_group("fetch_answer_100_batches_of_100x100B");
    group.throughput(Throughput::Elements(100 * u64::from(RECORDS_PER_BATCH)));
    group.bench_function("check_and_iterate_records", |b| {
        b.iter(|| {
            let fetched = FetchedBatches::decode(black_box(body)).expect("intact");
            let mut bytes = 0usize;
            for batch in fetched.iter() {
                for record in batch.records() {
                    bytes += record.value.len();
                }
            }
            black_box(bytes)
        })
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
    targets = encode, fetch
}
criterion_main!(benches);
