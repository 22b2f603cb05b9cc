//! The record batch: a 29-byte big-endian header, then the key, then the payload.
//!
//! This is the unit that is appended to the WAL, indexed, and sent to consumers byte for byte,
//! so the same codec serves the disk and every wire protocol. Parsing is sans-IO: [`check`]
//! answers "how long is the batch at the front of this buffer" without allocating, and returns
//! [`RecordError::Incomplete`] when more bytes are needed. Every size is validated against
//! [`Limits`] *before* a caller allocates or waits for the bytes.

use crate::limits::Limits;

/// First byte of every batch.
pub const MAGIC: u8 = 0x01;
/// Size of the fixed header in bytes.
pub const HEADER_LEN: usize = 29;

const TIMESTAMP_AT: usize = 1;
const OFFSET_AT: usize = 9;
const KEY_LEN_AT: usize = 17;
const PAYLOAD_LEN_AT: usize = 21;
const RECORD_COUNT_AT: usize = 25;

/// What a stored batch's payload is, recorded in its index entry so readers know without
/// reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BatchFormat {
    /// Records in whatever packing the producer chose (native and HermitMQ clients).
    #[default]
    Native,
    /// One Kafka RecordBatch v2, stored as a Kafka producer sent it (`docs/KAFKA.md`):
    /// empty key, and the payload is exactly one RecordBatch with a valid CRC.
    Kafka,
}

/// What is already known of a batch handed to the storage, besides what it always checks
/// (framing and sizes): each CRC pass over a batch is paid once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchTrust {
    /// The producer's CRC-32C of the batch as sent, to check; the format is found from the
    /// bytes ([`format_of`]).
    ProducerCrc(u32),
    /// Built in this process (nothing to check); the format is found from the bytes.
    Built,
    /// Built by the Kafka front-end around a RecordBatch v2 whose CRC-32C it checked (empty
    /// key, the payload exactly that batch): [`BatchFormat::Kafka`], which is what
    /// [`format_of`] finds, without a second pass over its bytes.
    KafkaChecked,
}

impl BatchTrust {
    /// A producer's CRC if it gave one, else a batch built here.
    pub fn from_crc(producer_crc: Option<u32>) -> BatchTrust {
        producer_crc.map_or(BatchTrust::Built, BatchTrust::ProducerCrc)
    }
}

/// A batch in two pieces stored one after the other: its head (the 29-byte header and the
/// key; for a batch that arrived whole, all of it) and its tail (the rest of the payload).
/// The Kafka front-end builds the header of a RecordBatch that stays where it arrived, in
/// the request, so storage copies each byte once, into the log's pending buffer.
#[derive(Debug, Clone, Copy)]
pub struct BatchParts<'a> {
    pub head: &'a [u8],
    pub tail: &'a [u8],
}

impl<'a> BatchParts<'a> {
    /// A batch that is all in one piece.
    pub fn whole(batch: &'a [u8]) -> BatchParts<'a> {
        BatchParts {
            head: batch,
            tail: &[],
        }
    }

    /// Bytes of the whole batch.
    pub fn len(&self) -> usize {
        self.head.len() + self.tail.len()
    }

    /// True for no bytes at all (never a valid batch).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The header and checks of [`check`], over both pieces: the whole batch is here, and
    /// a tail only ever follows a head that is exactly the header and the key.
    pub fn check(&self, limits: &Limits) -> Result<BatchHeader, RecordError> {
        if self.tail.is_empty() {
            return check(self.head, limits);
        }
        let header = BatchHeader::decode(self.head, limits)?;
        let head_bytes = HEADER_LEN + header.key_len as usize;
        if self.head.len() != head_bytes || header.batch_len() != self.len() {
            return Err(RecordError::BadParts {
                head_bytes: self.head.len(),
                batch_bytes: self.len(),
            });
        }
        Ok(header)
    }

    /// CRC32C of the whole batch, as [`batch_crc`] of it in one piece.
    pub fn crc(&self) -> u32 {
        crc32c::crc32c_append(crc32c::crc32c(self.head), self.tail)
    }

    /// The payload of a checked batch whose payload is all in one piece: the tail, or the
    /// end of the head.
    fn payload(&self, header: &BatchHeader) -> &'a [u8] {
        if self.tail.is_empty() {
            payload_of(self.head, header)
        } else {
            self.tail
        }
    }

