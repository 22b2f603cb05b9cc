#!/usr/bin/env python3
"""Delete wins over running Kafka clients, for tests/kafka_clients.rs.

Usage: delete.py BOOTSTRAP PAGURUS_BIN. A librdkafka producer, a kafka-python producer
(whose Metadata requests allow auto-creation) and a librdkafka consumer tailing both
partitions run while `pagurus topics delete` removes their topic; they go on for a few
seconds. Then a new producer makes the name again, while the old producers still run.
Prints one JSON line with what every client saw; the Rust test judges it.
"""

import json
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaProducer

TOPIC = "doomed"
BEFORE_S = 1.5
AFTER_S = 4.0
RECREATED_S = 2.0

bootstrap, pagurus = sys.argv[1], sys.argv[2]
phase = "before"  # before, after (the delete), recreated (by a new client)
seen = {}


def count(what):
    key = f"{what}_{phase}"
    seen[key] = seen.get(key, 0) + 1


def cli(*args):
    out = subprocess.run([pagurus, *args, "--broker", bootstrap], capture_output=True,
                         text=True, timeout=30)
    if out.returncode != 0:
        print(json.dumps({"error": f"pagurus {args}: {out.stderr}"}), flush=True)
        sys.exit(1)
    return out.stdout


def listed():
    return any(line.split() and line.split()[0] == TOPIC for line in cli("topics", "list").splitlines())


admin = AdminClient({"bootstrap.servers": bootstrap})
admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)])[TOPIC].result(30)
stop = threading.Event()


def kafka_python_producer():
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", retries=0,
                             max_block_ms=1000, request_timeout_ms=3000)
    while not stop.is_set():
        tag = phase
        try:
            future = producer.send(TOPIC, b"kafka-python " + tag.encode())
            future.add_callback(lambda _, t=tag: seen.__setitem__(f"kp_ok_{t}", seen.get(f"kp_ok_{t}", 0) + 1))
            future.add_errback(lambda _, t=tag: seen.__setitem__(f"kp_failed_{t}", seen.get(f"kp_failed_{t}", 0) + 1))
        except Exception:  # metadata for the topic never came: it stays deleted
            count("kp_failed")
        time.sleep(0.01)
    producer.close(timeout=10)


def tailing_consumer():
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(2)])
    while not stop.is_set():
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            count("consumed")
    consumer.close()


threads = [threading.Thread(target=kafka_python_producer), threading.Thread(target=tailing_consumer)]
for t in threads:
    t.start()

producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                     "message.timeout.ms": 3000})


def on_delivery(err, msg):
    tag = msg.value().decode().split()[-1]
    key = f"rd_{'ok' if err is None else 'failed'}_{tag}"
    seen[key] = seen.get(key, 0) + 1


def run_producer(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            producer.produce(TOPIC, value=f"librdkafka {phase}".encode(), on_delivery=on_delivery)
        except BufferError:
            pass
        producer.poll(0.005)


run_producer(BEFORE_S)
cli("topics", "delete", TOPIC)
phase = "after"
run_producer(AFTER_S / 2)
seen["listed_mid"] = listed()
run_producer(AFTER_S / 2)
seen["listed_after"] = listed()

# A new client (new connections) may make the name again; the old ones still may not use it.
phase = "recreated"
fresh = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
fresh_errors = []
fresh.produce(TOPIC, value=b"new", on_delivery=lambda err, _: fresh_errors.append(err))
fresh.flush(30)
seen["fresh_errors"] = [str(e) for e in fresh_errors if e is not None]
run_producer(RECREATED_S)
stop.set()
for t in threads:
    t.join()
producer.flush(10)

check = Consumer({"bootstrap.servers": bootstrap, "group.id": "check"})
md = check.list_topics(TOPIC, timeout=10)
seen["new_partitions"] = len(md.topics[TOPIC].partitions)
seen["new_high"] = check.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)[1]
check.close()
print(json.dumps(seen), flush=True)
