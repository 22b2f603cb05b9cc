//! A replica's leader epochs: which epoch (Raft term) began at which offset of its log, as
//! Kafka's leader-epoch checkpoint. With it a replica knows the term of every batch it
//! holds, and where its log stops agreeing with a leader's: the end of the last epoch the
//! two share (Kafka's OffsetsForLeaderEpoch, KIP-101 and KIP-320), so a follower cuts a
//! divergent, uncommitted tail exactly (`storage::truncate`).
//!
//! Entries are kept in the partition directory as `leader-epochs`, a small text file
//! replaced whole and durably on every change (temp file, fdatasync, rename, directory
//! fsync: `storage::fs`), ending in a CRC32C line so rot is found rather than believed:
//!
//! ```text
//! pagurus-leader-epochs 1
//! 3 0
//! 5 1200
//! crc 9a3c27f1
//! ```
//!
//! Both columns grow strictly from line to line. A missing file is no epochs (a partition
//! that was never replicated); a damaged one is refused at load, never guessed at.
//!
//! # Order against the log
//!
//! An epoch is assigned (made durable) before the first batch of that epoch is appended; a
//! cut of the log goes first and the epochs' cut after it. So after a crash the file may
//! name an epoch whose start is at or past the log's end, never one that misses a batch the
//! log holds; [`LeaderEpochs::assign`] drops such entries as Kafka's cache does, and
//! [`LeaderEpochs::truncate_from`] after a cut does the same.

use std::path::Path;

use tracing::warn;

use crate::storage::StorageError;
use crate::storage::fs::write_file_durable;

/// The file's name in the partition directory.
pub const EPOCHS_FILE: &str = "leader-epochs";
/// The most epochs kept; past it the oldest is forgotten (with a warning).
pub const EPOCHS_MAX: usize = 4096;
const FORMAT_LINE: &str = "pagurus-leader-epochs 1";

/// The epoch that began at `start_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochStart {
    pub epoch: u64,
    pub start_offset: u64,
}

/// A replica's leader epochs, oldest first (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LeaderEpochs {
    entries: Vec<EpochStart>,
}

