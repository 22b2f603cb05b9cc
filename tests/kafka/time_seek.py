#!/usr/bin/env python3
"""Seeking by timestamp into the middle of a batch, for tests/time_seek.rs.
`time_seek.py BOOTSTRAP TOPIC COUNT BASE_MS STEP_MS SEEK_MS`: confluent-kafka produces COUNT
records with timestamps BASE_MS + i * STEP_MS in one batch (one flush, a long linger), then
confluent-kafka and kafka-python ask for the offset of SEEK_MS, and a consumer starting
there reads its first record. Prints one JSON line."""

import json
import sys

from confluent_kafka import Consumer, Producer, TopicPartition


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    count, base, step, seek = (int(a) for a in sys.argv[3:7])
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 500, "acks": "all",
                         "batch.num.messages": count, "compression.type": "none"})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=0, timestamp=base + i * step)
    if producer.flush(30) != 0:
        raise SystemExit("produce did not finish")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "time-seek",
                         "enable.auto.commit": False})
    [found] = consumer.offsets_for_times([TopicPartition(topic, 0, seek)], timeout=30)
    consumer.assign([TopicPartition(topic, 0, found.offset)])
    first = None
    for _ in range(60):
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            first = {"offset": msg.offset(), "timestamp": msg.timestamp()[1],
                     "value": msg.value().decode()}
            break
    consumer.close()

    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition
    kp = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = KTopicPartition(topic, 0)
    kp_found = kp.offsets_for_times({tp: seek})[tp]
    kp.close()
    print(json.dumps({"confluent": found.offset, "first": first,
                      "kafka_python": kp_found.offset, "kafka_python_ts": kp_found.timestamp}))


if __name__ == "__main__":
    main()
