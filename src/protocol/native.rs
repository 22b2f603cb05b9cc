//! The native protocol: length-framed, versioned, pipelined. Byte layout in
//! `docs/PROTOCOL.md`; this module is the single source of truth for it, shared by the
//! broker and the client.
//!
//! Sans-IO: [`check_frame`] says whether a buffer holds a whole frame, and how long it is
//! (or that more bytes are needed); the `decode`/`encode` functions turn frame bodies into
//! typed messages and back without touching a socket. Decoding borrows from the buffer; a
//! produce request's batches are validated (magic, sizes) during decoding and then iterated
//! without further checks or copies.

use crate::limits::Limits;
use crate::protocol::record::{self, RecordError};
use crate::protocol::wire::{Malformed, Put, Reader};

/// The first four bytes a native client sends; `P` (0x50) keeps them apart from the
/// HermitMQ role bytes (0x01-0x03) and the Kafka-reserved 0x00.
pub const PREFACE_MAGIC: [u8; 4] = *b"PGRS";
/// Magic, then the version (u16), then flags (u16, zero).
pub const PREFACE_LEN: usize = 8;
/// Protocol version this build speaks.
pub const VERSION: u16 = 1;
/// Every frame starts with its length (u32, big-endian), not counting these 4 bytes.
pub const FRAME_LEN_BYTES: usize = 4;
/// api (u16), version (u16), correlation id (u32).
pub const REQUEST_HEADER_LEN: usize = 8;
/// correlation id (u32), error code (u16).
pub const RESPONSE_HEADER_LEN: usize = 6;

/// Encodes the preface a client sends (and the broker answers with).
pub fn preface(version: u16) -> [u8; PREFACE_LEN] {
    let mut out = [0u8; PREFACE_LEN];
    out[..4].copy_from_slice(&PREFACE_MAGIC);
    out[4..6].copy_from_slice(&version.to_be_bytes());
    out
}

/// Checks a preface; returns the peer's version.
pub fn check_preface(buf: &[u8; PREFACE_LEN]) -> Result<u16, Malformed> {
    if buf[..4] != PREFACE_MAGIC {
        return Err(Malformed {
            what: "preface magic",
        });
    }
    Ok(u16::from_be_bytes([buf[4], buf[5]]))
}

/// Outcome of looking for a frame at the front of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameCheck {
    /// A whole frame of this many bytes (length prefix included) is there.
    Complete { frame_bytes: usize },
    /// More bytes are needed.
    Incomplete { needed: usize },
    /// The frame announces `body_bytes`, more than the broker accepts. Framing is kept: the
    /// reader may skip `body_bytes` after the prefix and answer with an error.
    TooLarge { body_bytes: u64 },
}

/// Looks for one frame at the front of `buf`.
pub fn check_frame(buf: &[u8], frame_body_max_bytes: usize) -> FrameCheck {
    if buf.len() < FRAME_LEN_BYTES {
        return FrameCheck::Incomplete {
            needed: FRAME_LEN_BYTES - buf.len(),
        };
    }
    let body = u32::from_be_bytes(buf[..4].try_into().expect("4")) as usize;
    if body > frame_body_max_bytes {
        return FrameCheck::TooLarge {
            body_bytes: body as u64,
        };
    }
    let frame_bytes = FRAME_LEN_BYTES + body;
    if buf.len() < frame_bytes {
        return FrameCheck::Incomplete {
            needed: frame_bytes - buf.len(),
        };
    }
    FrameCheck::Complete { frame_bytes }
}

/// Largest request body the broker accepts: one batch at the limits plus room for headers.
pub fn frame_body_max_bytes(limits: &Limits) -> usize {
    let batch = record::HEADER_LEN as u64 + limits.max_key_bytes + limits.max_payload_bytes;
    usize::try_from(batch + 64 * 1024).unwrap_or(usize::MAX)
}

macro_rules! code_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:expr),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum $name { $($(#[$vmeta])* $variant = $value),+ }

        impl $name {
            pub fn from_u16(v: u16) -> Option<$name> {
                match v { $($value => Some($name::$variant),)+ _ => None }
            }
            pub fn name(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant),)+ }
            }
            pub const ALL: &'static [$name] = &[$($name::$variant),+];
        }
    };
}

code_enum!(
    /// Request types.
    ApiKey {
        Produce = 1,
        Fetch = 2,
        ListOffsets = 3,
        CreateTopic = 4,
        DeleteTopic = 5,
        Metadata = 6,
        CommitOffset = 7,
        FetchOffset = 8,
        ListGroups = 9,
        DescribeGroup = 10,
    }
);

