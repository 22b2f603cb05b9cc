//! Power-loss test: the release broker (`--fsync always`, 2 cores, small segments) with its
//! data directory on a powerfs mount (src/bin/powerfs, docs/POWERFS.md). Native and
//! HermitMQ v1 producers, a committer whose groups are new every round (so first commits of
//! new offsets shards happen), a thread that creates, fills and deletes topics, a thread
//! that runs compaction passes, and a topic under size retention. At a random moment:
//! `kill -9`, then a power cut (everything not made durable is dropped), remount, restart.
//! Half the rounds first have a stretch ended by `kill -9` alone and a restart, so the broker
//! also works on directory entries a killed run made.
//! A fresh consumer then checks that every acknowledged batch is there exactly once at its
//! offset byte for byte, nothing corrupt is served, commits are back, and the broker
//! started by itself. The very first start is also cut at a random moment.
//!
//! One test per powerfs mode: strict (POSIX directory rules), journal (ext4-like), torn
//! (strict, plus un-synced pages torn).
//!
//! The same load under `--fsync never`, in strict and torn modes: there a power cut may take
//! acknowledged batches, but only from the end of a partition (nothing missing below what
//! is served, no gap, nothing corrupt or duplicated), and the segments whose seal was done
//! (`storage::log::seal`) must survive: some of the batches acknowledged in each round are
//! still there after its cut. A seal that recorded itself with no fdatasync shows up here
//! as corrupt batches (torn mode), or as a round of which nothing survived (strict mode; a
//! round with a `kill -9` stretch keeps some anyway, through the syncs of the restart).
//!
//! `PAGURUS_POWERLOSS_ROUNDS` (default 3;
//! `scripts/powerloss-test.sh` runs 20) and `PAGURUS_POWERLOSS_SEED` (default: the clock;
//! printed). Needs root and /dev/fuse.

mod common;

use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Broker;
use common::ledger::{self, Check, Expected, Ledger, Rng, Tally, timed_client};
use common::powerfs::{Mode, PowerFs};
use pagurus::client::blocking::Client;
use pagurus::protocol::native::TopicSettings;

const CORES: usize = 2;
const PRODUCERS: usize = 3;
const IN_FLIGHT: usize = 4;

/// The broker's fsync policy in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Policy {
    /// Nothing acknowledged may be lost.
    Always,
    /// Acknowledged batches may be lost, from the end of a partition only.
    Never,
}

impl Policy {
    fn args(self) -> [&'static str; 4] {
        let fsync = match self {
            Policy::Always => "always",
            Policy::Never => "never",
        };
        ["--fsync", fsync, "--segment-bytes", "65536"]
    }
}

/// The topics that live through the whole run: (name, partitions, settings, check).
fn fixed_topics() -> Vec<(String, u32, TopicSettings, Check)> {
    let plain = TopicSettings {
        partitions: 2,
        ..Default::default()
    };
    vec![
        ("pl-a".into(), 2, plain, Check::Whole),
        ("pl-b".into(), 2, plain, Check::Whole),
        (
            "pl-retained".into(),
            2,
            TopicSettings {
                partitions: 2,
                segment_bytes: 16_384,
                retention_bytes: 65_536,
                ..Default::default()
            },
            Check::FromEarliest,
        ),
        (
            // Every key is unique, so a pass keeps every batch but still writes aside and
            // swaps every closed segment.
            "pl-compacted".into(),
            1,
            TopicSettings {
                partitions: 1,
                segment_bytes: 16_384,
                cleanup: 1,
                ..Default::default()
            },
            Check::Whole,
        ),
    ]
}

/// Topics made and deleted while the producers run.
#[derive(Default)]
struct Churn {
    /// Created (acknowledged) and not being deleted.
    alive: Vec<String>,
}

fn churn(
    addr: std::net::SocketAddr,
    stretch: &str,
    seed: u64,
    ledger: &Mutex<Ledger>,
    state: &Mutex<Churn>,
) {
    let mut rng = Rng(seed | 1);
    let Ok(mut client) = Client::connect(addr) else {
        return;
    };
    let _ = client.set_read_timeout(Some(Duration::from_secs(60)));
    for n in 0u64.. {
        let name = format!("churn-{stretch}-{n}");
        let settings = TopicSettings {
            partitions: 1,
            ..Default::default()
        };
        if client.create_topic(&name, settings).is_err() {
            return;
        }
        state.lock().unwrap().alive.push(name.clone());
        for seq in 0..3u64 {
            let batch = Expected::new(format!("c{name}-s{seq}"), seq, &mut rng);
            match client.produce(&name, 0, std::slice::from_ref(&batch.bytes)) {
                Ok((base, _)) => ledger
                    .lock()
                    .unwrap()
                    .record_acked(&name, 0, base, vec![batch]),
                Err(_) => return ledger.lock().unwrap().record_unknown([batch]),
            }
        }
        // Delete every other topic: its fate is unknown until the answer comes.
        if n % 2 == 1 {
            state.lock().unwrap().alive.retain(|t| *t != name);
            if client.delete_topic(&name).is_err() {
                return;
            }
            ledger.lock().unwrap().acked.remove(&(name.clone(), 0));
        }
    }
}

