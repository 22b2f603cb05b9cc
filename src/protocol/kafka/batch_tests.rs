use super::*;
use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use proptest::prelude::*;

const LIMIT: u64 = 1 << 20;

/// A batch as a Kafka producer builds it, by the `kafka-protocol` crate's own encoder.
pub(crate) fn kafka_batch(
    values: &[Vec<u8>],
    producer: (i64, i16, i32),
    timestamp_ms: i64,
) -> Vec<u8> {
    let records: Vec<Record> = values
        .iter()
        .enumerate()
        .map(|(i, value)| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: producer.0,
            producer_epoch: producer.1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder keeps records in one batch while offset - sequence is constant;
            // a base sequence of -1 (no idempotence) is then what it writes.
            sequence: producer.2.wrapping_add(i as i32),
            timestamp: timestamp_ms + i as i64,
            key: Some(Bytes::from(format!("k{i}"))),
            value: Some(Bytes::from(value.clone())),
            headers: IndexMap::new(),
        })
        .collect();
    let mut out = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, &records, &options).unwrap();
    assert_eq!(check(&out, LIMIT).unwrap().len, out.len(), "one batch");
    out.to_vec()
}

fn values_strategy() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..64), 1..20)
}

proptest! {
    #[test]
    fn kafka_batches_are_read_and_rebased(
        values in values_strategy(),
        producer_id in -1i64..1000,
        epoch in 0i16..10,
        base_sequence in 0i32..i32::MAX / 2,
        timestamp_ms in 0i64..4_000_000_000_000,
        new_base in 0i64..i64::MAX / 2,
    ) {
        let sequence = if producer_id < 0 { -1 } else { base_sequence };
        let mut bytes = kafka_batch(&values, (producer_id, epoch, sequence), timestamp_ms);
        let info = check_produced(&bytes, LIMIT).unwrap();
        prop_assert_eq!(info.len, bytes.len());
        prop_assert_eq!(info.record_count as usize, values.len());
        prop_assert_eq!(info.offsets(), values.len() as u64);
        prop_assert_eq!(info.codec, Codec::None);
        prop_assert_eq!(info.producer_id, producer_id);
        prop_assert_eq!(info.base_sequence, sequence);
        prop_assert_eq!(info.max_timestamp_ms, timestamp_ms + values.len() as i64 - 1);
        prop_assert_eq!(info.idempotent(), producer_id >= 0);
        set_base_offset(&mut bytes, new_base);
        set_partition_leader_epoch(&mut bytes, 0);
        let rebased = check_produced(&bytes, LIMIT).unwrap();
        prop_assert_eq!(rebased.base_offset, new_base);
        // Kafka's own decoder agrees: same records at the new offsets.
        let set = RecordBatchDecoder::decode(&mut Bytes::from(bytes.clone())).unwrap();
        prop_assert_eq!(set.records.len(), values.len());
        for (i, record) in set.records.iter().enumerate() {
            prop_assert_eq!(record.offset, new_base + i as i64);
            prop_assert_eq!(record.value.as_deref(), Some(&values[i][..]));
        }
    }

    #[test]
    fn any_damage_in_the_crc_range_is_caught(
        values in values_strategy(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let mut bytes = kafka_batch(&values, (-1, -1, -1), 1);
        let at = 17 + at.index(bytes.len() - 17);
        bytes[at] ^= flip;
        prop_assert!(check(&bytes, LIMIT).is_err());

    }

    #[test]
    fn cut_batches_are_incomplete(values in values_strategy(), cut in any::<prop::sample::Index>()) {
        let bytes = kafka_batch(&values, (-1, -1, -1), 1);
        let cut = cut.index(bytes.len());
        let incomplete = matches!(check(&bytes[..cut], LIMIT), Err(BatchError::Incomplete { .. }));
        prop_assert!(incomplete);
    }
}

#[test]
fn sizes_magic_and_counts_are_refused_before_the_body() {
    let bytes = kafka_batch(&[b"v".to_vec()], (-1, -1, -1), 1);
    // The size limit is checked from the first 17 bytes alone.
    assert_eq!(
        peek(&bytes[..17], 40),
        Err(BatchError::TooLarge {
            size_bytes: bytes.len() as u64,
            limit_bytes: 40
        })
    );
    let mut small = bytes.clone();
    small[8..12].copy_from_slice(&10i32.to_be_bytes());
    assert!(matches!(
        peek(&small, LIMIT),
        Err(BatchError::LengthTooSmall { .. })
    ));
    let mut magic1 = bytes.clone();
    magic1[16] = 1;
    assert_eq!(peek(&magic1, LIMIT), Err(BatchError::BadMagic { found: 1 }));
    let mut counts = bytes.clone();
    counts[57..61].copy_from_slice(&3i32.to_be_bytes());
    seal_crc(&mut counts);
    assert!(check(&counts, LIMIT).is_ok());
    assert!(matches!(
        check_produced(&counts, LIMIT),
        Err(BatchError::BadCounts {
            record_count: 3,
            last_offset_delta: 0
        })
    ));
}

#[test]
fn compressed_batches_are_read_from_the_header() {
    for (code, codec) in [
        (1, Codec::Gzip),
        (2, Codec::Snappy),
        (3, Codec::Lz4),
        (4, Codec::Zstd),
    ] {
        let mut bytes = kafka_batch(&[b"a".to_vec(), b"b".to_vec()], (-1, -1, -1), 1);
        bytes[21..23].copy_from_slice(&(code as i16).to_be_bytes());
        seal_crc(&mut bytes);
        let info = check_produced(&bytes, LIMIT).unwrap();
        assert_eq!(info.codec, codec);
        assert_eq!(info.offsets(), 2);
    }
    let mut bad = kafka_batch(&[b"a".to_vec()], (-1, -1, -1), 1);
    bad[21..23].copy_from_slice(&5i16.to_be_bytes());
    seal_crc(&mut bad);
    assert_eq!(
        check(&bad, LIMIT),
        Err(BatchError::UnknownCodec { code: 5 })
    );
}

#[test]
fn produce_records_split_into_batches() {
    let mut records = kafka_batch(&[b"a".to_vec()], (-1, -1, -1), 1);
    records.extend(kafka_batch(
        &[b"b".to_vec(), b"c".to_vec()],
        (-1, -1, -1),
        1,
    ));
    let batches: Vec<_> = produced_batches(&records, LIMIT)
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(batches.len(), 2);
    assert_eq!(batches[1].0.record_count, 2);
    assert_eq!(batches[0].1.len() + batches[1].1.len(), records.len());
    let cut = &records[..records.len() - 1];
    let results: Vec<_> = produced_batches(cut, LIMIT).collect();
    assert_eq!(results.len(), 2);
    assert!(matches!(
        results[1],
        Err(BatchError::Incomplete { needed: 1 })
    ));
}

#[test]
fn last_sequence_wraps_as_kafka_does() {
    let bytes = kafka_batch(&[b"a".to_vec(), b"b".to_vec()], (7, 0, i32::MAX), 1);
    let info = check(&bytes, LIMIT).unwrap();
    assert_eq!(info.last_sequence(), 0);
}
