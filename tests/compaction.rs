//! Compaction through the broker: the native `Compact` request, `kill -9` (an abort at a
//! test hook) between every step of a pass, and the offsets store's own compaction.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Broker;
use pagurus::client::ClientError;
use pagurus::client::blocking::Client;
use pagurus::protocol::native::{ErrorCode, TopicSettings};
use pagurus::protocol::record::{BatchHeader, HEADER_LEN, encode_batch};

/// A batch as a consumer sees it: offset -> (key, payload).
type Log = BTreeMap<u64, (Vec<u8>, Vec<u8>)>;

fn compact_topic(client: &mut Client, name: &str, partitions: u32) {
    client
        .create_topic(
            name,
            TopicSettings {
                partitions,
                segment_bytes: 4096,
                cleanup: 1,
                ..TopicSettings::default()
            },
        )
        .unwrap();
}

/// Produces `rounds` updates of `keys` keys (every 5th batch unkeyed), one batch per
/// request; returns what was acknowledged.
fn produce(client: &mut Client, topic: &str, partition: u32, keys: usize, rounds: usize) -> Log {
    let mut acked = Log::new();
    for round in 0..rounds {
        for k in 0..keys {
            let key = if (round + k) % 5 == 4 {
                Vec::new()
            } else {
                format!("user-{k}").into_bytes()
            };
            let payload = format!("{round:04} {}", "x".repeat(60)).into_bytes();
            let batch = encode_batch(0, &key, &payload, 1);
            let (base, _) = client.produce(topic, partition, &[batch]).unwrap();
            acked.insert(base, (key, payload));
        }
    }
    acked
}

/// Everything a fresh consumer reads from the log start, CRCs checked by the client.
fn consume(client: &mut Client, topic: &str, partition: u32) -> Log {
    let mut seen = Log::new();
    let mut offset = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let fetched = client
            .fetch(topic, partition, offset, 64 * 1024, Duration::ZERO)
            .unwrap();
        for batch in &fetched.batches {
            let h = BatchHeader::decode(batch, &Default::default()).unwrap();
            let key_end = HEADER_LEN + h.key_len as usize;
            let old = seen.insert(
                h.offset,
                (
                    batch[HEADER_LEN..key_end].to_vec(),
                    batch[key_end..].to_vec(),
                ),
            );
            assert!(old.is_none(), "offset {} read twice", h.offset);
        }
        match fetched.next_offset() {
            Some(next) => offset = next,
            None if offset >= fetched.high_watermark => return seen,
            // An empty answer below the watermark: the segment was just replaced; again.
            None => {}
        }
        assert!(Instant::now() < deadline, "consumer stuck at {offset}");
    }
}

/// Newest offset of every key.
fn newest(log: &Log) -> HashMap<Vec<u8>, u64> {
    log.iter()
        .filter(|(_, (k, _))| !k.is_empty())
        .map(|(&o, (k, _))| (k.clone(), o))
        .collect()
}

/// What a compacted log must satisfy against what was acknowledged: every batch it serves
/// was acknowledged at that offset with those bytes; every unkeyed batch and the newest batch
/// of every key are there; and it holds fewer superseded batches than `acked`.
fn check_compacted(seen: &Log, acked: &Log) -> usize {
    for (offset, batch) in seen {
        assert_eq!(
            acked.get(offset),
            Some(batch),
            "batch at {offset} not as acked"
        );
    }
    for (offset, (key, _)) in acked {
        if key.is_empty() {
            assert!(seen.contains_key(offset), "unkeyed batch at {offset} lost");
        }
    }
    for (key, offset) in newest(acked) {
        assert!(
            seen.contains_key(&offset),
            "newest batch of {} (offset {offset}) lost",
            String::from_utf8_lossy(&key)
        );
    }
    acked.len() - seen.len()
}

