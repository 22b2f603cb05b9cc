//! The bench's Kafka RecordBatches (magic 2), sans-IO: built in place by the producers and
//! read back by the consumers.
//!
//! Every batch of a producer has the same shape (records of `--size` bytes, no key, no
//! headers), so the records are laid out once per shape and each batch only patches its
//! header (producer id, epoch, base sequence, timestamps), the first record's time stamp
//! and the CRC-32C: a producer that spent its time encoding records would measure itself,
//! not the broker. The first record's value starts with the intended send time in
//! nanoseconds (big-endian), as the native bench's batch header carries it, so consumers
//! measure end-to-end latency finer than the batch's millisecond timestamps.

use crate::bench::kafka::codec::KafkaBenchError;
use crate::protocol::kafka::batch::{self, BatchError, Codec, HEADER_LEN};

const BATCH_LENGTH_AT: usize = 8;
const PARTITION_LEADER_EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const FIRST_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
const RECORDS_COUNT_AT: usize = 57;
/// The byte every value is filled with (as the native bench's records).
const FILL: u8 = 0x5a;
/// Bytes of the send-time stamp at the front of the first record's value.
const STAMP_LEN: usize = 8;

/// The idempotent producer's identity, from InitProducerId.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIds {
    pub id: i64,
    pub epoch: i16,
}

/// A reusable RecordBatch of `records` records of `size` bytes each.
#[derive(Debug, Default)]
pub struct BatchBuilder {
    buf: Vec<u8>,
    shape: Option<(usize, usize)>,
    /// Where the first record's value starts, when it has room for a stamp.
    stamp_at: Option<usize>,
}

impl BatchBuilder {
    /// The batch for `records` records of `size` bytes, base offset 0, sequence numbers from
    /// `base_sequence`, stamped with `timestamp_ns` (since the epoch).
    pub fn build(
        &mut self,
        records: usize,
        size: usize,
        ids: ProducerIds,
        base_sequence: i32,
        timestamp_ns: u64,
    ) -> &[u8] {
        if self.shape != Some((records, size)) {
            self.lay_out(records, size);
        }
        let buf = &mut self.buf;
        let timestamp_ms = (timestamp_ns / 1_000_000) as i64;
        buf[FIRST_TIMESTAMP_AT..][..8].copy_from_slice(&timestamp_ms.to_be_bytes());
        buf[MAX_TIMESTAMP_AT..][..8].copy_from_slice(&timestamp_ms.to_be_bytes());
        buf[PRODUCER_ID_AT..][..8].copy_from_slice(&ids.id.to_be_bytes());
        buf[PRODUCER_EPOCH_AT..][..2].copy_from_slice(&ids.epoch.to_be_bytes());
        buf[BASE_SEQUENCE_AT..][..4].copy_from_slice(&base_sequence.to_be_bytes());
        if let Some(at) = self.stamp_at {
            buf[at..at + STAMP_LEN].copy_from_slice(&timestamp_ns.to_be_bytes());
        }
        let crc = crc32c::crc32c(&buf[ATTRIBUTES_AT..]);
        buf[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        &self.buf
    }

    fn lay_out(&mut self, records: usize, size: usize) {
        let buf = &mut self.buf;
        buf.clear();
        buf.resize(HEADER_LEN, 0);
        buf[PARTITION_LEADER_EPOCH_AT..][..4].copy_from_slice(&(-1i32).to_be_bytes());
        buf[MAGIC_AT] = 2;
        let last_delta = i32::try_from(records.saturating_sub(1)).unwrap_or(i32::MAX);
        buf[LAST_OFFSET_DELTA_AT..][..4].copy_from_slice(&last_delta.to_be_bytes());
        let count = i32::try_from(records).unwrap_or(i32::MAX);
        buf[RECORDS_COUNT_AT..][..4].copy_from_slice(&count.to_be_bytes());
        self.stamp_at = None;
        let mut body = Vec::with_capacity(size + 16);
        for delta in 0..records {
            body.clear();
            body.push(0); // attributes
            put_varint(&mut body, 0); // timestamp delta
            put_varint(&mut body, delta as i64); // offset delta
            put_varint(&mut body, -1); // no key
            put_varint(&mut body, size as i64);
            let value_at = body.len();
            body.resize(value_at + size, FILL);
            put_varint(&mut body, 0); // no headers
            put_varint(buf, body.len() as i64);
            if delta == 0 && size >= STAMP_LEN {
                self.stamp_at = Some(buf.len() + value_at);
            }
            buf.extend_from_slice(&body);
        }
        let batch_length = i32::try_from(buf.len() - BATCH_LENGTH_AT - 4).unwrap_or(i32::MAX);
        buf[BATCH_LENGTH_AT..][..4].copy_from_slice(&batch_length.to_be_bytes());
        self.shape = Some((records, size));
    }
}

/// Kafka's zigzag varint.
fn put_varint(out: &mut Vec<u8>, value: i64) {
    let mut z = ((value << 1) ^ (value >> 63)) as u64;
    while z >= 0x80 {
        out.push((z as u8) | 0x80);
        z >>= 7;
    }
    out.push(z as u8);
}

/// Reads a zigzag varint at the front of `buf`; `None` when it runs past the end or over
/// ten bytes.
fn get_varint(buf: &mut &[u8]) -> Option<i64> {
    let mut z = 0u64;
    for i in 0..10 {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        z |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some(((z >> 1) as i64) ^ -((z & 1) as i64));
        }
    }
    None
}

