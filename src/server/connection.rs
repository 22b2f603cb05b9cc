//! One accepted connection: the protocol is chosen by its first byte, and the connection
//! becomes a [`Session`] of that protocol.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Instant;

use futures_lite::FutureExt;

use glommio::net::TcpStream;
use tracing::{debug, info, warn};

pub use crate::limits::ConnectionSlot;
use crate::metrics::counters::Metrics;
use crate::security::acl::Principal;
use crate::security::listener::WireProtocol;
use crate::security::tls::principal_of_certificate;
use crate::server::handoff::Place;
use crate::server::io::read_exact;
use crate::server::ktls::{self, Handover, RecordIo};
use crate::server::session::{Accepted, Auth, Protocol, Session};
use crate::server::stream::{Stream, TlsStream};
use crate::server::{hermit, kafka, native};
use crate::shard::Shard;
use crate::shard::calls::HandOff;

/// Serves one connection until it closes.
pub async fn serve(shard: Rc<Shard>, stream: TcpStream, slot: ConnectionSlot, accepted: Accepted) {
    serve_from(shard, stream, slot, None, accepted).await
}

/// Serves a connection another core handed to this one (`shard::handoff`), starting with
/// the bytes that core already read from it. Only plaintext connections are handed over
/// (a TLS session's state cannot follow its descriptor).
pub async fn serve_handed(shard: Rc<Shard>, handed: HandOff, accepted: Accepted) {
    use std::os::fd::{FromRawFd, IntoRawFd};
    // SAFETY: the descriptor is a connected TCP socket that the hand-off owns alone.
    let stream = unsafe { TcpStream::from_raw_fd(handed.socket.into_raw_fd()) };
    serve_from(shard, stream, handed.slot, Some(handed.read), accepted).await
}

