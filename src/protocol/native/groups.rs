//! Group responses: list, describe (membership and offsets), join (the broker's assignment).

use super::*;

/// One partition of a group in a describe-group response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPartition {
    pub topic: String,
    pub partition: u32,
    pub committed_offset: u64,
    /// The partition's high watermark.
    pub log_end_offset: u64,
    pub lag: u64,
}

/// One member in a describe-group response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupMember {
    pub member_id: String,
    /// Empty for a member that is not static.
    pub instance_id: String,
    pub client_id: String,
    /// Its partitions, when the broker assigned them (native members).
    pub partitions: Vec<(String, u32)>,
}

/// A described group: its membership (state `Empty` and no members when nobody is in it)
/// and its committed offsets.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupDescription {
    pub state: String,
    pub protocol_type: String,
    pub protocol: String,
    pub generation: i32,
    pub leader: String,
    pub members: Vec<GroupMember>,
    pub partitions: Vec<GroupPartition>,
}

/// A native member's generation and partitions, the answer to a JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinedGroup {
    pub member_id: String,
    pub generation: i32,
    pub leader: String,
    pub partitions: Vec<(String, u32)>,
}

/// Most members or partitions a client accepts in one answer.
pub const GROUP_ITEMS_MAX: usize = 1 << 20;

/// List-groups response body: `[u32 count][string group]...`.
pub fn encode_list_groups_response(out: &mut Vec<u8>, correlation_id: u32, groups: &[String]) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u32(u32::try_from(groups.len()).expect("groups fit u32"));
    for group in groups {
        out.put_string(group.as_bytes());
    }
    end_frame(out, start);
}

pub fn decode_list_groups_response(body: &[u8]) -> Result<Vec<String>, Malformed> {
    let mut r = Reader::new(body);
    let count = r.u32("group count")? as usize;
    if count > r.remaining() {
        return Err(Malformed {
            what: "group count",
        });
    }
    let groups = (0..count)
        .map(|_| r.string("group").map(lossy))
        .collect::<Result<_, _>>()?;
    r.finish("list groups response")?;
    Ok(groups)
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn put_partitions(out: &mut Vec<u8>, partitions: &[(String, u32)]) {
    out.put_u32(u32::try_from(partitions.len()).expect("partitions fit u32"));
    for (topic, partition) in partitions {
        out.put_string(topic.as_bytes());
        out.put_u32(*partition);
    }
}

fn read_partitions(r: &mut Reader<'_>) -> Result<Vec<(String, u32)>, Malformed> {
    let count = r.u32("partition count")? as usize;
    // Each takes at least 6 bytes: refuse a count the body cannot hold before allocating.
    if count > GROUP_ITEMS_MAX || count * 6 > r.remaining() {
        return Err(Malformed {
            what: "partition count",
        });
    }
    (0..count)
        .map(|_| Ok((lossy(r.string("topic")?), r.u32("partition")?)))
        .collect()
}

/// Describe-group response body: `[string state][string protocol type][string protocol]
/// [u32 generation][string leader][u32 members]` then per member `[string member id]
/// [string instance id][string client id][u32 n]([string topic][u32 partition])*`, then
/// `[u32 count]` and per committed partition `[string topic][u32 partition][u64 committed]
/// [u64 log end][u64 lag]`.
pub fn encode_describe_group_response(
    out: &mut Vec<u8>,
    correlation_id: u32,
    group: &GroupDescription,
) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    for text in [&group.state, &group.protocol_type, &group.protocol] {
        out.put_string(text.as_bytes());
    }
    out.put_u32(group.generation as u32);
    out.put_string(group.leader.as_bytes());
    out.put_u32(u32::try_from(group.members.len()).expect("members fit u32"));
    for m in &group.members {
        for text in [&m.member_id, &m.instance_id, &m.client_id] {
            out.put_string(text.as_bytes());
        }
        put_partitions(out, &m.partitions);
    }
    out.put_u32(u32::try_from(group.partitions.len()).expect("partitions fit u32"));
    for p in &group.partitions {
        out.put_string(p.topic.as_bytes());
        out.put_u32(p.partition);
        out.put_u64(p.committed_offset);
        out.put_u64(p.log_end_offset);
        out.put_u64(p.lag);
    }
    end_frame(out, start);
}

