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
            replication_factor: 3,
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
        Request::ClusterStatus,
        Request::DescribeGroup { group: b"g" },
        Request::FindCoordinator { group: b"g" },
        Request::ChangeMember {
            add: true,
            node: 4,
            cluster_addr: b"10.0.0.4:7000",
        },
        Request::ChangeMember {
            add: false,
            node: 2,
            cluster_addr: b"",
        },
        Request::Compact {
            topic: b"t",
            partition: 3,
        },
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
                    owner_node: None,
                    log_start_offset: 0,
                    high_watermark: 5,
                },
                PartitionMetadata {
                    owner_core: 0,
                    owner_node: None,
                    log_start_offset: 2,
                    high_watermark: 2,
                },
            ],
        }],
        cluster: None,
    };
    let mut out = Vec::new();
    encode_metadata_response(&mut out, 2, &metadata);
    let (_, body) = decode_response(frame_body(&out)).unwrap();
    assert_eq!(decode_metadata_response(body).unwrap(), metadata);
    // A cluster node adds its section after the topics; the bytes before it are the same.
    let mut clustered = metadata.clone();
    clustered.topics[0].partitions[0].owner_node = Some(3);
    clustered.topics[0].partitions[1].owner_node = Some(1);
    clustered.cluster = Some(ClusterMetadata {
        node: 1,
        nodes: vec![
            NodeAddress {
                id: 1,
                host: "10.0.0.1".into(),
                port: 9092,
            },
            NodeAddress {
                id: 3,
                host: "node3.example".into(),
                port: 9192,
            },
        ],
    });
    let mut with_section = Vec::new();
    encode_metadata_response(&mut with_section, 2, &clustered);
    let (_, cluster_body) = decode_response(frame_body(&with_section)).unwrap();
    assert_eq!(decode_metadata_response(cluster_body).unwrap(), clustered);
    assert_eq!(
        &cluster_body[..body.len()],
        body,
        "the one-node bytes come first"
    );
    for cut in body.len() + 1..cluster_body.len() {
        assert!(
            decode_metadata_response(&cluster_body[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut out = Vec::new();
    encode_list_groups_response(&mut out, 3, &["g1".into(), "g2".into()]);
    let (_, body) = decode_response(frame_body(&out)).unwrap();
    assert_eq!(decode_list_groups_response(body).unwrap(), vec!["g1", "g2"]);
}

#[test]
fn compact_response_round_trips() {
    let done = CompactResponse {
        segments_rewritten: 3,
        batches_removed: 1_000,
        bytes_before: 1 << 20,
        bytes_after: 1 << 10,
        duration_us: 42,
    };
    let mut out = Vec::new();
    encode_compact_response(&mut out, 9, &done);
    let (header, body) = decode_response(frame_body(&out)).unwrap();
    assert_eq!(header.correlation_id, 9);
    assert_eq!(decode_compact_response(body).unwrap(), done);
    assert!(decode_compact_response(&body[..body.len() - 1]).is_err());
}

#[test]
fn a_metadata_topic_count_is_checked_against_the_bytes() {
    // The count is a claim: names are read (and room for them made) only as far as the
    // bytes go. The allocation bound itself is a property of the `native_request` fuzz
    // target, which found the eager allocation.
    let limits = Limits::default();
    let mut body = Vec::new();
    body.put_u16(ApiKey::Metadata as u16);
    body.put_u16(VERSION);
    body.put_u32(1);
    body.put_u32(METADATA_TOPICS_MAX);
    assert_eq!(
        decode_request(&body, &limits).unwrap_err().1.code(),
        ErrorCode::Malformed
    );
    let names: Vec<Vec<u8>> = (0..METADATA_TOPICS_MAX)
        .map(|i| format!("t{i}").into_bytes())
        .collect();
    for name in &names {
        body.put_string(name);
    }
    let (_, request) = decode_request(&body, &limits).unwrap();
    let Request::Metadata { topics } = request else {
        panic!("not a metadata request: {request:?}")
    };
    assert_eq!(topics.len(), names.len());
    assert!(topics.iter().zip(&names).all(|(a, b)| a == b));
}

#[test]
fn a_create_topic_without_a_replication_factor_asks_one_copy() {
    let limits = Limits::default();
    let request = Request::CreateTopic {
        name: b"t",
        settings: TopicSettings {
            partitions: 2,
            ..Default::default()
        },
        replication_factor: 3,
    };
    let mut frame = Vec::new();
    encode_request(&mut frame, 1, &request);
    let body = frame_body(&frame);
    assert_eq!(decode_request(body, &limits).unwrap().1, request);
    // An older client's request ends with the settings.
    let (_, older) = decode_request(&body[..body.len() - 2], &limits).unwrap();
    let Request::CreateTopic {
        replication_factor, ..
    } = older
    else {
        panic!("{older:?}");
    };
    assert_eq!(replication_factor, 1);
}
