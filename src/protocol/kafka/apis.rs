//! The Kafka APIs pagurus serves, with the exact versions it advertises in ApiVersions, the
//! decode of their requests and the encode of responses. Message layouts come from the
//! `kafka-protocol` crate (generated from Kafka's schemas); this module only decides what is
//! served and frames it.
//!
//! Versions: each range is exactly what Apache Kafka 4.1's broker serves (its message
//! schemas' `validVersions`, less the versions they mark unstable, which a broker does not
//! advertise): it starts at Kafka 4.0's floor (KIP-896) and ends at 4.1's newest stable
//! version. Below a range (and for an API not served) the connection is closed, as Kafka
//! closes it ([`closes_connection`]); only ApiVersions is answered at any version.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable};

use super::header::{HeaderError, HeaderPrefix, RequestHeader};

/// One served API and the versions advertised for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub key: ApiKey,
    /// Kafka's name for the API (`Produce`, `OffsetFetch`, ...): the metrics label.
    pub name: &'static str,
    pub min_version: i16,
    pub max_version: i16,
}

macro_rules! served_apis {
    ($($variant:ident($request:ty) = $min:literal ..= $max:literal),+ $(,)?) => {
        /// Every served API with its versions, in api key order (the ApiVersions answer).
        pub const SERVED: &[Served] = &[
            $(Served { key: ApiKey::$variant, name: stringify!($variant), min_version: $min, max_version: $max }),+
        ];

        /// A decoded request of a served API.
        #[derive(Debug, Clone, PartialEq)]
        pub enum KafkaRequest {
            $($variant($request)),+
        }

        impl KafkaRequest {
            fn decode_body(key: ApiKey, body: &mut Bytes, version: i16)
                -> Option<anyhow::Result<KafkaRequest>> {
                match key {
                    $(ApiKey::$variant => Some(
                        <$request>::decode(body, version).map(KafkaRequest::$variant)
                    ),)+
                    _ => None,
                }
            }

            /// The API this request belongs to.
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(KafkaRequest::$variant(_) => ApiKey::$variant),+
                }
            }
        }
    };
}

served_apis! {
    Produce(ProduceRequest) = 3..=13,
    Fetch(FetchRequest) = 4..=18,
    ListOffsets(ListOffsetsRequest) = 1..=10,
    Metadata(MetadataRequest) = 0..=13,
    OffsetCommit(OffsetCommitRequest) = 2..=9,
    OffsetFetch(OffsetFetchRequest) = 1..=9,
    FindCoordinator(FindCoordinatorRequest) = 0..=6,
    JoinGroup(JoinGroupRequest) = 0..=9,
    Heartbeat(HeartbeatRequest) = 0..=4,
    LeaveGroup(LeaveGroupRequest) = 0..=5,
    SyncGroup(SyncGroupRequest) = 0..=5,
    DescribeGroups(DescribeGroupsRequest) = 0..=6,
    ListGroups(ListGroupsRequest) = 0..=5,
    SaslHandshake(SaslHandshakeRequest) = 0..=1,
    ApiVersions(ApiVersionsRequest) = 0..=4,
    CreateTopics(CreateTopicsRequest) = 2..=7,
    DeleteTopics(DeleteTopicsRequest) = 1..=6,
    DeleteRecords(DeleteRecordsRequest) = 0..=2,
    InitProducerId(InitProducerIdRequest) = 0..=5,
    DescribeConfigs(DescribeConfigsRequest) = 1..=4,
    AlterConfigs(AlterConfigsRequest) = 0..=2,
    DescribeLogDirs(DescribeLogDirsRequest) = 1..=4,
    SaslAuthenticate(SaslAuthenticateRequest) = 0..=2,
    CreatePartitions(CreatePartitionsRequest) = 0..=3,
    DeleteGroups(DeleteGroupsRequest) = 0..=2,
    ElectLeaders(ElectLeadersRequest) = 0..=2,
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest) = 0..=1,
    OffsetDelete(OffsetDeleteRequest) = 0..=0,
    DescribeCluster(DescribeClusterRequest) = 0..=2,
}

/// The lowest Produce version ApiVersions advertises. Kafka 4.0 and 4.1 advertise Produce
/// from v0 although they refuse v0-v2 like any version below their floor (KAFKA-18659):
/// librdkafka without the fix for its issue 4956 (Debian's kcat 2.0.2 among them) turns
/// its compression features off against a broker whose Produce range does not include
/// v0-v2, and clients pick the highest version both sides know, never v0-v2, so
/// advertising them costs nothing.
pub const PRODUCE_ADVERTISED_MIN: i16 = 0;

