//! `pagurus serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::config::{BrokerConfig, CompactionConfig};
use crate::limits::Limits;
use crate::storage::{CompactionLimits, FsyncPolicy, LogConfig};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory holding topics, partitions and offsets.
    #[arg(long, env = "PAGURUS_DATA_DIR", default_value = "./pagurus-data")]
    pub data_dir: PathBuf,
    /// Address every core listens on (SO_REUSEPORT).
    #[arg(long, env = "PAGURUS_LISTEN", default_value = "127.0.0.1:9092")]
    pub listen: SocketAddr,
    /// Executors, one per CPU; 0 = every CPU the process may run on.
    #[arg(long, env = "PAGURUS_CORES", default_value_t = 0)]
    pub cores: usize,
    /// When a produce is acknowledged: always (after fdatasync), never (after the write to
    /// the page cache), or interval=MS (after the write; fdatasync at least every MS).
    #[arg(long, env = "PAGURUS_FSYNC", default_value = "always")]
    pub fsync: FsyncPolicy,
    /// Segment size at which the active segment rolls.
    #[arg(long, env = "PAGURUS_SEGMENT_BYTES", default_value_t = 256 * 1024 * 1024)]
    pub segment_bytes: u64,
    /// Largest payload of one batch.
    #[arg(long, env = "PAGURUS_MAX_PAYLOAD_BYTES", default_value_t = 50 * 1024 * 1024)]
    pub max_payload_bytes: u64,
    /// Largest key of one batch.
    #[arg(long, env = "PAGURUS_MAX_KEY_BYTES", default_value_t = 64 * 1024)]
    pub max_key_bytes: u64,
    /// Connections open at once (all cores).
    #[arg(long, env = "PAGURUS_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Close a connection that sends nothing for this long.
    #[arg(long, env = "PAGURUS_IDLE_TIMEOUT_MS", default_value_t = 300_000)]
    pub idle_timeout_ms: u64,
    /// Close a connection that has not named its protocol within this time.
    #[arg(long, env = "PAGURUS_HANDSHAKE_TIMEOUT_MS", default_value_t = 10_000)]
    pub handshake_timeout_ms: u64,
    /// Topics the broker holds at most.
    #[arg(long, env = "PAGURUS_MAX_TOPICS", default_value_t = 10_000)]
    pub max_topics: usize,
    /// Do not listen on the per-core ports (listen port + 1 + core).
    #[arg(long, env = "PAGURUS_NO_SHARD_PORTS")]
    pub no_shard_ports: bool,
    /// Compact a `cleanup = compact` partition once this share (0..=1) of its closed-segment
    /// bytes was written since its last compaction.
    #[arg(long, env = "PAGURUS_COMPACT_DIRTY_RATIO", default_value_t = 0.5, value_parser = parse_ratio)]
    pub compact_dirty_ratio: f64,
    /// At most one background compaction per partition this often.
    #[arg(long, env = "PAGURUS_COMPACT_INTERVAL_MS", default_value_t = 60_000)]
    pub compact_interval_ms: u64,
    /// Memory one compaction pass may use for its key map; past it, it keeps more.
    #[arg(long, env = "PAGURUS_COMPACT_KEY_MAP_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub compact_key_map_bytes: usize,
    /// Segment size of the consumer offsets store's internal logs.
    #[arg(long, env = "PAGURUS_OFFSETS_SEGMENT_BYTES", default_value_t = 16 * 1024 * 1024)]
    pub offsets_segment_bytes: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics (off when not given).
    #[arg(long, env = "PAGURUS_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
}

fn parse_ratio(s: &str) -> Result<f64, String> {
    let ratio: f64 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number: {e}"))?;
    if (0.0..=1.0).contains(&ratio) {
        Ok(ratio)
    } else {
        Err(format!("{ratio} is not between 0 and 1"))
    }
}

impl ServeArgs {
    pub fn config(&self) -> BrokerConfig {
        BrokerConfig {
            data_dir: self.data_dir.clone(),
            listen: self.listen,
            cores: self.cores,
            shard_ports: !self.no_shard_ports,
            log: LogConfig {
                segment_bytes: self.segment_bytes,
                fsync: self.fsync,
                limits: Limits {
                    max_payload_bytes: self.max_payload_bytes,
                    max_key_bytes: self.max_key_bytes,
                },
                ..LogConfig::default()
            },
            connections_max: self.max_connections,
            idle_timeout: Duration::from_millis(self.idle_timeout_ms),
            handshake_timeout: Duration::from_millis(self.handshake_timeout_ms),
            topics_max: self.max_topics,
            compaction: CompactionConfig {
                dirty_ratio_min: self.compact_dirty_ratio,
                interval_min: Duration::from_millis(self.compact_interval_ms),
                limits: CompactionLimits {
                    key_map_bytes_max: self.compact_key_map_bytes,
                },
            },
            offsets_segment_bytes: self.offsets_segment_bytes,
            metrics_listen: self.metrics_listen,
            ..BrokerConfig::default()
        }
    }
}

pub fn run(args: ServeArgs) -> Result<(), String> {
    crate::server::serve(args.config()).map_err(|e| e.to_string())
}
