//! What one core reports for a scrape: plain owned data, sent over the mesh to the core
//! that renders the answer.

use crate::metrics::io::IoSnapshot;
use crate::metrics::requests::RequestCount;

#[derive(Debug, Clone, Default)]
pub struct CoreSnapshot {
    pub core: usize,
    /// `(name, value)` of the core's counters and gauges (`metrics::counters::Metrics`).
    pub counters: Vec<(&'static str, u64)>,
    /// Request kinds with any count.
    pub requests: Vec<RequestCount>,
    pub io: IoSnapshot,
    /// Partitions this core owns.
    pub partitions: Vec<PartitionSnapshot>,
    /// Committed offsets held in this core's offsets shards.
    pub committed: Vec<CommittedOffset>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PartitionSnapshot {
    pub topic: String,
    pub partition: u32,
    pub log_start_offset: u64,
    /// The high watermark: offsets below it are visible to consumers.
    pub log_end_offset: u64,
    pub size_bytes: u64,
    pub segments: u64,
    pub batches_in: u64,
    pub records_in: u64,
    pub bytes_in: u64,
    pub records_out: u64,
    pub bytes_out: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub group: String,
    pub topic: String,
    pub partition: u32,
    /// The next offset the group will consume.
    pub offset: u64,
}
