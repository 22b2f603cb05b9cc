//! Requests: their types, decoding (broker) and encoding (clients).

use super::*;

/// A decoded request, borrowing from the frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Produce {
        topic: &'a [u8],
        partition: u32,
        batches: ProduceBatches<'a>,
    },
    Fetch {
        topic: &'a [u8],
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait_ms: u32,
    },
    ListOffsets {
        topic: &'a [u8],
        partition: u32,
        spec: OffsetSpec,
    },
    CreateTopic {
        name: &'a [u8],
        settings: TopicSettings,
        /// Copies of each partition; a request without it (an older client) asks 1.
        replication_factor: u16,
    },
    DeleteTopic {
        name: &'a [u8],
    },
    /// No names: every topic.
    Metadata {
        topics: Vec<&'a [u8]>,
    },
    CommitOffset {
        group: &'a [u8],
        topic: &'a [u8],
        partition: u32,
        offset: u64,
    },
    FetchOffset {
        group: &'a [u8],
        topic: &'a [u8],
        partition: u32,
    },
    ListGroups,
    /// What the node knows of its cluster: nodes, liveness, the controller leader.
    ClusterStatus,
    DescribeGroup {
        group: &'a [u8],
    },
    /// Run a compaction pass on one partition of a `cleanup = compact` topic now.
    Compact {
        topic: &'a [u8],
        partition: u32,
    },
    /// Join (or rejoin) a group whose partitions the broker assigns; answered once the
    /// member has its generation and partitions.
    JoinGroup(JoinGroup<'a>),
    Heartbeat {
        group: &'a [u8],
        member_id: &'a [u8],
        generation: i32,
    },
    LeaveGroup {
        group: &'a [u8],
        member_id: &'a [u8],
    },
    /// A commit by a member, fenced by its generation.
    CommitGroupOffset {
        group: &'a [u8],
        member_id: &'a [u8],
        generation: i32,
        topic: &'a [u8],
        partition: u32,
        offset: u64,
    },
    /// Delete an empty group and its offsets.
    DeleteGroup {
        group: &'a [u8],
    },
    /// Where a group's coordinator is (the node whose group and offset calls it takes).
    FindCoordinator {
        group: &'a [u8],
    },
    /// One step of a SCRAM login (`auth.rs`): the client's message for `mechanism`.
    Authenticate {
        mechanism: &'a [u8],
        token: &'a [u8],
    },
    /// Every user and its mechanisms (`admin.rs`).
    ListUsers,
    /// Creates a user, or replaces its credentials for the mechanisms given.
    SetUser {
        name: &'a [u8],
        credentials: Vec<WireCredential<'a>>,
    },
    DeleteUser {
        name: &'a [u8],
    },
    ListAcls,
    /// Adds (or removes) one ACL.
    ChangeAcl {
        add: bool,
        acl: WireAcl<&'a [u8]>,
    },
    /// Adds a node to the cluster's voters at its cluster address (`HOST:PORT`), or removes
    /// one (`cluster_addr` empty).
    ChangeMember {
        add: bool,
        node: u16,
        cluster_addr: &'a [u8],
    },
}

/// A native JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroup<'a> {
    pub group: &'a [u8],
    /// Empty on a first join.
    pub member_id: &'a [u8],
    /// Empty for a member that is not static.
    pub instance_id: &'a [u8],
    pub client_id: &'a [u8],
    pub session_timeout_ms: u32,
    pub rebalance_timeout_ms: u32,
    /// `range` or `roundrobin`.
    pub assignor: &'a [u8],
    pub topics: Vec<&'a [u8]>,
}

/// Most topics one member of a group subscribes to.
pub const GROUP_TOPICS_MAX: u32 = 1000;

/// The batches of a produce request: `count` times (crc u32, batch), all validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceBatches<'a> {
    pub count: u32,
    bytes: &'a [u8],
    limits: Limits,
}

impl<'a> ProduceBatches<'a> {
    pub fn iter(&self) -> impl Iterator<Item = (u32, &'a [u8])> + Clone + 'a {
        let mut rest = self.bytes;
        let limits = self.limits;
        (0..self.count).map(move |_| {
            let crc = u32::from_be_bytes(rest[..4].try_into().expect("validated"));
            let header = record::check(&rest[4..], &limits).expect("validated at decode");
            let (batch, tail) = rest[4..].split_at(header.batch_len());
            rest = tail;
            (crc, batch)
        })
    }

    /// Bytes of the batches (with their CRCs) as they sit in the frame.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Re-reads batches from bytes already validated by [`decode_request`] (e.g. after they
    /// crossed to another core).
    pub fn from_validated(count: u32, bytes: &'a [u8], limits: Limits) -> Self {
        ProduceBatches {
            count,
            bytes,
            limits,
        }
    }
}

/// Largest number of topics in one metadata request.
pub const METADATA_TOPICS_MAX: u32 = 10_000;
/// Largest number of batches in one produce request.
pub const PRODUCE_BATCHES_MAX: u32 = 100_000;

/// Decodes a request body (the frame after its length prefix).
pub fn decode_request<'a>(
    body: &'a [u8],
    limits: &Limits,
) -> Result<(RequestHeader, Request<'a>), (Option<RequestHeader>, DecodeError)> {
    let (header, rest) = RequestHeader::decode(body).map_err(|e| (None, e.into()))?;
    decode_request_body(&header, rest, limits)
        .map(|request| (header, request))
        .map_err(|e| (Some(header), e))
}

