//! The broker process: one glommio executor per core, listeners, connections, shutdown.
//!
//! - [`connection`]: first-byte protocol selection and the connection limit.
//! - [`session`]: a connection of any protocol, and its one reader/writer pipeline.
//! - [`native`], [`kafka`]: the native and Kafka front-ends (a codec, a handler per request).
//! - [`hermit`]: HermitMQ v1 producers (a front-end), consumers and commits.
//! - [`handoff`]: moving a v1 connection to the core that owns its partition.
//! - [`sendfile`]: zero-copy sends of segment bytes.
//! - [`ktls`]: moving a TLS connection into kernel TLS after its handshake.
//! - [`io`]: socket reads and writes shared by a connection's two tasks.
//! - [`scrape`]: the `/metrics` endpoint.

mod background;
mod cluster;
pub mod connection;
pub mod handoff;
pub mod hermit;
pub mod io;
pub mod kafka;
pub mod ktls;
mod listeners;
pub mod native;
pub mod read_buf;
pub mod scrape;
pub mod sendfile;
pub mod session;
pub mod stream;
pub mod time_seek;

use std::fs::File;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use glommio::channels::channel_mesh::MeshBuilder;
use glommio::net::TcpListener;
use glommio::{LocalExecutorBuilder, Placement};
use tracing::{error, info, warn};

use crate::config::BrokerConfig;
use crate::security::runtime::Security;
use crate::server::background::{background_retention, background_sync};
use crate::server::listeners::{
    accept_loop, bind, check_listener_ports, open_security, reload_tls, spawn_connection,
};
use crate::server::session::Accepted;
use crate::shard::mesh::{Envelope, MESH_CHANNEL_CAPACITY, Mesh};
use crate::shard::{Shard, topics};

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot use data directory {path}: {source}")]
    DataDir {
        path: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    NotDataDir(String),
    #[error("data directory {0} is in use by another pagurus process")]
    DataDirLocked(String),
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("cannot start executor for core {core}: {reason}")]
    Executor { core: usize, reason: String },
    #[error("core {core} failed: {reason}")]
    Core { core: usize, reason: String },
    #[error("bad configuration: {0}")]
    Config(String),
    #[error("cannot join the cluster: {0}")]
    Cluster(String),
}

/// Longest wait for the cores to connect their mesh at start.
const MESH_JOIN_TIMEOUT: Duration = Duration::from_secs(10);

/// How often each core looks at the stop flag set by the signal handler.
const STOP_POLL: Duration = Duration::from_millis(20);
/// How long a stopping core waits for its connections to answer what is in flight.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the broker until SIGINT or SIGTERM, then shuts down cleanly.
pub fn serve(mut config: BrokerConfig) -> Result<(), ServeError> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| ServeError::Config(format!("cannot install signal handler: {e}")))?;
    }
    serve_until(&mut config, stop)
}

