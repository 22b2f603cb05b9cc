//! The shard's request path, seen from outside: lazy opens are single-flight, pipelined
//! produces through the mesh keep request order across segment rolls, a failed topic
//! creation leaves nothing behind, and metadata and describe-group answer across cores.

mod common;

use std::sync::{Arc, Barrier};

use common::Broker;
use pagurus::protocol::native::{ErrorCode, TopicSettings};
use pagurus::protocol::record::encode_batch;
use pagurus::shard::offsets::{encode_key, shard_of};
use pagurus::shard::placement::partition_owner;

/// Bug 2: two first commits to one offsets shard both opened its log (one failed with
/// `File exists`, or one's repair truncated the other's mapped index). 96 first commits to
/// 96 new groups whose keys share one shard, all at once from both cores: all succeed.
#[test]
fn simultaneous_first_commits_to_one_offsets_shard_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let shard = shard_of(&encode_key("g-0", "t", 0));
    let groups: Vec<String> = (0..)
        .map(|i| format!("g-{i}"))
        .filter(|g| shard_of(&encode_key(g, "t", 0)) == shard)
        .take(96)
        .collect();
    let barrier = Arc::new(Barrier::new(groups.len()));
    let threads: Vec<_> = groups
        .iter()
        .enumerate()
        .map(|(i, group)| {
            // Half through the shard's owner, half through the other core (a mesh call).
            let mut client = broker.core_client(i % 2);
            let (barrier, group) = (Arc::clone(&barrier), group.clone());
            std::thread::spawn(move || {
                barrier.wait();
                client
                    .commit_offset(&group, "t", 0, 7)
                    .map_err(|e| e.to_string())
            })
        })
        .collect();
    let failed: Vec<String> = threads
        .into_iter()
        .filter_map(|t| t.join().unwrap().err())
        .collect();
    assert!(
        failed.is_empty(),
        "{} commits failed: {failed:?}",
        failed.len()
    );
    let mut client = broker.client();
    for group in &groups {
        assert_eq!(
            client.fetch_offset(group, "t", 0).unwrap(),
            Some(7),
            "{group}"
        );
    }
    assert!(!broker.log_text().contains("File exists"));
}

/// Bug 3: the owner ran each mesh call in its own task, and staging waits during a segment
/// roll, so pipelined produces from another core could take offsets out of request order.
/// Many pipelined produces through the non-owner core, over many rolls: every answer
/// continues the previous one.
#[test]
fn pipelined_remote_produces_keep_request_order_across_rolls() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &["--segment-bytes", "4096"]);
    let mut admin = broker.client();
    admin
        .create_topic(
            "ordered",
            TopicSettings {
                partitions: 1,
                ..Default::default()
            },
        )
        .unwrap();
    let other = 1 - partition_owner("ordered", 0, 2);
    let mut client = broker.core_client(other);
    let batch = encode_batch(0, b"", &[b'x'; 200], 1);
    let mut next = 0;
    for _round in 0..20 {
        // Under the broker's 256 queued requests per connection, so nothing blocks.
        let sent: Vec<u32> = (0..200)
            .map(|_| {
                client
                    .send_produce("ordered", 0, std::slice::from_ref(&batch))
                    .unwrap()
            })
            .collect();
        for correlation_id in sent {
            client.expect(correlation_id).unwrap();
            let (base, end) = client.reply().produced().unwrap();
            assert_eq!(base, next, "request {correlation_id} out of order");
            next = end;
        }
    }
    assert_eq!(next, 4000);
    let segments = std::fs::read_dir(dir.path().join("data/topics/ordered/0"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "wal")
        })
        .count();
    assert!(
        segments > 50,
        "the produces crossed many rolls ({segments} segments)"
    );
}

