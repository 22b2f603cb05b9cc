//! HermitMQ v1 connections (`HERMIT-WIRE.md`), so existing HermitMQ clients work unchanged,
//! with pagurus's guarantees where HermitMQ has none:
//!
//! - producer: acknowledged per the fsync policy (HermitMQ acks before any fsync); sizes are
//!   checked before memory is allocated; a bad batch or name closes the connection with a
//!   log line and a counter, and nothing partial is stored.
//! - consumer: pushed from the group's committed offset with sendfile, like native fetches;
//!   one that disconnects while waiting for data is noticed at once and its task ends.
//! - commit: durable per the fsync policy before the `0x01` answer.

use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Instant;

use futures_lite::FutureExt;
use glommio::net::TcpStream;
use tracing::{debug, warn};

use crate::metrics::counters::Metrics;
use crate::metrics::requests::RequestKind;
use crate::protocol::hermit::{self, HermitError};
use crate::protocol::native::ErrorCode;
use crate::protocol::record::{BatchHeader, RecordError};
use crate::server::connection::handshake;
use crate::server::handoff::Place;
use crate::server::io::{RequestDeadline, read_some, write_all};
use crate::server::read_buf::ReadBuf;
use crate::server::sendfile::send_range;
use crate::shard::calls::{Fetch, SendPlan};
use crate::shard::data::Batches;
use crate::shard::topics::TopicMeta;
use crate::shard::{Failure, Shard};

const PRODUCE: RequestKind = RequestKind::HermitProduce;
const CONSUME: RequestKind = RequestKind::HermitConsume;
const COMMIT: RequestKind = RequestKind::HermitCommit;

/// Longest consumer long-poll before the loop looks again (it is woken by new data sooner).
const CONSUMER_WAIT_MS: u32 = 1000;
/// Bytes one push to a consumer covers at most.
const CONSUMER_PUSH_BYTES: u32 = 4 << 20;
/// Smallest read into a connection's buffer.
const READ_MIN_BYTES: usize = 4096;
/// Largest first read of a batch body; later reads at most double what arrived.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Serves a v1 connection whose first byte was `role`. Producers and consumers move to the
/// core that owns their partition right after the handshake (`server::handoff`).
pub async fn serve(
    shard: Rc<Shard>,
    stream: RefCell<TcpStream>,
    role: u8,
    deadline: Instant,
    mut place: Place,
) -> io::Result<()> {
    let read_ahead = place.take_read_ahead();
    let mut buf = ReadBuf::from_slice(&read_ahead);
    // Requests are counted per batch for producers, per session for consumers and commits
    // (a refused handshake counts as one request of the role, with its error), on the core
    // that serves them.
    match role {
        hermit::ROLE_PRODUCER => producer(&shard, &stream, &mut buf, deadline, &mut place).await,
        hermit::ROLE_CONSUMER => consumer(&shard, &stream, &mut buf, deadline, &mut place).await,
        _ => commit(&shard, &stream, &mut buf, deadline).await,
    }
}

/// Reads until `parse` succeeds; `None` when the connection must close (the reason was
/// logged and counted).
async fn read_message<T>(
    shard: &Shard,
    kind: RequestKind,
    stream: &RefCell<TcpStream>,
    buf: &mut ReadBuf,
    parse: impl Fn(&[u8]) -> Result<(T, usize), HermitError>,
) -> io::Result<Option<(T, usize)>> {
    loop {
        match parse(buf) {
            Ok((message, used)) => return Ok(Some((message, used))),
            Err(HermitError::Incomplete { needed }) => fill(stream, buf, needed).await?,
            Err(error) => {
                Metrics::inc(&shard.metrics.bad_names);
                shard.metrics.request_counts.request(kind);
                shard
                    .metrics
                    .request_counts
                    .error(kind, ErrorCode::InvalidName);
                warn!(%error, "HermitMQ handshake refused; connection closed");
                return Ok(None);
            }
        }
    }
}

/// Reads at least `needed` more bytes into `buf`.
async fn fill(stream: &RefCell<TcpStream>, buf: &mut ReadBuf, needed: usize) -> io::Result<()> {
    fill_by(stream, buf, needed, None).await
}

