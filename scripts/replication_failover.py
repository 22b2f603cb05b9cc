#!/usr/bin/env python3
"""Failover of a replicated partition, measured with a real Kafka client (librdkafka).

Three pagurus nodes on 127.0.0.1 (CORES each), a topic of one partition and replication
factor 3. A confluent-kafka producer (acks=all, not idempotent) sends one numbered record
every INTERVAL_MS for the whole run. KILLS times: the partition's leader (from Kafka
Metadata) is killed with SIGKILL, and the time from the kill to the first acknowledgement
of a record sent after it is the failover time; the node is restarted and the next kill
waits until it is back in the group. At the end every acknowledged record is read back and
checked: none lost, none out of order.

    scripts/replication_failover.py            # 20 kills
    KILLS=5 CORES=2 scripts/replication_failover.py
    IDEMPOTENT=1 scripts/replication_failover.py  # also checks that no record is stored twice

Prints the failover times, their median and max, and the checks; exits non-zero when an
acknowledged record is lost or reordered. Not part of CI (a long-run tool): the
failover figures of docs/REPLICATION.md come from it.
"""

import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
BIN = os.path.join(TARGET, "release", "pagurus")
KILLS = int(os.environ.get("KILLS", "20"))
CORES = os.environ.get("CORES", "1")
INTERVAL_MS = float(os.environ.get("INTERVAL_MS", "5"))
IDEMPOTENT = os.environ.get("IDEMPOTENT") == "1"
TOPIC = "failover"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    def __init__(self, work, node_id, peers, client_port, cluster_port):
        self.id = node_id
        self.dir = os.path.join(work, f"node{node_id}")
        self.log = open(os.path.join(work, f"node{node_id}.log"), "ab")
        self.addr = f"127.0.0.1:{client_port}"
        self.args = [
            BIN, "serve", "--data-dir", self.dir, "--listen", self.addr,
            "--cores", CORES, "--no-shard-ports", "--node-id", str(node_id),
            "--cluster-listen", f"127.0.0.1:{cluster_port}", "--cluster-peers", peers,
        ]
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=self.log)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self.proc = None

    def stop(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def cli(node, *args, check=True):
    out = subprocess.run([BIN, *args, "--broker", node.addr, "--timeout-ms", "5000"],
                         capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"pagurus {' '.join(args)}: {out.stderr}")
    return out


def leader_node(nodes):
    """The partition's leader node as the live nodes' Kafka Metadata names it, once they
    all name the same."""
    named = set()
    for node in nodes:
        if node.proc is None:
            continue
        try:
            meta = AdminClient({"bootstrap.servers": node.addr}).list_topics(TOPIC, timeout=2)
            leader = meta.topics[TOPIC].partitions[0].leader
            named.add(leader >> 16 if leader >= 0 else None)
        except Exception:  # noqa: BLE001 - a node starting
            named.add(None)
    return named.pop() if len(named) == 1 else None


def wait_until(what, check, timeout_s=30):
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise RuntimeError(f"not within {timeout_s} s: {what}")


class Load:
    """One record every INTERVAL_MS, acks=all; the acknowledged ones with their times."""

    def __init__(self, bootstrap):
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": IDEMPOTENT,
            "linger.ms": 0, "max.in.flight.requests.per.connection": 1, "retry.backoff.ms": 50, "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200, "message.timeout.ms": 60000,
            "topic.metadata.refresh.interval.ms": 1000,
        })
        self.acked = []  # (ack time, value)
        self.sent_at = {}  # value -> send time
        self.failed = 0
        self.lock = threading.Lock()
        self.running = True
        self.thread = threading.Thread(target=self.run)

    def delivered(self, err, msg):
        now = time.time()
        with self.lock:
            if err is None:
                self.acked.append((now, int(msg.value())))
            else:
                self.failed += 1

    def run(self):
        n = 0
        while self.running:
            with self.lock:
                self.sent_at[n] = time.time()
            self.producer.produce(TOPIC, str(n).encode(), partition=0, callback=self.delivered)
            n += 1
            self.producer.poll(INTERVAL_MS / 1000)
        self.producer.flush(60)

    def first_ack_after(self, t):
        """When the first record sent after `t` was acknowledged."""
        with self.lock:
            return next((at for at, v in self.acked if self.sent_at[v] > t), None)


def read_back(bootstrap):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "failover-check",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(TOPIC, 0, 0)])
    values, idle = [], 0
    while idle < 20:
        msg = consumer.poll(0.5)
        if msg is None:
            idle += 1
            continue
        if msg.error():
            continue
        idle = 0
        values.append(int(msg.value()))
    consumer.close()
    return values


def main():
    work = tempfile.mkdtemp(prefix="pagurus-failover-")
    client_ports = [free_port() for _ in range(3)]
    cluster_ports = [free_port() for _ in range(3)]
    peers = ",".join(f"{i + 1}=127.0.0.1:{p}" for i, p in enumerate(cluster_ports))
    nodes = [Node(work, i + 1, peers, client_ports[i], cluster_ports[i]) for i in range(3)]
    for node in nodes:
        node.start()
    try:
        wait_until("a controller leader", lambda: cli(nodes[0], "cluster", "status", check=False).returncode == 0
                   and "leader: node" in cli(nodes[0], "cluster", "status").stdout)
        time.sleep(2)
        cli(nodes[0], "topics", "create", TOPIC, "--replication-factor", "3")
        wait_until("a partition leader", lambda: leader_node(nodes) is not None)
        bootstrap = ",".join(n.addr for n in nodes)
        load = Load(bootstrap)
        load.thread.start()
        wait_until("a first acknowledgement", lambda: load.first_ack_after(0) is not None)
        times = []
        for kill in range(KILLS):
            wait_until("the nodes agree on the leader", lambda: leader_node(nodes) is not None)
            leader = leader_node(nodes)
            victim = nodes[leader - 1]
            killed_at = time.time()
            victim.kill()
            wait_until("an acknowledgement after the kill",
                       lambda: load.first_ack_after(killed_at) is not None, timeout_s=60)
            took = load.first_ack_after(killed_at) - killed_at
            times.append(took)
            print(f"kill {kill + 1}: node {victim.id} led; next acknowledgement after {took:.3f} s", flush=True)
            victim.start()
            # Back in the group: the partition's leader is known again everywhere, and the
            # restarted node has had time to catch up before the next kill.
            time.sleep(3)
        load.running = False
        load.thread.join()
        acked = [v for _, v in sorted(load.acked)]
        stored = read_back(bootstrap)
        missing = sorted(set(acked) - set(stored))
        doubled = len(stored) - len(set(stored))
        position = {v: i for i, v in enumerate(stored)}
        acked_in_log_order = sorted(set(acked) & set(stored), key=lambda v: position[v])
        reordered = acked_in_log_order != sorted(acked_in_log_order)
        print(f"failover over {len(times)} kills: median {statistics.median(times):.3f} s, "
              f"max {max(times):.3f} s")
        print(f"records acknowledged {len(acked)}, failed {load.failed}, read back {len(stored)}, "
              f"acknowledged and missing {len(missing)}, acknowledged out of order: {reordered}, "
              f"stored twice {doubled}{' (idempotent: must be 0)' if IDEMPOTENT else ''}")
        if missing or reordered or (IDEMPOTENT and doubled):
            print(f"LOST: {missing[:20]}", file=sys.stderr)
            return 1
        return 0
    finally:
        for node in nodes:
            node.stop()
        if os.environ.get("KEEP") == "1":
            print(f"kept: {work}")
        else:
            subprocess.run(["rm", "-rf", work])


if __name__ == "__main__":
    sys.exit(main())
