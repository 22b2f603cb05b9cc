//! HermitMQ v1 connections accepted on a core that does not own their partition are handed
//! to the owner after the handshake (`server::handoff`): they work end to end, none of their
//! batches crosses cores, the connection limit counts them once, and a stop while hand-offs
//! are under way stops cleanly. Connections are aimed at a core with its shard port.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::Broker;
use common::hermit::{V1Producer, consume_records, consumer_at};
use common::raw::counters;
use pagurus::protocol::hermit::{self, ACK_STORED};
use pagurus::protocol::record::{self, encode_batch};
use pagurus::shard::placement::partition_owner;

const CORES: usize = 2;

fn core_addr(broker: &Broker, core: usize) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], broker.addr.port() + 1 + core as u16))
}

/// The port of the core that does not own `topic`/0.
fn other_core(broker: &Broker, topic: &str) -> SocketAddr {
    core_addr(broker, 1 - partition_owner(topic, 0, CORES))
}

fn open_descriptors(broker: &Broker) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", broker.pid()))
        .unwrap()
        .count()
}

/// Waits until the broker holds at most `baseline` descriptors; panics if it keeps more.
fn assert_descriptors_back_to(broker: &Broker, baseline: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let open = open_descriptors(broker);
        if open <= baseline {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the broker keeps {open} descriptors, {baseline} before the connections"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn producers_and_consumers_on_the_other_core_move_to_the_owner() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), CORES, &["--fsync", "never"]);
    let topic = "handed";
    let owner = core_addr(&broker, partition_owner(topic, 0, CORES));
    // Warm up on the owner's port (served where accepted): the topic's files and the
    // owner's cached segment descriptor are open before the baseline is taken.
    let mut warm = V1Producer::connect_to(owner, topic, 0);
    assert_eq!(
        warm.send(&encode_batch(0, b"", b"warm", 1)),
        (ACK_STORED, 0)
    );
    let mut warm_consumer = consumer_at(owner, "warm", topic, 0);
    consume_records(&mut warm_consumer, 0, 1);
    drop((warm, warm_consumer));
    std::thread::sleep(Duration::from_millis(200));
    let baseline = open_descriptors(&broker);

    let other = other_core(&broker, topic);
    let mut live = consumer_at(other, "g", topic, 0);
    // The handshake and three batches in one write: the accepting core reads batch bytes
    // past the handshake, and they must reach the owner with the socket.
    let mut producer = TcpStream::connect(other).unwrap();
    producer
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut pipelined = hermit::encode_producer_hello(topic, 0);
    for i in 1..=3u8 {
        let mut batch = encode_batch(0, b"", &[i; 16], 1);
        record::set_offset(&mut batch, 0xdead_beef);
        pipelined.extend_from_slice(&batch);
    }
    producer.write_all(&pipelined).unwrap();
    let mut producer = V1Producer { stream: producer };
    for i in 1..=3u64 {
        assert_eq!(producer.ack(), (ACK_STORED, i), "pipelined batch {i}");
    }
    for i in 4..50u64 {
        let batch = encode_batch(0, b"", &[i as u8; 16], 1);
        assert_eq!(producer.send(&batch), (ACK_STORED, i));
    }
    let batches = consume_records(&mut live, 0, 50);
    assert_eq!(batches.len(), 50);
    assert_eq!(
        record::payload_of(&batches[2], &header(&batches[2])),
        &[2u8; 16]
    );
    drop((producer, live));
    assert_descriptors_back_to(&broker, baseline);

    let counters = counters(&mut broker);
    let get = |name: &str| counters.get(name).copied().unwrap_or(0);
    assert_eq!(get("connections_handed_off"), 2, "{counters:?}");
    assert_eq!(get("connections_adopted"), 2, "{counters:?}");
    assert_eq!(get("handoffs_declined"), 0, "{counters:?}");
    assert_eq!(
        get("mesh_produces"),
        0,
        "no batch crossed cores: {counters:?}"
    );
    assert_eq!(get("batches_in"), 50, "{counters:?}");
}

fn header(batch: &[u8]) -> record::BatchHeader {
    record::BatchHeader::decode(batch, &pagurus::limits::Limits::default()).unwrap()
}

/// Whether the broker closed `stream` without answering (as the connection limit does).
fn refused(stream: &mut TcpStream) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut ack = [0u8; 9];
    match stream.read(&mut ack) {
        Ok(0) => true,
        Err(e) if matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::BrokenPipe) => true,
        Ok(_) => false,
        Err(e) => panic!("no answer and no close: {e}"),
    }
}

