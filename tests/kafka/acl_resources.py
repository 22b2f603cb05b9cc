"""Kafka's admin APIs under per-resource ACLs, through confluent-kafka's AdminClient and
kafka-python's KafkaAdminClient.
Usage: acl_resources.py BOOTSTRAP [user=NAME password=PW] PHASE ARGS...; prints one JSON
line. With user and password the clients log in with SASL_PLAINTEXT SCRAM-SHA-512; without,
they are User:ANONYMOUS on PLAINTEXT.

setup:               topics orders and payments (1 partition each), 3 records in each, and
                     offsets committed for the groups billing and audit on both.
grant USER OP TYPE NAME:
                     CreateAcls: USER is allowed OP (an AclOperation name) on the literal
                     resource TYPE (TOPIC, GROUP) NAME.
probe PARTITIONS RETENTION:
                     every admin call on orders and payments (and the groups billing and
                     audit), each outcome or Kafka's error name: DescribeGroups, ListGroups,
                     OffsetFetch (all topics, and named), DescribeConfigs (topics, broker),
                     IncrementalAlterConfigs and AlterConfigs (retention.ms = RETENTION) then
                     the value read back, DeleteRecords (before offset 1), CreatePartitions
                     (to PARTITIONS), DescribeCluster's authorized operations, ElectLeaders
                     (confluent-kafka), DescribeLogDirs and OffsetDelete (kafka-python),
                     DeleteGroups (audit, last).
"""
import json
import sys

from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, ElectionType,
                             KafkaException, Producer, TopicPartition)
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                   AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, NewPartitions, NewTopic,
                                   ResourcePatternType, ResourceType)

args = sys.argv[1:]
bootstrap = args.pop(0)
config = {"bootstrap.servers": bootstrap}
login = {}
while args and "=" in args[0]:
    key, value = args.pop(0).split("=", 1)
    login[key] = value
if login:
    config.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "SCRAM-SHA-512",
                   "sasl.username": login["user"], "sasl.password": login["password"]})
phase = args.pop(0)
admin = AdminClient(config)
TOPICS = ["orders", "payments"]
GROUPS = ["billing", "audit"]


def name(error):
    """Kafka's name of a KafkaError (or of the first argument of a KafkaException)."""
    if isinstance(error, KafkaException):
        error = error.args[0]
    return {"error": error.name() if hasattr(error, "name") else str(error)}


def outcome(future, show=lambda r: r):
    try:
        return show(future.result(timeout=30))
    except KafkaException as e:
        return name(e)


def offsets(partitions=None):
    request = ConsumerGroupTopicPartitions("billing", partitions)
    got = outcome(list(admin.list_consumer_group_offsets([request]).values())[0])
    if isinstance(got, dict):
        return got
    return {f"{tp.topic}/{tp.partition}": name(tp.error) if tp.error else tp.offset
            for tp in got.topic_partitions}


def configs(resources, key):
    got = admin.describe_configs(resources, request_timeout=30)
    return {r.name or "broker": outcome(f, lambda c: c[key].value if key in c else None)
            for r, f in got.items()}


def retention():
    return configs([ConfigResource(ResourceType.TOPIC, t) for t in TOPICS], "retention.ms")


def kafka_python():
    from kafka.admin import KafkaAdminClient
    options = {"bootstrap_servers": bootstrap, "request_timeout_ms": 30000}
    if login:
        options.update({"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                        "sasl_plain_username": login["user"],
                        "sasl_plain_password": login["password"]})
    return KafkaAdminClient(**options)


def caught(call):
    """The call's result as JSON, or the name of the exception it raised."""
    try:
        return json.loads(json.dumps(call(), default=str))
    except Exception as e:
        return {"error": type(e).__name__}


