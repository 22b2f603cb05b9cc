//! The log's failure paths on a real, really full file system (a small tmpfs; mounting
//! needs root, as in CI; without it the test says so and passes vacuously).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::PartitionLog;
use crate::protocol::record::encode_batch;
use crate::storage::{FsyncPolicy, LogConfig, StorageError};

/// A tmpfs of `size_mib` MiB, unmounted (lazily) when dropped.
struct SmallFs {
    mount: PathBuf,
    _dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(size_mib: u64) -> Option<SmallFs> {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(&mount)
            .status();
        match status {
            Ok(s) if s.success() => Some(SmallFs { mount, _dir: dir }),
            // SAFETY: geteuid has no preconditions.
            _ if unsafe { nix::libc::geteuid() } != 0 => {
                eprintln!("SKIPPED: mounting a small file system needs root");
                None
            }
            other => panic!("mount failed as root: {other:?}"),
        }
    }

    fn path(&self) -> &Path {
        &self.mount
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
    }
}

/// Writes a filler file into `dir` until the file system refuses; returns its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![0xAAu8; 4096];
    while matches!(file.write(&block), Ok(n) if n > 0) {}
    path
}

use crate::on_executor::run;

#[test]
fn retries_on_a_full_disk_keep_the_rollback_record_bounded() {
    let Some(fs) = SmallFs::mount(4) else { return };
    let mount = fs.path().to_path_buf();
    let path = mount.join("p");
    let filler = run(async move || {
        let config = LogConfig {
            index_entries: 64,
            fsync: FsyncPolicy::Always,
            ..LogConfig::default()
        };
        let log = PartitionLog::open(&path, config).await.unwrap();
        // Big enough that every batch needs a new page of the WAL.
        let batch = encode_batch(1, b"", &[7u8; 16 * 1024], 1);
        log.append(&batch, None).await.unwrap();
        let full = fill(&mount);
        // Producers retrying against a full disk: every write fails and is rolled back.
        for _ in 0..500 {
            let failed = log.append(&batch, None).await;
            assert!(
                matches!(failed, Err(StorageError::WriteFailed { .. })),
                "{failed:?}"
            );
        }
        let kept = log.state.borrow().rollbacks.kept();
        assert!(kept <= 64, "{kept} failed writes remembered");
        // Space returns: writing resumes where the log ended, with no restart.
        std::fs::remove_file(&full).unwrap();
        let ack = log.append(&batch, None).await.unwrap();
        assert_eq!(ack.base_offset, 1);
        log.close().await.unwrap();
        full
    });
    assert!(!filler.exists());
}