    /// [`format_of`] the whole batch.
    pub fn format(&self, header: &BatchHeader) -> BatchFormat {
        if header.key_len == 0
            && crate::protocol::kafka::batch::is_whole_batch(self.payload(header))
        {
            BatchFormat::Kafka
        } else {
            BatchFormat::Native
        }
    }
}

/// The format of a checked batch: Kafka when its key is empty and its payload is exactly
/// one valid RecordBatch v2 (so a recovery scan finds the same format staging recorded).
pub fn format_of(batch: &[u8], header: &BatchHeader) -> BatchFormat {
    if header.key_len == 0
        && crate::protocol::kafka::batch::is_whole_batch(payload_of(batch, header))
    {
        BatchFormat::Kafka
    } else {
        BatchFormat::Native
    }
}

/// Why a batch could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// Not an error of the batch: the buffer holds `needed` bytes too few so far.
    #[error("incomplete batch: {needed} more bytes needed")]
    Incomplete { needed: usize },
    #[error(
        "a batch in two pieces must have exactly its header and key first ({head_bytes} of {batch_bytes} bytes)"
    )]
    BadParts {
        head_bytes: usize,
        batch_bytes: usize,
    },
    #[error("bad magic byte {found:#04x} (expected 0x01)")]
    BadMagic { found: u8 },
    #[error("key of {size_bytes} bytes exceeds the limit of {limit_bytes}")]
    KeyTooLarge { size_bytes: u64, limit_bytes: u64 },
    #[error("payload of {size_bytes} bytes exceeds the limit of {limit_bytes}")]
    PayloadTooLarge { size_bytes: u64, limit_bytes: u64 },
    #[error("crc mismatch: batch says {expected:#010x}, bytes give {actual:#010x}")]
    CrcMismatch { expected: u32, actual: u32 },
}

/// The decoded fixed header of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchHeader {
    /// Nanoseconds since the epoch; 0 asks the broker to set it.
    pub timestamp_ns: u64,
    /// Offset of the first record; assigned by the broker.
    pub offset: u64,
    pub key_len: u32,
    pub payload_len: u32,
    /// Logical records packed in the payload, as sent (0 is read as 1, see [`Self::records`]).
    pub record_count: u32,
}

impl BatchHeader {
    /// Decodes the header at the front of `buf` and validates magic and sizes.
    pub fn decode(buf: &[u8], limits: &Limits) -> Result<BatchHeader, RecordError> {
        if buf.is_empty() {
            return Err(RecordError::Incomplete { needed: HEADER_LEN });
        }
        // Check the magic on the first byte, so a stream of garbage fails fast rather than
        // waiting for 29 bytes that will never make sense.
        if buf[0] != MAGIC {
            return Err(RecordError::BadMagic { found: buf[0] });
        }
        if buf.len() < HEADER_LEN {
            return Err(RecordError::Incomplete {
                needed: HEADER_LEN - buf.len(),
            });
        }
        let header = BatchHeader {
            timestamp_ns: be_u64(buf, TIMESTAMP_AT),
            offset: be_u64(buf, OFFSET_AT),
            key_len: be_u32(buf, KEY_LEN_AT),
            payload_len: be_u32(buf, PAYLOAD_LEN_AT),
            record_count: be_u32(buf, RECORD_COUNT_AT),
        };
        if u64::from(header.key_len) > limits.max_key_bytes {
            return Err(RecordError::KeyTooLarge {
                size_bytes: header.key_len.into(),
                limit_bytes: limits.max_key_bytes,
            });
        }
        if u64::from(header.payload_len) > limits.max_payload_bytes {
            return Err(RecordError::PayloadTooLarge {
                size_bytes: header.payload_len.into(),
                limit_bytes: limits.max_payload_bytes,
            });
        }
        Ok(header)
    }

