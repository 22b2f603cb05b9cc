//! Damage on disk: single-bit flips and torn writes injected into closed and active segments
//! and their indexes, between runs of a real broker (so the bytes are "from disk": the
//! broker did not write them in this process). In every case the broker stays up, never
//! serves a damaged batch to a native or HermitMQ consumer (the clients check every CRC and
//! the test compares every byte), logs what it found, and serves everything else:
//!
//! - a closed segment is never cut: the damaged batch is refused with `CorruptData` carrying
//!   its offsets, the batches around it are served, nothing is moved or deleted;
//! - the active segment after a crash is scanned and cut at the first bad batch (the torn
//!   tail rule of docs/STORAGE.md, "Recovery"), and what was cut is logged;
//! - an index whose entries no longer chain is scanned, and the segments after the cut are
//!   quarantined.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::Broker;
use pagurus::client::ClientError;
use pagurus::limits::Limits;
use pagurus::protocol::hermit;
use pagurus::protocol::native::ErrorCode;
use pagurus::protocol::record::{self, BatchHeader, HEADER_LEN, encode_batch};
use pagurus::storage::index::{ENTRY_LEN, IndexEntry};
use pagurus::storage::segment::parse_file_name;

const TOPIC: &str = "rot";
const BATCHES: u64 = 60;

/// A broker with one topic of `BATCHES` batches (2 records each) in 4 KiB segments.
struct Setup {
    _dir: tempfile::TempDir,
    broker: Broker,
    /// Each batch as stored, by number (offset = 2 * number).
    stored: Vec<Vec<u8>>,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let broker = Broker::start_in(
            &dir.path().join("data"),
            1,
            &["--fsync", "always", "--segment-bytes", "4096"],
        );
        let mut client = broker.client();
        let mut stored = Vec::new();
        for i in 0..BATCHES {
            let payload = format!("batch {i} ").repeat(30).into_bytes();
            let batch = encode_batch(1_000 + i, format!("k{i}").as_bytes(), &payload, 2);
            let (offset, _) = client
                .produce(TOPIC, 0, std::slice::from_ref(&batch))
                .unwrap();
            assert_eq!(offset, 2 * i);
            let mut at_offset = batch;
            record::set_offset(&mut at_offset, offset);
            stored.push(at_offset);
        }
        Setup {
            _dir: dir,
            broker,
            stored,
        }
    }

    fn partition(&self) -> PathBuf {
        self.broker.data_dir.join("topics").join(TOPIC).join("0")
    }

    /// Segments (base, entries) in offset order; the active index stops at its first empty slot.
    fn segments(&self) -> Vec<(u64, Vec<IndexEntry>)> {
        let dir = self.partition();
        let mut bases: Vec<u64> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| parse_file_name(e.ok()?.file_name().to_str()?, "wal"))
            .collect();
        bases.sort_unstable();
        bases
            .into_iter()
            .map(|base| {
                let bytes = std::fs::read(dir.join(format!("{base:020}.idx"))).unwrap();
                let entries = bytes
                    .chunks_exact(ENTRY_LEN)
                    .take_while(|slot| !IndexEntry::is_empty_slot(slot))
                    .map(IndexEntry::decode)
                    .collect();
                (base, entries)
            })
            .collect()
    }

    /// (segment base, entry, is the segment the last one) of batch number `n`.
    fn locate(&self, n: u64) -> (u64, IndexEntry, bool) {
        let segments = self.segments();
        let last = segments.len() - 1;
        for (i, (base, entries)) in segments.into_iter().enumerate() {
            if let Some(e) = entries.iter().find(|e| e.offset == 2 * n) {
                return (base, *e, i == last);
            }
        }
        panic!("batch {n} not found");
    }

    fn file(&self, base: u64, ext: &str) -> PathBuf {
        self.partition().join(format!("{base:020}.{ext}"))
    }
}

fn flip_bit(path: &Path, at: u64, bit: u8) {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    let mut byte = [0u8];
    file.read_exact_at(&mut byte, at).unwrap();
    byte[0] ^= 1 << bit;
    file.write_all_at(&byte, at).unwrap();
    file.sync_all().unwrap();
}

/// Reads the whole partition as a consumer that skips refused ranges on purpose. Returns the
/// batch numbers served and the offset ranges refused with `CorruptData`. Every served batch
/// must be byte for byte what was stored (the client also checks each CRC).
fn read_all(setup: &Setup) -> (Vec<u64>, Vec<(u64, u64)>) {
    let mut client = setup.broker.client();
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let (mut served, mut refused) = (Vec::new(), Vec::new());
    let mut offset = 0;
    loop {
        match client.fetch(TOPIC, 0, offset, 1 << 20, Duration::ZERO) {
            Ok(fetched) if fetched.batches.is_empty() => break,
            Ok(fetched) => {
                for batch in fetched.batches {
                    let header = BatchHeader::decode(&batch, &Limits::default()).unwrap();
                    let n = header.offset / 2;
                    assert_eq!(batch, setup.stored[n as usize], "batch {n} served intact");
                    served.push(n);
                    offset = header.offset + header.records();
                }
            }
            Err(ClientError::Broker {
                code,
                earliest,
                latest,
                ..
            }) if code == ErrorCode::CorruptData as u16 => {
                assert!(
                    earliest <= offset && offset < latest,
                    "range names the batch"
                );
                refused.push((earliest, latest));
                offset = latest;
            }
            Err(e) => panic!("fetch at {offset}: {e}"),
        }
    }
    (served, refused)
}

