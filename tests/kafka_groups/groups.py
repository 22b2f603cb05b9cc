"""Kafka consumer groups against a pagurus broker, with real clients (confluent-kafka's
librdkafka and kafka-python). Run by tests/kafka_groups.rs: `groups.py BROKER MODE`;
exits non-zero with a reason on any failure, prints OK on success."""
import json
import os
import subprocess
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

BROKER, MODE = sys.argv[1], sys.argv[2]
TOPIC = "kgroups"
PARTITIONS = 4
RECORDS = 2000


def conf(group, name):
    return {
        "bootstrap.servers": BROKER,
        "group.id": group,
        "client.id": name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "partition.assignment.strategy": "range",
    }


class Member:
    def __init__(self, group, name):
        self.name = name
        self.assigned = set()
        self.seen = set()
        self.first = {}
        # Partitions read since the last assignment: what a commit now covers.
        self.read = set()
        self.c = Consumer(conf(group, name))
        self.c.subscribe([TOPIC], on_assign=self.on_assign, on_revoke=self.on_revoke)

    def on_assign(self, consumer, partitions):
        self.assigned = {p.partition for p in partitions}
        self.read = set()

    def on_revoke(self, consumer, partitions):
        self.assigned = set()

    def poll(self):
        m = self.c.poll(0.05)
        if m is not None and m.error() is None:
            self.seen.add(m.value().decode())
            self.first.setdefault(m.partition(), m.offset())
            self.read.add(m.partition())


def until(secs, what, cond, members):
    end = time.time() + secs
    while not cond():
        if time.time() > end:
            state = "; ".join(
                f"{m.name}: assigned {sorted(m.assigned)}, read {len(m.seen)}" for m in members
            )
            sys.exit(f"timed out waiting for {what} ({state})")
        for m in members:
            m.poll()


def create_and_produce():
    admin = AdminClient({"bootstrap.servers": BROKER})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(10)
    producer = Producer({"bootstrap.servers": BROKER, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(TOPIC, value=str(i).encode(), partition=i % PARTITIONS)
    if producer.flush(30) != 0:
        sys.exit("produce did not complete")
    return {str(i) for i in range(RECORDS)}


def share():
    """Two members share the partitions; one commits and leaves midway (close()), the other
    takes over its partitions and every message is read."""
    everything = create_and_produce()
    a, b = Member("share", "a"), Member("share", "b")
    both = [a, b]
    until(30, "two members with two partitions each",
          lambda: len(a.assigned) == 2 and len(b.assigned) == 2
          and a.assigned | b.assigned == set(range(PARTITIONS)), both)
    until(30, "both members reading", lambda: len(a.seen) > 50 and len(b.seen) > 50, both)
    a.c.commit(asynchronous=False)
    a.c.close()
    until(30, "b takes over every partition", lambda: b.assigned == set(range(PARTITIONS)), [b])
    until(30, "every message read", lambda: a.seen | b.seen >= everything, [b])
    b.c.close()


def commit():
    """A member reads part of each partition and commits exact offsets, each with a
    metadata string; one over 4096 bytes is refused."""
    create_and_produce()
    m = Member("resume", "r1")
    until(30, "an assignment", lambda: m.assigned == set(range(PARTITIONS)), [m])
    offsets = [TopicPartition(TOPIC, p, 100 + 7 * p, metadata=f"meta-{p}") for p in range(PARTITIONS)]
    m.c.commit(offsets=offsets, asynchronous=False)
    too_large = TopicPartition(TOPIC, 0, 1, metadata="x" * 4097)
    try:
        answer = m.c.commit(offsets=[too_large], asynchronous=False)
        refused = answer[0].error is not None and "METADATA" in str(answer[0].error).upper()
    except KafkaException as e:
        refused = "METADATA" in str(e).upper()
    if not refused:
        sys.exit("a commit with 4097 bytes of metadata was not refused")
    m.c.close()


def resume():
    """After the consumer and the broker restarted, a member of the group finds its commits
    (with their metadata) and reads each partition from exactly there."""
    m = Member("resume", "r2")
    until(30, "an assignment", lambda: m.assigned == set(range(PARTITIONS)), [m])
    committed = m.c.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], 10)
    got = {tp.partition: tp.offset for tp in committed}
    want = {p: 100 + 7 * p for p in range(PARTITIONS)}
    if got != want:
        sys.exit(f"committed offsets {got}, expected {want}")
    metadata = {tp.partition: tp.metadata for tp in committed}
    if metadata != {p: f"meta-{p}" for p in range(PARTITIONS)}:
        sys.exit(f"commit metadata {metadata}, expected meta-<partition>")
    until(30, "a record from every partition", lambda: len(m.first) == PARTITIONS, [m])
    if m.first != want:
        sys.exit(f"first offsets read {m.first}, expected the commits {want}")
    m.c.close()


