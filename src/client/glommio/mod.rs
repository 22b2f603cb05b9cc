//! An async native-protocol client on glommio: one connection carries any number of requests
//! in flight, from any number of tasks on the executor, and each answer goes to the request
//! it matches by correlation id.
//!
//! A [`Client`] is a handle on one connection, driven by two tasks it spawns on the current
//! executor: a writer that sends whatever requests have been encoded since its last write
//! (so requests from many tasks leave in few syscalls), and a reader that splits the
//! incoming bytes into frames, matches each to its request through the sans-IO
//! [`Session`], and wakes the task waiting for it. Requests are encoded when they are made,
//! not when their [`ReplyFuture`] is first polled, so the order of calls is the order on
//! the wire, and a task can pipeline by making several requests before awaiting them.
//!
//! - [`producer`]: batching by count, bytes and linger time; several batches in flight per
//!   connection; shard-aware routing; key-hash partitioning.
//! - [`consumer`]: long-polling fetches, seeks, group commits, CRC checks.
//! - [`group`]: a member of a native consumer group ([`GroupConsumer`]).
//!
//! Everything here must run inside a glommio executor, and a `Client` stays on the
//! executor it was made on.

pub mod consumer;
pub mod group;
mod nodes;
pub mod producer;

use std::cell::RefCell;
use std::future::{Future, poll_fn};
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use ::glommio::net::TcpStream;
use futures_lite::{AsyncRead, AsyncWrite, FutureExt};

use crate::client::ClientError;
use crate::client::produce::ProduceFrame;
use crate::client::session::{Reply, Session, check_broker_preface, frame_len, next_frame};
use crate::protocol::native::{self, Request, ResponseHeader};

pub use consumer::{Consumer, ConsumerConfig, Polled};
pub use group::{GroupConsumer, GroupFetch};
pub use producer::{Producer, ProducerConfig, ProducerStats};

/// Reads ask the socket for at least this much room.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Response frames up to this size are kept inline in their reply, without an allocation
/// (a produce answer is 26 bytes).
const INLINE_FRAME_BYTES: usize = 48;
/// Frames over this size (fetch answers) are read straight into a buffer of their own,
/// taken from a small per-connection pool, rather than copied out of the read buffer: no
/// extra copy, and no fresh allocation whose pages the kernel must fault in and zero.
const LARGE_FRAME_BYTES: usize = 64 * 1024;
/// Large-frame buffers a connection keeps for reuse.
const POOLED_BUFFERS_MAX: usize = 4;
/// Longest wait of [`Client::connect`] for the connection, and again for the greeting.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

type Pool = RefCell<Vec<Vec<u8>>>;

/// The bytes of one response frame.
#[derive(Debug)]
pub enum Frame {
    Inline {
        len: u8,
        bytes: [u8; INLINE_FRAME_BYTES],
    },
    Heap(Vec<u8>),
    Large(LargeFrame),
}

/// A large frame's buffer; it goes back to its connection's pool when dropped.
#[derive(Debug)]
pub struct LargeFrame {
    buf: Vec<u8>,
    len: usize,
    pool: Weak<Inner>,
}

impl Drop for LargeFrame {
    fn drop(&mut self) {
        if let Some(inner) = self.pool.upgrade() {
            let mut pool = inner.pool.borrow_mut();
            if pool.len() < POOLED_BUFFERS_MAX {
                pool.push(std::mem::take(&mut self.buf));
            }
        }
    }
}

impl Frame {
    fn copy_of(frame: &[u8]) -> Frame {
        if frame.len() <= INLINE_FRAME_BYTES {
            let mut bytes = [0u8; INLINE_FRAME_BYTES];
            bytes[..frame.len()].copy_from_slice(frame);
            Frame::Inline {
                len: frame.len() as u8,
                bytes,
            }
        } else {
            Frame::Heap(frame.to_vec())
        }
    }
}

impl AsRef<[u8]> for Frame {
    fn as_ref(&self) -> &[u8] {
        match self {
            Frame::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Frame::Heap(bytes) => bytes,
            Frame::Large(large) => &large.buf[..large.len],
        }
    }
}

/// A response, owned.
pub type OwnedReply = Reply<Frame>;

/// Why the connection is unusable, kept to answer every later request.
#[derive(Debug, Clone)]
struct Broken {
    kind: io::ErrorKind,
    message: String,
}