code_enum!(
    /// Every error the broker answers with. The connection stays open for all of them.
    ErrorCode {
        None = 0,
        UnsupportedApi = 1,
        UnsupportedVersion = 2,
        Malformed = 3,
        FrameTooLarge = 4,
        BadMagic = 5,
        CrcMismatch = 6,
        KeyTooLarge = 7,
        PayloadTooLarge = 8,
        InvalidName = 9,
        UnknownTopic = 10,
        UnknownPartition = 11,
        /// Body: earliest (u64), latest (u64).
        OffsetOutOfRange = 12,
        TopicExists = 13,
        TopicLimit = 14,
        InvalidConfig = 15,
        StorageFull = 16,
        StorageError = 17,
        Fenced = 18,
        CorruptData = 19,
        ShuttingDown = 20,
        UnknownGroup = 21,
        Internal = 22,
        /// The group has committed no offset for this topic and partition.
        NoCommittedOffset = 23,
    }
);

impl From<&RecordError> for ErrorCode {
    fn from(e: &RecordError) -> Self {
        match e {
            RecordError::Incomplete { .. } => ErrorCode::Malformed,
            RecordError::BadMagic { .. } => ErrorCode::BadMagic,
            RecordError::KeyTooLarge { .. } => ErrorCode::KeyTooLarge,
            RecordError::PayloadTooLarge { .. } => ErrorCode::PayloadTooLarge,
            RecordError::CrcMismatch { .. } => ErrorCode::CrcMismatch,
        }
    }
}

/// Why a request could not be decoded; each maps to an [`ErrorCode`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("unknown api {0}")]
    UnsupportedApi(u16),
    #[error("unsupported version {version} of api {api}")]
    UnsupportedVersion { api: u16, version: u16 },
    #[error(transparent)]
    Malformed(#[from] Malformed),
    #[error("bad batch: {0}")]
    Batch(#[from] RecordError),
}

impl DecodeError {
    pub fn code(&self) -> ErrorCode {
        match self {
            DecodeError::UnsupportedApi(_) => ErrorCode::UnsupportedApi,
            DecodeError::UnsupportedVersion { .. } => ErrorCode::UnsupportedVersion,
            DecodeError::Malformed(_) => ErrorCode::Malformed,
            DecodeError::Batch(e) => e.into(),
        }
    }
}

/// The fixed part of every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub api: u16,
    pub version: u16,
    pub correlation_id: u32,
}

impl RequestHeader {
    pub fn decode(body: &[u8]) -> Result<(RequestHeader, &[u8]), Malformed> {
        let mut r = Reader::new(body);
        let header = RequestHeader {
            api: r.u16("request header")?,
            version: r.u16("request header")?,
            correlation_id: r.u32("request header")?,
        };
        Ok((header, r.rest()))
    }
}

/// Where a fetch or list-offsets request points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    Earliest,
    Latest,
    Timestamp(u64),
}

/// Topic settings a client may set at creation; zeros mean "the broker's default".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TopicSettings {
    pub partitions: u32,
    /// 0 default, 1 always, 2 never, 3 interval (`fsync_interval_ms`).
    pub fsync: u8,
    pub fsync_interval_ms: u32,
    pub segment_bytes: u64,
    /// 0: no size limit.
    pub retention_bytes: u64,
    /// 0: no age limit.
    pub retention_ms: u64,
    /// 0 delete, 1 compact.
    pub cleanup: u8,
}

/// A decoded request, borrowing from the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Produce {
        topic: &'a [u8],
        partition: u32,
        batches: ProduceBatches<'a>,
    },
    Fetch {
        topic: &'a [u8],
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait_ms: u32,
    },
    ListOffsets {
        topic: &'a [u8],
        partition: u32,
        spec: OffsetSpec,
    },
    CreateTopic {
        name: &'a [u8],
        settings: TopicSettings,
    },
    DeleteTopic {
        name: &'a [u8],
    },
    /// No names: every topic.
    Metadata {
        topics: Vec<&'a [u8]>,
    },
    CommitOffset {
        group: &'a [u8],
        topic: &'a [u8],
        partition: u32,
        offset: u64,
    },
    FetchOffset {
        group: &'a [u8],
        topic: &'a [u8],
        partition: u32,
    },
    ListGroups,
    DescribeGroup {
        group: &'a [u8],
    },
}

/// The batches of a produce request: `count` times (crc u32, batch), all validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceBatches<'a> {
    pub count: u32,
    bytes: &'a [u8],
    limits: Limits,
}

