//! The partition log's lifecycle on real files: closing while appenders are still staging,
//! closing when the final steps fail. Each test runs its executor on a thread of its own
//! and fails (rather than hangs) if that executor never finishes: a task that spins
//! without yielding would stall the whole core, which is the bug these tests guard.

use std::rc::Rc;
use std::sync::mpsc;
use std::time::Duration;

use glommio::LocalExecutorBuilder;
use pagurus::protocol::record::encode_batch;
use pagurus::storage::{FsyncPolicy, LogConfig, PartitionLog, StorageError};

/// Long enough for any machine, however loaded; reached only by a core that never stops.
const HANG_DEADLINE: Duration = Duration::from_secs(120);

fn run_to_completion<T: Send + 'static>(f: impl AsyncFnOnce() -> T + Send + 'static) -> T {
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let out = LocalExecutorBuilder::default()
            .spawn(move || async move { f().await })
            .expect("executor")
            .join()
            .expect("executor ran");
        let _ = done.send(out);
    });
    match finished.recv_timeout(HANG_DEADLINE) {
        Ok(out) => out,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("the executor did not finish: a task on the core never yields")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("the test body panicked"),
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 4096,
        index_entries: 64,
        fsync: FsyncPolicy::Always,
        ..LogConfig::default()
    }
}

fn batch(i: u64) -> Vec<u8> {
    encode_batch(1_000 + i, b"", format!("batch {i}").as_bytes(), 1)
}

/// Lets every other ready task of this core run until it waits.
async fn let_others_run() {
    for _ in 0..8 {
        futures_lite::future::yield_now().await;
    }
}

#[test]
fn stages_during_close_are_refused_and_the_core_stops() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let reopened = path.clone();
    run_to_completion(async move || {
        let log = PartitionLog::open(&path, config()).await.unwrap();
        // Staged before close begins: close must write and sync it.
        let before = log.stage(&batch(0), None).await.unwrap();
        let closing = glommio::spawn_local({
            let log = Rc::clone(&log);
            async move { log.close().await }
        });
        // Close starts and waits on its own write; a remote produce arrives meanwhile.
        let_others_run().await;
        let during = log.stage(&batch(1), None).await;
        assert!(
            matches!(during, Err(StorageError::Closed)),
            "a stage while the log closes is refused, not left pending: {during:?}"
        );
        closing.await.unwrap();
        log.commit(before).await.unwrap();
        // After close: refused at once, and nothing on the core keeps running.
        assert!(matches!(
            log.append(&batch(2), None).await,
            Err(StorageError::Closed)
        ));
        log.kick();
        let_others_run().await;
        assert!(matches!(log.close().await, Err(StorageError::Closed)));
        assert!(matches!(log.sync().await, Err(StorageError::Closed)));
    });
    run_to_completion(async move || {
        let log = PartitionLog::open(&reopened, config()).await.unwrap();
        assert_eq!(
            log.next_offset(),
            1,
            "exactly the batch staged before close"
        );
        let stored = log.read(0, 1 << 20).unwrap();
        assert_eq!(stored.len(), 1);
        assert!(stored[0].bytes.ends_with(b"batch 0"));
    });
}

#[test]
fn every_appender_racing_close_gets_an_answer_and_acked_batches_survive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    let reopened = path.clone();
    let acked = run_to_completion(async move || {
        let log = PartitionLog::open(&path, config()).await.unwrap();
        let appenders: Vec<_> = (0..16u64)
            .map(|producer| {
                let log = Rc::clone(&log);
                glommio::spawn_local(async move {
                    let mut acked = Vec::new();
                    for i in 0.. {
                        // Requests arrive from sockets and other cores at any time, also
                        // while close awaits its own write and sync.
                        futures_lite::future::yield_now().await;
                        let payload = format!("p{producer} n{i}");
                        match log
                            .append(&encode_batch(0, b"", payload.as_bytes(), 1), None)
                            .await
                        {
                            Ok(ack) => acked.push((ack.base_offset, payload)),
                            Err(StorageError::Closed) => return acked,
                            Err(other) => panic!("unexpected error: {other}"),
                        }
                    }
                    unreachable!()
                })
            })
            .collect();
        // Segments of 4 KiB roll every few dozen batches: close lands amid rolls too.
        for _ in 0..50 {
            let_others_run().await;
        }
        log.close().await.unwrap();
        let mut acked = Vec::new();
        for appender in appenders {
            acked.extend(appender.await);
        }
        acked
    });
    assert!(!acked.is_empty(), "appenders ran before the close");
    run_to_completion(async move || {
        let log = PartitionLog::open(&reopened, config()).await.unwrap();
        for (offset, payload) in acked {
            let stored = log.read(offset, 1).unwrap();
            assert!(
                stored[0].bytes.ends_with(payload.as_bytes()),
                "acknowledged batch at {offset} survives the close"
            );
        }
    });
}

#[test]
fn a_close_that_fails_at_its_last_step_still_closes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    run_to_completion(async move || {
        let log = PartitionLog::open(&path, config()).await.unwrap();
        log.append(&batch(0), None).await.unwrap();
        // The clean-shutdown marker cannot be written into a directory that is gone.
        std::fs::remove_dir_all(&path).unwrap();
        assert!(matches!(log.close().await, Err(StorageError::Io { .. })));
        // The failed close left nothing half-held: a sync answers rather than waiting for
        // an I/O round that never ends.
        assert!(matches!(log.sync().await, Err(StorageError::Closed)));
        assert!(matches!(
            log.append(&batch(1), None).await,
            Err(StorageError::Closed)
        ));
    });
}
