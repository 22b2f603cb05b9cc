//! A small file system of a test's own, to fill: tmpfs with `size=`, or an ext4 image on a
//! loop device (`PAGURUS_TEST_FS=ext4`, or [`SmallFs::ext4`] where a test needs a real disk
//! file system). Mounting needs root (CI runs as root); without it the constructors say so
//! and return `None`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A small file system mounted for one test, unmounted (lazily) when dropped.
pub struct SmallFs {
    mount: PathBuf,
    image: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl SmallFs {
    /// Mounts `size_mib` MiB of tmpfs (ext4 with `PAGURUS_TEST_FS=ext4`), or returns `None`
    /// (with a note) when this process may not mount.
    pub fn mount(size_mib: u64) -> Option<SmallFs> {
        let ext4 = std::env::var("PAGURUS_TEST_FS").is_ok_and(|fs| fs == "ext4");
        Self::mount_as(size_mib, ext4)
    }

    /// Mounts `size_mib` MiB of tmpfs, which allocates its pages as writes come: a write
    /// larger than what is left fails where a smaller one fits.
    pub fn tmpfs(size_mib: u64) -> Option<SmallFs> {
        Self::mount_as(size_mib, false)
    }

    /// Mounts an ext4 image of `size_mib` MiB on a loop device (no blocks reserved for
    /// root: the broker runs as root here, and "full" must mean full for it too).
    pub fn ext4(size_mib: u64) -> Option<SmallFs> {
        Self::mount_as(size_mib, true)
    }

    fn mount_as(size_mib: u64, ext4: bool) -> Option<SmallFs> {
        let dir = tempfile::tempdir().unwrap();
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).unwrap();
        let (image, status) = if ext4 {
            let image = dir.path().join("fs.img");
            let file = std::fs::File::create(&image).unwrap();
            file.set_len(size_mib << 20).unwrap();
            let made = Command::new("mkfs.ext4")
                .args(["-q", "-F", "-m", "0"])
                .arg(&image)
                .status()
                .expect("mkfs.ext4 runs");
            assert!(made.success(), "mkfs.ext4 failed");
            let status = Command::new("mount")
                .args(["-o", "loop"])
                .arg(&image)
                .arg(&mount)
                .status();
            (Some(image), status)
        } else {
            let status = Command::new("mount")
                .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
                .arg(&mount)
                .status();
            (None, status)
        };
        match status {
            Ok(s) if s.success() => Some(SmallFs {
                mount,
                image,
                _dir: dir,
            }),
            // SAFETY: geteuid has no preconditions.
            _ if unsafe { nix::libc::geteuid() } != 0 => {
                eprintln!("SKIPPED: mounting a small file system needs root");
                None
            }
            other => panic!("mount failed as root: {other:?}"),
        }
    }

    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// Writes a filler file until the file system refuses; returns its path.
    pub fn fill(&self, name: &str) -> PathBuf {
        self.fill_leaving(name, 0)
    }

    /// Writes a filler file until the file system refuses, then gives `free_bytes` of it
    /// back; returns its path.
    pub fn fill_leaving(&self, name: &str, free_bytes: u64) -> PathBuf {
        let path = self.mount.join(name);
        let mut file = std::fs::File::create(&path).unwrap();
        let block = vec![0xAAu8; 64 << 10];
        let mut written = 0u64;
        loop {
            match file.write(&block) {
                Ok(n) if n > 0 => written += n as u64,
                Ok(_) => break,
                Err(e) if e.raw_os_error() == Some(nix::libc::ENOSPC) => break,
                Err(e) => panic!("filling {}: {e}", path.display()),
            }
        }
        // Bytes a write accepted are in the page cache; syncing makes ext4 account them.
        let _ = file.sync_all();
        if free_bytes > 0 {
            file.set_len(written.saturating_sub(free_bytes)).unwrap();
            file.sync_all().unwrap();
        }
        path
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.mount).status();
        if let Some(image) = &self.image {
            let _ = std::fs::remove_file(image);
        }
    }
}
