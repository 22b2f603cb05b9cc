//! Sans-IO producing: a produce request built in place ([`ProduceFrame`]), batching by record
//! count, bytes and linger time ([`Accumulator`]), and the key-hash partitioner.
//!
//! Records are appended straight into the frame that goes on the wire, in the payload
//! encoding of [`crate::protocol::payload`] (u32 length + bytes), so a batch is encoded with
//! no copy besides the record's own and one CRC32C pass when it is closed. Nothing here
//! reads a clock: callers pass `now`.

use std::time::{Duration, Instant};

use crate::protocol::native::{self, ApiKey};
use crate::protocol::payload::push_record;
use crate::protocol::record::{self, BatchHeader};
use crate::protocol::routing::fnv1a32;

/// Bytes before the topic name: frame length, api, version, correlation id.
const TOPIC_AT: usize = native::FRAME_LEN_BYTES + native::REQUEST_HEADER_LEN;
const CORRELATION_AT: usize = native::FRAME_LEN_BYTES + 4;

/// A produce request of one batch for one partition, encoded in place as records arrive.
///
/// Layout (docs/PROTOCOL.md, Produce): frame length, request header, topic, partition,
/// batch count (1), the batch's CRC32C, then the batch (29-byte header, key, payload). The
/// length, correlation id, batch header and CRC are written by [`ProduceFrame::finish`].
#[derive(Debug, Clone)]
pub struct ProduceFrame {
    buf: Vec<u8>,
    /// Where the batch's CRC sits; the batch follows it.
    crc_at: usize,
    key_len: usize,
    partition: u32,
    records: u32,
}

impl ProduceFrame {
    pub fn new(topic: &str, partition: u32, key: &[u8]) -> ProduceFrame {
        let mut frame = ProduceFrame {
            buf: Vec::new(),
            crc_at: 0,
            key_len: 0,
            partition,
            records: 0,
        };
        frame.reset(topic, partition, key);
        frame
    }

    /// Starts a new, empty batch, keeping the buffer's capacity.
    pub fn reset(&mut self, topic: &str, partition: u32, key: &[u8]) {
        assert!(
            topic.len() <= usize::from(u16::MAX),
            "topic names are validated short"
        );
        let buf = &mut self.buf;
        buf.clear();
        buf.extend_from_slice(&[0; 4]);
        buf.extend_from_slice(&(ApiKey::Produce as u16).to_be_bytes());
        buf.extend_from_slice(&native::VERSION.to_be_bytes());
        buf.extend_from_slice(&[0; 4]);
        buf.extend_from_slice(&(topic.len() as u16).to_be_bytes());
        buf.extend_from_slice(topic.as_bytes());
        buf.extend_from_slice(&partition.to_be_bytes());
        buf.extend_from_slice(&1u32.to_be_bytes());
        self.crc_at = buf.len();
        buf.resize(self.crc_at + 4 + record::HEADER_LEN, 0);
        buf.extend_from_slice(key);
        self.key_len = key.len();
        self.partition = partition;
        self.records = 0;
    }

    /// Appends one logical record to the batch's payload.
    pub fn push(&mut self, value: &[u8]) {
        push_record(&mut self.buf, value);
        self.records += 1;
    }

    pub fn records(&self) -> u32 {
        self.records
    }

    pub fn partition(&self) -> u32 {
        self.partition
    }

    pub fn topic(&self) -> &[u8] {
        let len = u16::from_be_bytes([self.buf[TOPIC_AT], self.buf[TOPIC_AT + 1]]) as usize;
        &self.buf[TOPIC_AT + 2..TOPIC_AT + 2 + len]
    }

    pub fn key(&self) -> &[u8] {
        let key_at = self.batch_at() + record::HEADER_LEN;
        &self.buf[key_at..key_at + self.key_len]
    }

    /// Payload bytes so far (records with their length prefixes).
    pub fn payload_bytes(&self) -> usize {
        self.buf.len() - self.batch_at() - record::HEADER_LEN - self.key_len
    }

    fn batch_at(&self) -> usize {
        self.crc_at + 4
    }