fn decode_request_body<'a>(
    header: &RequestHeader,
    body: &'a [u8],
    limits: &Limits,
) -> Result<Request<'a>, DecodeError> {
    let api = ApiKey::from_u16(header.api).ok_or(DecodeError::UnsupportedApi(header.api))?;
    if header.version != VERSION {
        return Err(DecodeError::UnsupportedVersion {
            api: header.api,
            version: header.version,
        });
    }
    let mut r = Reader::new(body);
    let request = match api {
        ApiKey::Produce => {
            let topic = r.string("topic")?;
            let partition = r.u32("partition")?;
            let count = r.u32("batch count")?;
            if count == 0 || count > PRODUCE_BATCHES_MAX {
                return Err(Malformed {
                    what: "batch count",
                }
                .into());
            }
            let bytes = r.rest();
            for _ in 0..count {
                r.u32("batch crc")?;
                let header = match record::check(r.rest(), limits) {
                    Err(RecordError::Incomplete { .. }) => {
                        return Err(Malformed { what: "batch" }.into());
                    }
                    other => other?,
                };
                r.bytes(header.batch_len(), "batch")?;
            }
            r.finish("produce request")?;
            Request::Produce {
                topic,
                partition,
                batches: ProduceBatches {
                    count,
                    bytes,
                    limits: *limits,
                },
            }
        }
        ApiKey::Fetch => Request::Fetch {
            topic: r.string("topic")?,
            partition: r.u32("partition")?,
            offset: r.u64("offset")?,
            max_bytes: r.u32("max bytes")?,
            max_wait_ms: r.u32("max wait")?,
        },
        ApiKey::ListOffsets => {
            let topic = r.string("topic")?;
            let partition = r.u32("partition")?;
            let kind = r.u8("offset spec")?;
            let timestamp = r.u64("timestamp")?;
            let spec = match kind {
                0 => OffsetSpec::Earliest,
                1 => OffsetSpec::Latest,
                2 => OffsetSpec::Timestamp(timestamp),
                _ => {
                    return Err(Malformed {
                        what: "offset spec",
                    }
                    .into());
                }
            };
            Request::ListOffsets {
                topic,
                partition,
                spec,
            }
        }
        ApiKey::CreateTopic => Request::CreateTopic {
            name: r.string("topic")?,
            settings: TopicSettings::read(&mut r)?,
            replication_factor: match r.remaining() {
                0 => 1,
                _ => r.u16("replication factor")?,
            },
        },
        ApiKey::DeleteTopic => Request::DeleteTopic {
            name: r.string("topic")?,
        },
        ApiKey::Metadata => {
            let count = r.u32("topic count")?;
            if count > METADATA_TOPICS_MAX {
                return Err(Malformed {
                    what: "topic count",
                }
                .into());
            }
            // Sized by the bytes actually there (a name takes at least its 2-byte length),
            // not by the count a client claims: found by fuzzing, a 24-byte request could
            // make the broker allocate 160 KB.
            let names_max = r.remaining() / 2;
            let mut topics = Vec::with_capacity((count as usize).min(names_max));
            for _ in 0..count {
                topics.push(r.string("topic")?);
            }
            Request::Metadata { topics }
        }
        ApiKey::CommitOffset => Request::CommitOffset {
            group: r.string("group")?,
            topic: r.string("topic")?,
            partition: r.u32("partition")?,
            offset: r.u64("offset")?,
        },
        ApiKey::FetchOffset => Request::FetchOffset {
            group: r.string("group")?,
            topic: r.string("topic")?,
            partition: r.u32("partition")?,
        },
        ApiKey::ListGroups => Request::ListGroups,
        ApiKey::ClusterStatus => Request::ClusterStatus,
        ApiKey::DescribeGroup => Request::DescribeGroup {
            group: r.string("group")?,
        },
        ApiKey::Compact => Request::Compact {
            topic: r.string("topic")?,
            partition: r.u32("partition")?,
        },
        ApiKey::JoinGroup => Request::JoinGroup(decode_join(&mut r)?),
        ApiKey::Heartbeat => Request::Heartbeat {
            group: r.string("group")?,
            member_id: r.string("member id")?,
            generation: r.u32("generation")? as i32,
        },
        ApiKey::LeaveGroup => Request::LeaveGroup {
            group: r.string("group")?,
            member_id: r.string("member id")?,
        },
        ApiKey::CommitGroupOffset => Request::CommitGroupOffset {
            group: r.string("group")?,
            member_id: r.string("member id")?,
            generation: r.u32("generation")? as i32,
            topic: r.string("topic")?,
            partition: r.u32("partition")?,
            offset: r.u64("offset")?,
        },
        ApiKey::DeleteGroup => Request::DeleteGroup {
            group: r.string("group")?,
        },
        ApiKey::FindCoordinator => Request::FindCoordinator {
            group: r.string("group")?,
        },
        ApiKey::Authenticate => {
            let mechanism = r.string("mechanism")?;
            let token = r.string("token")?;
            if token.len() > AUTH_TOKEN_BYTES_MAX {
                return Err(Malformed { what: "token" }.into());
            }
            Request::Authenticate { mechanism, token }
        }
        ApiKey::ListUsers => Request::ListUsers,
        ApiKey::SetUser => Request::SetUser {
            name: r.string("user name")?,
            credentials: read_credentials(&mut r)?,
        },
        ApiKey::DeleteUser => Request::DeleteUser {
            name: r.string("user name")?,
        },
        ApiKey::ListAcls => Request::ListAcls,
        ApiKey::ChangeAcl => Request::ChangeAcl {
            add: match r.u8("add")? {
                0 => false,
                1 => true,
                _ => return Err(Malformed { what: "add" }.into()),
            },
            acl: WireAcl::read(&mut r)?,
        },
        ApiKey::ChangeMember => Request::ChangeMember {
            add: match r.u8("add")? {
                0 => false,
                1 => true,
                _ => return Err(Malformed { what: "add" }.into()),
            },
            node: r.u16("node")?,
            cluster_addr: r.string("cluster address")?,
        },
    };
    r.finish("request")?;
    Ok(request)
}

