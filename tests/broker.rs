//! The broker end to end: real processes, real sockets on 127.0.0.1, real files.

mod common;

use std::time::Duration;

use common::Broker;
use pagurus::protocol::native::{OffsetSpec, TopicSettings};
use pagurus::protocol::record::{self, BatchHeader, encode_batch};
use pagurus::shard::placement::partition_owner;

fn payload_of(batch: &[u8]) -> Vec<u8> {
    let header = BatchHeader::decode(batch, &Default::default()).unwrap();
    record::payload_of(batch, &header).to_vec()
}

#[test]
fn produce_and_fetch_across_cores_in_both_directions() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut admin = broker.client();
    admin
        .create_topic(
            "orders",
            TopicSettings {
                partitions: 8,
                ..Default::default()
            },
        )
        .unwrap();
    let partitions: Vec<u32> = (0..8).collect();
    let owned_by = |core: usize| {
        partitions
            .iter()
            .copied()
            .filter(move |&p| partition_owner("orders", p, 2) == core)
    };
    assert!(
        owned_by(0).count() > 0 && owned_by(1).count() > 0,
        "both cores own partitions"
    );

    // A client on each core's own port produces to the partitions of the *other* core, so
    // every produce and every fetch crosses the mesh, in both directions.
    for core in 0..2 {
        let mut client = broker.core_client(core);
        for partition in owned_by(1 - core) {
            for i in 0..5u8 {
                let batch = encode_batch(0, b"key", &[core as u8, partition as u8, i], 1);
                let (base, next) = client.produce("orders", partition, &[batch]).unwrap();
                assert_eq!((base, next), (u64::from(i), u64::from(i) + 1));
            }
            let fetched = client
                .fetch("orders", partition, 0, 1 << 20, Duration::ZERO)
                .unwrap();
            assert_eq!(fetched.high_watermark, 5);
            let payloads: Vec<Vec<u8>> = fetched.batches.iter().map(|b| payload_of(b)).collect();
            let expected: Vec<Vec<u8>> = (0..5u8)
                .map(|i| vec![core as u8, partition as u8, i])
                .collect();
            assert_eq!(payloads, expected);
        }
    }
    let metadata = admin.metadata(&["orders"]).unwrap();
    assert_eq!(metadata.core_ports.len(), 2);
    let topic = &metadata.topics[0];
    assert_eq!(topic.partitions.len(), 8);
    for (p, partition) in topic.partitions.iter().enumerate() {
        assert_eq!(
            usize::from(partition.owner_core),
            partition_owner("orders", p as u32, 2)
        );
        assert_eq!(partition.high_watermark, 5);
    }
}

#[test]
fn long_poll_fetch_wakes_when_data_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut producer = broker.client();
    producer
        .produce("events", 0, &[encode_batch(0, b"", b"first", 1)])
        .unwrap();
    let mut consumer = broker.client();
    let waiter = std::thread::spawn(move || {
        consumer
            .fetch("events", 0, 1, 1 << 20, Duration::from_secs(20))
            .unwrap()
    });
    std::thread::sleep(Duration::from_millis(300));
    producer
        .produce("events", 0, &[encode_batch(0, b"", b"second", 1)])
        .unwrap();
    let fetched = waiter.join().unwrap();
    assert_eq!(
        fetched.batches.len(),
        1,
        "the long poll returned with the new batch, not at its deadline"
    );
    assert_eq!(payload_of(&fetched.batches[0]), b"second");
}

#[test]
fn list_offsets_by_time_and_position() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let mut client = broker.client();
    for ts in [100u64, 200, 300] {
        client
            .produce("t", 0, &[encode_batch(ts, b"", b"x", 2)])
            .unwrap();
    }
    assert_eq!(
        client.list_offsets("t", 0, OffsetSpec::Earliest).unwrap(),
        0
    );
    assert_eq!(client.list_offsets("t", 0, OffsetSpec::Latest).unwrap(), 6);
    assert_eq!(
        client
            .list_offsets("t", 0, OffsetSpec::Timestamp(150))
            .unwrap(),
        2
    );
    assert_eq!(
        client
            .list_offsets("t", 0, OffsetSpec::Timestamp(999))
            .unwrap(),
        6
    );
}