/// What a consumer takes from one fetched RecordBatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedBatch {
    /// Offset after the batch: where the next fetch starts.
    pub next_offset: u64,
    /// Records at or after the offset fetched from.
    pub records: u64,
    /// Bytes of their values (for a compressed batch, of the batch: its values are not
    /// opened).
    pub value_bytes: u64,
    /// When it was meant to be sent, in ns since the epoch: the first record's stamp when
    /// it carries one that agrees with the batch timestamp, else that timestamp (ms).
    pub sent_ns: u64,
}

/// Reads the record batches of a fetched partition's `records`, counting the records at or
/// after `from`. A batch cut off at the end (a broker may end an answer mid-batch) is left
/// for the next fetch. Every length is checked against the bytes there before it is used.
pub fn read_batches(mut records: &[u8], from: u64) -> Result<Vec<FetchedBatch>, KafkaBenchError> {
    let mut batches = Vec::new();
    while !records.is_empty() {
        // The broker's own check: sizes before the body, magic, counts, CRC.
        let info = match batch::check(records, u64::MAX) {
            Ok(info) => info,
            Err(BatchError::Incomplete { .. }) => break,
            Err(e) => return Err(KafkaBenchError::Records(e.to_string())),
        };
        let (whole, rest) = records.split_at(info.len);
        records = rest;
        let base = u64::try_from(info.base_offset).map_err(|_| {
            KafkaBenchError::Records(format!("negative base offset {}", info.base_offset))
        })?;
        let count = u64::try_from(info.record_count).unwrap_or(0);
        let skipped = from.saturating_sub(base).min(count);
        let timestamp_ms = u64::try_from(info.base_timestamp_ms).unwrap_or(0);
        let (value_bytes, stamp) = if info.codec == Codec::None {
            values(&whole[HEADER_LEN..], count, skipped).ok_or_else(|| {
                KafkaBenchError::Records(format!("batch at offset {base}: a record runs past it"))
            })?
        } else {
            ((info.len - HEADER_LEN) as u64, None)
        };
        // A stamp within the batch's millisecond is the bench's own.
        let sent_ns = stamp
            .filter(|ns| ns / 1_000_000 == timestamp_ms)
            .unwrap_or(timestamp_ms.saturating_mul(1_000_000));
        batches.push(FetchedBatch {
            next_offset: base + info.offsets(),
            records: count - skipped,
            value_bytes,
            sent_ns,
        });
    }
    Ok(batches)
}

