//! Raw-socket helpers for tests that talk to the broker byte by byte (hostile clients,
//! timeouts): a native preface, a produce frame, dribbling, and waiting for a close.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use pagurus::protocol::native;
use pagurus::protocol::record::encode_batch;
use pagurus::protocol::wire::Put;

use super::Broker;

/// Every counter of every core, summed, from the broker's "core stopped" log lines (a
/// counter at zero on every core is absent).
pub fn counters(broker: &mut Broker) -> HashMap<String, u64> {
    assert!(broker.terminate().success(), "broker exits cleanly");
    let log = broker.log_text();
    let mut sums = HashMap::new();
    // `counters=name=value name=value ...` (only the counters above zero).
    for line in log.lines().filter(|l| l.contains("core stopped")) {
        let Some((_, counters)) = line.split_once("counters=") else {
            continue;
        };
        for item in counters.split_whitespace() {
            let Some((name, value)) = item.split_once('=') else {
                continue;
            };
            if let Ok(value) = value.parse::<u64>() {
                *sums.entry(name.to_string()).or_insert(0) += value;
            }
        }
    }
    assert!(!sums.is_empty(), "no counters in the log:\n{log}");
    sums
}

/// Waits (up to `limit`) for the broker to close `stream`, reading and discarding whatever
/// it still sends; panics if it does not.
pub fn assert_closed_within(stream: &mut TcpStream, limit: Duration) {
    let deadline = Instant::now() + limit;
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "the broker did not close the connection");
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("the broker did not close the connection")
            }
            Err(e) => panic!("read failed: {e}"),
        }
    }
}

pub fn native_preface(addr: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(&native::preface(native::VERSION)).unwrap();
    let mut answer = [0u8; native::PREFACE_LEN];
    stream.read_exact(&mut answer).unwrap();
    stream
}

/// Sends `bytes` one at a time, `gap` apart, until the broker closes the connection;
/// returns how many it took. Panics if every byte was taken.
pub fn dribble(stream: &mut TcpStream, bytes: &[u8], gap: Duration) -> usize {
    for (i, byte) in bytes.iter().enumerate() {
        if stream.write_all(&[*byte]).is_err() {
            return i;
        }
        std::thread::sleep(gap);
        // A closed connection shows as end of stream before a write fails.
        if is_closed(stream) {
            return i + 1;
        }
    }
    panic!("the broker took all {} bytes", bytes.len());
}

/// Whether the broker closed `stream` (without waiting; bytes it sent are discarded).
pub fn is_closed(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut probe = [0u8; 64];
    let closed = match (&*stream).read(&mut probe) {
        Ok(n) => n == 0,
        Err(e) => e.kind() != ErrorKind::WouldBlock,
    };
    stream.set_nonblocking(false).unwrap();
    closed
}

/// A native produce frame of one batch, whole.
pub fn produce_frame(topic: &str, payload: &[u8]) -> Vec<u8> {
    let batch = encode_batch(0, b"", payload, 1);
    let mut body = Vec::new();
    body.put_u16(native::ApiKey::Produce as u16);
    body.put_u16(native::VERSION);
    body.put_u32(1);
    body.put_string(topic.as_bytes());
    body.put_u32(0);
    body.put_u32(1);
    native::push_produce_batch(&mut body, &batch);
    let mut frame = Vec::new();
    frame.put_u32(body.len() as u32);
    frame.extend_from_slice(&body);
    frame
}