/// One stretch of load on a running broker, ended by `kill -9` at a random moment.
struct Load<'a> {
    round: usize,
    phase: u64,
    targets: &'a [(String, u32)],
    churned: &'a Arc<Mutex<Churn>>,
}

impl Load<'_> {
    fn then_kill(&self, broker: &mut Broker, rng: &mut Rng, ledger: Ledger) -> Ledger {
        let (round, phase) = (self.round, self.phase);
        let shared = Arc::new(Mutex::new(ledger));
        let mut threads = Vec::new();
        let addr = broker.addr;
        for id in 0..PRODUCERS {
            let (shared, seed, targets) = (Arc::clone(&shared), rng.next(), self.targets.to_vec());
            let id = format!("r{round}p{phase}w{id}");
            threads.push(std::thread::spawn(move || {
                ledger::produce(addr, &id, seed, &shared, &targets, IN_FLIGHT)
            }));
        }
        {
            let (shared, seed) = (Arc::clone(&shared), rng.next());
            let id = format!("r{round}p{phase}");
            threads.push(std::thread::spawn(move || {
                ledger::produce_v1(addr, &id, seed, &shared, "pl-a", 1)
            }));
        }
        {
            let shared = Arc::clone(&shared);
            let groups: Vec<String> = (0..4).map(|g| format!("group-r{round}-{g}")).collect();
            let targets = self.targets.to_vec();
            threads.push(std::thread::spawn(move || {
                ledger::commit(
                    addr,
                    &groups,
                    &targets,
                    round as u64 * 1_000_000 + phase * 100_000,
                    &shared,
                )
            }));
        }
        {
            let (shared, churned, seed) =
                (Arc::clone(&shared), Arc::clone(self.churned), rng.next());
            threads.push(std::thread::spawn(move || {
                churn(addr, &format!("r{round}p{phase}"), seed, &shared, &churned)
            }));
        }
        threads.push(std::thread::spawn(move || compact(addr)));
        std::thread::sleep(Duration::from_millis(300 + rng.below(1700)));
        broker.kill();
        for t in threads {
            t.join().expect("client thread");
        }
        Arc::try_unwrap(shared)
            .ok()
            .expect("threads ended")
            .into_inner()
            .unwrap()
    }
}

