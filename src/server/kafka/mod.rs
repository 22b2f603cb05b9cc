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

use std::future::Future;
use std::io;
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Encodable;
use tracing::{debug, warn};

use crate::metrics::counters::Metrics;
use crate::metrics::requests::RequestKind;
use crate::protocol::kafka::RequestHeader;
use crate::protocol::kafka::apis::{self, ApiError, KafkaRequest};
use crate::protocol::kafka::frame::{self, FrameError};
use crate::protocol::kafka::header::HeaderPrefix;
use crate::protocol::native::ErrorCode;
use crate::server::session::pipeline::{
    self, Framing, Frontend, Inbox, Later, Lost, Outcome, Started,
};
use crate::server::session::{FileRange, Outbox, Session};
use crate::shard::Shard;

mod acl_codes;
mod acls;
mod alter_configs;
mod alter_user_scram;
mod api_versions;
mod configs;
mod create_partitions;
mod create_topics;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_log_dirs;
mod describe_user_scram;
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
mod sasl;

/// Bytes a request may carry beyond one batch at the payload limit (headers, several
/// partitions' small batches).
const REQUEST_OVERHEAD_BYTES: u64 = 1 << 20;

pub use crate::server::session::Listener;

/// What every handler of one connection knows: the session.
pub type Conn = Session;

/// One part of an answer.
pub enum Part {
    Bytes(Vec<u8>),
    /// A range of a segment file, sent with sendfile.
    File(FileRange),
}

/// The answer to one request: parts written in order (none for a produce with acks=0).
#[derive(Default)]
pub struct Reply {
    pub parts: Vec<Part>,
    /// The connection closes once this answer is written (a failed login).
    pub close: bool,
}

impl Reply {
    pub fn frame(bytes: Vec<u8>) -> Reply {
        Reply {
            parts: vec![Part::Bytes(bytes)],
            close: false,
        }
    }

    pub fn none() -> Reply {
        Reply::default()
    }
}

/// What the writer does to answer one request.
pub enum Pending {
    Ready(Reply),
    Later(Later<Reply>),
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

/// The Kafka protocol's codec and handlers.
struct Kafka {
    body_max: u64,
}

/// Serves a Kafka connection whose first byte (0x00, the top byte of the first frame's
/// size) was already read.
pub async fn serve(session: Rc<Session>) -> io::Result<()> {
    let limits = session.shard.config.log.limits;
    let frontend = Kafka {
        body_max: limits.max_payload_bytes + limits.max_key_bytes + REQUEST_OVERHEAD_BYTES,
    };
    let inbox = Inbox::new(&session, &[0]);
    pipeline::run(Rc::new(frontend), session, inbox).await
}

impl Frontend for Kafka {
    type Pending = Pending;
    type Answer = Reply;

    fn framing(&self, buf: &[u8]) -> Framing {
        match frame::check(buf, self.body_max) {
            Ok(body_len) => match closes_connection(&buf[frame::SIZE_LEN..][..body_len]) {
                Some(lost) => Framing::Lost(lost),
                None => Framing::Complete {
                    frame_bytes: frame::SIZE_LEN + body_len,
                },
            },
            Err(FrameError::Incomplete { needed }) => Framing::Incomplete { needed },
            // A negative size or a frame over the limit: Kafka's framing gives no way to
            // answer a request that was not read, so the connection closes (as Kafka's
            // broker does), with a log line and a metric.
            Err(error) => Framing::Lost(Lost {
                reason: error.to_string(),
                counter: |metrics| &metrics.frames_too_large,
                request: None,
            }),
        }
    }

    async fn start(&self, session: &Rc<Session>, frame: &[u8]) -> Started<Pending> {
        // kafka-protocol decodes from `Bytes`; the records it slices out of this copy are
        // what a produce stages.
        let body = Bytes::copy_from_slice(&frame[frame::SIZE_LEN..]);
        dispatch(session, body).await
    }