    /// Completes the request under `correlation_id`, with the batch timestamped
    /// `timestamp_ns` (0 lets the broker set it); returns the whole frame.
    pub fn finish(&mut self, correlation_id: u32, timestamp_ns: u64) -> &[u8] {
        let payload_len = u32::try_from(self.payload_bytes()).expect("a payload is under 4 GiB");
        let batch_at = self.batch_at();
        BatchHeader {
            timestamp_ns,
            offset: 0,
            key_len: self.key_len as u32,
            payload_len,
            record_count: self.records,
        }
        .encode(&mut self.buf[batch_at..batch_at + record::HEADER_LEN]);
        let crc = record::batch_crc(&self.buf[batch_at..]);
        self.buf[self.crc_at..batch_at].copy_from_slice(&crc.to_be_bytes());
        let body = u32::try_from(self.buf.len() - native::FRAME_LEN_BYTES)
            .expect("a frame is under 4 GiB");
        self.buf[..native::FRAME_LEN_BYTES].copy_from_slice(&body.to_be_bytes());
        self.buf[CORRELATION_AT..CORRELATION_AT + 4].copy_from_slice(&correlation_id.to_be_bytes());
        &self.buf
    }
}

/// When a batch is closed and sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimits {
    /// Records per batch at most (at least 1).
    pub records_max: u32,
    /// Payload bytes per batch at most; a larger record still goes, alone in its batch.
    pub bytes_max: usize,
    /// A batch is sent once its first record has waited this long, full or not.
    pub linger: Duration,
}

impl Default for BatchLimits {
    fn default() -> Self {
        BatchLimits {
            records_max: 100,
            bytes_max: 1024 * 1024,
            linger: Duration::from_millis(5),
        }
    }
}

/// The partition of a keyed record: FNV-1a of the key modulo the partition count, so a key
/// always lands on the same partition while the count stays the same.
pub fn key_partition(key: &[u8], partitions: u32) -> u32 {
    fnv1a32(key) % partitions.max(1)
}

#[derive(Debug)]
struct Open {
    frame: ProduceFrame,
    topic: String,
    first_at: Instant,
}

/// Unkeyed records of a topic stick to one partition until their batch closes, then move
/// to the next, so they batch as well as keyed ones while spreading over every partition.
#[derive(Debug)]
struct Sticky {
    topic: String,
    partition: u32,
    partitions: u32,
}

/// Open batches, at most one per (topic, partition), and the batches ready to send, in the
/// order they closed.
///
/// A batch has one key (the header's; compaction keeps the newest batch per key), so
/// records with different keys never share a batch. A record whose key differs from the
/// open batch of its partition closes that batch first: batches close, and are sent, in the
/// order their records were added, so every partition gets its records in input order (as
/// Kafka producers keep it). Interleaved keys therefore make small batches.
#[derive(Debug)]
pub struct Accumulator {
    limits: BatchLimits,
    open: Vec<Open>,
    ready: std::collections::VecDeque<ProduceFrame>,
    sticky: Vec<Sticky>,
    spare: Vec<ProduceFrame>,
}

impl Accumulator {
    pub fn new(limits: BatchLimits) -> Accumulator {
        assert!(limits.records_max >= 1, "a batch holds at least one record");
        Accumulator {
            limits,
            open: Vec::new(),
            ready: Default::default(),
            sticky: Vec::new(),
            spare: Vec::new(),
        }
    }

    pub fn limits(&self) -> BatchLimits {
        self.limits
    }

    /// The partition for a record: by key hash, or the topic's sticky partition for an
    /// empty key.
    pub fn partition_for(&mut self, topic: &str, key: &[u8], partitions: u32) -> u32 {
        if !key.is_empty() {
            return key_partition(key, partitions);
        }
        let partitions = partitions.max(1);
        match self.sticky.iter_mut().find(|s| s.topic == topic) {
            Some(sticky) => {
                if sticky.partitions != partitions {
                    sticky.partitions = partitions;
                    sticky.partition %= partitions;
                }
                sticky.partition
            }
            None => {
                // Start topics at different partitions so that producers of many topics
                // do not all pile onto partition 0.
                let partition = fnv1a32(topic.as_bytes()) % partitions;
                self.sticky.push(Sticky {
                    topic: topic.to_string(),
                    partition,
                    partitions,
                });
                partition
            }
        }
    }

