//! A blocking native-protocol client over `std::net::TcpStream`, driving the sans-IO
//! [`Session`] (correlation ids, in-flight requests, response matching).
//!
//! Requests can be pipelined: [`Client::send`] (or [`Client::send_frame`] for a
//! [`ProduceFrame`] built in place) writes a request and returns its correlation id;
//! [`Client::receive`] reads the next response, which answers the oldest request in flight.
//! The convenience methods send one request and wait for its answer.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::client::ClientError;
use crate::client::consume::FetchedBatches;
use crate::client::produce::ProduceFrame;
use crate::client::secure::{ConnectOptions, Login, Transport, host_of};
use crate::client::session::{self, Reply, Session, check_broker_preface};
use crate::limits::Limits;
use crate::protocol::native::{
    self, ErrorCode, GroupDescription, JoinGroup, JoinedGroup, MetadataResponse, OffsetSpec,
    ProduceBatches, Request, ResponseHeader, TopicSettings,
};
use crate::protocol::record::BatchHeader;

pub use crate::client::session::RESPONSE_BYTES_MAX;

mod admin;
mod group;
pub use group::{GroupConsumer, GroupFetch};

/// Batches returned by a fetch, each checked against its CRC.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    pub high_watermark: u64,
    pub log_start_offset: u64,
    /// Whole batches (29-byte header with offset, key, payload).
    pub batches: Vec<Vec<u8>>,
}

impl Fetched {
    /// Offset after the last batch fetched.
    pub fn next_offset(&self) -> Option<u64> {
        self.batches.last().map(|b| {
            let h = BatchHeader::decode(
                b,
                &Limits {
                    max_key_bytes: u64::MAX,
                    max_payload_bytes: u64::MAX,
                },
            )
            .expect("checked");
            h.offset + h.records()
        })
    }
}

/// A TCP connection to the first address of `addr` that accepts within `timeout`.
fn connect_tcp(addr: impl ToSocketAddrs, timeout: Duration) -> Result<TcpStream, ClientError> {
    let mut last_error = None;
    for addr in addr.to_socket_addrs()? {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(stream) => return Ok(stream),
            Err(e) => last_error = Some(e),
        }
    }
    Err(ClientError::Io(last_error.unwrap_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "the address resolved to nothing",
        )
    })))
}

pub struct Client {
    stream: Transport,
    session: Session<()>,
    out: Vec<u8>,
    /// The last response frame received (length prefix included) is `frame[..frame_len]`.
    frame: Vec<u8>,
    frame_len: usize,
    header: ResponseHeader,
}

