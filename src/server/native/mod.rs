//! A native-protocol connection: a reader task that decodes requests in order, and a writer
//! task that answers them in the same order.
//!
//! The reader does everything that must happen in request order: it stages local produce
//! batches straight from its read buffer (no copy but the one into the partition's pending
//! buffer, no allocation), and sends calls for other cores into the mesh. It hands the
//! writer one [`Pending`] per request through a bounded queue; when the queue is full the
//! reader stops reading, and TCP pushes back on the client. The writer waits for each
//! answer in turn (a group commit, a mesh reply, a long-poll) and writes it, batching
//! responses that are ready together into one send, and sends fetched batches from the
//! segment files with sendfile.
//!
//! This module only frames, decodes, calls the shard API and encodes; one handler per
//! request kind: [`produce`], [`fetch`], [`metadata`], [`offsets`] (list, commit, fetch
//! committed), [`topics`] (create, delete, compact), [`groups`] (list, describe).

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;

use futures_lite::FutureExt;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use tracing::{debug, warn};

use crate::metrics::counters::Metrics;
use crate::metrics::requests::RequestKind;
use crate::protocol::native::{self, ApiKey, ErrorCode, FrameCheck, Request, encode_error};
use crate::server::io::{RequestDeadline, flush, next_answer, read_exact, read_some, write_all};
use crate::server::read_buf::ReadBuf;
use crate::shard::calls::Fetch;
use crate::shard::data::ProduceInFlight;
use crate::shard::used::UsedTopics;
use crate::shard::{Failure, Shard};

mod fetch;
mod groups;
mod metadata;
mod offsets;
mod produce;
mod stopping;
mod topics;

pub use fetch::FETCH_BYTES_MAX;

/// Per-read size of a connection's read buffer in the middle of frames, and at frame
/// boundaries while the client sends more than [`BOUNDARY_READ_BYTES`] at a time.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Read size at a frame boundary for a client that sends little at a time. The buffer is
/// zero-filled up to the read size, so this is what an idle connection keeps resident:
/// with 10,000 idle connections, 4 KiB rather than 64 KiB each.
const BOUNDARY_READ_BYTES: usize = 4 * 1024;
/// A read buffer larger than this is freed when the connection is between frames.
const IDLE_BUFFER_BYTES_MAX: usize = 1 << 20;
/// Responses ready to go are sent together once this many bytes are buffered.
const WRITE_BATCH_BYTES: usize = 64 * 1024;

/// A request's kind and correlation id: how its answer and its errors are labelled.
type Tag = (RequestKind, u32);

/// What the writer must do to answer one request.
enum Pending {
    /// A produce started (staged here, or sent to its owner); answer once acknowledged.
    Produce {
        correlation_id: u32,
        produce: ProduceInFlight,
    },
    /// A fetch: planned (here or by the owner) and sent when the writer reaches it.
    Fetch {
        correlation_id: u32,
        fetch: Fetch,
    },
    /// Anything else: a future that yields the encoded response.
    Later(Pin<Box<dyn Future<Output = Vec<u8>>>>),
    Ready(Vec<u8>),
}

/// Serves a native connection whose first byte was `first`.
pub async fn serve(
    shard: Rc<Shard>,
    stream: RefCell<TcpStream>,
    first: u8,
    deadline: std::time::Instant,
) -> io::Result<()> {
    let mut preface = [0u8; native::PREFACE_LEN];
    preface[0] = first;
    crate::server::connection::handshake(deadline, read_exact(&stream, &mut preface[1..])).await?;
    let version = match native::check_preface(&preface) {
        Ok(version) => version,
        Err(_) => {
            Metrics::inc(&shard.metrics.unknown_protocols);
            warn!(first_bytes = ?preface, "connection speaks no known protocol; closed");
            return Ok(());
        }
    };
    write_all(&stream, &native::preface(native::VERSION)).await?;
    if version != native::VERSION {
        warn!(
            version,
            "client protocol version not supported; closed after the preface"
        );
        return Ok(());
    }
    let stream = Rc::new(stream);
    let (tx, rx) = local_channel::new_bounded(shard.config.in_flight_max.max(1));
    // Shared by the reader (produce, commit, topic admin) and the writer (fetch).
    let used = Rc::new(UsedTopics::default());
    let writer = glommio::spawn_local(writer_loop(
        Rc::clone(&shard),
        Rc::clone(&stream),
        rx,
        Rc::clone(&used),
    ));
    let read = reader_loop(&shard, &stream, tx, &used).await;
    // The queue's sender is gone: the writer answers what is queued, then ends.
    let written = writer.await;
    if let Err(error) = &written
        && error.kind() == io::ErrorKind::TimedOut
    {
        Metrics::inc(&shard.metrics.writes_stalled);
        warn!(timeout = ?shard.config.idle_timeout, "client read nothing while answers waited; connection closed");
    }
    read.and(written)
}