fn decode_join<'a>(r: &mut Reader<'a>) -> Result<JoinGroup<'a>, Malformed> {
    let mut join = JoinGroup {
        group: r.string("group")?,
        member_id: r.string("member id")?,
        instance_id: r.string("instance id")?,
        client_id: r.string("client id")?,
        session_timeout_ms: r.u32("session timeout")?,
        rebalance_timeout_ms: r.u32("rebalance timeout")?,
        assignor: r.string("assignor")?,
        topics: Vec::new(),
    };
    let count = r.u32("topic count")?;
    if count > GROUP_TOPICS_MAX {
        return Err(Malformed {
            what: "topic count",
        });
    }
    // Sized by the bytes there, not by the count claimed (see Metadata).
    join.topics = Vec::with_capacity((count as usize).min(r.remaining() / 2));
    for _ in 0..count {
        join.topics.push(r.string("topic")?);
    }
    Ok(join)
}

/// Encodes a request frame (length prefix included) into `out`. For clients.
pub fn encode_request(out: &mut Vec<u8>, correlation_id: u32, request: &Request<'_>) {
    let start = begin_frame(out);
    let api = match request {
        Request::Produce { .. } => ApiKey::Produce,
        Request::Fetch { .. } => ApiKey::Fetch,
        Request::ListOffsets { .. } => ApiKey::ListOffsets,
        Request::CreateTopic { .. } => ApiKey::CreateTopic,
        Request::DeleteTopic { .. } => ApiKey::DeleteTopic,
        Request::Metadata { .. } => ApiKey::Metadata,
        Request::CommitOffset { .. } => ApiKey::CommitOffset,
        Request::FetchOffset { .. } => ApiKey::FetchOffset,
        Request::ListGroups => ApiKey::ListGroups,
        Request::ClusterStatus => ApiKey::ClusterStatus,
        Request::DescribeGroup { .. } => ApiKey::DescribeGroup,
        Request::Compact { .. } => ApiKey::Compact,
        Request::JoinGroup(_) => ApiKey::JoinGroup,
        Request::Heartbeat { .. } => ApiKey::Heartbeat,
        Request::LeaveGroup { .. } => ApiKey::LeaveGroup,
        Request::CommitGroupOffset { .. } => ApiKey::CommitGroupOffset,
        Request::DeleteGroup { .. } => ApiKey::DeleteGroup,
        Request::FindCoordinator { .. } => ApiKey::FindCoordinator,
        Request::Authenticate { .. } => ApiKey::Authenticate,
        Request::ListUsers => ApiKey::ListUsers,
        Request::SetUser { .. } => ApiKey::SetUser,
        Request::DeleteUser { .. } => ApiKey::DeleteUser,
        Request::ListAcls => ApiKey::ListAcls,
        Request::ChangeAcl { .. } => ApiKey::ChangeAcl,
        Request::ChangeMember { .. } => ApiKey::ChangeMember,
    };
    out.put_u16(api as u16);
    out.put_u16(VERSION);
    out.put_u32(correlation_id);
    match request {
        Request::Produce {
            topic,
            partition,
            batches,
        } => {
            out.put_string(topic);
            out.put_u32(*partition);
            out.put_u32(batches.count);
            out.extend_from_slice(batches.bytes);
        }
        Request::Fetch {
            topic,
            partition,
            offset,
            max_bytes,
            max_wait_ms,
        } => {
            out.put_string(topic);
            out.put_u32(*partition);
            out.put_u64(*offset);
            out.put_u32(*max_bytes);
            out.put_u32(*max_wait_ms);
        }
        Request::ListOffsets {
            topic,
            partition,
            spec,
        } => {
            out.put_string(topic);
            out.put_u32(*partition);
            let (kind, ts) = match spec {
                OffsetSpec::Earliest => (0, 0),
                OffsetSpec::Latest => (1, 0),
                OffsetSpec::Timestamp(ts) => (2, *ts),
            };
            out.put_u8(kind);
            out.put_u64(ts);
        }
        Request::CreateTopic {
            name,
            settings,
            replication_factor,
        } => {
            out.put_string(name);
            settings.put(out);
            out.put_u16(*replication_factor);
        }
        Request::DeleteTopic { name } => out.put_string(name),
        Request::Metadata { topics } => {
            out.put_u32(u32::try_from(topics.len()).expect("topic count"));
            for topic in topics {
                out.put_string(topic);
            }
        }
        Request::CommitOffset {
            group,
            topic,
            partition,
            offset,
        } => {
            out.put_string(group);
            out.put_string(topic);
            out.put_u32(*partition);
            out.put_u64(*offset);
        }
        Request::FetchOffset {
            group,
            topic,
            partition,
        } => {
            out.put_string(group);
            out.put_string(topic);
            out.put_u32(*partition);
        }
        Request::ListGroups | Request::ClusterStatus => {}
        Request::DescribeGroup { group } => out.put_string(group),
        Request::Compact { topic, partition } => {
            out.put_string(topic);
            out.put_u32(*partition);
        }
        Request::JoinGroup(join) => {
            for field in [join.group, join.member_id, join.instance_id, join.client_id] {
                out.put_string(field);
            }
            out.put_u32(join.session_timeout_ms);
            out.put_u32(join.rebalance_timeout_ms);
            out.put_string(join.assignor);
            out.put_u32(u32::try_from(join.topics.len()).expect("topic count"));
            for topic in &join.topics {
                out.put_string(topic);
            }
        }
        Request::Heartbeat {
            group,
            member_id,
            generation,
        } => {
            out.put_string(group);
            out.put_string(member_id);
            out.put_u32(*generation as u32);
        }
        Request::LeaveGroup { group, member_id } => {
            out.put_string(group);
            out.put_string(member_id);
        }
        Request::CommitGroupOffset {
            group,
            member_id,
            generation,
            topic,
            partition,
            offset,
        } => {
            out.put_string(group);
            out.put_string(member_id);
            out.put_u32(*generation as u32);
            out.put_string(topic);
            out.put_u32(*partition);
            out.put_u64(*offset);
        }
        Request::DeleteGroup { group } | Request::FindCoordinator { group } => {
            out.put_string(group)
        }
        Request::Authenticate { mechanism, token } => {
            out.put_string(mechanism);
            out.put_string(token);
        }
        Request::ListUsers | Request::ListAcls => {}
        Request::SetUser { name, credentials } => {
            out.put_string(name);
            put_credentials(out, credentials);
        }
        Request::DeleteUser { name } => out.put_string(name),
        Request::ChangeAcl { add, acl } => {
            out.put_u8(u8::from(*add));
            acl.put(out);
        }
        Request::ChangeMember {
            add,
            node,
            cluster_addr,
        } => {
            out.put_u8(u8::from(*add));
            out.put_u16(*node);
            out.put_string(cluster_addr);
        }
    }
    end_frame(out, start);
}

/// Appends `(crc, batch)` to a produce request's batch bytes. For clients.
pub fn push_produce_batch(out: &mut Vec<u8>, batch: &[u8]) {
    out.put_u32(record::batch_crc(batch));
    out.extend_from_slice(batch);
}
