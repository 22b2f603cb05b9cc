//! A full disk: the broker runs on a small file system of its own (tmpfs with `size=`, or an
//! ext4 image on a loop device with `PAGURUS_TEST_FS=ext4`), which the test fills. Produce
//! must get `StorageFull` (native) or a `0xFF` ack (HermitMQ v1), fetches must go on, nothing
//! acknowledged may be lost, and writing must resume once space returns, with no restart.
//!
//! Mounting needs root (CI runs as root). Without it the tests say so and pass vacuously.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::Broker;
use common::small_fs::SmallFs;
use pagurus::client::ClientError;
use pagurus::client::blocking::Client;
use pagurus::protocol::hermit::{self, ACK_FAILED, ACK_STORED};
use pagurus::protocol::native::{ErrorCode, TopicSettings};
use pagurus::protocol::record::{self, BatchHeader, encode_batch};
use pagurus::shard::placement::partition_owner;

/// One acknowledged batch: where the broker put it and what it holds.
#[derive(Debug, Clone)]
struct Acked {
    partition: u32,
    offset: u64,
    payload: Vec<u8>,
}

fn payload(partition: u32, i: u64, size: usize) -> Vec<u8> {
    let mut p = format!("p{partition}-b{i}-").into_bytes();
    p.resize(size.max(p.len()), b'.');
    p
}

/// A client that fails instead of hanging if an answer never comes.
fn timed_client(broker: &Broker) -> Client {
    let client = broker.client();
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    client
}

fn is_storage_full(e: &ClientError) -> bool {
    e.code() == Some(ErrorCode::StorageFull)
}

/// Reads every batch of `partition` from offset 0 with CRC checks and compares with `acked`
/// (each acknowledged batch at its offset, offsets contiguous). Returns the high watermark.
fn check_partition(client: &mut Client, topic: &str, partition: u32, acked: &[Acked]) -> u64 {
    let mut stored = Vec::new();
    let mut offset = 0;
    loop {
        let fetched = client
            .fetch(topic, partition, offset, 1 << 20, Duration::ZERO)
            .unwrap_or_else(|e| panic!("fetch {topic}/{partition} at {offset}: {e}"));
        if fetched.batches.is_empty() {
            assert_eq!(offset, fetched.high_watermark, "stopped below the end");
            break;
        }
        for batch in fetched.batches {
            let header = BatchHeader::decode(&batch, &Default::default()).unwrap();
            assert_eq!(header.offset, offset, "offsets are contiguous");
            offset += header.records();
            stored.push((header.offset, record::payload_of(&batch, &header).to_vec()));
        }
    }
    for a in acked.iter().filter(|a| a.partition == partition) {
        let found = stored.iter().find(|(o, _)| *o == a.offset);
        assert_eq!(
            found.map(|(_, p)| p),
            Some(&a.payload),
            "acknowledged batch at {topic}/{partition} offset {} is intact",
            a.offset
        );
    }
    offset
}

/// Produces `size`-byte batches to `partition` until the broker answers StorageFull; every
/// other outcome is an error. Returns the number acknowledged.
fn produce_until_full(
    client: &mut Client,
    topic: &str,
    partition: u32,
    size: usize,
    acked: &mut Vec<Acked>,
) -> usize {
    for i in 0.. {
        let p = payload(partition, acked.len() as u64 + i, size);
        match client.produce(topic, partition, &[encode_batch(0, b"", &p, 1)]) {
            Ok((offset, _)) => acked.push(Acked {
                partition,
                offset,
                payload: p,
            }),
            Err(e) if is_storage_full(&e) => return i as usize,
            Err(e) => panic!("produce to a filling disk: expected StorageFull, got {e}"),
        }
        assert!(i < 1_000_000, "the disk never filled");
    }
    unreachable!()
}

