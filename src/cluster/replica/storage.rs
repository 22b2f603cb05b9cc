//! raft-rs's [`Storage`] over a replica's partition log (docs/REPLICATION.md): the log is
//! the Raft log. Entry `i` is the batch whose Raft index is `i` (`PartitionLog::
//! offset_of_raft_index`); its term is the leader epoch at the batch's offset
//! (`storage::epochs`); hard and conf state are the replica's `raft_state`
//! ([`ReplicaRaftState`]).
//!
//! What an entry holds on disk:
//!
//! - a client's batch (`EntryNormal` with data): the batch itself, as the leader staged it,
//!   offsets included; its Raft entry's data is those bytes;
//! - anything else raft-rs appends (the empty entry of a new leader, a configuration change):
//!   a control batch (`index::CONTROL_BIT`, never served to readers) whose payload is
//!   [`encode_control`]: the entry type (u8), the context length (u32, big-endian), the
//!   context, then the data.
//!
//! Appending ([`ReplicaStorage::append`]) follows the order the storage modules fix: a
//! conflicting tail is cut from the log first and from the epochs after
//! (`storage::epochs`); a new term's epoch is made durable before its first batch is
//! staged; the batches are then acknowledged per the log's fsync policy before `append`
//! returns, so raft-rs sends what depends on them only after.
//!
//! `entries` reads each batch with a `pread` of its own: raft-rs asks the storage only
//! for entries its in-memory log no longer holds (a follower catching up), and such a
//! follower is to get whole segments by sendfile instead.
//!
//! Not built yet: snapshots (a replica too far behind gets whole closed segments:
//! `snapshot` answers `SnapshotTemporarilyUnavailable`), and a commit-capped high
//! watermark for readers.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError as RaftStorageError};

use crate::cluster::controller::raft_store::RaftStoreError;
use crate::cluster::replica::raft_state::ReplicaRaftState;
use crate::protocol::record::{self, BatchHeader};
use crate::storage::StorageError;
use crate::storage::epochs::LeaderEpochs;
use crate::storage::log::PartitionLog;
use crate::storage::log::raft::RaftEntry;
use crate::storage::segment::wal_path;

