use super::*;
use crate::protocol::record::{encode_batch, set_offset};
use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;
use proptest::prelude::*;

fn native(key: &[u8], records: &[Vec<u8>], offset: u64, timestamp_ns: u64) -> Vec<u8> {
    let mut payload_bytes = Vec::new();
    for r in records {
        payload::push_record(&mut payload_bytes, r);
    }
    let mut batch = encode_batch(timestamp_ns, key, &payload_bytes, records.len() as u32);
    set_offset(&mut batch, offset);
    batch
}

proptest! {
    #[test]
    fn native_batches_become_one_kafka_batch(
        key in proptest::collection::vec(any::<u8>(), 0..16),
        records in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..30),
        offset in 0u64..1 << 40,
        timestamp_ns in 0u64..4_000_000_000_000_000_000,
    ) {
        let batch = native(&key, &records, offset, timestamp_ns);
        let mut out = Vec::new();
        native_to_record_batch(&batch, &Limits::default(), &mut out).unwrap();
        let info = batch::check_produced(&out, 1 << 20).unwrap();
        prop_assert_eq!(info.len, out.len());
        prop_assert_eq!(info.base_offset as u64, offset);
        prop_assert_eq!(info.offsets(), records.len() as u64);
        prop_assert_eq!(info.max_timestamp_ms as u64, timestamp_ns / 1_000_000);
        let set = RecordBatchDecoder::decode(&mut Bytes::from(out)).unwrap();
        prop_assert_eq!(set.records.len(), records.len());
        for (i, record) in set.records.iter().enumerate() {
            prop_assert_eq!(record.offset as u64, offset + i as u64);
            prop_assert_eq!(record.value.as_deref(), Some(&records[i][..]));
            let expected_key = if key.is_empty() { None } else { Some(&key[..]) };
            prop_assert_eq!(record.key.as_deref(), expected_key);
        }
    }

    #[test]
    fn opaque_payloads_are_one_record_covering_every_offset(
        payload_bytes in proptest::collection::vec(any::<u8>(), 0..100),
        count in 2u32..50,
    ) {
        // Not `count` length-prefixed records (a HermitMQ client's own packing).
        let split: Vec<_> = payload::records(&payload_bytes).collect();
        prop_assume!(split.len() != count as usize || split.iter().any(|r| r.is_err()));
        let mut batch = encode_batch(5_000_000, b"", &payload_bytes, count);
        set_offset(&mut batch, 100);
        let mut out = Vec::new();
        native_to_record_batch(&batch, &Limits::default(), &mut out).unwrap();
        let info = batch::check(&out, 1 << 20).unwrap();
        prop_assert_eq!(info.record_count, 1);
        prop_assert_eq!(info.offsets(), u64::from(count));
        let set = RecordBatchDecoder::decode(&mut Bytes::from(out)).unwrap();
        prop_assert_eq!(set.records[0].value.as_deref(), Some(&payload_bytes[..]));
        prop_assert_eq!(set.records[0].offset, 100);
    }
}

#[test]
fn stored_header_of_a_kafka_batch() {
    let bytes = super::super::batch::tests::kafka_batch(
        &[b"x".to_vec(), b"y".to_vec()],
        (-1, -1, -1),
        1234,
    );
    let info = batch::check(&bytes, 1 << 20).unwrap();
    let header = stored_header(&info, 40);
    assert_eq!(header.offset, 40);
    assert_eq!(header.records(), 2);
    assert_eq!(header.key_len, 0);
    assert_eq!(header.payload_len as usize, bytes.len());
    assert_eq!(header.timestamp_ns, 1235 * 1_000_000);
}
