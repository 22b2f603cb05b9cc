//! The binary forms of [`Command`]s (a controller log entry's data) and of a
//! [`ClusterState`] snapshot. Big-endian; strings are a u16 length then UTF-8 bytes;
//! every count is checked against the bytes left before anything is allocated for it.
//!
//! A command: format version (u8, [`FORMAT_VERSION`]), tag (u8), then its fields:
//!
//! | tag | command          | fields |
//! |-----|------------------|--------|
//! | 1   | RegisterNode     | id (u16), client address, cluster address (strings), cores (u16) |
//! | 2   | SetLiveness      | node (u16), live (u8) |
//! | 3   | CreateTopic      | name, partitions (u32), replication factor (u16), settings |
//! | 4   | DeleteTopic      | name |
//! | 5   | SetTopicSettings | name, settings |
//! | 6   | SetLeaderHint    | topic, partition (u32), node (u16), core (u16) |
//! | 7   | AddMember        | id (u16), cluster address (string) (version 2) |
//! | 8   | RemoveMember     | id (u16) (version 2) |
//!
//! Settings: a count (u16), then each key and value (strings), in key order.
//!
//! A snapshot: format version (u8), node count (u32) and nodes (id, client address,
//! cluster address, cores, live), topic count (u32) and topics (name, replication factor,
//! settings, partition count (u32), then per partition a replica count (u16), replicas
//! (node u16, core u16) and a leader hint (u8 0 or 1, then node and core when 1), and
//! (version 2) its first partition Raft group (u64, 0: none)), then (version 2) member
//! count (u32) and members (id, cluster address), and the next partition group (u64).
//!
//! A later version keeps decoding every earlier one: entries written before an upgrade
//! stay in the log.

use std::collections::BTreeMap;

use super::{
    ClusterState, Command, FIRST_PARTITION_GROUP, NodeInfo, PartitionInfo, Replica, TopicInfo,
};
use crate::cluster::NodeId;
use crate::protocol::wire::{Malformed, Put, Reader};

/// The format this build writes. Version 2 added the members (tags 7 and 8 and the
/// snapshot's member list) and the partition Raft groups; version 1 bytes decode as
/// before, with no members and no groups (every topic then had one copy, so none).
pub const FORMAT_VERSION: u8 = 2;

/// Why bytes are not a command or a snapshot.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("format version {version} is newer than this build's {FORMAT_VERSION}")]
    UnknownVersion { version: u8 },
    #[error("unknown command tag {tag}")]
    UnknownCommand { tag: u8 },
    #[error("malformed {what}")]
    Malformed { what: &'static str },
}

impl From<Malformed> for DecodeError {
    fn from(m: Malformed) -> Self {
        DecodeError::Malformed { what: m.what }
    }
}

