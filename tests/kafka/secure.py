"""Produces COUNT messages to TOPIC over a secured listener and reads them back, with
confluent-kafka or kafka-python. Prints one JSON line: what was produced and consumed, or
the error a refused client got.

usage: secure.py CLIENT BOOTSTRAP TOPIC COUNT SETTINGS_JSON
  CLIENT: confluent | kafka-python
  SETTINGS_JSON: {"protocol": "SASL_SSL"|"SSL"|..., "mechanism": ..., "user": ...,
                  "password": ..., "ca": ..., "cert": ..., "key": ...}
"""

import json
import sys
import time


def confluent(bootstrap, topic, count, s):
    from confluent_kafka import Consumer, KafkaException, Producer

    conf = {"bootstrap.servers": bootstrap, "security.protocol": s["protocol"]}
    if "mechanism" in s:
        conf.update({"sasl.mechanisms": s["mechanism"], "sasl.username": s["user"],
                     "sasl.password": s["password"]})
    if "ca" in s:
        conf["ssl.ca.location"] = s["ca"]
    if "cert" in s:
        conf.update({"ssl.certificate.location": s["cert"], "ssl.key.location": s["key"]})
    errors = []
    producer = Producer(dict(conf, **{"message.timeout.ms": 10000, "error_cb": errors.append}))
    delivered = []
    for i in range(count):
        producer.produce(topic, value=f"m{i}".encode(),
                         on_delivery=lambda err, msg: delivered.append(err is None))
    producer.flush(20)
    if not all(delivered) or len(delivered) < count:
        return {"error": str(errors[:1] or "not delivered"), "produced": sum(delivered)}
    consumer = Consumer(dict(conf, **{"group.id": "secure-test", "auto.offset.reset": "earliest",
                                      "enable.auto.commit": False}))
    consumer.subscribe([topic])
    got = []
    deadline = time.time() + 30
    while len(got) < count and time.time() < deadline:
        msg = consumer.poll(1.0)
        if msg is not None and msg.error() is None:
            got.append(msg.value().decode())
    consumer.close()
    return {"produced": count, "consumed": sorted(got)}


def kafka_python(bootstrap, topic, count, s):
    from kafka import KafkaConsumer, KafkaProducer

    conf = {"bootstrap_servers": bootstrap, "security_protocol": s["protocol"],
            "request_timeout_ms": 15000}
    if "mechanism" in s:
        conf.update({"sasl_mechanism": s["mechanism"], "sasl_plain_username": s["user"],
                     "sasl_plain_password": s["password"]})
    if "ca" in s:
        conf["ssl_cafile"] = s["ca"]
    if "cert" in s:
        conf.update({"ssl_certfile": s["cert"], "ssl_keyfile": s["key"]})
    try:
        producer = KafkaProducer(**conf)
        for i in range(count):
            producer.send(topic, f"m{i}".encode()).get(timeout=20)
        producer.close()
    except Exception as e:  # the refusal is the result of a refused client
        return {"error": f"{type(e).__name__}: {e}", "produced": 0}
    consumer = KafkaConsumer(topic, group_id="secure-test-kp", auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=15000, **conf)
    got = []
    deadline = time.time() + 30
    for msg in consumer:
        got.append(msg.value.decode())
        if len(got) >= count or time.time() > deadline:
            break
    consumer.close()
    return {"produced": count, "consumed": sorted(got)}


def main():
    client, bootstrap, topic, count, settings = sys.argv[1:6]
    run = confluent if client == "confluent" else kafka_python
    print(json.dumps(run(bootstrap, topic, int(count), json.loads(settings))))


if __name__ == "__main__":
    main()
