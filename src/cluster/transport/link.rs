//! The outgoing connection to one peer: connect, hello, write what is queued; on any
//! failure, back off and start again.

use std::cell::RefCell;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::rc::Rc;
use std::task::Poll;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

use super::conn::{ConnError, FrameReader, read_hello, write_hello};
use super::{Inner, Outbox, TransportConfig, tune_socket, within};
use crate::cluster::config::{Peer, PeerAddr};

/// Frames joined into one write at most (a larger frame is written alone).
const BATCH_BYTES: usize = 1024 * 1024;

pub(super) async fn link(inner: Rc<Inner>, peer: Peer) {
    let mut failures = 0u32;
    let mut jitter = Jitter::new(u64::from(inner.config.me.0) << 16 | u64::from(peer.node.0));
    loop {
        match connect(&inner, &peer).await {
            Ok(stream) => {
                failures = 0;
                inner.count(|s| s.connects += 1);
                tracing::info!(node = peer.node.0, addr = %peer.addr, "connected to cluster peer");
                let end = pump(&inner, &peer, stream).await;
                tracing::warn!(node = peer.node.0, addr = %peer.addr, error = %end,
                    "connection to cluster peer lost; reconnecting");
            }
            Err(e) => {
                inner.count(|s| s.connect_failures += 1);
                // A peer that is down fails every attempt: say it once, then quietly.
                if failures == 0 {
                    tracing::warn!(node = peer.node.0, addr = %peer.addr, error = %e,
                        "cannot connect to cluster peer; retrying with backoff");
                } else {
                    tracing::debug!(node = peer.node.0, addr = %peer.addr, error = %e, failures,
                        "cannot connect to cluster peer");
                }
                failures = failures.saturating_add(1);
            }
        }
        glommio::timer::sleep(backoff(&inner.config, failures, &mut jitter)).await;
    }
}

/// `backoff_min` doubled per failure in a row, at most `backoff_max`, then a random share
/// of half to all of it, so nodes restarted together do not retry in step.
pub(super) fn backoff(config: &TransportConfig, failures: u32, jitter: &mut Jitter) -> Duration {
    let cap = config
        .backoff_min
        .saturating_mul(1 << failures.min(16))
        .min(config.backoff_max);
    let half = cap / 2;
    let spread = u64::try_from((cap - half).as_nanos())
        .unwrap_or(u64::MAX)
        .max(1);
    half + Duration::from_nanos(jitter.next() % spread)
}

/// splitmix64: spreads retries; no security depends on it.
pub(super) struct Jitter(u64);

impl Jitter {
    pub(super) fn new(salt: u64) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Jitter(now ^ salt.rotate_left(32))
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// A connection whose hellos are exchanged and whose answer names `peer`.
async fn connect(inner: &Inner, peer: &Peer) -> Result<TcpStream, ConnError> {
    let timeout = inner.config.connect_timeout;
    let addr = resolve(&peer.addr, timeout).await?;
    let mut stream = TcpStream::connect_timeout(addr, timeout)
        .await
        .map_err(std::io::Error::from)?;
    tune_socket(&stream)?;
    write_hello(inner, &mut stream).await?;
    let mut reader = FrameReader::for_hello();
    let hello = read_hello(inner, &mut reader, &mut stream).await?;
    if hello.node != peer.node {
        return Err(ConnError::Protocol {
            what: format!("{addr} answered as {}, not {}", hello.node, peer.node),
        });
    }
    Ok(stream)
}

/// An IP as it is; a name through the blocking pool (getaddrinfo blocks), its first IPv4
/// address, else its first.
async fn resolve(addr: &PeerAddr, limit: Duration) -> Result<SocketAddr, ConnError> {
    if let Ok(ip) = addr.host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, addr.port));
    }
    let host_port = addr.to_host_port();
    let name = host_port.clone();
    let lookup = glommio::executor()
        .spawn_blocking(move || name.to_socket_addrs().map(|a| a.collect::<Vec<_>>()));
    let resolve_error = |reason: String| ConnError::Resolve {
        addr: host_port.clone(),
        reason,
    };
    let addrs = within(limit, "name resolution", async {
        lookup.await.map_err(|e| resolve_error(e.to_string()))
    })
    .await?;
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| resolve_error("no address".into()))
}

/// Writes queued frames until the connection fails; returns why. The peer never writes
/// after its hello, so a read that returns is the connection's end: it is watched
/// alongside the writes, and a peer that closed is reconnected to at once rather than at
/// the next write.
async fn pump(inner: &Inner, peer: &Peer, stream: TcpStream) -> ConnError {
    let Some(outbox) = inner.outboxes.borrow().get(&peer.node).cloned() else {
        return ConnError::Closed; // the peer was removed; its link is cancelled
    };
    let outbox = &*outbox;
    let (mut rd, mut wr) = futures_lite::io::split(stream);
    let watch = async {
        let mut byte = [0u8; 1];
        match rd.read(&mut byte).await {
            Ok(0) => ConnError::Closed,
            Ok(_) => ConnError::Protocol {
                what: "the peer wrote after its hello".into(),
            },
            Err(e) => e.into(),
        }
    };
    let write = async {
        let mut batch = Vec::new();
        loop {
            let frames = next_batch(inner, outbox, &mut batch).await;
            let written = within(inner.config.write_timeout, "a write", async {
                wr.write_all(&batch).await?;
                Ok(())
            })
            .await;
            if let Err(e) = written {
                return e;
            }
            inner.count(|s| s.written += frames);
            batch.clear();
            if batch.capacity() > 2 * BATCH_BYTES {
                batch = Vec::new();
            }
        }
    };
    futures_lite::future::or(watch, write).await
}

/// Waits for queued frames and moves them into `batch` (empty on entry): as many as fit
/// in [`BATCH_BYTES`], at least one, dropping (and counting) those queued longer than
/// `queue_age_max`. Returns how many.
async fn next_batch(inner: &Inner, outbox: &RefCell<Outbox>, batch: &mut Vec<u8>) -> u64 {
    futures_lite::future::poll_fn(|cx| {
        let mut outbox = outbox.borrow_mut();
        let mut frames = 0;
        let now = std::time::Instant::now();
        while let Some((queued, front)) = outbox.frames.front() {
            if now.duration_since(*queued) > inner.config.queue_age_max {
                let stale = front.len();
                outbox.frames.pop_front();
                outbox.bytes -= stale;
                inner.count(|s| s.dropped_stale += 1);
                continue;
            }
            if frames > 0 && batch.len() + front.len() > BATCH_BYTES {
                break;
            }
            let (_, frame) = outbox.frames.pop_front().expect("front exists");
            outbox.bytes -= frame.len();
            if batch.is_empty() {
                *batch = frame;
            } else {
                batch.extend_from_slice(&frame);
            }
            frames += 1;
        }
        if frames == 0 {
            outbox.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        Poll::Ready(frames)
    })
    .await
}
