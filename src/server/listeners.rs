//! The broker's listeners: their ports checked at start, the security state they share
//! opened, their sockets bound on each core, and the loop that accepts connections and
//! runs each in a task of its own.

use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use futures_lite::FutureExt;
use glommio::net::TcpListener;
use tracing::{error, info, warn};

use crate::config::BrokerConfig;
use crate::security::runtime::Security;
use crate::server::ServeError;
use crate::server::connection::{self, ConnectionSlot};
use crate::server::session::Accepted;
use crate::shard::Shard;

/// Refuses listeners whose ports overlap: each listener takes its port and, with shard
/// ports on, the next one per core; two listeners on one port would both bind it
/// (SO_REUSEPORT) and share its connections.
pub(super) fn check_listener_ports(config: &BrokerConfig) -> Result<(), ServeError> {
    let listeners = config.security.listeners(config.listen);
    let span = if config.shard_ports {
        config.cores as u32
    } else {
        0
    };
    for (i, a) in listeners.iter().enumerate() {
        let a_end = u32::from(a.addr.port()) + span;
        if a.addr.port() != 0 && a_end > u32::from(u16::MAX) {
            return Err(ServeError::Config(format!(
                "listener {} ({}): its shard ports (port + 1 + core, for {} cores) go past 65535",
                a.name, a.addr, config.cores
            )));
        }
        for b in &listeners[..i] {
            let b_end = u32::from(b.addr.port()) + span;
            let overlap = u32::from(a.addr.port()) <= b_end && u32::from(b.addr.port()) <= a_end;
            if a.addr.port() != 0 && b.addr.port() != 0 && overlap {
                return Err(ServeError::Config(format!(
                    "listeners {} ({}) and {} ({}) overlap: each takes its port and, with shard ports, port + 1 + core for each of {} cores; move one, or turn the shard ports off with --no-shard-ports",
                    b.name, b.addr, a.name, a.addr, config.cores
                )));
            }
        }
    }
    Ok(())
}

/// Loads the TLS files, the users and the ACLs (refused at start with the path and the
/// reason), and says how each listener is secured.
pub(super) fn open_security(config: &BrokerConfig) -> Result<Arc<Security>, ServeError> {
    let security = Security::open(&config.security, &config.data_dir)
        .map_err(|e| ServeError::Config(e.to_string()))?;
    for listener in config.security.listeners(config.listen) {
        info!(name = listener.name, security = %listener.security, addr = %listener.addr, "listener");
    }
    if config.security.tls.is_some() {
        use crate::security::tls::ktls::KtlsSupport;
        match security.ktls() {
            KtlsSupport::Available => info!(
                "TLS moves into kernel TLS after each handshake (the kernel offers the tls ULP): fetches over TLS use sendfile; pagurus_tls_connections_kernel_total counts the connections, pagurus_tls_kernel_fallbacks_total those that stayed in user space"
            ),
            KtlsSupport::Unavailable { reason } => info!(
                %reason,
                "TLS is encrypted in user space (rustls), kernel TLS unavailable: fetches over TLS read file ranges into memory instead of sendfile"
            ),
            KtlsSupport::Off => info!(
                "TLS is encrypted in user space (rustls), kernel TLS off (--ktls off): fetches over TLS read file ranges into memory instead of sendfile"
            ),
        }
    }
    if security.authorizes() {
        info!(
            super_users = ?config.security.super_users,
            "ACL authorizer on: what no ACL allows is refused"
        );
    }
    Ok(Arc::new(security))
}

/// Reads the TLS files again: new connections handshake with them, open ones keep theirs.
/// A file that does not load leaves the old configuration in place.
pub(super) fn reload_tls(security: &Security) {
    if security.config().tls.is_none() {
        info!("SIGHUP: no TLS files to reload");
        return;
    }
    match security.reload_tls() {
        Ok(()) => info!("SIGHUP: TLS files reloaded; new connections use them"),
        Err(error) => {
            error!(%error, "SIGHUP: TLS files not reloaded; the previous ones stay in use")
        }
    }
}

pub(super) fn bind(addr: std::net::SocketAddr) -> Result<TcpListener, ServeError> {
    TcpListener::bind(addr).map_err(|e| ServeError::Listen {
        addr: addr.to_string(),
        source: e.into(),
    })
}

/// The next connection on `listener`, or `None` once the broker stops. A failed accept (out
/// of descriptors, say) is logged and retried after a short pause.
pub(crate) async fn accept_or_stop(
    shard: &Shard,
    listener: &glommio::net::TcpListener,
    listener_name: &str,
) -> Option<glommio::net::TcpStream> {
    loop {
        let accepted = async { Some(listener.accept().await) }
            .or(async {
                shard.shutdown.wait().await;
                None
            })
            .await;
        match accepted {
            None => return None,
            Some(Ok(stream)) => return Some(stream),
            Some(Err(error)) => {
                warn!(%error, listener = listener_name, "accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

pub(super) async fn accept_loop(
    shard: Rc<Shard>,
    listener: TcpListener,
    how: Accepted,
    connections: Arc<AtomicUsize>,
    tasks: Rc<std::cell::Cell<usize>>,
) {
    loop {
        let Some(stream) = accept_or_stop(&shard, &listener, "broker").await else {
            return;
        };
        let Some(slot) = ConnectionSlot::try_take(&connections, shard.config.connections_max)
        else {
            crate::metrics::counters::Metrics::inc(&shard.metrics.connections_refused);
            warn!(
                limit = shard.config.connections_max,
                "connection limit reached; connection refused"
            );
            drop(stream);
            continue;
        };
        crate::metrics::counters::Metrics::inc(&shard.metrics.connections_accepted);
        spawn_connection(
            &shard,
            &tasks,
            connection::serve(Rc::clone(&shard), stream, slot, how.clone()),
        );
    }
}

/// Runs a connection in a task of its own, counted in the open connections and in the
/// tasks a stopping core waits for.
pub(super) fn spawn_connection(
    shard: &Rc<Shard>,
    tasks: &Rc<std::cell::Cell<usize>>,
    serve: impl Future<Output = ()> + 'static,
) {
    crate::metrics::counters::Metrics::inc(&shard.metrics.connections_open);
    tasks.set(tasks.get() + 1);
    let (shard, tasks) = (Rc::clone(shard), Rc::clone(tasks));
    glommio::spawn_local(async move {
        serve.await;
        crate::metrics::counters::Metrics::dec(&shard.metrics.connections_open);
        tasks.set(tasks.get() - 1);
    })
    .detach();
}
