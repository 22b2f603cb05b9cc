//! The crash tests' bookkeeping (tests/crash.rs, tests/powerloss.rs): producers and a
//! committer that record what the broker acknowledged, and a verification that reads every
//! partition back with a fresh consumer and compares byte for byte.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::Duration;

use super::Broker;
use pagurus::client::ClientError;
use pagurus::client::blocking::Client;
use pagurus::protocol::hermit;
use pagurus::protocol::native::{self, ErrorCode, OffsetSpec};
use pagurus::protocol::record::{self, BatchHeader, encode_batch};

/// xorshift64*: a seeded, reproducible stream of numbers for the tests' choices.
/// Rounds from the environment variable `var` (a long run in a script), else `default`.
pub fn rounds_from_env(var: &str, default: usize) -> usize {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A seed from the environment variable `var` (to replay a failed run), else the clock.
pub fn seed_from_env(var: &str) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        })
}

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A batch as the broker must store it once acknowledged at `offset`.
#[derive(Debug, Clone)]
pub struct Expected {
    /// The batch as sent (timestamp set, so the broker only rewrites the offset).
    pub bytes: Vec<u8>,
    /// "r{round}w{producer}-s{seq}": unique over the whole run; also the batch's key.
    pub tag: String,
}

impl Expected {
    pub fn new(tag: String, seq: u64, rng: &mut Rng) -> Expected {
        let mut payload = format!("{tag}:").into_bytes();
        let size = 10 + rng.below(2000) as usize;
        payload.extend((0..size).map(|i| b'a' + ((i as u64 + seq) % 26) as u8));
        let records = 1 + rng.below(3) as u32;
        let timestamp = 1_700_000_000_000_000_000 + seq;
        Expected {
            bytes: encode_batch(timestamp, tag.as_bytes(), &payload, records),
            tag,
        }
    }

    pub fn stored_at(&self, offset: u64) -> Vec<u8> {
        let mut stored = self.bytes.clone();
        record::set_offset(&mut stored, offset);
        stored
    }

    fn records(&self) -> u64 {
        BatchHeader::decode(&self.bytes, &Default::default())
            .unwrap()
            .records()
    }
}

/// (group, topic, partition).
pub type CommitKey = (String, String, u32);

#[derive(Default)]
pub struct Ledger {
    /// (topic, partition) -> acknowledged batches by offset.
    pub acked: HashMap<(String, u32), BTreeMap<u64, Expected>>,
    /// Batches sent whose answer never came (the broker died): each may be stored at most once.
    pub unknown: Vec<String>,
    /// (group, topic, partition) -> (last acknowledged commit, commit in flight at the kill).
    pub commits: HashMap<CommitKey, (Option<u64>, Option<u64>)>,
}

impl Ledger {
    pub fn record_acked(&mut self, topic: &str, partition: u32, base: u64, batches: Vec<Expected>) {
        let log = self
            .acked
            .entry((topic.to_string(), partition))
            .or_default();
        let mut offset = base;
        for batch in batches {
            let records = batch.records();
            assert!(
                log.insert(offset, batch).is_none(),
                "offset {offset} of {topic}/{partition} acknowledged twice"
            );
            offset += records;
        }
    }

    pub fn record_unknown(&mut self, batches: impl IntoIterator<Item = Expected>) {
        self.unknown.extend(batches.into_iter().map(|b| b.tag));
    }
}

/// What one verification found.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub acked_batches: usize,
    pub lost: usize,
    pub duplicated: usize,
    pub corrupt: usize,
    pub gaps: usize,
    /// Acknowledged batches missing below the end of what their partition serves: lost
    /// from the middle of a log, not from its end.
    pub holes: usize,
    pub expired: usize,
    pub unknown_stored: usize,
    pub commits_checked: usize,
    pub commits_lost: usize,
}

impl Tally {
    pub fn add(&mut self, round: &Tally) {
        self.lost += round.lost;
        self.duplicated = self.duplicated.max(round.duplicated);
        self.corrupt += round.corrupt;
        self.gaps += round.gaps;
        self.holes += round.holes;
        self.commits_lost += round.commits_lost;
        self.acked_batches = round.acked_batches;
        self.commits_checked = round.commits_checked;
    }
}

fn batch_records(batch: &[u8]) -> u64 {
    BatchHeader::decode(batch, &Default::default())
        .expect("checked by the client")
        .records()
}

pub fn tag_of(batch: &[u8]) -> String {
    let header = BatchHeader::decode(batch, &Default::default()).expect("checked by the client");
    let key = record::key_of(batch, &header);
    String::from_utf8_lossy(key).into_owned()
}

pub fn timed_client(broker: &Broker) -> Client {
    let client = broker.client();
    client
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    client
}

type InFlight = VecDeque<(u32, String, u32, Vec<Expected>)>;

