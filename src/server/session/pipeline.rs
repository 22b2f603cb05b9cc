//! A session's two halves. The reader frames requests with the front-end's sans-IO codec and
//! starts each in request order (a produce is staged, or sent to its owner, before the next
//! request is read); it hands the writer one pending answer per request through a bounded
//! queue, and when the queue is full it stops reading, so TCP pushes back on the client.
//! The writer waits for each answer in turn and writes it, answers that are ready together
//! in one write, and file ranges with sendfile ([`Outbox`]).
//!
//! Written once for every protocol: reading (a buffer that grows with what arrives, never
//! with what a frame announces), the request and idle deadlines, frames over the limit,
//! the clean stop (stop at a frame boundary; refuse what still arrives), request metrics.

use std::future::Future;
use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::FutureExt;
use futures_lite::future::poll_once;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use tracing::{debug, warn};

use crate::metrics::counters::Metrics;
use crate::metrics::requests::RequestKind;
use crate::protocol::native::ErrorCode;
use crate::server::io::{RequestDeadline, read_some};
use crate::server::read_buf::ReadBuf;
use crate::server::session::{Outbox, Session};

/// Per-read size in the middle of frames, and at frame boundaries while the client sends
/// more than [`BOUNDARY_READ_BYTES`] at a time.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Read size at a frame boundary for a client that sends little at a time: what an idle
/// connection keeps resident (with 10,000 idle connections, 4 KiB rather than 64 KiB each).
const BOUNDARY_READ_BYTES: usize = 4 * 1024;
/// A read buffer larger than this is freed when the connection is between frames.
const IDLE_BUFFER_BYTES_MAX: usize = 1 << 20;
/// Answers ready to go are sent together once this many bytes are gathered.
const WRITE_BATCH_BYTES: usize = 64 * 1024;
/// Bytes of a frame over the limit that are read (to answer it) before it is skipped.
const SKIPPED_HEAD_BYTES: usize = 64;
/// Silence after which a stopping connection is closed.
const STOP_QUIET: Duration = Duration::from_millis(100);
/// Longest a stopping connection keeps refusing requests.
const STOP_REFUSING_MAX: Duration = Duration::from_secs(1);

/// What the front-end's codec makes of the bytes at the front of the read buffer.
pub enum Framing {
    /// A whole frame of `frame_bytes` (its length prefix included).
    Complete { frame_bytes: usize },
    /// At least `needed` more bytes are needed to know more.
    Incomplete { needed: usize },
    /// A frame of `frame_bytes` over the limit: skipped without buffering it, and answered
    /// by [`Frontend::too_large`].
    TooLarge { frame_bytes: u64 },
    /// The bytes cannot be framed: the connection closes.
    Lost(Lost),
}

/// Why framing was lost, for the log line and the metrics.
pub struct Lost {
    pub reason: String,
    /// The counter this kind of refusal bumps.
    pub counter: fn(&Metrics) -> &std::cell::Cell<u64>,
    /// Counted as a request of this kind with this error, where the protocol has one.
    pub request: Option<(RequestKind, ErrorCode)>,
}

/// How an answer went, for the request metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Done,
    Failed(ErrorCode),
    /// The protocol has no way to answer this failure but to close the connection (after
    /// anything written for it).
    Close(Option<ErrorCode>),
}

/// A request the reader started: its kind, for the metrics, and what the writer does.
pub struct Started<P> {
    pub kind: RequestKind,
    pub pending: P,
}