    /// Adds a record to its partition's open batch, closing that batch first when the
    /// record's key differs or the record would not fit, and after it when it is full.
    pub fn push(&mut self, topic: &str, partition: u32, key: &[u8], value: &[u8], now: Instant) {
        let found = self
            .open
            .iter()
            .position(|o| o.frame.partition() == partition && o.topic == topic);
        let at = match found {
            Some(at)
                if self.open[at].frame.key() == key
                    && self.open[at].frame.payload_bytes() + 4 + value.len()
                        <= self.limits.bytes_max =>
            {
                at
            }
            other => {
                if let Some(at) = other {
                    self.close(at);
                }
                let frame = match self.spare.pop() {
                    Some(mut frame) => {
                        frame.reset(topic, partition, key);
                        frame
                    }
                    None => ProduceFrame::new(topic, partition, key),
                };
                self.open.push(Open {
                    frame,
                    topic: topic.to_string(),
                    first_at: now,
                });
                self.open.len() - 1
            }
        };
        let frame = &mut self.open[at].frame;
        frame.push(value);
        if frame.records() >= self.limits.records_max
            || frame.payload_bytes() >= self.limits.bytes_max
        {
            self.close(at);
        }
    }

    fn close(&mut self, at: usize) {
        let open = self.open.swap_remove(at);
        if open.frame.key().is_empty()
            && let Some(sticky) = self
                .sticky
                .iter_mut()
                .find(|s| s.topic == open.topic && s.partition == open.frame.partition())
        {
            sticky.partition = (sticky.partition + 1) % sticky.partitions;
        }
        self.ready.push_back(open.frame);
    }

    /// Closes every batch whose first record has waited the linger time.
    pub fn expire(&mut self, now: Instant) {
        let linger = self.limits.linger;
        let mut i = 0;
        while i < self.open.len() {
            if now.saturating_duration_since(self.open[i].first_at) >= linger {
                self.close(i);
            } else {
                i += 1;
            }
        }
    }

    /// Closes every open batch (at a flush or at the end).
    pub fn close_all(&mut self) {
        while !self.open.is_empty() {
            self.close(self.open.len() - 1);
        }
    }

