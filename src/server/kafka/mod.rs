//! A Kafka-protocol connection (first byte 0x00, `docs/KAFKA.md`): a reader task that
//! frames and decodes requests in order, and a writer task that answers them in the same
//! order, as Kafka requires.
//!
//! The reader does what must happen in request order: it starts produces (staged here, or
//! sent to the owner core) before it reads the next request, so pipelined produces get
//! their offsets in request order. Everything else becomes a future the writer awaits when
//! it reaches it. A Fetch answer is written in parts: the head from user space, the stored
//! RecordBatches from the segment files with sendfile.
//!
//! This module only frames, decodes and dispatches; one handler per API in its own file,
//! each calling the shard API. Group APIs live in `groups*.rs`.

use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use futures_lite::FutureExt;
use futures_lite::future::poll_once;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use kafka_protocol::protocol::Encodable;
use tracing::{debug, warn};

use crate::metrics::counters::Metrics;
use crate::protocol::kafka::RequestHeader;
use crate::protocol::kafka::apis::{self, ApiError, KafkaRequest};
use crate::protocol::kafka::frame::{self, FrameError};
use crate::protocol::kafka::header::HeaderPrefix;
use crate::server::io::{RequestDeadline, flush, next_answer, read_some};
use crate::shard::Shard;
use crate::shard::used::UsedTopics;

mod alter_configs;
mod api_versions;
mod configs;
mod create_partitions;
mod create_topics;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_log_dirs;
mod elect_leaders;
mod errors;
mod fetch;
mod groups;
mod groups_admin;
mod groups_find;
mod groups_join;
mod groups_member;
mod groups_offsets;
mod init_producer_id;
mod list_offsets;
mod metadata;
mod produce;

/// Reads between frames and inside them.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// A read buffer larger than this is freed between frames.
const IDLE_BUFFER_BYTES_MAX: usize = 1 << 20;
/// Answers ready together are sent in one write up to this size.
const WRITE_BATCH_BYTES: usize = 64 * 1024;
/// Bytes a request may carry beyond one batch at the payload limit (headers, several
/// partitions' small batches).
const REQUEST_OVERHEAD_BYTES: u64 = 1 << 20;

/// Which listener accepted the connection: it decides what "not the leader" means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listener {
    /// The main port: any core may have accepted it (SO_REUSEPORT), so requests for other
    /// cores' partitions go through the shard API (a mesh hop), never NOT_LEADER.
    Main,
    /// A core's shard port, advertised in Metadata as broker `core`: a partition another
    /// core owns gets NOT_LEADER_OR_FOLLOWER, and the client refreshes its metadata.
    Shard(usize),
}

/// What every handler of one connection knows.
pub struct Conn {
    pub shard: Rc<Shard>,
    pub listener: Listener,
    /// The address the client reached this broker at: what Metadata advertises.
    pub host: String,
    /// What this connection used, so that a deleted topic stays deleted (`shard::used`).
    pub used: UsedTopics,
}

impl Conn {
    /// True when a request for a partition owned by `owner` must be refused with
    /// NOT_LEADER_OR_FOLLOWER on this connection.
    pub fn not_leader(&self, owner: usize) -> bool {
        matches!(self.listener, Listener::Shard(core) if core != owner)
    }
}

/// One part of an answer.
pub enum Part {
    Bytes(Vec<u8>),
    /// `length` bytes of a segment file from `position`, sent with sendfile.
    File {
        file: Rc<std::fs::File>,
        position: u64,
        length: u64,
        hot: bool,
    },
}

/// The answer to one request: parts written in order (none for a produce with acks=0).
#[derive(Default)]
pub struct Reply {
    pub parts: Vec<Part>,
}

impl Reply {
    pub fn frame(bytes: Vec<u8>) -> Reply {
        Reply {
            parts: vec![Part::Bytes(bytes)],
        }
    }

    pub fn none() -> Reply {
        Reply::default()
    }
}

/// What the writer does to answer one request.
pub enum Pending {
    Ready(Reply),
    Later(Pin<Box<dyn Future<Output = Reply>>>),
}

impl Pending {
    pub fn later(future: impl Future<Output = Reply> + 'static) -> Pending {
        Pending::Later(Box::pin(future))
    }
}

/// Encodes `body` as the framed answer to `header`'s request.
pub fn respond<R: Encodable>(header: &RequestHeader, body: &R) -> Vec<u8> {
    let mut out = BytesMut::new();
    match apis::encode_response(
        &mut out,
        header.api_key,
        header.api_version,
        header.correlation_id,
        body,
    ) {
        Ok(()) => out.to_vec(),
        Err(error) => {
            // A response pagurus built that its own version cannot carry: a bug, answered
            // as an unsupported version rather than a dropped connection.
            warn!(api = ?header.api_key, version = header.api_version, %error, "response does not encode");
            let mut out = BytesMut::new();
            apis::unsupported_response(&mut out, prefix_of(header));
            out.to_vec()
        }
    }
}

