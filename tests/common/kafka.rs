//! A Kafka connection over a raw socket, for tests that build requests with the
//! `kafka-protocol` crate and read its responses byte by byte.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Encodable, StrBytes};

pub struct Conn {
    pub stream: TcpStream,
    pub correlation_id: i32,
}

impl Conn {
    pub fn connect(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        Conn {
            stream,
            correlation_id: 0,
        }
    }

    /// Sends one request and returns the response body after its header.
    pub fn call<R: Encodable>(&mut self, key: ApiKey, version: i16, request: &R) -> Bytes {
        self.correlation_id += 1;
        let mut body = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("wire-test")))
            .encode(&mut body, key.request_header_version(version))
            .unwrap();
        request.encode(&mut body, version).unwrap();
        self.send_raw(&body);
        let mut response = self.read_frame();
        let correlation_id = i32::from_be_bytes(response[..4].try_into().unwrap());
        assert_eq!(correlation_id, self.correlation_id);
        let header_len = if key.response_header_version(version) >= 1 {
            5
        } else {
            4
        };
        response.split_off(header_len)
    }

    pub fn send_raw(&mut self, body: &[u8]) {
        let mut frame = (body.len() as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(body);
        self.stream.write_all(&frame).unwrap();
    }

    pub fn read_frame(&mut self) -> Bytes {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size).unwrap();
        let mut response = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut response).unwrap();
        Bytes::from(response)
    }
}