/// Why a replica's storage refused.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    #[error(transparent)]
    Storage(#[from] StorageError),
    #[error(transparent)]
    RaftState(#[from] RaftStoreError),
    #[error("the partition log in {dir} has no Raft numbering (opened with PartitionLog::open)")]
    NotRaftIndexed { dir: String },
    #[error("entries from Raft index {first} do not follow the log, whose next index is {next}")]
    NotContiguous { first: u64, next: u64 },
    #[error("entry {index}: {reason}")]
    BadEntry { index: u64, reason: String },
    #[error("raft: {reason}")]
    Raft { reason: String },
    #[error("entry {index} of term {term} is older than the replica's newest epoch {epoch}")]
    TermMovedBack { index: u64, term: u64, epoch: u64 },
}

/// A replica's Raft log, hard state and epochs.
pub struct ReplicaStorage {
    /// Replaced when a conflicting tail is cut (`PartitionLog::truncate_to` reopens).
    log: RefCell<Rc<PartitionLog>>,
    epochs: RefCell<LeaderEpochs>,
    state: RefCell<ReplicaRaftState>,
}

impl ReplicaStorage {
    /// The storage of the replica whose log is `log` (opened with `PartitionLog::open_raft`);
    /// its epochs and Raft state are read from the partition directory.
    pub fn open(log: Rc<PartitionLog>) -> Result<ReplicaStorage, ReplicaError> {
        if !log.is_raft_indexed() {
            let dir = log.dir().display().to_string();
            return Err(ReplicaError::NotRaftIndexed { dir });
        }
        let epochs = LeaderEpochs::load(log.dir())?;
        let state = ReplicaRaftState::open(log.dir())?;
        Ok(ReplicaStorage {
            log: RefCell::new(log),
            epochs: RefCell::new(epochs),
            state: RefCell::new(state),
        })
    }

    /// The log now (a cut replaces it).
    pub fn log(&self) -> Rc<PartitionLog> {
        Rc::clone(&self.log.borrow())
    }

    /// Sets a new group's first voters (every initial replica alike).
    pub fn initialize(&self, voters: &[u64]) -> Result<(), ReplicaError> {
        let mut state = self.state.borrow_mut();
        let hard = state.hard_state().clone();
        let conf = ConfState::from((voters.to_vec(), Vec::new()));
        Ok(state.store(&hard, Some(&conf))?)
    }

    /// Makes raft-rs's new hard state (and conf state) durable.
    pub fn set_state(
        &self,
        hard: &HardState,
        conf: Option<&ConfState>,
    ) -> Result<(), ReplicaError> {
        Ok(self.state.borrow_mut().store(hard, conf)?)
    }

    /// Appends entries from raft-rs's `Ready`, cutting a conflicting tail first; returns
    /// once they are acknowledged per the log's fsync policy.
    pub async fn append(&self, entries: &[Entry]) -> Result<(), ReplicaError> {
        let Some(first) = entries.first() else {
            return Ok(());
        };
        let next = self.next_index();
        if first.index > next || first.index < self.first() {
            return Err(ReplicaError::NotContiguous {
                first: first.index,
                next,
            });
        }
        if first.index < next {
            self.cut_from(first.index).await?;
        }
        let mut last = None;
        for entry in entries {
            assert_eq!(entry.index, self.next_index(), "entries are contiguous");
            let log = self.log();
            // Checked before anything is written: this replica's append is the only writer
            // of its log, so the batch lands at the log's next offset.
            if is_batch(entry) {
                check_offset(entry, log.next_offset())?;
            }
            self.open_epoch(entry)?;
            let ticket = if is_batch(entry) {
                let ticket = log.stage(&entry.data, None).await?;
                assert_eq!(
                    ticket.base_offset,
                    header_offset(entry),
                    "staged where checked"
                );
                ticket
            } else {
                log.stage_control(&encode_control(entry)).await?
            };
            last = Some(ticket);
        }
        let log = self.log();
        log.commit(last.expect("at least one entry")).await?;
        Ok(())
    }

    /// Cuts the log at Raft index `index` (the first conflicting entry), then the epochs.
    async fn cut_from(&self, index: u64) -> Result<(), ReplicaError> {
        let log = self.log();
        let at = log
            .offset_of_raft_index(index)
            .expect("a held index: checked against the log's range")
            .offset;
        let cap = log.commit_cap();
        let cut = log.truncate_to(at).await?;
        // Only uncommitted batches are cut, so the cap is at or below the cut.
        if let Some(cap) = cap {
            cut.set_commit_cap(cap.min(at));
        }
        *self.log.borrow_mut() = cut;
        self.epochs
            .borrow_mut()
            .truncate_from(self.log().dir(), at)?;
        Ok(())
    }

    /// Records `entry`'s term as an epoch starting at the log's end when it is newer than
    /// the newest; refuses one older (raft-rs never appends behind a newer term).
    fn open_epoch(&self, entry: &Entry) -> Result<(), ReplicaError> {
        let mut epochs = self.epochs.borrow_mut();
        let newest = epochs.latest().map_or(0, |e| e.epoch);
        if entry.term < newest {
            return Err(ReplicaError::TermMovedBack {
                index: entry.index,
                term: entry.term,
                epoch: newest,
            });
        }
        let log = self.log();
        epochs.assign(log.dir(), entry.term, log.next_offset())?;
        Ok(())
    }

    fn next_index(&self) -> u64 {
        self.log().next_raft_index().expect("opened raft-indexed")
    }

    fn first(&self) -> u64 {
        let log = self.log();
        log.raft_range()
            .map_or_else(|| self.next_index(), |(first, _)| first)
    }

    /// The term of the batch `at` describes.
    fn term_of(&self, at: &RaftEntry) -> raft::Result<u64> {
        self.epochs
            .borrow()
            .epoch_at(at.offset)
            .ok_or(raft::Error::Store(RaftStorageError::Unavailable))
    }

    /// Raft's entry for the batch `at` describes, its bytes read from the segment.
    fn entry_at(&self, at: &RaftEntry) -> raft::Result<Entry> {
        let log = self.log();
        let path = wal_path(log.dir(), at.segment_base_offset);
        let mut bytes = vec![0u8; at.length as usize];
        std::fs::File::open(&path)
            .and_then(|file| {
                std::os::unix::fs::FileExt::read_exact_at(&file, &mut bytes, at.position)
            })
            .map_err(|e| raft::Error::Store(RaftStorageError::Other(Box::new(e))))?;
        let mut entry = Entry {
            index: at.index,
            term: self.term_of(at)?,
            ..Default::default()
        };
        if at.control {
            decode_control(&bytes[record::HEADER_LEN..], &mut entry).map_err(|reason| {
                let e = ReplicaError::BadEntry {
                    index: at.index,
                    reason,
                };
                raft::Error::Store(RaftStorageError::Other(Box::new(e)))
            })?;
        } else {
            entry.set_entry_type(EntryType::EntryNormal);
            entry.data = Bytes::from(bytes);
        }
        Ok(entry)
    }
}

/// A replica's storage shared between its Raft node and the task that writes its
/// entries (an append waits for the disk without holding the node).
#[derive(Clone)]
pub struct SharedStorage(pub Rc<ReplicaStorage>);

impl Storage for SharedStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        self.0.initial_state()
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        self.0.entries(low, high, max_size, context)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        self.0.term(idx)
    }

    fn first_index(&self) -> raft::Result<u64> {
        self.0.first_index()
    }

    fn last_index(&self) -> raft::Result<u64> {
        self.0.last_index()
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        self.0.snapshot(request_index, to)
    }
}