fn compact(addr: std::net::SocketAddr) {
    let Ok(mut client) = Client::connect(addr) else {
        return;
    };
    let _ = client.set_read_timeout(Some(Duration::from_secs(60)));
    while client.compact("pl-compacted", 0).is_ok() {
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The very first start on an empty data directory, killed at a random moment, then a power
/// cut. Whatever it left must not stop the next start.
fn cut_first_start(fs: &mut PowerFs, log: &std::path::Path, rng: &mut Rng, policy: Policy) {
    let data = fs.mount.join("data");
    let log = std::fs::File::create(log).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_pagurus"))
        .arg("serve")
        .arg("--data-dir")
        .arg(&data)
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--cores")
        .arg(CORES.to_string())
        .args(policy.args())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(rng.below(400)));
    let _ = child.kill();
    child.wait().unwrap();
    eprintln!("first start cut: {}", fs.power_cut());
    fs.remount();
}

fn run(mode: Mode, policy: Policy) {
    let rounds = ledger::rounds_from_env("PAGURUS_POWERLOSS_ROUNDS", 3);
    let seed = ledger::seed_from_env("PAGURUS_POWERLOSS_SEED");
    let mode = match mode {
        Mode::Torn(_) => Mode::Torn(seed),
        other => other,
    };
    eprintln!(
        "power-loss test: mode={} policy={policy:?} rounds={rounds} seed={seed}",
        mode.name()
    );
    let mut rng = Rng(seed | 1);
    let root = tempfile::tempdir().unwrap();
    let mut fs = PowerFs::mount_in(root.path(), mode);
    let log = root.path().join("broker.log");
    cut_first_start(
        &mut fs,
        &root.path().join("first-start.log"),
        &mut rng,
        policy,
    );
    let mut broker = Broker::start_with_log(&fs.mount.join("data"), &log, CORES, &policy.args());
    let fixed = fixed_topics();
    let mut admin = timed_client(&broker);
    for (name, _, settings, _) in &fixed {
        admin.create_topic(name, *settings).unwrap();
    }
    drop(admin);
    let targets: Vec<(String, u32)> = fixed.iter().map(|t| (t.0.clone(), t.1)).collect();
    let mut ledger = Ledger::default();
    let mut total = Tally::default();
    let churned = Arc::new(Mutex::new(Churn::default()));
    let started = Instant::now();
    let mut survived_every_cut = true;
    let promised = |ledger: &Ledger| -> usize { ledger.acked.values().map(|log| log.len()).sum() };
    // Acknowledged batches in the ledger after the last verification.
    let mut kept_before = 0;
    for round in 1..=rounds {
        // Sometimes a kill -9 without a power cut first: the restarted broker then works
        // on directory entries the killed one made, which must be durable too.
        let phases = 1 + rng.below(2);
        for phase in 0..phases {
            let run = Load {
                round,
                phase,
                targets: &targets,
                churned: &churned,
            };
            ledger = run.then_kill(&mut broker, &mut rng, std::mem::take(&mut ledger));
            if phase + 1 < phases {
                broker.restart();
            }
        }
        let report = fs.power_cut();
        fs.remount();
        broker.restart();
        let mut checks: Vec<(String, u32, Check)> =
            fixed.iter().map(|t| (t.0.clone(), t.1, t.3)).collect();
        checks.extend(
            churned
                .lock()
                .unwrap()
                .alive
                .iter()
                .map(|t| (t.clone(), 1, Check::Whole)),
        );
        let acked_this_round = promised(&ledger).saturating_sub(kept_before);
        let tally = ledger::verify(&broker, &mut ledger, &checks);
        kept_before = promised(&ledger);
        eprintln!(
            "round {round}: acked batches {} lost {} (holes {}) duplicated {} corrupt {} gaps {} \
             expired {} unacknowledged-but-stored {} of {} | commits checked {} lost {} | {report}",
            tally.acked_batches,
            tally.lost,
            tally.holes,
            tally.duplicated,
            tally.corrupt,
            tally.gaps,
            tally.expired,
            tally.unknown_stored,
            ledger.unknown.len(),
            tally.commits_checked,
            tally.commits_lost
        );
        if policy == Policy::Never {
            // Whatever the cut took, the segments sealed in this round are still there:
            // some of this round's batches survive it (lost and expired ones may be older).
            let survived = acked_this_round.saturating_sub(tally.lost + tally.expired);
            eprintln!(
                "round {round}: {survived} of {acked_this_round} batches acknowledged in it survived"
            );
            survived_every_cut &= survived > 0;
        }
        total.add(&tally);
        ledger.unknown.clear();
    }
    // Still promised now, plus what was lost (expired and deleted batches are neither).
    let survivors: usize = ledger.acked.values().map(|log| log.len()).sum();
    let log = broker.log_text();
    let panics = log.matches("panicked").count();
    println!(
        "powerloss summary: mode={} policy={policy:?} rounds={rounds} acked_batches={} lost={} \
         holes={} duplicated={} corrupt={} gaps={} commits_checked={} commits_lost={} \
         broker_panics={panics} seconds={:.0} seed={seed}",
        mode.name(),
        survivors + total.lost,
        total.lost,
        total.holes,
        total.duplicated,
        total.corrupt,
        total.gaps,
        total.commits_checked,
        total.commits_lost,
        started.elapsed().as_secs_f64()
    );
    // Under `never` a cut may take acknowledged batches from the end of a partition, and
    // commits (acknowledged per the same policy) may go back.
    let (lost, commits_lost) = match policy {
        Policy::Always => (total.lost, total.commits_lost),
        Policy::Never => (total.holes, 0),
    };
    let failed = (lost, total.duplicated, total.corrupt, total.gaps) != (0, 0, 0, 0)
        || commits_lost + panics > 0
        || !survived_every_cut;
    if failed {
        // Keep the evidence: the broker's log and the backing directory as the cut left it.
        broker.kill();
        fs.unmount();
        eprintln!("power-loss test failed; kept {}", root.keep().display());
    }
    assert!(total.acked_batches > 0, "nothing was acknowledged");
    assert!(
        survived_every_cut,
        "a cut under never took every acknowledged batch: no seal was durable (seed={seed})"
    );
    assert_eq!(
        (
            lost,
            total.duplicated,
            total.corrupt,
            total.gaps,
            commits_lost,
            panics
        ),
        (0, 0, 0, 0, 0, 0),
        "a power cut must lose (under never: from the middle of a log), duplicate or damage \
         nothing acknowledged (mode={}, policy={policy:?}, seed={seed})",
        mode.name()
    );
}

#[test]
fn powerloss_strict() {
    run(Mode::Strict, Policy::Always);
}

#[test]
fn powerloss_journal() {
    run(Mode::Journal, Policy::Always);
}

#[test]
fn powerloss_torn() {
    run(Mode::Torn(0), Policy::Always);
}

#[test]
fn powerloss_never_strict() {
    run(Mode::Strict, Policy::Never);
}

#[test]
fn powerloss_never_torn() {
    run(Mode::Torn(0), Policy::Never);
}
