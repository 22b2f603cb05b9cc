"""Admin operations through confluent-kafka's AdminClient and kafka-python's admin client.
Usage: admin.py BOOTSTRAP PHASE; prints one JSON line with what it saw.

grow:     creates 'grow' with 3 partitions, produces 30 keyed records, grows it to 6
          (confluent-kafka), refuses 6 -> 4; a new producer writes 60 records with no
          key; reads every partition from the start.
delete:   produces 100 records to 'trim' (1 partition), delete_records before 40
          (confluent-kafka), before 70 (kafka-python); a consumer from the beginning.
cluster:  describe_cluster (both), describe_log_dirs and elect_leaders (kafka-python),
          elect_leaders (confluent-kafka).
"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

bootstrap, phase = sys.argv[1], sys.argv[2]
admin = AdminClient({"bootstrap.servers": bootstrap})


def wait(futures):
    return {k: f.result(timeout=30) for k, f in futures.items()}


def produce(topic, values, keys=None, partition=None, one_by_one=False):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if one_by_one else 5})
    for i, v in enumerate(values):
        kw = {"value": v}
        if keys is not None:
            kw["key"] = keys[i]
        if partition is not None:
            kw["partition"] = partition
        p.produce(topic, **kw)
        if one_by_one:
            assert p.flush(30) == 0
    assert p.flush(30) == 0


def read_all(topic, partitions, start=None):
    """Every record of every partition from its start: {partition: [(offset, value)]}."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "admin-" + topic + str(time.time()),
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, -2) for p in range(partitions)])
    highs = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    got = {p: [] for p in range(partitions)}
    deadline = time.time() + 30
    while time.time() < deadline and any((got[p][-1][0] + 1 if got[p] else -1) < highs[p] for p in got if highs[p] > 0):
        m = c.poll(0.5)
        if m is None or m.error():
            continue
        got[m.partition()].append((m.offset(), m.value().decode()))
    c.close()
    return got, highs


out = {}
if phase == "grow":
    wait(admin.create_topics([NewTopic("grow", 3, 1)]))
    keys = [f"k{i}".encode() for i in range(30)]
    produce("grow", [f"before-{i}".encode() for i in range(30)], keys=keys)
    before, _ = read_all("grow", 3)
    wait(admin.create_partitions([NewPartitions("grow", 6)]))
    md = admin.list_topics("grow", timeout=10)
    out["partitions_after"] = len(md.topics["grow"].partitions)
    try:
        wait(admin.create_partitions([NewPartitions("grow", 4)]))
        out["shrink"] = "accepted"
    except Exception as e:
        out["shrink"] = e.args[0].name() if hasattr(e.args[0], "name") else str(e)
    # A new producer sees 6 partitions; its partitioner spreads 60 keys over all of them.
    produce("grow", [f"after-{i}".encode() for i in range(60)],
            keys=[f"key-{i}".encode() for i in range(60)])
    after, highs = read_all("grow", 6)
    out["before"] = {str(k): [v for _, v in vs] for k, vs in before.items()}
    out["after"] = {str(k): [v for _, v in vs] for k, vs in after.items()}
    out["highs"] = {str(k): v for k, v in highs.items()}
elif phase == "delete":
    wait(admin.create_topics([NewTopic("trim", 1, 1)]))
    # One batch per record, so the records span several small segments.
    produce("trim", [f"r{i}".encode() for i in range(100)], partition=0, one_by_one=True)
    res = admin.delete_records([TopicPartition("trim", 0, 40)])
    low = list(res.values())[0].result(timeout=30)
    out["confluent_low"] = low.low_watermark
    from kafka.admin import KafkaAdminClient
    from kafka.structs import TopicPartition as KTP
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    r = kadmin.delete_records({KTP("trim", 0): 70})
    out["kafka_python_low"] = {f"{tp.topic}/{tp.partition}": v for tp, v in r.items()} if isinstance(r, dict) else str(r)
    try:
        res = admin.delete_records([TopicPartition("trim", 0, 1000)])
        list(res.values())[0].result(timeout=30)
        out["past_end"] = "accepted"
    except Exception as e:
        out["past_end"] = e.args[0].name()
    got, highs = read_all("trim", 1)
    out["first_read"] = got[0][0] if got[0] else None
    out["read"] = len(got[0])
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "x"})
    out["watermarks"] = list(c.get_watermark_offsets(TopicPartition("trim", 0), timeout=10))
    c.close()
elif phase == "cluster":
    d = admin.describe_cluster().result(timeout=30)
    out["confluent_cluster"] = {"id": d.cluster_id, "controller": d.controller.id,
                                "nodes": sorted(n.id for n in d.nodes)}
    from kafka.admin import KafkaAdminClient
    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    kd = kadmin.describe_cluster()
    out["kafka_python_cluster"] = json.loads(json.dumps(kd, default=str))
    wait(admin.create_topics([NewTopic("dirs", 2, 1)]))
    produce("dirs", [b"x" * 100 for _ in range(10)], partition=1)
    dirs = kadmin.describe_log_dirs()
    out["log_dirs"] = json.loads(json.dumps(dirs, default=str))
    try:
        e = kadmin.elect_leaders(0, {"dirs": [0, 1]})
        out["kafka_python_elect"] = [[p.partition_id, p.error_code]
                                     for r in e.replica_election_results for p in r.partition_result]
    except Exception as e:
        out["kafka_python_elect"] = type(e).__name__ + ": " + str(e)
    from confluent_kafka import ElectionType as CE
    try:
        r = admin.elect_leaders(CE.PREFERRED, [TopicPartition("dirs", 0)]).result(timeout=30)
        out["confluent_elect"] = {f"{k.topic}/{k.partition}": (v.name() if v else None) for k, v in r.items()}
    except Exception as e:
        out["confluent_elect"] = str(e)
print(json.dumps(out))