/// A protocol front-end: a sans-IO codec and its handlers.
#[allow(async_fn_in_trait)] // used generically on one thread; no Send bound is wanted
pub trait Frontend: 'static {
    /// What the writer must do to answer one request.
    type Pending: 'static;
    /// An answer, ready to be written.
    type Answer;

    /// Frames the bytes at the front of `buf`. Pure: no side effects.
    fn framing(&self, buf: &[u8]) -> Framing;

    /// True if the request in `frame` may be served before the session's login succeeds
    /// (the login itself, and what a client asks before it: Kafka's ApiVersions). The name
    /// of what was refused otherwise, for the log line.
    fn before_login(&self, _frame: &[u8]) -> Result<(), String> {
        Err("a request".to_string())
    }

    /// Starts the request in `frame` (its length prefix included), in request order.
    async fn start(&self, session: &Rc<Session>, frame: &[u8]) -> Started<Self::Pending>;

    /// Waits for a request's answer (a group commit, a mesh reply, a long poll).
    async fn answer(&self, session: &Rc<Session>, pending: Self::Pending) -> Self::Answer;

    /// Encodes an answer into `out`.
    fn write(&self, session: &Session, answer: Self::Answer, out: &mut Outbox) -> Outcome;

    /// The answer to a frame over the limit, from its first bytes; `None` closes the
    /// connection (the protocol has no way to answer it).
    fn too_large(
        &self,
        session: &Session,
        head: &[u8],
        frame_bytes: u64,
    ) -> Option<Started<Self::Pending>>;

    /// True if the protocol can answer a request "not done, the broker is stopping"
    /// ([`Frontend::stopping`]); otherwise the connection closes at a frame boundary.
    const REFUSES_WHEN_STOPPING: bool = false;

    /// The answer to a request that arrives while the broker stops: refused, known not done,
    /// so the client sends it again elsewhere or later, exactly once. `None` closes the
    /// connection.
    fn stopping(&self, _frame: &[u8]) -> Option<Started<Self::Pending>> {
        None
    }
}

/// The reader half's own state: the read buffer and the request deadline.
pub struct Inbox {
    pub buf: ReadBuf,
    deadline: RequestDeadline,
    boundary_read_bytes: usize,
}

impl Inbox {
    /// An inbox holding `read`, bytes already read from the connection.
    pub fn new(session: &Session, read: &[u8]) -> Inbox {
        let config = &session.shard.config;
        Inbox {
            buf: ReadBuf::from_slice(read),
            deadline: RequestDeadline::new(config.idle_timeout, config.request_timeout),
            boundary_read_bytes: BOUNDARY_READ_BYTES,
        }
    }
}

/// Serves requests until the client goes away, framing is lost or the broker stops.
pub async fn run<F: Frontend>(
    frontend: Rc<F>,
    session: Rc<Session>,
    inbox: Inbox,
) -> io::Result<()> {
    let shard = &session.shard;
    let (tx, rx) = local_channel::new_bounded(shard.config.in_flight_max.max(1));
    let writer = glommio::spawn_local(write_answers(Rc::clone(&frontend), Rc::clone(&session), rx));
    let read = read_requests(&*frontend, &session, inbox, tx).await;
    // The queue's sender is gone: the writer answers what is queued, then ends.
    let written = writer.await;
    if let Err(error) = &written
        && error.kind() == io::ErrorKind::TimedOut
    {
        Metrics::inc(&shard.metrics.writes_stalled);
        warn!(protocol = session.protocol.label(), timeout = ?shard.config.idle_timeout, "client read nothing while answers waited; connection closed");
    }
    read.and(written)
}

type Queue<P> = LocalSender<(RequestKind, P)>;

/// Counts a request when it starts and hands it to the writer; false once the writer is
/// gone (it reports why).
async fn queue<P>(session: &Session, tx: &Queue<P>, started: Started<P>) -> bool {
    count_request(session, started.kind);
    tx.send((started.kind, started.pending)).await.is_ok()
}

enum Event {
    Read(io::Result<usize>),
    Stop,
}