/// Opens a producer and sends one batch; `Some` with it when the batch was stored.
fn try_producer(addr: SocketAddr, topic: &str) -> Option<V1Producer> {
    let mut stream = TcpStream::connect(addr).ok()?;
    let mut bytes = hermit::encode_producer_hello(topic, 0);
    bytes.extend_from_slice(&encode_batch(0, b"", b"x", 1));
    if stream.write_all(&bytes).is_err() || refused(&mut stream) {
        return None;
    }
    Some(V1Producer { stream })
}

/// A producer that is served within a few seconds of retrying; panics with `why` if none is.
fn served_soon(addr: SocketAddr, topic: &str, why: &str) -> V1Producer {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(producer) = try_producer(addr, topic) {
            return producer;
        }
        assert!(Instant::now() < deadline, "{why}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn the_connection_limit_counts_a_handed_off_connection_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(
        &dir.path().join("data"),
        CORES,
        &["--fsync", "never", "--max-connections", "2"],
    );
    let topic = "limited";
    let other = other_core(&broker, topic);
    // Two connections, both handed to the owner: the limit is reached, not exceeded. (The
    // harness's readiness probes give their slots back a moment after they close.)
    let first = served_soon(other, topic, "a first connection is refused");
    let _second = served_soon(
        other,
        topic,
        "a second connection is refused: counted twice",
    );
    assert!(
        try_producer(other, topic).is_none(),
        "a third connection is served: a handed-off one gave its slot up"
    );
    drop(first);
    // Its slot comes back once the owner sees it close.
    served_soon(
        other,
        topic,
        "a handed-off connection that closed keeps its slot",
    );
    let counters = counters(&mut broker);
    assert!(counters.get("connections_refused").copied().unwrap_or(0) >= 1);
    assert!(counters.get("connections_handed_off").copied().unwrap_or(0) >= 3);
}

#[test]
fn a_stop_while_hand_offs_are_under_way_stops_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), CORES, &["--fsync", "never"]);
    let topic = "stopping";
    let other = other_core(&broker, topic);
    // Served by the owner and idle when the stop comes: it must end at its batch boundary,
    // not hold the stop until the drain deadline.
    let mut idle = V1Producer::connect_to(other, topic, 0);
    assert_eq!(idle.send(&encode_batch(0, b"", b"idle", 1)).0, ACK_STORED);
    // Clients connecting and producing on the other core until the broker is gone.
    let running = Arc::new(AtomicBool::new(true));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let running = Arc::clone(&running);
            std::thread::spawn(move || {
                let mut served = 0u32;
                while running.load(Ordering::Relaxed) {
                    match try_producer(other, topic) {
                        Some(_) => served += 1,
                        None => std::thread::sleep(Duration::from_millis(1)),
                    }
                }
                served
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let counters = counters(&mut broker); // SIGTERM; asserts a clean exit
    running.store(false, Ordering::Relaxed);
    let served: u32 = clients.into_iter().map(|c| c.join().unwrap()).sum();
    assert!(served > 0, "no connection was served before the stop");
    let log = broker.log_text();
    assert!(log.contains("broker stopped cleanly"), "log:\n{log}");
    assert!(
        !log.contains("still open at the drain deadline"),
        "a connection held the stop; log:\n{log}"
    );
    assert!(
        counters.get("connections_handed_off").copied().unwrap_or(0) >= 1,
        "{counters:?}"
    );
    assert!(
        !counters.contains_key("connections_open"),
        "connections left open at the stop: {counters:?}"
    );
    let mut end = [0u8; 1];
    idle.stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    assert!(matches!(idle.stream.read(&mut end), Ok(0) | Err(_)));
}