impl Command {
    /// This command's bytes. Strings are within the limits `ClusterState::check` applies
    /// (all below 64 KiB), which the proposer checked.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = vec![FORMAT_VERSION];
        match self {
            Command::RegisterNode {
                id,
                client_addr,
                cluster_addr,
                cores,
            } => {
                out.put_u8(1);
                out.put_u16(id.0);
                out.put_string(client_addr.as_bytes());
                out.put_string(cluster_addr.as_bytes());
                out.put_u16(*cores);
            }
            Command::SetLiveness { node, live } => {
                out.put_u8(2);
                out.put_u16(node.0);
                out.put_u8(u8::from(*live));
            }
            Command::CreateTopic {
                name,
                partitions,
                replication_factor,
                settings,
            } => {
                out.put_u8(3);
                out.put_string(name.as_bytes());
                out.put_u32(*partitions);
                out.put_u16(*replication_factor);
                put_settings(&mut out, settings);
            }
            Command::DeleteTopic { name } => {
                out.put_u8(4);
                out.put_string(name.as_bytes());
            }
            Command::SetTopicSettings { name, settings } => {
                out.put_u8(5);
                out.put_string(name.as_bytes());
                put_settings(&mut out, settings);
            }
            Command::SetLeaderHint {
                topic,
                partition,
                leader,
            } => {
                out.put_u8(6);
                out.put_string(topic.as_bytes());
                out.put_u32(*partition);
                put_replica(&mut out, *leader);
            }
            Command::AddMember { id, cluster_addr } => {
                out.put_u8(7);
                out.put_u16(id.0);
                out.put_string(cluster_addr.as_bytes());
            }
            Command::RemoveMember { id } => {
                out.put_u8(8);
                out.put_u16(id.0);
            }
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Command, DecodeError> {
        let mut r = Reader::new(bytes);
        let format = version(&mut r)?;
        let command = match r.u8("command tag")? {
            1 => Command::RegisterNode {
                id: NodeId(r.u16("node id")?),
                client_addr: string(&mut r, "client address")?,
                cluster_addr: string(&mut r, "cluster address")?,
                cores: r.u16("cores")?,
            },
            2 => Command::SetLiveness {
                node: NodeId(r.u16("node id")?),
                live: boolean(&mut r, "liveness")?,
            },
            3 => Command::CreateTopic {
                name: string(&mut r, "topic name")?,
                partitions: r.u32("partition count")?,
                replication_factor: r.u16("replication factor")?,
                settings: settings(&mut r)?,
            },
            4 => Command::DeleteTopic {
                name: string(&mut r, "topic name")?,
            },
            5 => Command::SetTopicSettings {
                name: string(&mut r, "topic name")?,
                settings: settings(&mut r)?,
            },
            6 => Command::SetLeaderHint {
                topic: string(&mut r, "topic name")?,
                partition: r.u32("partition")?,
                leader: replica(&mut r)?,
            },
            7 if format >= 2 => Command::AddMember {
                id: NodeId(r.u16("node id")?),
                cluster_addr: string(&mut r, "cluster address")?,
            },
            8 if format >= 2 => Command::RemoveMember {
                id: NodeId(r.u16("node id")?),
            },
            tag => return Err(DecodeError::UnknownCommand { tag }),
        };
        r.finish("command (trailing bytes)")?;
        Ok(command)
    }
}

impl ClusterState {
    /// The state's bytes, for a Raft snapshot.
    pub fn encode_snapshot(&self) -> Vec<u8> {
        let mut out = vec![FORMAT_VERSION];
        out.put_u32(self.nodes.len() as u32);
        for n in self.nodes.values() {
            out.put_u16(n.id.0);
            out.put_string(n.client_addr.as_bytes());
            out.put_string(n.cluster_addr.as_bytes());
            out.put_u16(n.cores);
            out.put_u8(u8::from(n.live));
        }
        out.put_u32(self.topics.len() as u32);
        for t in self.topics.values() {
            out.put_string(t.name.as_bytes());
            out.put_u16(t.replication_factor);
            put_settings(&mut out, &t.settings);
            out.put_u32(t.partitions.len() as u32);
            for p in &t.partitions {
                out.put_u16(p.replicas.len() as u16);
                for r in &p.replicas {
                    put_replica(&mut out, *r);
                }
                match p.leader_hint {
                    Some(r) => {
                        out.put_u8(1);
                        put_replica(&mut out, r);
                    }
                    None => out.put_u8(0),
                }
            }
            out.put_u64(t.group_base);
        }
        out.put_u32(self.members.len() as u32);
        for (id, addr) in &self.members {
            out.put_u16(id.0);
            out.put_string(addr.as_bytes());
        }
        out.put_u64(self.next_group);
        out
    }