/// A HermitMQ v1 consumer from offset 0: returns the batch numbers pushed before the broker
/// stopped (at a damaged batch it closes the connection; v1 has no error frame), each
/// checked byte for byte.
fn hermit_read(setup: &Setup, stop_after: usize) -> Vec<u64> {
    let mut stream = TcpStream::connect(setup.broker.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    stream
        .write_all(&hermit::encode_consumer_hello("hermit-group", TOPIC, 0))
        .unwrap();
    let mut got = Vec::new();
    while got.len() < stop_after {
        let mut head = [0u8; HEADER_LEN];
        if stream.read_exact(&mut head).is_err() {
            break; // closed by the broker, or nothing more within the timeout
        }
        let header = BatchHeader::decode(&head, &Limits::default()).unwrap();
        let mut batch = head.to_vec();
        batch.resize(header.batch_len(), 0);
        stream.read_exact(&mut batch[HEADER_LEN..]).unwrap();
        let n = header.offset / 2;
        assert_eq!(
            batch, setup.stored[n as usize],
            "HermitMQ got batch {n} intact"
        );
        got.push(n);
    }
    got
}

fn all_but(bad: &[u64]) -> Vec<u64> {
    (0..BATCHES).filter(|n| !bad.contains(n)).collect()
}

/// The broker is up and appends after the damage, at the end of what it serves.
fn still_writable(setup: &Setup) {
    let mut client = setup.broker.client();
    let end = client
        .list_offsets(TOPIC, 0, pagurus::protocol::native::OffsetSpec::Latest)
        .unwrap();
    let (offset, _) = client
        .produce(TOPIC, 0, &[encode_batch(7, b"after", b"damage", 1)])
        .unwrap();
    assert_eq!(offset, end);
}

fn payload_byte(entry: &IndexEntry) -> u64 {
    u64::from(entry.position) + entry.length as u64 - 3
}

#[test]
fn flip_in_a_closed_segment_after_a_clean_stop_is_refused_on_read_not_served() {
    let mut setup = Setup::new();
    assert_eq!(setup.broker.terminate().code(), Some(0));
    let n = 20;
    let (base, entry, last) = setup.locate(n);
    assert!(!last, "batch {n} is in a closed segment");
    flip_bit(&setup.file(base, "wal"), payload_byte(&entry), 3);
    setup.broker.restart();

    let (served, refused) = read_all(&setup);
    assert_eq!(served, all_but(&[n]));
    assert_eq!(refused, vec![(2 * n, 2 * n + 2)]);
    // Found once, logged once, counted; a second read refuses it again without a new find.
    let (_, again) = read_all(&setup);
    assert_eq!(again, refused);
    let log = setup.broker.log_text();
    assert_eq!(log.matches("corrupt batch found on read").count(), 1);
    assert!(
        log.contains("crc32c of the bytes"),
        "the log says what failed"
    );
    // HermitMQ v1 gets the batches before it, then the connection closes.
    assert_eq!(
        hermit_read(&setup, BATCHES as usize),
        (0..n).collect::<Vec<_>>()
    );
    still_writable(&setup);
    assert!(!setup.partition().join("quarantine").exists());
    // The count survives in the shutdown report's counters.
    assert_eq!(setup.broker.terminate().code(), Some(0));
    assert!(
        setup
            .broker
            .log_text()
            .contains("corrupt_batches_detected=1"),
        "the metric counts it"
    );
}

#[test]
fn flips_in_closed_segments_after_a_crash_are_found_by_recovery_and_never_cut() {
    let mut setup = Setup::new();
    setup.broker.kill();
    // Every segment is at or above the recovery point: recovery checks the closed ones.
    let (header_n, payload_n) = (5, 30);
    let (base, entry, last) = setup.locate(header_n);
    assert!(!last);
    // The header's offset field (bytes 9..17): the bytes no longer match the index.
    flip_bit(&setup.file(base, "wal"), u64::from(entry.position) + 16, 0);
    let (base, entry, last) = setup.locate(payload_n);
    assert!(!last);
    flip_bit(&setup.file(base, "wal"), payload_byte(&entry), 7);
    setup.broker.restart();

    let log = setup.broker.log_text();
    assert_eq!(
        log.matches("corrupt batch in a closed segment").count(),
        2,
        "recovery reports both"
    );
    let (served, refused) = read_all(&setup);
    assert_eq!(served, all_but(&[header_n, payload_n]));
    assert_eq!(
        refused,
        vec![
            (2 * header_n, 2 * header_n + 2),
            (2 * payload_n, 2 * payload_n + 2)
        ]
    );
    still_writable(&setup);
    assert!(!setup.partition().join("quarantine").exists());
}

#[test]
fn flip_in_the_active_segment_after_a_clean_stop_is_refused_on_read() {
    let mut setup = Setup::new();
    assert_eq!(setup.broker.terminate().code(), Some(0));
    let n = BATCHES - 2;
    let (base, entry, last) = setup.locate(n);
    assert!(last, "batch {n} is in the active segment");
    flip_bit(&setup.file(base, "wal"), payload_byte(&entry), 0);
    setup.broker.restart();
    let (served, refused) = read_all(&setup);
    assert_eq!(served, all_but(&[n]));
    assert_eq!(refused, vec![(2 * n, 2 * n + 2)]);
    still_writable(&setup);
}

#[test]
fn flip_in_the_active_segment_after_a_crash_cuts_the_tail_there() {
    let mut setup = Setup::new();
    setup.broker.kill();
    let n = BATCHES - 3;
    let (base, entry, last) = setup.locate(n);
    assert!(last);
    flip_bit(&setup.file(base, "wal"), payload_byte(&entry), 1);
    setup.broker.restart();
    // The last segment after a crash follows the torn-tail rule: cut at the first bad batch,
    // logged with what was cut.
    let log = setup.broker.log_text();
    assert!(log.contains("segment repaired by recovery") && log.contains("IndexMismatch"));
    let (served, refused) = read_all(&setup);
    assert_eq!(served, (0..n).collect::<Vec<_>>());
    assert!(refused.is_empty());
    still_writable(&setup);
}

#[test]
fn index_crc_flip_in_a_closed_segment_refuses_that_batch() {
    let mut setup = Setup::new();
    assert_eq!(setup.broker.terminate().code(), Some(0));
    let n = 14;
    let (base, entry, last) = setup.locate(n);
    assert!(!last);
    let slot = setup
        .segments()
        .iter()
        .find(|(b, _)| *b == base)
        .unwrap()
        .1
        .iter()
        .position(|e| *e == entry)
        .unwrap();
    // The CRC field (bytes 28..32) of its entry: the index still chains.
    flip_bit(&setup.file(base, "idx"), (slot * ENTRY_LEN + 29) as u64, 2);
    setup.broker.restart();
    let (served, refused) = read_all(&setup);
    assert_eq!(served, all_but(&[n]));
    assert_eq!(refused, vec![(2 * n, 2 * n + 2)]);
    still_writable(&setup);
}

#[test]
fn broken_index_chain_is_scanned_cut_and_the_rest_quarantined() {
    let mut setup = Setup::new();
    assert_eq!(setup.broker.terminate().code(), Some(0));
    let n = 25;
    let (base, entry, last) = setup.locate(n);
    assert!(!last);
    let slot = setup
        .segments()
        .iter()
        .find(|(b, _)| *b == base)
        .unwrap()
        .1
        .iter()
        .position(|e| *e == entry)
        .unwrap();
    // The length field (bytes 20..24): entries no longer chain, so the segment is scanned.
    flip_bit(&setup.file(base, "idx"), (slot * ENTRY_LEN + 20) as u64, 4);
    setup.broker.restart();
    let log = setup.broker.log_text();
    assert!(
        log.contains("moved to quarantine"),
        "what is cut off is kept aside"
    );
    let (served, refused) = read_all(&setup);
    assert_eq!(served, (0..n).collect::<Vec<_>>());
    assert!(refused.is_empty());
    assert!(setup.partition().join("quarantine").exists());
    still_writable(&setup);
}

#[test]
fn torn_writes_are_cut_to_whole_batches() {
    // The active segment's WAL ends inside a batch (a write torn by a crash).
    let mut setup = Setup::new();
    setup.broker.kill();
    let n = BATCHES - 1;
    let (base, entry, last) = setup.locate(n);
    assert!(last);
    let wal = setup.file(base, "wal");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&wal)
        .unwrap()
        .set_len(u64::from(entry.position) + 40)
        .unwrap();
    setup.broker.restart();
    let (served, refused) = read_all(&setup);
    assert_eq!(served, (0..n).collect::<Vec<_>>());
    assert!(refused.is_empty());
    assert!(setup.broker.log_text().contains("TornBatch"));
    still_writable(&setup);

    // A closed segment's WAL cut short: the index no longer ends where the WAL does.
    let mut setup = Setup::new();
    assert_eq!(setup.broker.terminate().code(), Some(0));
    let n = 8;
    let (base, entry, last) = setup.locate(n);
    assert!(!last);
    std::fs::OpenOptions::new()
        .write(true)
        .open(setup.file(base, "wal"))
        .unwrap()
        .set_len(u64::from(entry.position) + 100)
        .unwrap();
    setup.broker.restart();
    let (served, refused) = read_all(&setup);
    assert_eq!(served, (0..n).collect::<Vec<_>>());
    assert!(refused.is_empty());
    assert!(setup.broker.log_text().contains("moved to quarantine"));
    still_writable(&setup);
}
