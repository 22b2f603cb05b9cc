//! RecordBatch v2 (magic 2), Kafka's on-wire and on-disk batch, read and patched sans-IO.
//!
//! Layout (big-endian), as Kafka defines it:
//!
//! | bytes | field | notes |
//! |---|---|---|
//! | 0..8 | base offset | rewritten by the broker on produce |
//! | 8..12 | batch length | bytes after this field |
//! | 12..16 | partition leader epoch | |
//! | 16 | magic | 2 |
//! | 17..21 | CRC-32C | over bytes 21.. to the end |
//! | 21..23 | attributes | bits 0-2 compression, 3 timestamp type, 4 transactional, 5 control |
//! | 23..27 | last offset delta | |
//! | 27..35 | base timestamp | ms |
//! | 35..43 | max timestamp | ms |
//! | 43..51 | producer id | -1: none |
//! | 51..53 | producer epoch | |
//! | 53..57 | base sequence | |
//! | 57..61 | record count | |
//! | 61.. | records | compressed as a whole when the codec is not `None` |
//!
//! The base offset and leader epoch lie before the CRC's range, so the broker can set them
//! without recomputing it. Compressed batches are never opened: every count the broker needs
//! is in this header.

/// Bytes of the fixed header, up to the first record.
pub const HEADER_LEN: usize = 61;
/// The only magic this module accepts.
pub const MAGIC: u8 = 2;
/// Bytes before the batch length field's range starts (base offset + batch length).
pub const LOG_OVERHEAD: usize = 12;

const BATCH_LENGTH_AT: usize = 8;
const LEADER_EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
const RECORD_COUNT_AT: usize = 57;

const ATTR_TRANSACTIONAL: i16 = 1 << 4;
const ATTR_CONTROL: i16 = 1 << 5;
const ATTR_LOG_APPEND_TIME: i16 = 1 << 3;

/// The batch's compression codec (attributes bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    fn from_attributes(attributes: i16) -> Option<Codec> {
        match attributes & 0x7 {
            0 => Some(Codec::None),
            1 => Some(Codec::Gzip),
            2 => Some(Codec::Snappy),
            3 => Some(Codec::Lz4),
            4 => Some(Codec::Zstd),
            _ => None,
        }
    }
}

/// Why bytes are not one acceptable RecordBatch v2. Kafka answers all but `Incomplete` and
/// `TooLarge` with CORRUPT_MESSAGE; `TooLarge` is MESSAGE_TOO_LARGE.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    /// Not an error of the batch: `needed` more bytes are required.
    #[error("incomplete record batch: {needed} more bytes needed")]
    Incomplete { needed: usize },
    #[error("record batch length {batch_length} is below the header's {min}")]
    LengthTooSmall { batch_length: i32, min: usize },
    #[error("record batch of {size_bytes} bytes exceeds the limit of {limit_bytes}")]
    TooLarge { size_bytes: u64, limit_bytes: u64 },
    #[error("record batch magic {found} (only 2 is accepted)")]
    BadMagic { found: i8 },
    #[error("record batch crc {expected:#010x}, bytes give {actual:#010x}")]
    CrcMismatch { expected: u32, actual: u32 },
    #[error("record batch compression codec {code} is unknown")]
    UnknownCodec { code: i16 },
    #[error(
        "record batch counts disagree: {record_count} records, last offset delta {last_offset_delta}"
    )]
    BadCounts {
        record_count: i32,
        last_offset_delta: i32,
    },
}

/// What the broker reads from a RecordBatch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchInfo {
    pub base_offset: i64,
    /// Bytes of the whole batch, base offset included.
    pub len: usize,
    pub partition_leader_epoch: i32,
    pub codec: Codec,
    pub transactional: bool,
    pub control: bool,
    pub log_append_time: bool,
    pub last_offset_delta: i32,
    pub base_timestamp_ms: i64,
    pub max_timestamp_ms: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchInfo {
    /// Offsets the batch takes: last offset delta + 1.
    pub fn offsets(&self) -> u64 {
        u64::try_from(self.last_offset_delta).expect("checked non-negative") + 1
    }

    /// The last sequence number, wrapping at i32::MAX as Kafka's does.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return self.base_sequence;
        }
        let last = i64::from(self.base_sequence) + i64::from(self.last_offset_delta);
        i32::try_from(last % (i64::from(i32::MAX) + 1)).expect("below i32::MAX")
    }

    /// True when the producer asked for idempotence (a producer id and a sequence).
    pub fn idempotent(&self) -> bool {
        self.producer_id >= 0 && self.base_sequence >= 0
    }
}

