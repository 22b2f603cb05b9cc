//! The controller group's durable raft-rs [`Storage`]: hard state, conf state, log entries
//! and the latest snapshot, under `<data-dir>/cluster/controller/` (byte layouts in
//! [`codec`]). Reads are served from memory (the controller's log is small and compacted
//! after each snapshot); every write is durable before it returns, through the durable
//! file steps of `storage::fs`.
//!
//! Files: `raft_state` (hard and conf state) and `snapshot` are replaced whole with
//! `write_file_durable` (temp file, fdatasync, rename, directory fsync); `log` is
//! append-only (write, fdatasync), truncated when Raft replaces a conflicting tail, and
//! rewritten whole (again `write_file_durable`) when a snapshot compacts it.
//!
//! Crash table: what a crash (or power cut) at each step leaves, and what [`RaftStore::open`]
//! makes of it. The driver sends a message that depends on a write only after the write
//! returned (raft-rs's persisted messages), so whatever a crash loses was never promised.
//!
//! | step | a crash there leaves | open |
//! |------|----------------------|------|
//! | append: truncate a conflicting tail | the old tail or none | either is an unacknowledged tail Raft rewrites |
//! | append: write the records | a prefix of them, the last one torn, or zeros | the torn tail is cut off (`codec::scan_log`) |
//! | append: fdatasync | as above | as above |
//! | hard/conf state: write temp, rename, fsync dir | the old `raft_state` or the new, maybe a `.tmp` | the old or new state; `.tmp` is ignored |
//! | snapshot from the leader: 1 `snapshot` | new snapshot, old log, old state (commit below it) | conf state and commit taken from the snapshot; log entries that do not follow it dropped and the log rewritten |
//! | 2 `log` rewritten empty | new snapshot, empty log, old state | as above |
//! | 3 `raft_state` | all new | - |
//! | compaction: 1 `snapshot` | new snapshot, the log still holding entries it covers | entries at or below the snapshot dropped, the log rewritten |
//! | 2 `log` rewritten | all new | - |
//!
//! A record damaged where a crash cannot have torn it (bad CRC with intact records after
//! it), a gap between the snapshot and the log, or a commit index past the log's end is
//! refused with [`RaftStoreError`]: those entries may have been acknowledged, and a voter
//! that forgets what it acknowledged breaks Raft's safety.

pub(crate) mod codec;

use std::fs::{self, File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage};

pub use codec::MAX_ENTRY_BYTES;

use crate::storage::StorageError;
use crate::storage::fs::{create_dir_durable, sync_dir, write_file_durable};

const LOG_FILE: &str = "log";
const STATE_FILE: &str = "raft_state";
const SNAPSHOT_FILE: &str = "snapshot";
/// The largest `log` file opened: the controller compacts long before this.
pub const MAX_LOG_BYTES: u64 = 1024 * 1024 * 1024;
/// The largest snapshot written or opened.
pub const MAX_SNAPSHOT_BYTES: u64 = 256 * 1024 * 1024;
/// The largest `raft_state` file opened (a conf state of thousands of members).
const MAX_STATE_BYTES: u64 = 1024 * 1024;

/// Where the controller's Raft files live in a data directory.
pub fn controller_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("cluster").join("controller")
}

/// Why the controller's Raft files could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RaftStoreError {
    #[error(transparent)]
    Io(#[from] StorageError),
    #[error(
        "{path} is damaged at byte {offset} ({reason}); it is not a torn tail a crash could \
         leave, so the node refuses to start rather than forget acknowledged entries"
    )]
    Damaged {
        path: PathBuf,
        offset: u64,
        reason: &'static str,
    },
    #[error("{path} is {bytes} bytes, over the limit of {max}")]
    FileTooLarge { path: PathBuf, bytes: u64, max: u64 },
    #[error("{path} holds no entry {expected} right after the snapshot; its first is {found}")]
    LogGap {
        path: PathBuf,
        expected: u64,
        found: u64,
    },
    #[error("the hard state's commit index {commit} is past the log's last entry {last_index}")]
    CommitBeyondLog { commit: u64, last_index: u64 },
    #[error("entry {index} is {bytes} bytes, over the limit of {max}")]
    EntryTooLarge {
        index: u64,
        bytes: usize,
        max: usize,
    },
    #[error("entries from {first} do not fit the log, which holds {log_first}..={log_last}")]
    NotContiguous {
        first: u64,
        log_first: u64,
        log_last: u64,
    },
    #[error("a snapshot at {index} is older than the one stored or not yet committed ({reason})")]
    SnapshotOutOfDate { index: u64, reason: &'static str },
    #[error("the controller's Raft state is already set up with voters {voters:?}")]
    AlreadyInitialized { voters: Vec<u64> },
}