fn prefix_of(header: &RequestHeader) -> HeaderPrefix {
    HeaderPrefix {
        api_key: header.api_key as i16,
        api_version: header.api_version,
        correlation_id: header.correlation_id,
    }
}

/// Serves a Kafka connection whose first byte (0x00, the top byte of the first frame's
/// size) was already read.
pub async fn serve(shard: Rc<Shard>, stream: RefCell<TcpStream>) -> io::Result<()> {
    let local = stream.borrow().local_addr()?;
    let listener =
        match (0..shard.cores()).find(|&c| shard.config.shard_port(c) == Some(local.port())) {
            Some(core) => Listener::Shard(core),
            None => Listener::Main,
        };
    let conn = Rc::new(Conn {
        shard: Rc::clone(&shard),
        listener,
        host: local.ip().to_string(),
        used: UsedTopics::kafka(&shard),
    });
    let stream = Rc::new(stream);
    let (tx, rx) = local_channel::new_bounded(shard.config.in_flight_max.max(1));
    let writer = glommio::spawn_local(writer_loop(Rc::clone(&shard), Rc::clone(&stream), rx));
    let read = reader_loop(&conn, &stream, tx).await;
    let written = writer.await;
    if let Err(error) = &written
        && error.kind() == io::ErrorKind::TimedOut
    {
        Metrics::inc(&shard.metrics.writes_stalled);
        warn!(timeout = ?shard.config.idle_timeout, "Kafka client read nothing while answers waited; connection closed");
    }
    read.and(written)
}

async fn reader_loop(
    conn: &Rc<Conn>,
    stream: &RefCell<TcpStream>,
    tx: LocalSender<Pending>,
) -> io::Result<()> {
    let shard = &conn.shard;
    let body_max = shard.config.log.limits.max_payload_bytes
        + shard.config.log.limits.max_key_bytes
        + REQUEST_OVERHEAD_BYTES;
    // The first byte was read by the protocol selection.
    let mut buf = BytesMut::from(&[0u8][..]);
    let mut deadline =
        RequestDeadline::new(shard.config.idle_timeout, shard.config.request_timeout);
    loop {
        match frame::check(&buf, body_max) {
            Ok(body_len) => {
                deadline.done();
                let frame_len = frame::SIZE_LEN + body_len;
                let body = buf.split_to(frame_len).freeze().slice(frame::SIZE_LEN..);
                if errors::closes_connection(shard, &body) {
                    return Ok(());
                }
                let pending = dispatch(conn, body).await;
                if tx.send(pending).await.is_err() {
                    return Ok(());
                }
            }
            Err(FrameError::Incomplete { needed }) => {
                let at_boundary = buf.is_empty();
                if at_boundary && shard.shutdown.is_requested() {
                    return Ok(());
                }
                if at_boundary && buf.capacity() > IDLE_BUFFER_BYTES_MAX {
                    buf = BytesMut::new();
                }
                let len = buf.len();
                let chunk = needed.min(len.max(READ_CHUNK_BYTES)).max(READ_CHUNK_BYTES);
                deadline.before_read(stream, !at_boundary)?;
                buf.resize(len + chunk, 0);
                let read = async { Some(read_some(stream, &mut buf[len..]).await) };
                let event = if at_boundary {
                    read.or(async {
                        shard.shutdown.wait().await;
                        None
                    })
                    .await
                } else {
                    read.await
                };
                match event {
                    None => return Ok(()),
                    Some(Ok(0)) => return Ok(()),
                    Some(Ok(n)) => buf.truncate(len + n),
                    Some(Err(e)) => {
                        if e.kind() == io::ErrorKind::TimedOut && !at_boundary {
                            Metrics::inc(&shard.metrics.requests_too_slow);
                        }
                        return Err(e);
                    }
                }
            }
            Err(error) => {
                // A negative size or a frame over the limit: Kafka's framing gives no way to
                // answer a request that was not read, so the connection closes (as Kafka's
                // broker does), with a log line and a metric.
                Metrics::inc(&shard.metrics.frames_too_large);
                warn!(%error, "Kafka frame refused; connection closed");
                return Ok(());
            }
        }
    }
}

