//! One replica of a replicated partition around raft-rs's `RawNode`, without I/O of its own
//! besides its storage: the caller ticks it, steps what peers send, proposes client batches
//! on the leader, runs [`ReplicaDriver::handle_ready`] and sends
//! [`ReplicaDriver::take_messages`]. The owner core's task that does so, and the transport
//! that carries the messages, come next (docs/REPLICATION.md).
//!
//! **Offsets are the leader's.** A proposed batch gets its offsets when it is proposed, in
//! its header, so every replica stores the same bytes at the same offsets (a follower
//! checks, it does not assign: `ReplicaStorage::append`). The leader's next offset is where
//! its log ends plus what raft-rs holds that is not in the log yet (its unstable entries: a
//! new leader's own entry, batches proposed since the last `handle_ready`); it is computed
//! at each proposal, so it cannot drift from the log.
//!
//! **The high watermark** is the end offset of the last committed batch, as this replica
//! knows the commit: readers and acknowledgements stop there (`acks=all`: a batch is
//! acknowledged once the high watermark passes it).

use std::rc::Rc;

use raft::eraftpb::{Entry, Message};
use raft::{Config, RawNode, Ready, StateRole, Storage};

use super::storage::{ReplicaError, ReplicaStorage, SharedStorage};
use crate::protocol::record::BatchHeader;
pub use crate::shard::replicated::{Outcome, Proposal};
use crate::storage::index::CONTROL_BIT;

/// Why a batch was not proposed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProposeError {
    #[error("this replica does not lead the partition; the leader is {leader:?}")]
    NotLeader { leader: Option<u64> },
    #[error("the batch does not decode: {reason}")]
    BadBatch { reason: String },
    #[error("raft refused the proposal: {reason}")]
    Refused { reason: String },
}

/// A replica's Raft node over its partition log.
pub struct ReplicaDriver {
    raw: RawNode<SharedStorage>,
    storage: Rc<ReplicaStorage>,
    outbox: Vec<Message>,
    high_watermark: u64,
}

impl ReplicaDriver {
    /// The replica `id` of a group over `storage` (its voters set by
    /// `ReplicaStorage::initialize` for a new group). `config` gives the timing; its id and
    /// applied index are set here.
    pub fn new(
        id: u64,
        storage: ReplicaStorage,
        config: &Config,
    ) -> Result<ReplicaDriver, ReplicaError> {
        let commit = storage
            .initial_state()
            .map_err(raft_error)?
            .hard_state
            .commit;
        let config = Config {
            id,
            // Nothing is applied apart from the log itself: the commit is the high
            // watermark, so replaying committed entries after a restart is not needed.
            applied: commit,
            ..config.clone()
        };
        let logger = crate::cluster::raft_log::logger(0, id);
        let storage = Rc::new(storage);
        let raw = RawNode::new(&config, SharedStorage(Rc::clone(&storage)), &logger)
            .map_err(raft_error)?;
        let mut driver = ReplicaDriver {
            raw,
            storage,
            outbox: Vec::new(),
            high_watermark: 0,
        };
        driver.follow_commit();
        Ok(driver)
    }

    pub fn store(&self) -> &ReplicaStorage {
        &self.storage
    }

