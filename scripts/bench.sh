#!/usr/bin/env bash
# The standard benchmark suite. Builds the release binary, starts a broker per fsync policy
# (its own data directory, a random port), runs each workload with `pagurus bench`, and
# writes a markdown summary with HDR percentile files and SVG charts to
# bench-results/<time>/ (or $OUT). Needs only cargo and python3.
#
#   scripts/bench.sh                  # full suite (about 5 minutes)
#   QUICK=1 scripts/bench.sh          # shorter runs, 128 MB catch-up: a smoke test
#   CLIENT=blocking scripts/bench.sh  # drive the broker with the blocking client instead
#   CORES=2 PARTITIONS=4 CATCHUP_MB=2048 DURATION=20 scripts/bench.sh
#   BROKER_CPUS=0 CLIENT_CPUS=1 scripts/bench.sh   # broker and client pinned apart (taskset)
#   DATA_BASE=/dev/shm scripts/bench.sh  # data on tmpfs: the broker without the device
#   BROKER_BIN=/old/checkout/target/release/pagurus scripts/bench.sh
#                                     # another build's broker, this build's bench client:
#                                     # before/after comparisons with the same load
#
# Pinning tells the broker's latency from the client's: unpinned, both compete for the same
# CPUs; pinned, the broker has only BROKER_CPUS. Report both configurations (LATENCY.md).
#
# Workloads:
#   (a) HermitMQ's: 10 producers x 100,000 records of 28 B, batches of 100, one batch in
#       flight per producer, fsync=always
#   (b) 100 B records, batches of 100, 10 producers, max throughput, per fsync policy
#   (c) latency with one message in flight, per fsync policy (also with the blocking client)
#   (d) latency at a fixed rate of half the max measured in (b), fsync=always
#   (e) consumer catch-up from the earliest offset over >= CATCHUP_MB MB of records
#   and the broker's heap allocations per produced batch (benches/ingest_alloc.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
CORES=${CORES:-0}
QUICK=${QUICK:-0}
CLIENT=${CLIENT:-glommio}
THREADS=${THREADS:-1}
PARTITIONS=${PARTITIONS:-4}
CATCHUP_MB=${CATCHUP_MB:-1024}
CATCHUP_SIZE=${CATCHUP_SIZE:-100}
DURATION=${DURATION:-10}
BROKER_PIN=(); CLIENT_PIN=()
if [ -n "${BROKER_CPUS:-}" ]; then BROKER_PIN=(taskset -c "$BROKER_CPUS"); fi
if [ -n "${CLIENT_CPUS:-}" ]; then CLIENT_PIN=(taskset -c "$CLIENT_CPUS"); fi
if [ "$QUICK" = 1 ]; then DURATION=3; CATCHUP_MB=${CATCHUP_MB_QUICK:-128}; fi
command -v python3 >/dev/null || { echo "bench.sh needs python3"; exit 1; }
cargo build --release --quiet
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
BROKER_BIN=${BROKER_BIN:-$BIN}
OUT=${OUT:-bench-results/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
# DATA_BASE=/dev/shm puts the data directories on tmpfs: the same runs without the device,
# to tell the broker's own latency from the disk's (and, on a VM, from the host's steal).
DATA_BASE_SHOWN=${DATA_BASE:-default}
WORK=$(mktemp -d ${DATA_BASE:+-p "$DATA_BASE"})
BROKER=""
cleanup() { [ -n "$BROKER" ] && kill -9 "$BROKER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

start_broker() { # fsync policy
  PORT=$((12000 + RANDOM % 18000))  # below the ephemeral range (32768+), where shard ports (PORT+1+core) could collide with outgoing connections
  rm -rf "$WORK/data"
  METRICS_PORT=$((PORT - 1000))
  "${BROKER_PIN[@]}" "$BROKER_BIN" serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --cores "$CORES" --fsync "$1" \
    --metrics-listen 127.0.0.1:$METRICS_PORT 2>"$OUT/broker-$1.log" &
  BROKER=$!
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && return; sleep 0.05; done
  echo "broker did not start"; exit 1
}
stop_broker() { kill -TERM "$BROKER"; wait "$BROKER" || true; BROKER=""; }

bench() { # label, args...
  local label=$1; shift
  echo ">> $label: pagurus bench $*" >&2
  "${CLIENT_PIN[@]}" "$BIN" bench --broker 127.0.0.1:$PORT --client "${BENCH_CLIENT:-$CLIENT}" --threads "$THREADS" --json --quiet \
    --broker-metrics 127.0.0.1:$METRICS_PORT --out "$OUT" --label "$label" "$@" > "$OUT/$label.json"
}

row() { # label, description
  python3 - "$OUT/$1.json" "$1" "$2" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
p, c, e = r["produce"], r["consume"], r["end_to_end_latency_us"]
a = p["ack_latency_us"]
f = lambda x: f"{x:,.0f}"
lat = lambda h, keys: " / ".join(f"{h[k]:,.0f}" for k in keys)
b = r.get("broker_ack_latency_us") or {}
share = lat(b, ["p50", "p99"]) if b.get("p50") is not None else "-"
m = r.get("machine_cpu") or {}
steal = f"{m['steal_ms']:,.0f}" if "steal_ms" in m else "-"
print(f"| {sys.argv[2]} | {sys.argv[3]} | {f(p['msgs_per_s'])} | {p['mb_per_s']:.1f} | {f(c['msgs_per_s'])} | "
      f"{c['mb_per_s']:.1f} | {lat(a, ['p50', 'p90', 'p99', 'p999', 'max'])} | {share} | {lat(e, ['p50', 'p99', 'p999', 'max'])} | {steal} |")
PY
}

json_field() { # file, python expression over r
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print($2)" "$1"
}

ROWS=()
CHECKS=()
for policy in always interval=5 never; do
  start_broker "$policy"
  tag=${policy/=/}
  if [ "$policy" = always ]; then
    bench a-hermit-workload --producers 10 --consumers 1 --size 28 --batch 100 --in-flight 1 \
      --count 1000000 --warmup 0 --topic-prefix hermit
    ROWS+=("$(row a-hermit-workload "10 x 100,000 x 28 B, batch 100, 1 in flight per producer, fsync=$policy")")
  fi
  bench "b-max-$tag" --producers 10 --consumers 2 --partitions "$PARTITIONS" --size 100 --batch 100 \
    --in-flight 8 --duration "$DURATION" --warmup 1 --topic-prefix "max-$tag"
  ROWS+=("$(row "b-max-$tag" "100 B, batch 100, 10 producers on $PARTITIONS partitions, max rate, fsync=$policy")")
  bench "c-one-in-flight-$tag" --producers 1 --consumers 1 --size 100 --batch 1 --in-flight 1 \
    --duration "$DURATION" --warmup 1 --topic-prefix "one-$tag"
  ROWS+=("$(row "c-one-in-flight-$tag" "1 message in flight, 100 B, fsync=$policy")")
  if [ "$CLIENT" != blocking ]; then
    # At one message in flight the client's own wake-up cost shows: the blocking client
    # for reference.
    BENCH_CLIENT=blocking bench "c-one-in-flight-$tag-blocking" --producers 1 --consumers 1 --size 100 \
      --batch 1 --in-flight 1 --duration "$DURATION" --warmup 1 --topic-prefix "one-b-$tag"
    ROWS+=("$(row "c-one-in-flight-$tag-blocking" "the same, blocking client")")
  fi
  if [ "$policy" = always ]; then
    MAX=$(json_field "$OUT/b-max-$tag.json" "int(r['produce']['msgs_per_s'])")
    HALF=$((MAX / 2))
    bench d-half-rate --producers 10 --consumers 2 --partitions "$PARTITIONS" --size 100 --batch 100 \
      --in-flight 8 --rate "$HALF" --duration "$DURATION" --warmup 1 --topic-prefix half
    ROWS+=("$(row d-half-rate "100 B, batch 100, 10 producers on $PARTITIONS partitions, fixed rate $HALF msg/s (half of max), fsync=$policy")")
    COUNT=$((CATCHUP_MB * 1000000 / CATCHUP_SIZE))
    bench e-fill --producers 4 --consumers 0 --size "$CATCHUP_SIZE" --batch 100 --in-flight 8 \
      --count "$COUNT" --warmup 0 --topic-prefix catchup --keep-topics
    bench e-catch-up --producers 0 --consumers 1 --from earliest --count "$COUNT" --warmup 0 \
      --topic-prefix catchup
    READ=$(json_field "$OUT/e-catch-up.json" "r['consume']['payload_bytes']")
    if [ "$READ" -lt $((CATCHUP_MB * 1000000)) ]; then
      echo "catch-up read only $READ bytes of records, not $CATCHUP_MB MB"; exit 1
    fi
    ROWS+=("$(row e-catch-up "catch-up from earliest: $COUNT records of $CATCHUP_SIZE B, $READ B read")")
    CHECKS+=("catch-up read $READ bytes of records (at least $CATCHUP_MB MB asked)")
  fi
  stop_broker
done

echo ">> allocations per batch: cargo bench --bench ingest_alloc" >&2
if [ "$QUICK" = 1 ]; then ALLOC_ARGS=(--test); else ALLOC_ARGS=(); fi
ALLOCS=$(cargo bench --quiet --bench ingest_alloc -- "${ALLOC_ARGS[@]}" 2>/dev/null)

{
  echo "# pagurus bench, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo
  echo "$(nproc) CPUs, $(uname -r), broker --cores ${CORES} (0 = all), clients on the same machine,"
  echo "broker CPUs: ${BROKER_CPUS:-any}, client CPUs: ${CLIENT_CPUS:-any}, broker binary: $BROKER_BIN,"
  echo "the $CLIENT client ($THREADS bench thread(s) with the glommio client). Latencies in"
  echo "microseconds; ack = produce acknowledgement, e2e = produce to consume, both from the"
  echo "intended send time (open loop). MB/s counts record bytes. Broker's share: the broker's"
  echo "own ack time from its metrics (pagurus_produce_ack_duration_seconds, bucket estimates)."
  echo "Steal: CPU milliseconds the hypervisor took from this VM's CPUs during the run (/proc/stat;"
  echo "0 on bare metal); a stolen CPU stalls its core for milliseconds (docs/LATENCY.md (n))."
  echo "Data directory: $WORK (DATA_BASE=$DATA_BASE_SHOWN)."
  echo
  echo "| run | workload | produce msg/s | produce MB/s | consume msg/s | consume MB/s | ack p50 / p90 / p99 / p99.9 / max | broker's share p50 / p99 | e2e p50 / p99 / p99.9 / max | steal ms |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  for r in "${ROWS[@]}"; do echo "$r"; done
  echo
  for c in "${CHECKS[@]}"; do echo "- $c"; done
  echo
  echo "Broker heap allocations on the ingest path (benches/ingest_alloc.rs):"
  echo
  echo '```'
  echo "$ALLOCS"
  echo '```'
  echo
  echo "Charts and percentile files: \`*.svg\`, \`*-ack.hgrm\`, \`*-e2e.hgrm\` in this directory."
} > "$OUT/summary.md"
cat "$OUT/summary.md"
