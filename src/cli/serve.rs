//! `pagurus serve`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::cluster::config::{ClusterConfig, ClusterFlags, Peer};
use crate::config::{BrokerConfig, CompactionConfig, IDLE_POLL_DEFAULT, parse_idle_poll_us};
use crate::limits::Limits;
use crate::storage::{CompactionLimits, FsyncPolicy, LogConfig};

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Directory holding topics, partitions and offsets.
    #[arg(long, env = "PAGURUS_DATA_DIR", default_value = "./pagurus-data")]
    pub data_dir: PathBuf,
    /// This node's id in a cluster (1..=32767). The data directory keeps it from the
    /// first start and is refused to any other id, or to a start without one.
    #[arg(long, env = "PAGURUS_NODE_ID", value_parser = parse_node_id)]
    pub node_id: Option<u32>,
    /// Address every core listens on (SO_REUSEPORT) as a PLAINTEXT listener: IP:PORT, or
    /// HOST:PORT resolved at start (its first IPv4 address, else its first). Without it
    /// and without --listener: 127.0.0.1:9092.
    #[arg(long, env = "PAGURUS_LISTEN", value_parser = parse_address)]
    pub listen: Option<SocketAddr>,
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
    /// Close a connection whose request (native frame, HermitMQ v1 batch) has not arrived
    /// whole this long after its first bytes.
    #[arg(long, env = "PAGURUS_REQUEST_TIMEOUT_MS", default_value_t = 30_000)]
    pub request_timeout_ms: u64,
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
    #[arg(long, env = "PAGURUS_METRICS_LISTEN", value_name = "ADDR", value_parser = parse_address)]
    pub metrics_listen: Option<SocketAddr>,
    /// Microseconds a core with nothing to do keeps polling (yielding its CPU to any other
    /// thread) before it sleeps: it is then awake when a flush completes or a request comes,
    /// instead of paying a wake-up. 0 sleeps at once (no CPU spent polling).
    #[arg(long, env = "PAGURUS_IDLE_POLL_US", default_value_t = IDLE_POLL_DEFAULT.as_micros() as u64,
          value_parser = parse_idle_poll_us)]
    pub idle_poll_us: u64,
    /// Address this node listens on for its cluster peers (IP:PORT); needs --node-id and
    /// --cluster-peers. Core 0 runs the node's transport and controller there (docs/CLUSTER.md).
    #[arg(long, env = "PAGURUS_CLUSTER_LISTEN", value_name = "ADDR", value_parser = parse_address)]
    pub cluster_listen: Option<SocketAddr>,
    /// Every member of the cluster, this node included: ID=HOST:PORT,ID=HOST:PORT,... with
    /// ids in 1..=32767 and each member's --cluster-listen port.
    #[arg(long, env = "PAGURUS_CLUSTER_PEERS", value_name = "LIST", value_parser = parse_peers)]
    pub cluster_peers: Option<PeerList>,
    /// Host clients are told to reach this node at (a name or IP, no port); default: the
    /// host of --listen. Needs the cluster flags.
    #[arg(long, env = "PAGURUS_ADVERTISED_HOST", value_name = "HOST", value_parser = parse_advertised_host)]
    pub advertised_host: Option<String>,
    /// Join a running cluster as a new member: its cluster id, as `pagurus cluster
    /// add-node` prints it (run that first, on any node). The node starts from the
    /// controller leader's snapshot; --cluster-peers lists the members and this node.
    #[arg(long, env = "PAGURUS_CLUSTER_JOIN", value_name = "CLUSTER_ID")]
    pub cluster_join: Option<crate::cluster::ClusterId>,
    #[command(flatten)]
    pub security: super::serve_security::SecurityArgs,
}

/// `--cluster-peers`' value: the whole list is one flag value (a bare `Vec` would make clap
/// take the flag once per peer).
#[derive(Debug, Clone)]
pub struct PeerList(pub Vec<Peer>);

fn parse_peers(s: &str) -> Result<PeerList, String> {
    crate::cluster::config::parse_peers(s)
        .map(PeerList)
        .map_err(|e| e.to_string())
}

fn parse_advertised_host(s: &str) -> Result<String, String> {
    crate::cluster::config::parse_advertised_host(s).map_err(|e| e.to_string())
}

