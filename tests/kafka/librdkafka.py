#!/usr/bin/env python3
"""Drives a pagurus broker with confluent-kafka (librdkafka), for tests/kafka_clients.rs.

Usage: librdkafka.py SCENARIO BOOTSTRAP [ARGS...]; prints one JSON line with what it saw
and exits non-zero on any failure. Consumers use assign() with enable.auto.commit=false,
so no consumer group is involved.
"""

import os
import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

TIMEOUT_S = 60


def fail(why):
    print(json.dumps({"error": why}), flush=True)
    sys.exit(1)


def create_topic(bootstrap, topic, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    # REPLICATION_FACTOR: copies of each partition (a cluster's test asks 3).
    factor = int(os.environ.get("REPLICATION_FACTOR", "1"))
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=factor)],
                                  request_timeout=30)
    futures[topic].result(timeout=TIMEOUT_S)
    md = admin.list_topics(topic=topic, timeout=30)
    got = len(md.topics[topic].partitions)
    if got != partitions:
        fail(f"{topic} has {got} partitions, not {partitions}")
    return {"partitions": got, "brokers": len(md.brokers)}


def produce(bootstrap, topic, messages, extra):
    """Produces (key, value) pairs; returns {partition: [(offset, key, value)]} as acknowledged."""
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}
    conf.update(extra)
    producer = Producer(conf)
    errors = []
    acked = {}

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            acked.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))

    for key, value in messages:
        while True:
            try:
                producer.produce(topic, key=key, value=value, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
    left = producer.flush(TIMEOUT_S)
    if left:
        fail(f"{left} messages not delivered in {TIMEOUT_S} s")
    if errors:
        fail(f"delivery errors: {errors[:5]}")
    return acked


def consume_all(bootstrap, topic, partitions, expected):
    """Reads every partition from the beginning with assign(); returns {partition: [(offset, key, value)]}."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused-by-assign",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest",
                         "fetch.wait.max.ms": 100})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = {}
    count = 0
    deadline = time.time() + TIMEOUT_S
    while count < expected and time.time() < deadline:
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error():
            fail(f"consume error: {msg.error()}")
        got.setdefault(msg.partition(), []).append((msg.offset(), msg.key(), msg.value()))
        count += 1
    consumer.close()
    if count != expected:
        fail(f"consumed {count} of {expected} messages")
    return got


def same(acked, got):
    for partition, sent in acked.items():
        sent = sorted(sent)
        read = got.get(partition, [])
        if sent != read:
            for i, (a, b) in enumerate(zip(sent, read)):
                if a != b:
                    fail(f"partition {partition} differs at {i}: sent {a!r}, read {b!r}")
            fail(f"partition {partition}: sent {len(sent)}, read {len(read)}")


def idempotent(bootstrap, topic, count):
    info = create_topic(bootstrap, topic, 4)
    messages = [(f"key-{i % 977}".encode(), f"value-{i}".encode()) for i in range(count)]
    acked = produce(bootstrap, topic, messages, {"enable.idempotence": True})
    delivered = sum(len(v) for v in acked.values())
    if delivered != count:
        fail(f"{delivered} of {count} delivered")
    got = consume_all(bootstrap, topic, 4, count)
    same(acked, got)
    return {"delivered": delivered, **info}


def codecs(bootstrap, topic_prefix):
    out = {}
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"]:
        topic = f"{topic_prefix}-{codec}"
        messages = [(f"k{i}".encode(), (f"{codec}-{i}-" + "x" * (i % 300)).encode()) for i in range(2000)]
        acked = produce(bootstrap, topic, messages, {"compression.codec": codec})
        got = consume_all(bootstrap, topic, 1, len(messages))
        same(acked, got)
        out[codec] = len(got[0])
    return out


def produce_until_killed(bootstrap, topic, ledger):
    """Produces until the broker dies; appends 'offset key' of each acknowledged message to
    the ledger file as soon as it is acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 2,
                         "message.timeout.ms": 5000, "retries": 0})
    with open(ledger, "a", buffering=1) as out:
        def on_delivery(err, msg):
            if err is None:
                out.write(f"{msg.offset()} {msg.key().decode()}\n")

        i = 0
        deadline = time.time() + TIMEOUT_S
        while time.time() < deadline:
            try:
                producer.produce(topic, key=f"m{i}".encode(), value=f"value-{i}".encode(),
                                 on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            producer.poll(0.001)
    return {"sent": i}


def read_keys(bootstrap, topic, expected):
    got = consume_all(bootstrap, topic, 1, expected)
    return {"messages": [[o, k.decode()] for o, k, _ in got.get(0, [])]}


def main():
    scenario, bootstrap, *args = sys.argv[1:]
    try:
        if scenario == "create":
            result = create_topic(bootstrap, args[0], int(args[1]))
        elif scenario == "idempotent":
            result = idempotent(bootstrap, args[0], int(args[1]))
        elif scenario == "codecs":
            result = codecs(bootstrap, args[0])
        elif scenario == "produce-until-killed":
            result = produce_until_killed(bootstrap, args[0], args[1])
        elif scenario == "read-keys":
            result = read_keys(bootstrap, args[0], int(args[1]))
        else:
            fail(f"unknown scenario {scenario}")
    except KafkaException as e:
        fail(f"KafkaException: {e}")
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