    /// Header plus key plus payload, in bytes.
    pub fn batch_len(&self) -> usize {
        HEADER_LEN + self.key_len as usize + self.payload_len as usize
    }

    /// Offsets this batch takes: the record count, where 0 counts as 1.
    pub fn records(&self) -> u64 {
        u64::from(self.record_count.max(1))
    }

    /// Writes the header into `out[..HEADER_LEN]`.
    pub fn encode(&self, out: &mut [u8]) {
        out[0] = MAGIC;
        out[TIMESTAMP_AT..OFFSET_AT].copy_from_slice(&self.timestamp_ns.to_be_bytes());
        out[OFFSET_AT..KEY_LEN_AT].copy_from_slice(&self.offset.to_be_bytes());
        out[KEY_LEN_AT..PAYLOAD_LEN_AT].copy_from_slice(&self.key_len.to_be_bytes());
        out[PAYLOAD_LEN_AT..RECORD_COUNT_AT].copy_from_slice(&self.payload_len.to_be_bytes());
        out[RECORD_COUNT_AT..HEADER_LEN].copy_from_slice(&self.record_count.to_be_bytes());
    }
}

/// Validates the batch at the front of `buf` and returns its header; the batch is
/// `buf[..header.batch_len()]`. `Incomplete` says how many more bytes are needed; it is
/// reported only after magic and sizes passed, so a caller never waits for an oversized batch.
pub fn check(buf: &[u8], limits: &Limits) -> Result<BatchHeader, RecordError> {
    let header = BatchHeader::decode(buf, limits)?;
    let len = header.batch_len();
    if buf.len() < len {
        return Err(RecordError::Incomplete {
            needed: len - buf.len(),
        });
    }
    Ok(header)
}

/// Overwrites the offset field of an encoded batch.
pub fn set_offset(batch: &mut [u8], offset: u64) {
    batch[OFFSET_AT..KEY_LEN_AT].copy_from_slice(&offset.to_be_bytes());
}

/// Overwrites the timestamp field of an encoded batch.
pub fn set_timestamp(batch: &mut [u8], timestamp_ns: u64) {
    batch[TIMESTAMP_AT..OFFSET_AT].copy_from_slice(&timestamp_ns.to_be_bytes());
}

/// CRC32C of a whole encoded batch (header with offset, key, payload).
pub fn batch_crc(batch: &[u8]) -> u32 {
    crc32c::crc32c(batch)
}

/// Encodes a batch into a new vector. For clients, tools and tests; the broker never builds
/// batches.
pub fn encode_batch(timestamp_ns: u64, key: &[u8], payload: &[u8], record_count: u32) -> Vec<u8> {
    let mut out = vec![0u8; HEADER_LEN + key.len() + payload.len()];
    let header = BatchHeader {
        timestamp_ns,
        offset: 0,
        key_len: u32::try_from(key.len()).expect("key length fits u32"),
        payload_len: u32::try_from(payload.len()).expect("payload length fits u32"),
        record_count,
    };
    header.encode(&mut out);
    out[HEADER_LEN..HEADER_LEN + key.len()].copy_from_slice(key);
    out[HEADER_LEN + key.len()..].copy_from_slice(payload);
    out
}

/// Key bytes of an encoded batch.
pub fn key_of<'a>(batch: &'a [u8], header: &BatchHeader) -> &'a [u8] {
    &batch[HEADER_LEN..HEADER_LEN + header.key_len as usize]
}

/// Payload bytes of an encoded batch.
pub fn payload_of<'a>(batch: &'a [u8], header: &BatchHeader) -> &'a [u8] {
    let start = HEADER_LEN + header.key_len as usize;
    &batch[start..start + header.payload_len as usize]
}