/// The controller's Raft files, and their contents in memory.
#[derive(Debug)]
pub struct RaftStore {
    dir: PathBuf,
    log: File,
    hard_state: HardState,
    conf_state: ConfState,
    snapshot: Snapshot,
    /// Entries `snapshot index + 1 ..= last`, in order.
    entries: Vec<Entry>,
    /// The byte offset where each entry's record ends in `log`.
    ends: Vec<u64>,
}

impl RaftStore {
    /// Opens (creating when missing) the Raft files in `dir`, recovering from a crash at any
    /// step (see the crash table above).
    pub fn open(dir: &Path) -> Result<RaftStore, RaftStoreError> {
        create_dir_durable(dir)?;
        let (mut hard_state, mut conf_state) =
            match read_limited(dir, STATE_FILE, MAX_STATE_BYTES)? {
                Some(bytes) => codec::decode_raft_state(&bytes)
                    .map_err(|m| damaged(dir, STATE_FILE, 0, m.what))?,
                None => Default::default(),
            };
        let snapshot = match read_limited(dir, SNAPSHOT_FILE, MAX_SNAPSHOT_BYTES)? {
            Some(bytes) => codec::decode_snapshot(&bytes)
                .map_err(|m| damaged(dir, SNAPSHOT_FILE, 0, m.what))?,
            None => Snapshot::default(),
        };
        let meta = snapshot.get_metadata();
        if hard_state.commit < meta.index {
            // `raft_state` predates the snapshot a leader sent (a crash between the two
            // writes): the snapshot's conf state and commit are the newer.
            conf_state = meta.get_conf_state().clone();
            hard_state.commit = meta.index;
        }
        hard_state.term = hard_state.term.max(meta.term);
        let (log, entries, ends) = open_log(dir, meta.index, meta.term)?;
        let store = RaftStore {
            dir: dir.to_path_buf(),
            log,
            hard_state,
            conf_state,
            snapshot,
            entries,
            ends,
        };
        let last_index = store.last();
        if store.hard_state.commit > last_index {
            return Err(RaftStoreError::CommitBeyondLog {
                commit: store.hard_state.commit,
                last_index,
            });
        }
        Ok(store)
    }

    /// Sets the first voters of a new group (every initial voter is set up alike). Refused
    /// once the group has a configuration.
    pub fn initialize(&mut self, voters: &[u64]) -> Result<(), RaftStoreError> {
        if self.conf_state != ConfState::default() {
            return Err(RaftStoreError::AlreadyInitialized {
                voters: self.conf_state.voters.clone(),
            });
        }
        self.set_conf_state(ConfState::from((voters.to_vec(), Vec::new())))
    }

