#!/usr/bin/env python3
"""Topic configs through confluent-kafka's and kafka-python's admin clients, for
tests/kafka_configs.rs. `configs.py BOOTSTRAP PHASE`; prints one JSON line, exits non-zero
(with the reason) on any check that fails.

Phases:
  admin     confluent-kafka: create with configs, describe (values, sources, read-only),
            refusals (unknown name, two policies, altering segment.bytes), incremental alter,
            broker configs; kafka-python: create with configs, legacy AlterConfigs, describe.
  retention produce 50 records, alter retention.ms to 1000, wait until the broker deleted
            them (log start offset = end offset).
  restart   after a broker restart: the altered values are still described.
"""

import json
import sys
import time

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ConfigSource, NewTopic, ResourceType)

INVALID_CONFIG = 40


def fail(why):
    print(json.dumps({"error": why}))
    sys.exit(1)


def check(cond, why):
    if not cond:
        fail(why)


def src(entry):
    """A ConfigEntry's source as Kafka's number (an enum or an int, by release)."""
    return getattr(entry.source, "value", entry.source)


def describe(admin, topic):
    res = ConfigResource(ResourceType.TOPIC, topic)
    return admin.describe_configs([res])[res].result(30)


def create_error(admin, topic, config):
    f = admin.create_topics([NewTopic(topic, 1, 1, config=config)], operation_timeout=30)[topic]
    try:
        f.result(30)
    except KafkaException as e:
        return e.args[0].code()
    return None


def confluent(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = "conf-compacted"
    admin.create_topics([NewTopic(topic, 3, 1, config={
        "cleanup.policy": "compact", "retention.ms": "60000", "segment.bytes": "1048576",
        "compression.type": "producer"})], operation_timeout=30)[topic].result(30)
    got = describe(admin, topic)
    want = {"cleanup.policy": ("compact", ConfigSource.DYNAMIC_TOPIC_CONFIG, False),
            "retention.ms": ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False),
            "retention.bytes": ("-1", ConfigSource.DEFAULT_CONFIG, False),
            "segment.bytes": ("1048576", ConfigSource.DYNAMIC_TOPIC_CONFIG, True),
            "compression.type": ("producer", ConfigSource.DEFAULT_CONFIG, True)}
    for name, (value, source, read_only) in want.items():
        e = got.get(name)
        check(e is not None, f"{name} not described: {sorted(got)}")
        check((e.value, src(e), e.is_read_only) == (value, source.value, read_only),
              f"{name}: {e.value} source {e.source} read-only {e.is_read_only}")

    refused = {
        "conf-unknown": {"no.such.config": "1"},
        "conf-both": {"cleanup.policy": "compact,delete"},
        "conf-zero": {"retention.ms": "0"},
        "conf-codec": {"compression.type": "zstd"},
    }
    for name, config in refused.items():
        code = create_error(admin, name, config)
        check(code == INVALID_CONFIG, f"{name} {config}: {code}")
    check(topic in admin.list_topics(timeout=30).topics, "the topic is listed")
    check("conf-unknown" not in admin.list_topics(timeout=30).topics,
          "a refused topic was not created")

    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.bytes", "5000000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.bytes", None, incremental_operation=AlterConfigOpType.DELETE)])
    admin.incremental_alter_configs([res])[res].result(30)
    got = describe(admin, topic)
    check(got["retention.ms"].value == "120000", f"retention.ms {got['retention.ms'].value}")
    check(got["cleanup.policy"].value == "delete", "cleanup.policy not altered")
    check(src(got["cleanup.policy"]) == ConfigSource.DEFAULT_CONFIG.value, "policy source")
    check(got["retention.bytes"].value == "-1", "retention.bytes not reverted")

    for entry in (ConfigEntry("segment.bytes", "2097152",
                              incremental_operation=AlterConfigOpType.SET),
                  ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET)):
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
        try:
            admin.incremental_alter_configs([res])[res].result(30)
            fail(f"altering {entry.name} was accepted")
        except KafkaException as e:
            check(e.args[0].code() == INVALID_CONFIG, f"{entry.name}: {e}")

    broker = ConfigResource(ResourceType.BROKER, "0")
    got = admin.describe_configs([broker])[broker].result(30)
    check(got["num.partitions"].value == "1", "broker num.partitions")
    check(src(got["log.segment.bytes"]) == ConfigSource.STATIC_BROKER_CONFIG.value,
          "broker config source")
    check(all(e.is_read_only for e in got.values()), "broker configs are read-only")
    return {"confluent": "ok"}