/// Reads at least `needed` more bytes into `buf`, giving up when `deadline` passes.
async fn fill_by(
    stream: &RefCell<TcpStream>,
    buf: &mut ReadBuf,
    needed: usize,
    mut deadline: Option<&mut RequestDeadline>,
) -> io::Result<()> {
    let target = buf.len() + needed;
    while buf.len() < target {
        let len = buf.len();
        if let Some(deadline) = deadline.as_mut() {
            deadline.before_read(stream, len > 0)?;
        }
        // Grow with what arrives (at most doubling), never to the size a header merely
        // announces: a producer cannot make the broker hold 50 MiB for a header alone.
        let chunk = (target - len)
            .min(len.max(READ_CHUNK_BYTES))
            .max(READ_MIN_BYTES);
        match read_some(stream, buf.spare(chunk)).await? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => buf.filled(n),
        }
    }
    Ok(())
}

async fn producer(
    shard: &Rc<Shard>,
    stream: &RefCell<TcpStream>,
    buf: &mut ReadBuf,
    deadline: Instant,
    place: &mut Place,
) -> io::Result<()> {
    let Some((hello, used)) = handshake(
        deadline,
        read_message(shard, PRODUCE, stream, buf, |b| {
            hermit::parse_producer_hello(b).map(|(h, n)| ((h.topic.to_string(), h.partition), n))
        }),
    )
    .await?
    else {
        return Ok(());
    };
    let (topic, partition) = hello;
    let meta = match shard.topic_on_demand(topic.as_bytes()).await {
        Ok(meta) => meta,
        Err(failure) => {
            shard.metrics.request_counts.request(PRODUCE);
            shard.metrics.request_counts.error(PRODUCE, failure.code);
            warn!(topic, error = %failure.message, "HermitMQ producer refused; connection closed");
            return Ok(());
        }
    };
    if partition < meta.partitions {
        let owner = shard.owner(&meta.name, partition);
        if place
            .move_to_owner(shard, stream, hermit::ROLE_PRODUCER, buf, owner)
            .await
        {
            return Ok(());
        }
    }
    buf.advance(used);
    let limits = shard.config.log.limits;
    let mut deadline =
        RequestDeadline::new(shard.config.idle_timeout, shard.config.request_timeout);
    loop {
        // The header first: magic and sizes are checked before the body is waited for.
        let header = loop {
            match BatchHeader::decode(buf, &limits) {
                Ok(header) => break header,
                Err(RecordError::Incomplete { needed }) => {
                    match next_bytes(shard, stream, buf, needed, &mut deadline).await {
                        Ok(Some(())) => {}
                        Ok(None) => return Ok(()),
                        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && buf.is_empty() => {
                            return Ok(());
                        }
                        Err(e) => return Err(too_slow(shard, buf.len(), e)),
                    }
                }
                Err(error) => {
                    Metrics::inc(&shard.metrics.bad_batches);
                    shard.metrics.request_counts.request(PRODUCE);
                    shard
                        .metrics
                        .request_counts
                        .error(PRODUCE, ErrorCode::from(&error));
                    warn!(%error, topic, "HermitMQ producer sent a bad batch; connection closed (v1 has no error frame)");
                    return Ok(());
                }
            }
        };
        let len = header.batch_len();
        if buf.len() < len {
            fill_by(stream, buf, len - buf.len(), Some(&mut deadline))
                .await
                .map_err(|e| too_slow(shard, buf.len(), e))?;
        }
        shard.metrics.request_counts.request(PRODUCE);
        deadline.done();
        if deleted_since(shard, &meta) {
            // v1 has no error frame, and an 0xFF would invite a retry that creates the
            // topic again: the connection ends, as the delete asks.
            shard
                .metrics
                .request_counts
                .error(PRODUCE, ErrorCode::UnknownTopic);
            warn!(
                topic,
                "topic deleted while this HermitMQ producer used it; connection closed"
            );
            return Ok(());
        }
        let ack = if partition >= meta.partitions {
            shard
                .metrics
                .request_counts
                .error(PRODUCE, ErrorCode::UnknownPartition);
            debug!(
                topic,
                partition, "HermitMQ produce to a partition that does not exist"
            );
            hermit::encode_ack(hermit::ACK_FAILED, 0)
        } else {
            match append(shard, &topic, partition, &buf[..len]).await {
                Ok(base_offset) => hermit::encode_ack(hermit::ACK_STORED, base_offset),
                Err(failure) => {
                    shard.metrics.request_counts.error(PRODUCE, failure.code);
                    if failure.code == crate::protocol::native::ErrorCode::StorageFull {
                        Metrics::inc(&shard.metrics.produce_storage_full);
                    }
                    warn!(topic, partition, error = %failure.message, "HermitMQ append failed; 0xFF sent");
                    hermit::encode_ack(hermit::ACK_FAILED, 0)
                }
            }
        };
        buf.advance(len);
        write_all(stream, &ack)
            .await
            .map_err(|e| write_stalled(shard, e))?;
    }
}

