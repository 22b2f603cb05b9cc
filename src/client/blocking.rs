//! A blocking native-protocol client over `std::net::TcpStream`.
//!
//! Requests can be pipelined: [`Client::send`] writes a request and returns its correlation
//! id; [`Client::receive`] reads the next response (the broker answers in request order).
//! The convenience methods send one request and wait for its answer.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::client::ClientError;
use crate::limits::Limits;
use crate::protocol::native::{
    self, ErrorCode, MetadataResponse, OffsetSpec, ProduceBatches, Request, ResponseHeader,
    TopicSettings,
};
use crate::protocol::record::{self, BatchHeader};

/// Largest response frame the client accepts.
pub const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

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

pub struct Client {
    stream: TcpStream,
    next_correlation_id: u32,
    out: Vec<u8>,
    body: Vec<u8>,
}

impl Client {
    /// Connects and exchanges prefaces.
    pub fn connect(addr: impl ToSocketAddrs) -> Result<Client, ClientError> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        let mut client = Client {
            stream,
            next_correlation_id: 1,
            out: Vec::new(),
            body: Vec::new(),
        };
        client.stream.write_all(&native::preface(native::VERSION))?;
        let mut preface = [0u8; native::PREFACE_LEN];
        client.stream.read_exact(&mut preface)?;
        let version =
            native::check_preface(&preface).map_err(|e| ClientError::Protocol(e.to_string()))?;
        if version != native::VERSION {
            return Err(ClientError::Protocol(format!(
                "broker speaks version {version}, not {}",
                native::VERSION
            )));
        }
        Ok(client)
    }

    pub fn set_read_timeout(&self, timeout: Option<Duration>) -> Result<(), ClientError> {
        Ok(self.stream.set_read_timeout(timeout)?)
    }

    /// The underlying socket, for tests that misbehave on purpose.
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends a request without waiting; returns its correlation id.
    pub fn send(&mut self, request: &Request<'_>) -> Result<u32, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        self.out.clear();
        native::encode_request(&mut self.out, correlation_id, request);
        self.stream.write_all(&self.out)?;
        Ok(correlation_id)
    }

    /// Reads the next response; returns its header, with the body in [`Client::body`].
    pub fn receive(&mut self) -> Result<ResponseHeader, ClientError> {
        let mut len = [0u8; 4];
        self.stream.read_exact(&mut len)?;
        let len = u32::from_be_bytes(len) as usize;
        if !(native::RESPONSE_HEADER_LEN..=RESPONSE_BYTES_MAX).contains(&len) {
            return Err(ClientError::Protocol(format!(
                "response frame of {len} bytes"
            )));
        }
        self.body.resize(len, 0);
        self.stream.read_exact(&mut self.body)?;
        let (header, _) = native::decode_response(&self.body)
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        Ok(header)
    }

    /// Body of the last response received (after its header).
    pub fn body(&self) -> &[u8] {
        &self.body[native::RESPONSE_HEADER_LEN..]
    }

    /// Sends a request and waits for its answer; a broker error becomes `Err`.
    fn call(&mut self, request: &Request<'_>) -> Result<(), ClientError> {
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
        if header.error != ErrorCode::None as u16 {
            return Err(ClientError::from_response(header.error, self.body()));
        }
        Ok(())
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
        native::decode_produce_response(self.body())
            .map_err(|e| ClientError::Protocol(e.to_string()))
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

    /// Fetches batches from `offset`, waiting up to `max_wait` for data.
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: u32,
        offset: u64,
        max_bytes: u32,
        max_wait: Duration,
    ) -> Result<Fetched, ClientError> {
        self.call(&Request::Fetch {
            topic: topic.as_bytes(),
            partition,
            offset,
            max_bytes,
            max_wait_ms: u32::try_from(max_wait.as_millis()).unwrap_or(u32::MAX),
        })?;
        let response = native::decode_fetch_response(self.body())
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        let limits = Limits {
            max_key_bytes: u64::MAX,
            max_payload_bytes: u64::MAX,
        };
        let mut batches = Vec::with_capacity(response.crcs.len());
        let mut rest = response.data;
        for &crc in &response.crcs {
            let header = record::check(rest, &limits)
                .map_err(|e| ClientError::Protocol(format!("fetched batch: {e}")))?;
            let (batch, tail) = rest.split_at(header.batch_len());
            if record::batch_crc(batch) != crc {
                return Err(ClientError::Crc {
                    offset: header.offset,
                });
            }
            batches.push(batch.to_vec());
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(ClientError::Protocol(format!(
                "{} bytes after the last fetched batch",
                rest.len()
            )));
        }
        Ok(Fetched {
            high_watermark: response.high_watermark,
            log_start_offset: response.log_start_offset,
            batches,
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
        native::decode_offset_response(self.body())
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    pub fn create_topic(&mut self, name: &str, settings: TopicSettings) -> Result<(), ClientError> {
        self.call(&Request::CreateTopic {
            name: name.as_bytes(),
            settings,
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
        native::decode_metadata_response(self.body())
            .map_err(|e| ClientError::Protocol(e.to_string()))
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
            Ok(()) => native::decode_offset_response(self.body())
                .map(Some)
                .map_err(|e| ClientError::Protocol(e.to_string())),
            Err(e) if e.code() == Some(ErrorCode::NoCommittedOffset) => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub fn list_groups(&mut self) -> Result<Vec<String>, ClientError> {
        self.call(&Request::ListGroups)?;
        native::decode_list_groups_response(self.body())
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }

    /// Per partition: committed offset, log end offset, lag.
    pub fn describe_group(
        &mut self,
        group: &str,
    ) -> Result<Vec<native::GroupPartition>, ClientError> {
        self.call(&Request::DescribeGroup {
            group: group.as_bytes(),
        })?;
        native::decode_describe_group_response(self.body())
            .map_err(|e| ClientError::Protocol(e.to_string()))
    }
}
