//! Real sockets on 127.0.0.1, every transport on one glommio executor.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::LocalReceiver;
use raft::eraftpb::{Message, MessageType};

use super::*;
use crate::cluster::config::PeerAddr;
use crate::cluster::wire::{CONTROLLER_GROUP, Hello};

const CLUSTER: ClusterId = ClusterId([7; 16]);

/// Runs `body` on a fresh executor, failing the test if it takes more than 30 s.
pub(super) fn run<F, Fut>(body: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .spawn(move || async move {
            futures_lite::future::or(body(), async {
                glommio::timer::sleep(Duration::from_secs(30)).await;
                panic!("test timed out");
            })
            .await
        })
        .unwrap()
        .join()
        .unwrap();
}

/// Free ports on 127.0.0.1 (bound then released) for `n` nodes, ids 1..=n.
pub(super) fn peers(n: u16) -> Vec<Peer> {
    (1..=n)
        .map(|id| {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            Peer {
                node: NodeId(id),
                addr: PeerAddr {
                    host: "127.0.0.1".into(),
                    port,
                },
            }
        })
        .collect()
}

fn listen(peer: &Peer) -> SocketAddr {
    format!("127.0.0.1:{}", peer.addr.port).parse().unwrap()
}

fn config(me: u16, peers: &[Peer]) -> TransportConfig {
    let at = peers.iter().find(|p| p.node == NodeId(me)).unwrap();
    TransportConfig::new(CLUSTER, NodeId(me), listen(at), peers.to_vec())
}

pub(super) fn start(me: u16, peers: &[Peer]) -> Transport {
    Transport::start(config(me, peers)).unwrap()
}

fn message(from: u16, to: u16, index: u64) -> Message {
    Message {
        msg_type: MessageType::MsgAppend,
        from: u64::from(from),
        to: u64::from(to),
        index,
        ..Message::default()
    }
}

async fn receive(rx: &LocalReceiver<Received>) -> Received {
    futures_lite::future::or(async { rx.recv().await.expect("handler open") }, async {
        glommio::timer::sleep(Duration::from_secs(10)).await;
        panic!("no message within 10 s");
    })
    .await
}

/// Sends until one arrives: the link may still be connecting, or the queue to a peer that
/// was down may have been written into a dead connection.
async fn send_until_received(
    from: &Transport,
    me: u16,
    to: u16,
    rx: &LocalReceiver<Received>,
) -> Received {
    for index in 1.. {
        let _ = from.send(NodeId(to), CONTROLLER_GROUP, &message(me, to, index));
        let got = futures_lite::future::or(async { rx.recv().await }, async {
            glommio::timer::sleep(Duration::from_millis(50)).await;
            None
        })
        .await;
        if let Some(got) = got {
            return got;
        }
    }
    unreachable!()
}

#[test]
fn two_transports_exchange_messages() {
    run(|| async {
        let peers = peers(2);
        let (a, b) = (start(1, &peers), start(2, &peers));
        let (rx_a, rx_b) = (
            a.register(CONTROLLER_GROUP, 64),
            b.register(CONTROLLER_GROUP, 64),
        );
        for index in 1..=10 {
            a.send(NodeId(2), CONTROLLER_GROUP, &message(1, 2, index))
                .unwrap();
        }
        for index in 1..=10 {
            let got = receive(&rx_b).await;
            assert_eq!((got.from, got.group), (NodeId(1), CONTROLLER_GROUP));
            assert_eq!(got.message, message(1, 2, index), "in order");
        }
        b.send(NodeId(1), CONTROLLER_GROUP, &message(2, 1, 99))
            .unwrap();
        assert_eq!(receive(&rx_a).await.message, message(2, 1, 99));
        assert!(matches!(
            a.send(NodeId(3), CONTROLLER_GROUP, &message(1, 3, 1)),
            Err(TransportError::UnknownPeer { .. })
        ));
        assert_eq!(b.stats().delivered, 10);
        assert_eq!(a.stats().written, 10);
    });
}

