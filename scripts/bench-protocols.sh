#!/usr/bin/env bash
# `pagurus bench --protocol native` and `--protocol kafka` against one broker, alternating,
# with the broker's own CPU per message: the Kafka path's cost beside the native one, from
# one tool, in one run.
#
#   scripts/bench-protocols.sh                    # 3 rounds of 1,000,000 messages each
#   ROUNDS=5 COUNT=2000000 scripts/bench-protocols.sh
#   BROKER_CPUS=0 CLIENT_CPUS=1 scripts/bench-protocols.sh   # broker and client pinned apart
#
# Shape (the one-pipeline issue's): 10 producers, one topic of 4 partitions, 100 B messages,
# batches of 100, one batch in flight per producer, no consumers; the broker runs
# `--fsync always --idle-poll-us 0` (Kafka: idempotent producers, acks=all). Broker CPU is
# utime + stime of its process (all threads, /proc/PID/stat, 10 ms ticks) over each bench
# run. Prints every run, then medians and the kafka / native ratios.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
ROUNDS=${ROUNDS:-3}
COUNT=${COUNT:-1000000}
PORT=${PORT:-19092}
BROKER_PIN=(); [ -n "${BROKER_CPUS:-}" ] && BROKER_PIN=(taskset -c "$BROKER_CPUS")
CLIENT_PIN=(); [ -n "${CLIENT_CPUS:-}" ] && CLIENT_PIN=(taskset -c "$CLIENT_CPUS")
WORK=$(mktemp -d)
BROKER=""
cleanup() { if [ -n "$BROKER" ]; then kill -9 "$BROKER" 2>/dev/null || true; wait "$BROKER" 2>/dev/null || true; fi; rm -rf "$WORK"; }
trap cleanup EXIT

"${BROKER_PIN[@]}" "$BIN" serve --data-dir "$WORK/data" --listen "127.0.0.1:$PORT" --cores 0 \
  --fsync always --idle-poll-us 0 >"$WORK/broker.log" 2>&1 &
BROKER=$!
for _ in $(seq 200); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.05; done
(exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null || { echo "broker did not start"; cat "$WORK/broker.log"; exit 1; }
ticks() { awk '{ print $14 + $15 }' "/proc/$BROKER/stat"; }
hz=$(getconf CLK_TCK)

: >"$WORK/results"
for round in $(seq "$ROUNDS"); do
  for protocol in native kafka; do
    t0=$(ticks)
    "${CLIENT_PIN[@]}" timeout 300 "$BIN" bench --broker "127.0.0.1:$PORT" --protocol "$protocol" \
      --producers 10 --consumers 0 --topics 1 --partitions 4 --size 100 --batch 100 \
      --in-flight 1 --count "$COUNT" --warmup 0 --quiet --json >"$WORK/out.json"
    t1=$(ticks)
    python3 - "$protocol" "$WORK/out.json" "$((t1 - t0))" "$hz" "$COUNT" >>"$WORK/results" <<'PY'
import json, sys
protocol, out, ticks, hz, count = sys.argv[1], json.load(open(sys.argv[2])), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
produce = out.get("produce", out)
rate = produce.get("msgs_per_s") or produce.get("messages_per_second")
if rate is None:
    sys.exit(f"no rate in the bench's JSON: {json.dumps(out)[:300]}")
cpu_s = ticks / hz
print(protocol, rate, cpu_s, cpu_s / count * 1e9)
PY
    echo ">> round $round, $protocol: $(tail -n1 "$WORK/results")" >&2
  done
done

python3 - "$WORK/results" "$ROUNDS" "$(nproc)" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = {}
for protocol in ("native", "kafka"):
    mine = [r for r in rows if r[0] == protocol]
    med[protocol] = (statistics.median(float(r[1]) for r in mine),
                     statistics.median(float(r[3]) for r in mine))
print(f"# pagurus bench, native vs kafka, medians of {sys.argv[2]} alternating rounds, {sys.argv[3]} CPUs")
print("| protocol | msgs/s | x native | broker CPU ns/msg | x native |")
print("|---|---|---|---|---|")
for protocol in ("native", "kafka"):
    rate, cpu = med[protocol]
    print(f"| {protocol} | {rate:,.0f} | {rate / med['native'][0]:.2f} | {cpu:.0f} | {cpu / med['native'][1]:.2f} |")
PY