impl Broken {
    fn error(&self) -> ClientError {
        ClientError::Io(io::Error::new(self.kind, self.message.clone()))
    }
}

enum Slot {
    Free,
    Waiting(Option<Waker>),
    Done(Result<OwnedReply, ClientError>),
    /// Its future was dropped; the answer is thrown away when it comes.
    Abandoned,
}

#[derive(Default)]
struct State {
    session: Session<usize>,
    /// Requests encoded and not yet handed to the writer.
    out: Vec<u8>,
    slots: Vec<Slot>,
    free: Vec<usize>,
    writer: Option<Waker>,
    broken: Option<Broken>,
}

impl State {
    fn slot(&mut self) -> usize {
        match self.free.pop() {
            Some(slot) => {
                self.slots[slot] = Slot::Waiting(None);
                slot
            }
            None => {
                self.slots.push(Slot::Waiting(None));
                self.slots.len() - 1
            }
        }
    }

    fn release(&mut self, slot: usize) {
        self.slots[slot] = Slot::Free;
        self.free.push(slot);
    }

    fn complete(&mut self, slot: usize, result: Result<OwnedReply, ClientError>) {
        match std::mem::replace(&mut self.slots[slot], Slot::Free) {
            Slot::Waiting(waker) => {
                self.slots[slot] = Slot::Done(result);
                if let Some(waker) = waker {
                    waker.wake();
                }
            }
            Slot::Abandoned => self.free.push(slot),
            Slot::Free | Slot::Done(_) => unreachable!("a slot completes once"),
        }
    }

    /// Marks the connection broken and fails every request in flight.
    fn fail(&mut self, kind: io::ErrorKind, message: String) {
        if self.broken.is_none() {
            self.broken = Some(Broken { kind, message });
        }
        let broken = self.broken.clone().expect("set above");
        let slots: Vec<usize> = self.session.fail_all().collect();
        for slot in slots {
            self.complete(slot, Err(broken.error()));
        }
        if let Some(writer) = self.writer.take() {
            writer.wake();
        }
    }
}

struct Inner {
    stream: RefCell<TcpStream>,
    state: RefCell<State>,
    peer: SocketAddr,
    pool: Pool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("peer", &self.peer)
            .finish()
    }
}

/// Closes the connection when the last [`Client`] handle goes.
struct Handle {
    inner: Rc<Inner>,
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.inner
            .state
            .borrow_mut()
            .fail(io::ErrorKind::NotConnected, "the client was closed".into());
        // Ends the reader's pending read; the writer ends on the wake above.
        let _ = nix::sys::socket::shutdown(
            self.inner.stream.borrow().as_raw_fd(),
            nix::sys::socket::Shutdown::Both,
        );
    }
}

/// One connection to a broker core. Cheap to clone: clones share the connection. When the
/// last clone is dropped the connection closes, and answers still awaited fail.
#[derive(Clone)]
pub struct Client {
    handle: Rc<Handle>,
}

impl Client {
    /// Connects, exchanges prefaces, and starts the connection's reader and writer tasks
    /// on the current executor. Waits at most [`CONNECT_TIMEOUT`] for the connection and
    /// again for the broker's preface.
    pub async fn connect(addr: SocketAddr) -> Result<Client, ClientError> {
        Client::connect_timeout(addr, CONNECT_TIMEOUT).await
    }

    /// As [`Client::connect`], waiting at most `timeout` for the connection and again for
    /// the preface: a stopped broker or a server that says nothing fails the call.
    pub async fn connect_timeout(
        addr: SocketAddr,
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        let mut stream = TcpStream::connect_timeout(addr, timeout)
            .await
            .map_err(io::Error::from)?;
        stream.set_nodelay(true).map_err(io::Error::from)?;
        write_all(&mut stream, &native::preface(native::VERSION)).await?;
        let mut preface = [0u8; native::PREFACE_LEN];
        let greeted = async { Some(read_exact(&mut stream, &mut preface).await) }
            .or(async {
                ::glommio::timer::sleep(timeout).await;
                None
            })
            .await;
        match greeted {
            Some(read) => read?,
            None => {
                return Err(ClientError::NoGreeting {
                    timeout_ms: timeout.as_millis() as u64,
                });
            }
        }
        check_broker_preface(&preface)?;
        let inner = Rc::new(Inner {
            stream: RefCell::new(stream),
            state: RefCell::new(State::default()),
            peer: addr,
            pool: RefCell::default(),
        });
        ::glommio::spawn_local(reader(Rc::clone(&inner))).detach();
        ::glommio::spawn_local(writer(Rc::clone(&inner))).detach();
        Ok(Client {
            handle: Rc::new(Handle { inner }),
        })
    }

