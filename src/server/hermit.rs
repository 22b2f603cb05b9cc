//! HermitMQ v1 connections (`HERMIT-WIRE.md`), so existing HermitMQ clients work unchanged,
//! with pagurus's guarantees where HermitMQ has none:
//!
//! - producer: acknowledged per the fsync policy (HermitMQ acks before any fsync); sizes are
//!   checked before memory is allocated; a bad batch or name closes the connection with a
//!   log line and a counter, and nothing partial is stored.
//! - consumer: pushed from the group's committed offset with sendfile, like native fetches;
//!   one that disconnects while waiting for data is noticed at once and its task ends.
//! - commit: durable per the fsync policy before the `0x01` answer.

use crate::security::acl::ResourceType;
use crate::security::acl::actions::{HermitRole, RequestKind as AclKind};
use std::cell::RefCell;
use std::io;
use std::rc::Rc;
use std::time::Instant;

use futures_lite::FutureExt;
use tracing::{debug, warn};

use crate::metrics::counters::Metrics;
use crate::metrics::requests::RequestKind;
use crate::protocol::hermit::{self, HermitError};
use crate::protocol::native::ErrorCode;
use crate::protocol::record::{BatchHeader, RecordError};
use crate::server::connection::handshake;
use crate::server::handoff::Place;
use crate::server::io::{read_some, write_all};
use crate::server::native::refusal::code_of;
use crate::server::read_buf::ReadBuf;
use crate::server::session::pipeline::{
    self, Framing, Frontend, Inbox, Lost, Outcome, Started, count_error, count_request,
};
use crate::server::session::{FileRange, Outbox, Session};
use crate::server::stream::Stream;
use crate::shard::calls::Produced;
use crate::shard::calls::{Fetch, SendPlan};
use crate::shard::data::{Batches, ProduceInFlight};
use crate::shard::topics::TopicMeta;
use crate::shard::{Shard, ShardError};

const PRODUCE: RequestKind = RequestKind::HermitProduce;
const CONSUME: RequestKind = RequestKind::HermitConsume;
const COMMIT: RequestKind = RequestKind::HermitCommit;

/// Longest consumer long-poll before the loop looks again (it is woken by new data sooner).
const CONSUMER_WAIT_MS: u32 = 1000;
/// Bytes one push to a consumer covers at most.
const CONSUMER_PUSH_BYTES: u32 = 4 << 20;
/// Smallest read into a connection's buffer.
const READ_MIN_BYTES: usize = 4096;

/// Serves a v1 connection whose first byte was `role`. Producers and consumers move to the
/// core that owns their partition right after the handshake (`server::handoff`).
pub async fn serve(
    session: Rc<Session>,
    role: u8,
    deadline: Instant,
    mut place: Place,
) -> io::Result<()> {
    let read_ahead = place.take_read_ahead();
    let mut inbox = Inbox::new(&session, &read_ahead);
    // Requests are counted per batch for producers, per session for consumers and commits
    // (a refused handshake counts as one request of the role, with its error), on the core
    // that serves them.
    match role {
        hermit::ROLE_PRODUCER => producer(session, inbox, deadline, &mut place).await,
        hermit::ROLE_CONSUMER => consumer(&session, &mut inbox.buf, deadline, &mut place).await,
        _ => commit(&session, &mut inbox.buf, deadline).await,
    }
}

/// Reads until `parse` succeeds; `None` when the connection must close (the reason was
/// logged and counted).
async fn read_message<T>(
    session: &Session,
    kind: RequestKind,
    buf: &mut ReadBuf,
    parse: impl Fn(&[u8]) -> Result<(T, usize), HermitError>,
) -> io::Result<Option<(T, usize)>> {
    loop {
        match parse(buf) {
            Ok((message, used)) => return Ok(Some((message, used))),
            Err(HermitError::Incomplete { needed }) => fill(&session.stream, buf, needed).await?,
            Err(error) => {
                let shard = &session.shard;
                Metrics::inc(&shard.metrics.bad_names);
                count_request(session, kind);
                count_error(session, kind, ErrorCode::InvalidName);
                warn!(%error, "HermitMQ handshake refused; connection closed");
                return Ok(None);
            }
        }
    }
}