#[test]
fn sigterm_keeps_every_acked_batch_and_leaves_clean_markers() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, &[]);
    let mut client = broker.client();
    client
        .create_topic(
            "t",
            TopicSettings {
                partitions: 4,
                ..Default::default()
            },
        )
        .unwrap();
    let mut acked = Vec::new();
    for i in 0..200u32 {
        let partition = i % 4;
        let (base, _) = client
            .produce("t", partition, &[encode_batch(0, b"", &i.to_be_bytes(), 1)])
            .unwrap();
        acked.push((partition, base, i));
    }
    drop(client);
    assert!(broker.terminate().success(), "exit 0 on SIGTERM");
    for partition in 0..4 {
        assert!(
            data.join(format!("topics/t/{partition}/clean-shutdown"))
                .exists(),
            "marker for partition {partition}"
        );
    }
    broker.restart();
    assert!(
        !data.join("topics/t/0/clean-shutdown").exists(),
        "the marker is consumed at start"
    );
    let mut client = broker.client();
    for (partition, base, i) in acked {
        let fetched = client
            .fetch("t", partition, base, 1, Duration::ZERO)
            .unwrap();
        assert_eq!(payload_of(&fetched.batches[0]), i.to_be_bytes());
    }
}

#[test]
fn kill_9_loses_no_acked_batch() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, &["--segment-bytes", "65536"]);
    let mut client = broker.client();
    let mut acked = Vec::new();
    for i in 0..300u32 {
        let (base, _) = client
            .produce("crash", 0, &[encode_batch(0, b"k", &[i as u8; 500], 1)])
            .unwrap();
        acked.push(base);
    }
    drop(client);
    broker.kill();
    broker.restart();
    let mut client = broker.client();
    let mut offset = 0;
    let mut seen = 0;
    while seen < acked.len() {
        let fetched = client
            .fetch("crash", 0, offset, 1 << 20, Duration::ZERO)
            .unwrap();
        assert!(
            !fetched.batches.is_empty(),
            "acked batch at offset {offset} missing after kill -9"
        );
        for batch in &fetched.batches {
            assert_eq!(payload_of(batch), vec![seen as u8; 500]);
            seen += 1;
        }
        offset = fetched.next_offset().unwrap();
    }
    // And the log is writable where it left off.
    assert_eq!(
        client
            .produce("crash", 0, &[encode_batch(0, b"", b"after", 1)])
            .unwrap()
            .0,
        300
    );
}