    fn inner(&self) -> &Inner {
        &self.handle.inner
    }

    pub fn peer(&self) -> SocketAddr {
        self.inner().peer
    }

    /// Whether the connection failed or was closed; every request on it fails.
    pub fn is_broken(&self) -> bool {
        self.inner().state.borrow().broken.is_some()
    }

    /// Requests sent (or queued to send) and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.inner().state.borrow().session.in_flight()
    }

    /// Encodes `request` now and returns the future of its answer.
    pub fn request(&self, request: &Request<'_>) -> ReplyFuture {
        self.start(|session, out, slot| {
            session.request(out, request, slot);
        })
    }

    /// Sends a produce request built in place, timestamped `timestamp_ns` (0: the broker's
    /// clock). The frame is copied out, so it can be reused at once.
    pub fn produce(&self, frame: &mut ProduceFrame, timestamp_ns: u64) -> ReplyFuture {
        self.start(|session, out, slot| {
            let correlation_id = session.register(slot);
            out.extend_from_slice(frame.finish(correlation_id, timestamp_ns));
        })
    }

    fn start(&self, encode: impl FnOnce(&mut Session<usize>, &mut Vec<u8>, usize)) -> ReplyFuture {
        let inner = Rc::clone(&self.handle.inner);
        let slot = {
            let mut state = inner.state.borrow_mut();
            if let Some(broken) = &state.broken {
                let early = Some(broken.error());
                drop(state);
                return ReplyFuture {
                    inner,
                    slot: None,
                    early,
                };
            }
            let slot = state.slot();
            let State { session, out, .. } = &mut *state;
            encode(session, out, slot);
            if let Some(writer) = state.writer.take() {
                writer.wake();
            }
            slot
        };
        ReplyFuture {
            inner,
            slot: Some(slot),
            early: None,
        }
    }

    /// Sends `request` and waits for its answer; a broker error becomes `Err`.
    pub async fn call(&self, request: &Request<'_>) -> Result<OwnedReply, ClientError> {
        let reply = self.request(request).await?;
        reply.done()?;
        Ok(reply)
    }
}

/// The answer to one request. Dropping it unfinished throws the answer away when it comes;
/// the connection stays usable.
pub struct ReplyFuture {
    inner: Rc<Inner>,
    slot: Option<usize>,
    early: Option<ClientError>,
}

impl Future for ReplyFuture {
    type Output = Result<OwnedReply, ClientError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(slot) = self.slot else {
            return Poll::Ready(Err(self.early.take().unwrap_or_else(|| {
                ClientError::Protocol("reply polled after it completed".into())
            })));
        };
        let mut state = self.inner.state.borrow_mut();
        match &mut state.slots[slot] {
            Slot::Waiting(waker) => {
                if !waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
            Slot::Done(_) => {
                let Slot::Done(result) = std::mem::replace(&mut state.slots[slot], Slot::Free)
                else {
                    unreachable!()
                };
                state.release(slot);
                drop(state);
                self.slot = None;
                Poll::Ready(result)
            }
            Slot::Free | Slot::Abandoned => unreachable!("a live future owns its slot"),
        }
    }
}

impl Drop for ReplyFuture {
    fn drop(&mut self) {
        if let Some(slot) = self.slot {
            let mut state = self.inner.state.borrow_mut();
            match state.slots[slot] {
                Slot::Done(_) => state.release(slot),
                _ => state.slots[slot] = Slot::Abandoned,
            }
        }
    }
}

/// Sends what callers encoded, in their order, until the connection breaks or closes.
async fn writer(inner: Rc<Inner>) {
    let mut sending = Vec::new();
    loop {
        let ready = poll_fn(|cx| {
            let mut state = inner.state.borrow_mut();
            if state.broken.is_some() {
                return Poll::Ready(false);
            }
            if state.out.is_empty() {
                state.writer = Some(cx.waker().clone());
                return Poll::Pending;
            }
            std::mem::swap(&mut state.out, &mut sending);
            Poll::Ready(true)
        })
        .await;
        if !ready {
            return;
        }
        let written = write_all_shared(&inner.stream, &sending).await;
        sending.clear();
        if let Err(e) = written {
            inner
                .state
                .borrow_mut()
                .fail(e.kind(), format!("write to {}: {e}", inner.peer));
            return;
        }
    }
}