impl<'a> ProduceBatches<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (u32, &'a [u8])> + 'a {
        let mut rest = self.bytes;
        let limits = self.limits;
        (0..self.count).map(move |_| {
            let crc = u32::from_be_bytes(rest[..4].try_into().expect("validated"));
            let header = record::check(&rest[4..], &limits).expect("validated at decode");
            let (batch, tail) = rest[4..].split_at(header.batch_len());
            rest = tail;
            (crc, batch)
        })
    }

    /// Bytes of the batches (with their CRCs) as they sit in the frame.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Re-reads batches from bytes already validated by [`decode_request`] (e.g. after they
    /// crossed to another core).
    pub fn from_validated(count: u32, bytes: &'a [u8], limits: Limits) -> Self {
        ProduceBatches {
            count,
            bytes,
            limits,
        }
    }
}

/// Largest number of topics in one metadata request.
pub const METADATA_TOPICS_MAX: u32 = 10_000;
/// Largest number of batches in one produce request.
pub const PRODUCE_BATCHES_MAX: u32 = 100_000;

/// Decodes a request body (the frame after its length prefix).
pub fn decode_request<'a>(
    body: &'a [u8],
    limits: &Limits,
) -> Result<(RequestHeader, Request<'a>), (Option<RequestHeader>, DecodeError)> {
    let (header, rest) = RequestHeader::decode(body).map_err(|e| (None, e.into()))?;
    decode_request_body(&header, rest, limits)
        .map(|request| (header, request))
        .map_err(|e| (Some(header), e))
}

fn decode_request_body<'a>(
    header: &RequestHeader,
    body: &'a [u8],
    limits: &Limits,
) -> Result<Request<'a>, DecodeError> {
    let api = ApiKey::from_u16(header.api).ok_or(DecodeError::UnsupportedApi(header.api))?;
    if header.version != VERSION {
        return Err(DecodeError::UnsupportedVersion {
            api: header.api,
            version: header.version,
        });
    }
    let mut r = Reader::new(body);
    let request = match api {
        ApiKey::Produce => {
            let topic = r.string("topic")?;
            let partition = r.u32("partition")?;
            let count = r.u32("batch count")?;
            if count == 0 || count > PRODUCE_BATCHES_MAX {
                return Err(Malformed {
                    what: "batch count",
                }
                .into());
            }
            let bytes = r.rest();
            for _ in 0..count {
                r.u32("batch crc")?;
                let header = match record::check(r.rest(), limits) {
                    Err(RecordError::Incomplete { .. }) => {
                        return Err(Malformed { what: "batch" }.into());
                    }
                    other => other?,
                };
                r.bytes(header.batch_len(), "batch")?;
            }
            r.finish("produce request")?;
            Request::Produce {
                topic,
                partition,
                batches: ProduceBatches {
                    count,
                    bytes,
                    limits: *limits,
                },
            }
        }
        ApiKey::Fetch => Request::Fetch {
            topic: r.string("topic")?,
            partition: r.u32("partition")?,
            offset: r.u64("offset")?,
            max_bytes: r.u32("max bytes")?,
            max_wait_ms: r.u32("max wait")?,
        },
        ApiKey::ListOffsets => {
            let topic = r.string("topic")?;
            let partition = r.u32("partition")?;
            let kind = r.u8("offset spec")?;
            let timestamp = r.u64("timestamp")?;
            let spec = match kind {
                0 => OffsetSpec::Earliest,
                1 => OffsetSpec::Latest,
                2 => OffsetSpec::Timestamp(timestamp),
                _ => {
                    return Err(Malformed {
                        what: "offset spec",
                    }
                    .into());
                }
            };
            Request::ListOffsets {
                topic,
                partition,
                spec,
            }
        }
        ApiKey::CreateTopic => Request::CreateTopic {
            name: r.string("topic")?,
            settings: TopicSettings {
                partitions: r.u32("partitions")?,
                fsync: r.u8("fsync")?,
                fsync_interval_ms: r.u32("fsync interval")?,
                segment_bytes: r.u64("segment bytes")?,
                retention_bytes: r.u64("retention bytes")?,
                retention_ms: r.u64("retention ms")?,
                cleanup: r.u8("cleanup")?,
            },
        },
        ApiKey::DeleteTopic => Request::DeleteTopic {
            name: r.string("topic")?,
        },
        ApiKey::Metadata => {
            let count = r.u32("topic count")?;
            if count > METADATA_TOPICS_MAX {
                return Err(Malformed {
                    what: "topic count",
                }
                .into());
            }
            let mut topics = Vec::with_capacity(count as usize);
            for _ in 0..count {
                topics.push(r.string("topic")?);
            }
            Request::Metadata { topics }
        }
        ApiKey::CommitOffset => Request::CommitOffset {
            group: r.string("group")?,
            topic: r.string("topic")?,
            partition: r.u32("partition")?,
            offset: r.u64("offset")?,
        },
        ApiKey::FetchOffset => Request::FetchOffset {
            group: r.string("group")?,
            topic: r.string("topic")?,
            partition: r.u32("partition")?,
        },
        ApiKey::ListGroups => Request::ListGroups,
        ApiKey::DescribeGroup => Request::DescribeGroup {
            group: r.string("group")?,
        },
    };
    r.finish("request")?;
    Ok(request)
}

