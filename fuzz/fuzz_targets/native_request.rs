//! The native request decoder, fed whatever a client could send.
//!
//! Properties: framing is consistent; decoding never panics and allocates at most a small
//! multiple of the bytes received; what decodes re-encodes to the same bytes (list-offsets
//! aside, whose timestamp is ignored for earliest/latest, and a create-topic without its
//! optional replication factor, which re-encodes with it) and decodes again to the same
//! request; produce batches iterate exactly as validated; anything accepted under small
//! limits is accepted under the default ones.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pagurus::limits::Limits;
use pagurus::protocol::native::{self, FrameCheck, Request, RequestHeader};
use pagurus::protocol::record;
use pagurus_fuzz::{measure, small_limits};

/// Bytes a decode may allocate per byte of request body (plus a constant): the one
/// allocation it makes is a metadata request's list of borrowed names, 16 bytes per name of
/// at least 2 bytes on the wire.
const ALLOC_BYTES_PER_BODY_BYTE: usize = 8;

fuzz_target!(|data: &[u8]| {
    check_framing(data);
    let small = small_limits();
    let accepted_small = check_decode(data, &small);
    let accepted_default = check_decode(data, &Limits::default());
    if accepted_small {
        assert!(
            accepted_default,
            "larger limits refused what smaller accepted"
        );
    }
});

fn check_framing(data: &[u8]) {
    let body_max = native::frame_body_max_bytes(&small_limits());
    match native::check_frame(data, body_max) {
        FrameCheck::Complete { frame_bytes } => {
            assert!(frame_bytes <= data.len());
            let body = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
            assert_eq!(frame_bytes, native::FRAME_LEN_BYTES + body);
            assert!(body <= body_max);
        }
        FrameCheck::Incomplete { needed } => {
            assert!(needed > 0);
            if data.len() >= native::FRAME_LEN_BYTES {
                let body = u32::from_be_bytes(data[..4].try_into().unwrap()) as usize;
                assert_eq!(data.len() + needed, native::FRAME_LEN_BYTES + body);
            } else {
                assert_eq!(data.len() + needed, native::FRAME_LEN_BYTES);
            }
        }
        FrameCheck::TooLarge { body_bytes } => assert!(body_bytes > body_max as u64),
    }
}

/// Decodes `body`; returns whether it was accepted.
fn check_decode(body: &[u8], limits: &Limits) -> bool {
    let (decoded, allocated) = measure(|| native::decode_request(body, limits));
    assert!(
        allocated <= 64 + ALLOC_BYTES_PER_BODY_BYTE * body.len(),
        "decoding {} bytes allocated {allocated}",
        body.len()
    );
    let (header, request) = match decoded {
        Ok(decoded) => decoded,
        Err((header, error)) => {
            let _ = error.code();
            let _ = error.to_string();
            // A header is reported exactly when the first 8 bytes were there.
            assert_eq!(header.is_some(), body.len() >= native::REQUEST_HEADER_LEN);
            if let Some(header) = header {
                assert_eq!(Ok((header, &body[8..])), RequestHeader::decode(body));
            }
            return false;
        }
    };
    if let Request::Produce { batches, .. } = &request {
        let mut seen = 0u32;
        let mut bytes = 0usize;
        for (_crc, batch) in batches.iter() {
            let parsed = record::check(batch, limits).expect("iterated batches are valid");
            assert_eq!(parsed.batch_len(), batch.len());
            assert!(u64::from(parsed.key_len) <= limits.max_key_bytes);
            assert!(u64::from(parsed.payload_len) <= limits.max_payload_bytes);
            seen += 1;
            bytes += 4 + batch.len();
        }
        assert_eq!(seen, batches.count);
        assert_eq!(bytes, batches.as_bytes().len());
    }

    let mut out = Vec::new();
    native::encode_request(&mut out, header.correlation_id, &request);
    let prefix = u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
    assert_eq!(prefix, out.len() - native::FRAME_LEN_BYTES);
    match &request {
        Request::ListOffsets { .. } => {}
        // An older client's CreateTopic ends before its replication factor, which decodes
        // as 1 and is written out.
        Request::CreateTopic {
            replication_factor: 1,
            ..
        } if out.len() - 4 == body.len() + 2 => {
            assert_eq!(&out[4..4 + body.len()], body, "re-encoding changed the bytes");
            assert_eq!(&out[4 + body.len()..], &1u16.to_be_bytes());
        }
        _ => assert_eq!(&out[4..], body, "re-encoding changed the bytes"),
    }
    let again = native::decode_request(&out[4..], limits).expect("re-encoded request decodes");
    assert_eq!(again, (header, request));
    true
}
