//! Crash test: the release broker under several producers on several topics (so both cores
//! own partitions), `kill -9` at a random moment, restart, and a fresh consumer checks that
//! every acknowledged batch is present exactly once, at its acknowledged offset, byte for byte
//! (so with its CRC), that offsets are contiguous, and that acknowledged consumer-offset
//! commits are intact. Repeated for a number of rounds on the same data directory.
//!
//! `PAGURUS_CRASH_ROUNDS` sets the rounds (default 3, for CI; `scripts/crash-test.sh` runs
//! 20 per policy) and `PAGURUS_CRASH_SEED` the random seed (default: from the clock; printed).
//! Each policy has its own test: `crash_rounds_fsync_always`, `crash_rounds_fsync_never`.
//! Both promise that `kill -9` loses nothing acknowledged (the page cache outlives the
//! process), so both assert zero lost, duplicated and corrupt batches.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Broker;
use common::ledger::{self, Check, Ledger, Rng, Tally, timed_client};
use pagurus::protocol::native::TopicSettings;
use pagurus::shard::placement::partition_owner;

const TOPICS: [&str; 3] = ["crash-a", "crash-b", "crash-c"];
const PARTITIONS: u32 = 2;
const PRODUCERS: usize = 4;
const IN_FLIGHT: usize = 4;
const CORES: usize = 2;

fn run(fsync: &str) {
    let rounds = ledger::rounds_from_env("PAGURUS_CRASH_ROUNDS", 3);
    let seed = ledger::seed_from_env("PAGURUS_CRASH_SEED");
    eprintln!("crash test: fsync={fsync} rounds={rounds} seed={seed}");
    let mut rng = Rng(seed | 1);
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(
        &dir.path().join("data"),
        CORES,
        &["--fsync", fsync, "--segment-bytes", "262144"],
    );
    let mut admin = timed_client(&broker);
    for topic in TOPICS {
        admin
            .create_topic(
                topic,
                TopicSettings {
                    partitions: PARTITIONS,
                    ..Default::default()
                },
            )
            .unwrap();
    }
    drop(admin);
    let owners: Vec<usize> = TOPICS
        .iter()
        .flat_map(|t| (0..PARTITIONS).map(move |p| partition_owner(t, p, CORES)))
        .collect();
    assert!(
        (0..CORES).all(|c| owners.contains(&c)),
        "every core owns a partition"
    );

    let targets: Vec<(String, u32)> = TOPICS.iter().map(|t| (t.to_string(), PARTITIONS)).collect();
    let checks: Vec<(String, u32, Check)> = targets
        .iter()
        .map(|(t, p)| (t.clone(), *p, Check::Whole))
        .collect();
    let groups: Vec<String> = (0..3).map(|g| format!("group-{g}")).collect();
    let mut ledger = Ledger::default();
    let mut total = Tally::default();
    let started = Instant::now();
    for round in 1..=rounds {
        let shared = Arc::new(Mutex::new(std::mem::take(&mut ledger)));
        let mut threads = Vec::new();
        for id in 0..PRODUCERS {
            let (shared, seed) = (Arc::clone(&shared), rng.next());
            let (addr, targets) = (broker.addr, targets.clone());
            let id = format!("r{round}w{id}");
            threads.push(std::thread::spawn(move || {
                ledger::produce(addr, &id, seed, &shared, &targets, IN_FLIGHT)
            }));
        }
        {
            let (shared, addr) = (Arc::clone(&shared), broker.addr);
            let (groups, targets) = (groups.clone(), targets.clone());
            threads.push(std::thread::spawn(move || {
                ledger::commit(addr, &groups, &targets, round as u64 * 1_000_000, &shared)
            }));
        }
        std::thread::sleep(Duration::from_millis(200 + rng.below(1300)));
        broker.kill();
        for t in threads {
            t.join().expect("producer thread");
        }
        ledger = Arc::try_unwrap(shared)
            .ok()
            .expect("threads ended")
            .into_inner()
            .unwrap();
        broker.restart();
        let tally = ledger::verify(&broker, &mut ledger, &checks);
        eprintln!(
            "round {round}: acked batches {} lost {} duplicated {} corrupt {} gaps {} \
             unacknowledged-but-stored {} of {} | commits checked {} lost {}",
            tally.acked_batches,
            tally.lost,
            tally.duplicated,
            tally.corrupt,
            tally.gaps,
            tally.unknown_stored,
            ledger.unknown.len(),
            tally.commits_checked,
            tally.commits_lost
        );
        total.add(&tally);
        // Batches of unknown fate are settled now: stored (once) or not.
        ledger.unknown.clear();
    }
    let log = broker.log_text();
    let panics = log.matches("panicked").count();
    println!(
        "crash summary: fsync={fsync} rounds={rounds} acked_batches={} lost={} duplicated={} \
         corrupt={} gaps={} commits_checked={} commits_lost={} broker_panics={panics} \
         seconds={:.0} seed={seed}",
        total.acked_batches,
        total.lost,
        total.duplicated,
        total.corrupt,
        total.gaps,
        total.commits_checked,
        total.commits_lost,
        started.elapsed().as_secs_f64()
    );
    assert!(total.acked_batches > 0, "nothing was acknowledged");
    assert_eq!(
        (
            total.lost,
            total.duplicated,
            total.corrupt,
            total.gaps,
            total.commits_lost,
            panics
        ),
        (0, 0, 0, 0, 0, 0),
        "kill -9 must lose, duplicate or damage nothing acknowledged (fsync={fsync}, seed={seed})"
    );
}

#[test]
fn crash_rounds_fsync_always() {
    run("always");
}

#[test]
fn crash_rounds_fsync_never() {
    run("never");
}

/// Retention (every second) may delete segments between the verification's earliest-offset
/// query and its fetches: reading must go on from the new earliest offset, not count a fetch
/// error (corrupt) and every batch after it (lost). The race is made certain by reading from
/// a start that retention has already passed.
#[test]
fn verify_follows_retention_past_a_stale_start() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let mut client = timed_client(&broker);
    let settings = TopicSettings {
        partitions: 1,
        segment_bytes: 16_384,
        retention_bytes: 32_768,
        ..Default::default()
    };
    client.create_topic("retained", settings).unwrap();
    let mut rng = Rng(7);
    let mut last = 0;
    for seq in 0..60u64 {
        let batch = ledger::Expected::new(format!("retained-s{seq}"), seq, &mut rng);
        last = client.produce("retained", 0, &[batch.bytes]).unwrap().0;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let earliest = loop {
        let earliest = client
            .list_offsets(
                "retained",
                0,
                pagurus::protocol::native::OffsetSpec::Earliest,
            )
            .unwrap();
        if earliest > 0 {
            break earliest;
        }
        assert!(
            Instant::now() < deadline,
            "retention deleted nothing in 30 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut tally = Tally::default();
    let (start, stored) = ledger::read_partition(
        &mut client,
        &broker,
        ("retained", 0),
        (0, Check::FromEarliest),
        &mut tally,
    );
    assert_eq!(
        tally.corrupt, 0,
        "a fetch below the earliest offset is not corruption"
    );
    assert!(
        start >= earliest,
        "start {start} moved to the earliest {earliest}"
    );
    assert!(
        stored.contains_key(&last),
        "read on to the last batch at {last}"
    );
}
