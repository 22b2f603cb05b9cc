//! The glommio client against a real broker: pipelining on one connection, the batching,
//! partitioning, shard-aware producer, and the consumer's long poll, seeks, group commits
//! and CRC checks.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{Broker, create_topic, on_glommio};
use pagurus::client::ClientError;
use pagurus::client::consume::StartAt;
use pagurus::client::glommio::{Client, Consumer, ConsumerConfig, Producer, ProducerConfig};
use pagurus::client::produce::{BatchLimits, ProduceFrame, key_partition};
use pagurus::protocol::native::{OffsetSpec, Request};
use pagurus::protocol::record;

fn start(cores: usize) -> (tempfile::TempDir, Broker) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), cores, &["--fsync", "never"]);
    (dir, broker)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn requests_from_many_tasks_are_pipelined_and_matched() {
    let (_dir, broker) = start(2);
    create_topic(&broker, "p", 1);
    let addr = broker.addr;
    let answers = on_glommio(move || async move {
        let client = Client::connect(addr).await.unwrap();
        // One task makes 300 requests of three kinds before awaiting any, then awaits
        // them newest first; three more tasks produce on the same connection meanwhile.
        let mut frame = ProduceFrame::new("p", 0, b"");
        let mut pending = Vec::new();
        for i in 0..300u32 {
            pending.push(match i % 3 {
                0 => {
                    frame.reset("p", 0, b"");
                    frame.push(&i.to_be_bytes());
                    ("produce", client.produce(&mut frame, 0))
                }
                1 => (
                    "offset",
                    client.request(&Request::ListOffsets {
                        topic: b"p",
                        partition: 0,
                        spec: OffsetSpec::Earliest,
                    }),
                ),
                _ => (
                    "metadata",
                    client.request(&Request::Metadata { topics: vec![b"p"] }),
                ),
            });
        }
        assert!(client.in_flight() > 0);
        let others: Vec<_> = (0..3)
            .map(|_| {
                let client = client.clone();
                glommio::spawn_local(async move {
                    let mut frame = ProduceFrame::new("p", 0, b"");
                    let mut offsets = Vec::new();
                    for _ in 0..100 {
                        frame.reset("p", 0, b"");
                        frame.push(b"other");
                        frame.push(b"other");
                        let reply = client.produce(&mut frame, 0).await.unwrap();
                        offsets.push(reply.produced().unwrap());
                    }
                    offsets
                })
            })
            .collect();
        let mut produced = Vec::new();
        while let Some((kind, reply)) = pending.pop() {
            let reply = reply.await.unwrap();
            match kind {
                "produce" => produced.push(reply.produced().unwrap()),
                "offset" => assert_eq!(reply.offset().unwrap(), 0),
                _ => assert_eq!(reply.metadata().unwrap().topics[0].name, "p"),
            }
        }
        for task in others {
            produced.extend(task.await);
        }
        assert_eq!(client.in_flight(), 0);
        produced
    });
    // Every produce got its own answer: the offset ranges tile 0..400 exactly.
    let mut ranges = answers;
    ranges.sort();
    let mut next = 0;
    for (base, end) in &ranges {
        assert_eq!(*base, next, "ranges {ranges:?}");
        next = *end;
    }
    assert_eq!(next, 100 + 300 * 2);
}