async fn read_requests<F: Frontend>(
    frontend: &F,
    session: &Rc<Session>,
    mut inbox: Inbox,
    tx: Queue<F::Pending>,
) -> io::Result<()> {
    let shard = &session.shard;
    loop {
        match frontend.framing(&inbox.buf) {
            Framing::Complete { frame_bytes } => {
                inbox.deadline.done();
                if !session.authenticated()
                    && let Err(what) = frontend.before_login(&inbox.buf[..frame_bytes])
                {
                    // Answers already queued still go out; this one is never served.
                    session.refuse_unauthenticated(&what);
                    return Ok(());
                }
                let started = frontend.start(session, &inbox.buf[..frame_bytes]).await;
                inbox.buf.advance(frame_bytes);
                if !queue(session, &tx, started).await {
                    return Ok(());
                }
            }
            Framing::Incomplete { needed } => {
                // Stop only between frames: a request half-read is finished first.
                let at_boundary = inbox.buf.is_empty();
                if at_boundary && shard.shutdown.is_requested() {
                    refuse_the_rest(frontend, session, &mut inbox, &tx).await;
                    return Ok(());
                }
                match read_more(session, &mut inbox, needed, at_boundary).await? {
                    Event::Stop => {
                        refuse_the_rest(frontend, session, &mut inbox, &tx).await;
                        return Ok(());
                    }
                    Event::Read(Ok(0)) => return Ok(()),
                    Event::Read(Ok(_)) => {}
                    Event::Read(Err(error)) => return Err(error),
                }
            }
            Framing::TooLarge { frame_bytes } => {
                Metrics::inc(&shard.metrics.frames_too_large);
                let head = skip_frame(session, &mut inbox, frame_bytes).await?;
                inbox.deadline.done();
                let Some(started) = frontend.too_large(session, &head, frame_bytes) else {
                    warn!(
                        protocol = session.protocol.label(),
                        frame_bytes, "frame over the limit; connection closed"
                    );
                    return Ok(());
                };
                warn!(
                    protocol = session.protocol.label(),
                    frame_bytes, "frame over the limit (--max-payload-bytes); skipped"
                );
                if !queue(session, &tx, started).await {
                    return Ok(());
                }
            }
            Framing::Lost(lost) => {
                Metrics::inc((lost.counter)(&shard.metrics));
                if let Some((kind, code)) = lost.request {
                    count_request(session, kind);
                    count_error(session, kind, code);
                }
                warn!(protocol = session.protocol.label(), reason = %lost.reason, "cannot frame what the client sent; connection closed");
                return Ok(());
            }
        }
    }
}

/// Reads what arrives into the inbox: at least one byte, or 0 at the end of the stream.
/// At a frame boundary the broker stopping ends the wait ([`Event::Stop`]); in the middle of
/// a frame only the request deadline does.
async fn read_more(
    session: &Session,
    inbox: &mut Inbox,
    needed: usize,
    at_boundary: bool,
) -> io::Result<Event> {
    let shard = &session.shard;
    let len = inbox.buf.len();
    // Grow with what arrives (at most doubling), never to the size a frame merely announces:
    // a client cannot make the broker hold memory for bytes it has not sent.
    if at_boundary && inbox.buf.capacity() > IDLE_BUFFER_BYTES_MAX {
        // Give back what a large frame needed; an idle connection keeps little.
        inbox.buf = ReadBuf::new();
    }
    let chunk = if at_boundary {
        inbox.boundary_read_bytes
    } else {
        needed.min(len).max(READ_CHUNK_BYTES)
    };
    if let Err(error) = inbox.deadline.before_read(&session.stream, !at_boundary) {
        return Err(too_slow(session, len, error));
    }
    let read = async { Event::Read(read_some(&session.stream, inbox.buf.spare(chunk)).await) };
    let event = if at_boundary {
        read.or(async {
            shard.shutdown.wait().await;
            Event::Stop
        })
        .await
    } else {
        read.await
    };
    match event {
        Event::Read(Ok(n)) if n > 0 => {
            inbox.buf.filled(n);
            if at_boundary {
                // A client that fills the small read has more waiting: read it in large
                // chunks until it sends little at a time again.
                inbox.boundary_read_bytes = if n == chunk {
                    READ_CHUNK_BYTES
                } else if n < BOUNDARY_READ_BYTES {
                    BOUNDARY_READ_BYTES
                } else {
                    inbox.boundary_read_bytes
                };
            }
            Ok(Event::Read(Ok(n)))
        }
        Event::Read(Err(error)) if error.kind() == io::ErrorKind::TimedOut && !at_boundary => {
            Err(too_slow(session, len, error))
        }
        Event::Read(Err(error)) if error.kind() == io::ErrorKind::TimedOut => {
            // Counted with every other timeout where the connection ends.
            debug!(
                protocol = session.protocol.label(),
                "idle connection closed"
            );
            Err(error)
        }
        event => Ok(event),
    }
}