enum Event {
    Read(io::Result<usize>),
    Shutdown,
}

async fn reader_loop(
    shard: &Rc<Shard>,
    stream: &RefCell<TcpStream>,
    tx: LocalSender<Pending>,
    used: &Rc<UsedTopics>,
) -> io::Result<()> {
    let limits = shard.config.log.limits;
    let body_max = native::frame_body_max_bytes(&limits);
    // Allocated by the first read, and then only as large as the client needs.
    let mut buf = ReadBuf::new();
    let mut boundary_read_bytes = BOUNDARY_READ_BYTES;
    let mut deadline =
        RequestDeadline::new(shard.config.idle_timeout, shard.config.request_timeout);
    loop {
        match native::check_frame(&buf, body_max) {
            FrameCheck::Complete { frame_bytes } => {
                deadline.done();
                let pending =
                    dispatch(shard, used, &buf[native::FRAME_LEN_BYTES..frame_bytes]).await;
                buf.advance(frame_bytes);
                if tx.send(pending).await.is_err() {
                    return Ok(()); // the writer failed; it reports why
                }
            }
            FrameCheck::Incomplete { needed } => {
                // Stop only between frames: a request half-read is finished first.
                let at_boundary = buf.is_empty();
                if at_boundary && shard.shutdown.is_requested() {
                    stopping::refuse_the_rest(stream, &tx, &mut buf, body_max).await;
                    return Ok(());
                }
                let len = buf.len();
                // Grow with what arrives (at most doubling), never to the size a frame merely
                // announces: a client cannot make the broker hold memory for bytes it has not sent.
                if at_boundary && buf.capacity() > IDLE_BUFFER_BYTES_MAX {
                    // Give back what a large frame needed; an idle connection keeps little.
                    buf = ReadBuf::new();
                }
                let chunk = if at_boundary {
                    boundary_read_bytes
                } else {
                    needed.min(len).max(READ_CHUNK_BYTES)
                };
                if let Err(e) = deadline.before_read(stream, !at_boundary) {
                    return Err(too_slow(shard, len, e));
                }
                let read = async { Event::Read(read_some(stream, buf.spare(chunk)).await) };
                let event = if at_boundary {
                    read.or(async {
                        shard.shutdown.wait().await;
                        Event::Shutdown
                    })
                    .await
                } else {
                    read.await
                };
                match event {
                    Event::Shutdown => {
                        stopping::refuse_the_rest(stream, &tx, &mut buf, body_max).await;
                        return Ok(());
                    }
                    Event::Read(Ok(0)) => return Ok(()),
                    Event::Read(Ok(n)) => {
                        buf.filled(n);
                        if at_boundary {
                            // A client that fills the small read has more waiting: read it
                            // in large chunks until it sends little at a time again.
                            boundary_read_bytes = if n == chunk {
                                READ_CHUNK_BYTES
                            } else if n < BOUNDARY_READ_BYTES {
                                BOUNDARY_READ_BYTES
                            } else {
                                boundary_read_bytes
                            };
                        }
                    }
                    Event::Read(Err(e)) if e.kind() == io::ErrorKind::TimedOut && !at_boundary => {
                        return Err(too_slow(shard, len, e));
                    }
                    Event::Read(Err(e)) => {
                        if e.kind() == io::ErrorKind::TimedOut {
                            // Counted with every other timeout in `connection::serve`.
                            debug!("idle connection closed");
                        }
                        return Err(e);
                    }
                }
            }
            FrameCheck::TooLarge { body_bytes } => {
                Metrics::inc(&shard.metrics.frames_too_large);
                let unknown = RequestKind::NativeUnknown;
                shard.metrics.request_counts.request(unknown);
                shard
                    .metrics
                    .request_counts
                    .error(unknown, ErrorCode::FrameTooLarge);
                let correlation_id = skip_frame(stream, &mut buf, body_bytes, &mut deadline)
                    .await
                    .map_err(|e| match e.kind() {
                        io::ErrorKind::TimedOut => too_slow(shard, buf.len(), e),
                        _ => e,
                    })?;
                deadline.done();
                warn!(
                    body_bytes,
                    body_max, "request frame over the limit (--max-payload-bytes); skipped"
                );
                let mut out = Vec::new();
                let message = format!(
                    "frame of {body_bytes} bytes exceeds the limit of {body_max} (the broker's --max-payload-bytes {} and the request's header)",
                    shard.config.log.limits.max_payload_bytes
                );
                encode_error(
                    &mut out,
                    correlation_id,
                    ErrorCode::FrameTooLarge,
                    &message,
                    None,
                );
                if tx.send(Pending::Ready(out)).await.is_err() {
                    return Ok(());
                }
            }
        }
    }
}