fn leftovers(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for entry in walk(dir) {
        let name = entry.file_name().unwrap().to_string_lossy().to_string();
        if name.ends_with(".cleaning") || name.ends_with(".swap") {
            found.push(entry.display().to_string());
        }
    }
    found
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[test]
fn compact_request_keeps_the_newest_batch_per_key_at_its_offset() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut client = broker.client();
    compact_topic(&mut client, "profiles", 2);
    // Both partitions, so one of them is owned by the other core and the request crosses
    // the mesh.
    for partition in 0..2 {
        let acked = produce(&mut client, "profiles", partition, 8, 30);
        assert_eq!(consume(&mut client, "profiles", partition), acked);
        let done = client.compact("profiles", partition).unwrap();
        assert!(done.segments_rewritten > 0, "{done:?}");
        assert!(done.bytes_after < done.bytes_before);
        let seen = consume(&mut client, "profiles", partition);
        let removed = check_compacted(&seen, &acked);
        assert_eq!(removed as u64, done.batches_removed);
        assert!(removed > acked.len() / 2, "most updates were superseded");
        // Appends go on at the old end offset.
        let (base, _) = client
            .produce(
                "profiles",
                partition,
                &[encode_batch(0, b"user-0", b"new", 1)],
            )
            .unwrap();
        assert_eq!(base, *acked.keys().last().unwrap() + 1);
    }

    // Clear errors for what cannot be compacted.
    client
        .create_topic("events", TopicSettings::default())
        .unwrap();
    let code = |e: ClientError| match e {
        ClientError::Broker { code, .. } => ErrorCode::from_u16(code).expect("a known code"),
        other => panic!("expected a broker error, got {other}"),
    };
    assert_eq!(
        code(client.compact("events", 0).unwrap_err()),
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        code(client.compact("nope", 0).unwrap_err()),
        ErrorCode::UnknownTopic
    );
    assert_eq!(
        code(client.compact("profiles", 7).unwrap_err()),
        ErrorCode::UnknownPartition
    );
    assert!(
        client.metadata(&["nope"]).unwrap().topics[0].error != 0,
        "compacting an unknown topic must not create it"
    );
}

/// A `kill -9` at each step of a pass (the broker aborts at the hook) loses nothing: after
/// a restart the log is either the old one or the compacted one, never a mix with a lost
/// batch, no temporary file is left, and a later pass finishes the job.
#[test]
fn a_crash_at_every_step_of_a_pass_loses_nothing() {
    let steps = [
        "compaction-written",
        "compaction-wal-swapped",
        "compaction-committed",
        "compaction-wal-installed",
        "compaction-installed",
    ];
    let dir = tempfile::tempdir().unwrap();
    for step in steps {
        let data = dir.path().join(step);
        let mut broker = Broker::start_in(&data, 1, &[]);
        let mut client = broker.client();
        compact_topic(&mut client, "t", 1);
        let acked = produce(&mut client, "t", 0, 6, 25);
        broker.terminate();

        broker.set_env("PAGURUS_TEST_CRASH_AT", Some(step));
        broker.restart();
        let mut client = broker.client();
        let crashed = client.compact("t", 0);
        assert!(crashed.is_err(), "{step}: the broker must die mid-pass");
        let status = broker.wait_exit(Duration::from_secs(30));
        assert!(!status.success(), "{step}: aborted, not a clean exit");
        assert!(broker.log_text().contains(step), "{step}: the hook fired");

        broker.set_env("PAGURUS_TEST_CRASH_AT", None);
        broker.restart();
        let mut client = broker.client();
        let seen = consume(&mut client, "t", 0);
        let removed = check_compacted(&seen, &acked);
        let partition_dir = data.join("topics/t/0");
        assert!(
            leftovers(&partition_dir).is_empty(),
            "{step}: {:?}",
            leftovers(&partition_dir)
        );
        assert!(
            !partition_dir.join("quarantine").exists(),
            "{step}: nothing may be quarantined"
        );
        // The first rewritten segment is whole either way; past the commit point it is the
        // new one.
        if step != "compaction-written" && step != "compaction-wal-swapped" {
            assert!(removed > 0, "{step}: the committed swap was finished");
        }
        client.compact("t", 0).unwrap();
        let seen = consume(&mut client, "t", 0);
        assert_eq!(seen, fully_compacted(&acked, &partition_dir), "{step}");
        broker.terminate();
    }
}

