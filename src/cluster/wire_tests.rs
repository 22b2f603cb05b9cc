use proptest::prelude::*;
use protobuf::ProtobufEnum;
use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};

use super::*;

const MAX: u32 = 1024 * 1024;

fn cluster(n: u8) -> ClusterId {
    ClusterId([n; 16])
}

fn hello_frame(hello: &Hello) -> Vec<u8> {
    let mut out = Vec::new();
    encode_hello(hello, &mut out);
    out
}

fn raft_frame(group: GroupId, message: &Message) -> Vec<u8> {
    let mut out = Vec::new();
    encode_raft(group, message, MAX, &mut out).unwrap();
    out
}

fn entry_strategy() -> impl Strategy<Value = Entry> {
    (
        any::<bool>(),
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 0..300),
        prop::collection::vec(any::<u8>(), 0..20),
    )
        .prop_map(|(conf, term, index, data, context)| {
            let entry_type = if conf {
                EntryType::EntryConfChangeV2
            } else {
                EntryType::EntryNormal
            };
            Entry {
                entry_type,
                term,
                index,
                data: data.into(),
                context: context.into(),
                ..Entry::default()
            }
        })
}

fn message_strategy() -> impl Strategy<Value = Message> {
    (
        0usize..19,
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        (any::<u64>(), any::<u64>(), any::<bool>(), any::<u64>()),
        prop::collection::vec(entry_strategy(), 0..5),
        prop::option::of((
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec(1u64..9, 0..5),
        )),
    )
        .prop_map(
            |(kind, (to, from, term, index), (commit, log_term, reject, hint), entries, snap)| {
                let mut m = Message {
                    msg_type: MessageType::from_i32(kind as i32).expect("0..19 are types"),
                    entries: entries.into(),
                    ..Message::default()
                };
                (m.to, m.from, m.term, m.index) = (to, from, term, index);
                (m.commit, m.log_term, m.reject, m.reject_hint) = (commit, log_term, reject, hint);
                if let Some((index, term, voters)) = snap {
                    let mut s = Snapshot::default();
                    s.mut_metadata().index = index;
                    s.mut_metadata().term = term;
                    s.mut_metadata()
                        .set_conf_state(ConfState::from((voters, Vec::new())));
                    s.data = vec![7u8; 33].into();
                    m.set_snapshot(s);
                }
                m
            },
        )
}

