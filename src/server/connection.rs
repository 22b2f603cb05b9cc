//! One accepted connection: the protocol is chosen by its first byte, and the connection
//! becomes a [`Session`] of that protocol.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Instant;

use futures_lite::FutureExt;

use glommio::net::TcpStream;
use tracing::{debug, warn};

pub use crate::limits::ConnectionSlot;
use crate::metrics::counters::Metrics;
use crate::server::handoff::Place;
use crate::server::io::read_exact;
use crate::server::session::{Protocol, Session};
use crate::server::{hermit, kafka, native};
use crate::shard::Shard;
use crate::shard::calls::HandOff;

/// Serves one connection until it closes.
pub async fn serve(shard: Rc<Shard>, stream: TcpStream, slot: ConnectionSlot) {
    serve_from(shard, stream, slot, None).await
}

/// Serves a connection another core handed to this one (`shard::handoff`), starting with
/// the bytes that core already read from it.
pub async fn serve_handed(shard: Rc<Shard>, handed: HandOff) {
    use std::os::fd::{FromRawFd, IntoRawFd};
    // SAFETY: the descriptor is a connected TCP socket that the hand-off owns alone.
    let stream = unsafe { TcpStream::from_raw_fd(handed.socket.into_raw_fd()) };
    serve_from(shard, stream, handed.slot, Some(handed.read)).await
}

async fn serve_from(
    shard: Rc<Shard>,
    stream: TcpStream,
    slot: ConnectionSlot,
    read: Option<bytes::Bytes>,
) {
    let peer = stream.peer_addr().ok();
    if let Err(error) = serve_inner(&shard, stream, slot, read).await {
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
    let stream = RefCell::new(stream);
    if let Some(read) = read {
        // Only HermitMQ v1 connections are handed over, after their handshake.
        let Some(&role) = read.first() else {
            return Err(io::Error::other(
                "a connection was handed over without its bytes",
            ));
        };
        let place = Place::handed_in(slot, read.slice(1..));
        return hermit::serve(
            session(shard, stream, Protocol::Hermit)?,
            role,
            deadline,
            place,
        )
        .await;
    }
    let mut first = [0u8; 1];
    handshake(deadline, read_exact(&stream, &mut first)).await?;
    match first[0] {
        role @ 0x01..=0x03 => {
            let place = Place::accepted(slot);
            hermit::serve(
                session(shard, stream, Protocol::Hermit)?,
                role,
                deadline,
                place,
            )
            .await
        }
        0x00 => kafka::serve(session(shard, stream, Protocol::Kafka)?).await,
        first => native::serve(session(shard, stream, Protocol::Native)?, first, deadline).await,
    }
}

fn session(
    shard: &Rc<Shard>,
    stream: RefCell<TcpStream>,
    protocol: Protocol,
) -> io::Result<Rc<Session>> {
    Session::new(Rc::clone(shard), stream, protocol).map(Rc::new)
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
