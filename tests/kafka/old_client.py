"""A kafka-python producer pinned to an old protocol (api_version=(0, 10): Produce v2,
below Kafka 4.0's floor). Prints one JSON line: how the send ended."""
import json
import sys

from kafka import KafkaProducer

bootstrap, topic = sys.argv[1], sys.argv[2]
outcome = {}
try:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        api_version=(0, 10),
        retries=0,
        max_block_ms=10000,
        request_timeout_ms=10000,
    )
    metadata = producer.send(topic, b"v").get(timeout=20)
    outcome = {"stored": True, "offset": metadata.offset}
except Exception as error:  # the outcome is the test's subject
    outcome = {"stored": False, "error": type(error).__name__, "message": str(error)}
print(json.dumps(outcome))