/// Counts, logs and describes a request that did not arrive whole in time.
fn too_slow(shard: &Shard, received_bytes: usize, error: io::Error) -> io::Error {
    Metrics::inc(&shard.metrics.requests_too_slow);
    warn!(
        received_bytes,
        timeout = ?shard.config.request_timeout,
        "request not complete within the request timeout of its first bytes; connection closed"
    );
    error
}

/// Discards an oversized frame without buffering it; returns its correlation id (or 0 if
/// the frame is too short to have one).
async fn skip_frame(
    stream: &RefCell<TcpStream>,
    buf: &mut ReadBuf,
    body_bytes: u64,
    deadline: &mut RequestDeadline,
) -> io::Result<u32> {
    let header_end = native::FRAME_LEN_BYTES + native::REQUEST_HEADER_LEN;
    let frame_bytes = native::FRAME_LEN_BYTES as u64 + body_bytes;
    let mut scratch = vec![0u8; READ_CHUNK_BYTES];
    while (buf.len() as u64) < frame_bytes.min(header_end as u64) {
        deadline.before_read(stream, true)?;
        let n = read_some(stream, &mut scratch).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&scratch[..n]);
    }
    let correlation_id = if body_bytes >= native::REQUEST_HEADER_LEN as u64 {
        u32::from_be_bytes(buf[8..12].try_into().expect("4 bytes"))
    } else {
        0
    };
    let mut left = frame_bytes;
    let take = (buf.len() as u64).min(left);
    buf.advance(take as usize);
    left -= take;
    while left > 0 {
        let want = (left as usize).min(scratch.len());
        deadline.before_read(stream, true)?;
        let n = read_some(stream, &mut scratch[..want]).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        left -= n as u64;
    }
    Ok(correlation_id)
}

/// An error answer to the request `(kind, correlation id)`, counted.
fn error_frame(shard: &Shard, tag: Tag, failure: &Failure) -> Vec<u8> {
    let (kind, correlation_id) = tag;
    shard.metrics.request_counts.error(kind, failure.code);
    match failure.code {
        ErrorCode::StorageFull => Metrics::inc(&shard.metrics.produce_storage_full),
        ErrorCode::CorruptData => Metrics::inc(&shard.metrics.corrupt_reads_refused),
        _ => {}
    }
    let mut out = Vec::new();
    encode_error(
        &mut out,
        correlation_id,
        failure.code,
        &failure.message,
        failure.range,
    );
    out
}

