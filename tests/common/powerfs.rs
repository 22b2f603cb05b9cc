//! The powerfs crash-consistency file system (src/bin/powerfs, docs/POWERFS.md) for tests:
//! mount a backing directory, cut the power, mount again.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Strict,
    Journal,
    /// Strict, and un-synced pages torn at the cut (seeded).
    Torn(u64),
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            Mode::Journal => "journal",
            Mode::Torn(_) => "torn",
        }
    }
}

pub struct PowerFs {
    child: Option<(Child, BufReader<ChildStdout>)>,
    pub backing: PathBuf,
    pub mount: PathBuf,
    pub mode: Mode,
    cuts: u64,
    /// Names whose fsync the armed fault fails (powerfs's default, `.idx`, when `None`).
    fail_suffix: Option<&'static str>,
}

impl PowerFs {
    /// Mounts `root/backing` at `root/mnt` (both made here).
    pub fn mount_in(root: &Path, mode: Mode) -> PowerFs {
        Self::mount_failing(root, mode, None)
    }

    /// As [`PowerFs::mount_in`], with the armed fsync failure on files whose name ends with
    /// `fail_suffix`.
    pub fn mount_failing(root: &Path, mode: Mode, fail_suffix: Option<&'static str>) -> PowerFs {
        let backing = root.join("backing");
        let mount = root.join("mnt");
        std::fs::create_dir_all(&backing).unwrap();
        std::fs::create_dir_all(&mount).unwrap();
        let mut fs = PowerFs {
            child: None,
            backing,
            mount,
            mode,
            cuts: 0,
            fail_suffix,
        };
        fs.spawn();
        fs
    }

    fn spawn(&mut self) {
        assert!(self.child.is_none(), "already mounted");
        let mut command = Command::new(env!("CARGO_BIN_EXE_powerfs"));
        command
            .arg("--backing")
            .arg(&self.backing)
            .arg("--mount")
            .arg(&self.mount)
            .arg("--mode")
            .arg(match self.mode {
                Mode::Journal => "journal",
                _ => "strict",
            });
        if let Some(suffix) = self.fail_suffix {
            command.arg("--fail-fsync-suffix").arg(suffix);
        }
        if let Mode::Torn(seed) = self.mode {
            // A new seed at every cut, reproducible from the test's seed.
            command
                .arg("--torn-seed")
                .arg((seed ^ self.cuts.wrapping_mul(0x9e37_79b9)).to_string());
        }
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("powerfs starts");
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(
            line.starts_with("powerfs ready"),
            "powerfs did not mount: {line:?} (needs root and /dev/fuse)"
        );
        self.child = Some((child, out));
    }

    /// The power cut: everything not durable is dropped (the broker must be dead, or its
    /// files are cut from under it). Returns powerfs's report line.
    pub fn power_cut(&mut self) -> String {
        let report = self.stop(nix::sys::signal::Signal::SIGUSR1);
        assert!(
            report.contains("powerfs power cut"),
            "no power cut report: {report:?}"
        );
        self.cuts += 1;
        report
    }

    /// Arms one failing fsync: the next fsync of an `.idx` file is answered EIO 1.5 s
    /// later (src/bin/powerfs/fault.rs).
    pub fn arm_fsync_failure(&mut self) {
        let (child, out) = self.child.as_mut().expect("mounted");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGUSR2,
        )
        .unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        assert!(
            line.starts_with("powerfs fault armed"),
            "powerfs did not arm the fault: {line:?}"
        );
    }

    /// Mounts again on the same backing directory (after a cut or an unmount).
    pub fn remount(&mut self) {
        self.spawn();
    }

    /// Unmounts with nothing dropped.
    pub fn unmount(&mut self) {
        self.stop(nix::sys::signal::Signal::SIGTERM);
    }

    fn stop(&mut self, signal: nix::sys::signal::Signal) -> String {
        let (mut child, mut out) = self.child.take().expect("mounted");
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
        let mut report = String::new();
        let _ = out.read_line(&mut report);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(status.success(), "powerfs exited with {status}: {report}");
                return report.trim().to_string();
            }
            assert!(Instant::now() < deadline, "powerfs did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for PowerFs {
    fn drop(&mut self) {
        if let Some((mut child, _)) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = child.wait();
        }
    }
}