/// Runs the broker until `stop` becomes true.
pub fn serve_until(config: &mut BrokerConfig, stop: Arc<AtomicBool>) -> Result<(), ServeError> {
    config
        .log
        .validate()
        .map_err(|e| ServeError::Config(e.to_string()))?;
    let data_dir = config.data_dir.display().to_string();
    // Durable in its parent at first start, and its own entries durable at every start.
    crate::storage::fs::prepare_data_dir(&config.data_dir).map_err(|e| ServeError::DataDir {
        path: data_dir.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    // Before anything is written in it (even `.lock`): a directory of someone else's
    // files, or of a newer format, is refused as it is.
    let marked = crate::storage::marker::check_and_mark(&config.data_dir)
        .map_err(|e| ServeError::NotDataDir(e.to_string()))?;
    let node = crate::storage::marker::check_node(&config.data_dir, config.node_id)
        .map_err(|e| ServeError::NotDataDir(e.to_string()))?;
    // Absolute from here on: glommio's directory handles fail on relative paths ("Bad file
    // descriptor" opening a partition directory on a core other than the first).
    config.data_dir =
        std::fs::canonicalize(&config.data_dir).map_err(|source| ServeError::DataDir {
            path: data_dir.clone(),
            source,
        })?;
    let _lock = lock_data_dir(config)?;
    topics::empty_trash(&config.data_dir);
    let security = open_security(config)?;
    // SIGHUP: read the TLS files again (core 0 does it between its stop polls).
    let reload_tls = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGHUP, Arc::clone(&reload_tls))
        .map_err(|e| ServeError::Config(format!("cannot install signal handler: {e}")))?;

    let cpus: Vec<usize> = core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|id| id.id).collect())
        .unwrap_or_default();
    if config.cores == 0 {
        config.cores = cpus.len().max(1);
    }
    let cores = config.cores;
    check_listener_ports(config)?;
    info!(pid = std::process::id(), cores, data_dir = %config.data_dir.display(), fsync = %config.log.fsync, idle_poll_us = config.idle_poll.as_micros() as u64, "pagurus starting");
    marked.log(&config.data_dir);
    node.log(&config.data_dir);
    let config = Arc::new(config.clone());
    let mesh = MeshBuilder::<Envelope, _>::full(cores, MESH_CHANNEL_CAPACITY);
    let replica_mesh = config
        .cluster
        .as_ref()
        .map(|_| cluster::ReplicaMesh::full(cores, MESH_CHANNEL_CAPACITY));
    let barriers = Barriers {
        cores,
        stop: Arc::clone(&stop),
        ready: Arc::new(AtomicUsize::new(0)),
        finished: Arc::new(AtomicUsize::new(0)),
    };
    let connections = Arc::new(AtomicUsize::new(0));
    let cluster_view = cluster::view(&config);
    let mut metrics_listener = bind_metrics(&config)?;

    let mut handles = Vec::with_capacity(cores);
    for index in 0..cores {
        // More cores than CPUs (tests, small machines) share CPUs round-robin.
        let placement = match cpus.get(index % cpus.len().max(1)) {
            Some(&cpu) if !cpus.is_empty() => Placement::Fixed(cpu),
            _ => Placement::Unbound,
        };
        let cpu = match placement {
            Placement::Fixed(cpu) => Some(cpu),
            _ => None,
        };
        let (config, mesh, barriers) = (Arc::clone(&config), mesh.clone(), barriers.clone());
        let replica_mesh = replica_mesh.clone();
        let connections = Arc::clone(&connections);
        let security = Arc::clone(&security);
        let reload_tls = Arc::clone(&reload_tls);
        let cluster = Arc::clone(&cluster_view);
        // Core 0 serves the metrics endpoint (its answers cover every core).
        let metrics = if index == 0 {
            metrics_listener.take()
        } else {
            None
        };
        let mut builder = LocalExecutorBuilder::new(placement)
            .name(&format!("pagurus-{index}"))
            .preempt_timer(Duration::from_millis(5));
        if !config.idle_poll.is_zero() {
            builder = builder.spin_before_park(config.idle_poll);
        }
        let handle = builder
            .spawn(move || async move {
                let core = Core {
                    config,
                    security,
                    reload_tls,
                    cpu,
                    connections,
                    cluster,
                };
                run_core(core, (mesh, replica_mesh), barriers, metrics).await
            })
            .map_err(|e| ServeError::Executor {
                core: index,
                reason: e.to_string(),
            })?;
        handles.push(handle);
    }
    let mut result = Ok(());
    for (index, handle) in handles.into_iter().enumerate() {
        let outcome = handle
            .join()
            .map_err(|e| ServeError::Core {
                core: index,
                reason: e.to_string(),
            })
            .and_then(|r| r);
        if let Err(e) = outcome {
            error!(core = index, error = %e, "core stopped with an error");
            // One core failing stops the others, so the process exits instead of serving
            // half of its partitions.
            stop.store(true, Ordering::Release);
            if result.is_ok() {
                result = Err(e);
            }
        }
    }
    if result.is_ok() {
        info!("broker stopped cleanly");
    }
    result
}

/// Binds the metrics address now, so a bad or busy one fails the start with a clear error.
/// Without SO_REUSEPORT: a second process (or the broker's own port) on the same address is
/// refused instead of silently sharing it.
fn bind_metrics(config: &BrokerConfig) -> Result<Option<std::net::TcpListener>, ServeError> {
    let Some(addr) = config.metrics_listen else {
        return Ok(None);
    };
    if let Some(port) = config.broker_port_at(addr) {
        return Err(ServeError::Config(format!(
            "--metrics-listen {addr} is also a broker port ({port}); choose another port"
        )));
    }
    let listener = std::net::TcpListener::bind(addr).map_err(|source| ServeError::Listen {
        addr: format!("{addr} (metrics)"),
        source,
    })?;
    info!(addr = %listener.local_addr().unwrap_or(addr), "metrics listening");
    Ok(Some(listener))
}

fn lock_data_dir(config: &BrokerConfig) -> Result<nix::fcntl::Flock<File>, ServeError> {
    let path = config.data_dir.join(".lock");
    let file = File::create(&path).map_err(|source| ServeError::DataDir {
        path: path.display().to_string(),
        source,
    })?;
    nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .map_err(|_| ServeError::DataDirLocked(config.data_dir.display().to_string()))
}