impl Storage for ReplicaStorage {
    fn initial_state(&self) -> raft::Result<RaftState> {
        let state = self.state.borrow();
        Ok(RaftState::new(
            state.hard_state().clone(),
            state.conf_state().clone(),
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
            return Err(raft::Error::Store(RaftStorageError::Compacted));
        }
        assert!(high <= self.next_index(), "raft-rs asks within the log");
        let max_size = max_size.into().unwrap_or(u64::MAX);
        let (mut entries, mut size) = (Vec::new(), 0u64);
        for index in low..high {
            let log = self.log();
            let Some(at) = log.offset_of_raft_index(index) else {
                return Err(raft::Error::Store(RaftStorageError::Unavailable));
            };
            let entry = self.entry_at(&at)?;
            size += u64::from(protobuf::Message::compute_size(&entry));
            // At least one entry, whatever its size (raft-rs's rule).
            if !entries.is_empty() && size > max_size {
                break;
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        let first = self.first();
        if idx == 0 {
            return Ok(0);
        }
        if idx + 1 == first {
            // The batch before the log's start: the epoch of the offset before it.
            let log = self.log();
            let start = log.offset_of_raft_index(first).map(|e| e.offset);
            let before = start.unwrap_or_else(|| log.next_offset()).checked_sub(1);
            return Ok(before
                .and_then(|o| self.epochs.borrow().epoch_at(o))
                .unwrap_or(0));
        }
        if idx < first {
            return Err(raft::Error::Store(RaftStorageError::Compacted));
        }
        match self.log().offset_of_raft_index(idx) {
            Some(at) => self.term_of(&at),
            None => Err(raft::Error::Store(RaftStorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.next_index() - 1)
    }

    fn snapshot(&self, _request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        Err(raft::Error::Store(
            RaftStorageError::SnapshotTemporarilyUnavailable,
        ))
    }
}

/// A client's batch, stored as itself; every other entry is a control batch.
fn is_batch(entry: &Entry) -> bool {
    entry.get_entry_type() == EntryType::EntryNormal && !entry.data.is_empty()
}

/// The offset a checked batch's header carries.
fn header_offset(entry: &Entry) -> u64 {
    BatchHeader::decode(&entry.data, &Default::default()).map_or(u64::MAX, |h| h.offset)
}

/// A follower stores the leader's batch at the leader's offsets: the log's next offset must
/// be the one the batch's header carries.
fn check_offset(entry: &Entry, staged: u64) -> Result<(), ReplicaError> {
    let header = BatchHeader::decode(&entry.data, &Default::default()).map_err(|e| {
        ReplicaError::BadEntry {
            index: entry.index,
            reason: e.to_string(),
        }
    })?;
    if header.offset != staged {
        return Err(ReplicaError::BadEntry {
            index: entry.index,
            reason: format!(
                "the batch carries offset {} but the log is at {staged}",
                header.offset
            ),
        });
    }
    Ok(())
}

/// A control batch's payload: entry type (u8), context length (u32), context, data.
pub fn encode_control(entry: &Entry) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + entry.context.len() + entry.data.len());
    out.push(entry.get_entry_type() as u8);
    out.extend_from_slice(&(entry.context.len() as u32).to_be_bytes());
    out.extend_from_slice(&entry.context);
    out.extend_from_slice(&entry.data);
    out
}

fn decode_control(payload: &[u8], entry: &mut Entry) -> Result<(), String> {
    let (&kind, rest) = payload.split_first().ok_or("empty control payload")?;
    let kind = match kind {
        0 => EntryType::EntryNormal,
        1 => EntryType::EntryConfChange,
        2 => EntryType::EntryConfChangeV2,
        other => return Err(format!("unknown entry type {other}")),
    };
    let (len, rest) = rest.split_first_chunk::<4>().ok_or("cut context length")?;
    let len = u32::from_be_bytes(*len) as usize;
    if len > rest.len() {
        return Err(format!("context of {len} bytes in {} left", rest.len()));
    }
    entry.set_entry_type(kind);
    entry.context = Bytes::copy_from_slice(&rest[..len]);
    entry.data = Bytes::copy_from_slice(&rest[len..]);
    Ok(())
}

#[cfg(test)]
#[path = "storage_tests.rs"]
mod tests;
