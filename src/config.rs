//! Broker settings, shared read-only by every core.

use crate::security::config::SecurityConfig;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::config::ClusterConfig;
use crate::storage::{CompactionLimits, LogConfig};

/// A commit round's flush takes 150-300 µs on the disks measured: a core that polls that
/// long after its last work is awake when the flush completes and when the client's next
/// request comes.
pub const IDLE_POLL_DEFAULT: Duration = Duration::from_micros(200);
/// The longest idle poll `serve` accepts: past a few milliseconds a core only burns a CPU.
pub const IDLE_POLL_MAX: Duration = Duration::from_millis(10);

/// `--idle-poll-us` (serve and bench): at most [`IDLE_POLL_MAX`].
pub fn parse_idle_poll_us(s: &str) -> Result<u64, String> {
    let us: u64 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a number of microseconds: {e}"))?;
    let max = IDLE_POLL_MAX.as_micros() as u64;
    if us <= max {
        Ok(us)
    } else {
        Err(format!(
            "{us} µs is more than {max} µs: a longer poll only burns a CPU"
        ))
    }
}

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub data_dir: PathBuf,
    /// This node's id in a cluster (`--node-id`), kept in the data directory's marker and
    /// checked at every start; `None` for a one-node broker.
    pub node_id: Option<u32>,
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
    /// A request (native frame, HermitMQ v1 batch) must arrive whole within this time of
    /// its first bytes.
    pub request_timeout: Duration,
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
    /// Where core 0 serves Prometheus metrics at `/metrics`; none when `None`.
    pub metrics_listen: Option<SocketAddr>,
    /// How long a core with nothing to run keeps polling its rings (yielding the CPU at each
    /// turn) before it sleeps; zero sleeps at once. See docs/LATENCY.md, (j).
    pub idle_poll: Duration,
    /// This node's place in a cluster (`--cluster-listen`, `--cluster-peers`,
    /// `--advertised-host`); `None` outside one. With it, core 0 joins the cluster
    /// (`server::cluster`, docs/CLUSTER.md).
    pub cluster: Option<ClusterConfig>,
    /// Listeners beyond the main one, TLS, the authorizer (`security::config`).
    pub security: SecurityConfig,
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
            node_id: None,
            listen: "127.0.0.1:9092".parse().expect("valid address"),
            cores: 1,
            shard_ports: true,
            log: LogConfig::default(),
            connections_max: 10_000,
            idle_timeout: Duration::from_secs(300),
            request_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(10),
            topics_max: 10_000,
            in_flight_max: 256,
            fetch_wait_max: Duration::from_secs(30),
            compaction: CompactionConfig::default(),
            offsets_segment_bytes: 16 * 1024 * 1024,
            metrics_listen: None,
            idle_poll: IDLE_POLL_DEFAULT,
            cluster: None,
            security: SecurityConfig::default(),
        }
    }
}

impl BrokerConfig {
    /// The broker port (main or a core's) that `addr` would collide with, if any.
    pub fn broker_port_at(&self, addr: SocketAddr) -> Option<u16> {
        let same_host = addr.ip() == self.listen.ip()
            || addr.ip().is_unspecified()
            || self.listen.ip().is_unspecified();
        if !same_host || addr.port() == 0 {
            return None;
        }
        std::iter::once(Some(self.listen.port()))
            .chain((0..self.cores).map(|core| self.shard_port(core)))
            .flatten()
            .find(|&port| port == addr.port())
    }

    /// The port that reaches exactly `core`, if shard ports are on.
    pub fn shard_port(&self, core: usize) -> Option<u16> {
        if !self.shard_ports || self.listen.port() == 0 {
            return None;
        }
        u16::try_from(usize::from(self.listen.port()) + 1 + core).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_port_must_not_be_a_broker_port() {
        let config = BrokerConfig {
            listen: "127.0.0.1:9092".parse().unwrap(),
            cores: 2,
            ..BrokerConfig::default()
        };
        let at = |addr: &str| config.broker_port_at(addr.parse().unwrap());
        assert_eq!(at("127.0.0.1:9092"), Some(9092));
        assert_eq!(at("0.0.0.0:9094"), Some(9094), "core 1's shard port");
        assert_eq!(at("127.0.0.1:9095"), None, "past the last core");
        assert_eq!(at("10.1.1.1:9092"), None, "another address");
        assert_eq!(at("127.0.0.1:9464"), None);
        let no_shard_ports = BrokerConfig {
            shard_ports: false,
            ..config.clone()
        };
        assert_eq!(
            no_shard_ports.broker_port_at("127.0.0.1:9093".parse().unwrap()),
            None
        );
    }

    #[test]
    fn idle_poll_is_bounded() {
        assert_eq!(parse_idle_poll_us("0"), Ok(0));
        assert_eq!(parse_idle_poll_us("10000"), Ok(10_000));
        let long = parse_idle_poll_us("10001").unwrap_err();
        assert!(long.contains("more than 10000"), "{long}");
        let bad = parse_idle_poll_us("2ms").unwrap_err();
        assert!(bad.contains("not a number"), "{bad}");
    }
}
