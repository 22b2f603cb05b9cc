//! Format mapping between native pagurus batches and Kafka RecordBatch v2 (`docs/KAFKA.md`).
//!
//! - **Kafka produce → storage**: the RecordBatch is stored as it arrived (base offset
//!   rewritten) as the payload of an ordinary pagurus batch whose header says base offset,
//!   offsets taken (last offset delta + 1) and max timestamp, with an empty key
//!   ([`stored_header`]). Native clients fetch that batch as is; the index entry's format
//!   flag tells them the payload is a RecordBatch.
//! - **Native batch → Kafka fetch** ([`native_to_record_batch`]): one uncompressed
//!   RecordBatch at the batch's offset. When the payload is exactly `record count` records in
//!   the client convention (`protocol::payload`), each becomes a Kafka record with the batch
//!   key; otherwise (a HermitMQ client's own packing) the whole payload is one record. Either
//!   way the RecordBatch's last offset delta covers every offset the batch takes, so a Kafka
//!   consumer's next fetch starts after it.

use crate::limits::Limits;
use crate::protocol::kafka::batch::{self, BatchInfo, HEADER_LEN as KAFKA_HEADER_LEN, MAGIC};
use crate::protocol::payload;
use crate::protocol::record::{self, BatchHeader, RecordError};

/// The pagurus header a stored Kafka batch gets: `payload_len` = the RecordBatch's bytes.
pub fn stored_header(info: &BatchInfo, offset: u64) -> BatchHeader {
    BatchHeader {
        timestamp_ns: u64::try_from(info.max_timestamp_ms)
            .unwrap_or(0)
            .saturating_mul(1_000_000),
        offset,
        key_len: 0,
        payload_len: u32::try_from(info.len).expect("batch sizes are checked under 4 GiB"),
        record_count: u32::try_from(info.offsets()).unwrap_or(u32::MAX),
    }
}

/// Converts a stored native batch (header, key, payload) into one uncompressed RecordBatch v2
/// appended to `out`. `limits` bound the batch as on produce.
pub fn native_to_record_batch(
    native: &[u8],
    limits: &Limits,
    out: &mut Vec<u8>,
) -> Result<(), RecordError> {
    let header = record::check(native, limits)?;
    let key = record::key_of(native, &header);
    let payload_bytes = record::payload_of(native, &header);
    let offsets = header.records();
    let values = split_records(payload_bytes, offsets);
    let timestamp_ms = i64::try_from(header.timestamp_ns / 1_000_000).expect("fits i64");
    let start = out.len();
    out.extend_from_slice(
        &i64::try_from(header.offset)
            .unwrap_or(i64::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(&[0; 4]); // batch length, set below
    out.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
    out.push(MAGIC);
    out.extend_from_slice(&[0; 4]); // CRC, set below
    out.extend_from_slice(&0i16.to_be_bytes()); // attributes: no codec, create time
    let last_offset_delta = i32::try_from(offsets - 1).unwrap_or(i32::MAX);
    out.extend_from_slice(&last_offset_delta.to_be_bytes());
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(&timestamp_ms.to_be_bytes());
    out.extend_from_slice(&(-1i64).to_be_bytes()); // producer id
    out.extend_from_slice(&(-1i16).to_be_bytes()); // producer epoch
    out.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
    let count = i32::try_from(values.len()).expect("bounded by the record count");
    out.extend_from_slice(&count.to_be_bytes());
    debug_assert_eq!(out.len() - start, KAFKA_HEADER_LEN);
    for (delta, value) in values.into_iter().enumerate() {
        push_record(out, delta, key, value);
    }
    let batch_length =
        i32::try_from(out.len() - start - batch::LOG_OVERHEAD).expect("a batch is under 2 GiB");
    out[start + 8..start + 12].copy_from_slice(&batch_length.to_be_bytes());
    batch::seal_crc(&mut out[start..]);
    Ok(())
}

/// The payload's records in the client convention if it holds exactly `count` of them,
/// else the whole payload as one.
fn split_records(payload_bytes: &[u8], count: u64) -> Vec<&[u8]> {
    let split: Result<Vec<&[u8]>, _> = payload::records(payload_bytes).collect();
    match split {
        Ok(records) if records.len() as u64 == count && !records.is_empty() => records,
        _ => vec![payload_bytes],
    }
}

/// One Kafka record: length, attributes, timestamp delta, offset delta, key, value, no
/// headers; every number a zigzag varint.
fn push_record(out: &mut Vec<u8>, offset_delta: usize, key: &[u8], value: &[u8]) {
    let mut body = Vec::with_capacity(16 + key.len() + value.len());
    body.push(0); // attributes
    push_varint(&mut body, 0); // timestamp delta
    push_varint(&mut body, offset_delta as i64);
    if key.is_empty() {
        push_varint(&mut body, -1);
    } else {
        push_varint(&mut body, key.len() as i64);
        body.extend_from_slice(key);
    }
    push_varint(&mut body, value.len() as i64);
    body.extend_from_slice(value);
    push_varint(&mut body, 0); // headers
    push_varint(out, body.len() as i64);
    out.extend_from_slice(&body);
}

fn push_varint(out: &mut Vec<u8>, value: i64) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
