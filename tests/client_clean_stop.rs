//! The glommio client's `Producer` across a clean broker stop (SIGTERM) and restart: the
//! batches the stopping broker refused (`ShuttingDown`) are sent again once it is back, so
//! the producer's caller sees no error, and every record is stored once, in order.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::{Broker, on_glommio};
use pagurus::client::glommio::{Producer, ProducerConfig};
use pagurus::protocol::native::{OffsetSpec, TopicSettings};

#[test]
fn the_client_producer_survives_a_clean_stop_without_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start_in(&dir.path().join("data"), 2, &[]);
    let settings = TopicSettings {
        partitions: 2,
        ..Default::default()
    };
    broker.client().create_topic("stop", settings).unwrap();
    let addr = broker.addr;
    let restarted = Arc::new(AtomicBool::new(false));

    // Stops the broker once the producer is well under way, and starts it again.
    let done = Arc::clone(&restarted);
    let stopper = std::thread::spawn(move || {
        let mut client = broker.client();
        let deadline = Instant::now() + Duration::from_secs(30);
        while (0..2)
            .map(|p| client.list_offsets("stop", p, OffsetSpec::Latest).unwrap())
            .sum::<u64>()
            < 50_000
        {
            assert!(Instant::now() < deadline, "the producer is stuck");
            std::thread::sleep(Duration::from_millis(5));
        }
        drop(client);
        assert_eq!(broker.terminate().code(), Some(0));
        std::thread::sleep(Duration::from_millis(300));
        broker.restart();
        done.store(true, Ordering::Release);
        broker
    });

    let flag = Arc::clone(&restarted);
    let (sent, stats) = on_glommio(move || async move {
        let producer = Producer::connect(addr, ProducerConfig::default())
            .await
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut sent = 0u32;
        let mut after_restart = 0u32;
        // Until well after the restart: records before, during and after the stop.
        while after_restart < 20_000 {
            assert!(Instant::now() < deadline, "no restart seen");
            producer
                .send_to("stop", sent % 2, b"", sent.to_string().as_bytes())
                .await
                .unwrap_or_else(|e| panic!("record {sent}: {e}"));
            sent += 1;
            if flag.load(Ordering::Acquire) {
                after_restart += 1;
            }
        }
        (sent, producer.flush().await.unwrap())
    });
    let broker = stopper.join().unwrap();
    assert_eq!(stats.records_acked, u64::from(sent));
    assert!(stats.batches_retried > 0, "no batch was refused: {stats:?}");

    // Each partition holds its records once, in the order they were sent.
    let mut client = broker.client();
    let mut count = 0u32;
    for partition in 0..2u32 {
        let mut expected = partition;
        let mut from = 0;
        let end = client
            .list_offsets("stop", partition, OffsetSpec::Latest)
            .unwrap();
        while from < end {
            let fetched = client
                .fetch_batches("stop", partition, from, 1 << 20, Duration::ZERO)
                .unwrap();
            assert!(
                fetched.iter().next().is_some(),
                "nothing at {from} of {end}"
            );
            for batch in fetched.iter() {
                for record in batch.records() {
                    let value: u32 = std::str::from_utf8(record.value).unwrap().parse().unwrap();
                    assert_eq!(value, expected, "partition {partition} at offset {from}");
                    expected += 2;
                    count += 1;
                }
                from = batch.header.offset + batch.header.records();
            }
        }
    }
    assert_eq!(count, sent, "every record stored once");
}
