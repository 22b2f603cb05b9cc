//! Sans-IO consuming: a fetch answer checked batch by batch against the CRCs the broker sent
//! ([`FetchedBatches`]), the logical records inside each batch ([`Batch::records`]), and
//! where a consumer starts ([`StartAt`]).

use std::str::FromStr;

use crate::client::ClientError;
use crate::client::session::protocol;
use crate::limits::Limits;
use crate::protocol::native::{self, OffsetSpec};
use crate::protocol::payload;
use crate::protocol::record::{self, BatchHeader};

/// The client checks sizes only against the frame it already holds: the broker enforced
/// its limits when the batch was produced.
const NO_LIMITS: Limits = Limits {
    max_key_bytes: u64::MAX,
    max_payload_bytes: u64::MAX,
};

/// Where a consumer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    Earliest,
    Latest,
    Offset(u64),
    /// The first batch stored at or after this time, in milliseconds since the Unix epoch.
    TimestampMs(u64),
}

impl StartAt {
    /// The list-offsets request that finds this start, or the offset itself.
    pub fn spec(self) -> Result<Result<OffsetSpec, u64>, ClientError> {
        Ok(match self {
            StartAt::Earliest => Ok(OffsetSpec::Earliest),
            StartAt::Latest => Ok(OffsetSpec::Latest),
            StartAt::Offset(offset) => Err(offset),
            StartAt::TimestampMs(ms) => Ok(OffsetSpec::Timestamp(
                ms.checked_mul(1_000_000).ok_or_else(|| {
                    ClientError::Invalid(format!("timestamp @{ms} is too far in the future"))
                })?,
            )),
        })
    }
}

impl FromStr for StartAt {
    type Err = String;

    /// `earliest`, `latest`, an offset, or `@TIMESTAMP_MS`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("expected earliest, latest, an offset or @TIMESTAMP_MS, not {s:?}");
        match s {
            "earliest" => Ok(StartAt::Earliest),
            "latest" => Ok(StartAt::Latest),
            _ => match s.strip_prefix('@') {
                Some(ms) => ms.parse().map(StartAt::TimestampMs).map_err(|_| bad()),
                None => s.parse().map(StartAt::Offset).map_err(|_| bad()),
            },
        }
    }
}

/// The batches of a fetch answer, every one already checked against its CRC32C.
#[derive(Debug, Clone, Copy)]
pub struct FetchedBatches<'a> {
    pub high_watermark: u64,
    pub log_start_offset: u64,
    count: usize,
    data: &'a [u8],
}

impl<'a> FetchedBatches<'a> {
    /// Decodes a fetch answer's body and checks every batch: whole, and matching its CRC.
    pub fn decode(body: &'a [u8]) -> Result<FetchedBatches<'a>, ClientError> {
        Self::parse(body, true)
    }

    /// Reads a body [`FetchedBatches::decode`] accepted before, without checking the CRCs
    /// again.
    pub(crate) fn trusted(body: &'a [u8]) -> FetchedBatches<'a> {
        Self::parse(body, false).expect("decoded before")
    }

    fn parse(body: &'a [u8], verify: bool) -> Result<FetchedBatches<'a>, ClientError> {
        let response = native::decode_fetch_response(body).map_err(protocol)?;
        let mut rest = response.data;
        for &crc in &response.crcs {
            let header = record::check(rest, &NO_LIMITS)
                .map_err(|e| ClientError::Protocol(format!("fetched batch: {e}")))?;
            let (batch, tail) = rest.split_at(header.batch_len());
            if verify && record::batch_crc(batch) != crc {
                return Err(ClientError::Crc {
                    offset: header.offset,
                });
            }
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(ClientError::Protocol(format!(
                "{} bytes after the last fetched batch",
                rest.len()
            )));
        }
        Ok(FetchedBatches {
            high_watermark: response.high_watermark,
            log_start_offset: response.log_start_offset,
            count: response.crcs.len(),
            data: response.data,
        })
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of all batches (headers, keys, payloads).
    pub fn data_bytes(&self) -> usize {
        self.data.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = Batch<'a>> + use<'a> {
        let mut rest = self.data;
        (0..self.count).map(move |_| {
            let header = record::check(rest, &NO_LIMITS).expect("checked at decode");
            let (bytes, tail) = rest.split_at(header.batch_len());
            rest = tail;
            Batch { header, bytes }
        })
    }

    /// Offset after the last batch, if there is one.
    pub fn next_offset(&self) -> Option<u64> {
        self.iter().last().map(|b| b.next_offset())
    }
}

/// One fetched batch.
#[derive(Debug, Clone, Copy)]
pub struct Batch<'a> {
    pub header: BatchHeader,
    /// The whole batch: header, key, payload.
    pub bytes: &'a [u8],
}

/// A record decoded from a stored Kafka RecordBatch (which may have been compressed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRecord {
    pub offset: u64,
    pub timestamp_ms: i64,
    /// `None` for a null key.
    pub key: Option<bytes::Bytes>,
    /// `None` for a null value (a tombstone).
    pub value: Option<bytes::Bytes>,
}

/// A logical record and where it sits in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    pub offset: u64,
    pub timestamp_ns: u64,
    /// The key of the batch the record came in.
    pub key: &'a [u8],
    pub value: &'a [u8],
}

impl<'a> Batch<'a> {
    pub fn key(&self) -> &'a [u8] {
        record::key_of(self.bytes, &self.header)
    }

    pub fn payload(&self) -> &'a [u8] {
        record::payload_of(self.bytes, &self.header)
    }

