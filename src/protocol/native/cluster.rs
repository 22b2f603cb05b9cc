//! ClusterStatus: what the node asked knows of its cluster (docs/PROTOCOL.md).
//!
//! Response body: `u16 node`, `u8 role`, `u64 term`, `u16 leader` (0: none known),
//! `u64 applied`, `u32 count`, then `count` × (`u16 id`, `u8 live`, `u16 cores`,
//! `string client address`, `string cluster address`), `u16 voter count`, then that many
//! `u16` voter ids.
//!
//! FindCoordinator: where a group's coordinator is. Response body: `u16 node`, `u16 core`,
//! `u8 here` (1: the node asked), `string host`, `u16 port` (that node's client address).
//!
//! ChangeMember: the cluster after a change of its members. Response body: `cluster id`
//! (16 bytes, what a joining node's `--cluster-join` takes), `u16 count`, then `count` ×
//! `u16` voter id.

use crate::protocol::native::{ErrorCode, begin_response, end_frame};
use crate::protocol::wire::{Malformed, Put, Reader};

/// Most nodes a response lists (the cluster's peer limit, with room).
pub const CLUSTER_NODES_MAX: usize = 1024;

/// A node as the answering node's controller state has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterNodeEntry {
    pub id: u16,
    pub live: bool,
    pub cores: u16,
    pub client_addr: String,
    /// Empty on a broker started without the cluster flags.
    pub cluster_addr: String,
}

/// The answer to ClusterStatus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatusResponse {
    /// The answering node (0: a broker started alone without `--node-id`).
    pub node: u16,
    /// 0 alone (no cluster flags), 1 follower, 2 pre-candidate, 3 candidate, 4 leader.
    pub role: u8,
    pub term: u64,
    /// The controller leader the answering node knows of; 0 when none.
    pub leader: u16,
    /// The last controller log entry applied on the answering node.
    pub applied: u64,
    pub nodes: Vec<ClusterNodeEntry>,
    /// The controller's voters as the answering node applied them, by id.
    pub voters: Vec<u16>,
}

pub fn encode_cluster_status_response(
    out: &mut Vec<u8>,
    correlation_id: u32,
    status: &ClusterStatusResponse,
) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u16(status.node);
    out.put_u8(status.role);
    out.put_u64(status.term);
    out.put_u16(status.leader);
    out.put_u64(status.applied);
    let nodes = &status.nodes[..status.nodes.len().min(CLUSTER_NODES_MAX)];
    out.put_u32(u32::try_from(nodes.len()).expect("at most CLUSTER_NODES_MAX"));
    for node in nodes {
        out.put_u16(node.id);
        out.put_u8(u8::from(node.live));
        out.put_u16(node.cores);
        out.put_string(node.client_addr.as_bytes());
        out.put_string(node.cluster_addr.as_bytes());
    }
    put_voters(out, &status.voters);
    end_frame(out, start);
}

pub fn decode_cluster_status_response(body: &[u8]) -> Result<ClusterStatusResponse, Malformed> {
    let mut r = Reader::new(body);
    let node = r.u16("node")?;
    let role = r.u8("role")?;
    let term = r.u64("term")?;
    let leader = r.u16("leader")?;
    let applied = r.u64("applied")?;
    let count = r.u32("node count")? as usize;
    // Each node takes at least 9 bytes: refuse a count the body cannot hold before
    // allocating for it.
    if count > CLUSTER_NODES_MAX || count.saturating_mul(9) > r.remaining() {
        return Err(Malformed { what: "node count" });
    }
    let mut nodes = Vec::with_capacity(count);
    for _ in 0..count {
        nodes.push(ClusterNodeEntry {
            id: r.u16("node id")?,
            live: r.u8("live")? != 0,
            cores: r.u16("cores")?,
            client_addr: lossy(r.string("client address")?),
            cluster_addr: lossy(r.string("cluster address")?),
        });
    }
    let voters = read_voters(&mut r)?;
    r.finish("cluster status response")?;
    Ok(ClusterStatusResponse {
        node,
        role,
        term,
        leader,
        applied,
        nodes,
        voters,
    })
}

/// The answer to FindCoordinator: the node (and its core) whose group and offset calls
/// the group takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorResponse {
    pub node: u16,
    pub core: u16,
    /// The coordinator is the node asked: keep sending the group's calls where this went.
    pub here: bool,
    /// The coordinator node's client host and main port (`--advertised-host` or as in
    /// `--cluster-peers`; the node's own listen address on a broker alone).
    pub host: String,
    pub port: u16,
}

pub fn encode_coordinator_response(
    out: &mut Vec<u8>,
    correlation_id: u32,
    coordinator: &CoordinatorResponse,
) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.put_u16(coordinator.node);
    out.put_u16(coordinator.core);
    out.put_u8(u8::from(coordinator.here));
    out.put_string(coordinator.host.as_bytes());
    out.put_u16(coordinator.port);
    end_frame(out, start);
}