#[test]
fn full_disk_refuses_produce_serves_fetch_and_recovers_when_space_returns() {
    let Some(fs) = SmallFs::mount(8) else { return };
    // The data directory is the mount itself: the broker's log goes beside it, not on it.
    let mut broker = Broker::start_in(
        fs.path(),
        2,
        &["--fsync", "always", "--segment-bytes", "262144"],
    );
    // Room an operator can free later; written once the broker has marked the directory
    // as its own (it refuses to start in one that holds someone else's files).
    let ballast = fs.path().join("ballast");
    std::fs::write(&ballast, vec![0x55u8; 1 << 20]).unwrap();
    let topic = "full";
    let mut client = timed_client(&broker);
    client
        .create_topic(
            topic,
            TopicSettings {
                partitions: 4,
                ..Default::default()
            },
        )
        .unwrap();
    let partitions: Vec<u32> = (0..4).collect();
    assert!(
        (0..2).all(|core| partitions
            .iter()
            .any(|&p| partition_owner(topic, p, 2) == core)),
        "both cores own a partition"
    );

    // 1. Fill the disk through the broker, one partition after another, with 1 KB batches,
    // then with 11-byte batches to use the last scraps (pages of the WAL and of the index).
    let mut acked = Vec::new();
    let mut first_round = 0;
    for &p in &partitions {
        first_round += produce_until_full(&mut client, topic, p, 1000, &mut acked);
    }
    assert!(first_round > 100, "only {first_round} batches fit");
    for &p in &partitions {
        produce_until_full(&mut client, topic, p, 11, &mut acked);
    }
    // HermitMQ v1 producers get 0xFF. (On ext4 a little space can come back as the kernel
    // settles its reservations, so a write may still succeed: produce until refused.)
    for &p in &partitions {
        let refused = (0..10_000).any(|i| {
            let body = payload(p, 2_000_000 + i, 11);
            match hermit_produce(&broker, topic, p, &body) {
                (ACK_FAILED, _) => true,
                (ACK_STORED, offset) => {
                    acked.push(Acked {
                        partition: p,
                        offset,
                        payload: body,
                    });
                    false
                }
                (status, _) => panic!("HermitMQ ack status {status:#04x}"),
            }
        });
        assert!(
            refused,
            "HermitMQ v1 producer on partition {p} never refused"
        );
    }
    assert!(
        broker.log_text().contains("StorageFull"),
        "the refusals are logged"
    );

    // 2. Fetches go on, and hold every acknowledged batch.
    for &p in &partitions {
        check_partition(&mut client, topic, p, &acked);
    }

    // 3. Space returns: writing resumes on every partition without a restart, for both
    // protocols, and consumer offsets can be committed.
    std::fs::remove_file(&ballast).unwrap();
    for &p in &partitions {
        for i in 0..20 {
            let body = payload(p, 1_000_000 + i, 1000);
            let (offset, _) = client
                .produce(topic, p, &[encode_batch(0, b"", &body, 1)])
                .unwrap_or_else(|e| panic!("partition {p} after space returned: {e}"));
            acked.push(Acked {
                partition: p,
                offset,
                payload: body,
            });
        }
        let (status, offset) = hermit_produce(&broker, topic, p, b"hermit again");
        assert_eq!(status, ACK_STORED, "HermitMQ v1 after space returned");
        acked.push(Acked {
            partition: p,
            offset,
            payload: b"hermit again".to_vec(),
        });
    }
    client.commit_offset("g", topic, 0, 7).unwrap();
    let ends: Vec<u64> = partitions
        .iter()
        .map(|&p| check_partition(&mut client, topic, p, &acked))
        .collect();

    // 4. Nothing acknowledged is lost across a kill -9 on a full disk (the restart must work
    // with no space), nor across a clean restart.
    let _filler = fs.fill("filler");
    broker.kill();
    broker.restart();
    let mut client = timed_client(&broker);
    for (&p, &end) in partitions.iter().zip(&ends) {
        assert_eq!(check_partition(&mut client, topic, p, &acked), end);
    }
    assert_eq!(client.fetch_offset("g", topic, 0).unwrap(), Some(7));
    assert_eq!(broker.terminate().code(), Some(0));
    broker.restart();
    let mut client = timed_client(&broker);
    for (&p, &end) in partitions.iter().zip(&ends) {
        assert_eq!(check_partition(&mut client, topic, p, &acked), end);
    }
}

/// The index is a sparse file written through a shared mapping. When a batch needs a new
/// index page while the WAL page still has room, the page must be allocated by the file
/// system at that write: on a full disk that used to kill the broker with SIGBUS. Set up
/// exactly that: 128 batches of 40 bytes fill one 4 KiB index page and leave 3 KiB free in
/// the WAL's last page; then fill the disk and produce one more.
#[test]
fn new_index_page_on_a_full_disk_is_storage_full_not_sigbus() {
    let Some(fs) = SmallFs::mount(4) else { return };
    let broker = Broker::start_in(fs.path(), 1, &["--fsync", "always"]);
    let topic = "pages";
    let mut client = timed_client(&broker);
    let mut acked = Vec::new();
    for i in 0..128 {
        let body = payload(0, i, 11);
        assert_eq!(body.len(), 11);
        let (offset, _) = client
            .produce(topic, 0, &[encode_batch(0, b"", &body, 1)])
            .unwrap();
        acked.push(Acked {
            partition: 0,
            offset,
            payload: body,
        });
    }
    let filler = fs.fill("filler");
    let e = client
        .produce(topic, 0, &[encode_batch(0, b"", b"one too many", 1)])
        .expect_err("no space is left for the index page");
    assert!(is_storage_full(&e), "expected StorageFull, got {e}");
    assert!(broker.log_text().contains("index page unavailable"));
    check_partition(&mut client, topic, 0, &acked);

    std::fs::remove_file(filler).unwrap();
    let body = payload(0, 128, 11);
    let (offset, _) = client
        .produce(topic, 0, &[encode_batch(0, b"", &body, 1)])
        .unwrap();
    assert_eq!(offset, 128);
    acked.push(Acked {
        partition: 0,
        offset,
        payload: body,
    });
    check_partition(&mut client, topic, 0, &acked);
}

/// One HermitMQ v1 produce on a fresh connection: (status, base offset).
fn hermit_produce(broker: &Broker, topic: &str, partition: u32, payload: &[u8]) -> (u8, u64) {
    let mut stream = TcpStream::connect(broker.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream
        .write_all(&hermit::encode_producer_hello(topic, partition))
        .unwrap();
    stream.write_all(&encode_batch(0, b"", payload, 1)).unwrap();
    let mut ack = [0u8; hermit::ACK_LEN];
    stream.read_exact(&mut ack).unwrap();
    (ack[0], u64::from_be_bytes(ack[1..].try_into().unwrap()))
}