fn be_u64(buf: &[u8], at: usize) -> u64 {
    u64::from_be_bytes(buf[at..at + 8].try_into().expect("8 bytes"))
}

fn be_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes(buf[at..at + 4].try_into().expect("4 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Kafka RecordBatch stored behind a header made for it, given in two pieces, checks,
    /// sums and classifies as the same batch in one piece; a split anywhere else is refused.
    #[test]
    fn a_batch_in_two_pieces_is_the_batch_in_one() {
        let limits = Limits::default();
        let native = encode_batch(5_000_000, b"", b"one\ntwo", 2);
        let mut record_batch = Vec::new();
        crate::protocol::kafka::convert::native_to_record_batch(
            &native,
            &limits,
            &mut record_batch,
        )
        .unwrap();
        let mut whole = encode_batch(5_000_000, b"", &record_batch, 2);
        set_offset(&mut whole, 9);
        let (head, tail) = whole.split_at(HEADER_LEN);
        let parts = BatchParts { head, tail };
        let header = parts.check(&limits).unwrap();
        assert_eq!(header, check(&whole, &limits).unwrap());
        assert_eq!(parts.len(), whole.len());
        assert_eq!(parts.crc(), batch_crc(&whole));
        assert_eq!(parts.format(&header), BatchFormat::Kafka);
        assert_eq!(parts.format(&header), format_of(&whole, &header));
        let one = BatchParts::whole(&whole);
        assert_eq!(one.check(&limits).unwrap(), header);
        assert_eq!(one.crc(), batch_crc(&whole));
        // A head that is not exactly header and key, or a tail of the wrong length.
        let (short, rest) = whole.split_at(HEADER_LEN - 1);
        assert!(
            BatchParts {
                head: short,
                tail: rest
            }
            .check(&limits)
            .is_err()
        );
        let (long, rest) = whole.split_at(HEADER_LEN + 1);
        assert!(matches!(
            BatchParts {
                head: long,
                tail: rest
            }
            .check(&limits),
            Err(RecordError::BadParts { .. })
        ));
        let cut = &tail[..tail.len() - 1];
        assert!(matches!(
            BatchParts { head, tail: cut }.check(&limits),
            Err(RecordError::BadParts { .. })
        ));
    }

    #[test]
    fn round_trip() {
        let limits = Limits::default();
        let mut batch = encode_batch(42, b"k", b"payload", 3);
        set_offset(&mut batch, 77);
        let header = check(&batch, &limits).unwrap();
        assert_eq!(header.timestamp_ns, 42);
        assert_eq!(header.offset, 77);
        assert_eq!(header.records(), 3);
        assert_eq!(header.batch_len(), batch.len());
        assert_eq!(key_of(&batch, &header), b"k");
        assert_eq!(payload_of(&batch, &header), b"payload");
    }

    #[test]
    fn incomplete_and_errors() {
        let limits = Limits::default();
        let batch = encode_batch(0, b"", b"abc", 0);
        assert_eq!(
            check(&batch[..10], &limits),
            Err(RecordError::Incomplete { needed: 19 })
        );
        assert_eq!(
            check(&batch[..30], &limits),
            Err(RecordError::Incomplete { needed: 2 })
        );
        assert_eq!(
            check(&[0u8; 29], &limits),
            Err(RecordError::BadMagic { found: 0 })
        );
        let mut huge = batch.clone();
        huge[21..25].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            check(&huge[..HEADER_LEN], &limits),
            Err(RecordError::PayloadTooLarge { .. })
        ));
        let mut big_key = batch.clone();
        big_key[17..21].copy_from_slice(&(1u32 << 20).to_be_bytes());
        assert!(matches!(
            check(&big_key, &limits),
            Err(RecordError::KeyTooLarge { .. })
        ));
    }
}