/// Why a request frame could not become a [`KafkaRequest`]. Every variant but `Short` carries
/// the prefix, so the broker can answer under the request's correlation id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// An API key or version outside [`SERVED`]: answered with UNSUPPORTED_VERSION
    /// ([`unsupported_response`]).
    #[error("api {} v{} is not served", .prefix.api_key, .prefix.api_version)]
    Unsupported { prefix: HeaderPrefix },
    /// The message does not decode at its version: answered with INVALID_REQUEST where the
    /// response has a top-level error code, otherwise the connection is closed.
    #[error("api {} v{}: {reason}", .prefix.api_key, .prefix.api_version)]
    Malformed {
        prefix: HeaderPrefix,
        reason: String,
    },
}

/// The served versions of an API key, if it is served at all.
pub fn served(api_key: i16) -> Option<Served> {
    SERVED.iter().copied().find(|s| s.key as i16 == api_key)
}

/// Decodes a whole request frame body (without its size prefix).
pub fn decode_request(mut body: Bytes) -> Result<(RequestHeader, KafkaRequest), ApiError> {
    let prefix = HeaderPrefix::peek(&body)?;
    let served = served(prefix.api_key)
        .filter(|s| (s.min_version..=s.max_version).contains(&prefix.api_version))
        .ok_or(ApiError::Unsupported { prefix })?;
    let header = RequestHeader::decode(served.key, &mut body)?;
    let request = KafkaRequest::decode_body(served.key, &mut body, prefix.api_version)
        .expect("every served key decodes")
        .map_err(|e| ApiError::Malformed {
            prefix,
            reason: e.to_string(),
        })?;
    Ok((header, request))
}

/// The ApiVersions answer: exactly [`SERVED`], and no tagged fields at v3 (librdkafka 2.0.2
/// misreads optional tagged fields there; Kafka sends none either).
pub fn api_versions_response(error: Option<ResponseError>) -> ApiVersionsResponse {
    let api_keys = SERVED
        .iter()
        .map(|s| {
            let min_version = if s.key == ApiKey::Produce {
                PRODUCE_ADVERTISED_MIN
            } else {
                s.min_version
            };
            ApiVersion::default()
                .with_api_key(s.key as i16)
                .with_min_version(min_version)
                .with_max_version(s.max_version)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error.map_or(0, |e| e.code()))
        .with_api_keys(api_keys)
}

/// Appends one framed response: size, the response header the API and version call for
/// (ApiVersions always v0), then `body` at `version`.
pub fn encode_response<R: Encodable>(
    out: &mut BytesMut,
    api_key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &R,
) -> anyhow::Result<()> {
    let start = out.len();
    out.put_i32(0);
    out.put_i32(correlation_id);
    if api_key.response_header_version(version) >= 1 {
        out.put_u8(0); // no tagged fields
    }
    body.encode(out, version)?;
    let size = i32::try_from(out.len() - start - 4)?;
    out[start..start + 4].copy_from_slice(&size.to_be_bytes());
    Ok(())
}

/// True when a request outside [`SERVED`] is answered by closing the connection: any API
/// but ApiVersions. Kafka 4.0 and 4.1 do so (their socket server throws
/// `UnsupportedVersionException` while parsing the header, and a request that cannot be
/// parsed closes its connection), for an API key they do not serve and for a version
/// below the floor or above the newest alike. No answer can be framed for such a request:
/// its response layout at that version is unknown, and any bytes would be misread (a bare
/// error code was read as "insufficient data"). The client sees the connection closed;
/// one that asked ApiVersions first never sends such a request: it finds no version in
/// common and reports it itself.
pub fn closes_connection(prefix: &HeaderPrefix) -> bool {
    if prefix.api_key == ApiKey::ApiVersions as i16 {
        return false;
    }
    !served(prefix.api_key)
        .is_some_and(|s| (s.min_version..=s.max_version).contains(&prefix.api_version))
}

/// The answer to an ApiVersions request outside [`SERVED`] (a version above the newest): a
/// v0 ApiVersions response with UNSUPPORTED_VERSION and the served list, as Kafka does, so
/// the client can pick a version. Any other request outside it closes the connection
/// ([`closes_connection`]); for one of those (only a response pagurus failed to encode
/// lands here) a v0 response header and the UNSUPPORTED_VERSION code as the first field.
pub fn unsupported_response(out: &mut BytesMut, prefix: HeaderPrefix) {
    if prefix.api_key == ApiKey::ApiVersions as i16 {
        let body = api_versions_response(Some(ResponseError::UnsupportedVersion));
        encode_response(out, ApiKey::ApiVersions, 0, prefix.correlation_id, &body)
            .expect("ApiVersions v0 encodes");
        return;
    }
    out.put_i32(6);
    out.put_i32(prefix.correlation_id);
    out.put_i16(ResponseError::UnsupportedVersion.code());
}

#[cfg(test)]
#[path = "apis_tests.rs"]
mod tests;