    pub fn next_offset(&self) -> u64 {
        self.header.offset + self.header.records()
    }

    /// What the payload is: a Kafka RecordBatch (produced by a Kafka client) or records in
    /// the native packing. The same rule the broker's index uses (`record::format_of`).
    pub fn format(&self) -> record::BatchFormat {
        record::format_of(self.bytes, &self.header)
    }

    /// The records of a Kafka-format batch, decompressed (gzip, snappy, lz4, zstd) with
    /// the `kafka-protocol` crate's record decoding.
    pub fn kafka_records(&self) -> Result<Vec<KafkaRecord>, ClientError> {
        let mut payload = bytes::Bytes::copy_from_slice(self.payload());
        let set =
            kafka_protocol::records::RecordBatchDecoder::decode(&mut payload).map_err(|e| {
                ClientError::Protocol(format!(
                    "Kafka record batch at offset {}: {e}",
                    self.header.offset
                ))
            })?;
        Ok(set
            .records
            .into_iter()
            .map(|r| KafkaRecord {
                offset: u64::try_from(r.offset).unwrap_or(0),
                timestamp_ms: r.timestamp,
                key: r.key,
                value: r.value,
            })
            .collect())
    }

    /// The logical records, offset by offset. A payload that is not exactly `record_count`
    /// length-prefixed records (a HermitMQ client's, say) is one record holding the
    /// whole payload.
    pub fn records(&self) -> impl Iterator<Item = Record<'a>> + use<'a> {
        let payload = self.payload();
        let (key, header) = (self.key(), self.header);
        let mut count = 0u64;
        let framed = header.record_count > 0
            && payload::records(payload).all(|r| {
                count += 1;
                r.is_ok()
            })
            && count == u64::from(header.record_count);
        let records = framed.then(|| payload::records(payload).map(|r| r.expect("checked")));
        let whole = (!framed).then_some(payload);
        records
            .into_iter()
            .flatten()
            .chain(whole)
            .zip(header.offset..)
            .map(move |(value, offset)| Record {
                offset,
                timestamp_ns: header.timestamp_ns,
                key,
                value,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fetch_body(batches: &[Vec<u8>], corrupt: bool) -> Vec<u8> {
        let crcs: Vec<u32> = batches.iter().map(|b| record::batch_crc(b)).collect();
        let data: Vec<u8> = batches.concat();
        let mut out = Vec::new();
        native::encode_fetch_head(&mut out, 1, 10, 0, crcs.into_iter(), data.len() as u32);
        out.extend_from_slice(&data);
        if corrupt {
            let last = out.len() - 1;
            out[last] ^= 1;
        }
        out[4 + native::RESPONSE_HEADER_LEN..].to_vec()
    }

    fn batch(offset: u64, records: &[&[u8]]) -> Vec<u8> {
        let mut payload = Vec::new();
        for r in records {
            payload::push_record(&mut payload, r);
        }
        let mut b = record::encode_batch(5, b"k", &payload, records.len() as u32);
        record::set_offset(&mut b, offset);
        b
    }

    #[test]
    fn records_come_out_with_their_offsets() {
        let body = fetch_body(&[batch(3, &[b"a", b"bb"]), batch(5, &[b"c"])], false);
        let fetched = FetchedBatches::decode(&body).unwrap();
        assert_eq!((fetched.len(), fetched.high_watermark), (2, 10));
        let records: Vec<(u64, &[u8])> = fetched
            .iter()
            .flat_map(|b| b.records())
            .map(|r| (r.offset, r.value))
            .collect();
        assert_eq!(records, vec![(3, &b"a"[..]), (4, b"bb"), (5, b"c")]);
        assert_eq!(fetched.next_offset(), Some(6));
        let first = fetched.iter().next().unwrap().records().next().unwrap();
        assert_eq!((first.key, first.timestamp_ns), (&b"k"[..], 5));
    }

    #[test]
    fn a_corrupt_batch_is_refused() {
        let body = fetch_body(&[batch(0, &[b"a"]), batch(1, &[b"b"])], true);
        match FetchedBatches::decode(&body) {
            Err(ClientError::Crc { offset }) => assert_eq!(offset, 1),
            other => panic!("expected a CRC error, got {other:?}"),
        }
    }

    #[test]
    fn a_foreign_payload_is_one_record() {
        let mut b = record::encode_batch(0, b"", b"raw hermit bytes", 1);
        record::set_offset(&mut b, 7);
        let body = fetch_body(&[b], false);
        let fetched = FetchedBatches::decode(&body).unwrap();
        let records: Vec<Record<'_>> = fetched.iter().flat_map(|b| b.records()).collect();
        assert_eq!(records.len(), 1);
        assert_eq!(
            (records[0].offset, records[0].value),
            (7, &b"raw hermit bytes"[..])
        );
    }

    #[test]
    fn start_points_parse() {
        assert_eq!("earliest".parse(), Ok(StartAt::Earliest));
        assert_eq!("12".parse(), Ok(StartAt::Offset(12)));
        assert_eq!("@5".parse(), Ok(StartAt::TimestampMs(5)));
        assert!("@x".parse::<StartAt>().is_err());
        assert!(StartAt::TimestampMs(u64::MAX).spec().is_err());
    }
}