/// Reads at least `needed` more bytes of a handshake into `buf` (bounded by the caller's
/// handshake deadline).
async fn fill(stream: &RefCell<Stream>, buf: &mut ReadBuf, needed: usize) -> io::Result<()> {
    let target = buf.len() + needed;
    while buf.len() < target {
        match read_some(stream, buf.spare(READ_MIN_BYTES.max(target - buf.len()))).await? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => buf.filled(n),
        }
    }
    Ok(())
}

async fn producer(
    session: Rc<Session>,
    mut inbox: Inbox,
    deadline: Instant,
    place: &mut Place,
) -> io::Result<()> {
    let shard = &session.shard;
    let Some(((topic, partition), used)) = handshake(
        deadline,
        read_message(&session, PRODUCE, &mut inbox.buf, |b| {
            hermit::parse_producer_hello(b).map(|(h, n)| ((h.topic.to_string(), h.partition), n))
        }),
    )
    .await?
    else {
        return Ok(());
    };
    if !authorized(&session, HermitRole::Producer, &topic, None) {
        count_request(&session, PRODUCE);
        count_error(&session, PRODUCE, ErrorCode::TopicAuthorizationFailed);
        return Ok(());
    }
    let meta = match shard.topic_used(&session.used, topic.as_bytes()).await {
        Ok(meta) => meta,
        Err(failure) => {
            count_request(&session, PRODUCE);
            count_error(&session, PRODUCE, code_of(&failure));
            warn!(topic, error = %failure, "HermitMQ producer refused; connection closed");
            return Ok(());
        }
    };
    if partition < meta.partitions {
        let owner = shard.placement().owner(&meta.name, partition);
        if place
            .move_to_owner(
                shard,
                &session.stream,
                session.listener_index,
                hermit::ROLE_PRODUCER,
                &inbox.buf,
                owner,
            )
            .await
        {
            return Ok(());
        }
    }
    inbox.buf.advance(used);
    let frontend = HermitProducer {
        topic,
        partition,
        meta,
        limits: shard.config.log.limits,
    };
    pipeline::run(Rc::new(frontend), session, inbox).await
}

/// A v1 producer's batches: one batch a request, acknowledged in order with a 9-byte ack.
/// v1 has no error frame: a bad batch closes the connection, and nothing partial is stored.
struct HermitProducer {
    topic: String,
    partition: u32,
    /// The topic the handshake named, as it was then.
    meta: Rc<TopicMeta>,
    limits: crate::limits::Limits,
}

enum ProducerPending {
    Produce(ProduceInFlight),
    /// Refused before it was staged: an 0xFF ack with this error.
    Refused(ErrorCode),
    /// The topic was deleted: the connection ends.
    Deleted,
}

enum ProducerAnswer {
    Acked(Result<Produced, ShardError>),
    Refused(ErrorCode),
    Deleted,
}

impl Frontend for HermitProducer {
    type Pending = ProducerPending;
    type Answer = ProducerAnswer;

    fn framing(&self, buf: &[u8]) -> Framing {
        // The header first: magic and sizes are checked before the body is waited for.
        match BatchHeader::decode(buf, &self.limits) {
            Ok(header) => match header.batch_len() {
                len if buf.len() >= len => Framing::Complete { frame_bytes: len },
                len => Framing::Incomplete {
                    needed: len - buf.len(),
                },
            },
            Err(RecordError::Incomplete { needed }) => Framing::Incomplete { needed },
            Err(error) => Framing::Lost(Lost {
                reason: format!(
                    "HermitMQ producer of {} sent a bad batch (v1 has no error frame): {error}",
                    self.topic
                ),
                counter: |metrics| &metrics.bad_batches,
                request: Some((PRODUCE, ErrorCode::from(&error))),
            }),
        }
    }