/// Splits what arrives into frames and hands each to the request it answers.
async fn reader(inner: Rc<Inner>) {
    let failure = match read_frames(&inner).await {
        Ok(never) => match never {},
        Err(failure) => failure,
    };
    inner.state.borrow_mut().fail(failure.0, failure.1);
}

/// Why reading stopped.
type ReadFailure = (io::ErrorKind, String);

async fn read_frames(inner: &Rc<Inner>) -> Result<std::convert::Infallible, ReadFailure> {
    let mut buf = vec![0u8; READ_CHUNK_BYTES];
    let (mut start, mut end) = (0usize, 0usize);
    loop {
        // Every whole frame in the buffer first.
        while let Some(frame_len) = next_frame(&buf[start..end]).map_err(invalid)? {
            let frame = &buf[start..start + frame_len];
            start += frame_len;
            let (slot, header) = accept(inner, frame)?;
            complete(inner, slot, Reply::new(header, Frame::copy_of(frame)));
        }
        let have = end - start;
        if let Some(prefix) = buf[start..end].first_chunk() {
            let frame_len = frame_len(*prefix).map_err(invalid)?;
            if frame_len > LARGE_FRAME_BYTES {
                let mut large = inner.pool.borrow_mut().pop().unwrap_or_default();
                if large.len() < frame_len {
                    large.resize(frame_len, 0);
                }
                large[..have].copy_from_slice(&buf[start..end]);
                (start, end) = (0, 0);
                let mut filled = have;
                while filled < frame_len {
                    filled += read_some(inner, &mut large[filled..frame_len]).await?;
                }
                let (slot, header) = accept(inner, &large[..frame_len])?;
                let frame = Frame::Large(LargeFrame {
                    buf: large,
                    len: frame_len,
                    pool: Rc::downgrade(inner),
                });
                complete(inner, slot, Reply::new(header, frame));
                continue;
            }
        }
        if start == end {
            (start, end) = (0, 0);
        } else if buf.len() - end < READ_CHUNK_BYTES / 2 {
            buf.copy_within(start..end, 0);
            (start, end) = (0, have);
        }
        assert!(
            end < buf.len(),
            "a partial frame always leaves room to read into"
        );
        end += read_some(inner, &mut buf[end..]).await?;
    }
}

/// Matches a whole frame to the request it answers; returns that request's slot.
fn accept(inner: &Inner, frame: &[u8]) -> Result<(usize, ResponseHeader), ReadFailure> {
    inner
        .state
        .borrow_mut()
        .session
        .accept(frame)
        .map_err(invalid)
}

fn complete(inner: &Inner, slot: usize, reply: OwnedReply) {
    inner.state.borrow_mut().complete(slot, Ok(reply));
}

fn invalid(e: ClientError) -> ReadFailure {
    (io::ErrorKind::InvalidData, e.to_string())
}

/// Reads at least one byte; the end of the stream is a failure.
async fn read_some(inner: &Inner, buf: &mut [u8]) -> Result<usize, ReadFailure> {
    match read_some_shared(&inner.stream, buf).await {
        Ok(0) => Err((
            io::ErrorKind::UnexpectedEof,
            format!("{} closed the connection", inner.peer),
        )),
        Ok(n) => Ok(n),
        Err(e) => Err((e.kind(), format!("read from {}: {e}", inner.peer))),
    }
}

async fn read_some_shared(stream: &RefCell<TcpStream>, buf: &mut [u8]) -> io::Result<usize> {
    poll_fn(|cx| Pin::new(&mut *stream.borrow_mut()).poll_read(cx, buf)).await
}

async fn write_all_shared(stream: &RefCell<TcpStream>, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *stream.borrow_mut()).poll_write(cx, buf)).await?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        buf = &buf[n..];
    }
    Ok(())
}

async fn read_exact(stream: &mut TcpStream, buf: &mut [u8]) -> io::Result<()> {
    futures_lite::AsyncReadExt::read_exact(stream, buf).await
}

async fn write_all(stream: &mut TcpStream, buf: &[u8]) -> io::Result<()> {
    futures_lite::AsyncWriteExt::write_all(stream, buf).await
}