    /// When the next open batch reaches its linger time.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.open
            .iter()
            .map(|o| o.first_at + self.limits.linger)
            .min()
    }

    /// The oldest closed batch, to send.
    pub fn pop_ready(&mut self) -> Option<ProduceFrame> {
        self.ready.pop_front()
    }

    pub fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Batches open (one per topic and partition with records waiting).
    pub fn open_batches(&self) -> usize {
        self.open.len()
    }

    /// Records in open batches.
    pub fn open_records(&self) -> u64 {
        self.open.iter().map(|o| u64::from(o.frame.records())).sum()
    }

    /// Gives a sent frame's buffer back for reuse.
    pub fn recycle(&mut self, frame: ProduceFrame) {
        if self.spare.len() < 64 {
            self.spare.push(frame);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limits::Limits;
    use crate::protocol::native::{Request, decode_request};
    use crate::protocol::payload;

    #[test]
    fn a_frame_decodes_as_the_broker_sees_it() {
        let mut frame = ProduceFrame::new("topic", 3, b"key");
        for record in [&b"one"[..], b"", b"three"] {
            frame.push(record);
        }
        assert_eq!((frame.records(), frame.payload_bytes()), (3, 4 * 3 + 8));
        let bytes = frame.finish(42, 7).to_vec();
        let limits = Limits::default();
        let body = &bytes[4..];
        assert_eq!(
            u32::from_be_bytes(bytes[..4].try_into().unwrap()) as usize,
            body.len()
        );
        let (header, request) = decode_request(body, &limits).unwrap();
        assert_eq!(header.correlation_id, 42);
        let Request::Produce {
            topic,
            partition,
            batches,
        } = request
        else {
            panic!("not a produce: {request:?}");
        };
        assert_eq!((topic, partition, batches.count), (&b"topic"[..], 3, 1));
        let (crc, batch) = batches.iter().next().unwrap();
        assert_eq!(
            crc,
            record::batch_crc(batch),
            "the CRC covers the batch as sent"
        );
        let header = record::check(batch, &limits).unwrap();
        assert_eq!((header.timestamp_ns, header.record_count), (7, 3));
        assert_eq!(record::key_of(batch, &header), b"key");
        let records: Vec<&[u8]> = payload::records(record::payload_of(batch, &header))
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(records, vec![&b"one"[..], b"", b"three"]);
        // Reused for another partition and key, it forgets the old batch.
        frame.reset("t2", 0, b"");
        frame.push(b"x");
        let bytes = frame.finish(1, 0).to_vec();
        let (_, request) = decode_request(&bytes[4..], &limits).unwrap();
        assert!(matches!(request, Request::Produce { topic: b"t2", .. }));
    }

    #[test]
    fn batches_close_by_count_bytes_and_linger() {
        let t0 = Instant::now();
        let mut acc = Accumulator::new(BatchLimits {
            records_max: 3,
            bytes_max: 20,
            linger: Duration::from_millis(5),
        });
        for _ in 0..3 {
            acc.push("t", 0, b"", b"ab", t0);
        }
        let full = acc.pop_ready().expect("closed by count");
        assert_eq!(full.records(), 3);
        assert!(acc.pop_ready().is_none());
        acc.push("t", 0, b"", &[0; 10], t0);
        acc.push("t", 0, b"", &[0; 10], t0);
        assert_eq!(acc.pop_ready().unwrap().records(), 1, "closed by bytes");
        acc.push("t", 0, b"", &[0; 50], t0);
        assert_eq!(
            acc.pop_ready().unwrap().records(),
            1,
            "closed by the big one"
        );
        assert_eq!(
            acc.pop_ready().unwrap().payload_bytes(),
            54,
            "alone in its batch"
        );
        acc.push("t", 0, b"", b"late", t0);
        assert_eq!(acc.next_deadline(), Some(t0 + Duration::from_millis(5)));
        acc.expire(t0 + Duration::from_millis(4));
        assert!(!acc.has_ready());
        acc.expire(t0 + Duration::from_millis(5));
        assert_eq!(acc.pop_ready().unwrap().records(), 1, "closed by linger");
        assert_eq!(acc.next_deadline(), None);
    }

    #[test]
    fn keys_split_batches_and_pick_partitions() {
        let t0 = Instant::now();
        let mut acc = Accumulator::new(BatchLimits::default());
        let p = acc.partition_for("t", b"user-1", 8);
        assert_eq!(p, key_partition(b"user-1", 8));
        assert_eq!(acc.partition_for("t", b"user-1", 8), p, "stable");
        acc.push("t", p, b"user-1", b"a", t0);
        acc.push("t", p, b"user-1", b"b", t0);
        acc.push("t", p, b"user-2", b"c", t0);
        acc.push("t", p, b"user-1", b"d", t0);
        acc.close_all();
        let keys: Vec<(Vec<u8>, u32)> = std::iter::from_fn(|| acc.pop_ready())
            .map(|f| (f.key().to_vec(), f.records()))
            .collect();
        assert_eq!(
            keys,
            vec![
                (b"user-1".to_vec(), 2),
                (b"user-2".to_vec(), 1),
                (b"user-1".to_vec(), 1)
            ],
            "a key change closes the batch, so the partition keeps the input order"
        );
        // Other partitions' batches stay open meanwhile.
        acc.push("t", 0, b"k", b"x", t0);
        acc.push("t", 1, b"j", b"y", t0);
        acc.push("t", 0, b"k", b"z", t0);
        assert_eq!(acc.open_batches(), 2);
        acc.close_all();
        let mut sizes: Vec<(u32, u32)> = std::iter::from_fn(|| acc.pop_ready())
            .map(|f| (f.partition(), f.records()))
            .collect();
        sizes.sort();
        assert_eq!(sizes, vec![(0, 2), (1, 1)]);
        // Unkeyed records move to the next partition each time a batch closes.
        let first = acc.partition_for("u", b"", 3);
        acc.push("u", first, b"", b"x", t0);
        assert_eq!(acc.partition_for("u", b"", 3), first, "sticks while open");
        acc.close_all();
        assert_eq!(acc.partition_for("u", b"", 3), (first + 1) % 3);
    }
}