    pub fn decode_snapshot(bytes: &[u8]) -> Result<ClusterState, DecodeError> {
        let mut r = Reader::new(bytes);
        let format = version(&mut r)?;
        let mut state = ClusterState::default();
        // A node takes at least 2 + 2 + 2 + 2 + 1 bytes, a topic 2 + 2 + 2 + 4.
        for _ in 0..count(&mut r, 9, "node count")? {
            let node = NodeInfo {
                id: NodeId(r.u16("node id")?),
                client_addr: string(&mut r, "client address")?,
                cluster_addr: string(&mut r, "cluster address")?,
                cores: r.u16("cores")?,
                live: boolean(&mut r, "liveness")?,
            };
            state.nodes.insert(node.id, node);
        }
        for _ in 0..count(&mut r, 10, "topic count")? {
            let topic = topic(&mut r, format)?;
            state.topics.insert(topic.name.clone(), topic);
        }
        if format >= 2 {
            // A member takes at least an id and a string length.
            for _ in 0..count(&mut r, 4, "member count")? {
                let id = NodeId(r.u16("member id")?);
                let addr = string(&mut r, "member address")?;
                state.members.insert(id, addr);
            }
            state.next_group = r.u64("next partition group")?;
            if state.next_group < FIRST_PARTITION_GROUP {
                return Err(DecodeError::Malformed {
                    what: "next partition group",
                });
            }
        }
        r.finish("snapshot (trailing bytes)")?;
        Ok(state)
    }
}

fn topic(r: &mut Reader<'_>, format: u8) -> Result<TopicInfo, DecodeError> {
    let name = string(r, "topic name")?;
    let replication_factor = r.u16("replication factor")?;
    let settings = settings(r)?;
    // A partition takes at least a replica count and a hint flag.
    let partitions = count(r, 3, "partition count")?;
    let mut placed = Vec::with_capacity(partitions);
    for _ in 0..partitions {
        let n = r.u16("replica count")? as usize;
        if n > r.remaining() / 4 {
            return Err(DecodeError::Malformed {
                what: "replica count",
            });
        }
        let replicas = (0..n).map(|_| replica(r)).collect::<Result<_, _>>()?;
        let leader_hint = if boolean(r, "leader hint flag")? {
            Some(replica(r)?)
        } else {
            None
        };
        placed.push(PartitionInfo {
            replicas,
            leader_hint,
        });
    }
    let group_base = match format {
        1 => 0,
        _ => r.u64("partition group")?,
    };
    Ok(TopicInfo {
        name,
        replication_factor,
        settings,
        partitions: placed,
        group_base,
    })
}

/// The format version of the bytes: any this build decodes.
fn version(r: &mut Reader<'_>) -> Result<u8, DecodeError> {
    match r.u8("format version")? {
        version @ 1..=FORMAT_VERSION => Ok(version),
        version => Err(DecodeError::UnknownVersion { version }),
    }
}

/// A u32 count of items of at least `min_item_bytes` each, refused when the bytes left
/// cannot hold that many.
fn count(
    r: &mut Reader<'_>,
    min_item_bytes: usize,
    what: &'static str,
) -> Result<usize, DecodeError> {
    let n = r.u32(what)? as usize;
    if n > r.remaining() / min_item_bytes {
        return Err(DecodeError::Malformed { what });
    }
    Ok(n)
}

fn string(r: &mut Reader<'_>, what: &'static str) -> Result<String, DecodeError> {
    let bytes = r.string(what)?;
    String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::Malformed { what })
}

fn boolean(r: &mut Reader<'_>, what: &'static str) -> Result<bool, DecodeError> {
    match r.u8(what)? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::Malformed { what }),
    }
}

fn replica(r: &mut Reader<'_>) -> Result<Replica, DecodeError> {
    Ok(Replica {
        node: NodeId(r.u16("replica node")?),
        core: r.u16("replica core")?,
    })
}

fn put_replica(out: &mut Vec<u8>, r: Replica) {
    out.put_u16(r.node.0);
    out.put_u16(r.core);
}

fn put_settings(out: &mut Vec<u8>, settings: &BTreeMap<String, String>) {
    out.put_u16(u16::try_from(settings.len()).expect("settings are limited to 64"));
    for (key, value) in settings {
        out.put_string(key.as_bytes());
        out.put_string(value.as_bytes());
    }
}

fn settings(r: &mut Reader<'_>) -> Result<BTreeMap<String, String>, DecodeError> {
    let n = r.u16("settings count")? as usize;
    if n > r.remaining() / 4 {
        return Err(DecodeError::Malformed {
            what: "settings count",
        });
    }
    let mut map = BTreeMap::new();
    for _ in 0..n {
        let key = string(r, "setting name")?;
        let value = string(r, "setting value")?;
        if map.insert(key, value).is_some() {
            return Err(DecodeError::Malformed {
                what: "setting name (repeated)",
            });
        }
    }
    Ok(map)
}