/// Start and stop barriers shared by the cores. Every core passes each barrier exactly once,
/// also when it fails, so no core waits forever for one that died; a failing core also
/// raises `stop`, so the broker exits rather than serving half of its partitions.
#[derive(Clone)]
struct Barriers {
    cores: usize,
    stop: Arc<AtomicBool>,
    ready: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
}

impl Barriers {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Waits until every core is ready or the broker is stopping.
    async fn all_ready(&self) {
        while self.ready.load(Ordering::Acquire) < self.cores && !self.stopping() {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn all_finished(&self) {
        while self.finished.load(Ordering::Acquire) < self.cores {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// What a core is given to run with.
struct Core {
    config: Arc<BrokerConfig>,
    security: Arc<Security>,
    /// Raised by SIGHUP: the TLS files are read again.
    reload_tls: Arc<AtomicBool>,
    cpu: Option<usize>,
    /// Connections open on every core together (for the connection limit).
    connections: Arc<AtomicUsize>,
    /// What the node knows of its cluster, shared by the cores.
    cluster: Arc<crate::cluster::status::ClusterView>,
}

/// A core's meshes: the shard's calls, and (on a cluster node) its replicas' messages.
type Meshes = (
    MeshBuilder<Envelope, glommio::channels::channel_mesh::Full>,
    Option<cluster::ReplicaMesh>,
);

async fn run_core(
    core: Core,
    mesh: Meshes,
    barriers: Barriers,
    metrics: Option<std::net::TcpListener>,
) -> Result<(), ServeError> {
    let passed = Passed::default();
    let result = run_core_phases(&core, mesh, &barriers, &passed, metrics).await;
    if result.is_err() {
        barriers.stop.store(true, Ordering::Release);
        if !passed.ready.get() {
            barriers.ready.fetch_add(1, Ordering::AcqRel);
        }
        if !passed.finished.get() {
            barriers.finished.fetch_add(1, Ordering::AcqRel);
        }
    }
    result
}

async fn run_core_phases(
    given: &Core,
    (mesh, replica_mesh): Meshes,
    barriers: &Barriers,
    passed: &Passed,
    metrics: Option<std::net::TcpListener>,
) -> Result<(), ServeError> {
    let (config, cpu) = (&given.config, given.cpu);
    // An Option field is left out when None (no `Some(0)` in the logs).
    tracing::debug!(cpu, "executor started; joining the mesh");
    // glommio's mesh join has been seen to hang (both executors parked, a cross-thread
    // wake-up lost) when many executors start at once on a loaded machine. It normally takes
    // microseconds; past MESH_JOIN_TIMEOUT the broker gives up and exits non-zero, so a
    // supervisor (or the test harness) starts it again instead of leaving it hung.
    let joined = async { Some(mesh.join().await) }
        .or(async {
            glommio::timer::sleep(MESH_JOIN_TIMEOUT).await;
            None
        })
        .await;
    let (senders, receivers) = match joined {
        Some(Ok(joined)) => joined,
        Some(Err(e)) => {
            return Err(ServeError::Executor {
                core: usize::MAX,
                reason: format!("mesh join failed: {e}"),
            });
        }
        None => {
            return Err(ServeError::Executor {
                core: usize::MAX,
                reason: format!(
                    "the cores did not join their mesh within {MESH_JOIN_TIMEOUT:?}; start again"
                ),
            });
        }
    };
    let core = senders.peer_id();
    let mesh = Mesh::new(core, Some(senders));
    let shard = Rc::new(cluster::shard(core, config, mesh, &given.cluster));
    shard.start_receivers(receivers);
    shard.set_cluster_view(Arc::clone(&given.cluster));
    let replicas = cluster::replica_host(&shard, &given.cluster, replica_mesh).await?;

    shard.load().await.map_err(|e| ServeError::Core {
        core,
        reason: e.to_string(),
    })?;
    barriers.ready.fetch_add(1, Ordering::AcqRel);
    passed.ready.set(true);
    // Serve only when every core has recovered its partitions, so no request meets a
    // partition that is still being opened.
    barriers.all_ready().await;

    let served = serve_core(&shard, given, barriers, metrics, replicas.as_ref()).await;
    if let Err(error) = &served {
        error!(core, %error, "core cannot serve; stopping the broker");
        barriers.stop.store(true, Ordering::Release);
    }
    shard.close_all().await;
    // Keep answering mesh calls until every core has closed its partitions.
    barriers.finished.fetch_add(1, Ordering::AcqRel);
    passed.finished.set(true);
    barriers.all_finished().await;
    info!(core, counters = %shard.metrics.nonzero_summary(), "core stopped");
    served
}

/// Which barriers a core has passed.
#[derive(Default)]
struct Passed {
    ready: std::cell::Cell<bool>,
    finished: std::cell::Cell<bool>,
}

/// Listens and serves until the broker stops; then stops accepting and lets connections
/// answer what they have in flight.
async fn serve_core(
    shard: &Rc<Shard>,
    given: &Core,
    barriers: &Barriers,
    metrics: Option<std::net::TcpListener>,
    replicas: Option<&Rc<crate::cluster::replica::host::ReplicaHost>>,
) -> Result<(), ServeError> {
    let (config, cpu, connections) = (&given.config, given.cpu, &given.connections);
    let core = shard.core;
    if barriers.stopping() {
        return Ok(());
    }
    if let Some(listener) = metrics {
        use std::os::fd::{FromRawFd, IntoRawFd};
        // SAFETY: the descriptor is a bound, listening TCP socket that nothing else owns.
        let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
        glommio::spawn_local(scrape::serve_metrics(Rc::clone(shard), listener)).detach();
    }
    // Core 0 joins the cluster before it listens for clients.
    let cluster = cluster::start(shard, replicas).await?;
    let accepted: Rc<Vec<Accepted>> = Rc::new(
        config
            .security
            .listeners(config.listen)
            .iter()
            .enumerate()
            .map(|(index, listener)| Accepted {
                security: Arc::clone(&given.security),
                listener_index: index,
                listener_name: Rc::from(listener.name.as_str()),
                listener_security: listener.security,
                port: listener.addr.port(),
                exact: None,
            })
            .collect(),
    );
    // The port the placement advertises for this core is the one it listens on (the main
    // listener's); every other listener has shard ports at the same distance from its own.
    let shard_port = (shard.placement().address(shard.here())).and_then(|a| a.shard_port);
    let mut listeners = Vec::new();
    for (listener, how) in config
        .security
        .listeners(config.listen)
        .iter()
        .zip(accepted.iter())
    {
        listeners.push((bind(listener.addr)?, how.clone()));
        if let Some(port) = shard_port {
            let mut addr = listener.addr;
            addr.set_port(listener.addr.port() + (port - config.listen.port()));
            let exact = Accepted {
                exact: Some(shard.here()),
                ..how.clone()
            };
            listeners.push((bind(addr)?, exact));
        }
    }
    let owned = shard.local_logs().len();
    info!(core, cpu, partitions_owned = owned, listen = %config.listen, shard_port, "core serving");

    let connection_tasks = Rc::new(std::cell::Cell::new(0usize));
    // HermitMQ v1 connections other cores accepted for partitions this core owns.
    let tasks = Rc::clone(&connection_tasks);
    shard.adopt_connections_with(Box::new(move |shard, handed| {
        let shard = Rc::clone(shard);
        // Every core has the same listeners, in the same order.
        let Some(how) = accepted.get(handed.listener).cloned() else {
            warn!(
                listener = handed.listener,
                "a connection handed over from an unknown listener; closed"
            );
            return;
        };
        spawn_connection(
            &shard,
            &tasks,
            connection::serve_handed(Rc::clone(&shard), handed, how),
        );
    }));
    for (listener, how) in listeners {
        glommio::spawn_local(accept_loop(
            Rc::clone(shard),
            listener,
            how,
            connections.clone(),
            Rc::clone(&connection_tasks),
        ))
        .detach();
    }
    glommio::spawn_local(background_sync(Rc::clone(shard))).detach();
    glommio::spawn_local(background_retention(Rc::clone(shard))).detach();
    glommio::spawn_local(crate::shard::coordinator::run_timers(Rc::clone(shard))).detach();
    glommio::spawn_local(crate::shard::compaction::background_compaction(Rc::clone(
        shard,
    )))
    .detach();

    while !barriers.stopping() && !shard.shutdown.is_requested() {
        glommio::timer::sleep(STOP_POLL).await;
        if core == 0 && given.reload_tls.swap(false, Ordering::AcqRel) {
            reload_tls(&given.security);
        }
    }
    info!(
        core,
        "stopping: no new connections, answering requests in flight"
    );
    shard.shutdown.request();
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    while connection_tasks.get() > 0 && Instant::now() < deadline {
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
    if connection_tasks.get() > 0 {
        warn!(
            core,
            open = connection_tasks.get(),
            "connections still open at the drain deadline"
        );
    }
    if let Some(cluster) = cluster {
        cluster.stop().await;
    }
    Ok(())
}
