//! A native-protocol connection: the session's pipeline ([`crate::server::session`]) with
//! this protocol's codec and one handler per request kind.
//!
//! The reader starts each request in order: it stages local produce batches straight from
//! its read buffer (no copy but the one into the partition's pending buffer, no
//! allocation), and sends calls for other cores into the mesh. The writer answers in the
//! same order; fetched batches go from the segment files with sendfile.
//!
//! Handlers: [`produce`], [`fetch`], [`metadata`], [`offsets`] (list, commit, fetch
//! committed), [`topics`] (create, delete, compact), [`groups`] (list, describe, join, ...),
//! [`cluster`] (the node's cluster status).

use std::io;
use std::rc::Rc;

use tracing::warn;

use crate::metrics::counters::Metrics;
use crate::metrics::requests::RequestKind;
use crate::protocol::native::{self, ApiKey, ErrorCode, FrameCheck, Request, encode_error};
use crate::server::io::{read_exact, write_all};
use crate::server::session::pipeline::{self, Framing, Frontend, Inbox, Later, Outcome, Started};
use crate::server::session::{Outbox, Session};
use crate::shard::calls::{Fetch, Produced, SendPlan};
use crate::shard::data::ProduceInFlight;
use crate::shard::{Shard, ShardError};
use refusal::Refusal;

mod admin;
mod authorize;
mod cluster;
mod fetch;
mod groups;
mod login;
mod metadata;
mod offsets;
mod produce;
pub mod refusal;
mod topics;

pub use fetch::FETCH_BYTES_MAX;

/// A request's kind and correlation id: how its answer and its errors are labelled.
type Tag = (RequestKind, u32);

/// What the writer must do to answer one request.
pub enum Pending {
    /// A produce started (staged here, or sent to its owner); answered once acknowledged.
    Produce {
        correlation_id: u32,
        produce: ProduceInFlight,
    },
    /// A fetch: planned (here or by the owner) when the writer reaches it.
    Fetch {
        correlation_id: u32,
        fetch: Fetch,
    },
    /// Anything else: a future that yields the encoded answer.
    Later(Later<Answer>),
    Ready(Answer),
}

/// An answer, ready to be written.
pub enum Answer {
    Produced {
        correlation_id: u32,
        produced: Result<Produced, ShardError>,
    },
    Fetched {
        correlation_id: u32,
        plan: Result<SendPlan, ShardError>,
    },
    /// An encoded answer, and the error it carries.
    Frame {
        frame: Vec<u8>,
        error: Option<ErrorCode>,
    },
    /// An error answer after which the connection closes (a failed login).
    Closing { frame: Vec<u8>, error: ErrorCode },
}

impl Answer {
    /// The coded error answer to the request `correlation_id`.
    pub(super) fn failed(correlation_id: u32, failure: impl Into<Refusal>) -> Answer {
        let failure = failure.into();
        Answer::Frame {
            frame: error_frame(correlation_id, &failure),
            error: Some(failure.code),
        }
    }
}

/// The native protocol's codec and handlers.
struct Native {
    body_max: usize,
}

/// Serves a native connection whose first byte was `first`.
pub async fn serve(
    session: Rc<Session>,
    first: u8,
    deadline: std::time::Instant,
) -> io::Result<()> {
    let shard = &session.shard;
    let mut preface = [0u8; native::PREFACE_LEN];
    preface[0] = first;
    crate::server::connection::handshake(deadline, read_exact(&session.stream, &mut preface[1..]))
        .await?;
    let version = match native::check_preface(&preface) {
        Ok(version) => version,
        Err(_) => {
            Metrics::inc(&shard.metrics.unknown_protocols);
            warn!(first_bytes = ?preface, "connection speaks no known protocol; closed");
            return Ok(());
        }
    };
    write_all(&session.stream, &native::preface(native::VERSION)).await?;
    if version != native::VERSION {
        warn!(
            version,
            "client protocol version not supported; closed after the preface"
        );
        return Ok(());
    }
    let frontend = Native {
        body_max: native::frame_body_max_bytes(&shard.config.log.limits),
    };
    let inbox = Inbox::new(&session, &[]);
    pipeline::run(Rc::new(frontend), session, inbox).await
}

