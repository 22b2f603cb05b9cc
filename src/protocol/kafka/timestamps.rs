//! The records of an uncompressed RecordBatch by timestamp, sans-IO: what ListOffsets by
//! timestamp needs to answer the first *record* at or after a time inside the batch the
//! index found (the index keeps one maximum timestamp per batch).
//!
//! A record (Kafka's layout): `length` (zigzag varint, bytes after it), `attributes` (i8),
//! `timestampDelta` (zigzag varlong, from the batch's base timestamp), `offsetDelta`
//! (zigzag varint), then key, value and headers, skipped by `length`. Compressed batches
//! are not opened here: the broker never decompresses a producer's data (a small batch can
//! inflate without bound), so they answer [`SeekError::Compressed`].

use super::batch::{self, BatchError, Codec, HEADER_LEN};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SeekError {
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error("the batch is compressed ({0:?}); its records are not read by the broker")]
    Compressed(Codec),
    #[error("record {index} of the batch is malformed ({what})")]
    Malformed { index: i32, what: &'static str },
}

/// The offset delta of the first record of `buf`'s batch whose timestamp (ms) is at or
/// after `at_ms`; `None` if every record is older.
pub fn first_at_or_after(
    buf: &[u8],
    at_ms: i64,
    max_batch_bytes: u64,
) -> Result<Option<i32>, SeekError> {
    let info = batch::peek(buf, max_batch_bytes)?;
    if info.codec != Codec::None {
        return Err(SeekError::Compressed(info.codec));
    }
    if info.log_append_time {
        // Every record carries the batch's time.
        return Ok((info.max_timestamp_ms >= at_ms).then_some(0));
    }
    let end = info.len.min(buf.len());
    let mut at = HEADER_LEN;
    for index in 0..info.record_count {
        let bad = |what| SeekError::Malformed { index, what };
        let (length, n) = varint(&buf[at.min(end)..end]).ok_or(bad("length"))?;
        let body = at + n;
        let next = usize::try_from(length)
            .ok()
            .and_then(|len| body.checked_add(len))
            .filter(|&next| next <= end)
            .ok_or(bad("length past the batch"))?;
        // attributes (1 byte), then the deltas.
        let fields = &buf[(body + 1).min(next)..next];
        let (timestamp_delta, n) = varint(fields).ok_or(bad("timestamp delta"))?;
        let (offset_delta, _) = varint(&fields[n..]).ok_or(bad("offset delta"))?;
        if info.base_timestamp_ms.saturating_add(timestamp_delta) >= at_ms {
            return i32::try_from(offset_delta)
                .map(Some)
                .map_err(|_| bad("offset delta"));
        }
        at = next;
    }
    Ok(None)
}

/// A zigzag-encoded varint (up to 64 bits) and the bytes it took; `None` if cut short or
/// longer than 10 bytes.
fn varint(buf: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, &byte) in buf.iter().take(10).enumerate() {
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let value = (raw >> 1) as i64 ^ -((raw & 1) as i64);
            return Some((value, i + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn encoded(timestamps: &[i64], compression: Compression) -> Vec<u8> {
        let records: Vec<Record> = timestamps
            .iter()
            .enumerate()
            .map(|(i, &ts)| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32,
                timestamp: ts,
                key: Some(bytes::Bytes::from(vec![b'k'; i % 300])),
                value: Some(bytes::Bytes::from(format!("value {i}"))),
                headers: Default::default(),
            })
            .collect();
        let mut out = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut out, &records, &options).unwrap();
        out.to_vec()
    }

    #[test]
    fn the_first_record_at_or_after_a_time_inside_a_batch() {
        // Not in order: a producer's timestamps need not be.
        let timestamps: Vec<i64> = (0..500).map(|i| 1_000 + i * 10 - (i % 3)).collect();
        let batch = encoded(&timestamps, Compression::None);
        for at in [0, 1_000, 1_001, 3_364, 5_990, 5_991, 9_999] {
            let expected = timestamps.iter().position(|&t| t >= at).map(|i| i as i32);
            assert_eq!(
                first_at_or_after(&batch, at, 1 << 30).unwrap(),
                expected,
                "{at}"
            );
        }
    }

    #[test]
    fn compressed_and_damaged_batches_are_not_read() {
        let batch = encoded(&[5, 6, 7], Compression::Gzip);
        assert!(matches!(
            first_at_or_after(&batch, 6, 1 << 30),
            Err(SeekError::Compressed(_))
        ));
        let batch = encoded(&[5, 6, 7], Compression::None);
        for cut in [HEADER_LEN, HEADER_LEN + 1, batch.len() - 1] {
            assert!(
                first_at_or_after(&batch[..cut], 7, 1 << 30).is_err(),
                "{cut}"
            );
        }
        assert_eq!(varint(&[0xff; 11]), None);
    }
}