    async fn answer(&self, _session: &Rc<Session>, pending: Pending) -> Reply {
        match pending {
            Pending::Ready(reply) => reply,
            Pending::Later(future) => future.await,
        }
    }

    fn write(&self, _session: &Session, reply: Reply, out: &mut Outbox) -> Outcome {
        for part in reply.parts {
            match part {
                Part::Bytes(bytes) => out.bytes().extend_from_slice(&bytes),
                Part::File(range) => out.file(range),
            }
        }
        if reply.close {
            Outcome::Close(Some(ErrorCode::AuthenticationFailed))
        } else {
            Outcome::Done
        }
    }

    fn before_login(&self, frame: &[u8]) -> Result<(), String> {
        let prefix = HeaderPrefix::peek(&frame[frame::SIZE_LEN..]).map_err(|e| e.to_string())?;
        let login = [
            ApiKey::ApiVersions,
            ApiKey::SaslHandshake,
            ApiKey::SaslAuthenticate,
        ];
        if login.iter().any(|key| *key as i16 == prefix.api_key) {
            Ok(())
        } else {
            Err(format!("Kafka api {}", prefix.api_key))
        }
    }

    fn too_large(&self, _: &Session, _: &[u8], _: u64) -> Option<Started<Pending>> {
        None // framing closes the connection on a frame over the limit
    }
}

/// A request answered by closing the connection, as Kafka 4.x does: an API it does not
/// serve, or a version outside the served range (below Kafka 4.0's floor, KIP-896, or above
/// 4.1's newest), for any API but ApiVersions (`apis::closes_connection`). The answers to
/// the requests before it still go out; it is logged and counted in `kafka_unsupported`.
fn closes_connection(body: &[u8]) -> Option<Lost> {
    let prefix = HeaderPrefix::peek(body).ok()?;
    if !apis::closes_connection(&prefix) {
        return None;
    }
    let served = apis::served(prefix.api_key).map_or("not served".to_string(), |s| {
        format!("v{}-v{}", s.min_version, s.max_version)
    });
    Some(Lost {
        reason: format!(
            "api={} version={} served={served}: a Kafka request at a version pagurus does not serve; connection closed, as Kafka closes it",
            prefix.api_key, prefix.api_version
        ),
        counter: |metrics| &metrics.kafka_unsupported,
        request: Some((
            RequestKind::KafkaUnknown,
            crate::protocol::native::ErrorCode::UnsupportedVersion,
        )),
    })
}

/// Decodes one request and starts it.
async fn dispatch(conn: &Rc<Conn>, body: Bytes) -> Started<Pending> {
    let shard = &conn.shard;
    Metrics::inc(&shard.metrics.kafka_requests);
    let prefix = HeaderPrefix::peek(&body).ok();
    let (header, request) = match apis::decode_request(body) {
        Ok(decoded) => decoded,
        Err(error) => {
            return Started {
                kind: RequestKind::KafkaUnknown,
                pending: refuse(shard, prefix, error),
            };
        }
    };
    let kind = RequestKind::kafka(header.api_key);
    debug!(api = ?header.api_key, version = header.api_version, correlation_id = header.correlation_id, "Kafka request");
    let pending = match request {
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
        KafkaRequest::DescribeAcls(r) => acls::describe(conn, header, r),
        KafkaRequest::CreateAcls(r) => acls::create(conn, header, r),
        KafkaRequest::DeleteAcls(r) => acls::delete(conn, header, r),
        KafkaRequest::DescribeUserScramCredentials(r) => {
            describe_user_scram::handle(conn, header, r)
        }
        KafkaRequest::AlterUserScramCredentials(r) => alter_user_scram::handle(conn, header, r),
        KafkaRequest::SaslHandshake(r) => sasl::handshake(conn, header, r),
        KafkaRequest::SaslAuthenticate(r) => sasl::authenticate(conn, header, r),
        group => groups::handle(conn, header, group),
    };
    Started { kind, pending }
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
