use super::*;
use crate::protocol::kafka::frame;
use kafka_protocol::messages::RequestHeader as WireHeader;
use kafka_protocol::protocol::{HeaderVersion, StrBytes};

fn request_bytes<R: Encodable>(key: ApiKey, version: i16, request: &R) -> Bytes {
    let header = WireHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(4242)
        .with_client_id(Some(StrBytes::from_static_str("test")));
    let mut out = BytesMut::new();
    header
        .encode(&mut out, key.request_header_version(version))
        .unwrap();
    request.encode(&mut out, version).unwrap();
    out.freeze()
}

#[test]
fn served_ranges_are_inside_the_crate_and_sorted() {
    for pair in SERVED.windows(2) {
        assert!((pair[0].key as i16) < (pair[1].key as i16));
    }
    for s in SERVED {
        let valid = s.key.valid_versions();
        assert!(
            valid.min <= s.min_version && s.max_version <= valid.max,
            "{:?} {}..={} outside {valid}",
            s.key,
            s.min_version,
            s.max_version
        );
    }
}

#[test]
fn every_served_version_of_some_apis_decodes() {
    for s in SERVED {
        for version in s.min_version..=s.max_version {
            let body = match s.key {
                ApiKey::Metadata => request_bytes(s.key, version, &MetadataRequest::default()),
                ApiKey::Heartbeat => request_bytes(
                    s.key,
                    version,
                    &HeartbeatRequest::default()
                        .with_group_id(StrBytes::from_static_str("g").into())
                        .with_generation_id(3),
                ),
                ApiKey::ApiVersions => {
                    request_bytes(s.key, version, &ApiVersionsRequest::default())
                }
                _ => continue,
            };
            let (header, request) = decode_request(body).unwrap();
            assert_eq!(header.correlation_id, 4242);
            assert_eq!(header.client_id.as_deref(), Some("test"));
            assert_eq!(request.api_key(), s.key);
            if let KafkaRequest::Heartbeat(h) = request {
                assert_eq!(h.generation_id, 3);
                assert_eq!(h.group_id.as_str(), "g");
            }
        }
    }
}

#[test]
fn unsupported_apis_and_versions_are_told_apart_from_garbage() {
    // Produce v13 is served, v2 is below the floor: the crate has no type for it, so the
    // request is refused from its header alone, as not served, and closes the connection.
    let produce13 = request_bytes(ApiKey::Produce, 13, &ProduceRequest::default());
    assert!(decode_request(produce13).is_ok());
    let mut produce2 = BytesMut::new();
    produce2.put_i16(ApiKey::Produce as i16);
    produce2.put_i16(2);
    produce2.put_i32(4242);
    produce2.put_i16(-1);
    let produce2 = produce2.freeze();
    let prefix = HeaderPrefix::peek(&produce2).unwrap();
    assert!(matches!(
        decode_request(produce2),
        Err(ApiError::Unsupported { prefix }) if prefix.correlation_id == 4242
    ));
    assert!(closes_connection(&prefix));
    // ApiVersions is answered at any version; a served request is not closed.
    let api_versions = |version| HeaderPrefix {
        api_key: ApiKey::ApiVersions as i16,
        api_version: version,
        correlation_id: 1,
    };
    assert!(!closes_connection(&api_versions(99)));
    assert!(!closes_connection(&HeaderPrefix {
        api_key: ApiKey::Fetch as i16,
        api_version: 18,
        correlation_id: 1
    }));
    assert!(closes_connection(&HeaderPrefix {
        api_key: ApiKey::Fetch as i16,
        api_version: 19,
        correlation_id: 1
    }));
    // An API this build does not serve at all (AddPartitionsToTxn = 24).
    let mut unknown = BytesMut::new();
    unknown.put_i16(24);
    unknown.put_i16(0);
    unknown.put_i32(9);
    unknown.put_i16(-1);
    let unknown = unknown.freeze();
    assert!(closes_connection(&HeaderPrefix::peek(&unknown).unwrap()));
    assert!(matches!(
        decode_request(unknown),
        Err(ApiError::Unsupported { prefix }) if prefix.api_key == 24 && prefix.correlation_id == 9
    ));
    assert!(matches!(
        decode_request(Bytes::from_static(&[0, 3, 0])),
        Err(ApiError::Header(HeaderError::Short { len: 3 }))
    ));
}