pub fn decode_describe_group_response(body: &[u8]) -> Result<GroupDescription, Malformed> {
    let mut r = Reader::new(body);
    let mut group = GroupDescription {
        state: lossy(r.string("state")?),
        protocol_type: lossy(r.string("protocol type")?),
        protocol: lossy(r.string("protocol")?),
        generation: r.u32("generation")? as i32,
        leader: lossy(r.string("leader")?),
        ..GroupDescription::default()
    };
    let members = r.u32("member count")? as usize;
    if members > GROUP_ITEMS_MAX || members * 10 > r.remaining() {
        return Err(Malformed {
            what: "member count",
        });
    }
    for _ in 0..members {
        group.members.push(GroupMember {
            member_id: lossy(r.string("member id")?),
            instance_id: lossy(r.string("instance id")?),
            client_id: lossy(r.string("client id")?),
            partitions: read_partitions(&mut r)?,
        });
    }
    let count = r.u32("partition count")? as usize;
    if count > GROUP_ITEMS_MAX || count * 30 > r.remaining() {
        return Err(Malformed {
            what: "partition count",
        });
    }
    for _ in 0..count {
        group.partitions.push(GroupPartition {
            topic: lossy(r.string("topic")?),
            partition: r.u32("partition")?,
            committed_offset: r.u64("committed")?,
            log_end_offset: r.u64("log end")?,
            lag: r.u64("lag")?,
        });
    }
    r.finish("describe group response")?;
    Ok(group)
}

/// Join-group response body: `[string member id][u32 generation][string leader]
/// [u32 n]([string topic][u32 partition])*`.
pub fn encode_join_group_response(out: &mut Vec<u8>, correlation_id: u32, joined: &JoinedGroup) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_string(joined.member_id.as_bytes());
    out.put_u32(joined.generation as u32);
    out.put_string(joined.leader.as_bytes());
    put_partitions(out, &joined.partitions);
    end_frame(out, start);
}

pub fn decode_join_group_response(body: &[u8]) -> Result<JoinedGroup, Malformed> {
    let mut r = Reader::new(body);
    let joined = JoinedGroup {
        member_id: lossy(r.string("member id")?),
        generation: r.u32("generation")? as i32,
        leader: lossy(r.string("leader")?),
        partitions: read_partitions(&mut r)?,
    };
    r.finish("join group response")?;
    Ok(joined)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: &[u8]) -> &[u8] {
        decode_response(&frame[FRAME_LEN_BYTES..]).unwrap().1
    }

    #[test]
    fn describe_and_join_round_trip() {
        let group = GroupDescription {
            state: "Stable".into(),
            protocol_type: "pagurus".into(),
            protocol: "range".into(),
            generation: 3,
            leader: "a-1".into(),
            members: vec![GroupMember {
                member_id: "a-1".into(),
                instance_id: String::new(),
                client_id: "a".into(),
                partitions: vec![("t".into(), 0), ("t".into(), 2)],
            }],
            partitions: vec![GroupPartition {
                topic: "t".into(),
                partition: 1,
                committed_offset: 4,
                log_end_offset: 10,
                lag: 6,
            }],
        };
        let mut out = Vec::new();
        encode_describe_group_response(&mut out, 4, &group);
        assert_eq!(decode_describe_group_response(body(&out)).unwrap(), group);
        let joined = JoinedGroup {
            member_id: "m".into(),
            generation: 7,
            leader: "m".into(),
            partitions: vec![("t".into(), 1)],
        };
        let mut out = Vec::new();
        encode_join_group_response(&mut out, 5, &joined);
        assert_eq!(decode_join_group_response(body(&out)).unwrap(), joined);
    }

    #[test]
    fn counts_the_body_cannot_hold_are_refused() {
        let mut out = Vec::new();
        out.put_string(b"m");
        out.put_u32(1);
        out.put_string(b"m");
        out.put_u32(u32::MAX);
        assert!(decode_join_group_response(&out).is_err());
    }
}