#[test]
fn partition_groups_without_a_handler_go_to_the_partitions_channel_and_the_controllers_never() {
    run(|| async {
        let peers = peers(2);
        let (a, b) = (start(1, &peers), start(2, &peers));
        let seven = b.register(7, 64);
        let partitions = b.register_partitions(64);
        a.send(NodeId(2), 7, &message(1, 2, 1)).unwrap();
        a.send(NodeId(2), 1_000_000, &message(1, 2, 2)).unwrap();
        // The controller's group without its handler is dropped, not taken as a partition's.
        a.send(NodeId(2), CONTROLLER_GROUP, &message(1, 2, 3))
            .unwrap();
        a.send(NodeId(2), 42, &message(1, 2, 4)).unwrap();
        let got = receive(&seven).await;
        assert_eq!((got.group, got.message), (7, message(1, 2, 1)));
        let got = receive(&partitions).await;
        assert_eq!((got.group, got.message), (1_000_000, message(1, 2, 2)));
        let got = receive(&partitions).await;
        assert_eq!(
            (got.group, got.message),
            (42, message(1, 2, 4)),
            "in order, 0 skipped"
        );
        assert_eq!(b.stats().dropped_no_handler, 1);
        assert_eq!(b.stats().delivered, 3);
    });
}

#[test]
fn three_transports_each_reach_the_other_two_and_groups_are_kept_apart() {
    run(|| async {
        let mut peers = peers(3);
        // A name, resolved through the blocking pool when connecting.
        peers[2].addr.host = "localhost".into();
        let nodes: Vec<Transport> = (1..=3).map(|id| start(id, &peers)).collect();
        let controller: Vec<_> = nodes
            .iter()
            .map(|t| t.register(CONTROLLER_GROUP, 64))
            .collect();
        let partition: Vec<_> = nodes.iter().map(|t| t.register(7, 64)).collect();
        for from in 1..=3u16 {
            for to in (1..=3u16).filter(|&to| to != from) {
                let t = &nodes[usize::from(from - 1)];
                t.send(NodeId(to), CONTROLLER_GROUP, &message(from, to, 1))
                    .unwrap();
                t.send(NodeId(to), 7, &message(from, to, 2)).unwrap();
            }
        }
        for me in 1..=3u16 {
            let i = usize::from(me - 1);
            let mut froms = vec![
                receive(&controller[i]).await.from.0,
                receive(&controller[i]).await.from.0,
            ];
            froms.sort();
            assert_eq!(froms, (1..=3).filter(|&f| f != me).collect::<Vec<_>>());
            for _ in 0..2 {
                let got = receive(&partition[i]).await;
                assert_eq!((got.group, got.message.index), (7, 2));
            }
        }
    });
}

#[test]
fn a_peer_that_restarts_is_reconnected_to() {
    run(|| async {
        let peers = peers(2);
        let a = start(1, &peers);
        let b = start(2, &peers);
        let rx_b = b.register(CONTROLLER_GROUP, 64);
        send_until_received(&a, 1, 2, &rx_b).await;
        drop((b, rx_b));
        // The cancelled tasks close the listener and the connections when they next run.
        glommio::timer::sleep(Duration::from_millis(200)).await;
        let b = start(2, &peers);
        let rx_b = b.register(CONTROLLER_GROUP, 64);
        let got = send_until_received(&a, 1, 2, &rx_b).await;
        assert_eq!(got.from, NodeId(1));
        assert!(a.stats().connects >= 2, "{:?}", a.stats());
    });
}

#[test]
fn a_message_over_the_limit_is_not_sent() {
    run(|| async {
        let peers = peers(2);
        let a = Transport::start(TransportConfig {
            max_body_bytes: 64,
            ..config(1, &peers)
        })
        .unwrap();
        let big = Message {
            context: vec![0; 100].into(),
            ..message(1, 2, 1)
        };
        assert!(matches!(
            a.send(NodeId(2), CONTROLLER_GROUP, &big),
            Err(TransportError::Wire(WireError::FrameTooLarge { .. }))
        ));
    });
}