def probe(partitions, retention_ms):
    out = {}
    described = admin.describe_consumer_groups(GROUPS, request_timeout=30)
    out["describe_groups"] = {g: outcome(f, lambda d: d.state.name) for g, f in described.items()}
    listed = outcome(admin.list_consumer_groups(request_timeout=30),
                     lambda r: sorted({g.group_id for g in r.valid}))
    out["list_groups"] = listed
    out["offsets_all"] = offsets()
    out["offsets_named"] = offsets([TopicPartition(t, 0) for t in TOPICS])
    broker = ConfigResource(ResourceType.BROKER, "0")
    out["broker_configs"] = configs([broker], "log.retention.ms")
    out["describe_configs"] = retention()
    op = AlterConfigOpType.SET
    changes = [ConfigResource(ResourceType.TOPIC, t, incremental_configs=[
        ConfigEntry("retention.ms", str(retention_ms), incremental_operation=op)]) for t in TOPICS]
    out["incremental_alter"] = {r.name: outcome(f) for r, f in
                                admin.incremental_alter_configs(changes).items()}
    out["after_incremental"] = retention()
    legacy = [ConfigResource(ResourceType.TOPIC, t, set_config={"retention.ms": str(retention_ms + 1)})
              for t in TOPICS]
    out["alter"] = {r.name: outcome(f) for r, f in admin.alter_configs(legacy).items()}
    out["after_alter"] = retention()
    deleted = admin.delete_records([TopicPartition(t, 0, 1) for t in TOPICS])
    out["delete_records"] = {tp.topic: outcome(f, lambda r: r.low_watermark)
                             for tp, f in deleted.items()}
    grown = admin.create_partitions([NewPartitions(t, partitions) for t in TOPICS])
    out["create_partitions"] = {t: outcome(f) for t, f in grown.items()}
    cluster = admin.describe_cluster(include_authorized_operations=True, request_timeout=30)
    out["cluster_operations"] = outcome(
        cluster, lambda d: sorted(o.name for o in (d.authorized_operations or [])))
    elected = admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition("orders", 0)])
    out["elect_leaders"] = outcome(
        elected, lambda r: {f"{k.topic}/{k.partition}": name(v) if v else None
                            for k, v in r.items()})
    kadmin = kafka_python()
    # kafka-python drops the answer's top-level error: a refused broker lists no directory.
    out["log_dirs"] = caught(lambda: sorted({t["name"] for b in kadmin.describe_log_dirs()
                                             for d in b["log_dirs"] for t in d["topics"]}))
    out["offset_delete"] = caught(
        lambda: {f"{tp.topic}/{tp.partition}": str(e) for tp, e in
                 kadmin.delete_group_offsets("billing", [_ktp("orders", 0)]).items()})
    gone = admin.delete_consumer_groups(["audit"], request_timeout=30)
    out["delete_groups"] = {g: outcome(f) for g, f in gone.items()}
    return out


def _ktp(topic, partition):
    from kafka.structs import TopicPartition as KTP
    return KTP(topic, partition)


def setup():
    for t, f in admin.create_topics([NewTopic(t, 1, 1) for t in TOPICS]).items():
        f.result(timeout=30)
    p = Producer(config)
    for t in TOPICS:
        for i in range(3):
            p.produce(t, value=f"{t}-{i}".encode(), partition=0)
    assert p.flush(30) == 0
    for g in GROUPS:
        c = Consumer({**config, "group.id": g, "enable.auto.commit": False})
        c.commit(offsets=[TopicPartition(t, 0, 2) for t in TOPICS], asynchronous=False)
        c.close()
    return {"setup": "done"}


def grant(user, operation, resource_type, resource):
    binding = AclBinding(ResourceType[resource_type], resource, ResourcePatternType.LITERAL,
                         "User:" + user, "*", AclOperation[operation], AclPermissionType.ALLOW)
    return {"created": [outcome(f) for f in admin.create_acls([binding]).values()]}


if phase == "setup":
    out = setup()
elif phase == "grant":
    out = grant(*args)
elif phase == "probe":
    out = probe(int(args[0]), int(args[1]))
else:
    raise SystemExit("unknown phase " + phase)
print(json.dumps(out))