    /// The storage, for writing a round's entries without holding the driver.
    pub fn shared_store(&self) -> Rc<ReplicaStorage> {
        Rc::clone(&self.storage)
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// Whether this replica may serve reads: it leads, and has committed an entry of its
    /// own term, so its high watermark is the group's (a new leader learns the commit of
    /// earlier terms only then; before, its watermark may lag what was acknowledged).
    pub fn serves_reads(&self) -> bool {
        let log = &self.raw.raft.raft_log;
        self.is_leader() && log.term(log.committed).ok() == Some(self.term())
    }

    /// The leader this replica knows of.
    pub fn leader(&self) -> Option<u64> {
        Some(self.raw.raft.leader_id).filter(|&l| l != 0)
    }

    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The end offset of the last committed batch (see the module docs).
    pub fn high_watermark(&self) -> u64 {
        self.high_watermark
    }

    /// The commit index as this replica knows it.
    pub fn committed(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    pub fn tick(&mut self) {
        self.raw.tick();
    }

    /// Starts an election now (a new group's first replica, a planned transfer).
    pub fn campaign(&mut self) -> Result<(), ReplicaError> {
        self.raw.campaign().map_err(raft_error)
    }

    /// A message from a peer; one raft-rs refuses (a stale term) is its business.
    pub fn step(&mut self, message: Message) -> Result<(), ReplicaError> {
        self.raw.step(message).map_err(raft_error)
    }

    /// Proposes a client's batch on the leader: its header gets the offsets it will have
    /// on every replica, and the leader's clock when the producer left the timestamp 0
    /// (so every replica stores the same bytes).
    pub fn propose(&mut self, batch: &[u8]) -> Result<Proposal, ProposeError> {
        if !self.is_leader() {
            return Err(ProposeError::NotLeader {
                leader: self.leader(),
            });
        }
        let limits = Default::default();
        let mut header =
            BatchHeader::decode(batch, &limits).map_err(|e| ProposeError::BadBatch {
                reason: e.to_string(),
            })?;
        if header.record_count & CONTROL_BIT != 0 {
            return Err(ProposeError::BadBatch {
                reason: String::from("a client's batch cannot carry the control bit"),
            });
        }
        let records = header.record_count.max(1);
        let offset = self.next_offset();
        header.offset = offset;
        if header.timestamp_ns == 0 {
            header.timestamp_ns = crate::clock::now_ns();
        }
        let mut bytes = batch.to_vec();
        header.encode(&mut bytes);
        self.raw
            .propose(Vec::new(), bytes)
            .map_err(|e| ProposeError::Refused {
                reason: e.to_string(),
            })?;
        Ok(Proposal {
            base_offset: offset,
            next_offset: offset + u64::from(records),
            index: self.raw.raft.raft_log.last_index(),
            term: self.term(),
        })
    }

    /// Whether `proposal` is committed, still pending, or lost to another leader's entry.
    pub fn outcome(&self, proposal: &Proposal) -> Outcome {
        let log = &self.raw.raft.raft_log;
        match log.term(proposal.index) {
            Ok(term) if term == proposal.term => {
                if self.committed() >= proposal.index {
                    Outcome::Committed
                } else {
                    Outcome::Pending
                }
            }
            // Another term's entry at its index, or the index is gone (cut): never
            // committed as proposed.
            // Below the first index held: only a committed prefix is ever compacted.
            Err(raft::Error::Store(raft::StorageError::Compacted)) => Outcome::Committed,
            Ok(_) | Err(_) => Outcome::Lost,
        }
    }

    /// Persists what raft-rs has ready (entries, then hard state) before the messages that
    /// depend on it are queued, and follows the commit. In one call, for a caller that
    /// holds the driver meanwhile (tests); the replica's task uses the three steps.
    pub async fn handle_ready(&mut self) -> Result<(), ReplicaError> {
        while let Some(round) = self.begin_ready() {
            let storage = self.shared_store();
            round.persist(&storage).await?;
            self.finish_ready(round)?;
        }
        Ok(())
    }

    /// Takes what raft-rs has ready, queuing the messages that may go before the write
    /// (a leader's appends to followers: Raft allows them before its own write).
    /// `None` when nothing is ready. Propose nothing until [`ReplicaDriver::finish_ready`].
    pub fn begin_ready(&mut self) -> Option<ReadyRound> {
        if !self.raw.has_ready() {
            return None;
        }
        let mut ready = self.raw.ready();
        self.outbox.extend(ready.take_messages());
        Some(ReadyRound { ready })
    }

    /// After the round's entries are written: the hard state when its term or vote
    /// changed (the commit is not made durable on its own: a restarted replica learns it
    /// again from the leader, and raft-rs never needs it), the messages that depend on
    /// the write, and the commit.
    pub fn finish_ready(&mut self, round: ReadyRound) -> Result<(), ReplicaError> {
        let mut ready = round.ready;
        if let Some(hard) = ready.hs() {
            let stored = self
                .raw
                .store()
                .initial_state()
                .map_err(raft_error)?
                .hard_state;
            if hard.term != stored.term || hard.vote != stored.vote {
                self.storage.set_state(hard, None)?;
            }
        }
        self.outbox.extend(ready.take_persisted_messages());
        let mut light = self.raw.advance(ready);
        self.outbox.extend(light.take_messages());
        self.raw.advance_apply();
        self.follow_commit();
        Ok(())
    }

    /// Messages to send to peers (each names its `to`).
    pub fn take_messages(&mut self) -> Vec<Message> {
        std::mem::take(&mut self.outbox)
    }

    /// Where the next proposed batch starts: the log's end plus raft-rs's entries not in
    /// the log yet.
    fn next_offset(&self) -> u64 {
        let pending: u64 = self
            .raw
            .raft
            .raft_log
            .unstable
            .entries
            .iter()
            .map(records_of)
            .sum();
        self.storage.log().next_offset() + pending
    }

    /// Moves the high watermark to the end of the last committed client batch this log
    /// holds, and caps the log's readers there. Committed control batches after it stay
    /// above the watermark until a client batch follows them: no reader is ever served
    /// one, so a watermark past them would leave a caught-up consumer one offset short of
    /// it forever.
    fn follow_commit(&mut self) {
        let log = self.storage.log();
        let first = log.raft_range().map_or(1, |(first, _)| first);
        let mut index = self.committed();
        // Control batches are one per election or membership change: a few in a row.
        for _ in 0..CONTROL_RUN_MAX {
            match log.offset_of_raft_index(index) {
                Some(entry) if entry.control && index > first => index -= 1,
                Some(entry) => {
                    let end = if entry.control {
                        entry.offset
                    } else {
                        entry.next_offset
                    };
                    self.high_watermark = self.high_watermark.max(end);
                    break;
                }
                None => break,
            }
        }
        log.set_commit_cap(self.high_watermark);
    }
}

/// Offsets an entry takes in the log: a batch its records, any other entry one (a control
/// batch).
/// Control batches looked through back from the commit for the last client batch; past
/// it the watermark waits for the next round (there are never this many in a row).
const CONTROL_RUN_MAX: usize = 64;

/// One round of raft-rs's `Ready`, its entries to write ([`ReadyRound::persist`]).
pub struct ReadyRound {
    ready: Ready,
}

impl ReadyRound {
    /// Writes the round's entries (cutting a conflicting tail first); returns once they
    /// are acknowledged per the log's fsync policy.
    pub async fn persist(&self, storage: &ReplicaStorage) -> Result<(), ReplicaError> {
        storage.append(self.ready.entries()).await
    }
}

fn records_of(entry: &Entry) -> u64 {
    if entry.data.is_empty() || entry.get_entry_type() != raft::eraftpb::EntryType::EntryNormal {
        return 1;
    }
    BatchHeader::decode(&entry.data, &Default::default())
        .map_or(1, |h| u64::from((h.record_count & !CONTROL_BIT).max(1)))
}

fn raft_error(e: raft::Error) -> ReplicaError {
    ReplicaError::Raft {
        reason: e.to_string(),
    }
}