/// Counts, logs and describes a request that did not arrive whole in time.
fn too_slow(session: &Session, received_bytes: usize, error: io::Error) -> io::Error {
    Metrics::inc(&session.shard.metrics.requests_too_slow);
    warn!(
        protocol = session.protocol.label(),
        received_bytes,
        timeout = ?session.shard.config.request_timeout,
        "request not complete within the request timeout of its first bytes; connection closed"
    );
    error
}

/// Discards a frame over the limit without buffering it; returns its first bytes (up to
/// [`SKIPPED_HEAD_BYTES`]), from which the front-end answers it.
async fn skip_frame(session: &Session, inbox: &mut Inbox, frame_bytes: u64) -> io::Result<Vec<u8>> {
    let head_bytes = frame_bytes.min(SKIPPED_HEAD_BYTES as u64) as usize;
    let mut scratch = vec![0u8; READ_CHUNK_BYTES];
    while inbox.buf.len() < head_bytes {
        let n = read_into(session, inbox, &mut scratch).await?;
        inbox.buf.extend_from_slice(&scratch[..n]);
    }
    let head = inbox.buf[..head_bytes].to_vec();
    let take = (inbox.buf.len() as u64).min(frame_bytes);
    inbox.buf.advance(take as usize);
    let mut left = frame_bytes - take;
    while left > 0 {
        let want = (left as usize).min(scratch.len());
        left -= read_into(session, inbox, &mut scratch[..want]).await? as u64;
    }
    Ok(head)
}

/// One read of the middle of a frame into `scratch`, under the request deadline.
async fn read_into(session: &Session, inbox: &mut Inbox, scratch: &mut [u8]) -> io::Result<usize> {
    let len = inbox.buf.len();
    inbox
        .deadline
        .before_read(&session.stream, true)
        .map_err(|e| too_slow(session, len, e))?;
    match read_some(&session.stream, scratch).await {
        Ok(0) => Err(io::ErrorKind::UnexpectedEof.into()),
        Ok(n) => Ok(n),
        Err(error) if error.kind() == io::ErrorKind::TimedOut => Err(too_slow(session, len, error)),
        Err(error) => Err(error),
    }
}

/// The end of a connection in a clean stop. A request left unread in the socket makes the
/// close a reset, which can discard answers still on their way; and a client that sees
/// the connection end cannot tell whether its unanswered requests were executed. Where
/// the protocol can say so ([`Frontend::stopping`]), what still arrives is answered "not
/// done" until the client has been quiet for [`STOP_QUIET`] (so the close finds nothing
/// unread), for at most [`STOP_REFUSING_MAX`] (so a client that never stops sending cannot
/// hold the stop). The inbox is at a frame boundary.
async fn refuse_the_rest<F: Frontend>(
    frontend: &F,
    session: &Session,
    inbox: &mut Inbox,
    tx: &Queue<F::Pending>,
) {
    if !F::REFUSES_WHEN_STOPPING {
        return;
    }
    let until = Instant::now() + STOP_REFUSING_MAX;
    loop {
        while let Framing::Complete { frame_bytes } = frontend.framing(&inbox.buf) {
            let Some(refused) = frontend.stopping(&inbox.buf[..frame_bytes]) else {
                return;
            };
            inbox.buf.advance(frame_bytes);
            if !queue(session, tx, refused).await {
                return;
            }
        }
        if !matches!(frontend.framing(&inbox.buf), Framing::Incomplete { .. }) {
            return;
        }
        let wait = STOP_QUIET.min(until.saturating_duration_since(Instant::now()));
        if wait.is_zero() {
            return;
        }
        let read =
            async { Some(read_some(&session.stream, inbox.buf.spare(READ_CHUNK_BYTES)).await) };
        let quiet = async {
            glommio::timer::sleep(wait).await;
            None
        };
        match read.or(quiet).await {
            Some(Ok(n)) if n > 0 => inbox.buf.filled(n),
            _ => return,
        }
    }
}