    /// True once the group has a configuration (after [`RaftStore::initialize`] or a snapshot).
    pub fn is_initialized(&self) -> bool {
        self.conf_state != ConfState::default()
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn conf_state(&self) -> &ConfState {
        &self.conf_state
    }

    /// The latest snapshot (index 0 when there is none yet).
    pub fn latest_snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    /// Appends entries from Raft's `Ready`, replacing any conflicting tail; durable on return.
    pub fn append(&mut self, new: &[Entry]) -> Result<(), RaftStoreError> {
        let Some(first) = new.first() else {
            return Ok(());
        };
        let (log_first, log_last) = (self.first(), self.last());
        if first.index < log_first || first.index > log_last + 1 {
            return Err(RaftStoreError::NotContiguous {
                first: first.index,
                log_first,
                log_last,
            });
        }
        let mut bytes = Vec::new();
        for e in new {
            if e.data.len() + e.context.len() > MAX_ENTRY_BYTES {
                return Err(RaftStoreError::EntryTooLarge {
                    index: e.index,
                    bytes: e.data.len() + e.context.len(),
                    max: MAX_ENTRY_BYTES,
                });
            }
            codec::encode_entry(e, &mut bytes);
        }
        let keep = (first.index - log_first) as usize;
        let at = if keep == 0 { 0 } else { self.ends[keep - 1] };
        let path = self.dir.join(LOG_FILE);
        if keep < self.entries.len() {
            self.log
                .set_len(at)
                .map_err(|e| StorageError::io(&path, e))?;
            self.entries.truncate(keep);
            self.ends.truncate(keep);
        }
        self.log
            .write_all_at(&bytes, at)
            .and_then(|()| self.log.sync_data())
            .map_err(|e| StorageError::io(&path, e))?;
        let mut end = at;
        for e in new {
            end += codec::entry_record_bytes(e) as u64;
            self.ends.push(end);
            self.entries.push(e.clone());
        }
        Ok(())
    }

    /// Stores Raft's hard state; durable on return (nothing is written when it is unchanged).
    pub fn set_hard_state(&mut self, hs: &HardState) -> Result<(), RaftStoreError> {
        if *hs == self.hard_state {
            return Ok(());
        }
        self.write_state(hs.clone(), self.conf_state.clone())
    }

    /// Stores a new commit index (raft-rs reports it apart from the hard state).
    pub fn set_commit(&mut self, commit: u64) -> Result<(), RaftStoreError> {
        let hs = HardState {
            commit,
            ..self.hard_state.clone()
        };
        self.set_hard_state(&hs)
    }

    /// Stores the configuration a conf change produced; durable on return.
    pub fn set_conf_state(&mut self, cs: ConfState) -> Result<(), RaftStoreError> {
        self.write_state(self.hard_state.clone(), cs)
    }

    fn write_state(&mut self, hs: HardState, cs: ConfState) -> Result<(), RaftStoreError> {
        write_file_durable(&self.dir, STATE_FILE, &codec::encode_raft_state(&hs, &cs))?;
        (self.hard_state, self.conf_state) = (hs, cs);
        Ok(())
    }

    /// Installs a snapshot the leader sent: it replaces the whole log (raft-rs hands one
    /// over only when the log does not already hold its index and term).
    pub fn apply_snapshot(&mut self, snap: Snapshot) -> Result<(), RaftStoreError> {
        let meta = snap.get_metadata();
        if meta.index < self.first() {
            return Err(RaftStoreError::SnapshotOutOfDate {
                index: meta.index,
                reason: "below the log's first index",
            });
        }
        self.write_snapshot(&snap)?;
        self.rewrite_log(Vec::new())?;
        let hs = HardState {
            term: self.hard_state.term.max(meta.term),
            commit: meta.index,
            ..self.hard_state.clone()
        };
        let cs = meta.get_conf_state().clone();
        self.snapshot = snap;
        self.write_state(hs, cs)
    }

    /// Stores a snapshot of the state machine as applied up to `index` (at most the commit
    /// index) and drops the log entries it covers.
    pub fn create_snapshot(
        &mut self,
        index: u64,
        conf_state: ConfState,
        data: Vec<u8>,
    ) -> Result<(), RaftStoreError> {
        if index <= self.snapshot.get_metadata().index || index > self.hard_state.commit {
            return Err(RaftStoreError::SnapshotOutOfDate {
                index,
                reason: "not past the stored snapshot, or not committed",
            });
        }
        let mut snap = Snapshot {
            data: data.into(),
            ..Snapshot::default()
        };
        let meta = snap.mut_metadata();
        meta.index = index;
        meta.term = self
            .entry(index)
            .map(|e| e.term)
            .expect("index is in the log");
        meta.set_conf_state(conf_state);
        self.write_snapshot(&snap)?;
        let keep = self.entries.split_off((index + 1 - self.first()) as usize);
        self.snapshot = snap;
        self.rewrite_log(keep)
    }

    fn write_snapshot(&mut self, snap: &Snapshot) -> Result<(), RaftStoreError> {
        let bytes = codec::encode_snapshot(snap);
        if bytes.len() as u64 > MAX_SNAPSHOT_BYTES {
            return Err(RaftStoreError::FileTooLarge {
                path: self.dir.join(SNAPSHOT_FILE),
                bytes: bytes.len() as u64,
                max: MAX_SNAPSHOT_BYTES,
            });
        }
        Ok(write_file_durable(&self.dir, SNAPSHOT_FILE, &bytes)?)
    }

    /// Replaces `log` with one holding `entries`, durably, and reopens it.
    fn rewrite_log(&mut self, entries: Vec<Entry>) -> Result<(), RaftStoreError> {
        let (log, ends) = write_log(&self.dir, &entries)?;
        (self.log, self.entries, self.ends) = (log, entries, ends);
        Ok(())
    }

    fn first(&self) -> u64 {
        self.snapshot.get_metadata().index + 1
    }

    fn last(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.snapshot.get_metadata().index, |e| e.index)
    }

    fn entry(&self, index: u64) -> Option<&Entry> {
        let at = index.checked_sub(self.first())?;
        self.entries.get(usize::try_from(at).ok()?)
    }
}