impl LeaderEpochs {
    /// Reads `dir`'s epochs: none when the file is missing; an error naming the file and
    /// the line when it is damaged.
    pub fn load(dir: &Path) -> Result<LeaderEpochs, StorageError> {
        let path = dir.join(EPOCHS_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Self::default()),
            Err(e) => return Err(StorageError::io(&path, e)),
        };
        parse(&text).map_err(|reason| StorageError::Damaged {
            path: path.clone(),
            reason,
        })
    }

    pub fn entries(&self) -> &[EpochStart] {
        &self.entries
    }

    /// The newest epoch, if any.
    pub fn latest(&self) -> Option<EpochStart> {
        self.entries.last().copied()
    }

    /// Records, durably, that `epoch` begins at `start_offset`. Entries of this epoch or
    /// later, or starting at or past `start_offset`, go first (an older leader's tail the
    /// log no longer holds). Nothing changes when `epoch` is already the newest. Returns
    /// whether the file was written.
    pub fn assign(
        &mut self,
        dir: &Path,
        epoch: u64,
        start_offset: u64,
    ) -> Result<bool, StorageError> {
        if self.latest().is_some_and(|latest| latest.epoch == epoch) {
            return Ok(false);
        }
        let mut next = self.entries.clone();
        while next
            .last()
            .is_some_and(|e| e.epoch >= epoch || e.start_offset >= start_offset)
        {
            next.pop();
        }
        next.push(EpochStart {
            epoch,
            start_offset,
        });
        if next.len() > EPOCHS_MAX {
            let dropped = next.remove(0);
            warn!(dir = %dir.display(), epoch = dropped.epoch, start_offset = dropped.start_offset, "oldest leader epoch forgotten: more than {EPOCHS_MAX} epochs");
        }
        self.replace(dir, next)?;
        Ok(true)
    }

    /// After the log was cut at `offset`: forgets the epochs that began at or past it.
    pub fn truncate_from(&mut self, dir: &Path, offset: u64) -> Result<(), StorageError> {
        let keep = self.entries.partition_point(|e| e.start_offset < offset);
        if keep == self.entries.len() {
            return Ok(());
        }
        self.replace(dir, self.entries[..keep].to_vec())
    }

    /// The epoch of the batch at `offset`: the last one that began at or before it.
    pub fn epoch_at(&self, offset: u64) -> Option<u64> {
        let i = self.entries.partition_point(|e| e.start_offset <= offset);
        i.checked_sub(1).map(|i| self.entries[i].epoch)
    }

    /// Kafka's OffsetsForLeaderEpoch answer for `epoch` on a log that ends at `log_end`:
    /// the largest epoch at or below it that this replica has, and where that epoch's
    /// batches end here (the next epoch's start, or `log_end` for the newest). `None` when
    /// every epoch here is newer (Kafka's UNDEFINED_EPOCH and offset).
    pub fn end_of(&self, epoch: u64, log_end: u64) -> Option<(u64, u64)> {
        let i = self.entries.partition_point(|e| e.epoch <= epoch);
        let found = self.entries.get(i.checked_sub(1)?)?;
        let end = self.entries.get(i).map_or(log_end, |e| e.start_offset);
        Some((found.epoch, end))
    }

    fn replace(&mut self, dir: &Path, next: Vec<EpochStart>) -> Result<(), StorageError> {
        assert!(ordered(&next), "leader epochs out of order: {next:?}");
        let text = render(&next);
        write_file_durable(dir, EPOCHS_FILE, text.as_bytes())?;
        debug_assert_eq!(parse(&text).as_ref().map(|e| &e.entries), Ok(&next));
        self.entries = next;
        Ok(())
    }
}

/// Both columns grow strictly.
fn ordered(entries: &[EpochStart]) -> bool {
    entries
        .windows(2)
        .all(|w| w[0].epoch < w[1].epoch && w[0].start_offset < w[1].start_offset)
}

fn render(entries: &[EpochStart]) -> String {
    let mut text = format!("{FORMAT_LINE}\n");
    for e in entries {
        text.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
    }
    let crc = crc32c::crc32c(text.as_bytes());
    text.push_str(&format!("crc {crc:08x}\n"));
    text
}

fn parse(text: &str) -> Result<LeaderEpochs, String> {
    let body_len = text
        .trim_end_matches('\n')
        .rfind('\n')
        .map(|i| i + 1)
        .ok_or("no checksum line")?;
    let (body, last) = text.split_at(body_len);
    let crc = last
        .trim_end()
        .strip_prefix("crc ")
        .and_then(|hex| u32::from_str_radix(hex, 16).ok())
        .ok_or("the last line is not `crc <hex>`")?;
    if crc32c::crc32c(body.as_bytes()) != crc {
        return Err("checksum mismatch".into());
    }
    let mut lines = body.lines();
    if lines.next() != Some(FORMAT_LINE) {
        return Err(format!("the first line is not `{FORMAT_LINE}`"));
    }
    let mut entries = Vec::new();
    for (n, line) in lines.enumerate() {
        if entries.len() == EPOCHS_MAX {
            return Err(format!("more than {EPOCHS_MAX} epochs"));
        }
        let mut fields = line.split(' ').map(str::parse::<u64>);
        let (Some(Ok(epoch)), Some(Ok(start_offset)), None) =
            (fields.next(), fields.next(), fields.next())
        else {
            return Err(format!("line {}: not `<epoch> <start offset>`", n + 2));
        };
        entries.push(EpochStart {
            epoch,
            start_offset,
        });
    }
    if !ordered(&entries) {
        return Err("epochs or offsets do not grow".into());
    }
    Ok(LeaderEpochs { entries })
}

#[cfg(test)]
mod tests;