proptest! {
    #[test]
    fn raft_frames_round_trip(group in any::<u64>(), m in message_strategy()) {
        let bytes = raft_frame(group, &m);
        let (frame, used) = decode(&bytes, MAX).unwrap().unwrap();
        prop_assert_eq!(used, bytes.len());
        prop_assert_eq!(frame, Frame::Raft(RaftFrame { group, message: m }));
    }

    #[test]
    fn hello_frames_round_trip(c in any::<[u8; 16]>(), node in any::<u16>()) {
        let hello = Hello::new(ClusterId(c), NodeId(node));
        let bytes = hello_frame(&hello);
        prop_assert_eq!(bytes.len(), HEADER_LEN + HELLO_BODY_LEN);
        prop_assert_eq!(decode(&bytes, MAX).unwrap(), Some((Frame::Hello(hello), bytes.len())));
    }

    /// Every strict prefix of a frame is "incomplete", never a frame and never an error,
    /// and asks for no more than the frame's missing bytes.
    #[test]
    fn truncated_frames_are_incomplete(m in message_strategy(), cut in any::<prop::sample::Index>()) {
        let bytes = raft_frame(CONTROLLER_GROUP, &m);
        let cut = cut.index(bytes.len());
        match check(&bytes[..cut], MAX).unwrap() {
            FrameCheck::Incomplete { needed } => prop_assert!(needed <= bytes.len() - cut),
            other => prop_assert!(false, "a prefix of {cut} bytes gave {other:?}"),
        }
        prop_assert_eq!(decode(&bytes[..cut], MAX).unwrap(), None);
    }

    /// A frame with any one byte changed is refused (or still incomplete, when its length
    /// grew), never decoded into something else.
    #[test]
    fn corrupted_frames_are_refused(
        m in message_strategy(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let mut bytes = raft_frame(7, &m);
        let at = at.index(bytes.len());
        bytes[at] ^= flip;
        match decode(&bytes, MAX) {
            Ok(None) => prop_assert!(at < 4, "only a grown length leaves a frame incomplete"),
            Ok(Some(frame)) => prop_assert!(false, "byte {at} changed, still decoded {frame:?}"),
            Err(_) => {}
        }
    }

    /// Two frames back to back decode one after the other, each taking its own bytes.
    #[test]
    fn frames_follow_each_other(a in message_strategy(), b in message_strategy()) {
        let mut bytes = hello_frame(&Hello::new(cluster(1), NodeId(2)));
        encode_raft(1, &a, MAX, &mut bytes).unwrap();
        encode_raft(2, &b, MAX, &mut bytes).unwrap();
        let mut at = 0;
        let mut frames = Vec::new();
        while let Some((frame, used)) = decode(&bytes[at..], MAX).unwrap() {
            frames.push(frame);
            at += used;
        }
        prop_assert_eq!(at, bytes.len());
        prop_assert_eq!(frames.len(), 3);
        prop_assert_eq!(&frames[2], &Frame::Raft(RaftFrame { group: 2, message: b }));
    }
}

#[test]
fn a_length_over_the_limit_is_refused_from_the_header_alone() {
    let mut header = [0u8; HEADER_LEN];
    header[..4].copy_from_slice(&(MAX + 1).to_be_bytes());
    header[4] = FrameKind::Raft as u8;
    assert_eq!(
        check(&header, MAX),
        Err(WireError::FrameTooLarge {
            body_bytes: u64::from(MAX) + 1,
            max_bytes: MAX
        })
    );
    // Only the length is needed to refuse: the body is never waited for.
    assert!(matches!(
        decode(&header[..4], MAX),
        Ok(None) // fewer than HEADER_LEN bytes: nothing is known yet
    ));
}

#[test]
fn an_oversized_message_is_not_encoded() {
    let e = Entry {
        data: vec![0u8; 2048].into(),
        ..Entry::default()
    };
    let m = Message {
        entries: vec![e].into(),
        ..Message::default()
    };
    let mut out = vec![1, 2, 3];
    let err = encode_raft(0, &m, 1024, &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            WireError::FrameTooLarge {
                max_bytes: 1024,
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(out, [1, 2, 3], "nothing appended");
}

#[test]
fn an_unknown_kind_is_refused() {
    let mut bytes = hello_frame(&Hello::new(cluster(1), NodeId(1)));
    bytes[4] = 9;
    super::finish(&mut bytes, 0); // a valid CRC for the changed kind
    assert_eq!(decode(&bytes, MAX), Err(WireError::UnknownKind { kind: 9 }));
}

#[test]
fn a_hello_of_another_version_or_magic_is_refused() {
    let mut hello = Hello::new(cluster(1), NodeId(1));
    hello.version = 2;
    assert_eq!(
        decode(&hello_frame(&hello), MAX),
        Err(WireError::VersionUnsupported { theirs: 2, ours: 1 })
    );
    let mut bytes = hello_frame(&Hello::new(cluster(1), NodeId(1)));
    bytes[HEADER_LEN..HEADER_LEN + 4].copy_from_slice(b"HTTP");
    super::finish(&mut bytes, 0);
    assert_eq!(
        decode(&bytes, MAX),
        Err(WireError::BadMagic { found: *b"HTTP" })
    );
}

#[test]
fn a_hello_with_trailing_bytes_is_refused() {
    let mut bytes = hello_frame(&Hello::new(cluster(1), NodeId(1)));
    bytes.push(0);
    super::finish(&mut bytes, 0);
    assert!(matches!(
        decode(&bytes, MAX),
        Err(WireError::Malformed { .. })
    ));
}

#[test]
fn hello_check_names_what_is_wrong() {
    let members = [NodeId(1), NodeId(2), NodeId(3)];
    let expect = HelloExpect {
        cluster: cluster(1),
        me: NodeId(1),
        members: &members,
    };
    assert_eq!(Hello::new(cluster(1), NodeId(2)).check(&expect), Ok(()));
    assert_eq!(
        Hello::new(cluster(2), NodeId(2)).check(&expect),
        Err(WireError::ClusterMismatch {
            ours: cluster(1),
            theirs: cluster(2)
        })
    );
    assert_eq!(
        Hello::new(cluster(1), NodeId(1)).check(&expect),
        Err(WireError::SelfConnection { node: NodeId(1) })
    );
    assert_eq!(
        Hello::new(cluster(1), NodeId(4)).check(&expect),
        Err(WireError::UnknownNode { node: NodeId(4) })
    );
    let err = Hello::new(cluster(2), NodeId(2))
        .check(&expect)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "peer belongs to cluster 02020202020202020202020202020202, \
         this node to cluster 01010101010101010101010101010101"
    );
}

#[test]
fn a_raft_body_that_is_not_a_message_is_refused() {
    let mut bytes = Vec::new();
    let start = super::begin(&mut bytes, FrameKind::Raft);
    bytes.put_u64(0);
    bytes.extend_from_slice(&[0xff; 5]); // a field tag with no end
    super::finish(&mut bytes, start);
    assert!(matches!(
        decode(&bytes, MAX),
        Err(WireError::RaftDecode { .. })
    ));
}
