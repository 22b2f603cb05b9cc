//! A failing fsync on demand, for tests of how the broker handles a failed fdatasync.
//!
//! `SIGUSR2` arms one failure: the next fsync or fdatasync of a file whose name ends with
//! `--fail-fsync-suffix` is answered with `EIO` after `--fail-fsync-hold-ms`, and syncs
//! nothing (the file's un-synced bytes stay un-synced, as after a real write-back error).
//! The answer is held on a thread of its own, so every other request is served meanwhile,
//! as a slow failing device would let them be: the kernel still holds that file's inode
//! lock for the whole fsync, so other writes and fsyncs of the same file wait, and those of
//! other files go on.

use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fuser::{Errno, ReplyEmpty};

pub struct FsyncFault {
    armed: AtomicBool,
    suffix: String,
    hold: Duration,
}

impl FsyncFault {
    pub fn new(suffix: String, hold: Duration) -> FsyncFault {
        FsyncFault {
            armed: AtomicBool::new(false),
            suffix,
            hold,
        }
    }

    pub fn arm(&self) {
        self.armed.store(true, Ordering::SeqCst);
    }

    /// Takes `reply` if this fsync of `name` is the armed failure (and disarms): it is
    /// answered with EIO later, from another thread.
    pub fn strike(&self, name: Option<&OsStr>, reply: ReplyEmpty) -> Option<ReplyEmpty> {
        let Some(name) = name else {
            return Some(reply);
        };
        let matches = name.as_encoded_bytes().ends_with(self.suffix.as_bytes());
        if !matches
            || self
                .armed
                .compare_exchange(true, false, Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
        {
            return Some(reply);
        }
        let (hold, name) = (self.hold, name.to_owned());
        std::thread::spawn(move || {
            std::thread::sleep(hold);
            eprintln!("powerfs fault: fsync of {} failed with EIO", name.display());
            reply.error(Errno::EIO);
        });
        None
    }
}