/// Decodes one request and starts it; returns what the writer must do to answer it.
async fn dispatch(shard: &Rc<Shard>, used: &Rc<UsedTopics>, body: &[u8]) -> Pending {
    let limits = shard.config.log.limits;
    let (header, request) = match native::decode_request(body, &limits) {
        Ok(decoded) => decoded,
        Err((header, error)) => {
            let kind = header
                .and_then(|h| ApiKey::from_u16(h.api))
                .map_or(RequestKind::NativeUnknown, RequestKind::Native);
            shard.metrics.request_counts.request(kind);
            Metrics::inc(&shard.metrics.requests_malformed);
            if matches!(error, native::DecodeError::Batch(_)) {
                Metrics::inc(&shard.metrics.bad_batches);
            }
            warn!(%error, "bad request");
            let correlation_id = header.map_or(0, |h| h.correlation_id);
            return Pending::Ready(error_frame(
                shard,
                (kind, correlation_id),
                &Failure::new(error.code(), error.to_string()),
            ));
        }
    };
    let correlation_id = header.correlation_id;
    let kind = RequestKind::Native(ApiKey::from_u16(header.api).expect("decoded: a known api"));
    shard.metrics.request_counts.request(kind);
    // Identifies the request to `later` and `error_frame`, which count its errors by kind.
    let tag = (kind, correlation_id);
    match request {
        Request::Produce {
            topic,
            partition,
            batches,
        } => produce::start(shard, used, tag, topic, partition, batches).await,
        Request::Fetch {
            topic,
            partition,
            offset,
            max_bytes,
            max_wait_ms,
        } => fetch::start(tag, topic, partition, offset, max_bytes, max_wait_ms),
        Request::ListOffsets {
            topic,
            partition,
            spec,
        } => offsets::list(shard, used, tag, topic, partition, spec),
        Request::CreateTopic { name, settings } => {
            used.forget(shard, name);
            topics::create(shard, tag, name, settings)
        }
        Request::DeleteTopic { name } => {
            used.forget(shard, name);
            topics::delete(shard, tag, name)
        }
        Request::Compact { topic, partition } => topics::compact(shard, tag, topic, partition),
        Request::Metadata { topics } => metadata::metadata(shard, tag, topics),
        Request::CommitOffset {
            group,
            topic,
            partition,
            offset,
        } => offsets::commit(shard, used, tag, group, topic, partition, offset),
        Request::FetchOffset {
            group,
            topic,
            partition,
        } => offsets::fetch(shard, tag, group, topic, partition),
        Request::ListGroups => groups::list(shard, tag),
        Request::DescribeGroup { group } => groups::describe(shard, tag, group),
        Request::JoinGroup(join) => groups::join(shard, tag, join),
        Request::Heartbeat {
            group,
            member_id,
            generation,
        } => groups::heartbeat(shard, tag, group, member_id, generation),
        Request::LeaveGroup { group, member_id } => groups::leave(shard, tag, group, member_id),
        Request::CommitGroupOffset {
            group,
            member_id,
            generation,
            topic,
            partition,
            offset,
        } => groups::commit(
            shard,
            tag,
            groups::Commit {
                group,
                member_id,
                generation,
                topic,
                partition,
                offset,
            },
        ),
        Request::DeleteGroup { group } => groups::delete(shard, tag, group),
    }
}

/// An empty success answer.
fn empty(correlation_id: u32) -> Vec<u8> {
    let mut out = Vec::new();
    native::encode_empty_response(&mut out, correlation_id, ErrorCode::None);
    out
}

/// Wraps a handler that runs when the writer reaches it.
fn later<F>(shard: &Rc<Shard>, tag: Tag, handler: F) -> Pending
where
    F: AsyncFnOnce(Rc<Shard>) -> Result<Vec<u8>, Failure> + 'static,
{
    let shard = Rc::clone(shard);
    Pending::Later(Box::pin(async move {
        match handler(Rc::clone(&shard)).await {
            Ok(frame) => frame,
            Err(failure) => error_frame(&shard, tag, &failure),
        }
    }))
}

async fn writer_loop(
    shard: Rc<Shard>,
    stream: Rc<RefCell<TcpStream>>,
    rx: LocalReceiver<Pending>,
    used: Rc<UsedTopics>,
) -> io::Result<()> {
    // Grows with the first answers; a connection that never asks anything holds none.
    let mut out = Vec::new();
    loop {
        let Some(pending) = next_answer(&rx, &stream, &mut out).await? else {
            break;
        };
        match pending {
            Pending::Produce {
                correlation_id,
                produce,
            } => {
                if !shard.produce_ready(&produce) {
                    // Send what is ready before waiting for the fsync or the owner.
                    flush(&stream, &mut out).await?;
                }
                produce::answer(&shard, &mut out, correlation_id, produce).await;
            }
            Pending::Fetch {
                correlation_id,
                fetch,
            } => {
                flush(&stream, &mut out).await?;
                fetch::answer(&shard, &used, &stream, &mut out, correlation_id, fetch).await?;
            }
            Pending::Later(future) => {
                flush(&stream, &mut out).await?;
                out.extend(future.await);
            }
            Pending::Ready(frame) => out.extend(frame),
        }
        if out.len() >= WRITE_BATCH_BYTES {
            flush(&stream, &mut out).await?;
        }
    }
    flush(&stream, &mut out).await
}