#[test]
fn a_full_queue_drops_and_counts() {
    run(|| async {
        let peers = peers(2);
        // Node 2 never starts: nothing drains the queue.
        let a = Transport::start(TransportConfig {
            queue_frames_max: 3,
            ..config(1, &peers)
        })
        .unwrap();
        for index in 1..=5 {
            let _ = a.send(NodeId(2), CONTROLLER_GROUP, &message(1, 2, index));
        }
        let stats = a.stats();
        assert_eq!((stats.queued, stats.dropped_queue_full), (3, 2));
        glommio::timer::sleep(Duration::from_millis(300)).await;
        assert!(a.stats().connect_failures >= 2, "retried: {:?}", a.stats());
    });
}

#[test]
fn a_frame_queued_too_long_is_dropped_not_written() {
    run(|| async {
        let peers = peers(2);
        let a = Transport::start(TransportConfig {
            queue_age_max: Duration::from_millis(100),
            ..config(1, &peers)
        })
        .unwrap();
        // Queued while node 2 is down, and stale by the time it comes up.
        a.send(NodeId(2), CONTROLLER_GROUP, &message(1, 2, 999))
            .unwrap();
        glommio::timer::sleep(Duration::from_millis(300)).await;
        let b = start(2, &peers);
        let rx_b = b.register(CONTROLLER_GROUP, 64);
        let got = send_until_received(&a, 1, 2, &rx_b).await;
        assert_ne!(got.message.index, 999, "the stale message was written");
        // The retries sent while the link was still coming up may have gone stale too.
        assert!(a.stats().dropped_stale >= 1, "{:?}", a.stats());
    });
}

