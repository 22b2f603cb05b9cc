#!/usr/bin/env bash
# Kafka clients (confluent-kafka from Python, kcat from C) against pagurus, beside
# pagurus's own client on the same workload:
# COUNT messages of 100 B into a topic of PARTITIONS partitions, acks=all (fsync=always),
# linger 5 ms, then consumed from the beginning. ROUNDS rounds each; prints every round and
# the medians of produce msg/s, produce p99 and consume msg/s.
#
#   scripts/bench-kafka.sh                      # 3 rounds of 200,000 messages
#   ROUNDS=5 COUNT=1000000 CORES=2 scripts/bench-kafka.sh
#   PIN=1 scripts/bench-kafka.sh                # broker on BROKER_CPUS, every client on CLIENT_CPUS
#
# PIN=1 is the second configuration: the broker and the clients pinned apart with taskset,
# so a client that burns a CPU (the Python driver does) cannot take the broker's.
# The Kafka side is a small confluent-kafka (librdkafka) driver, scripts/bench_kafka.py
# (pip install confluent-kafka); p99 is from send() to the delivery report. The native side
# is `pagurus bench` (glommio client, 4 producers, batches of 100, up to 8 in flight each),
# then a catch-up read of the same topic; its p99 is its produce-acknowledgement latency.
# `pagurus bench --protocol kafka` runs the same two steps speaking Kafka (idempotent
# producers, acks=all, one RecordBatch per batch of 100): the Kafka path's cost beside the
# native one, from one tool.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
COUNT=${COUNT:-200000}
SIZE=${SIZE:-100}
CORES=${CORES:-0}
PARTITIONS=${PARTITIONS:-4}
PIN=${PIN:-0}
BROKER_CPUS=${BROKER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
broker_pin=() client_pin=()
if [ "$PIN" = 1 ]; then broker_pin=(taskset -c "$BROKER_CPUS"); client_pin=(taskset -c "$CLIENT_CPUS"); fi
python3 -c 'import confluent_kafka' 2>/dev/null || { echo "bench-kafka.sh needs: pip install confluent-kafka"; exit 1; }
cargo build --release --quiet
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
WORK=$(mktemp -d)
BROKER=""
cleanup() {
  if [ -n "$BROKER" ]; then kill "$BROKER" 2>/dev/null || true; wait "$BROKER" 2>/dev/null || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
PORT=$((20000 + RANDOM % 10000))
"${broker_pin[@]}" "$BIN" serve --data-dir "$WORK/data" --listen "127.0.0.1:$PORT" --cores "$CORES" --fsync always \
  --log-level warn 2>"$WORK/broker.log" &
BROKER=$!
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done

echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$PIN" = 1 ] && echo "pinned: broker on CPUs $BROKER_CPUS, clients on CPUs $CLIENT_CPUS"
echo "workload: $COUNT x $SIZE B, $PARTITIONS partitions, acks=all, fsync=always, linger 5 ms"
kafka=()
kcat_rows=()
native=()
bench_kafka=()
# kcat's input: COUNT lines of SIZE bytes each (the newline is the separator, not payload).
python3 -c 'import sys; sys.stdout.write(("x" * int(sys.argv[2]) + "\n") * int(sys.argv[1]))' \
  "$COUNT" "$SIZE" >"$WORK/lines"
now_s() { date +%s.%N; }
for round in $(seq "$ROUNDS"); do
  k=$("${client_pin[@]}" python3 scripts/bench_kafka.py "127.0.0.1:$PORT" "kafka-$round" "$COUNT" "$SIZE" "$PARTITIONS")
  echo "round $round kafka (confluent-kafka): $k"
  kafka+=("$k")
  if command -v kcat >/dev/null; then
    # kcat is librdkafka in C: a client that costs far less CPU per message than Python.
    # No per-message latency from it; its rates include connecting and metadata.
    "$BIN" topics create "kcat-$round" --partitions "$PARTITIONS" --broker "127.0.0.1:$PORT" >/dev/null
    t0=$(now_s)
    "${client_pin[@]}" kcat -P -b "127.0.0.1:$PORT" -t "kcat-$round" -X acks=all -X linger.ms=5 \
      -X queue.buffering.max.messages=1000000 -X batch.num.messages=10000 <"$WORK/lines"
    t1=$(now_s)
    # queued.min.messages: as fetch.queue.backoff.ms in bench_kafka.py (kcat's librdkafka
    # may predate that setting), keep librdkafka from pausing its fetches for 1 s.
    got=$("${client_pin[@]}" kcat -C -b "127.0.0.1:$PORT" -t "kcat-$round" -o beginning -e -q -X fetch.wait.max.ms=10 \
      -X queued.min.messages=10000000 | wc -l)
    t2=$(now_s)
    [ "$got" -eq "$COUNT" ] || { echo "kcat consumed $got of $COUNT"; exit 1; }
    kc=$(python3 -c 'import json,sys; n,a,b,c=map(float,sys.argv[1:]); print(json.dumps({"produce_msgs": n/(b-a), "produce_p99_ms": float("nan"), "consume_msgs": n/(c-b)}))' "$COUNT" "$t0" "$t1" "$t2")
    echo "round $round kafka (kcat): $kc"
    kcat_rows+=("$kc")
  fi
  p=$("${client_pin[@]}" "$BIN" bench --broker "127.0.0.1:$PORT" --producers 4 --consumers 0 --topics 1 \
      --partitions "$PARTITIONS" --topic-prefix "native-$round" --size "$SIZE" --batch 100 \
      --linger-ms 5 --count "$COUNT" --warmup 0 --keep-topics --json --quiet 2>/dev/null | tail -1)
  c=$("${client_pin[@]}" "$BIN" bench --broker "127.0.0.1:$PORT" --producers 0 --consumers 1 --topics 1 \
      --partitions "$PARTITIONS" --topic-prefix "native-$round" --from earliest \
      --count "$COUNT" --warmup 0 --json --quiet 2>/dev/null | tail -1)
  n=$(python3 -c 'import json,sys; p=json.loads(sys.argv[1]); c=json.loads(sys.argv[2]); print(json.dumps({"produce_msgs": p["produce"]["msgs_per_s"], "produce_p99_ms": p["produce"]["ack_latency_us"]["p99"] / 1000, "consume_msgs": c["consume"]["msgs_per_s"]}))' "$p" "$c")
  echo "round $round native (pagurus bench): $n"
  native+=("$n")
  p=$("${client_pin[@]}" "$BIN" bench --broker "127.0.0.1:$PORT" --protocol kafka --producers 4 --consumers 0 \
      --topics 1 --partitions "$PARTITIONS" --topic-prefix "pk-$round" --size "$SIZE" --batch 100 \
      --linger-ms 5 --count "$COUNT" --warmup 0 --keep-topics --json --quiet 2>/dev/null | tail -1)
  c=$("${client_pin[@]}" "$BIN" bench --broker "127.0.0.1:$PORT" --protocol kafka --producers 0 --consumers 1 \
      --topics 1 --partitions "$PARTITIONS" --topic-prefix "pk-$round" --from earliest \
      --count "$COUNT" --warmup 0 --json --quiet 2>/dev/null | tail -1)
  n=$(python3 -c 'import json,sys; p=json.loads(sys.argv[1]); c=json.loads(sys.argv[2]); print(json.dumps({"produce_msgs": p["produce"]["msgs_per_s"], "produce_p99_ms": p["produce"]["ack_latency_us"]["p99"] / 1000, "consume_msgs": c["consume"]["msgs_per_s"]}))' "$p" "$c")
  echo "round $round kafka (pagurus bench --protocol kafka): $n"
  bench_kafka+=("$n")
done
python3 - "${kafka[@]}" -- "${kcat_rows[@]}" -- "${native[@]}" -- "${bench_kafka[@]}" <<'PY'
import json, statistics, sys
args = sys.argv[1:]
first = args.index("--")
second = args.index("--", first + 1)
third = args.index("--", second + 1)
kafka = [json.loads(a) for a in args[:first]]
kcat = [json.loads(a) for a in args[first + 1:second]]
native = [json.loads(a) for a in args[second + 1:third]]
bench_kafka = [json.loads(a) for a in args[third + 1:]]
med = lambda xs: statistics.median(xs)
print("\nmedians of %d rounds" % len(kafka))
print("%-28s %14s %14s %14s" % ("client", "produce msg/s", "produce p99 ms", "consume msg/s"))
rows = [("confluent-kafka (Kafka API)", kafka), ("kcat (Kafka API)", kcat), ("pagurus bench (native)", native),
        ("pagurus bench (Kafka API)", bench_kafka)]
for name, rounds in [(n, r) for n, r in rows if r]:
    print("%-28s %14.0f %14.2f %14.0f" % (name, med([r["produce_msgs"] for r in rounds]),
          med([r["produce_p99_ms"] for r in rounds]), med([r["consume_msgs"] for r in rounds])))
PY
