//! HermitMQ v1 clients over raw sockets, speaking HERMIT-WIRE.md's bytes exactly as
//! HermitMQ's SDK and load tools do.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use pagurus::limits::Limits;
use pagurus::protocol::hermit;
use pagurus::protocol::record::{self, BatchHeader, HEADER_LEN, encode_batch};

use super::Broker;

pub struct V1Producer {
    pub stream: TcpStream,
}

impl V1Producer {
    pub fn connect(broker: &Broker, topic: &str, partition: u32) -> V1Producer {
        V1Producer::connect_to(broker.addr, topic, partition)
    }

    /// A producer on `addr` (a shard port picks the core that accepts it).
    pub fn connect_to(addr: SocketAddr, topic: &str, partition: u32) -> V1Producer {
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        stream
            .write_all(&hermit::encode_producer_hello(topic, partition))
            .unwrap();
        V1Producer { stream }
    }

    /// Sends one batch (the client's offset field is garbage on purpose) and reads the ack.
    pub fn send(&mut self, batch: &[u8]) -> (u8, u64) {
        let mut batch = batch.to_vec();
        record::set_offset(&mut batch, 0xdead_beef);
        self.stream.write_all(&batch).unwrap();
        self.ack()
    }

    /// Reads one 9-byte ack: (status, base offset).
    pub fn ack(&mut self) -> (u8, u64) {
        let mut ack = [0u8; 9];
        self.stream.read_exact(&mut ack).unwrap();
        (ack[0], u64::from_be_bytes(ack[1..].try_into().unwrap()))
    }
}

/// A consumer of `group` on `addr`, its handshake sent.
pub fn consumer_at(addr: SocketAddr, group: &str, topic: &str, partition: u32) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream
        .write_all(&hermit::encode_consumer_hello(group, topic, partition))
        .unwrap();
    stream
}

pub fn consumer(broker: &Broker, group: &str, topic: &str, partition: u32) -> TcpStream {
    consumer_at(broker.addr, group, topic, partition)
}

/// HermitMQ's load tool: 100 records of 28 bytes packed in one payload.
pub fn load_batch(producer: usize, batch: usize) -> Vec<u8> {
    let mut payload = Vec::with_capacity(100 * 28);
    for record in 0..100usize {
        let mut r = [0u8; 28];
        r[..8].copy_from_slice(&(producer as u64).to_be_bytes());
        r[8..16].copy_from_slice(&(batch as u64).to_be_bytes());
        r[16..24].copy_from_slice(&(record as u64).to_be_bytes());
        payload.extend_from_slice(&r);
    }
    encode_batch(0, b"", &payload, 100)
}

/// Reads pushed batches until `records` logical records arrived; checks offsets are
/// contiguous from `first`. Returns the batches.
pub fn consume_records(stream: &mut TcpStream, first: u64, records: u64) -> Vec<Vec<u8>> {
    let limits = Limits::default();
    let mut batches = Vec::new();
    let mut expected = first;
    let mut got = 0;
    while got < records {
        let mut head = [0u8; HEADER_LEN];
        stream.read_exact(&mut head).unwrap();
        let header = BatchHeader::decode(&head, &limits).unwrap();
        assert_eq!(
            header.offset, expected,
            "batches arrive in order, without gaps"
        );
        let mut batch = head.to_vec();
        batch.resize(header.batch_len(), 0);
        stream.read_exact(&mut batch[HEADER_LEN..]).unwrap();
        expected += header.records();
        got += header.records();
        batches.push(batch);
    }
    batches
}