/// `IP:PORT`, or `HOST:PORT` resolved: the first IPv4 address it has (what `localhost`
/// means to most clients), else the first.
fn parse_address(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(addr) = s.parse() {
        return Ok(addr);
    }
    if s.rsplit_once(':')
        .is_none_or(|(_, port)| port.parse::<u16>().is_err())
    {
        return Err(format!("{s:?} is not HOST:PORT"));
    }
    let addrs: Vec<SocketAddr> = s
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {s:?}: {e}"))?
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("{s:?} resolves to no address"))
}

fn parse_node_id(s: &str) -> Result<u32, String> {
    use crate::storage::marker::NODE_ID_MAX;
    let id: u32 = s
        .parse()
        .map_err(|e| format!("{s:?} is not a node id: {e}"))?;
    if (1..=NODE_ID_MAX).contains(&id) {
        Ok(id)
    } else {
        Err(format!("node id {id} is not in 1..={NODE_ID_MAX}"))
    }
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
    /// The broker's settings, or why the flags do not go together.
    pub fn config(&self) -> Result<BrokerConfig, String> {
        let (listen, security) = self
            .security
            .config(self.listen, BrokerConfig::default().listen)?;
        let config = BrokerConfig {
            data_dir: self.data_dir.clone(),
            node_id: self.node_id,
            listen,
            security,
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
            request_timeout: Duration::from_millis(self.request_timeout_ms),
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
            idle_poll: Duration::from_micros(self.idle_poll_us),
            ..BrokerConfig::default()
        };
        let cluster = ClusterConfig::from_flags(ClusterFlags {
            node_id: self.node_id,
            listen: self.cluster_listen,
            peers: self.cluster_peers.clone().map(|p| p.0),
            advertised_host: self.advertised_host.clone(),
            join: self.cluster_join,
        })
        .map_err(|e| e.to_string())?;
        if let Some(cluster) = &cluster {
            cluster.check_ports(&config).map_err(|e| e.to_string())?;
        }
        Ok(BrokerConfig { cluster, ..config })
    }
}

pub fn run(args: ServeArgs) -> Result<(), String> {
    let config = args.config()?;
    preflight(&config)?;
    crate::server::serve(config).map_err(|e| e.to_string())
}

/// Locked memory glommio refuses to start an executor under.
const MEMLOCK_BYTES_MIN: u64 = 512 * 1024;
/// Locked memory each executor registers for io_uring buffers (glommio's default
/// `io_memory`); under it, it runs on a slower path.
const MEMLOCK_BYTES_PER_CORE: u64 = 10 * 1024 * 1024;

/// What is checked before any executor starts, so a start that cannot work fails at once
/// with one clear line instead of hanging or failing inside the cores.
fn preflight(config: &BrokerConfig) -> Result<(), String> {
    let cpus = core_affinity::get_core_ids().map_or(0, |ids| ids.len());
    if cpus > 0 && config.cores > cpus {
        return Err(format!(
            "--cores {} but this process may run on {cpus} CPUs: use --cores {cpus} or fewer (0: one per CPU)",
            config.cores
        ));
    }
    let cores = if config.cores == 0 {
        cpus.max(1)
    } else {
        config.cores
    };
    check_memlock(cores)?;
    probe_ports(config, cores)
}

/// Refuses a locked-memory limit glommio cannot start under, and warns once about one
/// its io_uring buffers do not fit in (root is exempt from the kernel's limit, not from
/// glommio's check).
fn check_memlock(cores: usize) -> Result<(), String> {
    use nix::sys::resource::{Resource, getrlimit};
    let Ok((soft, _hard)) = getrlimit(Resource::RLIMIT_MEMLOCK) else {
        return Ok(());
    };
    let raise = super::io_buffers_log::RAISE;
    if soft < MEMLOCK_BYTES_MIN {
        return Err(format!(
            "the locked-memory limit is {} KiB, under the {} KiB io_uring needs: {raise}",
            soft / 1024,
            MEMLOCK_BYTES_MIN / 1024
        ));
    }
    let wanted = MEMLOCK_BYTES_PER_CORE.saturating_mul(cores as u64);
    if soft < wanted && !nix::unistd::geteuid().is_root() {
        // glommio's own warnings of the failed registration are then dropped (one per core).
        super::io_buffers_log::WARNED.store(true, std::sync::atomic::Ordering::Release);
        tracing::warn!(
            limit_kib = soft / 1024,
            wanted_kib = wanted / 1024,
            "the locked-memory limit is under what io_uring's buffers need, so I/O takes a slower path: {raise}"
        );
    }
    Ok(())
}