def kafka_python(bootstrap):
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    topic = "kp-configs"
    admin.create_topics([KNewTopic(topic, 2, 1, topic_configs={
        "retention.bytes": "10000000", "flush.messages": "1"})])
    # AlterConfigs (not incremental), which replaces the whole set: kafka-python reads the
    # topic's dynamic configs first and sends them back with the change, flush.messages
    # (set at creation) included, at the value it has.
    out = admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic,
                                               configs={"retention.ms": "3600000"})],
                              incremental=False)
    check("Error" not in repr(out) or "NoError" in repr(out), f"alter: {out!r}")
    entries = kp_describe(admin, topic)
    check(entries["retention.ms"] == ("3600000", 1), f"retention.ms {entries['retention.ms']}")
    check(entries["retention.bytes"] == ("10000000", 1),
          f"retention.bytes {entries['retention.bytes']}")
    check(entries["flush.messages"] == ("1", 1), f"flush.messages {entries['flush.messages']}")
    # A name the broker does not know, past kafka-python's own check: INVALID_CONFIG.
    out = admin.alter_configs([KConfigResource(ConfigResourceType.TOPIC, topic,
                                               configs={"bogus.config": "1"})],
                              raise_on_unknown=False, incremental=False)
    check("InvalidConfig" in repr(out), f"bogus alter: {out!r}")
    try:
        admin.create_topics([KNewTopic("kp-bad", 1, 1, topic_configs={"bogus": "x"})])
        fail("a bogus config was accepted")
    except Exception as e:  # pylint: disable=broad-except
        check(type(e).__name__ == "InvalidConfigurationError", f"bogus: {e!r}")
    admin.close()
    return {"kafka_python": "ok"}


def kp_describe(admin, topic):
    """kafka-python's description of a topic: {name: (value, source number)}."""
    from kafka.admin import ConfigResource as KConfigResource
    from kafka.admin import ConfigResourceType
    out = admin.describe_configs([KConfigResource(ConfigResourceType.TOPIC, topic)],
                                 config_filter="all")
    entries = out["topic"][topic]
    sources = {"DYNAMIC_TOPIC_CONFIG": 1, "STATIC_BROKER_CONFIG": 4, "DEFAULT_CONFIG": 5}
    return {k: (v["value"], sources.get(v["config_source"], v["config_source"]))
            for k, v in entries.items()}


def retention(bootstrap):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    topic = "kp-retention"
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(50):
        producer.send(topic, value=f"r{i}".encode())
    producer.flush(30)
    producer.close()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap)
    tp = TopicPartition(topic, 0)
    end = consumer.end_offsets([tp])[tp]
    check(end == 50, f"end offset {end}")
    check(consumer.beginning_offsets([tp])[tp] == 0, "start offset before the alter")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([res])[res].result(30)
    deadline = time.time() + 20
    start = 0
    while time.time() < deadline and start < end:
        time.sleep(0.5)
        start = consumer.beginning_offsets([tp])[tp]
    consumer.close()
    check(start == end, f"log start {start} after the alter, end {end}")
    return {"retention": "ok", "start": start}


def restart(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    got = describe(admin, "conf-compacted")
    check(got["retention.ms"].value == "120000", "retention.ms after restart")
    check(got["cleanup.policy"].value == "delete", "cleanup.policy after restart")
    check(got["segment.bytes"].value == "1048576", "segment.bytes after restart")
    got = describe(admin, "kp-retention")
    check(got["retention.ms"].value == "1000", "kp-retention after restart")
    return {"restart": "ok"}


def main():
    bootstrap, phase = sys.argv[1], sys.argv[2]
    if phase == "admin":
        out = confluent(bootstrap)
        out.update(kafka_python(bootstrap))
    elif phase == "retention":
        out = retention(bootstrap)
    else:
        out = restart(bootstrap)
    print(json.dumps(out))


if __name__ == "__main__":
    try:
        main()
    except KafkaException as e:
        err = e.args[0]
        fail(f"{err.name()}: {err.str()}" if isinstance(err, KafkaError) else str(e))
