//! Byte layouts of the controller's Raft files (big-endian), and the log scan that tells a
//! torn tail from damage.
//!
//! - `raft_state`: magic `PGRS`, version (u16), term, vote, commit (u64 each), the conf
//!   state, CRC32C (u32) of everything before it.
//! - `snapshot`: magic `PGSN`, version (u16), index, term (u64), the conf state, data
//!   length (u32) and data, CRC32C (u32) of everything before it.
//! - `log`: records back to back, each length (u32, payload bytes), CRC32C (u32, of the
//!   length bytes then the payload), payload: entry type (u8), index, term (u64), context
//!   length (u32) and context, data (the rest).
//! - A conf state: voters, learners, outgoing voters, next learners (each a u32 count
//!   then u64 ids), auto-leave (u8).

use protobuf::ProtobufEnum as _;
use raft::eraftpb::{ConfState, Entry, EntryType, HardState, Snapshot};

use crate::protocol::wire::{Malformed, Put, Reader};

const STATE_MAGIC: [u8; 4] = *b"PGRS";
const SNAPSHOT_MAGIC: [u8; 4] = *b"PGSN";
const FORMAT_VERSION: u16 = 1;
/// Length (u32), CRC32C (u32).
pub(super) const RECORD_HEADER: usize = 8;
/// Entry type, index, term, context length.
const ENTRY_FIXED: usize = 1 + 8 + 8 + 4;
/// The largest entry the controller writes or reads: commands are small (a topic's
/// placement is a few KiB even at thousands of partitions).
pub const MAX_ENTRY_BYTES: usize = 8 * 1024 * 1024;

/// Appends one log record holding `entry`. Callers checked its size.
pub(super) fn encode_entry(entry: &Entry, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(&[0; RECORD_HEADER]);
    out.put_u8(entry.entry_type.value() as u8);
    out.put_u64(entry.index);
    out.put_u64(entry.term);
    out.put_u32(u32::try_from(entry.context.len()).expect("checked by the caller"));
    out.extend_from_slice(&entry.context);
    out.extend_from_slice(&entry.data);
    let len = u32::try_from(out.len() - start - RECORD_HEADER).expect("checked by the caller");
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&len.to_be_bytes()), &out[start + 8..]);
    out[start + 4..start + 8].copy_from_slice(&crc.to_be_bytes());
}

/// The record bytes `entry` takes in the log.
pub(super) fn entry_record_bytes(entry: &Entry) -> usize {
    RECORD_HEADER + ENTRY_FIXED + entry.context.len() + entry.data.len()
}

fn decode_entry(payload: &[u8]) -> Result<Entry, Malformed> {
    let mut r = Reader::new(payload);
    let kind = r.u8("entry type")?;
    let entry_type =
        EntryType::from_i32(i32::from(kind)).ok_or(Malformed { what: "entry type" })?;
    let index = r.u64("entry index")?;
    let term = r.u64("entry term")?;
    let context_len = r.u32("entry context length")? as usize;
    let context = r.bytes(context_len, "entry context")?;
    Ok(Entry {
        entry_type,
        index,
        term,
        context: context.to_vec().into(),
        data: r.rest().to_vec().into(),
        ..Entry::default()
    })
}

/// What a scan of the log file found.
#[derive(Debug, Default)]
pub(super) struct LogScan {
    pub entries: Vec<Entry>,
    /// The byte offset where each entry's record ends.
    pub ends: Vec<u64>,
    /// Bytes of whole, intact records; anything after them is a torn tail.
    pub valid_len: u64,
    /// Why the bytes after `valid_len` were taken for a torn tail, if there are any.
    pub torn: Option<&'static str>,
}

/// Damage a crash cannot leave: the file is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Damage {
    pub offset: u64,
    pub reason: &'static str,
}

/// Reads every record of a log file. The bytes after the last intact record are a torn
/// tail (an append a crash cut short: nothing in it was acknowledged, as acknowledgements
/// follow the fsync) when they could be one: a header or record cut by the end of the
/// file, zeros to the end (space the file system allotted but never wrote), or a CRC
/// mismatch in the very last record. A bad record with more bytes after it that are not
/// all zeros is damage, never silently dropped: those records were acknowledged.
pub(super) fn scan_log(bytes: &[u8]) -> Result<LogScan, Damage> {
    let mut scan = LogScan::default();
    let mut at = 0usize;
    while at < bytes.len() {
        let rest = &bytes[at..];
        let damage = |reason| Damage {
            offset: at as u64,
            reason,
        };
        let torn_or_damage = |reason: &'static str| {
            if rest.iter().all(|b| *b == 0) {
                Ok("zeros to the end of the file")
            } else {
                Err(damage(reason))
            }
        };
        let torn = match check_record(rest) {
            Ok(payload) => {
                let entry = decode_entry(payload).map_err(|m| damage(m.what))?;
                if let Some(prev) = scan.entries.last()
                    && entry.index != prev.index + 1
                {
                    return Err(damage("entry index does not follow the one before"));
                }
                at += RECORD_HEADER + payload.len();
                scan.entries.push(entry);
                scan.ends.push(at as u64);
                continue;
            }
            Err(RecordFault::Cut) => "a record cut short by the end of the file",
            Err(RecordFault::BadLength) => torn_or_damage("record length out of range")?,
            Err(RecordFault::BadCrc { is_last: true }) => "the last record's CRC does not match",
            Err(RecordFault::BadCrc { is_last: false }) => {
                torn_or_damage("record CRC does not match and records follow it")?
            }
        };
        scan.torn = Some(torn);
        break;
    }
    scan.valid_len = scan.ends.last().copied().unwrap_or(0);
    Ok(scan)
}