    async fn start(&self, session: &Rc<Session>, batch: &[u8]) -> Started<ProducerPending> {
        let shard = &session.shard;
        let pending = if self.partition >= self.meta.partitions {
            debug!(
                topic = self.topic,
                partition = self.partition,
                "HermitMQ produce to a partition that does not exist"
            );
            ProducerPending::Refused(ErrorCode::UnknownPartition)
        } else {
            match shard
                .start_produce(
                    &session.used,
                    self.topic.as_bytes(),
                    self.partition,
                    Batches::Single(batch),
                )
                .await
            {
                Ok(produce) => ProducerPending::Produce(produce),
                // The topic this connection opened was deleted (or deleted and made again,
                // another topic). v1 has no error frame, and an 0xFF would invite a retry
                // that creates the topic again: the connection ends, as the delete asks.
                Err(ShardError::DeletedWhileUsed { .. }) => ProducerPending::Deleted,
                Err(failure) => {
                    warn!(topic = self.topic, partition = self.partition, error = %failure, "HermitMQ append failed; 0xFF sent");
                    ProducerPending::Refused(code_of(&failure))
                }
            }
        };
        Started {
            kind: PRODUCE,
            pending,
        }
    }

    async fn answer(&self, session: &Rc<Session>, pending: ProducerPending) -> ProducerAnswer {
        match pending {
            ProducerPending::Produce(produce) => {
                ProducerAnswer::Acked(session.shard.finish_produce(produce).await)
            }
            ProducerPending::Refused(code) => ProducerAnswer::Refused(code),
            ProducerPending::Deleted => ProducerAnswer::Deleted,
        }
    }

    fn write(&self, _session: &Session, answer: ProducerAnswer, out: &mut Outbox) -> Outcome {
        let code = match answer {
            ProducerAnswer::Acked(Ok(produced)) => {
                let ack = hermit::encode_ack(hermit::ACK_STORED, produced.base_offset);
                out.bytes().extend_from_slice(&ack);
                return Outcome::Done;
            }
            ProducerAnswer::Acked(Err(failure)) => {
                warn!(topic = self.topic, partition = self.partition, error = %failure, "HermitMQ append failed; 0xFF sent");
                code_of(&failure)
            }
            ProducerAnswer::Refused(code) => code,
            ProducerAnswer::Deleted => {
                warn!(
                    topic = self.topic,
                    "topic deleted while this HermitMQ producer used it; connection closed"
                );
                return Outcome::Close(Some(ErrorCode::UnknownTopic));
            }
        };
        out.bytes()
            .extend_from_slice(&hermit::encode_ack(hermit::ACK_FAILED, 0));
        Outcome::Failed(code)
    }

    fn too_large(&self, _: &Session, _: &[u8], _: u64) -> Option<Started<ProducerPending>> {
        None // framing refuses a batch over the limit: the connection closes
    }
}

/// Counts and logs a client that stopped reading what it is sent.
fn write_stalled(shard: &Shard, error: io::Error) -> io::Error {
    if error.kind() == io::ErrorKind::TimedOut {
        Metrics::inc(&shard.metrics.writes_stalled);
        warn!(timeout = ?shard.config.idle_timeout, "HermitMQ client read nothing while data waited; connection closed");
    }
    error
}

enum Wake {
    Data(Result<SendPlan, ShardError>),
    Disconnected,
}