impl Storage for RaftStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.conf_state.clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(raft::StorageError::Unavailable));
        }
        let from = (low - self.first()) as usize;
        let mut out = self.entries[from..from + (high - low) as usize].to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let meta = self.snapshot.get_metadata();
        if idx == meta.index {
            return Ok(meta.term);
        }
        if idx < self.first() {
            return Err(raft::Error::Store(raft::StorageError::Compacted));
        }
        self.entry(idx)
            .map(|e| e.term)
            .ok_or(raft::Error::Store(raft::StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        let index = self.snapshot.get_metadata().index;
        if index == 0 || index < request_index {
            // The driver makes a newer one as it applies; raft-rs asks again later.
            return Err(raft::Error::Store(
                raft::StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

/// Reads `dir/name` whole, refusing one over `max` bytes before reading it; `None` when
/// it does not exist.
pub(crate) fn read_limited(
    dir: &Path,
    name: &str,
    max: u64,
) -> Result<Option<Vec<u8>>, RaftStoreError> {
    let path = dir.join(name);
    let bytes = match fs::metadata(&path) {
        Ok(meta) => meta.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(StorageError::io(&path, e).into()),
    };
    if bytes > max {
        return Err(RaftStoreError::FileTooLarge { path, bytes, max });
    }
    fs::read(&path)
        .map(Some)
        .map_err(|e| StorageError::io(&path, e).into())
}

fn damaged(dir: &Path, name: &str, offset: u64, reason: &'static str) -> RaftStoreError {
    RaftStoreError::Damaged {
        path: dir.join(name),
        offset,
        reason,
    }
}

fn open_append(path: &Path) -> Result<File, RaftStoreError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| StorageError::io(path, e).into())
}

/// Opens `log`, cuts a torn tail off it, and keeps the entries that follow the snapshot at
/// `snap_index` (of `snap_term`); the file is rewritten when entries it holds are dropped.
fn open_log(
    dir: &Path,
    snap_index: u64,
    snap_term: u64,
) -> Result<(File, Vec<Entry>, Vec<u64>), RaftStoreError> {
    let path = dir.join(LOG_FILE);
    let existed = path.exists();
    let bytes = read_limited(dir, LOG_FILE, MAX_LOG_BYTES)?.unwrap_or_default();
    let file = open_append(&path)?;
    if !existed {
        sync_dir(dir)?; // the new file's entry
    }
    let scan = codec::scan_log(&bytes).map_err(|d| damaged(dir, LOG_FILE, d.offset, d.reason))?;
    if let Some(reason) = scan.torn {
        tracing::warn!(
            path = %path.display(),
            kept_bytes = scan.valid_len,
            dropped_bytes = bytes.len() as u64 - scan.valid_len,
            "controller log: cutting off a torn tail ({reason})"
        );
        file.set_len(scan.valid_len)
            .and_then(|()| file.sync_data())
            .map_err(|e| StorageError::io(&path, e))?;
    }
    let (entries, ends) = (scan.entries, scan.ends);
    let Some(first) = entries.first().map(|e| e.index) else {
        return Ok((file, entries, ends));
    };
    if first > snap_index + 1 {
        return Err(RaftStoreError::LogGap {
            path,
            expected: snap_index + 1,
            found: first,
        });
    }
    let at_snapshot = entries.iter().find(|e| e.index == snap_index);
    let follows = at_snapshot.is_none_or(|e| e.term == snap_term);
    if first == snap_index + 1 {
        return Ok((file, entries, ends));
    }
    // The snapshot covers the front of the log (a crash before compaction finished) or
    // replaces it (one from the leader): keep what follows it, and rewrite the file.
    let keep: Vec<Entry> = if follows {
        entries
            .into_iter()
            .filter(|e| e.index > snap_index)
            .collect()
    } else {
        Vec::new()
    };
    let (file, ends) = write_log(dir, &keep)?;
    Ok((file, keep, ends))
}

/// Replaces `dir/log` with one holding `entries` (`write_file_durable`); returns it open
/// and where each entry's record ends.
fn write_log(dir: &Path, entries: &[Entry]) -> Result<(File, Vec<u64>), RaftStoreError> {
    let mut bytes = Vec::new();
    let mut ends = Vec::with_capacity(entries.len());
    for e in entries {
        codec::encode_entry(e, &mut bytes);
        ends.push(bytes.len() as u64);
    }
    write_file_durable(dir, LOG_FILE, &bytes)?;
    Ok((open_append(&dir.join(LOG_FILE))?, ends))
}

#[cfg(test)]
mod tests;
