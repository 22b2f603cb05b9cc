//! The HermitMQ v1 decoders, fed a connection's bytes the way the broker reads them: a role
//! byte, the role's handshake, then (for producers) a stream of record batches.
//!
//! Properties: nothing panics; a handshake decodes the same from every prefix long enough
//! to hold it, and a refusal is never taken back by more bytes (so the broker may decide as
//! soon as it can); `Incomplete` asks for exactly the bytes that change the answer; what
//! decodes re-encodes to the bytes it came from; a batch header passes only within the
//! limits, and an accepted batch re-encodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagurus::limits::NAME_LEN_MAX;
use pagurus::protocol::hermit::{self, HermitError};
use pagurus::protocol::record::{self, BatchHeader, RecordError};
use pagurus_fuzz::{measure, small_limits};

/// Longest prefix whose every cut is re-parsed (keeps each run fast).
const PREFIX_CHECK_MAX: usize = 600;

fuzz_target!(|data: &[u8]| {
    let Some((&role, rest)) = data.split_first() else {
        return;
    };
    let used = match role % 3 {
        0 => handshake(rest, hermit::parse_producer_hello, |h| {
            hermit::encode_producer_hello(h.topic, h.partition)
        }),
        1 => handshake(rest, hermit::parse_consumer_hello, |h| {
            hermit::encode_consumer_hello(h.group, h.topic, h.partition)
        }),
        _ => handshake(rest, hermit::parse_commit, |c| {
            hermit::encode_commit(c.group, c.topic, c.partition, c.offset)
        }),
    };
    // Producers and fuzz inputs alike: whatever follows is read as batches.
    batches(&rest[used.unwrap_or(0)..]);
});

/// Checks one handshake parser against every prefix of `buf`; returns the bytes it used.
fn handshake<'a, T: PartialEq + std::fmt::Debug>(
    buf: &'a [u8],
    parse: impl Fn(&'a [u8]) -> Result<(T, usize), HermitError>,
    encode: impl Fn(&T) -> Vec<u8>,
) -> Option<usize> {
    let (full, allocated) = measure(|| parse(buf));
    assert_eq!(allocated, 0, "handshake parsing allocates nothing");
    for cut in 0..buf.len().min(PREFIX_CHECK_MAX) {
        match (parse(&buf[..cut]), &full) {
            (Err(HermitError::Incomplete { needed }), _) => {
                assert!(needed > 0);
                // One byte short of what was asked for changes nothing yet.
                let short = cut + needed - 1;
                if needed > 1 && short <= buf.len() {
                    assert!(matches!(
                        parse(&buf[..short]),
                        Err(HermitError::Incomplete { .. })
                    ));
                }
            }
            (prefix, full) => assert_eq!(&prefix, full, "decided at {cut} bytes, then changed"),
        }
    }
    match full {
        Ok((message, used)) => {
            assert!(used <= buf.len());
            let encoded = encode(&message);
            assert_eq!(&encoded[1..], &buf[..used], "re-encoding changed the bytes");
            Some(used)
        }
        Err(HermitError::Incomplete { needed }) => {
            // Strings are at most 255 bytes, so a handshake asks for little at a time.
            assert!(needed <= 255 + 1 + 8);
            None
        }
        Err(HermitError::Name(_)) | Err(HermitError::EmptyString) => None,
    }
}

/// Reads batches the way a v1 producer connection does: the header is checked before the
/// rest of the batch is awaited.
fn batches(mut buf: &[u8]) {
    let limits = small_limits();
    loop {
        let header = match BatchHeader::decode(buf, &limits) {
            Ok(header) => header,
            Err(RecordError::Incomplete { needed }) => {
                assert!(buf.len() + needed == record::HEADER_LEN);
                return;
            }
            Err(RecordError::BadMagic { found }) => {
                assert_ne!(found, record::MAGIC);
                return;
            }
            Err(RecordError::KeyTooLarge { size_bytes, .. }) => {
                assert!(size_bytes > limits.max_key_bytes);
                return;
            }
            Err(RecordError::PayloadTooLarge { size_bytes, .. }) => {
                assert!(size_bytes > limits.max_payload_bytes);
                return;
            }
            Err(e @ RecordError::CrcMismatch { .. }) => panic!("headers carry no CRC: {e}"),
            Err(e @ RecordError::BadParts { .. }) => panic!("one buffer is never in parts: {e}"),
        };
        let len = header.batch_len();
        assert!(len as u64 <= record::HEADER_LEN as u64 + 1100);
        match record::check(buf, &limits) {
            Ok(checked) => assert_eq!(checked, header),
            Err(RecordError::Incomplete { needed }) => {
                assert_eq!(buf.len() + needed, len);
                return;
            }
            Err(e) => panic!("check disagrees with decode: {e}"),
        }
        let batch = &buf[..len];
        let key = record::key_of(batch, &header);
        let payload = record::payload_of(batch, &header);
        let mut again =
            record::encode_batch(header.timestamp_ns, key, payload, header.record_count);
        record::set_offset(&mut again, header.offset);
        assert_eq!(again, batch);
        assert!(header.records() >= 1);
        buf = &buf[len..];
    }
}

// Names in v1 handshakes are validated names: never longer than the limit.
const _: () = assert!(NAME_LEN_MAX < 256);
