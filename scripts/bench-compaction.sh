#!/usr/bin/env bash
# Does compaction move produce latency? Runs the same fixed-rate produce workload twice per
# round while a loop keeps appending keyed updates to a `cleanup = compact` topic on the same
# cores: once with that loop only, once with the loop also compacting the topic after each
# round of updates (`topics compact`). The two differ only by compaction. Alternates them
# ROUNDS times and prints the median ack percentiles of each.
#
#   scripts/bench-compaction.sh                     # 3 rounds of 2 x 15 s
#   ROUNDS=1 DURATION=5 RATE=100000 scripts/bench-compaction.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-15}
RATE=${RATE:-200000}
PREFILL_MB=${PREFILL_MB:-128}
cargo build --release --quiet
BIN=$PWD/target/release/pagurus
OUT=${OUT:-bench-results/compaction-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
WORK=$(mktemp -d)
BROKER=""
LOOP=""
cleanup() {
  [ -n "$LOOP" ] && kill "$LOOP" 2>/dev/null || true
  [ -n "$BROKER" ] && kill -9 "$BROKER" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$((12000 + RANDOM % 18000))  # below the ephemeral range (32768+), where shard ports (PORT+1+core) could collide with outgoing connections
B=127.0.0.1:$PORT
# Background passes off: this script decides when compaction runs.
"$BIN" serve --data-dir "$WORK/data" --listen "$B" --fsync always \
  --compact-dirty-ratio 1 --compact-interval-ms 86400000 2>"$OUT/broker.log" &
BROKER=$!
for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done

"$BIN" topics create kv --broker "$B" --partitions 2 --cleanup compact --segment-bytes 4194304 >/dev/null

update() { # one round of keyed updates: 1 MB per key per partition
  for k in $(seq 0 3); do
    for p in 0 1; do
      "$BIN" produce --broker "$B" --topic kv --partition $p --key "user-$k" --count 10000 --size 100 >/dev/null
    done
  done
}
echo ">> prefilling kv with ${PREFILL_MB} MB of keyed updates" >&2
for _ in $(seq 1 $((PREFILL_MB / 8))); do update; done

background_loop() { # compact after each round of updates: yes|no
  while true; do
    update
    if [ "$1" = yes ]; then
      "$BIN" topics compact kv --broker "$B" >>"$OUT/compactions.txt" 2>&1 || true
    fi
  done
}

run() { # label
  "$BIN" bench --broker "$B" --json --quiet --out "$OUT" --label "$1" --topic-prefix load \
    --producers 4 --partitions 2 --rate "$RATE" --batch 100 --linger-ms 1 --duration "$DURATION" \
    > "$OUT/$1.json"
}

for r in $(seq 1 "$ROUNDS"); do
  for compact in no yes; do
    label=$([ "$compact" = yes ] && echo "compacting-$r" || echo "idle-$r")
    echo ">> round $r: updates, compaction: $compact" >&2
    background_loop "$compact" &
    LOOP=$!
    sleep 2
    run "$label"
    kill "$LOOP" 2>/dev/null; wait "$LOOP" 2>/dev/null || true
    LOOP=""
  done
done

python3 - "$OUT" "$ROUNDS" "$RATE" <<'PY' | tee "$OUT/summary.md"
import json, statistics, sys, pathlib
out, rounds, rate = pathlib.Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
def med(kind, key):
    vals = [json.load(open(out / f"{kind}-{r}.json"))["produce"]["ack_latency_us"][key] for r in range(1, rounds + 1)]
    return statistics.median(vals), vals
passes = [l for l in (out / "compactions.txt").read_text().splitlines() if "segments rewritten" in l] if (out / "compactions.txt").exists() else []
print(f"# Produce ack latency with and without compaction ({rate:,} msg/s, fsync=always, medians of {rounds} runs; keyed updates run in both)\n")
print("| ack latency (us) | p50 | p99 | p99.9 | max |")
print("|---|---|---|---|---|")
for kind in ("idle", "compacting"):
    cells = []
    for key in ("p50", "p99", "p999", "max"):
        m, vals = med(kind, key)
        cells.append(f"{m:,.0f} ({', '.join(f'{v:,.0f}' for v in vals)})")
    print(f"| {'without' if kind == 'idle' else 'with'} compaction | " + " | ".join(cells) + " |")
print(f"\nCompaction passes during the runs: {len(passes)}")
for l in passes[:6]:
    print(f"- {l}")
PY
