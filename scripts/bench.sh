#!/usr/bin/env bash
# The standard benchmark suite. Starts a release broker per fsync policy (its own data
# directory, its own port), runs each workload with `pagurus bench`, and writes a markdown
# summary with HDR percentile files and SVG charts to bench-results/<time>/.
#
#   scripts/bench.sh                  # full suite (a few minutes)
#   QUICK=1 scripts/bench.sh          # shorter runs, for a smoke test
#   CORES=2 CATCHUP_MB=1024 scripts/bench.sh
#
# Workloads:
#   (a) HermitMQ's: 10 producers x 100,000 records of 28 B, batches of 100, one batch in flight
#   (b) 100 B records, batches of 100, 10 producers, max throughput, per fsync policy
#   (c) latency with one message in flight, per fsync policy
#   (d) latency at half the max rate measured in (b), fsync=always
#   (e) consumer catch-up from the earliest offset over >= CATCHUP_MB MB
set -euo pipefail
cd "$(dirname "$0")/.."
CORES=${CORES:-0}
QUICK=${QUICK:-0}
CATCHUP_MB=${CATCHUP_MB:-1024}
DURATION=${DURATION:-10}
if [ "$QUICK" = 1 ]; then DURATION=3; CATCHUP_MB=${CATCHUP_MB_QUICK:-128}; fi
cargo build --release --quiet
BIN=$PWD/target/release/pagurus
OUT=${OUT:-bench-results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
WORK=$(mktemp -d)
BROKER=""
cleanup() { [ -n "$BROKER" ] && kill -9 "$BROKER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

start_broker() { # fsync policy
  PORT=$((20000 + RANDOM % 20000))
  rm -rf "$WORK/data"
  "$BIN" serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --cores "$CORES" --fsync "$1" \
    2>"$OUT/broker-$1.log" &
  BROKER=$!
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return; sleep 0.05; done
  echo "broker did not start"; exit 1
}
stop_broker() { kill -TERM "$BROKER"; wait "$BROKER" || true; BROKER=""; }

bench() { # label, args...
  local label=$1; shift
  echo ">> $label: pagurus bench $*" >&2
  "$BIN" bench --broker 127.0.0.1:$PORT --json --quiet --out "$OUT" --label "$label" "$@" > "$OUT/$label.json"
}

row() { # label, description
  python3 - "$OUT/$1.json" "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p, c, e = r["produce"], r["consume"], r["end_to_end_latency_us"]
a = p["ack_latency_us"]
f = lambda x: f"{x:,.0f}"
print(f"| {sys.argv[2]} | {sys.argv[3]} | {f(p['msgs_per_s'])} | {p['mb_per_s']:.1f} | {f(c['msgs_per_s'])} | "
      f"{a['p50']:.0f} / {a['p90']:.0f} / {a['p99']:.0f} / {a['p999']:.0f} / {a['p9999']:.0f} / {a['max']:.0f} | "
      f"{e['p50']:.0f} / {e['p99']:.0f} / {e['p999']:.0f} / {e['max']:.0f} |")
PY
}

ROWS=()
for policy in always interval=5 never; do
  start_broker "$policy"
  tag=${policy/=/}
  if [ "$policy" = always ]; then
    bench a-hermit-workload --producers 10 --consumers 1 --size 28 --batch 100 --in-flight 1 --count 1000000 --warmup 0
    ROWS+=("$(row a-hermit-workload "10 x 100k x 28 B, batch 100, 1 in flight, fsync=$policy")")
  fi
  bench "b-max-$tag" --producers 10 --consumers 1 --size 100 --batch 100 --in-flight 8 --duration "$DURATION" --warmup 1 --topic-prefix "max-$tag"
  ROWS+=("$(row "b-max-$tag" "100 B, batch 100, 10 producers, max rate, fsync=$policy")")
  bench "c-one-in-flight-$tag" --producers 1 --consumers 1 --size 100 --batch 1 --in-flight 1 --duration "$DURATION" --warmup 1 --topic-prefix "one-$tag"
  ROWS+=("$(row "c-one-in-flight-$tag" "1 message in flight, 100 B, fsync=$policy")")
  if [ "$policy" = always ]; then
    MAX=$(python3 -c "import json;print(int(json.load(open('$OUT/b-max-$tag.json'))['produce']['msgs_per_s']))")
    HALF=$((MAX / 2))
    bench d-half-rate --producers 10 --consumers 1 --size 100 --batch 100 --in-flight 8 --rate "$HALF" --duration "$DURATION" --warmup 1 --topic-prefix half
    ROWS+=("$(row d-half-rate "100 B, batch 100, 10 producers, fixed rate $HALF msg/s (half of max), fsync=$policy")")
    COUNT=$((CATCHUP_MB * 1000000 / 1000))
    bench e-fill --producers 4 --consumers 0 --size 1000 --batch 100 --in-flight 8 --count "$COUNT" --warmup 0 --topic-prefix catchup
    bench e-catch-up --producers 0 --consumers 1 --from earliest --count "$COUNT" --warmup 0 --topic-prefix catchup
    ROWS+=("$(row e-catch-up "catch-up from earliest, $CATCHUP_MB MB of 1000 B records")")
  fi
  stop_broker
done

{
  echo "# pagurus bench, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "$(nproc) CPUs, $(uname -r), broker --cores ${CORES} (0 = all), clients on the same machine."
  echo "Latencies in microseconds; ack = produce acknowledgement, e2e = produce to consume."
  echo
  echo "| run | workload | produce msg/s | produce MB/s | consume msg/s | ack p50 / p90 / p99 / p99.9 / p99.99 / max | e2e p50 / p99 / p99.9 / max |"
  echo "|---|---|---|---|---|---|---|"
  for r in "${ROWS[@]}"; do echo "$r"; done
  echo
  echo "Charts and percentile files: \`*.svg\`, \`*-ack.hgrm\`, \`*-e2e.hgrm\` in this directory."
} > "$OUT/summary.md"
cat "$OUT/summary.md"