#[test]
fn retention_deletes_old_segments_and_reads_skip_forward() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut client = broker.client();
    let settings = TopicSettings {
        partitions: 1,
        segment_bytes: 4096,
        retention_bytes: 8192,
        ..Default::default()
    };
    client.create_topic("r", settings).unwrap();
    for i in 0..100u32 {
        client
            .produce("r", 0, &[encode_batch(0, b"", &[i as u8; 500], 1)])
            .unwrap();
    }
    // Retention runs every second on the owner core. A pass may have run while the
    // batches were still being produced or segments still being sealed (a slow disk), so
    // the next pass may delete more: wait until the log start holds still for longer
    // than two passes.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut last = (u64::MAX, std::time::Instant::now());
    let earliest = loop {
        let earliest = client.list_offsets("r", 0, OffsetSpec::Earliest).unwrap();
        if earliest != last.0 {
            last = (earliest, std::time::Instant::now());
        } else if earliest >= 80 && last.1.elapsed() > Duration::from_millis(2500) {
            break earliest;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "retention never settled (log start {earliest})"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // About 8 KiB (two closed segments of 7 batches, plus the active one) are kept.
    assert!((80..100).contains(&earliest), "earliest {earliest}");
    let err = client
        .fetch("r", 0, 0, 1 << 20, Duration::ZERO)
        .unwrap_err();
    assert_eq!(
        err.code(),
        Some(pagurus::protocol::native::ErrorCode::OffsetOutOfRange)
    );
    match err {
        pagurus::client::ClientError::Broker {
            earliest: e,
            latest,
            ..
        } => assert_eq!((e, latest), (earliest, 100)),
        other => panic!("{other:?}"),
    }
    let fetched = client
        .fetch("r", 0, earliest, 1 << 20, Duration::ZERO)
        .unwrap();
    assert_eq!(payload_of(&fetched.batches[0]), vec![earliest as u8; 500]);
}

#[test]
fn one_connection_serves_more_requests_than_a_task_has_wakers() {
    // glommio counts a task's wakers in an i16: every wait a connection abandons (each
    // request read races the shutdown signal) must give its waker back, or the broker
    // crashes after 32,768 requests on one connection.
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &["--fsync", "never"]);
    let mut client = broker.client();
    client
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    client
        .produce("w", 0, &[encode_batch(0, b"", b"x", 1)])
        .unwrap();
    for _ in 0..40_000 {
        assert_eq!(client.list_offsets("w", 0, OffsetSpec::Latest).unwrap(), 1);
    }
    // Long polls that time out abandon their wait on the partition, too.
    for _ in 0..200 {
        assert!(
            client
                .fetch("w", 0, 1, 1 << 20, Duration::from_millis(1))
                .unwrap()
                .batches
                .is_empty()
        );
    }
}

#[test]
fn sigterm_under_load_answers_or_refuses_and_loses_no_acked_batch() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, &[]);
    broker
        .client()
        .create_topic(
            "load",
            TopicSettings {
                partitions: 4,
                ..Default::default()
            },
        )
        .unwrap();
    let producers: Vec<_> = (0..4u32)
        .map(|p| {
            let mut client = broker.client();
            client
                .set_read_timeout(Some(Duration::from_secs(30)))
                .unwrap();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0u32.. {
                    let value = [p.to_be_bytes(), i.to_be_bytes()].concat();
                    match client.produce("load", p, &[encode_batch(0, b"", &value, 1)]) {
                        Ok((base, _)) => acked.push((base, value)),
                        // Refused with an answer while stopping, or the connection closed.
                        Err(_) => break,
                    }
                }
                (p, acked)
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(700));
    assert!(broker.terminate().success(), "exit 0 on SIGTERM under load");
    let acked: Vec<_> = producers.into_iter().map(|t| t.join().unwrap()).collect();
    for partition in 0..4 {
        assert!(
            data.join(format!("topics/load/{partition}/clean-shutdown"))
                .exists()
        );
    }
    broker.restart();
    let mut client = broker.client();
    let mut total = 0;
    for (partition, batches) in acked {
        assert!(
            !batches.is_empty(),
            "partition {partition} took appends before the stop"
        );
        for (offset, value) in batches {
            let fetched = client
                .fetch("load", partition, offset, 1, Duration::ZERO)
                .unwrap();
            assert_eq!(
                payload_of(&fetched.batches[0]),
                value,
                "acked batch at {partition}/{offset}"
            );
            total += 1;
        }
    }
    assert!(
        total > 100,
        "only {total} batches were acknowledged under load"
    );
}

#[test]
fn a_relative_data_dir_works_on_every_core() {
    // glommio's directory handles fail on relative paths; the broker makes the data
    // directory absolute at start.
    let relative =
        std::path::PathBuf::from(format!("target/relative-data-dir-{}", std::process::id()));
    std::fs::create_dir_all(&relative).unwrap();
    let broker = Broker::start_in(&relative.join("data"), 2, &[]);
    let mut client = broker.client();
    client
        .create_topic(
            "rel",
            TopicSettings {
                partitions: 4,
                ..Default::default()
            },
        )
        .unwrap();
    for partition in 0..4 {
        client
            .produce("rel", partition, &[encode_batch(0, b"", b"x", 1)])
            .unwrap();
    }
    drop(broker);
    let _ = std::fs::remove_dir_all(&relative);
}
