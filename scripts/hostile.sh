#!/usr/bin/env bash
# Hostile clients: every behaviour bounded, logged and counted, memory bounded, and the
# latency of a well-behaved producer measured with and without the hostile load.
#
#   scripts/hostile.sh            # 10,000 idle connections, 30 s of hostile load
#   QUICK=1 scripts/hostile.sh    # CI: 1,000 idle connections, 12 s, no step 1
#
# 1. The hostile-client tests (tests/hostile.rs) at full scale.
# 2. A release broker (2 cores, fsync=never so that the disk's noise does not hide the
#    broker's): a well-behaved producer (one 100 B message in flight, 1,000 msg/s) alone,
#    then again while `hostile_load` (tests/hostile.rs) holds IDLE idle connections,
#    dribbles bytes, sends oversized headers, bad magic, truncated frames and traversal
#    names, creates topics past the limit and leaves consumers unread. Reports both p99s,
#    the broker's peak RSS (VmHWM) and its counters.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=${QUICK:-0}
IDLE=${IDLE:-10000}
LOAD_SECONDS=${LOAD_SECONDS:-30}
if [ "$QUICK" = 1 ]; then IDLE=${IDLE_QUICK:-1000}; LOAD_SECONDS=12; fi
BENCH_SECONDS=$((LOAD_SECONDS - 8))
# Shorter than the load, so that the slowloris clients are cut off within the run.
REQUEST_TIMEOUT_MS=$((LOAD_SECONDS * 1000 / 3))

# Each idle connection is a descriptor in the clients and one in the broker.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((IDLE + 1000)) ]; then
  echo "ulimit -n is $(ulimit -n): too low for $IDLE idle connections" >&2
  exit 1
fi

# (CI runs these tests at their default scale in scripts/test.sh already.)
if [ "$QUICK" != 1 ]; then
  echo ">> hostile-client tests, $IDLE idle connections" >&2
  HOSTILE_IDLE_CONNECTIONS=$IDLE cargo test --release --quiet --test hostile --test hostile_login
fi

cargo build --release --quiet
cargo test --release --quiet --test hostile --no-run 2>/dev/null
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
WORK=$(mktemp -d)
BROKER=""
LOAD=""
cleanup() {
  [ -n "$LOAD" ] && kill "$LOAD" 2>/dev/null || true
  [ -n "$BROKER" ] && kill -9 "$BROKER" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$((12000 + RANDOM % 18000))  # below the ephemeral range (32768+), where shard ports (PORT+1+core) could collide with outgoing connections
"$BIN" serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --cores 2 --fsync never \
  --max-connections $((IDLE + 500)) --max-topics 1000 \
  --idle-timeout-ms 5000 --handshake-timeout-ms 5000 --request-timeout-ms "$REQUEST_TIMEOUT_MS" \
  2>"$WORK/broker.log" &
BROKER=$!
for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done

p99() { # label [bench flags]
  local label=$1; shift
  "$BIN" bench --broker 127.0.0.1:$PORT --producers 1 --consumers 0 --size 100 --batch 1 \
    --in-flight 1 --rate 1000 --duration "$BENCH_SECONDS" --warmup 1 --topic-prefix wellbehaved \
    --json --quiet "$@" > "$WORK/$label.json" 2>"$WORK/$label.err" || {
    cat "$WORK/$label.err" >&2; tail -20 "$WORK/broker.log" >&2; echo "bench $label failed" >&2; exit 1; }
  python3 -c "import json,sys; a=json.load(open(sys.argv[1]))['produce']['ack_latency_us']; print(f\"p50 {a['p50']:.0f} us, p99 {a['p99']:.0f} us, p99.9 {a['p999']:.0f} us, max {a['max']:.0f} us\")" "$WORK/$label.json"
}

# Creates the producer's topic and warms the broker up; not reported. The topic is kept:
# the later runs reuse it, because the hostile load fills the broker's topic limit and a
# run that had to create its topic then would be refused (TopicLimit).
BENCH_SECONDS=3 p99 warmup --keep-topics >/dev/null
echo ">> well-behaved producer alone (${BENCH_SECONDS}s)" >&2
ALONE=$(p99 alone)
RSS_IDLE=$(awk '/VmRSS/ {print $2}' /proc/$BROKER/status)

echo ">> hostile load (${LOAD_SECONDS}s, $IDLE idle connections) with the producer" >&2
HOSTILE_BROKER=127.0.0.1:$PORT HOSTILE_SECONDS=$LOAD_SECONDS HOSTILE_IDLE_CONNECTIONS=$IDLE \
  cargo test --release --quiet --test hostile -- --ignored --exact hostile_load --nocapture \
  >"$WORK/load.log" 2>&1 &
LOAD=$!
sleep 5 # the idle connections open
UNDER_LOAD=$(p99 under-load)
wait "$LOAD" || { cat "$WORK/load.log" >&2; echo "hostile load failed" >&2; exit 1; }
LOAD=""
HWM=$(awk '/VmHWM/ {print $2}' /proc/$BROKER/status)
FDS=$(ls /proc/$BROKER/fd | wc -l)
kill -TERM "$BROKER"
wait "$BROKER" || { echo "broker did not stop cleanly" >&2; exit 1; }
BROKER=""

echo
echo "hostile clients: $IDLE idle connections, ${LOAD_SECONDS}s of hostile load, 2 cores"
echo "  well-behaved producer alone:      $ALONE"
echo "  well-behaved producer under load: $UNDER_LOAD"
echo "  broker RSS before the load: $((RSS_IDLE / 1024)) MiB; peak RSS (VmHWM): $((HWM / 1024)) MiB; descriptors after: $FDS"
grep -h "hostile:" "$WORK/load.log" | sed 's/^/  /'
python3 - "$WORK/broker.log" "${HOSTILE_ONLY:-slowloris}" <<'PY'
import re, sys, collections
sums = collections.Counter()
for line in open(sys.argv[1]):
    if "core stopped" in line:
        # "counters=name=value name=value ...": only counters above zero are named.
        summary = line.split("counters=", 1)[-1]
        for name, value in re.findall(r'(\w+)=(\d+)', summary):
            sums[name] += int(value)
keys = ["connections_accepted", "connections_refused", "connections_timed_out", "requests_too_slow",
        "writes_stalled", "frames_too_large", "requests_malformed", "bad_batches", "bad_names",
        "topic_limit_hits", "unknown_protocols"]
print("  counters: " + ", ".join(f"{k} {sums[k]}" for k in keys))
if "slowloris" in sys.argv[2] and sums["requests_too_slow"] == 0:
    sys.exit("no slow request was cut off, though the slowloris clients ran past the request timeout")
PY