/// What a complete pass leaves: unkeyed batches, the newest batch of each key, the last
/// batch of each closed segment, and the whole active segment.
fn fully_compacted(acked: &Log, partition_dir: &Path) -> Log {
    let mut bases: Vec<u64> = std::fs::read_dir(partition_dir)
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().to_string();
            name.strip_suffix(".wal")?.parse().ok()
        })
        .collect();
    bases.sort_unstable();
    let active = *bases.last().unwrap();
    let newest = newest(acked);
    acked
        .iter()
        .filter(|&(&o, (k, _))| {
            k.is_empty() || newest[k] == o || o >= active || bases.contains(&(o + 1))
        })
        .map(|(&o, b)| (o, b.clone()))
        .collect()
}

/// The offsets store compacts its internal logs in the background, and the newest offset
/// of every key survives that and a `kill -9`.
#[test]
fn offsets_survive_compaction_of_their_log_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(
        &data,
        2,
        &[
            "--offsets-segment-bytes",
            "2048",
            "--compact-interval-ms",
            "100",
            "--compact-dirty-ratio",
            "0.2",
        ],
    );
    let mut client = broker.client();
    client
        .create_topic(
            "orders",
            TopicSettings {
                partitions: 4,
                ..TopicSettings::default()
            },
        )
        .unwrap();
    let keys: Vec<(String, u32)> = (0..4)
        .flat_map(|g| (0..4).map(move |p| (format!("group-{g}"), p)))
        .collect();
    let commits = 60;
    for round in 1..=commits {
        for (group, partition) in &keys {
            client
                .commit_offset(
                    group,
                    "orders",
                    *partition,
                    round * 10 + u64::from(*partition),
                )
                .unwrap();
        }
    }
    let check = |client: &mut Client| {
        for (group, partition) in &keys {
            assert_eq!(
                client.fetch_offset(group, "orders", *partition).unwrap(),
                Some(commits * 10 + u64::from(*partition)),
                "{group}/{partition}"
            );
        }
    };
    check(&mut client);

    // Wait for the background passes to shrink the offsets logs.
    let offsets_dir = data.join("offsets");
    // Closed segments only: compaction rewrites those, and the active segment's file also
    // holds, sparsely, its index journal's region at the end (STORAGE.md).
    let bytes = |dir: &Path| -> u64 {
        let mut wals: Vec<PathBuf> = walk(dir)
            .into_iter()
            .filter(|p| p.extension().is_some_and(|e| e == "wal"))
            .filter(|p| !p.to_string_lossy().contains("next-segment"))
            .collect();
        wals.sort();
        let active: Vec<PathBuf> = wals
            .chunk_by(|a, b| a.parent() == b.parent())
            .filter_map(|segments| segments.last().cloned())
            .collect();
        wals.iter()
            .filter(|p| !active.contains(p))
            // A segment may be replaced between the walk and the stat.
            .map(|p| p.metadata().map_or(0, |m| m.len()))
            .sum()
    };
    // Uncompacted, every commit is a batch: header, the key, [u64 offset][u64 time].
    let key_bytes = 2 + "group-0".len() + 2 + "orders".len() + 4;
    let uncompacted = keys.len() as u64 * commits * (HEADER_LEN + key_bytes + 16) as u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    while bytes(&offsets_dir) * 2 > uncompacted {
        assert!(
            Instant::now() < deadline,
            "no background compaction of the offsets logs: {} of {uncompacted} bytes",
            bytes(&offsets_dir)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The pass logs its line after it replaced the files: wait for it too.
    while !broker.log_text().contains("__offsets") {
        assert!(
            Instant::now() < deadline,
            "the offsets compaction logged nothing"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    check(&mut client);

    broker.kill();
    broker.restart();
    let mut client = broker.client();
    check(&mut client);
    assert!(leftovers(&offsets_dir).is_empty());
}