def admin():
    """kafka-python lists and describes groups (one with a member, one with offsets only)."""
    from kafka.admin import KafkaAdminClient

    m = Member("listed", "l1")
    until(30, "an assignment", lambda: m.assigned == set(range(PARTITIONS)), [m])
    client = KafkaAdminClient(bootstrap_servers=BROKER, request_timeout_ms=10000)
    if hasattr(client, "list_consumer_groups"):
        admin_v2(client)
    else:
        admin_v3(client)
    m.c.close()
    client.close()


def admin_v2(client):
    """kafka-python 2.x: tuples and named tuples."""
    listed = {g[0] for g in client.list_consumer_groups()}
    if not {"listed", "resume"} <= listed:
        sys.exit(f"listed groups {sorted(listed)}")
    described = {g.group: g for g in client.describe_consumer_groups(["listed", "resume"])}
    live = described["listed"]
    if live.state != "Stable" or len(live.members) != 1 or live.protocol != "range":
        sys.exit(f"listed described as {live}")
    if live.members[0].client_id != "l1":
        sys.exit(f"member described as {live.members[0]}")
    if described["resume"].state != "Empty":
        sys.exit(f"resume described as {described['resume']}")


def describe():
    """`pagurus groups describe` shows each librdkafka member's partitions, decoded from the
    consumer protocol's assignment, and the member reading each committed partition: the
    same assignment as confluent-kafka's own describe_consumer_groups."""
    create_and_produce()
    a, b = Member("described", "a"), Member("described", "b")
    both = [a, b]
    until(30, "two members with two partitions each",
          lambda: len(a.assigned) == 2 and len(b.assigned) == 2
          and a.assigned | b.assigned == set(range(PARTITIONS)), both)
    # Each member read from each partition it holds now: a partition one member read before
    # a rebalance moved it has no position at its new member until that one reads it, and
    # would be left out of the commits.
    until(30, "a record read from every partition by the member holding it",
          lambda: a.read >= a.assigned and b.read >= b.assigned
          and a.assigned | b.assigned == set(range(PARTITIONS)), both)
    a.c.commit(asynchronous=False)
    b.c.commit(asynchronous=False)
    admin = AdminClient({"bootstrap.servers": BROKER})
    reference = admin.describe_consumer_groups(["described"])["described"].result(10)
    want = {m.client_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
            for m in reference.members}
    if want != {"a": sorted(a.assigned), "b": sorted(b.assigned)}:
        sys.exit(f"confluent-kafka describes {want}")

    def pagurus(*args):
        out = subprocess.run([os.environ["PAGURUS_BIN"], "groups", "describe", "described",
                              "--broker", BROKER, *args],
                             capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            sys.exit(f"pagurus groups describe: {out.stderr}")
        return out.stdout

    described = json.loads(pagurus("--output", "json"))
    got = {m["client_id"]: sorted(p["partition"] for p in m["partitions"] if p["topic"] == TOPIC)
           for m in described["members"]}
    if got != want:
        sys.exit(f"pagurus describes members {got}, confluent-kafka {want}")
    ids = {m["member_id"]: m["client_id"] for m in described["members"]}
    readers = {p["partition"]: ids.get(p["member"]) for p in described["partitions"]}
    expected = {p: name for name, ps in want.items() for p in ps}
    if readers != expected:
        sys.exit(f"pagurus says partitions are read by {readers}, expected {expected}")
    text = pagurus()
    rows = [l.split() for l in text.splitlines() if l.startswith(TOPIC + " ")]
    if len(rows) != PARTITIONS or any(r[-1] == "-" for r in rows):
        sys.exit(f"a partition without its member in:\n{text}")
    a.c.close()
    b.c.close()


def field(record, *names):
    """The first of `names` a kafka-python 3.x dict has."""
    for name in names:
        if name in record:
            return record[name]
    sys.exit(f"none of {names} in {record}")


def admin_v3(client):
    """kafka-python 3.x: list_groups and describe_groups answer with dicts."""
    listed = {field(g, "group_id", "group", "name") for g in client.list_groups()}
    if not {"listed", "resume"} <= listed:
        sys.exit(f"listed groups {sorted(listed)}")
    described = client.describe_groups(["listed", "resume"])
    live = described["listed"]
    state = field(live, "group_state", "state")
    members = field(live, "members")
    protocol = field(live, "protocol_data", "protocol")
    if str(state) != "Stable" or len(members) != 1 or protocol != "range":
        sys.exit(f"listed described as {live}")
    if field(members[0], "client_id") != "l1":
        sys.exit(f"member described as {members[0]}")
    if str(field(described["resume"], "group_state", "state")) != "Empty":
        sys.exit(f"resume described as {described['resume']}")


{"share": share, "commit": commit, "resume": resume, "admin": admin, "describe": describe}[MODE]()
print("OK")