#[test]
fn producer_batches_partitions_by_key_and_routes_to_owners() {
    let (_dir, broker) = start(2);
    create_topic(&broker, "keyed", 4);
    let addr = broker.addr;
    let (stats, routes) = on_glommio(move || async move {
        let producer = Producer::connect(
            addr,
            ProducerConfig {
                batch: BatchLimits {
                    records_max: 10,
                    bytes_max: 1 << 20,
                    linger: Duration::from_millis(20),
                },
                in_flight: 4,
                shard_aware: true,
                ..Default::default()
            },
        )
        .await
        .unwrap();
        for i in 0..1000u32 {
            let key = format!("k{}", i % 20);
            producer
                .send("keyed", key.as_bytes(), format!("{key}:{i}").as_bytes())
                .await
                .unwrap();
        }
        // The linger sends the last, partial batches without a flush.
        glommio::timer::sleep(Duration::from_millis(200)).await;
        let stats = producer.flush().await.unwrap();
        (stats, producer.routes())
    });
    assert_eq!(stats.records_acked, 1000);
    assert!(stats.batches_acked >= 100, "batches of 10 at most");

    let mut client = broker.client();
    let mut seen: HashMap<String, Vec<u32>> = HashMap::new();
    for partition in 0..4 {
        let owner = routes.owner("keyed", partition).unwrap();
        assert_eq!(
            routes.address("keyed", partition),
            SocketAddr::from(([127, 0, 0, 1], broker.addr.port() + 1 + owner as u16)),
            "partition {partition} routes to its owner's port"
        );
        let fetched = client
            .fetch_batches("keyed", partition, 0, 1 << 20, Duration::ZERO)
            .unwrap();
        for batch in fetched.iter() {
            let key = String::from_utf8(batch.key().to_vec()).unwrap();
            assert_eq!(key_partition(key.as_bytes(), 4), partition);
            assert!(batch.header.record_count <= 10);
            for record in batch.records() {
                let value = String::from_utf8(record.value.to_vec()).unwrap();
                let (k, i) = value.split_once(':').unwrap();
                assert_eq!(k, key, "a batch holds one key's records");
                seen.entry(key.clone())
                    .or_default()
                    .push(i.parse().unwrap());
            }
        }
    }
    assert_eq!(seen.len(), 20);
    for (key, order) in seen {
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "records of {key} kept their order");
        assert_eq!(order.len(), 50);
    }
}

