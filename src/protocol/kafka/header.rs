//! The Kafka request header. Its first eight bytes (api key, api version, correlation id)
//! are read by hand, so that a request for an API this build does not know still gets an
//! answer under its correlation id; the rest (client id, and the tagged fields of flexible
//! versions) is decoded by `kafka-protocol` once the API and version are known to be served.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::Decodable;

/// Bytes of api key + api version + correlation id.
pub const PREFIX_LEN: usize = 8;

/// Why a request header could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer than the eight fixed bytes: there is no correlation id to answer under.
    #[error("request of {len} bytes is shorter than the 8-byte header prefix")]
    Short { len: usize },
    /// The client id or tagged fields do not decode.
    #[error("request header of api {api_key} v{api_version}: {reason}")]
    Malformed {
        api_key: i16,
        api_version: i16,
        reason: String,
    },
}

/// The fixed start of every request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderPrefix {
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
}

impl HeaderPrefix {
    /// Reads the eight fixed bytes at the front of a frame body.
    pub fn peek(body: &[u8]) -> Result<HeaderPrefix, HeaderError> {
        if body.len() < PREFIX_LEN {
            return Err(HeaderError::Short { len: body.len() });
        }
        let i16_at = |at: usize| i16::from_be_bytes([body[at], body[at + 1]]);
        Ok(HeaderPrefix {
            api_key: i16_at(0),
            api_version: i16_at(2),
            correlation_id: i32::from_be_bytes(body[4..8].try_into().expect("4 bytes")),
        })
    }
}

/// A decoded request header of a served API.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestHeader {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    /// Absent (null) in some clients' requests.
    pub client_id: Option<String>,
}

impl RequestHeader {
    /// Decodes the header of `body` for an API key this crate knows, and leaves `body` at the
    /// start of the request message.
    pub fn decode(api_key: ApiKey, body: &mut Bytes) -> Result<RequestHeader, HeaderError> {
        let prefix = HeaderPrefix::peek(body)?;
        let header_version = api_key.request_header_version(prefix.api_version);
        let malformed = |reason: String| HeaderError::Malformed {
            api_key: prefix.api_key,
            api_version: prefix.api_version,
            reason,
        };
        let before = body.remaining();
        let decoded = kafka_protocol::messages::RequestHeader::decode(body, header_version)
            .map_err(|e| malformed(e.to_string()))?;
        debug_assert!(body.remaining() <= before);
        Ok(RequestHeader {
            api_key,
            api_version: prefix.api_version,
            correlation_id: prefix.correlation_id,
            client_id: decoded.client_id.map(|id| id.to_string()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::messages::RequestHeader as WireHeader;
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encoded(api_key: ApiKey, version: i16, client_id: Option<&'static str>) -> Bytes {
        let header = WireHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(77)
            .with_client_id(client_id.map(StrBytes::from_static_str));
        let mut out = BytesMut::new();
        header
            .encode(&mut out, api_key.request_header_version(version))
            .unwrap();
        out.extend_from_slice(b"rest");
        out.freeze()
    }

    #[test]
    fn flexible_and_classic_headers() {
        // Metadata v9 uses header v2 (tagged fields), v1 header v1.
        for version in [1, 9] {
            let mut body = encoded(ApiKey::Metadata, version, Some("kcat"));
            let header = RequestHeader::decode(ApiKey::Metadata, &mut body).unwrap();
            assert_eq!(header.correlation_id, 77);
            assert_eq!(header.api_version, version);
            assert_eq!(header.client_id.as_deref(), Some("kcat"));
            assert_eq!(&body[..], b"rest");
        }
        let mut body = encoded(ApiKey::Produce, 7, None);
        assert_eq!(
            RequestHeader::decode(ApiKey::Produce, &mut body)
                .unwrap()
                .client_id,
            None
        );
    }

    #[test]
    fn short_and_cut_headers() {
        assert_eq!(
            HeaderPrefix::peek(&[0, 3, 0]),
            Err(HeaderError::Short { len: 3 })
        );
        let full = encoded(ApiKey::Metadata, 9, Some("a-client"));
        let mut cut = full.slice(..10);
        assert!(matches!(
            RequestHeader::decode(ApiKey::Metadata, &mut cut),
            Err(HeaderError::Malformed { api_key: 3, .. })
        ));
    }
}
