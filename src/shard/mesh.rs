//! Calls between cores over glommio's channel mesh.
//!
//! Every message is an [`Envelope`]: a [`Call`] to the core that owns the data, or the
//! [`Answer`] coming back. A caller parks on a reply slot keyed by a per-core call id; the
//! core's mesh receiver tasks fill the slot and wake it. A caller that goes away (its
//! connection closed) removes its slot, and a late answer is dropped.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::poll_fn;
use std::path::PathBuf;
use std::task::{Poll, Waker};

use bytes::Bytes;
use glommio::channels::channel_mesh::Senders;

use crate::protocol::native::{ErrorCode, OffsetSpec};
use crate::shard::Failure;
use crate::shard::topics::TopicMeta;

/// Capacity of each mesh channel; glommio stalls badly with small ones (issue 555).
pub const MESH_CHANNEL_CAPACITY: usize = 4096;

/// A request for another core.
#[derive(Debug)]
pub enum Call {
    /// Append batches (validated `(crc, batch)` pairs, as in a produce request).
    Produce {
        topic: String,
        partition: u32,
        count: u32,
        batches: Bytes,
    },
    /// Plan a read, waiting up to `max_wait_ms` for data if there is none yet.
    Fetch {
        topic: String,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait_ms: u32,
    },
    ListOffsets {
        topic: String,
        partition: u32,
        spec: OffsetSpec,
    },
    PartitionState {
        topic: String,
        partition: u32,
    },
    /// To the controller (core 0).
    CreateTopic {
        meta: TopicMeta,
        if_not_exists: bool,
    },
    /// To the controller (core 0).
    DeleteTopic {
        name: String,
    },
    /// From the controller to every core: open the partitions of a new topic you own.
    OpenPartitions {
        meta: TopicMeta,
    },
    /// From the controller to every core, once all opened theirs: the topic exists.
    PublishTopic {
        meta: TopicMeta,
    },
    /// From the controller to every core: forget a topic, close its partitions.
    DropTopic {
        name: String,
    },
    /// To the owner of the key's offsets shard.
    CommitOffset {
        key: Vec<u8>,
        offset: u64,
    },
    /// To the owner of the key's offsets shard.
    FetchOffset {
        key: Vec<u8>,
    },
    /// To every core: the committed offsets of one group (or all) in its shards.
    GroupOffsets {
        group: Option<String>,
    },
    /// To the owner: run a compaction pass on the partition now.
    Compact {
        topic: String,
        partition: u32,
    },
    /// To every core: its metrics, for a scrape.
    MetricsSnapshot,
}

/// Where a fetch's bytes are: a range of a segment file, with the batches' CRCs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendPlan {
    pub wal_path: PathBuf,
    /// (device, inode) the path must still name; a descriptor of another file is stale.
    pub file_id: crate::storage::segment::FileId,
    pub position: u64,
    pub length: u64,
    pub crcs: Vec<u32>,
    /// Records in the range.
    pub records: u64,
    /// Offset after the last batch in the range (the requested offset if it is empty).
    pub next_offset: u64,
    pub high_watermark: u64,
    pub log_start_offset: u64,
    /// The range is in the active segment, whose pages are most likely cached.
    pub hot: bool,
}

#[derive(Debug)]
pub enum Answer {
    Produced {
        base_offset: u64,
        next_offset: u64,
    },
    Plan(SendPlan),
    Offset(u64),
    PartitionState {
        log_start_offset: u64,
        high_watermark: u64,
    },
    /// (group, topic, partition, committed offset).
    GroupOffsets(Vec<(String, String, u32, u64)>),
    Compacted(crate::storage::CompactionOutcome),
    Metrics(Box<crate::metrics::snapshot::CoreSnapshot>),
    Done,
    Failed(Failure),
}

impl Answer {
    /// `Ok` for `Done`, the failure for `Failed`, an internal error for anything else.
    pub fn done(self) -> Result<(), Failure> {
        match self {
            Answer::Done => Ok(()),
            Answer::Failed(failure) => Err(failure),
            other => Err(other.unexpected()),
        }
    }

