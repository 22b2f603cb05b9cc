//! `pagurus bench --protocol kafka`: the bench's load spoken in Kafka, so the Kafka path's
//! cost is measured beside the native one by the same tool, with the same shape, pacing and
//! report.
//!
//! - Each partition's leader comes from the Metadata API ([`leaders`]); on pagurus every core
//!   is a Kafka broker on its own shard port (docs/KAFKA.md, "Cores are brokers").
//! - Each producer is an idempotent Kafka producer on its own connection to its partition's
//!   leader ([`workers::produce`]): InitProducerId, then Produce with acks=all (-1), its
//!   producer id, epoch and sequence numbers, up to `--in-flight` requests pipelined, each
//!   one RecordBatch (magic 2) of `--batch` records of `--size` bytes ([`records`]).
//! - Each partition is read by a consumer on its own connection to the leader, with Fetch
//!   ([`workers::consume`]).
//!
//! Topics are created and deleted, and the consumers' start offsets read, with the native
//! admin client, as for `--protocol native`: those steps are outside the measured window,
//! and offsets are the same numbers in both protocols.
//!
//! [`codec`] (requests and responses) and [`records`] (RecordBatches) are sans-IO;
//! [`conn`] is the socket.

pub mod codec;
mod conn;
pub mod records;
pub mod workers;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use self::codec::{KafkaBenchError, METADATA_VERSION, RESPONSE_BYTES_MAX};
use crate::protocol::kafka::frame;

/// The address of each `(topic, partition)`'s leader in `wanted`, from a Metadata request to
/// `broker` (blocking, before the run; `timeout` bounds the connection and each read and
/// write).
pub fn leaders(
    broker: SocketAddr,
    timeout: Duration,
    wanted: &[(String, u32)],
) -> Result<HashMap<(String, u32), SocketAddr>, KafkaBenchError> {
    let mut topics: Vec<&str> = wanted.iter().map(|(t, _)| t.as_str()).collect();
    topics.sort_unstable();
    topics.dedup();
    let request = MetadataRequest::default().with_topics(Some(
        topics
            .iter()
            .map(|t| {
                MetadataRequestTopic::default()
                    .with_name(Some(TopicName(StrBytes::from_string(t.to_string()))))
            })
            .collect(),
    ));
    let response: MetadataResponse = blocking_call(
        broker,
        timeout,
        ApiKey::Metadata,
        METADATA_VERSION,
        &request,
    )?;
    let brokers: HashMap<i32, SocketAddr> = response
        .brokers
        .iter()
        .map(|b| {
            let port = u16::try_from(b.port)
                .map_err(|_| KafkaBenchError::Metadata(format!("broker port {}", b.port)))?;
            let addr = (b.host.as_str(), port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| {
                    KafkaBenchError::Metadata(format!("cannot resolve broker {}:{port}", b.host))
                })?;
            Ok((b.node_id.0, addr))
        })
        .collect::<Result<_, KafkaBenchError>>()?;
    let mut found = HashMap::new();
    for topic in &response.topics {
        let name = topic.name.as_ref().map_or("", |n| n.0.as_str());
        if topic.error_code != 0 {
            return Err(KafkaBenchError::broker(
                ApiKey::Metadata,
                format!("topic {name}"),
                topic.error_code,
            ));
        }
        for partition in &topic.partitions {
            let addr = brokers.get(&partition.leader_id.0).ok_or_else(|| {
                KafkaBenchError::Metadata(format!(
                    "{name}/{}: leader {} is not among the brokers",
                    partition.partition_index, partition.leader_id.0
                ))
            })?;
            if let Ok(index) = u32::try_from(partition.partition_index) {
                found.insert((name.to_string(), index), *addr);
            }
        }
    }
    wanted
        .iter()
        .map(|key| {
            let addr = found.get(key).ok_or_else(|| {
                KafkaBenchError::Metadata(format!("no leader for {}/{}", key.0, key.1))
            })?;
            Ok((key.clone(), *addr))
        })
        .collect()
}

/// One request and its answer on a new blocking connection.
fn blocking_call<Q, R>(
    peer: SocketAddr,
    timeout: Duration,
    api: ApiKey,
    version: i16,
    request: &Q,
) -> Result<R, KafkaBenchError>
where
    Q: kafka_protocol::protocol::Encodable,
    R: kafka_protocol::protocol::Decodable,
{
    let io = |what: &'static str| move |source| KafkaBenchError::Io { what, peer, source };
    let mut stream = TcpStream::connect_timeout(&peer, timeout).map_err(io("connect to"))?;
    stream
        .set_read_timeout(Some(timeout))
        .and_then(|()| stream.set_write_timeout(Some(timeout)))
        .map_err(io("set timeouts on"))?;
    let mut out = BytesMut::new();
    codec::encode_request(&mut out, api, version, 0, request)?;
    stream.write_all(&out).map_err(io("write to"))?;
    let mut prefix = [0u8; frame::SIZE_LEN];
    stream.read_exact(&mut prefix).map_err(io("read from"))?;
    let len = frame::body_len(&prefix, RESPONSE_BYTES_MAX)?;
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).map_err(io("read from"))?;
    codec::decode_response(api, version, 0, Bytes::from(body))
}