/// Decodes one request and starts it.
async fn dispatch(conn: &Rc<Conn>, body: Bytes) -> Pending {
    let shard = &conn.shard;
    Metrics::inc(&shard.metrics.kafka_requests);
    let prefix = HeaderPrefix::peek(&body).ok();
    let (header, request) = match apis::decode_request(body) {
        Ok(decoded) => decoded,
        Err(error) => return refuse(shard, prefix, error),
    };
    debug!(api = ?header.api_key, version = header.api_version, correlation_id = header.correlation_id, "Kafka request");
    match request {
        KafkaRequest::ApiVersions(r) => api_versions::handle(&header, r),
        KafkaRequest::Metadata(r) => metadata::handle(conn, header, r),
        KafkaRequest::Produce(r) => produce::start(conn, header, r).await,
        KafkaRequest::Fetch(r) => fetch::handle(conn, header, r),
        KafkaRequest::ListOffsets(r) => list_offsets::handle(conn, header, r),
        KafkaRequest::CreateTopics(r) => create_topics::handle(conn, header, r),
        KafkaRequest::DeleteTopics(r) => delete_topics::handle(conn, header, r),
        KafkaRequest::CreatePartitions(r) => create_partitions::handle(conn, header, r),
        KafkaRequest::DeleteRecords(r) => delete_records::handle(conn, header, r),
        KafkaRequest::DescribeCluster(r) => describe_cluster::handle(conn, header, r),
        KafkaRequest::DescribeLogDirs(r) => describe_log_dirs::handle(conn, header, r),
        KafkaRequest::ElectLeaders(r) => elect_leaders::handle(conn, header, r),
        KafkaRequest::DescribeConfigs(r) => describe_configs::handle(conn, header, r),
        KafkaRequest::AlterConfigs(r) => alter_configs::handle_legacy(conn, header, r),
        KafkaRequest::IncrementalAlterConfigs(r) => {
            alter_configs::handle_incremental(conn, header, r)
        }
        KafkaRequest::InitProducerId(r) => init_producer_id::handle(conn, header, r),
        group => groups::handle(conn, header, group),
    }
}

/// The answer to a request that did not decode: UNSUPPORTED_VERSION for an API or version
/// outside the served table, INVALID_REQUEST for a malformed one.
fn refuse(shard: &Shard, prefix: Option<HeaderPrefix>, error: ApiError) -> Pending {
    let mut out = BytesMut::new();
    match error {
        ApiError::Unsupported { prefix } => {
            Metrics::inc(&shard.metrics.kafka_unsupported);
            debug!(
                api = prefix.api_key,
                version = prefix.api_version,
                "Kafka API or version not served"
            );
            apis::unsupported_response(&mut out, prefix);
        }
        ApiError::Malformed { prefix, reason } => {
            Metrics::inc(&shard.metrics.requests_malformed);
            warn!(api = prefix.api_key, version = prefix.api_version, %reason, "malformed Kafka request");
            errors::invalid_request(&mut out, prefix);
        }
        ApiError::Header(error) => {
            Metrics::inc(&shard.metrics.requests_malformed);
            warn!(%error, "malformed Kafka request header");
            match prefix {
                Some(prefix) => errors::invalid_request(&mut out, prefix),
                // Fewer than 8 bytes: no correlation id to answer under.
                None => return Pending::Ready(Reply::none()),
            }
        }
    }
    Pending::Ready(Reply::frame(out.to_vec()))
}

async fn writer_loop(
    shard: Rc<Shard>,
    stream: Rc<RefCell<TcpStream>>,
    rx: LocalReceiver<Pending>,
) -> io::Result<()> {
    let mut out = Vec::new();
    loop {
        let Some(pending) = next_answer(&rx, &stream, &mut out).await? else {
            break;
        };
        let reply = match pending {
            Pending::Ready(reply) => reply,
            Pending::Later(mut future) => match poll_once(&mut future).await {
                Some(reply) => reply,
                None => {
                    // Send what is ready before waiting (an fsync, a long poll, a mesh hop).
                    flush(&stream, &mut out).await?;
                    future.await
                }
            },
        };
        for part in reply.parts {
            match part {
                Part::Bytes(bytes) => out.extend_from_slice(&bytes),
                Part::File {
                    file,
                    position,
                    length,
                    hot,
                } => {
                    flush(&stream, &mut out).await?;
                    crate::server::sendfile::send_range(&stream, &file, position, length, hot)
                        .await?;
                    Metrics::add(&shard.metrics.bytes_out, length);
                }
            }
        }
        if out.len() >= WRITE_BATCH_BYTES {
            flush(&stream, &mut out).await?;
        }
    }
    flush(&stream, &mut out).await
}