    pub fn unexpected(&self) -> Failure {
        Failure::new(ErrorCode::Internal, format!("unexpected answer {self:?}"))
    }
}

#[derive(Debug)]
pub enum Envelope {
    Call { from: usize, id: u64, call: Call },
    Answer { id: u64, answer: Answer },
}

#[derive(Default)]
struct Slot {
    answer: Option<Answer>,
    waker: Option<Waker>,
}

/// This core's end of the mesh.
pub struct Mesh {
    core: usize,
    senders: Option<Senders<Envelope>>,
    next_id: Cell<u64>,
    slots: RefCell<HashMap<u64, Slot>>,
}

impl Mesh {
    pub fn new(core: usize, senders: Option<Senders<Envelope>>) -> Mesh {
        Mesh {
            core,
            senders,
            next_id: Cell::new(0),
            slots: RefCell::new(HashMap::new()),
        }
    }

    /// Sends `call` to core `to` and waits for its answer.
    pub async fn call(&self, to: usize, call: Call) -> Answer {
        match self.start(to, call).await {
            Ok(id) => self.finish(id).await,
            Err(failure) => Answer::Failed(failure),
        }
    }

    /// Sends `call` to core `to` now; the answer is collected with [`Mesh::finish`] (or
    /// dropped with [`Mesh::forget`]). Splitting the two lets a connection send calls in
    /// request order and collect answers later, keeping several in flight.
    pub async fn start(&self, to: usize, call: Call) -> Result<u64, Failure> {
        assert_ne!(to, self.core, "local calls are handled inline");
        let Some(senders) = &self.senders else {
            return Err(Failure::new(
                ErrorCode::Internal,
                "no mesh on a single core",
            ));
        };
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        self.slots.borrow_mut().insert(id, Slot::default());
        if senders
            .send_to(
                to,
                Envelope::Call {
                    from: self.core,
                    id,
                    call,
                },
            )
            .await
            .is_err()
        {
            self.forget(id);
            return Err(Failure::new(
                ErrorCode::ShuttingDown,
                format!("core {to} is gone"),
            ));
        }
        Ok(id)
    }

    /// Waits for the answer to call `id`.
    pub async fn finish(&self, id: u64) -> Answer {
        let _forget = SlotGuard { mesh: self, id };
        poll_fn(|cx| {
            let mut slots = self.slots.borrow_mut();
            let Some(slot) = slots.get_mut(&id) else {
                return Poll::Ready(Answer::Failed(Failure::new(
                    ErrorCode::Internal,
                    "answer slot vanished",
                )));
            };
            match slot.answer.take() {
                Some(answer) => Poll::Ready(answer),
                None => {
                    slot.waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await
    }

    /// True when the answer to call `id` has arrived.
    pub fn is_answered(&self, id: u64) -> bool {
        self.slots
            .borrow()
            .get(&id)
            .is_some_and(|slot| slot.answer.is_some())
    }

    /// Gives up on call `id`; a late answer is dropped.
    pub fn forget(&self, id: u64) {
        self.slots.borrow_mut().remove(&id);
    }

    /// Sends an answer back to the core that called.
    pub async fn answer(&self, to: usize, id: u64, answer: Answer) {
        if let Some(senders) = &self.senders
            && senders
                .send_to(to, Envelope::Answer { id, answer })
                .await
                .is_err()
        {
            tracing::debug!(to, id, "answer dropped: the calling core is gone");
        }
    }

    /// Hands an arrived answer to its caller, if it still waits.
    pub fn deliver(&self, id: u64, answer: Answer) {
        if let Some(slot) = self.slots.borrow_mut().get_mut(&id) {
            slot.answer = Some(answer);
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        }
    }
}

struct SlotGuard<'a> {
    mesh: &'a Mesh,
    id: u64,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        self.mesh.forget(self.id);
    }
}