#[test]
fn huge_array_counts_fail_instead_of_allocating() {
    // Metadata v0 with a client id of length 0 and a topic array announcing 0x7fff_ffff
    // entries: with the unpatched crate this aborts the process on a failed allocation.
    let mut body = BytesMut::new();
    body.put_i16(ApiKey::Metadata as i16);
    body.put_i16(0);
    body.put_i32(1);
    body.put_i16(0);
    body.put_i32(i32::MAX);
    body.put_u8(0);
    assert!(matches!(
        decode_request(body.freeze()),
        Err(ApiError::Malformed { prefix, .. }) if prefix.correlation_id == 1
    ));
    let mut compact = BytesMut::new();
    compact.put_i16(ApiKey::Metadata as i16);
    compact.put_i16(9);
    compact.put_i32(2);
    compact.put_i16(0); // client id
    compact.put_u8(0); // header tagged fields
    compact.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0x07]); // compact array: 2^31 - 2
    assert!(matches!(
        decode_request(compact.freeze()),
        Err(ApiError::Malformed { .. })
    ));
}

fn decode_framed_api_versions(framed: &[u8], version: i16) -> (i32, ApiVersionsResponse) {
    let (body, used) = frame::parse(framed, 1 << 20).unwrap();
    assert_eq!(used, framed.len());
    let mut body = Bytes::copy_from_slice(body);
    // ApiVersions answers always carry a v0 response header: the correlation id alone.
    assert_eq!(ApiVersionsResponse::header_version(version), 0);
    let correlation_id = i32::from_be_bytes(body[..4].try_into().unwrap());
    let _ = body.split_to(4);
    (
        correlation_id,
        ApiVersionsResponse::decode(&mut body, version).unwrap(),
    )
}

#[test]
fn api_versions_answer_lists_exactly_what_is_served_without_tagged_fields() {
    for version in 0..=3 {
        let mut out = BytesMut::new();
        encode_response(
            &mut out,
            ApiKey::ApiVersions,
            version,
            11,
            &api_versions_response(None),
        )
        .unwrap();
        if version == 3 {
            // The body ends with throttle time then an empty tagged-field section.
            assert_eq!(out[out.len() - 5..], [0, 0, 0, 0, 0]);
        }
        let (correlation_id, response) = decode_framed_api_versions(&out, version);
        assert_eq!(correlation_id, 11);
        assert_eq!(response.error_code, 0);
        assert!(response.supported_features.is_empty());
        let listed: Vec<(i16, i16, i16)> = response
            .api_keys
            .iter()
            .map(|k| (k.api_key, k.min_version, k.max_version))
            .collect();
        // Produce is advertised from v0, as Kafka 4.x does (KAFKA-18659).
        let served: Vec<(i16, i16, i16)> = SERVED
            .iter()
            .map(|s| {
                let min = if s.key == ApiKey::Produce {
                    0
                } else {
                    s.min_version
                };
                (s.key as i16, min, s.max_version)
            })
            .collect();
        assert_eq!(listed, served);
    }
}

#[test]
fn unsupported_answers() {
    let mut out = BytesMut::new();
    let prefix = HeaderPrefix {
        api_key: ApiKey::ApiVersions as i16,
        api_version: 9,
        correlation_id: 5,
    };
    unsupported_response(&mut out, prefix);
    let (correlation_id, response) = decode_framed_api_versions(&out, 0);
    assert_eq!(correlation_id, 5);
    assert_eq!(response.error_code, 35);
    assert_eq!(response.api_keys.len(), SERVED.len());

    let mut out = BytesMut::new();
    unsupported_response(
        &mut out,
        HeaderPrefix {
            api_key: 24,
            api_version: 0,
            correlation_id: 6,
        },
    );
    assert_eq!(&out[..], &[0, 0, 0, 6, 0, 0, 0, 6, 0, 35]);
}