/// Writes the answers in request order. When it ends before the reader (an answer that
/// closes the connection, a failed write), it hangs up, so the reader's pending read ends
/// too instead of waiting out the idle timeout.
async fn write_answers<F: Frontend>(
    frontend: Rc<F>,
    session: Rc<Session>,
    rx: LocalReceiver<(RequestKind, F::Pending)>,
) -> io::Result<()> {
    let written = write_in_order(&*frontend, &session, &rx).await;
    if !matches!(written, Ok(Ended::QueueClosed)) {
        hang_up(&session);
    }
    written.map(|_| ())
}

/// Why the writer stopped.
enum Ended {
    /// The reader is done and every answer went out.
    QueueClosed,
    /// An answer closed the connection.
    Closed,
}

/// Shuts the socket down both ways: a read waiting on it ends at once.
fn hang_up(session: &Session) {
    use std::os::fd::AsRawFd;
    let fd = session.stream.borrow().tcp().as_raw_fd();
    // A socket the peer already closed reports ENOTCONN; nothing more is to be done then.
    let _ = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Both);
}

async fn write_in_order<F: Frontend>(
    frontend: &F,
    session: &Rc<Session>,
    rx: &LocalReceiver<(RequestKind, F::Pending)>,
) -> io::Result<Ended> {
    // Grows with the first answers; a connection that never asks anything holds none.
    let mut out = Outbox::default();
    loop {
        let next = match poll_once(rx.recv()).await {
            Some(next) => next,
            None => {
                // Nothing else is ready: what was gathered goes out before the wait.
                out.send(session).await?;
                rx.recv().await
            }
        };
        let Some((kind, pending)) = next else {
            out.send(session).await?;
            return Ok(Ended::QueueClosed);
        };
        let answer = wait_for_answer(frontend, session, pending, &mut out).await?;
        match frontend.write(session, answer, &mut out) {
            Outcome::Done => {}
            Outcome::Failed(code) => count_error(session, kind, code),
            Outcome::Close(code) => {
                if let Some(code) = code {
                    count_error(session, kind, code);
                }
                out.send(session).await?;
                return Ok(Ended::Closed);
            }
        }
        if out.has_files() || out.len() >= WRITE_BATCH_BYTES {
            out.send(session).await?;
        }
    }
}

/// The answer to `pending`; when it is not ready at once, what is gathered goes out first,
/// so no answer waits behind a later one's fsync, mesh hop or long poll.
async fn wait_for_answer<F: Frontend>(
    frontend: &F,
    session: &Rc<Session>,
    pending: F::Pending,
    out: &mut Outbox,
) -> io::Result<F::Answer> {
    let mut answer = std::pin::pin!(frontend.answer(session, pending));
    if let Some(answer) = poll_once(answer.as_mut()).await {
        return Ok(answer);
    }
    out.send(session).await?;
    Ok(answer.await)
}

/// Counts a request, whatever its outcome. With [`count_error`], the only place requests
/// are counted: by the pipeline for every framed request, and by a v1 consumer or commit
/// (one request a connection) for theirs.
pub fn count_request(session: &Session, kind: RequestKind) {
    session.shard.metrics.request_counts.request(kind);
}

/// Counts an error answer (or, where the protocol has none, a refusal) of a request.
pub fn count_error(session: &Session, kind: RequestKind, code: ErrorCode) {
    let metrics = &session.shard.metrics;
    metrics.request_counts.error(kind, code);
    match code {
        ErrorCode::StorageFull => Metrics::inc(&metrics.produce_storage_full),
        ErrorCode::CorruptData => Metrics::inc(&metrics.corrupt_reads_refused),
        _ => {}
    }
}

/// A boxed future, for answers that wait on something the front-end does not name.
pub type Later<T> = std::pin::Pin<Box<dyn Future<Output = T>>>;
