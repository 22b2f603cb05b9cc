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

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;

use bytes::{Buf, BytesMut};
use futures_lite::FutureExt;
use futures_lite::future::poll_once;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use tracing::{debug, warn};

use crate::metrics::requests::RequestKind;
use crate::protocol::native::{
    self, ApiKey, ErrorCode, FrameCheck, MetadataResponse, PartitionMetadata, Request,
    TopicMetadata, encode_error,
};
use crate::server::io::{RequestDeadline, read_exact, read_some, write_all};
use crate::server::metrics::Metrics;
use crate::server::sendfile::send_range;
use crate::shard::mesh::{Answer, Call, SendPlan};
use crate::shard::{Failure, Shard, stage_all};
use crate::storage::{PartitionLog, Ticket};

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
/// Largest fetch response a client may ask for.
pub const FETCH_BYTES_MAX: u32 = 64 * 1024 * 1024;

const PRODUCE: RequestKind = RequestKind::Native(ApiKey::Produce);
const FETCH: RequestKind = RequestKind::Native(ApiKey::Fetch);

/// What the writer must do to answer one request.
enum Pending {
    /// Batches staged on a local partition; answer once `last` is committed.
    Produce {
        correlation_id: u32,
        log: Rc<PartitionLog>,
        base_offset: u64,
        last: Ticket,
    },
    /// A call already sent to another core; answer when it answers.
    Remote {
        correlation_id: u32,
        reply: ReplyTicket,
    },
    Fetch {
        correlation_id: u32,
        topic: String,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait_ms: u32,
    },
    /// Anything else: a future that yields the encoded response.
    Later(Pin<Box<dyn Future<Output = Vec<u8>>>>),
    Ready(Vec<u8>),
}

/// A mesh call in flight; dropping it forgets the call.
struct ReplyTicket {
    shard: Rc<Shard>,
    id: u64,
}