impl Frontend for Native {
    type Pending = Pending;
    type Answer = Answer;
    const REFUSES_WHEN_STOPPING: bool = true;

    fn framing(&self, buf: &[u8]) -> Framing {
        match native::check_frame(buf, self.body_max) {
            FrameCheck::Complete { frame_bytes } => Framing::Complete { frame_bytes },
            FrameCheck::Incomplete { needed } => Framing::Incomplete { needed },
            FrameCheck::TooLarge { body_bytes } => Framing::TooLarge {
                frame_bytes: native::FRAME_LEN_BYTES as u64 + body_bytes,
            },
        }
    }

    async fn start(&self, session: &Rc<Session>, frame: &[u8]) -> Started<Pending> {
        dispatch(session, &frame[native::FRAME_LEN_BYTES..]).await
    }

    async fn answer(&self, session: &Rc<Session>, pending: Pending) -> Answer {
        let shard = &session.shard;
        match pending {
            Pending::Produce {
                correlation_id,
                produce,
            } => Answer::Produced {
                correlation_id,
                produced: shard.finish_produce(produce).await,
            },
            Pending::Fetch {
                correlation_id,
                fetch,
            } => Answer::Fetched {
                correlation_id,
                plan: fetch::plan(shard, &session.used, fetch).await,
            },
            Pending::Later(future) => future.await,
            Pending::Ready(answer) => answer,
        }
    }

    fn write(&self, session: &Session, answer: Answer, out: &mut Outbox) -> Outcome {
        let (frame, error) = match answer {
            Answer::Produced {
                correlation_id,
                produced: Ok(produced),
            } => {
                native::encode_produce_response(
                    out.bytes(),
                    correlation_id,
                    produced.base_offset,
                    produced.next_offset,
                );
                return Outcome::Done;
            }
            Answer::Fetched {
                correlation_id,
                plan: Ok(plan),
            } => return fetch::write(session, correlation_id, plan, out),
            Answer::Produced {
                correlation_id,
                produced: Err(failure),
            }
            | Answer::Fetched {
                correlation_id,
                plan: Err(failure),
            } => {
                let refusal = Refusal::from(failure);
                (error_frame(correlation_id, &refusal), Some(refusal.code))
            }
            Answer::Frame { frame, error } => (frame, error),
            Answer::Closing { frame, error } => {
                out.bytes().extend_from_slice(&frame);
                return Outcome::Close(Some(error));
            }
        };
        out.bytes().extend_from_slice(&frame);
        error.map_or(Outcome::Done, Outcome::Failed)
    }

    fn before_login(&self, frame: &[u8]) -> Result<(), String> {
        // Only the login itself: its api key follows the length prefix.
        match kind_of(frame.get(native::FRAME_LEN_BYTES..).unwrap_or_default()) {
            RequestKind::Native(ApiKey::Authenticate) => Ok(()),
            RequestKind::Native(api) => Err(format!("native {}", api.name())),
            _ => Err("a native request of no known api".to_string()),
        }
    }

    fn too_large(
        &self,
        session: &Session,
        head: &[u8],
        frame_bytes: u64,
    ) -> Option<Started<Pending>> {
        // The correlation id follows the frame's length, api and version; a frame too short
        // to hold one is answered under 0.
        let correlation_id = head
            .get(8..12)
            .map_or(0, |id| u32::from_be_bytes(id.try_into().expect("4 bytes")));
        let failure = Refusal::new(
            ErrorCode::FrameTooLarge,
            format!(
                "frame of {} bytes exceeds the limit of {} (the broker's --max-payload-bytes {} and the request's header)",
                frame_bytes - native::FRAME_LEN_BYTES as u64,
                self.body_max,
                session.shard.config.log.limits.max_payload_bytes
            ),
        );
        Some(Started {
            kind: RequestKind::NativeUnknown,
            pending: Pending::Ready(Answer::failed(correlation_id, failure)),
        })
    }