/// Every core binds the listen address (and its shard port) with SO_REUSEPORT, and so does
/// the cluster transport its `--cluster-listen`, so a second broker on the same port would
/// silently share it (a second node on a cluster port would take half the peers'
/// connections). A connection to each address tells whether some process listens there
/// already. (A plain bind would also fail on the connections a killed broker left closing
/// on its port, and refuse a restart.)
fn probe_ports(config: &BrokerConfig, cores: usize) -> Result<(), String> {
    let mut addrs = vec![config.listen];
    addrs.extend((0..cores).filter_map(|core| {
        let mut addr = config.listen;
        addr.set_port(config.shard_port(core)?);
        Some(addr)
    }));
    addrs.extend(config.cluster.as_ref().map(|cluster| cluster.listen));
    for addr in addrs {
        if addr.port() == 0 {
            continue;
        }
        let mut target = addr;
        if target.ip().is_unspecified() {
            target.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        if std::net::TcpStream::connect_timeout(&target, PROBE_TIMEOUT).is_err() {
            continue;
        }
        // A live process that holds the listening socket: refused at once, naming it.
        if let Listener::Process(pid) = listener(addr.port()) {
            let name = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            return Err(format!(
                "cannot listen on {addr}: address in use by another process (pid {pid} {})",
                name.trim()
            ));
        }
        if !still_accepting(target) {
            continue;
        }
        return Err(format!(
            "cannot listen on {addr}: address in use by another process"
        ));
    }
    Ok(())
}

/// Who holds the listening TCP sockets on a port.
#[derive(Debug, PartialEq, Eq)]
enum Listener {
    /// This process (its id) holds one in a descriptor.
    Process(u32),
    /// No process that could be read holds one: a killed broker's sockets, or another
    /// user's process whose descriptors cannot be read.
    Unknown,
}

/// The process holding a listening socket on `port`: its inode from /proc/net/tcp and
/// tcp6, then the `socket:[INODE]` link among the descriptors of /proc/*/fd.
fn listener(port: u16) -> Listener {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
            let fields: Vec<&str> = line.split_whitespace().collect();
            let listening = fields.get(3) == Some(&"0A");
            let on_port = fields
                .get(1)
                .and_then(|local| local.rsplit_once(':'))
                .and_then(|(_, hex)| u16::from_str_radix(hex, 16).ok())
                == Some(port);
            if let (true, true, Some(inode)) = (listening, on_port, fields.get(9)) {
                inodes.push(format!("socket:[{inode}]"));
            }
        }
    }
    if inodes.is_empty() {
        return Listener::Unknown;
    }
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Listener::Unknown;
    };
    for process in processes.flatten() {
        let Some(pid) = process.file_name().to_str().and_then(|p| p.parse().ok()) else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
            continue;
        };
        for fd in fds.flatten() {
            let link = std::fs::read_link(fd.path()).unwrap_or_default();
            if inodes.iter().any(|i| link.as_os_str() == i.as_str()) {
                return Listener::Process(pid);
            }
        }
    }
    Listener::Unknown
}

/// Whether something keeps accepting connections on `target` for `PROBE_SETTLE`. A killed
/// broker's listening sockets outlive its process for a moment (the kernel tears down its
/// io_uring instances asynchronously, and they hold the sockets, in no process's
/// descriptors), so a listener no process holds is not yet another process: a restart right
/// after `kill -9` must not be refused. (A live process is found by [`listener`] at once;
/// this wait is for the rest, another user's process among them.)
fn still_accepting(target: std::net::SocketAddr) -> bool {
    let deadline = std::time::Instant::now() + PROBE_SETTLE;
    loop {
        if std::net::TcpStream::connect_timeout(&target, PROBE_TIMEOUT).is_err() {
            return false;
        }
        if std::time::Instant::now() >= deadline {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// Longest wait for a connection to an address that may be in use.
const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a listener must keep accepting before it counts as another process (a killed
/// broker's sockets close within milliseconds of its exit).
const PROBE_SETTLE: Duration = Duration::from_secs(3);