async fn serve_from(
    shard: Rc<Shard>,
    stream: TcpStream,
    slot: ConnectionSlot,
    read: Option<bytes::Bytes>,
    accepted: Accepted,
) {
    let peer = stream.peer_addr().ok();
    if let Err(error) = serve_inner(&shard, stream, slot, read, accepted).await {
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

/// `read`: the bytes another core already read from a connection it handed here (from the
/// first byte on); `None` for a connection accepted here.
async fn serve_inner(
    shard: &Rc<Shard>,
    stream: TcpStream,
    slot: ConnectionSlot,
    read: Option<bytes::Bytes>,
    accepted: Accepted,
) -> io::Result<()> {
    stream.set_nodelay(true)?;
    // glommio accepts sockets in blocking mode; its own reads and writes pass
    // MSG_DONTWAIT, but sendfile does not, so the socket itself must be non-blocking or a
    // consumer that stops reading would block the whole executor inside sendfile.
    set_nonblocking(&stream)?;
    // Every read of the handshake is bounded, and so is the handshake as a whole (see
    // `handshake`); a consumer that never reads what it is sent is cut off by the write
    // timeout.
    stream.set_read_timeout(Some(shard.config.handshake_timeout))?;
    stream.set_write_timeout(Some(shard.config.idle_timeout))?;
    let deadline = Instant::now() + shard.config.handshake_timeout;
    let Some((stream, auth)) = secure(shard, stream, &accepted, deadline).await? else {
        return Ok(());
    };
    let stream = RefCell::new(stream);
    let session = |stream, protocol| session(shard, stream, protocol, &accepted, auth);
    if let Some(read) = read {
        // Only HermitMQ v1 connections are handed over, after their handshake.
        let Some(&role) = read.first() else {
            return Err(io::Error::other(
                "a connection was handed over without its bytes",
            ));
        };
        let place = Place::handed_in(slot, read.slice(1..));
        return hermit::serve(session(stream, Protocol::Hermit)?, role, deadline, place).await;
    }
    let mut first = [0u8; 1];
    handshake(deadline, read_exact(&stream, &mut first)).await?;
    match first[0] {
        0x01..=0x03 if !accepted.listener_security.serves(WireProtocol::HermitV1) => {
            Metrics::inc(&shard.metrics.auth_protocol_refused);
            warn!(listener = %accepted.listener_name, security = %accepted.listener_security, "HermitMQ v1 connection on a listener that authenticates by SASL, which v1 cannot do; connection closed");
            Ok(())
        }
        role @ 0x01..=0x03 => {
            let place = Place::accepted(slot);
            hermit::serve(session(stream, Protocol::Hermit)?, role, deadline, place).await
        }
        0x00 => kafka::serve(session(stream, Protocol::Kafka)?).await,
        first => native::serve(session(stream, Protocol::Native)?, first, deadline).await,
    }
}

fn session(
    shard: &Rc<Shard>,
    stream: RefCell<Stream>,
    protocol: Protocol,
    accepted: &Accepted,
    auth: Auth,
) -> io::Result<Rc<Session>> {
    Session::new(Rc::clone(shard), stream, protocol, accepted.clone(), auth).map(Rc::new)
}

/// The connection as its listener secures it, and who the client is so far: a TLS
/// listener's handshake (bounded by the handshake deadline) and, on SSL, the principal of
/// the verified client certificate. `None` when the handshake failed (counted and logged;
/// the connection closes).
async fn secure(
    shard: &Shard,
    tcp: TcpStream,
    accepted: &Accepted,
    deadline: Instant,
) -> io::Result<Option<(Stream, Auth)>> {
    let security = accepted.listener_security;
    let unauthenticated = if security.uses_sasl() {
        Auth::sasl()
    } else {
        Auth::Anonymous
    };
    if !security.uses_tls() {
        return Ok(Some((Stream::Plain(tcp), unauthenticated)));
    }
    let peer = tcp.peer_addr().ok();
    let Some(config) = accepted.security.tls_config(security) else {
        // Start refuses a TLS listener without its files; this is a bug, not served.
        warn!(?peer, listener = %accepted.listener_name, "TLS listener without a TLS configuration; connection closed");
        return Ok(None);
    };
    let ktls = accepted.security.ktls().is_available();
    let acceptor = futures_rustls::TlsAcceptor::from(config);
    let tls = match handshake(deadline, acceptor.accept(RecordIo::new(tcp, ktls))).await {
        Ok(tls) => Box::new(tls),
        Err(error) => {
            Metrics::inc(&shard.metrics.tls_handshakes_failed);
            warn!(?peer, listener = %accepted.listener_name, %error, "TLS handshake failed; connection closed");
            return Ok(None);
        }
    };
    // The principal first: the move into kernel TLS drops the rustls state.
    let auth = if security.uses_sasl() {
        unauthenticated
    } else {
        match certificate_principal(shard, &tls, accepted, peer) {
            Some(principal) => Auth::Certificate(principal),
            None => return Ok(None),
        }
    };
    if !ktls {
        Metrics::inc(&shard.metrics.tls_connections_userspace);
        return Ok(Some((Stream::Tls(tls), auth)));
    }
    let stream = match ktls::into_kernel(tls, deadline).await? {
        Handover::Kernel(stream) => {
            Metrics::inc(&shard.metrics.tls_connections_kernel);
            Stream::Ktls(stream)
        }
        Handover::UserSpace(tls, reason) => {
            Metrics::inc(&shard.metrics.tls_kernel_fallbacks);
            Metrics::inc(&shard.metrics.tls_connections_userspace);
            info!(?peer, listener = %accepted.listener_name, %reason, "TLS connection stays in user space instead of kernel TLS");
            Stream::Tls(tls)
        }
        Handover::Failed(reason) => {
            Metrics::inc(&shard.metrics.tls_kernel_failed);
            warn!(?peer, listener = %accepted.listener_name, %reason, "the kernel refused the TLS keys after rustls gave them up; connection closed");
            return Ok(None);
        }
    };
    Ok(Some((stream, auth)))
}

/// SSL: the principal of the certificate the verifier required (signed by the client CA);
/// `None` (counted and logged) when there is none or its subject is unusable.
fn certificate_principal(
    shard: &Shard,
    tls: &TlsStream,
    accepted: &Accepted,
    peer: Option<std::net::SocketAddr>,
) -> Option<Principal> {
    let certificate = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|chain| chain.first());
    let principal = certificate.map(|cert| principal_of_certificate(cert.as_ref()));
    match principal {
        Some(Ok(principal)) => Some(principal),
        Some(Err(error)) => {
            Metrics::inc(&shard.metrics.tls_handshakes_failed);
            warn!(?peer, listener = %accepted.listener_name, %error, "client certificate without a usable subject; connection closed");
            None
        }
        None => {
            Metrics::inc(&shard.metrics.tls_handshakes_failed);
            warn!(?peer, listener = %accepted.listener_name, "TLS client without a certificate on an SSL listener; connection closed");
            None
        }
    }
}

fn set_nonblocking(stream: &TcpStream) -> io::Result<()> {
    use nix::fcntl::{FcntlArg, OFlag, fcntl};
    use std::os::fd::AsRawFd;
    // SAFETY: the descriptor belongs to `stream`, which outlives this borrow.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(stream.as_raw_fd()) };
    let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL)?);
    fcntl(fd, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))?;
    Ok(())
}

/// Runs a step of the handshake, failing with `TimedOut` at the handshake deadline: the
/// per-read timeout alone would let a client dribble a byte per timeout forever.
pub async fn handshake<T>(
    deadline: Instant,
    step: impl Future<Output = io::Result<T>>,
) -> io::Result<T> {
    let timer = async {
        glommio::timer::sleep(deadline.saturating_duration_since(Instant::now())).await;
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "handshake took too long",
        ))
    };
    step.or(timer).await
}