/// Encodes a request frame (length prefix included) into `out`. For clients.
pub fn encode_request(out: &mut Vec<u8>, correlation_id: u32, request: &Request<'_>) {
    let start = begin_frame(out);
    let api = match request {
        Request::Produce { .. } => ApiKey::Produce,
        Request::Fetch { .. } => ApiKey::Fetch,
        Request::ListOffsets { .. } => ApiKey::ListOffsets,
        Request::CreateTopic { .. } => ApiKey::CreateTopic,
        Request::DeleteTopic { .. } => ApiKey::DeleteTopic,
        Request::Metadata { .. } => ApiKey::Metadata,
        Request::CommitOffset { .. } => ApiKey::CommitOffset,
        Request::FetchOffset { .. } => ApiKey::FetchOffset,
        Request::ListGroups => ApiKey::ListGroups,
        Request::DescribeGroup { .. } => ApiKey::DescribeGroup,
    };
    out.put_u16(api as u16);
    out.put_u16(VERSION);
    out.put_u32(correlation_id);
    match request {
        Request::Produce {
            topic,
            partition,
            batches,
        } => {
            out.put_string(topic);
            out.put_u32(*partition);
            out.put_u32(batches.count);
            out.extend_from_slice(batches.bytes);
        }
        Request::Fetch {
            topic,
            partition,
            offset,
            max_bytes,
            max_wait_ms,
        } => {
            out.put_string(topic);
            out.put_u32(*partition);
            out.put_u64(*offset);
            out.put_u32(*max_bytes);
            out.put_u32(*max_wait_ms);
        }
        Request::ListOffsets {
            topic,
            partition,
            spec,
        } => {
            out.put_string(topic);
            out.put_u32(*partition);
            let (kind, ts) = match spec {
                OffsetSpec::Earliest => (0, 0),
                OffsetSpec::Latest => (1, 0),
                OffsetSpec::Timestamp(ts) => (2, *ts),
            };
            out.put_u8(kind);
            out.put_u64(ts);
        }
        Request::CreateTopic { name, settings } => {
            out.put_string(name);
            out.put_u32(settings.partitions);
            out.put_u8(settings.fsync);
            out.put_u32(settings.fsync_interval_ms);
            out.put_u64(settings.segment_bytes);
            out.put_u64(settings.retention_bytes);
            out.put_u64(settings.retention_ms);
            out.put_u8(settings.cleanup);
        }
        Request::DeleteTopic { name } => out.put_string(name),
        Request::Metadata { topics } => {
            out.put_u32(u32::try_from(topics.len()).expect("topic count"));
            for topic in topics {
                out.put_string(topic);
            }
        }
        Request::CommitOffset {
            group,
            topic,
            partition,
            offset,
        } => {
            out.put_string(group);
            out.put_string(topic);
            out.put_u32(*partition);
            out.put_u64(*offset);
        }
        Request::FetchOffset {
            group,
            topic,
            partition,
        } => {
            out.put_string(group);
            out.put_string(topic);
            out.put_u32(*partition);
        }
        Request::ListGroups => {}
        Request::DescribeGroup { group } => out.put_string(group),
    }
    end_frame(out, start);
}

/// Appends `(crc, batch)` to a produce request's batch bytes. For clients.
pub fn push_produce_batch(out: &mut Vec<u8>, batch: &[u8]) {
    out.put_u32(record::batch_crc(batch));
    out.extend_from_slice(batch);
}

/// Reserves the length prefix of a frame; returns where the frame starts.
pub fn begin_frame(out: &mut Vec<u8>) -> usize {
    let start = out.len();
    out.put_u32(0);
    start
}

/// Fills in the length prefix reserved by [`begin_frame`].
pub fn end_frame(out: &mut [u8], start: usize) {
    let body = u32::try_from(out.len() - start - FRAME_LEN_BYTES).expect("frames are under 4 GiB");
    out[start..start + FRAME_LEN_BYTES].copy_from_slice(&body.to_be_bytes());
}

/// Starts a response frame: length placeholder, correlation id, error code. The caller
/// appends the body and calls [`end_frame`].
pub fn begin_response(out: &mut Vec<u8>, correlation_id: u32, error: ErrorCode) -> usize {
    let start = begin_frame(out);
    out.put_u32(correlation_id);
    out.put_u16(error as u16);
    start
}

