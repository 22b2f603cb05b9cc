//! The vendored glommio reuses the state of an io_uring operation (its "source") once no one
//! holds it (vendor/README.md, the fifth change): the ingest path then allocates nothing per
//! batch. Reusing one too early would be silent corruption: a completion of the old
//! operation landing in the new one (a wrong length or buffer), or the kernel still
//! writing into a buffer that a new operation owns.
//!
//! This test provokes exactly those cases, thousands of times, on real files: reads and
//! writes cancelled while in the kernel, timers dropped unfired, and operations that
//! complete, all interleaved, so cancelled sources come back to the free list while their
//! neighbours are reused. Every read that completes must return exactly the bytes at its
//! position, every write must land where it was aimed, and the buffers `write_at_reuse`
//! hands back must be the caller's, intact.

use std::time::Duration;

use futures_lite::future;
use glommio::LocalExecutorBuilder;
use glommio::io::BufferedFile;

const FILE_BYTES: u64 = 1 << 20;
const ROUNDS: u64 = 2_000;
const READS_PER_ROUND: u64 = 8;
const READ_BYTES: usize = 4096;

/// The byte the reference file holds at `position`.
fn byte_at(position: u64) -> u8 {
    (position.wrapping_mul(31) ^ (position >> 9)) as u8
}

/// A small deterministic generator, so a failure replays the same way.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, bound: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % bound
    }
}

#[test]
fn reused_operation_state_never_carries_an_old_operations_result_or_buffer() {
    let dir = tempfile::tempdir().unwrap();
    let reference = dir.path().join("reference");
    let written = dir.path().join("written");
    let bytes: Vec<u8> = (0..FILE_BYTES).map(byte_at).collect();
    std::fs::write(&reference, &bytes).unwrap();
    let expected = LocalExecutorBuilder::default()
        .spawn(move || async move {
            let reader = BufferedFile::open(&reference).await.unwrap();
            let writer = BufferedFile::create(&written).await.unwrap();
            let mut rng = Lcg(7);
            let mut expected = vec![0u8; FILE_BYTES as usize];
            for round in 0..ROUNDS {
                // Reads at random places; every other one is dropped once it is in the kernel.
                let mut reads: Vec<_> = (0..READS_PER_ROUND)
                    .map(|_| {
                        let at = rng.below(FILE_BYTES - READ_BYTES as u64);
                        let read = Box::pin(reader.read_at(at, READ_BYTES));
                        (at, read)
                    })
                    .collect();
                let mut early = Vec::new();
                for (at, read) in reads.iter_mut() {
                    // glommio queues a read on its first poll; it cannot be done yet.
                    if let Some(done) = future::poll_once(read.as_mut()).await {
                        early.push((*at, done));
                    }
                }
                assert!(
                    early.is_empty(),
                    "round {round}: a read finished unsubmitted"
                );
                // A timer that will never fire, dropped armed.
                let mut timer = Box::pin(glommio::timer::sleep(Duration::from_secs(60)));
                assert!(future::poll_once(timer.as_mut()).await.is_none());
                future::yield_now().await; // the reactor submits what was queued
                drop(timer);
                let mut kept = Vec::new();
                for (i, (at, read)) in reads.into_iter().enumerate() {
                    if i % 2 == 0 {
                        drop(read);
                    } else {
                        kept.push((at, read));
                    }
                }
                // A write through a reused source, its buffer handed back.
                let at = rng.below(FILE_BYTES / 512) * 512;
                let fill = (round % 251) as u8 + 1;
                let buf = vec![fill; 512];
                let ptr = buf.as_ptr();
                let (done, back) = writer.write_at_reuse(buf, at).await;
                assert_eq!(done.unwrap(), 512, "round {round}: the whole write");
                assert_eq!(
                    back.as_ptr(),
                    ptr,
                    "round {round}: the caller's buffer comes back"
                );
                assert!(
                    back.iter().all(|&b| b == fill),
                    "round {round}: buffer intact"
                );
                expected[at as usize..at as usize + 512].fill(fill);
                for (at, read) in kept {
                    let got = read.await.unwrap();
                    assert_eq!(got.len(), READ_BYTES, "round {round}: read at {at}");
                    assert!(
                        got.iter()
                            .enumerate()
                            .all(|(i, &b)| b == byte_at(at + i as u64)),
                        "round {round}: the read at {at} returned another read's bytes"
                    );
                }
            }
            writer.close().await.unwrap();
            reader.close().await.unwrap();
            expected
        })
        .unwrap()
        .join()
        .unwrap();
    let on_disk = std::fs::read(dir.path().join("written")).unwrap();
    let end = expected.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    assert_eq!(on_disk.len(), end, "the file ends after its last write");
    assert!(
        on_disk == expected[..end],
        "every write landed where it was aimed"
    );
}