#[test]
fn peers_of_another_cluster_are_told_apart_from_our_own() {
    run(|| async {
        let peers = peers(3);
        let other = ClusterId([8; 16]);
        let a = start(1, &peers);
        let in_other = |me| TransportConfig {
            cluster: other,
            ..config(me, &peers)
        };
        let _b = Transport::start(in_other(2)).unwrap();
        let _c = Transport::start(in_other(3)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while a.peer_clusters() == PeerClusters::Unknown {
            assert!(std::time::Instant::now() < deadline, "no hello seen");
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        // Two of three members (this node counted) name another cluster: a quorum.
        let found = loop {
            match a.peer_clusters() {
                PeerClusters::Foreign { theirs, nodes } => break (theirs, nodes),
                _ => glommio::timer::sleep(Duration::from_millis(20)).await,
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                a.peer_clusters()
            );
        };
        assert_eq!(found, (other, vec![NodeId(2), NodeId(3)]));
    });
}

/// A raw connection to `addr` that sends `hello`; returns what the transport answered
/// before closing (or after 5 s).
async fn raw_hello(addr: SocketAddr, hello: Hello, then: &[u8]) -> Vec<u8> {
    let mut stream = glommio::net::TcpStream::connect(addr).await.unwrap();
    let mut out = Vec::new();
    wire::encode_hello(&hello, &mut out);
    out.extend_from_slice(then);
    stream.write_all(&out).await.unwrap();
    let mut answer = Vec::new();
    let read = futures_lite::future::or(
        async {
            let _ = stream.read_to_end(&mut answer).await;
            true
        },
        async {
            glommio::timer::sleep(Duration::from_secs(5)).await;
            false
        },
    );
    assert!(read.await, "the transport did not close the connection");
    answer
}

#[test]
fn an_unknown_node_or_another_cluster_is_refused() {
    run(|| async {
        let peers = peers(2);
        let a = start(1, &peers);
        let addr = a.local_addr();
        let unknown = raw_hello(addr, Hello::new(CLUSTER, NodeId(9)), &[]).await;
        assert!(unknown.is_empty(), "no hello back to an unknown node");
        let other = raw_hello(addr, Hello::new(ClusterId([8; 16]), NodeId(2)), &[]).await;
        assert!(other.is_empty(), "no hello back to another cluster");
        let itself = raw_hello(addr, Hello::new(CLUSTER, NodeId(1)), &[]).await;
        assert!(
            itself.is_empty(),
            "no hello back to a node claiming to be this one"
        );
        // A frame larger than a hello before the hello: refused from its header, nothing
        // allocated for it.
        let mut stream = glommio::net::TcpStream::connect(addr).await.unwrap();
        let mut header = (1024 * 1024u32).to_be_bytes().to_vec();
        header.extend_from_slice(&[2, 0, 0, 0, 0]);
        stream.write_all(&header).await.unwrap();
        let mut answer = Vec::new();
        let _ = stream.read_to_end(&mut answer).await;
        assert!(answer.is_empty(), "no hello back to a big first frame");
        assert_eq!(a.stats().refused, 4);
        assert_eq!(a.stats().delivered, 0);
    });
}

#[test]
fn a_frame_over_the_limit_closes_the_connection() {
    run(|| async {
        let peers = peers(2);
        let a = Transport::start(TransportConfig {
            max_body_bytes: 1024,
            ..config(1, &peers)
        })
        .unwrap();
        let rx = a.register(CONTROLLER_GROUP, 8);
        // A header announcing 1 MiB: refused from the header, before any body is read.
        let mut header = (1024 * 1024u32).to_be_bytes().to_vec();
        header.extend_from_slice(&[2, 0, 0, 0, 0]);
        let answer = raw_hello(a.local_addr(), Hello::new(CLUSTER, NodeId(2)), &header).await;
        let (frame, used) = wire::decode(&answer, 1024).unwrap().expect("a hello back");
        assert_eq!(frame, wire::Frame::Hello(Hello::new(CLUSTER, NodeId(1))));
        assert_eq!(used, answer.len(), "nothing after the hello");
        assert_eq!(a.stats().protocol_errors, 1);
        drop(rx);
    });
}

#[test]
fn a_message_claiming_another_sender_closes_the_connection() {
    run(|| async {
        let peers = peers(3);
        let a = start(1, &peers);
        let rx = a.register(CONTROLLER_GROUP, 8);
        let mut forged = Vec::new();
        wire::encode_raft(CONTROLLER_GROUP, &message(3, 1, 1), 1024, &mut forged).unwrap();
        raw_hello(a.local_addr(), Hello::new(CLUSTER, NodeId(2)), &forged).await;
        assert_eq!(a.stats().protocol_errors, 1);
        assert_eq!(a.stats().delivered, 0);
        drop(rx);
    });
}

#[test]
fn a_silent_connection_is_closed_at_the_hello_timeout_and_a_stalled_frame_at_the_frame_timeout() {
    run(|| async {
        let peers = peers(2);
        let a = Transport::start(TransportConfig {
            hello_timeout: Duration::from_millis(200),
            frame_timeout: Duration::from_millis(300),
            ..config(1, &peers)
        })
        .unwrap();
        let silent_for = |mut stream: glommio::net::TcpStream| async move {
            let started = std::time::Instant::now();
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer).await;
            (started.elapsed(), answer)
        };
        let stream = glommio::net::TcpStream::connect(a.local_addr())
            .await
            .unwrap();
        let (waited, answer) = silent_for(stream).await;
        assert!(answer.is_empty());
        assert!(waited < Duration::from_secs(2), "closed after {waited:?}");
        assert_eq!(a.stats().refused, 1);

        // A good hello, then half a header: closed once the frame timeout passes.
        let mut stream = glommio::net::TcpStream::connect(a.local_addr())
            .await
            .unwrap();
        let mut out = Vec::new();
        wire::encode_hello(&Hello::new(CLUSTER, NodeId(2)), &mut out);
        out.extend_from_slice(&[0, 0]);
        stream.write_all(&out).await.unwrap();
        let (waited, answer) = silent_for(stream).await;
        assert!(!answer.is_empty(), "the hello back");
        assert!(
            (Duration::from_millis(250)..Duration::from_secs(2)).contains(&waited),
            "closed after {waited:?}"
        );
    });
}

#[test]
fn an_address_answered_by_another_node_is_not_used() {
    run(|| async {
        let mut peers = peers(3);
        // Node 1's list sends node 2's messages to node 3's address.
        let mut wrong = peers.clone();
        wrong[1].addr = peers[2].addr.clone();
        peers[1].addr.port = 1; // node 2 never starts
        let a = start(1, &wrong);
        let c = start(3, &peers);
        let rx_c = c.register(CONTROLLER_GROUP, 8);
        let _ = a.send(NodeId(2), CONTROLLER_GROUP, &message(1, 2, 1));
        glommio::timer::sleep(Duration::from_millis(500)).await;
        let stats = a.stats();
        assert!(stats.connect_failures >= 1, "{stats:?}");
        assert_eq!(stats.written, 0, "{stats:?}");
        assert_eq!(c.stats().delivered, 0);
        drop(rx_c);
    });
}

#[test]
fn backoff_doubles_from_the_minimum_to_the_cap_with_jitter() {
    let config = config(1, &peers(2));
    let mut jitter = link::Jitter::new(1);
    for _ in 0..100 {
        let first = link::backoff(&config, 0, &mut jitter);
        assert!((Duration::from_millis(25)..=Duration::from_millis(50)).contains(&first));
        let third = link::backoff(&config, 2, &mut jitter);
        assert!((Duration::from_millis(100)..=Duration::from_millis(200)).contains(&third));
        let capped = link::backoff(&config, 40, &mut jitter);
        assert!((Duration::from_secs(1)..=Duration::from_secs(2)).contains(&capped));
    }
}

#[test]
fn a_member_added_at_run_time_is_reached_and_a_removed_one_is_cut_off() {
    run(|| async {
        let all = peers(3);
        let two = &all[..2];
        let a = start(1, two);
        let a_rx = a.register(CONTROLLER_GROUP, 64);
        let c = start(3, &all);
        let c_rx = c.register(CONTROLLER_GROUP, 64);
        // Node 3 is no member of node 1 yet: its hellos are refused, nothing is delivered.
        let _ = c.send(NodeId(1), CONTROLLER_GROUP, &message(3, 1, 1));
        glommio::timer::sleep(Duration::from_millis(300)).await;
        assert!(a.stats().refused >= 1, "node 3's hello was not refused");
        assert_eq!(a.stats().delivered, 0);
        assert!(matches!(
            a.send(NodeId(3), CONTROLLER_GROUP, &message(1, 3, 1)),
            Err(TransportError::UnknownPeer { .. })
        ));
        a.set_peers(&all);
        assert_eq!(a.members(), vec![NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(send_until_received(&c, 3, 1, &a_rx).await.from, NodeId(3));
        assert_eq!(send_until_received(&a, 1, 3, &c_rx).await.from, NodeId(1));
        // Removed again: nothing more goes either way.
        a.set_peers(two);
        assert_eq!(a.members(), vec![NodeId(1), NodeId(2)]);
        assert!(matches!(
            a.send(NodeId(3), CONTROLLER_GROUP, &message(1, 3, 2)),
            Err(TransportError::UnknownPeer { .. })
        ));
        let delivered = a.stats().delivered;
        for index in 10..20 {
            let _ = c.send(NodeId(1), CONTROLLER_GROUP, &message(3, 1, index));
            glommio::timer::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            a.stats().delivered,
            delivered,
            "a removed member is cut off"
        );
        while let Some(got) = futures_lite::future::poll_once(a_rx.recv()).await.flatten() {
            assert!(got.message.index < 10, "{got:?}");
        }
    });
}