/// A whole response with an empty body.
pub fn encode_empty_response(out: &mut Vec<u8>, correlation_id: u32, error: ErrorCode) {
    let start = begin_response(out, correlation_id, error);
    end_frame(out, start);
}

/// The head of a fetch response; `data_bytes` of batches follow it on the wire (sent from
/// the segment file) and are counted in the frame length.
pub fn encode_fetch_head(
    out: &mut Vec<u8>,
    correlation_id: u32,
    high_watermark: u64,
    log_start_offset: u64,
    crcs: impl ExactSizeIterator<Item = u32>,
    data_bytes: u32,
) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u64(high_watermark);
    out.put_u64(log_start_offset);
    out.put_u32(u32::try_from(crcs.len()).expect("batch count"));
    for crc in crcs {
        out.put_u32(crc);
    }
    out.put_u32(data_bytes);
    end_frame(out, start);
    let body = u32::from_be_bytes(out[start..start + 4].try_into().expect("4")) + data_bytes;
    out[start..start + 4].copy_from_slice(&body.to_be_bytes());
}

/// A decoded response header and body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseHeader {
    pub correlation_id: u32,
    pub error: u16,
}

/// Splits a response frame body into header and body.
pub fn decode_response(body: &[u8]) -> Result<(ResponseHeader, &[u8]), Malformed> {
    let mut r = Reader::new(body);
    let header = ResponseHeader {
        correlation_id: r.u32("response header")?,
        error: r.u16("response header")?,
    };
    Ok((header, r.rest()))
}

/// A decoded fetch response body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchResponse<'a> {
    pub high_watermark: u64,
    pub log_start_offset: u64,
    pub crcs: Vec<u32>,
    pub data: &'a [u8],
}

/// Largest batch count a fetch response may announce (client-side sanity bound).
pub const FETCH_BATCHES_MAX: u32 = 10_000_000;

pub fn decode_fetch_response(body: &[u8]) -> Result<FetchResponse<'_>, Malformed> {
    let mut r = Reader::new(body);
    let high_watermark = r.u64("high watermark")?;
    let log_start_offset = r.u64("log start")?;
    let count = r.u32("batch count")?;
    if count > FETCH_BATCHES_MAX || count as usize * 4 > r.remaining() {
        return Err(Malformed {
            what: "batch count",
        });
    }
    let crcs = (0..count)
        .map(|_| r.u32("crc"))
        .collect::<Result<Vec<_>, _>>()?;
    let len = r.u32("data length")? as usize;
    let data = r.bytes(len, "data")?;
    r.finish("fetch response")?;
    Ok(FetchResponse {
        high_watermark,
        log_start_offset,
        crcs,
        data,
    })
}

/// Longest error message sent; longer ones are cut (at a char boundary).
pub const ERROR_MESSAGE_MAX_BYTES: usize = 1024;

/// An error response: `[string message][u64 earliest][u64 latest]`; the two offsets are the
/// log's range for `OffsetOutOfRange` and 0 otherwise.
pub fn encode_error(
    out: &mut Vec<u8>,
    correlation_id: u32,
    code: ErrorCode,
    message: &str,
    range: Option<(u64, u64)>,
) {
    let start = begin_response(out, correlation_id, code);
    let mut cut = message.len().min(ERROR_MESSAGE_MAX_BYTES);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    out.put_string(&message.as_bytes()[..cut]);
    let (earliest, latest) = range.unwrap_or((0, 0));
    out.put_u64(earliest);
    out.put_u64(latest);
    end_frame(out, start);
}

/// A decoded error body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorBody {
    pub message: String,
    pub earliest: u64,
    pub latest: u64,
}

pub fn decode_error(body: &[u8]) -> Result<ErrorBody, Malformed> {
    let mut r = Reader::new(body);
    let message = String::from_utf8_lossy(r.string("error message")?).into_owned();
    let earliest = r.u64("earliest")?;
    let latest = r.u64("latest")?;
    Ok(ErrorBody {
        message,
        earliest,
        latest,
    })
}

/// Produce response body: base offset (u64), next offset (u64).
pub fn encode_produce_response(
    out: &mut Vec<u8>,
    correlation_id: u32,
    base_offset: u64,
    next_offset: u64,
) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u64(base_offset);
    out.put_u64(next_offset);
    end_frame(out, start);
}

pub fn decode_produce_response(body: &[u8]) -> Result<(u64, u64), Malformed> {
    let mut r = Reader::new(body);
    let offsets = (r.u64("base offset")?, r.u64("next offset")?);
    r.finish("produce response")?;
    Ok(offsets)
}