pub fn decode_coordinator_response(body: &[u8]) -> Result<CoordinatorResponse, Malformed> {
    let mut r = Reader::new(body);
    let coordinator = CoordinatorResponse {
        node: r.u16("node")?,
        core: r.u16("core")?,
        here: r.u8("here")? != 0,
        host: lossy(r.string("host")?),
        port: r.u16("port")?,
    };
    r.finish("find coordinator response")?;
    Ok(coordinator)
}

/// Most voters a ChangeMember answer lists (the cluster's peer limit).
pub const VOTERS_MAX: usize = 128;

/// The answer to ChangeMember.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberChangeResponse {
    pub cluster_id: [u8; 16],
    /// The controller's voters once the change was applied, by id.
    pub voters: Vec<u16>,
}

pub fn encode_member_change_response(
    out: &mut Vec<u8>,
    correlation_id: u32,
    changed: &MemberChangeResponse,
) {
    let start = begin_response(out, correlation_id, ErrorCode::None);
    out.extend_from_slice(&changed.cluster_id);
    put_voters(out, &changed.voters);
    end_frame(out, start);
}

pub fn decode_member_change_response(body: &[u8]) -> Result<MemberChangeResponse, Malformed> {
    let mut r = Reader::new(body);
    let mut cluster_id = [0u8; 16];
    cluster_id.copy_from_slice(r.bytes(16, "cluster id")?);
    let voters = read_voters(&mut r)?;
    r.finish("member change response")?;
    Ok(MemberChangeResponse { cluster_id, voters })
}

/// `u16 count` then the ids; at most [`VOTERS_MAX`].
fn put_voters(out: &mut Vec<u8>, voters: &[u16]) {
    let voters = &voters[..voters.len().min(VOTERS_MAX)];
    out.put_u16(u16::try_from(voters.len()).expect("at most VOTERS_MAX"));
    for voter in voters {
        out.put_u16(*voter);
    }
}

/// A count the body cannot hold is refused before anything is allocated for it.
fn read_voters(r: &mut Reader<'_>) -> Result<Vec<u16>, Malformed> {
    let count = usize::from(r.u16("voter count")?);
    if count > VOTERS_MAX || count * 2 > r.remaining() {
        return Err(Malformed {
            what: "voter count",
        });
    }
    (0..count).map(|_| r.u16("voter")).collect()
}

fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::native::RESPONSE_HEADER_LEN;

    fn status() -> ClusterStatusResponse {
        ClusterStatusResponse {
            node: 2,
            role: 1,
            term: 7,
            leader: 3,
            applied: 41,
            nodes: (1..=3)
                .map(|id| ClusterNodeEntry {
                    id,
                    live: id != 1,
                    cores: 4,
                    client_addr: format!("10.0.0.{id}:9092"),
                    cluster_addr: format!("10.0.0.{id}:9100"),
                })
                .collect(),
            voters: vec![1, 2, 3],
        }
    }

    fn body(frame: &[u8]) -> &[u8] {
        &frame[4 + RESPONSE_HEADER_LEN..]
    }

    #[test]
    fn a_status_round_trips() {
        let mut frame = Vec::new();
        encode_cluster_status_response(&mut frame, 9, &status());
        assert_eq!(
            decode_cluster_status_response(body(&frame)).unwrap(),
            status()
        );
    }

    #[test]
    fn a_coordinator_round_trips_and_a_cut_one_is_refused() {
        let coordinator = CoordinatorResponse {
            node: 3,
            core: 1,
            here: false,
            host: "10.0.0.3".into(),
            port: 9092,
        };
        let mut frame = Vec::new();
        encode_coordinator_response(&mut frame, 4, &coordinator);
        let whole = body(&frame);
        assert_eq!(decode_coordinator_response(whole).unwrap(), coordinator);
        for cut in 0..whole.len() {
            assert!(
                decode_coordinator_response(&whole[..cut]).is_err(),
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn a_cut_or_overcounted_status_is_refused() {
        let mut frame = Vec::new();
        encode_cluster_status_response(&mut frame, 9, &status());
        let whole = body(&frame);
        for cut in 0..whole.len() {
            assert!(
                decode_cluster_status_response(&whole[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // A count the body cannot hold is refused before anything is allocated for it.
        let mut lying = whole[..21].to_vec();
        lying.extend_from_slice(&u32::MAX.to_be_bytes());
        let err = decode_cluster_status_response(&lying).unwrap_err();
        assert_eq!(err.what, "node count");
    }

    #[test]
    fn a_member_change_round_trips_and_a_cut_or_overcounted_one_is_refused() {
        let changed = MemberChangeResponse {
            cluster_id: *b"0123456789abcdef",
            voters: vec![1, 2, 4],
        };
        let mut frame = Vec::new();
        encode_member_change_response(&mut frame, 5, &changed);
        let whole = body(&frame);
        assert_eq!(decode_member_change_response(whole).unwrap(), changed);
        for cut in 0..whole.len() {
            assert!(
                decode_member_change_response(&whole[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut lying = whole[..16].to_vec();
        lying.extend_from_slice(&u16::MAX.to_be_bytes());
        let err = decode_member_change_response(&lying).unwrap_err();
        assert_eq!(err.what, "voter count");
    }
}
