//! Consumer group offsets: durable across kill -9, lag reported against the log end.

mod common;

use std::io::{Read, Write};
use std::time::Duration;

use common::Broker;
use pagurus::config::BrokerConfig;
use pagurus::protocol::native::{ErrorCode, TopicSettings};
use pagurus::protocol::record::encode_batch;
use pagurus::shard::offsets::{encode_key, shard_of};
use pagurus::shard::placement::{OneNode, Place, Placement};

#[test]
fn offsets_survive_kill_9_and_lag_follows_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut client = broker.client();
    client
        .create_topic(
            "t",
            TopicSettings {
                partitions: 3,
                ..Default::default()
            },
        )
        .unwrap();
    for partition in 0..3 {
        for _ in 0..10 {
            client
                .produce("t", partition, &[encode_batch(0, b"", b"x", 1)])
                .unwrap();
        }
    }
    // Enough groups that their keys land in shards owned by both cores.
    let groups: Vec<String> = (0..16).map(|g| format!("group-{g}")).collect();
    let placement = OneNode::new(&BrokerConfig {
        cores: 2,
        ..BrokerConfig::default()
    });
    let owners: std::collections::HashSet<Place> = groups
        .iter()
        .map(|g| placement.offsets_owner(shard_of(&encode_key(g, "t", 0))))
        .collect();
    assert_eq!(owners.len(), 2, "commits go to both cores");
    for (g, group) in groups.iter().enumerate() {
        for partition in 0..3 {
            client
                .commit_offset(group, "t", partition, (g as u64 + partition as u64) % 10)
                .unwrap();
        }
    }
    assert_eq!(client.fetch_offset("nobody", "t", 0).unwrap(), None);
    drop(client);
    broker.kill();
    broker.restart();

    let mut client = broker.client();
    for (g, group) in groups.iter().enumerate() {
        for partition in 0..3 {
            assert_eq!(
                client.fetch_offset(group, "t", partition).unwrap(),
                Some((g as u64 + partition as u64) % 10)
            );
        }
    }
    let mut listed = client.list_groups().unwrap();
    listed.sort();
    let mut expected = groups.clone();
    expected.sort();
    assert_eq!(listed, expected);

    let lag = |client: &mut pagurus::client::blocking::Client| -> Vec<u64> {
        client
            .describe_group("group-3")
            .unwrap()
            .partitions
            .iter()
            .map(|p| p.lag)
            .collect()
    };
    // group-3 committed 3, 4, 5 on partitions 0, 1, 2 of a 10-record log.
    assert_eq!(lag(&mut client), vec![7, 6, 5]);
    client
        .produce("t", 1, &[encode_batch(0, b"", b"more", 4)])
        .unwrap();
    assert_eq!(lag(&mut client), vec![7, 10, 5], "lag grows with the log");
    client.commit_offset("group-3", "t", 1, 14).unwrap();
    assert_eq!(
        lag(&mut client),
        vec![7, 0, 5],
        "and shrinks as the group commits"
    );
    let described = client.describe_group("group-3").unwrap().partitions;
    assert_eq!(
        (described[1].committed_offset, described[1].log_end_offset),
        (14, 14)
    );
    assert_eq!(
        client.describe_group("nobody").unwrap_err().code(),
        Some(ErrorCode::UnknownGroup)
    );
    assert_eq!(
        client.commit_offset("../g", "t", 0, 1).unwrap_err().code(),
        Some(ErrorCode::InvalidName)
    );
}

#[test]
fn a_consumer_that_stops_reading_does_not_stall_its_core() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let mut client = broker.client();
    let chunk = vec![7u8; 1 << 20];
    for _ in 0..48 {
        client
            .produce("big", 0, &[encode_batch(0, b"", &chunk, 1)])
            .unwrap();
    }
    // Ask for 48 MiB and never read a byte of it: the broker's socket fills up.
    let mut stuck = broker.client();
    stuck
        .send(&pagurus::protocol::native::Request::Fetch {
            topic: b"big",
            partition: 0,
            offset: 0,
            max_bytes: 64 << 20,
            max_wait_ms: 0,
        })
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // The one core keeps serving everyone else.
    let mut other = broker.client();
    other
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    other
        .produce("small", 0, &[encode_batch(0, b"", b"hello", 1)])
        .unwrap();
    let fetched = other.fetch("small", 0, 0, 1 << 20, Duration::ZERO).unwrap();
    assert_eq!(fetched.batches.len(), 1);
    // And the stuck consumer still gets every byte once it reads.
    let mut total = 0usize;
    let mut buf = vec![0u8; 1 << 20];
    let stream = stuck.stream();
    stream
        .tcp()
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let expected = 48 * ((1 << 20) + 29);
    while total < expected {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "connection closed early after {total} bytes");
        total += n;
    }
    let _ = stream.write_all(&[]);
}

#[test]
fn a_recreated_topic_serves_its_new_data() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut client = broker.client();
    client
        .produce("tt", 0, &[encode_batch(0, b"", b"OLD", 1)])
        .unwrap();
    assert_eq!(
        client
            .fetch("tt", 0, 0, 1 << 20, Duration::ZERO)
            .unwrap()
            .batches
            .len(),
        1
    );
    client.delete_topic("tt").unwrap();
    client
        .produce("tt", 0, &[encode_batch(0, b"", b"NEW", 1)])
        .unwrap();
    let fetched = client.fetch("tt", 0, 0, 1 << 20, Duration::ZERO).unwrap();
    assert_eq!(&fetched.batches[0][29..], b"NEW");
}

#[test]
fn a_produce_behind_a_long_poll_is_stored_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 1, &[]);
    let mut pipelined = broker.client();
    pipelined
        .produce("y", 0, &[encode_batch(0, b"", b"first", 1)])
        .unwrap();
    pipelined
        .send(&pagurus::protocol::native::Request::Fetch {
            topic: b"y",
            partition: 0,
            offset: 1,
            max_bytes: 1 << 20,
            max_wait_ms: 20_000,
        })
        .unwrap();
    let produce = pipelined
        .send_produce("x", 0, &[encode_batch(0, b"", b"behind the poll", 1)])
        .unwrap();
    // Another client sees the produced batch while the long poll still holds the answer.
    let mut other = broker.client();
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        match other.fetch("x", 0, 0, 1 << 20, Duration::from_millis(100)) {
            Ok(f) if !f.batches.is_empty() => break,
            _ => assert!(
                std::time::Instant::now() < deadline,
                "the produce behind the poll never became visible"
            ),
        }
    }
    // The pipelined connection gets both answers, in order, once the poll ends.
    other
        .produce("y", 0, &[encode_batch(0, b"", b"wake", 1)])
        .unwrap();
    pipelined.expect(produce - 1).unwrap();
    pipelined.expect(produce).unwrap();
}