/// A response whose body is one offset (list offsets, fetch offset).
pub fn encode_offset_response(out: &mut Vec<u8>, correlation_id: u32, offset: u64) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u64(offset);
    end_frame(out, start);
}

pub fn decode_offset_response(body: &[u8]) -> Result<u64, Malformed> {
    let mut r = Reader::new(body);
    let offset = r.u64("offset")?;
    r.finish("offset response")?;
    Ok(offset)
}

/// One partition in a metadata response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionMetadata {
    pub owner_core: u16,
    pub log_start_offset: u64,
    pub high_watermark: u64,
}

/// One topic in a metadata response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub name: String,
    pub error: u16,
    pub settings: TopicSettings,
    pub partitions: Vec<PartitionMetadata>,
}

/// The metadata response: the port of each core (0 when shard ports are off) and topics.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataResponse {
    pub core_ports: Vec<u16>,
    pub topics: Vec<TopicMetadata>,
}

/// Most cores and partitions a client accepts in a metadata response.
pub const METADATA_ITEMS_MAX: usize = 1 << 20;

pub fn encode_metadata_response(
    out: &mut Vec<u8>,
    correlation_id: u32,
    metadata: &MetadataResponse,
) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u16(u16::try_from(metadata.core_ports.len()).expect("cores fit u16"));
    for &port in &metadata.core_ports {
        out.put_u16(port);
    }
    out.put_u32(u32::try_from(metadata.topics.len()).expect("topics fit u32"));
    for topic in &metadata.topics {
        out.put_string(topic.name.as_bytes());
        out.put_u16(topic.error);
        let s = &topic.settings;
        out.put_u32(s.partitions);
        out.put_u8(s.fsync);
        out.put_u32(s.fsync_interval_ms);
        out.put_u64(s.segment_bytes);
        out.put_u64(s.retention_bytes);
        out.put_u64(s.retention_ms);
        out.put_u8(s.cleanup);
        out.put_u32(u32::try_from(topic.partitions.len()).expect("partitions fit u32"));
        for p in &topic.partitions {
            out.put_u16(p.owner_core);
            out.put_u64(p.log_start_offset);
            out.put_u64(p.high_watermark);
        }
    }
    end_frame(out, start);
}

pub fn decode_metadata_response(body: &[u8]) -> Result<MetadataResponse, Malformed> {
    let mut r = Reader::new(body);
    let cores = r.u16("cores")? as usize;
    let core_ports = (0..cores)
        .map(|_| r.u16("core port"))
        .collect::<Result<_, _>>()?;
    let count = r.u32("topic count")? as usize;
    if count > METADATA_ITEMS_MAX || count > r.remaining() {
        return Err(Malformed {
            what: "topic count",
        });
    }
    let mut topics = Vec::with_capacity(count);
    for _ in 0..count {
        let name = String::from_utf8_lossy(r.string("topic")?).into_owned();
        let error = r.u16("error")?;
        let settings = TopicSettings {
            partitions: r.u32("partitions")?,
            fsync: r.u8("fsync")?,
            fsync_interval_ms: r.u32("fsync interval")?,
            segment_bytes: r.u64("segment bytes")?,
            retention_bytes: r.u64("retention bytes")?,
            retention_ms: r.u64("retention ms")?,
            cleanup: r.u8("cleanup")?,
        };
        let n = r.u32("partition count")? as usize;
        if n > METADATA_ITEMS_MAX || n * 18 > r.remaining() {
            return Err(Malformed {
                what: "partition count",
            });
        }
        let partitions = (0..n)
            .map(|_| {
                Ok(PartitionMetadata {
                    owner_core: r.u16("owner")?,
                    log_start_offset: r.u64("log start")?,
                    high_watermark: r.u64("high watermark")?,
                })
            })
            .collect::<Result<_, Malformed>>()?;
        topics.push(TopicMetadata {
            name,
            error,
            settings,
            partitions,
        });
    }
    r.finish("metadata response")?;
    Ok(MetadataResponse { core_ports, topics })
}

/// One partition of a group in a describe-group response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPartition {
    pub topic: String,
    pub partition: u32,
    pub committed_offset: u64,
    /// The partition's high watermark.
    pub log_end_offset: u64,
    pub lag: u64,
}

/// List-groups response body: `[u32 count][string group]...`.
pub fn encode_list_groups_response(out: &mut Vec<u8>, correlation_id: u32, groups: &[String]) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u32(u32::try_from(groups.len()).expect("groups fit u32"));
    for group in groups {
        out.put_string(group.as_bytes());
    }
    end_frame(out, start);
}