/// One native producer: pipelined produce requests (up to `in_flight`) of 1 to 3 batches to
/// random partitions of `targets` (topic, partition count) until the connection fails (the
/// broker was killed). Records every acknowledged batch.
pub fn produce(
    addr: SocketAddr,
    id: &str,
    seed: u64,
    ledger: &Mutex<Ledger>,
    targets: &[(String, u32)],
    in_flight_max: usize,
) {
    let mut rng = Rng(seed | 1);
    let Ok(mut client) = Client::connect(addr) else {
        return;
    };
    let _ = client.set_read_timeout(Some(Duration::from_secs(60)));
    let mut seq = 0u64;
    let mut in_flight: InFlight = VecDeque::new();
    loop {
        while in_flight.len() < in_flight_max {
            let (topic, partitions) = &targets[rng.below(targets.len() as u64) as usize];
            let partition = rng.below(u64::from(*partitions)) as u32;
            let count = 1 + rng.below(3) as usize;
            let batches: Vec<Expected> = (0..count)
                .map(|_| {
                    seq += 1;
                    Expected::new(format!("w{id}-s{seq}"), seq, &mut rng)
                })
                .collect();
            let sent: Vec<Vec<u8>> = batches.iter().map(|b| b.bytes.clone()).collect();
            let Ok(correlation_id) = client.send_produce(topic, partition, &sent) else {
                return lose(ledger, batches, in_flight);
            };
            in_flight.push_back((correlation_id, topic.clone(), partition, batches));
        }
        let (correlation_id, topic, partition, batches) = in_flight.pop_front().unwrap();
        let answer = client.expect(correlation_id).and_then(|()| {
            native::decode_produce_response(client.body())
                .map_err(|e| pagurus::client::ClientError::Protocol(e.to_string()))
        });
        let Ok((base, _)) = answer else {
            return lose(ledger, batches, in_flight);
        };
        ledger
            .lock()
            .unwrap()
            .record_acked(&topic, partition, base, batches);
    }
}

/// The broker died: everything in flight is of unknown fate.
fn lose(ledger: &Mutex<Ledger>, batches: Vec<Expected>, in_flight: InFlight) {
    ledger.lock().unwrap().record_unknown(
        batches
            .into_iter()
            .chain(in_flight.into_iter().flat_map(|f| f.3)),
    );
}

/// One HermitMQ v1 producer on `topic`/`partition`: one batch at a time, each acknowledged
/// with its offset, until the connection fails.
pub fn produce_v1(
    addr: SocketAddr,
    id: &str,
    seed: u64,
    ledger: &Mutex<Ledger>,
    topic: &str,
    partition: u32,
) {
    let mut rng = Rng(seed | 1);
    let Ok(mut stream) = TcpStream::connect(addr) else {
        return;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    if stream
        .write_all(&hermit::encode_producer_hello(topic, partition))
        .is_err()
    {
        return;
    }
    for seq in 1u64.. {
        let batch = Expected::new(format!("v{id}-s{seq}"), seq, &mut rng);
        let mut ack = [0u8; hermit::ACK_LEN];
        let acked = stream
            .write_all(&batch.bytes)
            .and_then(|()| stream.read_exact(&mut ack));
        if acked.is_err() || ack[0] != hermit::ACK_STORED {
            return ledger.lock().unwrap().record_unknown([batch]);
        }
        let base = u64::from_be_bytes(ack[1..].try_into().unwrap());
        ledger
            .lock()
            .unwrap()
            .record_acked(topic, partition, base, vec![batch]);
    }
}

/// Commits increasing offsets (from `base_value`) for `groups` on `targets` in turn until the
/// broker dies.
pub fn commit(
    addr: SocketAddr,
    groups: &[String],
    targets: &[(String, u32)],
    base_value: u64,
    ledger: &Mutex<Ledger>,
) {
    let Ok(mut client) = Client::connect(addr) else {
        return;
    };
    let _ = client.set_read_timeout(Some(Duration::from_secs(60)));
    for i in 0u64.. {
        let group = groups[(i % groups.len() as u64) as usize].clone();
        let (topic, partitions) = &targets[(i % targets.len() as u64) as usize];
        let partition = (i % u64::from(*partitions)) as u32;
        let value = base_value + i;
        let key = (group.clone(), topic.clone(), partition);
        ledger
            .lock()
            .unwrap()
            .commits
            .entry(key.clone())
            .or_default()
            .1 = Some(value);
        if client
            .commit_offset(&group, topic, partition, value)
            .is_err()
        {
            return;
        }
        let mut ledger = ledger.lock().unwrap();
        let entry = ledger.commits.get_mut(&key).unwrap();
        *entry = (Some(value), None);
    }
}

/// How to read a topic back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Everything from offset 0 must be there.
    Whole,
    /// Retention may have deleted a prefix: read from the earliest offset (following it if
    /// retention moves it while the partition is read); acknowledged batches below it are
    /// counted as expired.
    FromEarliest,
}

