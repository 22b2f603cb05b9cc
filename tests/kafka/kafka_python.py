#!/usr/bin/env python3
"""kafka-python against pagurus, for tests/kafka_clients.rs: produce a topic, then read it
back with assign() (no group); prints one JSON line, exits non-zero on any failure."""

import json
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition


def main():
    bootstrap, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                             request_timeout_ms=30000)
    futures = [producer.send(topic, key=f"k{i}".encode(), value=f"kafka-python-{i}".encode())
               for i in range(count)]
    producer.flush(60)
    offsets = [f.get(timeout=60).offset for f in futures]
    producer.close()
    if offsets != list(range(offsets[0], offsets[0] + count)):
        print(json.dumps({"error": "offsets not contiguous"}))
        sys.exit(1)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             group_id=None, auto_offset_reset="earliest",
                             consumer_timeout_ms=30000)
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    consumer.seek_to_beginning(tp)
    got = []
    deadline = time.time() + 60
    while len(got) < count and time.time() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got.extend((r.offset, r.key.decode(), r.value.decode()) for r in records)
    consumer.close()
    expected = [(offsets[0] + i, f"k{i}", f"kafka-python-{i}") for i in range(count)]
    if got != expected:
        print(json.dumps({"error": f"read {len(got)} records; first difference at "
                          f"{next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), len(got))}"}))
        sys.exit(1)
    print(json.dumps({"produced": count, "consumed": len(got)}))


if __name__ == "__main__":
    main()
