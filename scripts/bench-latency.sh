#!/usr/bin/env bash
# The latency workloads of bench.sh, in two configurations: unpinned (broker and client
# anywhere), and pinned apart with taskset (broker on BROKER_CPUS, the bench client on
# CLIENT_CPUS), so the broker's latency can be told from the client's. Prints one table.
#
#   scripts/bench-latency.sh                 # both configurations
#   TASKSET=only scripts/bench-latency.sh    # pinned only; TASKSET=0: unpinned only
#   QUICK=1 scripts/bench-latency.sh         # 2 s runs: a smoke test
#   RATE=500000 BROKER_CPUS=0 CLIENT_CPUS=1 scripts/bench-latency.sh
#   CLIENT_IDLE_POLL_US=200 scripts/bench-latency.sh  # the client polls before it sleeps
#                                            # (bench --idle-poll-us): its wake-ups left out
#   DATA_BASE=/dev/shm scripts/bench-latency.sh  # data on tmpfs: the broker without the
#                                            # device (nor, on a VM, the host's steal)
#
# Workloads (as bench.sh c and d): one 100 B message in flight under fsync always and
# never; 10 producers, 4 partitions, batches of 100 x 100 B, open loop at RATE msg/s under
# always (bench.sh uses half of its measured max; give that figure as RATE). With 2 CPUs,
# pinning leaves the broker one CPU: both rows matter. Each row also gives the CPU time per
# message of the broker and of the bench client, and the broker's own share of the ack
# (its pagurus_produce_ack_duration_seconds over the measured window, bench --broker-metrics).
# See docs/LATENCY.md.
set -euo pipefail
cd "$(dirname "$0")/.."
QUICK=${QUICK:-0}
DURATION=${DURATION:-10}
[ "$QUICK" = 1 ] && DURATION=2
RATE=${RATE:-500000}
TASKSET=${TASKSET:-1}
BROKER_CPUS=${BROKER_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
CLIENT_IDLE_POLL_US=${CLIENT_IDLE_POLL_US:-0}
command -v python3 >/dev/null || { echo "bench-latency.sh needs python3"; exit 1; }
cargo build --release --quiet
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
OUT=${OUT:-bench-results/latency-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
WORK=$(mktemp -d ${DATA_BASE:+-p "$DATA_BASE"})
BROKER=""
cleanup() { [ -n "$BROKER" ] && kill -9 "$BROKER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

case $TASKSET in
  0) CONFIGS=(unpinned) ;;
  only) CONFIGS=(pinned) ;;
  *) CONFIGS=(unpinned pinned) ;;
esac

run() { # config, policy, label, bench args...
  local config=$1 policy=$2 label=$3; shift 3
  local broker_pin=() client_pin=()
  if [ "$config" = pinned ]; then
    broker_pin=(taskset -c "$BROKER_CPUS"); client_pin=(taskset -c "$CLIENT_CPUS")
  fi
  PORT=$((12000 + RANDOM % 18000))  # below the ephemeral range (see bench.sh)
  METRICS_PORT=$((PORT - 1000))
  rm -rf "$WORK/data"
  "${broker_pin[@]}" "$BIN" serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --fsync "$policy" \
    --metrics-listen 127.0.0.1:$METRICS_PORT 2>"$OUT/broker-$config-$label.log" &
  BROKER=$!
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done
  echo ">> $config $label: pagurus bench $*" >&2
  # CPU time of each side over the run (warm-up included, like messages_total): the
  # broker's from /proc (all its threads, io-wq workers included), the client's from time(1).
  local timer=() broker_ticks
  [ -x /usr/bin/time ] && timer=(/usr/bin/time -f "%U %S" -o "$OUT/$config-$label.client-cpu")
  broker_ticks=$(cpu_ticks "$BROKER")
  "${timer[@]}" "${client_pin[@]}" timeout $((DURATION + 60)) "$BIN" bench --broker 127.0.0.1:$PORT --json --quiet \
    --out "$OUT" --label "$config-$label" --duration "$DURATION" --warmup 1 --topic-prefix "$label" --idle-poll-us "$CLIENT_IDLE_POLL_US" \
    --broker-metrics 127.0.0.1:$METRICS_PORT "$@" \
    >"$OUT/$config-$label.json"
  echo $(($(cpu_ticks "$BROKER") - broker_ticks)) >"$OUT/$config-$label.broker-ticks"
  kill -TERM "$BROKER"; wait "$BROKER" || true; BROKER=""
}

cpu_ticks() { # user + system clock ticks of a process, all its threads
  awk '{print $14 + $15}' "/proc/$1/stat"
}

for config in "${CONFIGS[@]}"; do
  run "$config" always one-always --producers 1 --consumers 1 --size 100 --batch 1 --in-flight 1
  run "$config" never one-never --producers 1 --consumers 1 --size 100 --batch 1 --in-flight 1
  run "$config" always half-always --producers 10 --consumers 2 --partitions 4 --size 100 \
    --batch 100 --in-flight 8 --rate "$RATE"
done

python3 - "$OUT" "$BROKER_CPUS" "$CLIENT_CPUS" "$(getconf CLK_TCK)" "${CONFIGS[@]}" <<'PY' | tee "$OUT/summary.md"
import json, os, sys
out, bcpus, ccpus, tck, configs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5:]
print(f"pinned = broker on CPUs {bcpus}, bench client on CPUs {ccpus} (taskset). Latencies in us;")
print("CPU: microseconds of CPU time per produced message, broker (all threads) / bench client.")
print()
print("Broker's share: the broker's own ack time p50 / p99 (its metrics, bucket estimates).")
print("Steal: CPU ms the hypervisor took from this VM's CPUs in the measured window (/proc/stat).")
print()
print("| config | workload | produce msg/s | ack p50 / p90 / p99 / p99.9 / max | broker's share p50 / p99 | e2e p50 / p99 / max | CPU us/msg broker / client | steal ms |")
print("|---|---|---|---|---|---|---|---|")
for config in configs:
    for label in ("one-always", "one-never", "half-always"):
        base = f"{out}/{config}-{label}"
        r = json.load(open(f"{base}.json"))
        p, a, e = r["produce"], r["produce"]["ack_latency_us"], r["end_to_end_latency_us"]
        lat = lambda h, keys: " / ".join(f"{h[k]:,.0f}" for k in keys)
        n = max(p["messages_total"], 1)
        broker_us = int(open(f"{base}.broker-ticks").read()) / tck * 1e6 / n
        client = f"{base}.client-cpu"
        client_us = (f"{sum(map(float, open(client).read().split())) * 1e6 / n:,.1f}"
                     if os.path.exists(client) else "-")
        b = r.get("broker_ack_latency_us") or {}
        share = lat(b, ["p50", "p99"]) if b.get("p50") is not None else "-"
        m = r.get("machine_cpu") or {}
        steal = f"{m['steal_ms']:,.0f}" if "steal_ms" in m else "-"
        print(f"| {config} | {label} | {p['msgs_per_s']:,.0f} | {lat(a, ['p50', 'p90', 'p99', 'p999', 'max'])} "
              f"| {share} | {lat(e, ['p50', 'p99', 'max'])} | {broker_us:,.1f} / {client_us} | {steal} |")
PY