impl Client {
    /// Connects and exchanges prefaces, with no time limit (tests and benches on
    /// loopback); tools use [`Client::connect_timeout`].
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        let stream = TcpStream::connect(addr)?;
        Client::greet(Transport::Plain(stream), None)
    }

    /// Connects to the first address of `addr` that accepts within `timeout`, and waits at
    /// most `timeout` for the broker's preface. Reads and writes on the connection then
    /// time out after `timeout` as well (change reads with [`Client::set_read_timeout`]),
    /// so a stopped broker or a server that says nothing fails the call instead of
    /// hanging it.
    pub fn connect_timeout(
        addr: impl ToSocketAddrs,
        timeout: Duration,
    ) -> Result<Client, ClientError> {
        let stream = connect_tcp(addr, timeout)?;
        Client::greet(Transport::Plain(stream), Some(timeout))
    }

    /// As [`Client::connect_timeout`] to `addr` (`host:port`), over TLS and logged in as
    /// `options` asks. A refused login is [`ErrorCode::AuthenticationFailed`] (the broker
    /// then closes the connection).
    pub fn connect_with(
        addr: &str,
        timeout: Duration,
        options: &ConnectOptions,
    ) -> Result<Client, ClientError> {
        let tcp = connect_tcp(addr, timeout)?;
        let transport = Transport::open(tcp, host_of(addr), options)?;
        let mut client = Client::greet(transport, Some(timeout))?;
        if let Some(login) = &options.login {
            client.login(login)?;
        }
        Ok(client)
    }

    /// Exchanges prefaces on a new connection; `timeout` bounds every read and write.
    fn greet(stream: Transport, timeout: Option<Duration>) -> Result<Client, ClientError> {
        let tcp = stream.tcp();
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(timeout)?;
        tcp.set_write_timeout(timeout)?;
        let mut client = Client {
            stream,
            session: Session::default(),
            out: Vec::new(),
            frame: Vec::new(),
            frame_len: 0,
            header: ResponseHeader {
                correlation_id: 0,
                error: 0,
            },
        };
        client.stream.write_all(&native::preface(native::VERSION))?;
        client.stream.flush()?;
        let mut preface = [0u8; native::PREFACE_LEN];
        match client.stream.read_exact(&mut preface) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(ClientError::NoGreeting {
                    timeout_ms: timeout.map_or(0, |t| t.as_millis() as u64),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                return Err(ClientError::Protocol(String::from(
                    "the server closed the connection instead of greeting: not a pagurus broker, or a TLS listener reached without TLS?",
                )));
            }
            Err(e) => return Err(e.into()),
        }
        if preface[..4] != native::PREFACE_MAGIC {
            return Err(ClientError::Protocol(format!(
                "the server answered {:?}, not a pagurus greeting: not a pagurus broker, or a TLS listener reached without TLS?",
                String::from_utf8_lossy(&preface)
            )));
        }
        check_broker_preface(&preface)?;
        Ok(client)
    }

    /// Logs in as `login` (SCRAM, two round trips); the broker proves it holds the user's
    /// credential too. Returns the login's lifetime in ms (0: it does not expire), after
    /// which the broker closes the connection at the next request.
    pub fn login(&mut self, login: &Login) -> Result<u64, ClientError> {
        use crate::security::scram::{client::ScramClient, new_nonce};
        let scram = |e: crate::security::scram::ScramError| {
            ClientError::Invalid(format!("login as {}: {e}", login.user))
        };
        let mechanism = login.mechanism.name().as_bytes();
        let nonce = new_nonce().map_err(scram)?;
        let (client, first) =
            ScramClient::start(login.mechanism, &login.user, &login.password, &nonce)
                .map_err(scram)?;
        let answer = self.authenticate(mechanism, first.as_bytes())?;
        let (client, last) = client.server_first(&answer.token).map_err(scram)?;
        let answer = self.authenticate(mechanism, last.as_bytes())?;
        client.server_final(&answer.token).map_err(scram)?;
        Ok(answer.session_lifetime_ms)
    }

    fn authenticate(
        &mut self,
        mechanism: &[u8],
        token: &[u8],
    ) -> Result<native::AuthenticateResponse, ClientError> {
        self.call(&Request::Authenticate { mechanism, token })?;
        native::decode_authenticate_response(self.body()).map_err(session::protocol)
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), ClientError> {
        Ok(self.stream.tcp().set_read_timeout(timeout)?)
    }

    /// The underlying socket, for tests that misbehave on purpose. Frames written here
    /// bypass the session: [`Client::receive`] hands their answers back unmatched while no
    /// request of the session is in flight.
    pub fn stream(&mut self) -> &mut Transport {
        &mut self.stream
    }

    /// Sends a request without waiting; returns its correlation id.
    pub fn send(&mut self, request: &Request<'_>) -> Result<u32, ClientError> {
        self.out.clear();
        let correlation_id = self.session.request(&mut self.out, request, ());
        self.stream.write_all(&self.out)?;
        Ok(correlation_id)
    }

    /// Sends a produce request built in place, timestamped `timestamp_ns` (0: the broker's
    /// clock), without waiting; returns its correlation id.
    pub fn send_frame(
        &mut self,
        frame: &mut ProduceFrame,
        timestamp_ns: u64,
    ) -> Result<u32, ClientError> {
        let correlation_id = self.session.register(());
        self.stream
            .write_all(frame.finish(correlation_id, timestamp_ns))?;
        self.stream.flush()?;
        Ok(correlation_id)
    }

    /// Requests sent and not answered yet.
    pub fn in_flight(&self) -> usize {
        self.session.in_flight()
    }

    /// Reads the next response; returns its header, with the body in [`Client::body`].
    pub fn receive(&mut self) -> Result<ResponseHeader, ClientError> {
        let mut prefix = [0u8; native::FRAME_LEN_BYTES];
        self.stream.read_exact(&mut prefix)?;
        let len = session::frame_len(prefix)?;
        // The buffer only grows, so only growth is ever zeroed.
        if self.frame.len() < len {
            self.frame.resize(len, 0);
        }
        self.frame_len = len;
        let frame = &mut self.frame[..len];
        frame[..native::FRAME_LEN_BYTES].copy_from_slice(&prefix);
        self.stream
            .read_exact(&mut frame[native::FRAME_LEN_BYTES..])?;
        self.header = if self.session.in_flight() == 0 {
            native::decode_response(&frame[native::FRAME_LEN_BYTES..])
                .map_err(session::protocol)?
                .0
        } else {
            self.session.accept(frame)?.1
        };
        Ok(self.header)
    }

    /// Body of the last response received (after its header).
    pub fn body(&self) -> &[u8] {
        &self.frame[native::FRAME_LEN_BYTES + native::RESPONSE_HEADER_LEN..self.frame_len]
    }

    /// The last response received.
    pub fn reply(&self) -> Reply<&[u8]> {
        Reply::new(self.header, &self.frame[..self.frame_len])
    }

    /// Sends a request and waits for its answer; a broker error becomes `Err`.
    pub(crate) fn call(&mut self, request: &Request<'_>) -> Result<(), ClientError> {
        let correlation_id = self.send(request)?;
        self.expect(correlation_id)
    }

    /// Receives the next response and checks it answers `correlation_id` without error.
    pub fn expect(&mut self, correlation_id: u32) -> Result<(), ClientError> {
        let header = self.receive()?;
        if header.correlation_id != correlation_id {
            return Err(ClientError::Protocol(format!(
                "answer to request {} arrived while waiting for {correlation_id}",
                header.correlation_id
            )));
        }
        self.reply().done()
    }

    /// Appends encoded batches; returns (base offset, next offset).
    pub fn produce(
        &mut self,
        topic: &str,
        partition: u32,
        batches: &[Vec<u8>],
    ) -> Result<(u64, u64), ClientError> {
        let correlation_id = self.send_produce(topic, partition, batches)?;
        self.expect(correlation_id)?;
        self.reply().produced()
    }

    /// Sends a produce request without waiting for its answer.
    pub fn send_produce(
        &mut self,
        topic: &str,
        partition: u32,
        batches: &[Vec<u8>],
    ) -> Result<u32, ClientError> {
        let mut bytes = Vec::with_capacity(batches.iter().map(|b| b.len() + 4).sum());
        for batch in batches {
            native::push_produce_batch(&mut bytes, batch);
        }
        let limits = Limits {
            max_key_bytes: u64::MAX,
            max_payload_bytes: u64::MAX,
        };
        let count = u32::try_from(batches.len())
            .map_err(|_| ClientError::Protocol("too many batches".into()))?;
        self.send(&Request::Produce {
            topic: topic.as_bytes(),
            partition,
            batches: ProduceBatches::from_validated(count, &bytes, limits),
        })
    }

    /// Fetches batches from `offset`, waiting up to `max_wait` for data; every batch is
    /// checked against its CRC. The batches borrow the client's receive buffer.
    pub fn fetch_batches(
        &mut self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<FetchedBatches<'_>, ClientError> {
        self.call(&Request::Fetch {
            topic: topic.as_bytes(),
            partition,
            offset,
            max_bytes,
            max_wait_ms: u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX),
        })?;
        FetchedBatches::decode(self.body())
    }

    /// [`Client::fetch_batches`], with the batches copied out.
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<Fetched, ClientError> {
        let fetched = self.fetch_batches(topic, partition, offset, max_bytes, max_wait)?;
        Ok(Fetched {
            high_watermark: fetched.high_watermark,
            log_start_offset: fetched.log_start_offset,
            batches: fetched.iter().map(|b| b.bytes.to_vec()).collect(),
        })
    }

    pub fn list_offsets(
        &mut self,
        topic: &str,
        partition: u32,
        spec: OffsetSpec,
    ) -> Result<u64, ClientError> {
        self.call(&Request::ListOffsets {
            topic: topic.as_bytes(),
            partition,
            spec,
        })?;
        self.reply().offset()
    }

    pub fn create_topic(&mut self, name: &str, settings: TopicSettings) -> Result<(), ClientError> {
        self.create_replicated_topic(name, settings, 1)
    }

    /// Creates a topic whose partitions have `replication_factor` copies (on a cluster).
    pub fn create_replicated_topic(
        &mut self,
        name: &str,
        settings: TopicSettings,
        replication_factor: u16,
    ) -> Result<(), ClientError> {
        self.call(&Request::CreateTopic {
            name: name.as_bytes(),
            settings,
            replication_factor,
        })
    }

    pub fn delete_topic(&mut self, name: &str) -> Result<(), ClientError> {
        self.call(&Request::DeleteTopic {
            name: name.as_bytes(),
        })
    }

    /// Runs a compaction pass on one partition of a `cleanup = compact` topic and waits for
    /// it (a pass over a large partition takes a while: give the client a long timeout).
    pub fn compact(
        &mut self,
        topic: &str,
        partition: u32,
    ) -> Result<native::CompactResponse, ClientError> {
        self.call(&Request::Compact {
            topic: topic.as_bytes(),
            partition,
        })?;
        native::decode_compact_response(self.body())
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Metadata of the named topics, or of all topics when `topics` is empty.
    pub fn metadata(&mut self, topics: &[&str]) -> Result<MetadataResponse, ClientError> {
        self.call(&Request::Metadata {
            topics: topics.iter().map(|t| t.as_bytes()).collect(),
        })?;
        self.reply().metadata()
    }

    /// Stores `offset` as the next offset `group` will consume from `topic`/`partition`.
    pub fn commit_offset(
        &mut self,
        group: &str,
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), ClientError> {
        self.call(&Request::CommitOffset {
            group: group.as_bytes(),
            topic: topic.as_bytes(),
            partition,
            offset,
        })
    }

    /// The group's committed offset, or `None` if it has none.
    pub fn fetch_offset(
        &mut self,
        group: &str,
        topic: &str,
        partition: u32,
    ) -> Result<Option<u64>, ClientError> {
        match self.call(&Request::FetchOffset {
            group: group.as_bytes(),
            topic: topic.as_bytes(),
            partition,
        }) {
            Ok(()) => self.reply().offset().map(Some),
            Err(e) if e.code() == Some(ErrorCode::NoCommittedOffset) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// What the node connected to knows of its cluster: its nodes, the controller leader
    /// and term (a one-node cluster for a broker started without the cluster flags).
    pub fn cluster_status(&mut self) -> Result<native::ClusterStatusResponse, ClientError> {
        self.call(&Request::ClusterStatus)?;
        self.reply().cluster_status()
    }

    /// Adds `node` to the cluster's voters at `cluster_addr` (`Some`) or removes it
    /// (`None`); the cluster id and the voters once applied on the node asked. Each step
    /// is a controller proposal of up to 10 s: give the client a read timeout to match.
    pub fn change_member(
        &mut self,
        node: u16,
        cluster_addr: Option<&str>,
    ) -> Result<native::MemberChangeResponse, ClientError> {
        self.call(&Request::ChangeMember {
            add: cluster_addr.is_some(),
            node,
            cluster_addr: cluster_addr.unwrap_or("").as_bytes(),
        })?;
        native::decode_member_change_response(self.body())
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Where `group`'s coordinator is: the node whose group and offset calls it takes
    /// (on a broker alone, always the one asked).
    pub fn find_coordinator(
        &mut self,
        group: &str,
    ) -> Result<native::CoordinatorResponse, ClientError> {
        self.call(&Request::FindCoordinator {
            group: group.as_bytes(),
        })?;
        native::decode_coordinator_response(self.body())
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    pub fn list_groups(&mut self) -> Result<Vec<String>, ClientError> {
        self.call(&Request::ListGroups)?;
        self.reply().groups()
    }

    /// The group's state and members, and per partition its committed offset, log end
    /// offset and lag.
    pub fn describe_group(&mut self, group: &str) -> Result<GroupDescription, ClientError> {
        self.call(&Request::DescribeGroup {
            group: group.as_bytes(),
        })?;
        self.reply().group()
    }

    /// Joins a group whose partitions the broker assigns; answers once the member has its
    /// generation and partitions (up to the rebalance timeout: the read timeout must be
    /// longer).
    pub fn join_group(&mut self, join: &JoinGroup<'_>) -> Result<JoinedGroup, ClientError> {
        self.call(&Request::JoinGroup(join.clone()))?;
        self.reply().joined()
    }

    pub fn heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        generation: i32,
    ) -> Result<(), ClientError> {
        self.call(&Request::Heartbeat {
            group: group.as_bytes(),
            member_id: member_id.as_bytes(),
            generation,
        })
    }

    pub fn leave_group(&mut self, group: &str, member_id: &str) -> Result<(), ClientError> {
        self.call(&Request::LeaveGroup {
            group: group.as_bytes(),
            member_id: member_id.as_bytes(),
        })
    }

    /// Commits as a member of `generation` (refused for another generation or a member
    /// the group no longer has).
    pub fn commit_group_offset(
        &mut self,
        member: (&str, &str, i32),
        topic: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), ClientError> {
        let (group, member_id, generation) = member;
        self.call(&Request::CommitGroupOffset {
            group: group.as_bytes(),
            member_id: member_id.as_bytes(),
            generation,
            topic: topic.as_bytes(),
            partition,
            offset,
        })
    }

    /// Deletes an empty group and its offsets.
    pub fn delete_group(&mut self, group: &str) -> Result<(), ClientError> {
        self.call(&Request::DeleteGroup {
            group: group.as_bytes(),
        })
    }
}