async fn consumer(
    session: &Session,
    buf: &mut ReadBuf,
    deadline: Instant,
    place: &mut Place,
) -> io::Result<()> {
    let (shard, stream) = (&session.shard, &session.stream);
    let Some(((group, topic, partition), _)) = handshake(
        deadline,
        read_message(session, CONSUME, buf, |b| {
            hermit::parse_consumer_hello(b)
                .map(|(h, n)| ((h.group.to_string(), h.topic.to_string(), h.partition), n))
        }),
    )
    .await?
    else {
        return Ok(());
    };
    if !authorized(session, HermitRole::Consumer, &topic, Some(&group)) {
        count_request(session, CONSUME);
        count_error(session, CONSUME, ErrorCode::TopicAuthorizationFailed);
        return Ok(());
    }
    let meta = match shard.topic_used(&session.used, topic.as_bytes()).await {
        Ok(meta) if partition < meta.partitions => meta,
        refused => {
            let code = refused.map_or_else(|f| code_of(&f), |_| ErrorCode::UnknownPartition);
            count_request(session, CONSUME);
            count_error(session, CONSUME, code);
            warn!(
                topic,
                partition, "HermitMQ consumer for a partition that cannot exist; connection closed"
            );
            return Ok(());
        }
    };
    // Served by the owner, its fetch plans never cross cores.
    let owner = shard.placement().owner(&meta.name, partition);
    if place
        .move_to_owner(
            shard,
            stream,
            session.listener_index,
            hermit::ROLE_CONSUMER,
            buf,
            owner,
        )
        .await
    {
        return Ok(());
    }
    count_request(session, CONSUME);
    // The client sends nothing more; a read that ends means it went away.
    stream.borrow().tcp().set_read_timeout(None)?;
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
    let mut out = Outbox::default();
    loop {
        let call = Fetch {
            topic: topic.clone(),
            partition,
            offset,
            max_bytes: CONSUMER_PUSH_BYTES,
            max_wait_ms: CONSUMER_WAIT_MS,
        };
        let fetch = async { Wake::Data(shard.fetch(&session.used, call).await) };
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
            Wake::Data(Err(ShardError::OffsetOutOfRange {
                earliest, latest, ..
            })) => {
                // Out of range: behind retention, skip to the oldest; past the end, wait there.
                offset = if offset < earliest { earliest } else { latest };
                continue;
            }
            Wake::Data(Err(ShardError::DeletedWhileUsed { .. })) => {
                count_error(session, CONSUME, ErrorCode::UnknownTopic);
                warn!(
                    group,
                    topic,
                    partition,
                    "topic deleted while this HermitMQ consumer read it; connection closed"
                );
                return Ok(());
            }
            Wake::Data(Err(failure)) => {
                count_error(session, CONSUME, code_of(&failure));
                warn!(topic, partition, error = %failure, "HermitMQ consumer stopped");
                return Ok(());
            }
        };
        if plan.batches.is_empty() {
            if shard.shutdown.is_requested() {
                return Ok(());
            }
            continue;
        }
        let range = match FileRange::of_plan(&plan) {
            Ok(range) => range,
            // Replaced by compaction or deleted by retention since the plan: plan again.
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                Metrics::inc(&shard.metrics.fetches_replanned);
                debug!(path = %plan.wal_path.display(), %error, "segment replaced after planning; fetching again");
                continue;
            }
            Err(error) => return Err(error),
        };
        out.file(range);
        out.send(session)
            .await
            .map_err(|e| write_stalled(shard, e))?;
        offset = plan.next_offset;
    }
}

async fn commit(session: &Session, buf: &mut ReadBuf, deadline: Instant) -> io::Result<()> {
    let (shard, stream) = (&session.shard, &session.stream);
    let Some(((group, topic, partition, offset), _)) = handshake(
        deadline,
        read_message(session, COMMIT, buf, |b| {
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
    count_request(session, COMMIT);
    if !authorized(session, HermitRole::Commit, &topic, Some(&group)) {
        count_error(session, COMMIT, ErrorCode::TopicAuthorizationFailed);
        return Ok(());
    }
    match shard
        .commit_offset(
            &session.used,
            group.as_bytes(),
            topic.as_bytes(),
            partition,
            offset,
        )
        .await
    {
        Ok(()) => write_all(stream, &[hermit::COMMIT_DONE]).await,
        Err(failure) => {
            count_error(session, COMMIT, code_of(&failure));
            // v1 has no error answer: close without 0x01, so the client sees the failure.
            warn!(group, topic, partition, error = %failure, "HermitMQ commit failed; connection closed");
            Ok(())
        }
    }
}

/// The ACL check of a v1 connection, once, at its handshake: v1 has no error frame, so a
/// refusal closes the connection (the audit line says why).
fn authorized(session: &Session, role: HermitRole, topic: &str, group: Option<&str>) -> bool {
    let kind = AclKind::Hermit(role);
    session.may(kind, ResourceType::Topic, topic)
        && group.is_none_or(|group| session.may(kind, ResourceType::Group, group))
}