/// Bug 7: a creation that fails on one core (its partition directory cannot be made) must
/// leave no `topic.meta` behind: the topic exists neither now nor after a restart.
#[test]
fn failed_topic_creation_is_rolled_back() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut broker = Broker::start_in(&data, 2, &[]);
    // A file where partition 1's directory must go: its owner cannot open it.
    let topic_dir = data.join("topics/doomed");
    std::fs::create_dir_all(&topic_dir).unwrap();
    std::fs::write(topic_dir.join("1"), b"in the way").unwrap();
    let mut client = broker.client();
    let error = client
        .create_topic(
            "doomed",
            TopicSettings {
                partitions: 2,
                ..Default::default()
            },
        )
        .unwrap_err();
    // The owner could not make the partition's directory: a storage error, reported.
    assert_eq!(error.code(), Some(ErrorCode::StorageError), "{error}");
    let unknown = |client: &mut pagurus::client::blocking::Client| {
        let metadata = client.metadata(&["doomed"]).unwrap();
        assert_eq!(metadata.topics[0].error, ErrorCode::UnknownTopic as u16);
    };
    unknown(&mut client);
    assert!(
        !topic_dir.join("topic.meta").exists(),
        "topic.meta rolled back"
    );
    // The name is free again: a second creation works.
    client
        .create_topic(
            "doomed",
            TopicSettings {
                partitions: 2,
                ..Default::default()
            },
        )
        .unwrap();
    client.delete_topic("doomed").unwrap();
    drop(client);
    assert!(broker.terminate().success());
    broker.restart();
    unknown(&mut broker.client());
}

/// Metadata and DescribeGroup gather partitions owned by every core (one call per core).
#[test]
fn metadata_and_describe_group_cover_every_core() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let mut client = broker.client();
    client
        .create_topic(
            "wide",
            TopicSettings {
                partitions: 8,
                ..Default::default()
            },
        )
        .unwrap();
    for partition in 0..8 {
        for _ in 0..=partition {
            client
                .produce("wide", partition, &[encode_batch(0, b"", b"v", 1)])
                .unwrap();
        }
        client.commit_offset("grp", "wide", partition, 1).unwrap();
    }
    let metadata = client.metadata(&["wide"]).unwrap();
    let partitions = &metadata.topics[0].partitions;
    assert_eq!(partitions.len(), 8);
    let owners: std::collections::HashSet<u16> = partitions.iter().map(|p| p.owner_core).collect();
    assert_eq!(owners.len(), 2, "partitions on both cores");
    for (partition, p) in partitions.iter().enumerate() {
        assert_eq!(p.high_watermark, partition as u64 + 1);
        assert_eq!(
            p.owner_core as usize,
            partition_owner("wide", partition as u32, 2)
        );
    }
    let described = client.describe_group("grp").unwrap().partitions;
    assert_eq!(described.len(), 8);
    for p in described {
        assert_eq!(p.log_end_offset, u64::from(p.partition) + 1);
        assert_eq!(p.lag, u64::from(p.partition));
    }
}

/// Produces through the mesh while the broker shuts down: every request the broker answers
/// is either stored or refused with `ShuttingDown`, offsets stay in order, and the broker
/// exits cleanly (no core waits forever on a produce that arrived late).
#[test]
fn remote_produces_during_shutdown_are_answered_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &["--segment-bytes", "8192"]);
    broker
        .client()
        .create_topic(
            "late",
            TopicSettings {
                partitions: 1,
                ..Default::default()
            },
        )
        .unwrap();
    let mut client = broker.core_client(1 - partition_owner("late", 0, 2));
    client
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let (progress, started) = std::sync::mpsc::channel();
    let producer = std::thread::spawn(move || {
        let batch = encode_batch(0, b"", &[b'y'; 100], 1);
        let (mut stored, mut refused, mut next) = (0u64, 0u64, 0u64);
        'rounds: loop {
            let mut sent = Vec::new();
            for _ in 0..100 {
                match client.send_produce("late", 0, std::slice::from_ref(&batch)) {
                    Ok(id) => sent.push(id),
                    Err(_) => break,
                }
            }
            for correlation_id in sent {
                let Ok(header) = client.receive() else {
                    break 'rounds; // the broker closed the connection at a frame boundary
                };
                assert_eq!(header.correlation_id, correlation_id);
                match client.reply().produced() {
                    Ok((base, end)) => {
                        assert_eq!(base, next, "offsets in request order");
                        next = end;
                        stored += 1;
                    }
                    Err(error) => {
                        assert_eq!(error.code(), Some(ErrorCode::ShuttingDown), "{error}");
                        refused += 1;
                    }
                }
            }
            let _ = progress.send(stored);
        }
        (stored, refused)
    });
    // Shut down while produces are in flight.
    while started.recv().unwrap() < 300 {}
    assert!(broker.terminate().success(), "clean exit under load");
    let (stored, refused) = producer.join().unwrap();
    assert!(stored >= 300, "{stored} stored, {refused} refused");
    // Everything acknowledged is there after the restart.
    broker.restart();
    let end = broker
        .client()
        .list_offsets("late", 0, pagurus::protocol::native::OffsetSpec::Latest)
        .unwrap();
    assert_eq!(
        end, stored,
        "every acknowledged produce survived, nothing else"
    );
}
