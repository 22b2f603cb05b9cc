#!/usr/bin/env bash
# Starts the release broker N times (default 40) on a fresh data directory each time and
# counts the starts where not every core logs "core serving" within 5 s; for each such
# start it saves every thread's stack (gdb) and the broker's debug log, and reports how long
# it took in the end. Run it while the machine is loaded (a build, a test run): glommio
# 0.9's park-with-runnable-work bug (vendor/README.md) showed up there as ~7 s starts.
#
#   scripts/start-stalls.sh            # 40 starts
#   N=200 CORES=2 scripts/start-stalls.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-40}
CORES=${CORES:-0}
cargo build --release --quiet
BIN=${BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus}
OUT=${OUT:-$(mktemp -d)}
expected=$CORES
[ "$expected" = 0 ] && expected=$(nproc)
stalls=0
for i in $(seq "$N"); do
  data=$(mktemp -d)
  port=$((12000 + RANDOM % 18000))
  start=$(date +%s%N)
  "$BIN" serve --data-dir "$data/d" --listen "127.0.0.1:$port" --cores "$CORES" \
    --log-level pagurus=debug 2>"$data/log" &
  broker=$!
  serving() { grep -c 'core serving' "$data/log" 2>/dev/null || true; }
  for _ in $(seq 100); do [ "$(serving)" -ge "$expected" ] && break; sleep 0.05; done
  if [ "$(serving)" -lt "$expected" ]; then
    stalls=$((stalls + 1))
    command -v gdb >/dev/null && gdb -p "$broker" -batch -ex "thread apply all bt" >"$OUT/stall-$i.stacks" 2>&1 || true
    for _ in $(seq 300); do [ "$(serving)" -ge "$expected" ] && break; sleep 0.1; done
    echo "start $i: $(serving)/$expected cores serving after $(( ($(date +%s%N) - start) / 1000000 )) ms (stacks and log in $OUT)"
    cp "$data/log" "$OUT/stall-$i.log"
  fi
  kill -9 "$broker" 2>/dev/null || true
  wait "$broker" 2>/dev/null || true
  rm -rf "$data"
done
echo "$stalls of $N starts were not serving within 5 s"
[ "$stalls" = 0 ]
