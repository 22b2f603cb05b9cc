//! Idempotent Kafka producers through storage faults: librdkafka (confluent-kafka, with
//! `enable.idempotence`) produces 1 KB records while the partition's writes fail, and every
//! record it was told is acknowledged must be at the offset it was told, before and after a
//! `kill -9` and restart, with no record stored twice.
//!
//! - A full disk: an ext4 image of its own, filled but for 40 MB, which the producer fills;
//!   writes fail (ENOSPC) and are rolled back for 5 s, then the filler goes and 500 more
//!   records must be acknowledged with no restart.
//! - A failed fsync: powerfs answers one fdatasync of a `.wal` with EIO; the partition is
//!   fenced until a restart, after which 500 more records must be acknowledged.
//!
//! The driver is tests/kafka/idempotent_faults.py. Mounting needs root and /dev/fuse (CI has
//! both); without them the tests say so and return. A missing confluent-kafka fails them
//! when `PAGURUS_KAFKA_CLIENTS=required` (set by `.ci/run`).

mod common;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::powerfs::{Mode, PowerFs};
use common::small_fs::SmallFs;
use common::{Broker, have_python};
use pagurus::protocol::native::TopicSettings;

const TOPIC: &str = "events";
const PARTITIONS: u32 = 2;
/// How long the fault lasts while the producer keeps sending.
const FAULT_HELD: Duration = Duration::from_secs(5);

fn script() -> String {
    format!(
        "{}/tests/kafka/idempotent_faults.py",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The producer of the driver, running until the test makes its resume file.
struct Producing {
    child: Child,
    acked: PathBuf,
    resume: PathBuf,
}

impl Producing {
    fn start(broker: &Broker, work: &Path) -> Producing {
        let acked = work.join("acked.jsonl");
        let resume = work.join("resume");
        let child = Command::new("timeout")
            .args(["600", "python3", &script(), "produce"])
            .arg(broker.addr.to_string())
            .arg(TOPIC)
            .arg(&acked)
            .arg(&resume)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 starts");
        Producing {
            child,
            acked,
            resume,
        }
    }

    /// Lets the producer send its last 500 and waits for its summary.
    fn finish(mut self) -> serde_json::Value {
        std::fs::write(&self.resume, b"").unwrap();
        let mut out = String::new();
        let mut err = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "producer failed: {status}\n{out}\n{err}");
        serde_json::from_str(out.lines().last().unwrap_or(""))
            .unwrap_or_else(|e| panic!("producer printed no summary ({e}): {out}\n{err}"))
    }
}

fn verify(broker: &Broker, acked: &Path) -> serde_json::Value {
    let out = Command::new("timeout")
        .args(["300", "python3", &script(), "verify"])
        .arg(broker.addr.to_string())
        .arg(TOPIC)
        .arg(acked)
        .output()
        .expect("python3 starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "verify failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or(""))
        .unwrap_or_else(|e| panic!("verify printed no JSON ({e}): {stdout}"))
}

/// Every acknowledged record at its offset, none missing, none stored twice.
fn assert_intact(found: &serde_json::Value, when: &str) {
    eprintln!("{when}: {found}");
    for (field, what) in [
        (
            "moved_count",
            "acknowledged records found at another offset",
        ),
        (
            "missing_count",
            "acknowledged records (no offset reported) not stored",
        ),
        ("duplicate_count", "records stored twice"),
    ] {
        assert_eq!(found[field], 0, "{when}: {what}: {found}");
    }
}

/// The producer's run must have gone through the fault and come out of it: records
/// acknowledged before it, and every record sent acknowledged in the end (records wait up
/// to 60 s, the fault lasts 5: a broker that answers every retry stores them all once it
/// can write again; one that leaves a retry waiting for offsets the log took back lets
/// them time out), none left unflushed, no fatal idempotence error.
fn assert_came_through(summary: &serde_json::Value) {
    eprintln!("producer: {summary}");
    assert!(
        summary["acked"].as_u64().unwrap() > 1_000,
        "too few acknowledged before the fault to mean anything: {summary}"
    );
    assert_eq!(
        summary["failed"],
        serde_json::json!({}),
        "records not stored: {summary}"
    );
    assert_eq!(summary["acked"], summary["sent"], "{summary}");
    assert!(
        summary["backlog_acked_after_resume"].as_u64().unwrap() > 0,
        "nothing sent during the fault was stored after it: {summary}"
    );
    assert_eq!(summary["acked_after_resume"], 500, "{summary}");
    assert_eq!(summary["not_flushed"], 0, "{summary}");
    assert_eq!(summary["fatal"], serde_json::json!([]), "{summary}");
}

fn wait_for_log(broker: &Broker, needle: &str, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while !broker.log_text().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no {needle:?} in the broker log after {timeout:?}:\n{}",
            broker.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn create_topic(broker: &Broker) {
    let mut client = broker.client();
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    client
        .create_topic(
            TOPIC,
            TopicSettings {
                partitions: PARTITIONS,
                ..Default::default()
            },
        )
        .unwrap();
}

/// Checks before and after a `kill -9` and restart.
fn check_with_restart(broker: &mut Broker, acked: &Path) {
    assert_intact(&verify(broker, acked), "after the fault");
    broker.kill();
    broker.restart();
    assert_intact(&verify(broker, acked), "after kill -9 and restart");
}

#[test]
fn idempotent_producer_through_a_full_disk_keeps_every_acknowledged_record() {
    if !have_python("confluent_kafka") {
        return;
    }
    let Some(fs) = SmallFs::ext4(256) else { return };
    let work = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(fs.path(), 2, &["--fsync", "always"]);
    create_topic(&broker);
    let filler = fs.fill_leaving("filler", 40 << 20);
    let producing = Producing::start(&broker, work.path());
    wait_for_log(
        &broker,
        "write failed; unwritten batches rolled back",
        Duration::from_secs(120),
    );
    std::thread::sleep(FAULT_HELD);
    std::fs::remove_file(&filler).unwrap();
    let acked = producing.acked.clone();
    assert_came_through(&producing.finish());
    check_with_restart(&mut broker, &acked);
}

#[test]
fn idempotent_producer_through_a_failed_fsync_keeps_every_acknowledged_record() {
    if !have_python("confluent_kafka") {
        return;
    }
    if !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: no /dev/fuse");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let mut fs = PowerFs::mount_failing(root.path(), Mode::Strict, Some(".wal"));
    let data = fs.mount.clone();
    let mut broker = Broker::start_with_log(
        &data,
        &root.path().join("broker.log"),
        2,
        &["--fsync", "always"],
    );
    create_topic(&broker);
    let producing = Producing::start(&broker, root.path());
    // Some records acknowledged first, then the next fdatasync of a `.wal` fails.
    std::thread::sleep(Duration::from_secs(3));
    fs.arm_fsync_failure();
    wait_for_log(&broker, "partition fenced", Duration::from_secs(60));
    std::thread::sleep(FAULT_HELD);
    // A fenced partition takes writes again after a restart (recovery).
    let status = broker.terminate();
    assert!(status.success(), "clean stop: {status}");
    broker.restart();
    let acked = producing.acked.clone();
    assert_came_through(&producing.finish());
    check_with_restart(&mut broker, &acked);
    drop(broker);
    fs.unmount();
}
