#!/usr/bin/env python3
"""An idempotent librdkafka producer through a storage fault, for tests/kafka_idempotent_faults.rs.

Usage:
  idempotent_faults.py produce BOOTSTRAP TOPIC ACKED_FILE RESUME_FILE
      Sends 1000-byte records numbered 0, 1, 2, ... (value "#<n>" padded) as fast as the
      producer takes them (enable.idempotence, acks=all, linger.ms=5,
      message.timeout.ms=60000: far longer than the fault, so that every record sent
      must end up acknowledged) until RESUME_FILE exists (the test makes it once the fault
      is over), then 500 more, then flushes. Writes every acknowledged record to ACKED_FILE
      as JSON lines [partition, offset, n] (offset -1 when the delivery report named none)
      and prints one JSON summary line.
  idempotent_faults.py verify BOOTSTRAP TOPIC ACKED_FILE
      Reads every partition from its start to its end and checks each acknowledged record:
      at its acknowledged offset, or (no offset named) somewhere in its partition; and no
      record stored twice. Prints one JSON line with what it found; exits 0 either way (the
      test asserts).
"""

import json
import os
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

RECORD_BYTES = 1000
AFTER_RESUME = 500
RUN_S_MAX = 300
FLUSH_S = 120


def record(n):
    return f"#{n}".encode().ljust(RECORD_BYTES, b".")


def number(value):
    if not value or not value.startswith(b"#"):
        return None
    return int(value[1:].split(b".", 1)[0])


def produce(bootstrap, topic, acked_path, resume_path):
    conf = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 5,
        "message.timeout.ms": 60000,
    }
    fatal = []
    conf["error_cb"] = lambda err: fatal.append(str(err)) if err.fatal() else None
    producer = Producer(conf)
    acked = []
    failed = {}
    # Records sent before the resume signal and acknowledged after it: the backlog the fault
    # left, which a broker that answers retries must store once writing resumes.
    backlog = {"resumed_at": None, "acked": 0}

    def on_delivery(err, msg):
        if err is not None:
            name = err.name()
            failed[name] = failed.get(name, 0) + 1
            return
        k = number(msg.value())
        acked.append((msg.partition(), msg.offset(), k))
        if backlog["resumed_at"] is not None and k < backlog["resumed_at"]:
            backlog["acked"] += 1

    def send(n):
        while True:
            try:
                producer.produce(topic, value=record(n), on_delivery=on_delivery)
                return
            except BufferError:
                producer.poll(0.05)

    started = time.time()
    n = 0
    while not os.path.exists(resume_path):
        if time.time() - started > RUN_S_MAX:
            print(json.dumps({"error": f"no resume signal in {RUN_S_MAX} s"}), flush=True)
            sys.exit(1)
        send(n)
        n += 1
        producer.poll(0)
    resumed_at = n
    backlog["resumed_at"] = n
    for _ in range(AFTER_RESUME):
        send(n)
        n += 1
        producer.poll(0)
    left = producer.flush(FLUSH_S)
    with open(acked_path, "w") as out:
        for row in acked:
            out.write(json.dumps(row) + "\n")
    after = sum(1 for (_, _, k) in acked if k >= resumed_at)
    print(json.dumps({
        "sent": n,
        "acked": len(acked),
        "acked_after_resume": after,
        "backlog_acked_after_resume": backlog["acked"],
        "failed": failed,
        "fatal": fatal,
        "not_flushed": left,
    }), flush=True)


def read_partition(bootstrap, topic, partition):
    """offset -> record number of every record in the partition, start to end."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "verify",
        "enable.auto.commit": False,
        "fetch.max.bytes": 4 << 20,
    })
    low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=30)
    found = {}
    if high > low:
        consumer.assign([TopicPartition(topic, partition, low)])
        deadline = time.time() + 120
        last = low - 1
        while last < high - 1:
            if time.time() > deadline:
                raise KafkaException(f"partition {partition}: stuck at {last + 1} of {high}")
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            found[msg.offset()] = number(msg.value())
            last = msg.offset()
    consumer.close()
    return found


def verify(bootstrap, topic, acked_path):
    acked = [json.loads(line) for line in open(acked_path)]
    partitions = sorted({p for (p, _, _) in acked})
    stored = {p: read_partition(bootstrap, topic, p) for p in partitions}
    moved, missing, duplicates = [], [], []
    for p, records in stored.items():
        seen = {}
        for offset, k in records.items():
            if k in seen:
                duplicates.append([p, seen[k], offset, k])
            seen[k] = offset
        stored[p] = (records, set(seen))
    for (p, offset, k) in acked:
        records, numbers = stored[p]
        if offset >= 0:
            if records.get(offset) != k:
                moved.append([p, offset, k, records.get(offset)])
        elif k not in numbers:
            missing.append([p, k])
    print(json.dumps({
        "acked": len(acked),
        "stored": sum(len(r) for (r, _) in stored.values()),
        "moved": moved[:20],
        "moved_count": len(moved),
        "missing": missing[:20],
        "missing_count": len(missing),
        "duplicates": duplicates[:20],
        "duplicate_count": len(duplicates),
    }), flush=True)


def main():
    mode, bootstrap, topic, *args = sys.argv[1:]
    if mode == "produce":
        produce(bootstrap, topic, *args)
    elif mode == "verify":
        verify(bootstrap, topic, *args)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