/// The value bytes of the `count - skip` last records of an uncompressed batch's records,
/// and the first record's stamp; `None` when a record runs past the batch.
fn values(mut records: &[u8], count: u64, skip: u64) -> Option<(u64, Option<u64>)> {
    let (mut bytes, mut stamp) = (0u64, None);
    for i in 0..count {
        let length = usize::try_from(get_varint(&mut records)?).ok()?;
        let mut record = records.get(..length)?;
        records = &records[length..];
        record = record.get(1..)?; // attributes
        get_varint(&mut record)?; // timestamp delta
        get_varint(&mut record)?; // offset delta
        if let Ok(key_len) = usize::try_from(get_varint(&mut record)?) {
            record = record.get(key_len..)?;
        }
        let Ok(value_len) = usize::try_from(get_varint(&mut record)?) else {
            continue; // a null value
        };
        let value = record.get(..value_len)?;
        if i == 0 && value.len() >= STAMP_LEN {
            stamp = Some(u64::from_be_bytes(value[..STAMP_LEN].try_into().ok()?));
        }
        if i >= skip {
            bytes += value_len as u64;
        }
    }
    Some((bytes, stamp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::records::RecordBatchDecoder;

    const IDS: ProducerIds = ProducerIds { id: 42, epoch: 3 };

    #[test]
    fn a_built_batch_is_what_kafka_protocol_and_the_broker_read() {
        let mut builder = BatchBuilder::default();
        let ns = 1_700_000_000_123_456_789;
        let batch = builder.build(200, 100, IDS, 7, ns).to_vec();
        // The broker's check: magic, CRC, counts.
        crate::protocol::kafka::batch::check_produced(&batch, u64::MAX).unwrap();
        let set = RecordBatchDecoder::decode(&mut Bytes::from(batch.clone())).unwrap();
        assert_eq!(set.records.len(), 200);
        for (i, record) in set.records.iter().enumerate() {
            assert_eq!(record.offset, i as i64);
            assert_eq!(record.sequence, 7 + i as i32);
            assert_eq!(record.producer_id, 42);
            assert_eq!(record.producer_epoch, 3);
            assert_eq!(record.timestamp, 1_700_000_000_123);
            assert!(record.key.is_none());
            assert_eq!(record.value.as_ref().unwrap().len(), 100);
        }
        let first = set.records[0].value.as_ref().unwrap();
        assert_eq!(first[..8], ns.to_be_bytes());
        assert!(first[8..].iter().all(|&b| b == FILL));

        let read = read_batches(&batch, 0).unwrap();
        assert_eq!(
            read,
            vec![FetchedBatch {
                next_offset: 200,
                records: 200,
                value_bytes: 200 * 100,
                sent_ns: ns,
            }]
        );
        // The next batch of the same shape patches its header only, CRC included.
        let next = builder.build(200, 100, IDS, 207, ns + 1_000_000).to_vec();
        assert_eq!(next.len(), batch.len());
        let set = RecordBatchDecoder::decode(&mut Bytes::from(next)).unwrap();
        assert_eq!(set.records[0].sequence, 207);
    }

    #[test]
    fn reading_counts_from_the_offset_and_leaves_a_cut_batch() {
        let mut builder = BatchBuilder::default();
        let mut two = builder.build(10, 4, IDS, 0, 5_000_000).to_vec();
        two.extend_from_slice(builder.build(10, 4, IDS, 10, 6_000_000));
        // The second batch's base offset, as the broker rewrites it.
        let second_at = two.len() / 2;
        two[second_at..second_at + 8].copy_from_slice(&10i64.to_be_bytes());
        let read = read_batches(&two, 3).unwrap();
        assert_eq!(read.len(), 2);
        assert_eq!((read[0].records, read[0].value_bytes), (7, 28));
        assert_eq!((read[1].records, read[1].next_offset), (10, 20));
        // Values too short for a stamp: the batch timestamp stands.
        assert_eq!(read[1].sent_ns, 6_000_000);
        let cut = read_batches(&two[..two.len() - 1], 0).unwrap();
        assert_eq!(cut.len(), 1, "a cut batch waits for the next fetch");
    }

    #[test]
    fn a_damaged_batch_is_an_error_not_a_panic() {
        let mut builder = BatchBuilder::default();
        let batch = builder.build(3, 50, IDS, 0, 1).to_vec();
        let mut flipped = batch.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(read_batches(&flipped, 0).is_err());
        let mut negative = batch.clone();
        negative[BATCH_LENGTH_AT..BATCH_LENGTH_AT + 4].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(read_batches(&negative, 0).is_err());
        let mut magic = batch;
        magic[MAGIC_AT] = 1;
        assert!(read_batches(&magic, 0).is_err());
    }
}