/// Reads the header of the batch at the front of `buf` and checks sizes (against
/// `max_batch_bytes`, before any wait for the body), magic and counts; not the CRC.
pub fn peek(buf: &[u8], max_batch_bytes: u64) -> Result<BatchInfo, BatchError> {
    if buf.len() < MAGIC_AT + 1 {
        return Err(BatchError::Incomplete {
            needed: MAGIC_AT + 1 - buf.len(),
        });
    }
    let batch_length = i32_at(buf, BATCH_LENGTH_AT);
    let min = HEADER_LEN - LOG_OVERHEAD;
    let body_len = usize::try_from(batch_length)
        .ok()
        .filter(|&len| len >= min)
        .ok_or(BatchError::LengthTooSmall { batch_length, min })?;
    let len = LOG_OVERHEAD + body_len;
    if len as u64 > max_batch_bytes {
        return Err(BatchError::TooLarge {
            size_bytes: len as u64,
            limit_bytes: max_batch_bytes,
        });
    }
    let magic = buf[MAGIC_AT] as i8;
    if magic != MAGIC as i8 {
        return Err(BatchError::BadMagic { found: magic });
    }
    if buf.len() < HEADER_LEN {
        return Err(BatchError::Incomplete {
            needed: HEADER_LEN - buf.len(),
        });
    }
    let attributes = i16_at(buf, ATTRIBUTES_AT);
    let codec = Codec::from_attributes(attributes).ok_or(BatchError::UnknownCodec {
        code: attributes & 7,
    })?;
    let info = BatchInfo {
        base_offset: i64_at(buf, 0),
        len,
        partition_leader_epoch: i32_at(buf, LEADER_EPOCH_AT),
        codec,
        transactional: attributes & ATTR_TRANSACTIONAL != 0,
        control: attributes & ATTR_CONTROL != 0,
        log_append_time: attributes & ATTR_LOG_APPEND_TIME != 0,
        last_offset_delta: i32_at(buf, LAST_OFFSET_DELTA_AT),
        base_timestamp_ms: i64_at(buf, BASE_TIMESTAMP_AT),
        max_timestamp_ms: i64_at(buf, MAX_TIMESTAMP_AT),
        producer_id: i64_at(buf, PRODUCER_ID_AT),
        producer_epoch: i16_at(buf, PRODUCER_EPOCH_AT),
        base_sequence: i32_at(buf, BASE_SEQUENCE_AT),
        record_count: i32_at(buf, RECORD_COUNT_AT),
    };
    if info.last_offset_delta < 0 || info.record_count < 0 {
        return Err(BatchError::BadCounts {
            record_count: info.record_count,
            last_offset_delta: info.last_offset_delta,
        });
    }
    Ok(info)
}

/// Validates the whole batch at the front of `buf`, CRC included; the batch is
/// `buf[..info.len]`.
pub fn check(buf: &[u8], max_batch_bytes: u64) -> Result<BatchInfo, BatchError> {
    let info = peek(buf, max_batch_bytes)?;
    if buf.len() < info.len {
        return Err(BatchError::Incomplete {
            needed: info.len - buf.len(),
        });
    }
    let expected = u32::from_be_bytes(buf[CRC_AT..ATTRIBUTES_AT].try_into().expect("4 bytes"));
    let actual = crc32c::crc32c(&buf[ATTRIBUTES_AT..info.len]);
    if expected != actual {
        return Err(BatchError::CrcMismatch { expected, actual });
    }
    Ok(info)
}

/// Validates a produced batch: [`check`], and the counts a producer always sends (one
/// offset per record), so the offsets the broker assigns are exactly the records'.
pub fn check_produced(buf: &[u8], max_batch_bytes: u64) -> Result<BatchInfo, BatchError> {
    let info = check(buf, max_batch_bytes)?;
    if i64::from(info.record_count) != i64::from(info.last_offset_delta) + 1 {
        return Err(BatchError::BadCounts {
            record_count: info.record_count,
            last_offset_delta: info.last_offset_delta,
        });
    }
    Ok(info)
}

/// Splits the `records` field of a produce request into its batches, each checked with
/// [`check_produced`]. A trailing partial batch is an error here (producers send whole ones).
pub fn produced_batches(
    records: &[u8],
    max_batch_bytes: u64,
) -> impl Iterator<Item = Result<(BatchInfo, &[u8]), BatchError>> {
    let mut rest = records;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || rest.is_empty() {
            return None;
        }
        let item = check_produced(rest, max_batch_bytes).map(|info| {
            let (batch, tail) = rest.split_at(info.len);
            rest = tail;
            (info, batch)
        });
        failed = item.is_err();
        Some(item)
    })
}

/// Sets the base offset of an encoded batch; the CRC stays valid.
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[..BATCH_LENGTH_AT].copy_from_slice(&base_offset.to_be_bytes());
}

/// True when `buf` is exactly one RecordBatch v2 with a valid CRC: what a stored pagurus
/// batch's payload must be to be served as Kafka format. A native payload passes only if it
/// is such a batch, length, magic and CRC-32C included.
pub fn is_whole_batch(buf: &[u8]) -> bool {
    buf.len() >= HEADER_LEN
        && i64::from(i32_at(buf, BATCH_LENGTH_AT)) == buf.len() as i64 - LOG_OVERHEAD as i64
        && buf[MAGIC_AT] == MAGIC
        && u32::from_be_bytes(buf[CRC_AT..ATTRIBUTES_AT].try_into().expect("4 bytes"))
            == crc32c::crc32c(&buf[ATTRIBUTES_AT..])
}

/// Sets the base offset and partition leader epoch (0, the epoch Metadata advertises) of
/// the RecordBatch stored as the payload of a pagurus batch (`stored`: 29-byte header, no
/// key, the RecordBatch). Both lie outside Kafka's CRC.
pub fn set_stored_base_offset(stored: &mut [u8], base_offset: u64) {
    let batch = &mut stored[crate::protocol::record::HEADER_LEN..];
    set_base_offset(batch, i64::try_from(base_offset).unwrap_or(i64::MAX));
    set_partition_leader_epoch(batch, 0);
}

/// Sets the partition leader epoch of an encoded batch; the CRC stays valid.
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[LEADER_EPOCH_AT..MAGIC_AT].copy_from_slice(&epoch.to_be_bytes());
}

/// Writes the CRC of an encoded batch (for batches pagurus builds itself).
pub fn seal_crc(batch: &mut [u8]) {
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
}

fn i16_at(buf: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([buf[at], buf[at + 1]])
}

fn i32_at(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

fn i64_at(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
#[path = "batch_tests.rs"]
pub(crate) mod tests;