    fn stopping(&self, frame: &[u8]) -> Option<Started<Pending>> {
        // The correlation id is after the length, api key and version.
        let correlation_id = frame
            .get(8..12)
            .map_or(0, |id| u32::from_be_bytes(id.try_into().expect("4 bytes")));
        let failure = Refusal::new(
            ErrorCode::ShuttingDown,
            "the broker is stopping; nothing of this request was done",
        );
        Some(Started {
            kind: kind_of(frame.get(native::FRAME_LEN_BYTES..).unwrap_or_default()),
            pending: Pending::Ready(Answer::failed(correlation_id, failure)),
        })
    }
}

/// The kind of the request in `body`, as far as its api key can be read.
fn kind_of(body: &[u8]) -> RequestKind {
    body.get(..2)
        .and_then(|api| ApiKey::from_u16(u16::from_be_bytes([api[0], api[1]])))
        .map_or(RequestKind::NativeUnknown, RequestKind::Native)
}

/// The coded error answer to the request `correlation_id` (counted by the pipeline, from
/// the [`Outcome`] its answer reports).
fn error_frame(correlation_id: u32, failure: &Refusal) -> Vec<u8> {
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
async fn dispatch(session: &Rc<Session>, body: &[u8]) -> Started<Pending> {
    let (shard, used) = (&session.shard, &session.used);
    let limits = shard.config.log.limits;
    let (header, request) = match native::decode_request(body, &limits) {
        Ok(decoded) => decoded,
        Err((header, error)) => {
            let kind = header
                .and_then(|h| ApiKey::from_u16(h.api))
                .map_or(RequestKind::NativeUnknown, RequestKind::Native);
            Metrics::inc(&shard.metrics.requests_malformed);
            if matches!(error, native::DecodeError::Batch(_)) {
                Metrics::inc(&shard.metrics.bad_batches);
            }
            warn!(%error, "bad request");
            let correlation_id = header.map_or(0, |h| h.correlation_id);
            let failure = Refusal::new(error.code(), error.to_string());
            return Started {
                kind,
                pending: Pending::Ready(Answer::failed(correlation_id, failure)),
            };
        }
    };
    let correlation_id = header.correlation_id;
    let api = ApiKey::from_u16(header.api).expect("decoded: a known api");
    let kind = RequestKind::Native(api);
    if let Err(refusal) = authorize::check(session, api, &request) {
        return Started {
            kind,
            pending: Pending::Ready(Answer::failed(correlation_id, refusal)),
        };
    }
    let tag = (kind, correlation_id);
    let pending = match request {
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
        // Forgotten at dispatch too, so the requests pipelined after it are not refused
        // while the change is under way (`UsedTopics::forget`).
        Request::CreateTopic {
            name,
            settings,
            replication_factor,
        } => {
            used.forget(shard, name);
            topics::create(shard, used, tag, name, settings, replication_factor)
        }
        Request::DeleteTopic { name } => {
            used.forget(shard, name);
            topics::delete(shard, used, tag, name)
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
        Request::ClusterStatus => cluster::status(shard, tag),
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
        Request::FindCoordinator { group } => cluster::find_coordinator(shard, tag, group),
        Request::Authenticate { mechanism, token } => {
            login::authenticate(session, tag, mechanism, token)
        }
        Request::ListUsers => admin::list_users(session, tag),
        Request::SetUser { name, credentials } => admin::set_user(session, tag, name, &credentials),
        Request::DeleteUser { name } => admin::delete_user(session, tag, name),
        Request::ListAcls => admin::list_acls(session, tag),
        Request::ChangeAcl { add, acl } => admin::change_acl(session, tag, add, &acl),
        Request::ChangeMember {
            add,
            node,
            cluster_addr,
        } => cluster::change_member(shard, tag, add, node, cluster_addr),
    };
    Started { kind, pending }
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
    F: AsyncFnOnce(Rc<Shard>) -> Result<Vec<u8>, Refusal> + 'static,
{
    let shard = Rc::clone(shard);
    Pending::Later(Box::pin(async move {
        match handler(shard).await {
            Ok(frame) => Answer::Frame { frame, error: None },
            Err(failure) => Answer::failed(tag.1, failure),
        }
    }))
}