impl Drop for ReplyTicket {
    fn drop(&mut self) {
        self.shard.mesh.forget(self.id);
    }
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
    let writer = glommio::spawn_local(writer_loop(Rc::clone(&shard), Rc::clone(&stream), rx));
    let read = reader_loop(&shard, &stream, tx).await;
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
) -> io::Result<()> {
    let limits = shard.config.log.limits;
    let body_max = native::frame_body_max_bytes(&limits);
    // Allocated by the first read, and then only as large as the client needs.
    let mut buf = BytesMut::new();
    let mut boundary_read_bytes = BOUNDARY_READ_BYTES;
    let mut deadline = RequestDeadline::new(shard.config.idle_timeout);
    loop {
        match native::check_frame(&buf, body_max) {
            FrameCheck::Complete { frame_bytes } => {
                deadline.done();
                let pending = dispatch(shard, &buf[native::FRAME_LEN_BYTES..frame_bytes]).await;
                buf.advance(frame_bytes);
                if tx.send(pending).await.is_err() {
                    return Ok(()); // the writer failed; it reports why
                }
            }
            FrameCheck::Incomplete { needed } => {
                // Stop only between frames: a request half-read is finished first.
                let at_boundary = buf.is_empty();
                if at_boundary && shard.shutdown.is_requested() {
                    return Ok(());
                }
                let len = buf.len();
                // Grow with what arrives (at most doubling), never to the size a frame merely
                // announces: a client cannot make the broker hold memory for bytes it has not sent.
                if at_boundary && buf.capacity() > IDLE_BUFFER_BYTES_MAX {
                    // Give back what a large frame needed; an idle connection keeps little.
                    buf = BytesMut::new();
                }
                let chunk = if at_boundary {
                    boundary_read_bytes
                } else {
                    needed.min(len).max(READ_CHUNK_BYTES)
                };
                if let Err(e) = deadline.before_read(stream, !at_boundary) {
                    return Err(too_slow(shard, len, e));
                }
                buf.resize(len + chunk, 0);
                let read = async { Event::Read(read_some(stream, &mut buf[len..]).await) };
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
                        buf.truncate(len);
                        return Ok(());
                    }
                    Event::Read(Ok(0)) => return Ok(()),
                    Event::Read(Ok(n)) => {
                        buf.truncate(len + n);
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
                    body_max, "request frame over the limit; skipped"
                );
                let mut out = Vec::new();
                let message =
                    format!("frame of {body_bytes} bytes exceeds the limit of {body_max}");
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
        timeout = ?shard.config.idle_timeout,
        "request not complete within the idle timeout of its first bytes; connection closed"
    );
    error
}

/// Discards an oversized frame without buffering it; returns its correlation id (or 0 if
/// the frame is too short to have one).
async fn skip_frame(
    stream: &RefCell<TcpStream>,
    buf: &mut BytesMut,
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
fn error_frame(shard: &Shard, tag: (RequestKind, u32), failure: &Failure) -> Vec<u8> {
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
async fn dispatch(shard: &Rc<Shard>, body: &[u8]) -> Pending {
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
    let fail = |failure: Failure| Pending::Ready(error_frame(shard, tag, &failure));
    match request {
        Request::Produce {
            topic,
            partition,
            batches,
        } => {
            let meta = match shard.ensure_topic(topic).await {
                Ok(meta) => meta,
                Err(failure) => return fail(failure),
            };
            if partition >= meta.partitions {
                return fail(unknown_partition(&meta.name, partition, meta.partitions));
            }
            let owner = shard.owner(&meta.name, partition);
            if owner == shard.core {
                let Some(log) = shard.local_log(&meta.name, partition) else {
                    return fail(Failure::new(
                        ErrorCode::UnknownTopic,
                        format!("topic {} is being deleted", meta.name),
                    ));
                };
                return match stage_all(&log, batches, &shard.metrics).await {
                    Ok((base_offset, last)) => {
                        log.kick();
                        Pending::Produce {
                            correlation_id,
                            log,
                            base_offset,
                            last,
                        }
                    }
                    Err(failure) => fail(failure),
                };
            }
            let call = Call::Produce {
                topic: meta.name.clone(),
                partition,
                count: batches.count,
                batches: bytes::Bytes::copy_from_slice(batches.as_bytes()),
            };
            Metrics::inc(&shard.metrics.mesh_calls);
            match shard.mesh.start(owner, call).await {
                Ok(id) => Pending::Remote {
                    correlation_id,
                    reply: ReplyTicket {
                        shard: Rc::clone(shard),
                        id,
                    },
                },
                Err(failure) => fail(failure),
            }
        }
        Request::Fetch {
            topic,
            partition,
            offset,
            max_bytes,
            max_wait_ms,
        } => match shard.ensure_topic(topic).await {
            Ok(meta) => Pending::Fetch {
                correlation_id,
                topic: meta.name.clone(),
                partition,
                offset,
                max_bytes: max_bytes.min(FETCH_BYTES_MAX),
                max_wait_ms,
            },
            Err(failure) => fail(failure),
        },
        Request::ListOffsets {
            topic,
            partition,
            spec,
        } => {
            let topic = match shard.valid_name(topic, "topic") {
                Ok(topic) => topic.to_string(),
                Err(failure) => return fail(failure),
            };
            later(shard, tag, async move |shard: Rc<Shard>| {
                let owner = shard.owner(&topic, partition);
                match shard
                    .route(
                        owner,
                        Call::ListOffsets {
                            topic,
                            partition,
                            spec,
                        },
                    )
                    .await
                {
                    Answer::Offset(offset) => {
                        let mut out = Vec::new();
                        native::encode_offset_response(&mut out, correlation_id, offset);
                        Ok(out)
                    }
                    Answer::Failed(failure) => Err(failure),
                    other => Err(other.unexpected()),
                }
            })
        }
        Request::CreateTopic { name, settings } => {
            let name = name.to_vec();
            later(shard, tag, async move |shard: Rc<Shard>| {
                shard
                    .create_topic(&name, &settings)
                    .await
                    .map(|()| empty(correlation_id))
            })
        }
        Request::DeleteTopic { name } => {
            let name = name.to_vec();
            later(shard, tag, async move |shard: Rc<Shard>| {
                shard
                    .delete_topic(&name)
                    .await
                    .map(|()| empty(correlation_id))
            })
        }
        Request::Compact { topic, partition } => {
            let topic = topic.to_vec();
            later(shard, tag, async move |shard: Rc<Shard>| {
                let outcome = shard.compact(&topic, partition).await?;
                let mut out = Vec::new();
                native::encode_compact_response(
                    &mut out,
                    correlation_id,
                    &native::CompactResponse {
                        segments_rewritten: u32::try_from(outcome.segments_rewritten)
                            .unwrap_or(u32::MAX),
                        batches_removed: outcome.batches_removed,
                        bytes_before: outcome.bytes_before,
                        bytes_after: outcome.bytes_after,
                        duration_us: u64::try_from(outcome.duration.as_micros())
                            .unwrap_or(u64::MAX),
                    },
                );
                Ok(out)
            })
        }
        Request::Metadata { topics } => {
            let names: Vec<Vec<u8>> = topics.into_iter().map(<[u8]>::to_vec).collect();
            later(shard, tag, async move |shard: Rc<Shard>| {
                let metadata = metadata(&shard, names).await;
                let mut out = Vec::new();
                native::encode_metadata_response(&mut out, correlation_id, &metadata);
                Ok(out)
            })
        }
        Request::CommitOffset {
            group,
            topic,
            partition,
            offset,
        } => {
            let (group, topic) = (group.to_vec(), topic.to_vec());
            later(shard, tag, async move |shard: Rc<Shard>| {
                shard
                    .commit_offset(&group, &topic, partition, offset)
                    .await
                    .map(|()| empty(correlation_id))
            })
        }
        Request::FetchOffset {
            group,
            topic,
            partition,
        } => {
            let (group, topic) = (group.to_vec(), topic.to_vec());
            later(shard, tag, async move |shard: Rc<Shard>| {
                match shard.fetch_offset(&group, &topic, partition).await? {
                    Some(offset) => {
                        let mut out = Vec::new();
                        native::encode_offset_response(&mut out, correlation_id, offset);
                        Ok(out)
                    }
                    None => Err(Failure::new(
                        ErrorCode::NoCommittedOffset,
                        "the group has no committed offset here",
                    )),
                }
            })
        }
        Request::ListGroups => later(shard, tag, async move |shard: Rc<Shard>| {
            let mut groups: Vec<String> = shard
                .group_offsets(None)
                .await?
                .into_iter()
                .map(|e| e.0)
                .collect();
            groups.dedup();
            let mut out = Vec::new();
            native::encode_list_groups_response(&mut out, correlation_id, &groups);
            Ok(out)
        }),
        Request::DescribeGroup { group } => {
            let group = group.to_vec();
            later(shard, tag, async move |shard: Rc<Shard>| {
                let group = shard.valid_name(&group, "group")?;
                let entries = shard.group_offsets(Some(group)).await?;
                if entries.is_empty() {
                    return Err(Failure::new(
                        ErrorCode::UnknownGroup,
                        format!("group {group} has no committed offsets"),
                    ));
                }
                let mut partitions = Vec::with_capacity(entries.len());
                for (_, topic, partition, committed_offset) in entries {
                    // A topic deleted since the commit reports an end of 0.
                    let log_end_offset = shard
                        .partition_state(&topic, partition)
                        .await
                        .map_or(0, |(_, hw)| hw);
                    partitions.push(native::GroupPartition {
                        lag: log_end_offset.saturating_sub(committed_offset),
                        topic,
                        partition,
                        committed_offset,
                        log_end_offset,
                    });
                }
                let mut out = Vec::new();
                native::encode_describe_group_response(&mut out, correlation_id, &partitions);
                Ok(out)
            })
        }
    }
}

fn empty(correlation_id: u32) -> Vec<u8> {
    let mut out = Vec::new();
    native::encode_empty_response(&mut out, correlation_id, ErrorCode::None);
    out
}

fn unknown_partition(topic: &str, partition: u32, partitions: u32) -> Failure {
    Failure::new(
        ErrorCode::UnknownPartition,
        format!("topic {topic} has {partitions} partitions; {partition} does not exist"),
    )
}

/// Wraps a handler that runs when the writer reaches it.
fn later<F>(shard: &Rc<Shard>, tag: (RequestKind, u32), handler: F) -> Pending
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

async fn metadata(shard: &Rc<Shard>, names: Vec<Vec<u8>>) -> MetadataResponse {
    let names: Vec<String> = if names.is_empty() {
        shard.topic_names()
    } else {
        names
            .iter()
            .map(|n| String::from_utf8_lossy(n).into_owned())
            .collect()
    };
    let core_ports = (0..shard.cores())
        .map(|core| shard.config.shard_port(core).unwrap_or(0))
        .collect();
    let mut topics = Vec::with_capacity(names.len());
    for name in names {
        let Some(meta) = shard.topic(&name) else {
            topics.push(TopicMetadata {
                name,
                error: ErrorCode::UnknownTopic as u16,
                settings: Default::default(),
                partitions: Vec::new(),
            });
            continue;
        };
        let mut partitions = Vec::with_capacity(meta.partitions as usize);
        for partition in 0..meta.partitions {
            let owner = shard.owner(&name, partition);
            let call = Call::PartitionState {
                topic: name.clone(),
                partition,
            };
            let (log_start_offset, high_watermark) = match shard.route(owner, call).await {
                Answer::PartitionState {
                    log_start_offset,
                    high_watermark,
                } => (log_start_offset, high_watermark),
                _ => (0, 0),
            };
            partitions.push(PartitionMetadata {
                owner_core: u16::try_from(owner).unwrap_or(u16::MAX),
                log_start_offset,
                high_watermark,
            });
        }
        topics.push(TopicMetadata {
            name,
            error: 0,
            settings: meta.settings(),
            partitions,
        });
    }
    MetadataResponse { core_ports, topics }
}

async fn writer_loop(
    shard: Rc<Shard>,
    stream: Rc<RefCell<TcpStream>>,
    rx: LocalReceiver<Pending>,
) -> io::Result<()> {
    // Grows with the first answers; a connection that never asks anything holds none.
    let mut out = Vec::new();
    loop {
        let pending = match poll_once(rx.recv()).await {
            Some(Some(pending)) => pending,
            Some(None) => break,
            None => {
                flush(&stream, &mut out).await?;
                match rx.recv().await {
                    Some(pending) => pending,
                    None => break,
                }
            }
        };
        match pending {
            Pending::Produce {
                correlation_id,
                log,
                base_offset,
                last,
            } => {
                if !log.is_committed(&last).unwrap_or(true) {
                    // Send what is ready before waiting for the fsync.
                    flush(&stream, &mut out).await?;
                }
                match log.commit(last).await {
                    Ok(()) => native::encode_produce_response(
                        &mut out,
                        correlation_id,
                        base_offset,
                        last.end_offset,
                    ),
                    Err(error) => out.extend(error_frame(
                        &shard,
                        (PRODUCE, correlation_id),
                        &error.into(),
                    )),
                }
            }
            Pending::Remote {
                correlation_id,
                reply,
            } => {
                if !shard.mesh.is_answered(reply.id) {
                    flush(&stream, &mut out).await?;
                }
                let tag = (PRODUCE, correlation_id);
                match shard.mesh.finish(reply.id).await {
                    Answer::Produced {
                        base_offset,
                        next_offset,
                    } => native::encode_produce_response(
                        &mut out,
                        correlation_id,
                        base_offset,
                        next_offset,
                    ),
                    Answer::Failed(failure) => out.extend(error_frame(&shard, tag, &failure)),
                    other => out.extend(error_frame(&shard, tag, &other.unexpected())),
                }
            }
            Pending::Fetch {
                correlation_id,
                topic,
                partition,
                offset,
                max_bytes,
                max_wait_ms,
            } => {
                flush(&stream, &mut out).await?;
                let owner = shard.owner(&topic, partition);
                let call = Call::Fetch {
                    topic,
                    partition,
                    offset,
                    max_bytes,
                    max_wait_ms,
                };
                let tag = (FETCH, correlation_id);
                match shard.route(owner, call).await {
                    Answer::Plan(plan) => {
                        send_fetch(&shard, &stream, &mut out, correlation_id, plan).await?
                    }
                    Answer::Failed(failure) => out.extend(error_frame(&shard, tag, &failure)),
                    other => out.extend(error_frame(&shard, tag, &other.unexpected())),
                }
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

async fn flush(stream: &RefCell<TcpStream>, out: &mut Vec<u8>) -> io::Result<()> {
    if !out.is_empty() {
        write_all(stream, out).await?;
        out.clear();
    }
    Ok(())
}

/// Writes a fetch response: the head from user space, the batches from the file.
async fn send_fetch(
    shard: &Shard,
    stream: &RefCell<TcpStream>,
    out: &mut Vec<u8>,
    correlation_id: u32,
    plan: SendPlan,
) -> io::Result<()> {
    let mut plan = plan;
    let file = if plan.length > 0 {
        match shard.segment_files.open(&plan.wal_path, plan.file_id) {
            Ok(file) => Some(file),
            // Compaction replaced the segment (or retention deleted it) between the plan and
            // now. Answer "nothing yet" at the same offset: the consumer fetches again and
            // gets the new segment's batches (or the coded out-of-range error).
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Metrics::inc(&shard.metrics.fetches_replanned);
                tracing::debug!(path = %plan.wal_path.display(), %error, "fetch planned on a replaced segment; the client fetches again");
                plan.length = 0;
                plan.crcs.clear();
                None
            }
            Err(error) => {
                let failure = Failure::new(
                    ErrorCode::StorageError,
                    format!("cannot open {}: {error}", plan.wal_path.display()),
                );
                out.extend(error_frame(shard, (FETCH, correlation_id), &failure));
                return Ok(());
            }
        }
    } else {
        None
    };
    let data_bytes = u32::try_from(plan.length).expect("fetches are capped under 4 GiB");
    native::encode_fetch_head(
        out,
        correlation_id,
        plan.high_watermark,
        plan.log_start_offset,
        plan.crcs.iter().copied(),
        data_bytes,
    );
    flush(stream, out).await?;
    if let Some(file) = file {
        send_range(stream, &file, plan.position, plan.length, plan.hot).await?;
        Metrics::add(&shard.metrics.bytes_out, plan.length);
        Metrics::add(&shard.metrics.records_out, plan.records);
    }
    Ok(())
}
