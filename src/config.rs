//! Broker settings, shared read-only by every core.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::storage::{CompactionLimits, LogConfig};

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub data_dir: PathBuf,
    pub listen: SocketAddr,
    /// Executors (one per core).
    pub cores: usize,
    /// Also listen on `listen port + 1 + core` on each core, so shard-aware clients reach
    /// the owner of a partition directly.
    pub shard_ports: bool,
    /// Defaults of every partition log (fsync, segment size, limits).
    pub log: LogConfig,
    /// Connections open at once, all cores together.
    pub connections_max: usize,
    /// A connection that sends nothing for this long is closed.
    pub idle_timeout: Duration,
    /// A connection must say which protocol it speaks within this time.
    pub handshake_timeout: Duration,
    /// Topics the broker holds at most.
    pub topics_max: usize,
    /// Requests one connection may have in flight before the broker stops reading it.
    pub in_flight_max: usize,
    /// Longest long-poll a fetch may ask for.
    pub fetch_wait_max: Duration,
    /// When `cleanup = compact` partitions (and the offsets store) are compacted.
    pub compaction: CompactionConfig,
    /// Segment size of the offsets store's internal logs (compaction rewrites closed ones).
    pub offsets_segment_bytes: u64,
}

/// The background compaction trigger.
#[derive(Debug, Clone, Copy)]
pub struct CompactionConfig {
    /// Compact a partition once this share of its closed-segment bytes was written since
    /// its last pass (see `PartitionLog::dirty_ratio`).
    pub dirty_ratio_min: f64,
    /// At most one background pass per partition this often.
    pub interval_min: Duration,
    pub limits: CompactionLimits,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            dirty_ratio_min: 0.5,
            interval_min: Duration::from_secs(60),
            limits: CompactionLimits::default(),
        }
    }
}

impl Default for BrokerConfig {
    fn default() -> Self {
        BrokerConfig {
            data_dir: PathBuf::from("pagurus-data"),
            listen: "127.0.0.1:9092".parse().expect("valid address"),
            cores: 1,
            shard_ports: true,
            log: LogConfig::default(),
            connections_max: 10_000,
            idle_timeout: Duration::from_secs(300),
            handshake_timeout: Duration::from_secs(10),
            topics_max: 10_000,
            in_flight_max: 256,
            fetch_wait_max: Duration::from_secs(30),
            compaction: CompactionConfig::default(),
            offsets_segment_bytes: 16 * 1024 * 1024,
        }
    }
}

impl BrokerConfig {
    /// The port that reaches exactly `core`, if shard ports are on.
    pub fn shard_port(&self, core: usize) -> Option<u16> {
        if !self.shard_ports || self.listen.port() == 0 {
            return None;
        }
        u16::try_from(usize::from(self.listen.port()) + 1 + core).ok()
    }
}
