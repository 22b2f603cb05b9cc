"""A consumer group of confluent-kafka (librdkafka) members on a pagurus cluster, every
client bootstrapped on one node only. Run by tests/cluster_groups.rs:
`cluster_groups.py BOOTSTRAP TOPIC PARTITIONS GROUP MODE`; prints one JSON line, exits
non-zero with a reason on any failure.

- `produce N`: N records to every partition (explicit partition), each value
  "p<partition>-<i>"; prints what was delivered per partition.
- `consume`: two members of GROUP share the topic's partitions, read until every
  partition reached its end, commit, and close; prints the first offset read and the
  number of records read per partition, and the committed offsets.
"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition

BOOTSTRAP, TOPIC, PARTITIONS, GROUP, MODE = sys.argv[1:6]
PARTITIONS = int(PARTITIONS)


def produce(n):
    producer = Producer({"bootstrap.servers": BOOTSTRAP, "linger.ms": 5, "acks": "all"})
    delivered = {}
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered[msg.partition()] = delivered.get(msg.partition(), 0) + 1

    for p in range(PARTITIONS):
        for i in range(n):
            producer.produce(TOPIC, value=f"p{p}-{i}".encode(), partition=p, on_delivery=report)
        producer.poll(0)
    if producer.flush(60) != 0:
        sys.exit(f"produce did not complete: {errors[:3]}")
    if errors:
        sys.exit(f"produce errors: {errors[:3]}")
    print(json.dumps({"delivered": {str(p): c for p, c in sorted(delivered.items())}}))


class Member:
    def __init__(self, name):
        self.name = name
        self.assigned = set()
        self.first = {}
        self.count = {}
        self.c = Consumer({
            "bootstrap.servers": BOOTSTRAP,
            "group.id": GROUP,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            "partition.assignment.strategy": "range",
        })
        self.c.subscribe([TOPIC], on_assign=self.on_assign, on_revoke=self.on_revoke)
        self.at_end = set()

    def on_assign(self, consumer, partitions):
        self.assigned = {p.partition for p in partitions}
        self.at_end -= self.assigned

    def on_revoke(self, consumer, partitions):
        self.assigned = set()

    def poll(self):
        m = self.c.poll(0.05)
        if m is None:
            return
        if m.error() is not None:
            if m.error().code() == -191:  # _PARTITION_EOF
                self.at_end.add(m.partition())
            return
        p = m.partition()
        self.first.setdefault(p, m.offset())
        self.count[p] = self.count.get(p, 0) + 1
        self.at_end.discard(p)


def consume():
    members = [Member("a"), Member("b")]
    everything = set(range(PARTITIONS))
    end = time.time() + 60
    while True:
        for m in members:
            m.poll()
        a, b = members
        shared = a.assigned and b.assigned and (a.assigned | b.assigned) == everything
        if shared and a.at_end >= a.assigned and b.at_end >= b.assigned:
            break
        if time.time() > end:
            state = "; ".join(
                f"{m.name}: assigned {sorted(m.assigned)}, at end {sorted(m.at_end)}, "
                f"read {m.count}" for m in members
            )
            sys.exit(f"timed out waiting for both members to read every partition ({state})")
    # Each member commits the positions of its partitions (the next offset to read).
    for m in members:
        m.c.commit(asynchronous=False)
    committed = members[0].c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
    assigned = [sorted(m.assigned) for m in members]
    for m in members:
        m.c.close()
    first, count = {}, {}
    for m in members:
        first.update(m.first)
        for p, c in m.count.items():
            count[p] = count.get(p, 0) + c
    print(json.dumps({
        "first": {str(p): o for p, o in sorted(first.items())},
        "count": {str(p): c for p, c in sorted(count.items())},
        "committed": {str(tp.partition): tp.offset for tp in committed},
        "assigned": assigned,
    }))


if MODE == "produce":
    produce(int(sys.argv[6]))
elif MODE == "consume":
    consume()
else:
    sys.exit(f"unknown mode {MODE}")