/// Reads at least `needed` more bytes of a batch. Between batches it also watches for the
/// broker stopping, and then ends with `None`: a v1 producer stops at a batch boundary,
/// as native connections stop at a frame boundary (v1 has no goodbye; the connection just
/// ends, and nothing half-read is dropped).
async fn next_bytes(
    shard: &Shard,
    stream: &RefCell<TcpStream>,
    buf: &mut ReadBuf,
    needed: usize,
    deadline: &mut RequestDeadline,
) -> io::Result<Option<()>> {
    if !buf.is_empty() {
        return fill_by(stream, buf, needed, Some(deadline)).await.map(Some);
    }
    if shard.shutdown.is_requested() {
        return Ok(None);
    }
    async { fill_by(stream, buf, needed, Some(deadline)).await.map(Some) }
        .or(async {
            shard.shutdown.wait().await;
            Ok(None)
        })
        .await
}

/// True when the topic this connection was opened on is gone (deleted, or deleted and made
/// again, which is another topic). Checked right before the call that would create it on
/// demand, with no await between, so a delete wins (see `shard::used`).
fn deleted_since(shard: &Shard, meta: &Rc<TopicMeta>) -> bool {
    shard
        .topic(&meta.name)
        .is_none_or(|current| current.id != meta.id)
}

/// Counts and logs a batch that did not arrive whole in time (mid-batch timeouts only).
fn too_slow(shard: &Shard, received_bytes: usize, error: io::Error) -> io::Error {
    if error.kind() == io::ErrorKind::TimedOut && received_bytes > 0 {
        Metrics::inc(&shard.metrics.requests_too_slow);
        warn!(
            received_bytes,
            timeout = ?shard.config.request_timeout,
            "HermitMQ batch not complete within the request timeout of its first bytes; connection closed"
        );
    }
    error
}

/// Counts and logs a client that stopped reading what it is sent.
fn write_stalled(shard: &Shard, error: io::Error) -> io::Error {
    if error.kind() == io::ErrorKind::TimedOut {
        Metrics::inc(&shard.metrics.writes_stalled);
        warn!(timeout = ?shard.config.idle_timeout, "HermitMQ client read nothing while data waited; connection closed");
    }
    error
}

/// Appends one batch wherever its partition lives; returns its base offset once acknowledged.
async fn append(
    shard: &Rc<Shard>,
    topic: &str,
    partition: u32,
    batch: &[u8],
) -> Result<u64, Failure> {
    let produced = shard
        .produce(topic.as_bytes(), partition, Batches::Single(batch))
        .await?;
    Ok(produced.base_offset)
}

enum Wake {
    Data(Result<SendPlan, Failure>),
    Disconnected,
}

