//! One accepted connection: the protocol is chosen by its first byte.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use glommio::net::TcpStream;
use tracing::{debug, warn};

use crate::server::io::read_exact;
use crate::server::metrics::Metrics;
use crate::server::native;
use crate::shard::Shard;

/// A slot under the broker-wide connection limit, given back on drop.
pub struct ConnectionSlot {
    open: Arc<AtomicUsize>,
}

impl ConnectionSlot {
    /// Takes a slot unless `max` connections are open.
    pub fn try_take(open: &Arc<AtomicUsize>, max: usize) -> Option<ConnectionSlot> {
        open.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| ConnectionSlot {
            open: Arc::clone(open),
        })
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves one connection until it closes.
pub async fn serve(shard: Rc<Shard>, stream: TcpStream, _slot: ConnectionSlot) {
    let peer = stream.peer_addr().ok();
    if let Err(error) = serve_inner(&shard, stream).await {
        match error.kind() {
            io::ErrorKind::UnexpectedEof
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::BrokenPipe => {
                debug!(?peer, %error, "connection ended")
            }
            io::ErrorKind::TimedOut => {
                Metrics::inc(&shard.metrics.connections_timed_out);
                debug!(?peer, "connection timed out");
            }
            _ => warn!(?peer, %error, "connection failed"),
        }
    }
}

async fn serve_inner(shard: &Rc<Shard>, stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    // Until the client says what it speaks, the handshake timeout applies to every read;
    // a consumer that never reads what it is sent is cut off by the write timeout.
    stream.set_read_timeout(Some(shard.config.handshake_timeout))?;
    stream.set_write_timeout(Some(shard.config.idle_timeout))?;
    let stream = RefCell::new(stream);
    let mut first = [0u8; 1];
    read_exact(&stream, &mut first).await?;
    match first[0] {
        0x01..=0x03 => {
            Metrics::inc(&shard.metrics.unknown_protocols);
            warn!(
                role = first[0],
                "HermitMQ v1 connection refused: not served by this build yet"
            );
            Ok(())
        }
        0x00 => {
            Metrics::inc(&shard.metrics.unknown_protocols);
            warn!(
                "Kafka-style connection refused: the Kafka listener is reserved, not implemented"
            );
            Ok(())
        }
        first => native::serve(Rc::clone(shard), stream, first).await,
    }
}
