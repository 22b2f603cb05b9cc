//! The Kafka bench's requests and responses, sans-IO: encoding a request into a frame, and
//! decoding a response frame's body once the connection has read it. The message layouts
//! are the `kafka-protocol` crate's; nothing here touches a socket.

use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::protocol::kafka::FrameError;

/// The versions the bench speaks: the newest of each that pagurus serves (docs/KAFKA.md),
/// which Kafka's own brokers serve too.
pub const PRODUCE_VERSION: i16 = 9;
pub const FETCH_VERSION: i16 = 12;
pub const METADATA_VERSION: i16 = 12;
pub const INIT_PRODUCER_ID_VERSION: i16 = 4;

/// `max_bytes` and `partition_max_bytes` of the consumers' fetches, as the native bench's.
pub const FETCH_MAX_BYTES: i32 = 4 << 20;
/// Longest answer a fetch may bring: its `max_bytes`, or one batch over it (a broker always
/// answers at least one whole batch), up to the broker's batch limit. A larger size prefix
/// is refused before anything is allocated for it.
pub const FETCH_RESPONSE_BYTES_MAX: u64 = 64 << 20;
/// Longest answer to anything else: metadata of thousands of partitions fits many times.
pub const RESPONSE_BYTES_MAX: u64 = 16 << 20;

const CLIENT_ID: StrBytes = StrBytes::from_static_str("pagurus-bench");

/// Why a Kafka exchange failed.
#[derive(Debug, thiserror::Error)]
pub enum KafkaBenchError {
    #[error("{what} {peer}: {source}")]
    Io {
        what: &'static str,
        peer: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("{what} {peer}: no answer within {} ms", .after.as_millis())]
    Timeout {
        what: &'static str,
        peer: std::net::SocketAddr,
        after: Duration,
    },
    #[error("response frame: {0}")]
    Frame(#[from] FrameError),
    #[error("cannot encode {api:?} v{version}: {reason}")]
    Encode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("cannot decode the {api:?} v{version} response: {reason}")]
    Decode {
        api: ApiKey,
        version: i16,
        reason: String,
    },
    #[error("{api:?} response has correlation id {got}, expected {expected}")]
    Correlation {
        api: ApiKey,
        expected: i32,
        got: i32,
    },
    #[error("{api:?} on {what}: broker error {code} ({name})")]
    Broker {
        api: ApiKey,
        what: String,
        code: i16,
        name: String,
    },
    #[error("metadata: {0}")]
    Metadata(String),
    #[error("fetched records: {0}")]
    Records(String),
}

impl KafkaBenchError {
    /// A broker's error code for `what`, with the code's Kafka name.
    pub fn broker(api: ApiKey, what: impl Into<String>, code: i16) -> KafkaBenchError {
        let name = kafka_protocol::error::ResponseError::try_from_code(code)
            .map_or_else(|| "unknown code".to_string(), |e| format!("{e:?}"));
        KafkaBenchError::Broker {
            api,
            what: what.into(),
            code,
            name,
        }
    }
}

/// Appends one request frame (size prefix, request header, body) to `out`.
pub fn encode_request<R: Encodable>(
    out: &mut BytesMut,
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    request: &R,
) -> Result<(), KafkaBenchError> {
    let encode_error = |e: anyhow::Error| KafkaBenchError::Encode {
        api,
        version,
        reason: e.to_string(),
    };
    let start = out.len();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(api as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(CLIENT_ID))
        .encode(out, api.request_header_version(version))
        .map_err(encode_error)?;
    request.encode(out, version).map_err(encode_error)?;
    let size = i32::try_from(out.len() - start - 4).map_err(|_| KafkaBenchError::Encode {
        api,
        version,
        reason: "request over 2 GiB".into(),
    })?;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// Decodes the body of a response frame (after its size prefix) to `request`'s answer,
/// checking that it answers `correlation_id`.
pub fn decode_response<R: Decodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    mut body: Bytes,
) -> Result<R, KafkaBenchError> {
    let decode_error = |e: anyhow::Error| KafkaBenchError::Decode {
        api,
        version,
        reason: e.to_string(),
    };
    let header = ResponseHeader::decode(&mut body, api.response_header_version(version))
        .map_err(decode_error)?;
    if header.correlation_id != correlation_id {
        return Err(KafkaBenchError::Correlation {
            api,
            expected: correlation_id,
            got: header.correlation_id,
        });
    }
    R::decode(&mut body, version).map_err(decode_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::kafka::{KafkaRequest, frame};
    use kafka_protocol::messages::{MetadataRequest, MetadataResponse};

    #[test]
    fn a_request_frame_decodes_as_the_broker_reads_it() {
        let mut out = BytesMut::new();
        let request = MetadataRequest::default().with_topics(Some(Vec::new()));
        encode_request(&mut out, ApiKey::Metadata, METADATA_VERSION, 7, &request).unwrap();
        let (body, used) = frame::parse(&out, 1 << 20).unwrap();
        assert_eq!(used, out.len());
        let (header, decoded) =
            crate::protocol::kafka::apis::decode_request(Bytes::copy_from_slice(body)).unwrap();
        assert_eq!(header.correlation_id, 7);
        assert_eq!(header.client_id.as_deref(), Some("pagurus-bench"));
        assert_eq!(decoded, KafkaRequest::Metadata(request));
    }

    #[test]
    fn a_response_for_another_request_is_refused() {
        let mut body = BytesMut::new();
        let version = METADATA_VERSION;
        ResponseHeader::default()
            .with_correlation_id(3)
            .encode(&mut body, ApiKey::Metadata.response_header_version(version))
            .unwrap();
        MetadataResponse::default()
            .encode(&mut body, version)
            .unwrap();
        let body = body.freeze();
        let ok: MetadataResponse =
            decode_response(ApiKey::Metadata, version, 3, body.clone()).unwrap();
        assert!(ok.topics.is_empty());
        let wrong = decode_response::<MetadataResponse>(ApiKey::Metadata, version, 4, body);
        assert!(matches!(
            wrong,
            Err(KafkaBenchError::Correlation {
                expected: 4,
                got: 3,
                ..
            })
        ));
        let cut = decode_response::<MetadataResponse>(
            ApiKey::Metadata,
            version,
            3,
            Bytes::from_static(&[0, 0]),
        );
        assert!(
            matches!(cut, Err(KafkaBenchError::Decode { .. })),
            "{cut:?}"
        );
    }
}