#[test]
fn consumer_long_polls_seeks_commits_and_resumes() {
    let (_dir, broker) = start(2);
    create_topic(&broker, "c", 2);
    let addr = broker.addr;
    on_glommio(move || async move {
        let config = ProducerConfig {
            batch: BatchLimits {
                records_max: 10,
                ..Default::default()
            },
            ..Default::default()
        };
        let producer = Producer::connect(addr, config).await.unwrap();
        for i in 0..100u32 {
            producer
                .send_to("c", 1, b"", &i.to_be_bytes())
                .await
                .unwrap();
        }
        producer.flush().await.unwrap();
        glommio::timer::sleep(Duration::from_millis(5)).await;
        let second_round_ms = now_ms();
        glommio::timer::sleep(Duration::from_millis(5)).await;
        for i in 100..120u32 {
            producer
                .send_to("c", 1, b"", &i.to_be_bytes())
                .await
                .unwrap();
        }
        producer.flush().await.unwrap();

        let group_config = ConsumerConfig {
            group: Some("g".into()),
            max_wait: Duration::from_millis(50),
            ..Default::default()
        };
        let mut consumer = Consumer::connect(addr, "c", 1, group_config.clone())
            .await
            .unwrap();
        assert_eq!(consumer.resume(StartAt::Earliest).await.unwrap(), 0);
        let values = |polled: &pagurus::client::glommio::Polled| -> Vec<(u64, u32)> {
            polled
                .records()
                .map(|r| (r.offset, u32::from_be_bytes(r.value.try_into().unwrap())))
                .collect()
        };
        let polled = consumer.poll().await.unwrap();
        assert_eq!(polled.high_watermark, 120);
        let got = values(&polled);
        assert_eq!(got.len(), 120);
        assert!(
            got.iter()
                .all(|&(offset, value)| offset == u64::from(value))
        );

        // Into the middle of a batch: records before the offset are skipped.
        assert_eq!(consumer.seek(StartAt::Offset(37)).await.unwrap(), 37);
        let got = values(&consumer.poll().await.unwrap());
        assert_eq!(got.first(), Some(&(37, 37)));
        assert_eq!(consumer.position(), 120);
        consumer.seek(StartAt::Offset(50)).await.unwrap();
        consumer.commit().await.unwrap();
        assert_eq!(consumer.committed(), Some(50));

        assert_eq!(
            consumer
                .seek(StartAt::TimestampMs(second_round_ms))
                .await
                .unwrap(),
            100
        );
        assert_eq!(consumer.seek(StartAt::Latest).await.unwrap(), 120);
        let empty = consumer.poll().await.unwrap();
        assert_eq!(empty.records().count(), 0, "nothing new after the wait");

        // A long poll returns when records arrive, well before its wait is up.
        let mut waiting = Consumer::connect(
            addr,
            "c",
            1,
            ConsumerConfig {
                max_wait: Duration::from_secs(20),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        waiting.seek(StartAt::Latest).await.unwrap();
        let poll = glommio::spawn_local(async move {
            let started = Instant::now();
            let polled = waiting.poll().await.unwrap();
            (values(&polled), started.elapsed())
        });
        glommio::timer::sleep(Duration::from_millis(100)).await;
        producer
            .send_to("c", 1, b"", &120u32.to_be_bytes())
            .await
            .unwrap();
        producer.flush().await.unwrap();
        let (got, waited) = poll.await;
        assert_eq!(got, vec![(120, 120)]);
        assert!(waited < Duration::from_secs(20), "woken by the produce");

        // A new consumer of the group resumes where the group committed.
        let mut again = Consumer::connect(addr, "c", 1, group_config).await.unwrap();
        assert_eq!(again.resume(StartAt::Earliest).await.unwrap(), 50);
        let got = values(&again.poll().await.unwrap());
        assert_eq!(got.first(), Some(&(50, 50)));
        assert_eq!(got.len(), 71);
    });
}

#[test]
fn a_corrupted_batch_on_disk_fails_its_crc_at_the_consumer() {
    let (dir, broker) = start(1);
    create_topic(&broker, "crc", 1);
    let mut client = broker.client();
    let mut frame = ProduceFrame::new("crc", 0, b"");
    for value in [&b"intact"[..], b"to be damaged"] {
        frame.reset("crc", 0, b"");
        frame.push(value);
        let id = client.send_frame(&mut frame, 0).unwrap();
        client.expect(id).unwrap();
    }
    // Flip the last byte of the second batch in the segment file (and so in the page
    // cache that sendfile reads from).
    let wal = dir
        .path()
        .join("data/topics/crc/0/00000000000000000000.wal");
    let mut bytes = std::fs::read(&wal).unwrap();
    *bytes.last_mut().unwrap() ^= 0x20;
    std::fs::write(&wal, &bytes).unwrap();

    let addr = broker.addr;
    let error = on_glommio(move || async move {
        let mut consumer = Consumer::connect(addr, "crc", 0, ConsumerConfig::default())
            .await
            .unwrap();
        match consumer.poll().await {
            Err(e) => e.to_string(),
            Ok(_) => "no error".into(),
        }
    });
    assert_eq!(error, ClientError::Crc { offset: 1 }.to_string());
    match client.fetch("crc", 0, 0, 1 << 20, Duration::ZERO) {
        Err(ClientError::Crc { offset }) => assert_eq!(offset, 1),
        other => panic!("the blocking client must refuse it too: {other:?}"),
    }
}

#[test]
fn requests_on_a_closed_connection_fail_cleanly() {
    let (_dir, mut broker) = start(1);
    let addr = broker.addr;
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        on_glommio(move || async move {
            let client = Client::connect(addr).await.unwrap();
            client.call(&Request::ListGroups).await.unwrap();
            ready_tx.send(()).unwrap();
            while rx.try_recv().is_err() {
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
            let first = client.call(&Request::ListGroups).await;
            let second = client.call(&Request::ListGroups).await;
            (first.is_err(), second.is_err())
        })
    });
    ready_rx.recv().unwrap();
    broker.kill();
    tx.send(()).unwrap();
    assert_eq!(handle.join().unwrap(), (true, true));
}

#[test]
fn a_producer_reports_a_lost_broker_and_reconnects() {
    let (_dir, mut broker) = start(1);
    create_topic(&broker, "r", 1);
    let addr = broker.addr;
    let (to_test, from_executor) = std::sync::mpsc::channel::<()>();
    let (to_executor, from_test) = std::sync::mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        on_glommio(move || async move {
            let wait_for_test = || async {
                while from_test.try_recv().is_err() {
                    glommio::timer::sleep(Duration::from_millis(10)).await;
                }
            };
            let producer = Producer::connect(addr, ProducerConfig::default())
                .await
                .unwrap();
            producer.send_to("r", 0, b"", b"before").await.unwrap();
            assert_eq!(producer.flush().await.unwrap().records_acked, 1);
            to_test.send(()).unwrap();
            wait_for_test().await; // the broker is down
            producer.send_to("r", 0, b"", b"lost").await.unwrap();
            let lost = producer.flush().await.map_err(|e| e.to_string());
            to_test.send(()).unwrap();
            wait_for_test().await; // the broker is back
            producer.send_to("r", 0, b"", b"after").await.unwrap();
            let after = producer.flush().await.map(|s| s.records_acked);
            (lost, after.map_err(|e| e.to_string()))
        })
    });
    from_executor.recv().unwrap();
    broker.kill();
    to_executor.send(()).unwrap();
    from_executor.recv().unwrap();
    broker.restart();
    to_executor.send(()).unwrap();
    let (lost, after) = handle.join().unwrap();
    assert!(lost.is_err(), "a batch with no broker to take it fails");
    assert_eq!(after, Ok(2), "the producer connected again");
    let fetched = broker
        .client()
        .fetch("r", 0, 0, 1 << 20, Duration::ZERO)
        .unwrap();
    let values: Vec<Vec<u8>> = fetched
        .batches
        .iter()
        .map(|b| b[record::HEADER_LEN + 4..].to_vec())
        .collect();
    assert_eq!(values, vec![b"before".to_vec(), b"after".to_vec()]);
}

