//! Incoming connections, and the framing both directions share.

use std::rc::Rc;
use std::time::Duration;

use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};

use super::{Inner, Received, tune_socket, within};
use crate::cluster::NodeId;
use crate::cluster::wire::{self, Frame, FrameCheck, Hello, HelloExpect, WireError};

/// Read buffer kept between frames; a larger frame grows it for its own length only.
const READ_CHUNK: usize = 64 * 1024;

/// Why a connection ended.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("closed by the peer")]
    Closed,
    #[error("timed out waiting for {what}")]
    TimedOut { what: &'static str },
    #[error(transparent)]
    Wire(#[from] WireError),
    #[error("{what}")]
    Protocol { what: String },
    #[error("cannot resolve {addr}: {reason}")]
    Resolve { addr: String, reason: String },
}

/// Reads whole frames through `wire`'s sans-IO codec. A frame's length is checked against
/// the limit from its header before the buffer grows for it.
pub(super) struct FrameReader {
    buf: Vec<u8>,
    len: usize,
    max_body_bytes: u32,
    /// When the first byte of the frame being read arrived.
    started: Option<std::time::Instant>,
}

impl FrameReader {
    /// A reader for a connection's first frame, the hello: until it passed, nothing
    /// larger is accepted, so a stranger cannot make this node allocate for a big frame.
    pub(super) fn for_hello() -> Self {
        FrameReader {
            buf: vec![0; wire::HEADER_LEN + wire::HELLO_BODY_LEN],
            len: 0,
            max_body_bytes: wire::HELLO_BODY_LEN as u32,
            started: None,
        }
    }

    /// After the hello: frames up to `max_body_bytes`.
    pub(super) fn accept_up_to(&mut self, max_body_bytes: u32) {
        self.max_body_bytes = max_body_bytes;
        if self.buf.len() < READ_CHUNK {
            self.buf.resize(READ_CHUNK, 0);
        }
    }

    /// The next frame. Waiting for its first byte is unbounded (the caller bounds it, or
    /// TCP keepalive does); once it has begun, it must be whole within `frame_timeout`.
    pub(super) async fn next(
        &mut self,
        stream: &mut (impl AsyncRead + Unpin),
        frame_timeout: Duration,
    ) -> Result<Frame, ConnError> {
        loop {
            if let Some((frame, used)) = wire::decode(&self.buf[..self.len], self.max_body_bytes)? {
                self.consume(used);
                return Ok(frame);
            }
            let needed = match wire::check(&self.buf[..self.len], self.max_body_bytes)? {
                FrameCheck::Incomplete { needed } => needed,
                FrameCheck::Complete { .. } => unreachable!("decode returned a whole frame"),
            };
            // Bounded: check refused a body over the limit.
            if self.buf.len() < self.len + needed {
                self.buf.resize(self.len + needed, 0);
            }
            let read = stream.read(&mut self.buf[self.len..]);
            let n = match self.started {
                None => read.await?,
                Some(started) => {
                    // The whole frame within the timeout, not each read: a peer trickling
                    // a byte at a time does not hold the connection.
                    let left = frame_timeout.saturating_sub(started.elapsed());
                    if left.is_zero() {
                        return Err(ConnError::TimedOut {
                            what: "the rest of a frame",
                        });
                    }
                    within(left, "the rest of a frame", async { Ok(read.await?) }).await?
                }
            };
            if n == 0 {
                return Err(ConnError::Closed);
            }
            self.len += n;
            self.started.get_or_insert_with(std::time::Instant::now);
        }
    }

    fn consume(&mut self, used: usize) {
        self.buf.copy_within(used..self.len, 0);
        self.len -= used;
        // Bytes left over are the next frame's first, arrived now.
        self.started = (self.len > 0).then(std::time::Instant::now);
        if self.buf.len() > READ_CHUNK && self.len <= READ_CHUNK {
            // Give back what one large frame took.
            self.buf.truncate(READ_CHUNK);
            self.buf.shrink_to_fit();
        }
    }
}

/// Writes this node's hello.
pub(super) async fn write_hello(
    inner: &Inner,
    stream: &mut (impl AsyncWrite + Unpin),
) -> Result<(), ConnError> {
    let mut out = Vec::with_capacity(wire::HEADER_LEN + wire::HELLO_BODY_LEN);
    wire::encode_hello(&Hello::new(inner.config.cluster, inner.config.me), &mut out);
    within(
        inner.config.write_timeout,
        "the hello to be written",
        async {
            stream.write_all(&out).await?;
            Ok(stream.flush().await?)
        },
    )
    .await
}

/// Reads the peer's hello and checks it.
pub(super) async fn read_hello(
    inner: &Inner,
    reader: &mut FrameReader,
    stream: &mut (impl AsyncRead + Unpin),
) -> Result<Hello, ConnError> {
    let frame = within(
        inner.config.hello_timeout,
        "the peer's hello",
        reader.next(stream, inner.config.hello_timeout),
    )
    .await?;
    let Frame::Hello(hello) = frame else {
        return Err(ConnError::Protocol {
            what: "the first frame is not a hello".into(),
        });
    };
    // Which cluster a member says it is in, whether or not it is ours (a data directory of
    // another cluster is found this way: `Transport::peer_clusters`).
    let members = inner.members.borrow().clone();
    if hello.node != inner.config.me && members.contains(&hello.node) {
        inner.hellos.borrow_mut().insert(hello.node, hello.cluster);
    }
    hello.check(&HelloExpect {
        cluster: inner.config.cluster,
        me: inner.config.me,
        members: &members,
    })?;
    Ok(hello)
}

pub(super) async fn accept_loop(inner: Rc<Inner>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                if inner.incoming_open.get() >= inner.config.incoming_max {
                    inner.count(|s| s.refused += 1);
                    tracing::warn!(peer = ?stream.peer_addr().ok(), max = inner.config.incoming_max,
                        "cluster connection refused: too many incoming connections");
                    continue;
                }
                let task = Rc::new(std::cell::Cell::new(None));
                let id = inner.spawn(incoming(OpenGuard::new(&inner), stream, Rc::clone(&task)));
                task.set(Some(id));
            }
            Err(e) => {
                // Out of descriptors, most likely: wait rather than spin.
                tracing::warn!(error = %e, "cluster listener cannot accept");
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serves one incoming connection: hello, then Raft messages to their handlers.
async fn incoming(open: OpenGuard, mut stream: TcpStream, task: Rc<std::cell::Cell<Option<u64>>>) {
    let inner = Rc::clone(&open.0);
    let peer_addr = stream.peer_addr().ok();
    let mut reader = FrameReader::for_hello();
    let hello = match greet(&inner, &mut stream, &mut reader).await {
        Ok(hello) => hello,
        Err(e) => {
            inner.count(|s| s.refused += 1);
            tracing::warn!(peer = ?peer_addr, error = %e, "cluster connection refused");
            return;
        }
    };
    let from = hello.node;
    // A peer that reconnected left its old connection here: the newer one wins.
    if let Some(id) = task.get() {
        let old = inner.incoming.borrow_mut().insert(from, id);
        if let Some(old) = old.filter(|&old| old != id) {
            inner.cancel(old);
        }
    }
    tracing::info!(peer = ?peer_addr, node = from.0, "cluster peer connected");
    let end = deliver(&inner, &mut stream, &mut reader, from).await;
    if matches!(end, Err(ConnError::Wire(_) | ConnError::Protocol { .. })) {
        inner.count(|s| s.protocol_errors += 1);
    }
    match end {
        // A peer that restarts or reconnects closes its old connection: not a fault.
        Err(ConnError::Closed) => {
            tracing::info!(peer = ?peer_addr, node = from.0, "cluster peer connection closed by the peer")
        }
        Err(e) => {
            tracing::warn!(peer = ?peer_addr, node = from.0, error = %e, "cluster peer connection closed")
        }
        Ok(()) => {}
    }
    let mut by_node = inner.incoming.borrow_mut();
    if by_node.get(&from).copied() == task.get() {
        by_node.remove(&from);
    }
}

/// Counts an incoming connection from its accept until its task ends (cancelled or not).
struct OpenGuard(Rc<Inner>);

impl OpenGuard {
    fn new(inner: &Rc<Inner>) -> Self {
        inner.incoming_open.set(inner.incoming_open.get() + 1);
        OpenGuard(Rc::clone(inner))
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.incoming_open.set(self.0.incoming_open.get() - 1);
    }
}

async fn greet(
    inner: &Inner,
    stream: &mut TcpStream,
    reader: &mut FrameReader,
) -> Result<Hello, ConnError> {
    tune_socket(stream)?;
    let hello = read_hello(inner, reader, stream).await?;
    write_hello(inner, stream).await?;
    reader.accept_up_to(inner.config.max_body_bytes);
    Ok(hello)
}

async fn deliver(
    inner: &Inner,
    stream: &mut TcpStream,
    reader: &mut FrameReader,
    from: NodeId,
) -> Result<(), ConnError> {
    loop {
        let frame = reader.next(stream, inner.config.frame_timeout).await?;
        let Frame::Raft(raft) = frame else {
            return Err(ConnError::Protocol {
                what: "a second hello".into(),
            });
        };
        if raft.message.from != from.raft_id() || raft.message.to != inner.config.me.raft_id() {
            return Err(ConnError::Protocol {
                what: format!(
                    "a message from {} to {} on the connection from {from}",
                    raft.message.from, raft.message.to
                ),
            });
        }
        let received = Received {
            from,
            group: raft.group,
            message: raft.message,
        };
        // try_send never waits, so the borrows end before any other task runs.
        let handlers = inner.handlers.borrow();
        let partitions = inner.partitions.borrow();
        let handler = handlers.get(&received.group).or_else(|| {
            let partition_group = received.group != wire::CONTROLLER_GROUP;
            partitions.as_ref().filter(|_| partition_group)
        });
        let sent = handler.map(|handler| handler.try_send(received).is_ok());
        drop((handlers, partitions));
        match sent {
            Some(true) => inner.count(|s| s.delivered += 1),
            Some(false) => inner.count(|s| s.dropped_handler_full += 1),
            None => inner.count(|s| s.dropped_no_handler += 1),
        }
    }
}
