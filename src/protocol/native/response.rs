//! Responses: encoding (broker) and decoding (clients).

use super::*;

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
    /// The owner's core, on its node.
    pub owner_core: u16,
    /// The owner's node, from the cluster section; `None` from a broker that is the only
    /// node (no cluster section): the node asked.
    pub owner_node: Option<u16>,
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

/// The metadata response: the port of each core of the node asked (0 when shard ports are
/// off), topics, and on a cluster node the cluster section.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MetadataResponse {
    pub core_ports: Vec<u16>,
    pub topics: Vec<TopicMetadata>,
    /// Present only from a cluster node: without it the bytes are those a broker alone
    /// always sent, so a one-node broker's answer is unchanged.
    pub cluster: Option<ClusterMetadata>,
}

/// The cluster section of a metadata response: the node that answered and how clients
/// reach every node. Each partition's `owner_node` comes from it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterMetadata {
    /// The node that answered (`core_ports` are its cores').
    pub node: u16,
    pub nodes: Vec<NodeAddress>,
}

/// How a client reaches a node: its advertised host and main port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddress {
    pub id: u16,
    pub host: String,
    pub port: u16,
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
        topic.settings.put(out);
        out.put_u32(u32::try_from(topic.partitions.len()).expect("partitions fit u32"));
        for p in &topic.partitions {
            out.put_u16(p.owner_core);
            out.put_u64(p.log_start_offset);
            out.put_u64(p.high_watermark);
        }
    }
    if let Some(cluster) = &metadata.cluster {
        put_cluster_section(out, cluster, &metadata.topics);
    }
    end_frame(out, start);
}

/// The cluster section, after the topics: the node asked, the nodes, then each
/// partition's owner node, topic by topic in the order above (the node asked for a
/// partition that names none).
fn put_cluster_section(out: &mut Vec<u8>, cluster: &ClusterMetadata, topics: &[TopicMetadata]) {
    out.put_u16(cluster.node);
    out.put_u16(u16::try_from(cluster.nodes.len()).expect("node ids fit u16"));
    for node in &cluster.nodes {
        out.put_u16(node.id);
        out.put_string(node.host.as_bytes());
        out.put_u16(node.port);
    }
    for p in topics.iter().flat_map(|t| &t.partitions) {
        out.put_u16(p.owner_node.unwrap_or(cluster.node));
    }
}

/// Reads the cluster section into `metadata` (see [`put_cluster_section`]).
fn read_cluster_section(
    r: &mut Reader<'_>,
    metadata: &mut MetadataResponse,
) -> Result<(), Malformed> {
    let node = r.u16("node")?;
    let count = r.u16("node count")? as usize;
    // A node takes at least 6 bytes: sized by what is there, not by the count claimed.
    if count * 6 > r.remaining() {
        return Err(Malformed { what: "node count" });
    }
    let mut nodes = Vec::with_capacity(count);
    for _ in 0..count {
        nodes.push(NodeAddress {
            id: r.u16("node id")?,
            host: String::from_utf8_lossy(r.string("node host")?).into_owned(),
            port: r.u16("node port")?,
        });
    }
    for p in metadata.topics.iter_mut().flat_map(|t| &mut t.partitions) {
        p.owner_node = Some(r.u16("owner node")?);
    }
    metadata.cluster = Some(ClusterMetadata { node, nodes });
    Ok(())
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
        let settings = TopicSettings::read(&mut r)?;
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
                    owner_node: None,
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
    let mut metadata = MetadataResponse {
        core_ports,
        topics,
        cluster: None,
    };
    if r.remaining() > 0 {
        read_cluster_section(&mut r, &mut metadata)?;
    }
    r.finish("metadata response")?;
    Ok(metadata)
}

/// What a compaction pass did, as a compact response carries it:
/// `[u32 segments rewritten][u64 batches removed][u64 bytes before][u64 bytes after]
/// [u64 duration us]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CompactResponse {
    pub segments_rewritten: u32,
    pub batches_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub duration_us: u64,
}

pub fn encode_compact_response(out: &mut Vec<u8>, correlation_id: u32, done: &CompactResponse) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u32(done.segments_rewritten);
    out.put_u64(done.batches_removed);
    out.put_u64(done.bytes_before);
    out.put_u64(done.bytes_after);
    out.put_u64(done.duration_us);
    end_frame(out, start);
}

pub fn decode_compact_response(body: &[u8]) -> Result<CompactResponse, Malformed> {
    let mut r = Reader::new(body);
    let done = CompactResponse {
        segments_rewritten: r.u32("segments rewritten")?,
        batches_removed: r.u64("batches removed")?,
        bytes_before: r.u64("bytes before")?,
        bytes_after: r.u64("bytes after")?,
        duration_us: r.u64("duration")?,
    };
    r.finish("compact response")?;
    Ok(done)
}