/// Reads every partition of `topics` with a fresh consumer and compares with the ledger.
/// Acknowledged batches found lost are removed from it (so each is counted once).
pub fn verify(broker: &Broker, ledger: &mut Ledger, topics: &[(String, u32, Check)]) -> Tally {
    let mut tally = Tally::default();
    let mut client = timed_client(broker);
    let mut seen: HashMap<String, usize> = HashMap::new();
    // Where each tag was found, to say where a lost batch went (if anywhere).
    let mut found: HashMap<String, (String, u32, u64)> = HashMap::new();
    let mut lost_tags: Vec<(String, String, u32, u64)> = Vec::new();
    for (topic, partitions, check) in topics {
        for partition in 0..*partitions {
            let start = match check {
                Check::Whole => 0,
                Check::FromEarliest => client
                    .list_offsets(topic, partition, OffsetSpec::Earliest)
                    .unwrap_or(0),
            };
            let (start, stored) = read_partition(
                &mut client,
                broker,
                (topic, partition),
                (start, *check),
                &mut tally,
            );
            for (&at, batch) in &stored {
                *seen.entry(tag_of(batch)).or_default() += 1;
                found.insert(tag_of(batch), (topic.clone(), partition, at));
            }
            let served_end = stored
                .last_key_value()
                .map_or(start, |(&at, batch)| at + batch_records(batch));
            let acked = ledger.acked.entry((topic.clone(), partition)).or_default();
            let mut gone = Vec::new();
            for (&at, expected) in acked.iter() {
                if at < start {
                    tally.expired += 1;
                    gone.push(at);
                    continue;
                }
                tally.acked_batches += 1;
                match stored.get(&at) {
                    Some(bytes) if *bytes == expected.stored_at(at) => {}
                    Some(bytes) if tag_of(bytes) == expected.tag => {
                        eprintln!("{topic}/{partition} offset {at}: {} differs", expected.tag);
                        tally.corrupt += 1;
                    }
                    _ => {
                        lost_tags.push((expected.tag.clone(), topic.clone(), partition, at));
                        tally.lost += 1;
                        if at < served_end {
                            tally.holes += 1;
                        }
                        gone.push(at);
                    }
                }
            }
            for at in gone {
                acked.remove(&at);
            }
        }
    }
    for (tag, topic, partition, at) in lost_tags {
        match found.get(&tag) {
            Some((t, p, o)) => eprintln!(
                "{topic}/{partition} offset {at}: {tag} lost (found at {t}/{p} offset {o})"
            ),
            None => eprintln!("{topic}/{partition} offset {at}: {tag} lost"),
        }
    }
    tally.duplicated = seen.values().filter(|&&n| n > 1).count();
    tally.unknown_stored = ledger
        .unknown
        .iter()
        .filter(|t| seen.contains_key(*t))
        .count();
    for ((group, topic, partition), (acked, in_flight)) in ledger.commits.iter_mut() {
        let Some(acked_value) = *acked else { continue };
        tally.commits_checked += 1;
        let now = client.fetch_offset(group, topic, *partition).ok().flatten();
        // A commit in flight at the kill may or may not have been stored.
        if now != Some(acked_value) && now != *in_flight {
            eprintln!("commit {group}/{topic}/{partition}: {now:?}, acknowledged {acked_value}");
            tally.commits_lost += 1;
        }
        if let Some(value) = now {
            *acked = Some(value);
        }
        *in_flight = None;
    }
    tally
}

/// Every batch of one partition from `start`, by offset, and the offset the reading really
/// started from. A fetch error counts as corrupt, except under `Check::FromEarliest` an
/// `OffsetOutOfRange` below the earliest offset: retention (it runs every second) deleted
/// segments between the earliest-offset query and the fetch, so reading goes on from the
/// new earliest offset and the start moves there (batches below it are expired, not lost).
pub fn read_partition(
    client: &mut Client,
    broker: &Broker,
    (topic, partition): (&str, u32),
    (mut start, check): (u64, Check),
    tally: &mut Tally,
) -> (u64, BTreeMap<u64, Vec<u8>>) {
    let mut stored = BTreeMap::new();
    let mut offset = start;
    loop {
        let fetched = match client.fetch(topic, partition, offset, 1 << 20, Duration::ZERO) {
            Ok(fetched) => fetched,
            Err(ClientError::Broker { code, earliest, .. })
                if check == Check::FromEarliest
                    && code == ErrorCode::OffsetOutOfRange as u16
                    && earliest > offset =>
            {
                eprintln!("{topic}/{partition}: retention moved the start {offset} -> {earliest}");
                start = earliest;
                offset = earliest;
                continue;
            }
            Err(e) => {
                eprintln!("fetch {topic}/{partition} at {offset}: {e}");
                tally.corrupt += 1;
                *client = timed_client(broker);
                break;
            }
        };
        if fetched.batches.is_empty() {
            break;
        }
        for batch in fetched.batches {
            let header = BatchHeader::decode(&batch, &Default::default()).unwrap();
            if header.offset != offset {
                tally.gaps += 1;
            }
            offset = header.offset + header.records();
            stored.insert(header.offset, batch);
        }
    }
    (start, stored)
}
