//! The encoding of logical records inside a batch payload, used by pagurus's clients: each
//! record is a u32 big-endian length followed by that many bytes, back to back, and the
//! batch header's record count says how many there are. The broker never looks inside a
//! payload; this is a convention between producers and consumers (HermitMQ's clients pack
//! records their own way, which pagurus stores just as opaquely).

use crate::protocol::wire::{Malformed, Reader};

/// Appends one record to a payload under construction.
pub fn push_record(payload: &mut Vec<u8>, record: &[u8]) {
    let len = u32::try_from(record.len()).expect("a record is under 4 GiB");
    payload.extend_from_slice(&len.to_be_bytes());
    payload.extend_from_slice(record);
}

/// Iterates the records of a payload; yields an error (once) if the payload is not a
/// sequence of length-prefixed records.
pub fn records(payload: &[u8]) -> impl Iterator<Item = Result<&[u8], Malformed>> {
    let mut reader = Reader::new(payload);
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || reader.remaining() == 0 {
            return None;
        }
        let record = reader
            .u32("record length")
            .and_then(|len| reader.bytes(len as usize, "record"));
        failed = record.is_err();
        Some(record)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let mut payload = Vec::new();
        for record in [&b"one"[..], b"", b"three"] {
            push_record(&mut payload, record);
        }
        let got: Vec<&[u8]> = records(&payload).collect::<Result<_, _>>().unwrap();
        assert_eq!(got, vec![&b"one"[..], b"", b"three"]);
        let broken = &payload[..payload.len() - 1];
        let results: Vec<_> = records(broken).collect();
        assert_eq!(results.len(), 3);
        assert!(results[2].is_err());
    }
}
