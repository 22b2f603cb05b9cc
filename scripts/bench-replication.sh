#!/usr/bin/env bash
# Replication factor 3 against 1, side by side in one run: three nodes on this machine
# (CORES each, 1 by default: the three share the machine's cores), a topic of one
# partition with each factor, both led by the same node; `pagurus bench` (native, glommio
# client, 4 producers, 1 consumer) against that node, RUNS times each, alternating. Prints
# every run's produce rate and ack p50/p99, their medians and the RF=3/RF=1 rate ratio.
#
#   scripts/bench-replication.sh
#   RUNS=7 DURATION=10 CORES=1 scripts/bench-replication.sh
#
# The nodes keep --fsync's default (always): an RF=3 produce is acknowledged once two of the
# three nodes have it on disk. A long-run tool, not part of CI; docs/REPLICATION.md has its
# figures.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-5}
DURATION=${DURATION:-8}
CORES=${CORES:-1}
cargo build --release --quiet
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP:-0}" = 1 ]; then echo "kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CLIENT=() CLUSTER=()
for i in 1 2 3; do CLIENT+=("$(port)"); CLUSTER+=("$(port)"); done
PEERS="1=127.0.0.1:${CLUSTER[0]},2=127.0.0.1:${CLUSTER[1]},3=127.0.0.1:${CLUSTER[2]}"
for i in 1 2 3; do
  "$BIN" serve --data-dir "$WORK/n$i" --listen "127.0.0.1:${CLIENT[$((i - 1))]}" --cores "$CORES" \
    --no-shard-ports --node-id "$i" --cluster-listen "127.0.0.1:${CLUSTER[$((i - 1))]}" \
    --cluster-peers "$PEERS" >"$WORK/n$i.log" 2>&1 &
  PIDS+=($!)
done
FIRST="127.0.0.1:${CLIENT[0]}"
for _ in $(seq 100); do
  [ "$("$BIN" cluster status --broker "$FIRST" 2>/dev/null | grep -cw live)" = 3 ] && break
  sleep 0.2
done
"$BIN" topics create rf3-0 --replication-factor 3 --broker "$FIRST" >/dev/null
"$BIN" topics create rf1-0 --broker "$FIRST" >/dev/null
# The node leading rf3-0; rf1-0 is made again until that node holds it too.
leader_of() { "$BIN" topics describe "$1" --broker "$FIRST" | awk '$1 == "0" { print $2 }'; }
# Elected once a produce is acknowledged (the first leader is known only then).
for _ in $(seq 100); do
  echo ready | "$BIN" produce --topic rf3-0 --reconnect-ms 0 --broker "$FIRST" >/dev/null 2>&1 && break
  sleep 0.2
done
L3=$(leader_of rf3-0)
for attempt in $(seq 10); do
  [ "$(leader_of rf1-0)" = "$L3" ] && break
  "$BIN" topics delete rf1-0 --broker "$FIRST" >/dev/null
  "$BIN" topics create "rf1-$attempt" --broker "$FIRST" >/dev/null
  "$BIN" topics create rf1-0 --broker "$FIRST" >/dev/null
done
[ "$(leader_of rf1-0)" = "$L3" ] || { echo "could not place rf1-0 on node $L3"; exit 1; }
LEADER="127.0.0.1:${CLIENT[$((L3 - 1))]}"
echo "both topics led by node $L3 ($LEADER); $RUNS runs of ${DURATION}s each, alternating"

for run in $(seq "$RUNS"); do
  for rf in rf3 rf1; do
    "$BIN" bench --broker "$LEADER" --topic-prefix "$rf" --duration "$DURATION" --warmup 1 \
      --json --quiet >"$WORK/$rf-$run.json"
  done
done
python3 - "$WORK" "$RUNS" <<'EOF'
import json, statistics, sys
work, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for rf in ("rf3", "rf1"):
    rows[rf] = []
    for run in range(1, runs + 1):
        d = json.load(open(f"{work}/{rf}-{run}.json"))
        p = d["produce"]
        rows[rf].append((p["msgs_per_s"], p["ack_latency_us"]["p50"], p["ack_latency_us"]["p99"]))
        print(f"{rf} run {run}: {p['msgs_per_s']:>12,.0f} msg/s  ack p50 {p['ack_latency_us']['p50'] / 1000:6.2f} ms  p99 {p['ack_latency_us']['p99'] / 1000:6.2f} ms")
med = {rf: [statistics.median(c) for c in zip(*rows[rf])] for rf in rows}
for rf in ("rf3", "rf1"):
    rate, p50, p99 = med[rf]
    print(f"{rf} median: {rate:,.0f} msg/s, ack p50 {p50 / 1000:.2f} ms, p99 {p99 / 1000:.2f} ms")
ratios = [a[0] / b[0] for a, b in zip(rows["rf3"], rows["rf1"])]
print(f"RF=3 / RF=1 rate: median of per-run ratios {statistics.median(ratios):.2f} (runs: {', '.join(f'{r:.2f}' for r in ratios)})")
EOF