/// Two glommio group members share a topic's partitions (the broker assigns them) and
/// read them; one leaves (it commits and leaves), the other takes over its partitions and
/// every record, old and new, is read.
#[test]
fn glommio_group_members_share_partitions_and_take_over_after_a_leave() {
    use pagurus::client::glommio::GroupConsumer;
    use pagurus::client::group::GroupConfig;
    use std::cell::{Cell, RefCell};
    use std::collections::BTreeSet;
    use std::rc::Rc;

    const PARTITIONS: u32 = 4;
    let (_dir, broker) = start(2);
    create_topic(&broker, "shared", PARTITIONS);
    let addr = broker.addr;
    on_glommio(move || async move {
        /// What a member task shows the test: its partitions, what it read, and when to stop.
        #[derive(Default)]
        struct Shown {
            partitions: RefCell<BTreeSet<(String, u32)>>,
            seen: RefCell<BTreeSet<String>>,
            stop: Cell<bool>,
        }
        let config = GroupConfig {
            session_timeout: Duration::from_secs(6),
            rebalance_timeout: Duration::from_secs(6),
            ..GroupConfig::new("gg", &["shared"])
        };
        let member = |shown: Rc<Shown>| {
            let config = config.clone();
            glommio::spawn_local(async move {
                let client = Client::connect(addr).await.unwrap();
                let timeout = Duration::from_secs(5);
                let mut consumer =
                    GroupConsumer::new(client, config, OffsetSpec::Earliest, timeout);
                consumer.set_max_bytes(256);
                while !shown.stop.get() {
                    if let Some(fetch) = consumer.poll(Duration::from_millis(50)).await.unwrap() {
                        let mut seen = shown.seen.borrow_mut();
                        seen.extend(
                            fetch
                                .records()
                                .map(|r| String::from_utf8(r.value.to_vec()).unwrap()),
                        );
                    }
                    *shown.partitions.borrow_mut() =
                        consumer.partitions().iter().cloned().collect();
                }
                consumer.close().await.unwrap();
            })
        };
        let (a, b) = (Rc::new(Shown::default()), Rc::new(Shown::default()));
        let task_a = member(Rc::clone(&a));
        let task_b = member(Rc::clone(&b));
        let deadline = Instant::now() + Duration::from_secs(60);
        let until = |what: &str, done: &dyn Fn() -> bool| {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            !done()
        };
        while until("two members with two partitions each", &|| {
            let (pa, pb) = (a.partitions.borrow(), b.partitions.borrow());
            pa.len() == 2 && pb.len() == 2 && pa.is_disjoint(&pb)
        }) {
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        let producer = Producer::connect(addr, ProducerConfig::default())
            .await
            .unwrap();
        let mut everything = BTreeSet::new();
        let round = async |name: &str, everything: &mut BTreeSet<String>| {
            for p in 0..PARTITIONS {
                for i in 0..50 {
                    let value = format!("{name}-{p}-{i}");
                    producer
                        .send_to("shared", p, b"", value.as_bytes())
                        .await
                        .unwrap();
                    everything.insert(value);
                }
            }
            producer.flush().await.unwrap();
        };
        round("first", &mut everything).await;
        let read_all = |everything: &BTreeSet<String>| {
            let (sa, sb) = (a.seen.borrow(), b.seen.borrow());
            everything.iter().all(|v| sa.contains(v) || sb.contains(v))
        };
        while until("both members reading their partitions", &|| {
            read_all(&everything) && !a.seen.borrow().is_empty() && !b.seen.borrow().is_empty()
        }) {
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        a.stop.set(true);
        task_a.await;
        while until("b taking over every partition", &|| {
            b.partitions.borrow().len() == 4
        }) {
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        round("second", &mut everything).await;
        while until("every record read", &|| read_all(&everything)) {
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
        b.stop.set(true);
        task_b.await;
    });
}