enum RecordFault {
    Cut,
    BadLength,
    BadCrc { is_last: bool },
}

/// The payload of the record at the front of `rest`, if it is whole and intact.
fn check_record(rest: &[u8]) -> Result<&[u8], RecordFault> {
    if rest.len() < RECORD_HEADER {
        return Err(RecordFault::Cut);
    }
    let len = u32::from_be_bytes(rest[..4].try_into().expect("4")) as usize;
    let stored = u32::from_be_bytes(rest[4..8].try_into().expect("4"));
    if rest.len() < RECORD_HEADER + len {
        return Err(RecordFault::Cut);
    }
    if !(ENTRY_FIXED..=ENTRY_FIXED + MAX_ENTRY_BYTES).contains(&len) {
        return Err(RecordFault::BadLength);
    }
    let payload = &rest[RECORD_HEADER..RECORD_HEADER + len];
    let computed = crc32c::crc32c_append(crc32c::crc32c(&rest[..4]), payload);
    if stored != computed {
        return Err(RecordFault::BadCrc {
            is_last: rest.len() == RECORD_HEADER + len,
        });
    }
    Ok(payload)
}

/// `raft_state`'s bytes.
pub(crate) fn encode_raft_state(hs: &HardState, cs: &ConfState) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&STATE_MAGIC);
    out.put_u16(FORMAT_VERSION);
    out.put_u64(hs.term);
    out.put_u64(hs.vote);
    out.put_u64(hs.commit);
    encode_conf_state(cs, &mut out);
    seal(&mut out);
    out
}

pub(crate) fn decode_raft_state(bytes: &[u8]) -> Result<(HardState, ConfState), Malformed> {
    let mut r = Reader::new(unseal(bytes, STATE_MAGIC)?);
    let hs = HardState {
        term: r.u64("hard state term")?,
        vote: r.u64("hard state vote")?,
        commit: r.u64("hard state commit")?,
        ..HardState::default()
    };
    let cs = decode_conf_state(&mut r)?;
    r.finish("raft state (trailing bytes)")?;
    Ok((hs, cs))
}

/// `snapshot`'s bytes.
pub(super) fn encode_snapshot(snap: &Snapshot) -> Vec<u8> {
    let meta = snap.get_metadata();
    let mut out = Vec::with_capacity(64 + snap.data.len());
    out.extend_from_slice(&SNAPSHOT_MAGIC);
    out.put_u16(FORMAT_VERSION);
    out.put_u64(meta.index);
    out.put_u64(meta.term);
    encode_conf_state(meta.get_conf_state(), &mut out);
    out.put_u32(u32::try_from(snap.data.len()).expect("checked by the caller"));
    out.extend_from_slice(&snap.data);
    seal(&mut out);
    out
}

pub(super) fn decode_snapshot(bytes: &[u8]) -> Result<Snapshot, Malformed> {
    let mut r = Reader::new(unseal(bytes, SNAPSHOT_MAGIC)?);
    let mut snap = Snapshot::default();
    let meta = snap.mut_metadata();
    meta.index = r.u64("snapshot index")?;
    meta.term = r.u64("snapshot term")?;
    meta.set_conf_state(decode_conf_state(&mut r)?);
    let len = r.u32("snapshot data length")? as usize;
    snap.data = r.bytes(len, "snapshot data")?.to_vec().into();
    r.finish("snapshot (trailing bytes)")?;
    Ok(snap)
}

fn encode_conf_state(cs: &ConfState, out: &mut Vec<u8>) {
    for ids in [
        &cs.voters,
        &cs.learners,
        &cs.voters_outgoing,
        &cs.learners_next,
    ] {
        out.put_u32(u32::try_from(ids.len()).expect("a conf state has few members"));
        for id in ids {
            out.put_u64(*id);
        }
    }
    out.put_u8(u8::from(cs.auto_leave));
}

fn decode_conf_state(r: &mut Reader<'_>) -> Result<ConfState, Malformed> {
    let mut lists: [Vec<u64>; 4] = Default::default();
    for list in &mut lists {
        let count = r.u32("conf state count")? as usize;
        // Bounded by the bytes there before anything is allocated.
        if count > r.remaining() / 8 {
            return Err(Malformed {
                what: "conf state count",
            });
        }
        list.reserve_exact(count);
        for _ in 0..count {
            list.push(r.u64("conf state id")?);
        }
    }
    let [voters, learners, voters_outgoing, learners_next] = lists;
    Ok(ConfState {
        voters,
        learners,
        voters_outgoing,
        learners_next,
        auto_leave: r.u8("conf state auto leave")? != 0,
        ..ConfState::default()
    })
}

/// Appends the CRC32C of everything in `out`.
fn seal(out: &mut Vec<u8>) {
    let crc = crc32c::crc32c(out);
    out.put_u32(crc);
}

/// Checks the trailing CRC, magic and version; returns the bytes between them.
fn unseal(bytes: &[u8], magic: [u8; 4]) -> Result<&[u8], Malformed> {
    if bytes.len() < 4 + 2 + 4 {
        return Err(Malformed {
            what: "file length",
        });
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_be_bytes(crc.try_into().expect("4")) {
        return Err(Malformed { what: "file CRC" });
    }
    if body[..4] != magic {
        return Err(Malformed { what: "file magic" });
    }
    if u16::from_be_bytes([body[4], body[5]]) != FORMAT_VERSION {
        return Err(Malformed {
            what: "file format version",
        });
    }
    Ok(&body[6..])
}
