//! A Kafka connection for the bench's glommio workers: requests written in order, answers
//! read in order (a Kafka broker answers a connection's requests in the order they came),
//! so a producer pipelines by sending several requests before it reads the first answer.
//!
//! The socket is all this module does: frames are encoded and decoded by [`super::codec`].
//! A response's size prefix is checked against the caller's limit before its buffer is
//! made, and every read and write has a deadline.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use ::glommio::net::TcpStream;
use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use kafka_protocol::messages::ApiKey;
use kafka_protocol::protocol::{Decodable, Encodable};

use super::codec::{self, KafkaBenchError};
use crate::protocol::kafka::frame;

pub struct Conn {
    stream: TcpStream,
    peer: SocketAddr,
    timeout: Duration,
    out: BytesMut,
    next_correlation_id: i32,
}

impl Conn {
    /// Connects within `timeout`, which then bounds every read and write.
    pub async fn connect(peer: SocketAddr, timeout: Duration) -> Result<Conn, KafkaBenchError> {
        let stream = TcpStream::connect_timeout(peer, timeout)
            .await
            .map_err(|e| KafkaBenchError::Io {
                what: "connect to",
                peer,
                source: io::Error::from(e),
            })?;
        stream.set_nodelay(true).map_err(|e| KafkaBenchError::Io {
            what: "set TCP_NODELAY on",
            peer,
            source: io::Error::from(e),
        })?;
        Ok(Conn {
            stream,
            peer,
            timeout,
            out: BytesMut::new(),
            next_correlation_id: 0,
        })
    }

    /// Encodes and sends one request; returns its correlation id, to read its answer with.
    pub async fn send<R: Encodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &R,
    ) -> Result<i32, KafkaBenchError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        self.out.clear();
        codec::encode_request(&mut self.out, api, version, correlation_id, request)?;
        let (stream, out, peer) = (&mut self.stream, &self.out, self.peer);
        within(self.timeout, "write to", peer, stream.write_all(out)).await?;
        Ok(correlation_id)
    }

    /// Reads the next answer, which must be the one to `correlation_id`: at most
    /// `max_bytes`, within the connection's timeout plus `extra_wait` (a fetch's long poll).
    pub async fn receive<R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        correlation_id: i32,
        max_bytes: u64,
        extra_wait: Duration,
    ) -> Result<R, KafkaBenchError> {
        let (peer, wait) = (self.peer, self.timeout + extra_wait);
        let stream = &mut self.stream;
        let mut prefix = [0u8; frame::SIZE_LEN];
        within(wait, "read from", peer, stream.read_exact(&mut prefix)).await?;
        let len = frame::body_len(&prefix, max_bytes)?;
        let mut body = vec![0u8; len];
        within(wait, "read from", peer, stream.read_exact(&mut body)).await?;
        codec::decode_response(api, version, correlation_id, Bytes::from(body))
    }

    /// One request and its answer.
    pub async fn call<Q: Encodable, R: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        request: &Q,
    ) -> Result<R, KafkaBenchError> {
        let correlation_id = self.send(api, version, request).await?;
        self.receive(
            api,
            version,
            correlation_id,
            codec::RESPONSE_BYTES_MAX,
            Duration::ZERO,
        )
        .await
    }
}

/// `io` within `limit`, or a timeout error naming `what` and `peer`.
async fn within<T>(
    limit: Duration,
    what: &'static str,
    peer: SocketAddr,
    io: impl Future<Output = io::Result<T>>,
) -> Result<T, KafkaBenchError> {
    let done = futures_lite::future::or(async { Some(io.await) }, async {
        ::glommio::timer::sleep(limit).await;
        None
    })
    .await;
    match done {
        Some(result) => result.map_err(|source| KafkaBenchError::Io { what, peer, source }),
        None => Err(KafkaBenchError::Timeout {
            what,
            peer,
            after: limit,
        }),
    }
}