async fn consumer(
    shard: &Rc<Shard>,
    stream: &RefCell<TcpStream>,
    buf: &mut ReadBuf,
    deadline: Instant,
    place: &mut Place,
) -> io::Result<()> {
    let Some(((group, topic, partition), _)) = handshake(
        deadline,
        read_message(shard, CONSUME, stream, buf, |b| {
            hermit::parse_consumer_hello(b)
                .map(|(h, n)| ((h.group.to_string(), h.topic.to_string(), h.partition), n))
        }),
    )
    .await?
    else {
        return Ok(());
    };
    let meta = match shard.topic_on_demand(topic.as_bytes()).await {
        Ok(meta) if partition < meta.partitions => meta,
        refused => {
            let code = refused.map_or_else(|f| f.code, |_| ErrorCode::UnknownPartition);
            shard.metrics.request_counts.request(CONSUME);
            shard.metrics.request_counts.error(CONSUME, code);
            warn!(
                topic,
                partition, "HermitMQ consumer for a partition that cannot exist; connection closed"
            );
            return Ok(());
        }
    };
    // Served by the owner, its fetch plans never cross cores.
    let owner = shard.owner(&meta.name, partition);
    if place
        .move_to_owner(shard, stream, hermit::ROLE_CONSUMER, buf, owner)
        .await
    {
        return Ok(());
    }
    shard.metrics.request_counts.request(CONSUME);
    // The client sends nothing more; a read that ends means it went away.
    stream.borrow().set_read_timeout(None)?;
    let log_start = shard
        .partition_state(&meta.name, partition)
        .await
        .map_or(0, |state| state.log_start_offset);
    let committed = shard
        .fetch_offset(group.as_bytes(), topic.as_bytes(), partition)
        .await
        .ok()
        .flatten();
    // Resume at the committed offset; skip forward if retention removed it.
    let mut offset = committed.unwrap_or(log_start).max(log_start);
    debug!(group, topic, partition, offset, "HermitMQ consumer starts");
    let mut probe = [0u8; 1];
    loop {
        if deleted_since(shard, &meta) {
            shard
                .metrics
                .request_counts
                .error(CONSUME, ErrorCode::UnknownTopic);
            warn!(
                group,
                topic,
                partition,
                "topic deleted while this HermitMQ consumer read it; connection closed"
            );
            return Ok(());
        }
        let call = Fetch {
            topic: topic.clone(),
            partition,
            offset,
            max_bytes: CONSUMER_PUSH_BYTES,
            max_wait_ms: CONSUMER_WAIT_MS,
        };
        let fetch = async { Wake::Data(shard.fetch(call).await) };
        let gone = async {
            // Any byte or end of stream from a consumer ends it: v1 consumers only listen.
            let _ = read_some(stream, &mut probe).await;
            Wake::Disconnected
        };
        let plan = match fetch.or(gone).await {
            Wake::Disconnected => {
                debug!(
                    group,
                    topic, partition, "HermitMQ consumer went away; cleaned up"
                );
                return Ok(());
            }
            Wake::Data(Ok(plan)) => plan,
            Wake::Data(Err(Failure {
                code: crate::protocol::native::ErrorCode::OffsetOutOfRange,
                range: Some((earliest, latest)),
                ..
            })) => {
                // Out of range: behind retention, skip to the oldest; past the end, wait there.
                offset = if offset < earliest { earliest } else { latest };
                continue;
            }
            Wake::Data(Err(failure)) => {
                shard.metrics.request_counts.error(CONSUME, failure.code);
                warn!(topic, partition, error = %failure.message, "HermitMQ consumer stopped");
                return Ok(());
            }
        };
        if plan.batches.is_empty() {
            if shard.shutdown.is_requested() {
                return Ok(());
            }
            continue;
        }
        let file = match crate::server::sendfile::open_segment(&plan.wal_path, plan.file_id) {
            Ok(file) => file,
            // Replaced by compaction or deleted by retention since the plan: plan again.
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                crate::metrics::counters::Metrics::inc(&shard.metrics.fetches_replanned);
                debug!(path = %plan.wal_path.display(), %error, "segment replaced after planning; fetching again");
                continue;
            }
            Err(error) => return Err(error),
        };
        send_range(stream, &file, plan.position, plan.length, plan.hot)
            .await
            .map_err(|e| write_stalled(shard, e))?;
        Metrics::add(&shard.metrics.bytes_out, plan.length);
        Metrics::add(&shard.metrics.records_out, plan.records);
        offset = plan.next_offset;
    }
}

async fn commit(
    shard: &Rc<Shard>,
    stream: &RefCell<TcpStream>,
    buf: &mut ReadBuf,
    deadline: Instant,
) -> io::Result<()> {
    let Some(((group, topic, partition, offset), _)) = handshake(
        deadline,
        read_message(shard, COMMIT, stream, buf, |b| {
            hermit::parse_commit(b).map(|(c, n)| {
                (
                    (
                        c.group.to_string(),
                        c.topic.to_string(),
                        c.partition,
                        c.offset,
                    ),
                    n,
                )
            })
        }),
    )
    .await?
    else {
        return Ok(());
    };
    shard.metrics.request_counts.request(COMMIT);
    match shard
        .commit_offset(group.as_bytes(), topic.as_bytes(), partition, offset)
        .await
    {
        Ok(()) => write_all(stream, &[hermit::COMMIT_DONE]).await,
        Err(failure) => {
            shard.metrics.request_counts.error(COMMIT, failure.code);
            // v1 has no error answer: close without 0x01, so the client sees the failure.
            warn!(group, topic, partition, error = %failure.message, "HermitMQ commit failed; connection closed");
            Ok(())
        }
    }
}
