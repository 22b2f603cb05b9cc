//! powerfs: a FUSE file system for crash-consistency tests (docs/POWERFS.md).
//!
//! It serves a backing directory at a mount point and keeps track of what a power cut
//! would leave. `SIGUSR1` is the power cut: powerfs unmounts, rebuilds the backing
//! directory from its durable image (un-synced file data dropped, directory entry changes
//! not covered by an fsync dropped, optionally torn at 4 KiB pages), prints one line and
//! exits 0. `SIGTERM`/`SIGINT` unmount and exit 0 with nothing dropped. `SIGUSR2` arms one
//! failing fsync (`fault.rs`) and prints `powerfs fault armed`. Mounting needs root
//! (it calls mount(2) on /dev/fuse itself). Only the test harness uses it; the broker does not.

mod backing;
mod fault;
mod fs;
mod model;

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, ValueEnum};
use fuser::{Config, MountOption, Session};
use nix::libc;
use signal_hook::consts::{SIGINT, SIGTERM, SIGUSR1, SIGUSR2};

use crate::model::{Mode, Model, Rng};

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ModeArg {
    /// A directory entry change survives only an fsync of its directory (POSIX).
    Strict,
    /// Any fsync makes every earlier directory entry change durable (ext4's journal).
    Journal,
}

#[derive(Debug, Parser)]
#[command(
    name = "powerfs",
    about = "FUSE pass-through file system that simulates power cuts"
)]
struct Args {
    /// The directory whose contents are served (and rebuilt at a power cut).
    #[arg(long)]
    backing: PathBuf,
    /// Where to mount it.
    #[arg(long)]
    mount: PathBuf,
    #[arg(long, value_enum, default_value = "strict")]
    mode: ModeArg,
    /// Tear un-synced data at the power cut: a random subset of dirty 4 KiB pages (seeded by
    /// this value) keeps its new bytes, and a file's length is the synced or the current one.
    #[arg(long)]
    torn_seed: Option<u64>,
    /// After `SIGUSR2`, the next fsync of a file whose name ends with this fails with EIO.
    #[arg(long, default_value = ".idx")]
    fail_fsync_suffix: String,
    /// How long that failing fsync is held before it fails.
    #[arg(long, default_value_t = 1_500)]
    fail_fsync_hold_ms: u64,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("powerfs: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> std::io::Result<()> {
    let mode = match args.mode {
        ModeArg::Strict => Mode::Strict,
        ModeArg::Journal => Mode::Journal,
    };
    let backing = args.backing.canonicalize()?;
    let model = Model::scan(&backing, mode)?;
    let fault = fault::FsyncFault::new(
        args.fail_fsync_suffix.clone(),
        std::time::Duration::from_millis(args.fail_fsync_hold_ms),
    );
    let filesystem = fs::PowerFs::new(model, fault);
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("powerfs".into()),
        MountOption::DefaultPermissions,
    ];
    let mut signals = signal_hook::iterator::Signals::new([SIGUSR1, SIGUSR2, SIGTERM, SIGINT])?;
    let session = Session::new(filesystem.clone(), &args.mount, &config)?;
    let background = session.spawn()?;
    // The line the test harness waits for.
    println!(
        "powerfs ready: {} on {}",
        backing.display(),
        args.mount.display()
    );
    std::io::stdout().flush()?;
    let signal = loop {
        match signals.forever().next() {
            Some(SIGUSR2) => {
                filesystem.fault.arm();
                println!("powerfs fault armed");
                std::io::stdout().flush()?;
            }
            other => break other.unwrap_or(SIGTERM),
        }
    };
    let mount = args.mount.canonicalize()?;
    if let Err(e) = background.umount_and_join() {
        // Either the unmount worked and the session ended with the connection's abort
        // (ECONNABORTED), or something still has a file open: then detach the mount. The
        // process exits below, which ends the FUSE connection for whatever still holds it.
        let path = std::ffi::CString::new(mount.as_os_str().as_encoded_bytes())?;
        // SAFETY: umount2 with a NUL-terminated path that outlives the call.
        if unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) } != 0 {
            let detach = std::io::Error::last_os_error();
            // EINVAL: not a mount point any more, so the unmount did work.
            if detach.raw_os_error() != Some(libc::EINVAL) {
                eprintln!("powerfs: unmount failed ({e}), and detaching too ({detach})");
                return Err(detach);
            }
        } else {
            eprintln!("powerfs: unmount failed ({e}); detached");
        }
    }
    if signal != SIGUSR1 {
        println!("powerfs unmounted");
        return Ok(());
    }
    let mut inner = filesystem.inner.lock().unwrap_or_else(|e| e.into_inner());
    let torn = args.torn_seed.map(|seed| Rng(seed | 1));
    let report = inner.model.power_cut(torn)?;
    println!(
        "powerfs power cut: mode={:?} torn={} entry_changes_dropped={} files_kept={} \
         files_cut={} pages_restored={} pages_torn_kept={}",
        mode,
        args.torn_seed.is_some(),
        report.entry_changes_dropped,
        report.files_kept,
        report.files_cut,
        report.pages_restored,
        report.pages_torn_kept
    );
    std::io::stdout().flush()?;
    // Exit at once, without running the session's destructors on a detached mount.
    // SAFETY: _exit ends the process; nothing after it runs.
    unsafe { libc::_exit(0) }
}
