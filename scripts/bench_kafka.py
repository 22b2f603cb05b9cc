#!/usr/bin/env python3
"""One round of the Kafka workload of scripts/bench-kafka.sh, on confluent-kafka
(librdkafka): COUNT messages of SIZE bytes produced with acks=all, linger 5 ms, into a topic
of PARTITIONS partitions, then consumed from the beginning with assign(). Prints one JSON
line: produce msg/s, produce p99 (ms, send to delivery report), consume msg/s."""

import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def main():
    bootstrap, topic, count, size, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                         "queue.buffering.max.messages": 1_000_000, "batch.num.messages": 10_000})
    payload = b"x" * size
    latencies = []

    def on_delivery(err, msg, sent=None):
        if err is not None:
            raise SystemExit(f"delivery failed: {err}")

    start = time.perf_counter()
    cpu_start = time.process_time()
    for i in range(count):
        sent = time.perf_counter()
        while True:
            try:
                producer.produce(topic, value=payload, partition=i % partitions,
                                 on_delivery=lambda err, msg, sent=sent: (on_delivery(err, msg),
                                                                          latencies.append(time.perf_counter() - sent)))
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(120)
    produce_s = time.perf_counter() - start
    produce_cpu_s = time.process_time() - cpu_start
    latencies.sort()
    p99_ms = latencies[int(len(latencies) * 0.99) - 1] * 1000 if latencies else float("nan")

    # fetch.queue.backoff.ms: librdkafka stops fetching for 1 s (its default) whenever its
    # local queue holds queued.min.messages; a Python loop drains slower than the broker
    # fills it, so the default measured librdkafka's back-off, not the broker.
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-unused",
                         "enable.auto.commit": False, "fetch.wait.max.ms": 10,
                         "fetch.queue.backoff.ms": 1})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    deadline = start + 120
    while got < count and time.perf_counter() < deadline:
        for msg in consumer.consume(num_messages=10_000, timeout=0.5):
            if msg.error():
                raise SystemExit(f"consume failed: {msg.error()}")
            got += 1
    consume_s = time.perf_counter() - start
    consume_cpu_s = time.process_time() - cpu_start
    consumer.close()
    print(json.dumps({"produce_msgs": count / produce_s, "produce_p99_ms": p99_ms,
                      "consume_msgs": got / consume_s, "consumed": got,
                      # The client's own CPU share of each phase (1.0 = one core busy for
                      # the whole phase): near 1 means Python, not the broker, set the pace.
                      "produce_client_cpu": round(produce_cpu_s / produce_s, 2),
                      "consume_client_cpu": round(consume_cpu_s / consume_s, 2)}))


if __name__ == "__main__":
    main()