pub fn decode_list_groups_response(body: &[u8]) -> Result<Vec<String>, Malformed> {
    let mut r = Reader::new(body);
    let count = r.u32("group count")? as usize;
    if count > r.remaining() {
        return Err(Malformed {
            what: "group count",
        });
    }
    let groups = (0..count)
        .map(|_| {
            r.string("group")
                .map(|g| String::from_utf8_lossy(g).into_owned())
        })
        .collect::<Result<_, _>>()?;
    r.finish("list groups response")?;
    Ok(groups)
}

/// Describe-group response body: `[u32 count]` then per partition `[string topic]
/// [u32 partition][u64 committed][u64 log end][u64 lag]`.
pub fn encode_describe_group_response(
    out: &mut Vec<u8>,
    correlation_id: u32,
    partitions: &[GroupPartition],
) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u32(u32::try_from(partitions.len()).expect("partitions fit u32"));
    for p in partitions {
        out.put_string(p.topic.as_bytes());
        out.put_u32(p.partition);
        out.put_u64(p.committed_offset);
        out.put_u64(p.log_end_offset);
        out.put_u64(p.lag);
    }
    end_frame(out, start);
}

pub fn decode_describe_group_response(body: &[u8]) -> Result<Vec<GroupPartition>, Malformed> {
    let mut r = Reader::new(body);
    let count = r.u32("partition count")? as usize;
    if count > r.remaining() {
        return Err(Malformed {
            what: "partition count",
        });
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(GroupPartition {
            topic: String::from_utf8_lossy(r.string("topic")?).into_owned(),
            partition: r.u32("partition")?,
            committed_offset: r.u64("committed")?,
            log_end_offset: r.u64("log end")?,
            lag: r.u64("lag")?,
        });
    }
    r.finish("describe group response")?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::record::encode_batch;

    fn frame_body(frame: &[u8]) -> &[u8] {
        match check_frame(frame, usize::MAX) {
            FrameCheck::Complete { frame_bytes } => &frame[FRAME_LEN_BYTES..frame_bytes],
            other => panic!("not a whole frame: {other:?}"),
        }
    }

    #[test]
    fn produce_round_trip() {
        let limits = Limits::default();
        let mut batches = Vec::new();
        let b1 = encode_batch(1, b"k", b"one", 1);
        let b2 = encode_batch(2, b"", b"two two", 2);
        push_produce_batch(&mut batches, &b1);
        push_produce_batch(&mut batches, &b2);
        let request = Request::Produce {
            topic: b"orders",
            partition: 3,
            batches: ProduceBatches::from_validated(2, &batches, limits),
        };
        let mut frame = Vec::new();
        encode_request(&mut frame, 9, &request);
        let (header, decoded) = decode_request(frame_body(&frame), &limits).unwrap();
        assert_eq!(header.correlation_id, 9);
        assert_eq!(decoded, request);
        let Request::Produce { batches, .. } = decoded else {
            unreachable!()
        };
        let got: Vec<_> = batches.iter().collect();
        assert_eq!(
            got,
            vec![
                (record::batch_crc(&b1), &b1[..]),
                (record::batch_crc(&b2), &b2[..])
            ]
        );
    }

    #[test]
    fn every_request_round_trips() {
        let limits = Limits::default();
        let requests = [
            Request::Fetch {
                topic: b"t",
                partition: 1,
                offset: 5,
                max_bytes: 100,
                max_wait_ms: 7,
            },
            Request::ListOffsets {
                topic: b"t",
                partition: 0,
                spec: OffsetSpec::Timestamp(99),
            },
            Request::CreateTopic {
                name: b"t",
                settings: TopicSettings {
                    partitions: 4,
                    fsync: 3,
                    fsync_interval_ms: 10,
                    segment_bytes: 1 << 20,
                    retention_bytes: 5,
                    retention_ms: 6,
                    cleanup: 1,
                },
            },
            Request::DeleteTopic { name: b"t" },
            Request::Metadata {
                topics: vec![b"a", b"b"],
            },
            Request::CommitOffset {
                group: b"g",
                topic: b"t",
                partition: 2,
                offset: 8,
            },
            Request::FetchOffset {
                group: b"g",
                topic: b"t",
                partition: 2,
            },
            Request::ListGroups,
            Request::DescribeGroup { group: b"g" },
        ];
        for request in requests {
            let mut frame = Vec::new();
            encode_request(&mut frame, 1, &request);
            let (_, decoded) = decode_request(frame_body(&frame), &limits).unwrap();
            assert_eq!(decoded, request);
        }
    }

    #[test]
    fn bad_requests_are_coded_errors() {
        let limits = Limits::default();
        let mut frame = Vec::new();
        encode_request(&mut frame, 4, &Request::ListGroups);
        let mut body = frame_body(&frame).to_vec();
        body.push(0);
        let (header, err) = decode_request(&body, &limits).unwrap_err();
        assert_eq!(header.unwrap().correlation_id, 4);
        assert_eq!(err.code(), ErrorCode::Malformed);

        body[..2].copy_from_slice(&999u16.to_be_bytes());
        assert_eq!(
            decode_request(&body, &limits).unwrap_err().1.code(),
            ErrorCode::UnsupportedApi
        );

        // A produce whose batch has a bad magic byte.
        let mut batches = Vec::new();
        let mut bad = encode_batch(0, b"", b"x", 1);
        bad[0] = 7;
        batches.put_u32(0);
        batches.extend_from_slice(&bad);
        let mut frame = Vec::new();
        encode_request(
            &mut frame,
            5,
            &Request::Produce {
                topic: b"t",
                partition: 0,
                batches: ProduceBatches::from_validated(1, &batches, limits),
            },
        );
        assert_eq!(
            decode_request(frame_body(&frame), &limits)
                .unwrap_err()
                .1
                .code(),
            ErrorCode::BadMagic
        );
    }

    #[test]
    fn frames_and_fetch_heads() {
        assert_eq!(
            check_frame(&[0, 0], 10),
            FrameCheck::Incomplete { needed: 2 }
        );
        assert_eq!(
            check_frame(&[0, 0, 0, 20], 10),
            FrameCheck::TooLarge { body_bytes: 20 }
        );
        assert_eq!(
            check_frame(&[0, 0, 0, 2, 1], 10),
            FrameCheck::Incomplete { needed: 1 }
        );
        let mut out = Vec::new();
        encode_fetch_head(&mut out, 3, 100, 7, [1u32, 2].into_iter(), 5);
        out.extend_from_slice(b"hello");
        let (header, body) = decode_response(frame_body(&out)).unwrap();
        assert_eq!(
            header,
            ResponseHeader {
                correlation_id: 3,
                error: 0
            }
        );
        let fetch = decode_fetch_response(body).unwrap();
        assert_eq!(fetch.crcs, vec![1, 2]);
        assert_eq!(fetch.data, b"hello");
        assert_eq!((fetch.high_watermark, fetch.log_start_offset), (100, 7));
    }

    #[test]
    fn responses_round_trip() {
        let mut out = Vec::new();
        encode_error(
            &mut out,
            8,
            ErrorCode::OffsetOutOfRange,
            "gone",
            Some((3, 9)),
        );
        let (header, body) = decode_response(frame_body(&out)).unwrap();
        assert_eq!(header.error, ErrorCode::OffsetOutOfRange as u16);
        assert_eq!(
            decode_error(body).unwrap(),
            ErrorBody {
                message: "gone".into(),
                earliest: 3,
                latest: 9
            }
        );
        let mut out = Vec::new();
        encode_produce_response(&mut out, 1, 10, 20);
        let (_, body) = decode_response(frame_body(&out)).unwrap();
        assert_eq!(decode_produce_response(body).unwrap(), (10, 20));
        let metadata = MetadataResponse {
            core_ports: vec![9093, 9094],
            topics: vec![TopicMetadata {
                name: "t".into(),
                error: 0,
                settings: TopicSettings {
                    partitions: 2,
                    ..Default::default()
                },
                partitions: vec![
                    PartitionMetadata {
                        owner_core: 1,
                        log_start_offset: 0,
                        high_watermark: 5,
                    },
                    PartitionMetadata {
                        owner_core: 0,
                        log_start_offset: 2,
                        high_watermark: 2,
                    },
                ],
            }],
        };
        let mut out = Vec::new();
        encode_metadata_response(&mut out, 2, &metadata);
        let (_, body) = decode_response(frame_body(&out)).unwrap();
        assert_eq!(decode_metadata_response(body).unwrap(), metadata);
        let mut out = Vec::new();
        encode_list_groups_response(&mut out, 3, &["g1".into(), "g2".into()]);
        let (_, body) = decode_response(frame_body(&out)).unwrap();
        assert_eq!(decode_list_groups_response(body).unwrap(), vec!["g1", "g2"]);
        let group = vec![GroupPartition {
            topic: "t".into(),
            partition: 1,
            committed_offset: 4,
            log_end_offset: 10,
            lag: 6,
        }];
        let mut out = Vec::new();
        encode_describe_group_response(&mut out, 4, &group);
        let (_, body) = decode_response(frame_body(&out)).unwrap();
        assert_eq!(decode_describe_group_response(body).unwrap(), group);
    }
}
