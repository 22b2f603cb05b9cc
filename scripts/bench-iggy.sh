#!/usr/bin/env bash
# Apache Iggy's own benchmark against Iggy and the same shape against pagurus, side by side.
#
#   scripts/bench-iggy.sh IGGY_DIR
#   scripts/bench-iggy.sh none                     # pagurus' rows only (no Iggy build needed)
#   ROUNDS=5 MODES=never scripts/bench-iggy.sh IGGY_DIR
#   BROKER_BIN=/old/checkout/target/release/pagurus scripts/bench-iggy.sh IGGY_DIR
#   SAME_DIR=1 scripts/bench-iggy.sh none          # every round into one data directory
#
# Iggy is not part of this repository: IGGY_DIR is a checkout of its public repository built
# with its own release profile (the workspace's: LTO, one codegen unit) and the toolchain
# its rust-toolchain.toml pins (rustup installs it on the first cargo call):
#
#   git clone https://github.com/apache/iggy.git IGGY_DIR && cd IGGY_DIR
#   apt-get install libudev-dev libhwloc-dev protobuf-compiler clang
#   cargo build --release -p server -p iggy-bench
#
# which leaves IGGY_DIR/target/release/iggy-server and iggy-bench (about 30-60 minutes on
# 2 cores). IGGY_TARGET overrides IGGY_DIR/target (a CARGO_TARGET_DIR of your own).
#
# The workload is Iggy's pinned-producer benchmark: 10 producers, each on its own
# connection (TCP, nodelay) to its own stream, 100 B messages, batches of 1 000, one batch
# in flight each, 10 M messages in all:
#
#   iggy-bench -m 100 -P 1000 -b 1000 [--enforce-fsync] pinned-producer --streams 10 \
#     --producers 10 tcp --server-address 127.0.0.1:8090 --nodelay
#
# against `iggy-server --fresh --with-default-root-credentials` (its default config: one
# shard per CPU, 2 here; 127.0.0.1:8090), and pagurus with 10 topics of 1 partition on
# `--cores 2`, driven by `pagurus bench --producers 10 --consumers 0 --topics 10
# --partitions 1 --size 100 --batch 1000 --in-flight 1 --count 10000000 --warmup 0`.
# Modes: `never` (Iggy without fsync, pagurus --fsync never) and `always` (Iggy's
# --enforce-fsync, an fsync per batch; pagurus --fsync always).
#
# Order per round: for each mode, Iggy then pagurus, so the two alternate and both see the
# disk in the same state. Each run starts from an empty data directory under WORK_BASE (a
# temporary directory on /work's disk by default), deleted after the run unless SAME_DIR=1
# (then every pagurus run of a mode writes into one directory, and nothing is deleted until
# the end: what a long run on one data directory pays). Prints every run (with the page
# cache's Dirty and Writeback before it, from /proc/meminfo), then medians of the rounds:
# msgs/s, producer p99 latency, broker CPU seconds (utime + stime of the broker process over
# the run, /proc/PID/stat) and the pagurus / Iggy ratios. Each run's line also gives free
# memory before it and what the kernel reclaimed during it (/proc/vmstat pgsteal_*): on a
# VM, pages freed long enough ago to be handed back to the host cost a host fault each on
# first touch again (docs/LATENCY.md, (o)).
set -euo pipefail
cd "$(dirname "$0")/.."
IGGY_DIR=${1:?usage: scripts/bench-iggy.sh IGGY_DIR|none (see the header)}
if [ "$IGGY_DIR" != none ]; then
  IGGY_DIR=$(cd "$IGGY_DIR" && pwd)
  IGGY_TARGET=${IGGY_TARGET:-$IGGY_DIR/target}
  for f in iggy-server iggy-bench; do
    [ -x "$IGGY_TARGET/release/$f" ] || { echo "$IGGY_TARGET/release/$f is missing: build Iggy as the header of $0 says"; exit 1; }
  done
fi
command -v python3 >/dev/null || { echo "bench-iggy.sh needs python3"; exit 1; }

ROUNDS=${ROUNDS:-3}
MODES=${MODES:-"never always"}
COUNT=${COUNT:-10000000}
CORES=${CORES:-2}
IDLE_POLL_US=${IDLE_POLL_US:-}
SAME_DIR=${SAME_DIR:-0}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-300}
CLK_TCK=$(getconf CLK_TCK)
cargo build --release --quiet
BIN=${BROKER_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus}
BENCH_BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
OUT=${OUT:-bench-results/iggy-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK_BASE=${WORK_BASE:-/work}
WORK=$(mktemp -d -p "$WORK_BASE")
BROKER=""
cleanup() { [ -n "$BROKER" ] && kill -9 "$BROKER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

broker_ticks() { awk '{ print $14 + $15 }' "/proc/$BROKER/stat"; }
meminfo_mb() { awk -v k="$1:" '$1 == k { printf "%d", $2 / 1024 }' /proc/meminfo; }
# Pages the kernel reclaimed so far (kswapd and direct reclaim), in MB.
reclaimed_mb() { awk '$1 ~ /^pgsteal_(kswapd|direct)$/ { n += $2 } END { printf "%d", n * 4 / 1024 }' /proc/vmstat; }

wait_port() { # port
  for _ in $(seq 300); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return; sleep 0.1; done
  echo "broker did not start on 127.0.0.1:$1"; exit 1
}

stop_broker() {
  kill -TERM "$BROKER" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$BROKER" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$BROKER" 2>/dev/null || true
  wait "$BROKER" 2>/dev/null || true
  BROKER=""
}

one_run() { # system mode round -> appends "system mode round msgs_per_s p99_ms cpu_s dirty_mb writeback_mb free_mb reclaimed_mb"
  local system=$1 mode=$2 round=$3 log="$OUT/$1-$2-$3" data ticks0 cpu dirty wb free reclaimed
  dirty=$(meminfo_mb Dirty); wb=$(meminfo_mb Writeback); free=$(meminfo_mb MemFree); reclaimed=$(reclaimed_mb)
  if [ "$system" = iggy ]; then
    data="$WORK/iggy-$mode-$round"; mkdir -p "$data"
    # Iggy keeps its data under ./local_data of its working directory.
    (cd "$data" && IGGY_TCP_ADDRESS=127.0.0.1:8090 exec "$IGGY_TARGET/release/iggy-server" \
      --fresh --with-default-root-credentials) >"$log-server.log" 2>&1 &
    BROKER=$!
    wait_port 8090
    ticks0=$(broker_ticks)
    local fsync=(); [ "$mode" = always ] && fsync=(--enforce-fsync)
    timeout "$RUN_TIMEOUT_S" "$IGGY_TARGET/release/iggy-bench" -m 100 -P 1000 \
      -b $((COUNT / 10 / 1000)) "${fsync[@]}" pinned-producer --streams 10 --producers 10 \
      tcp --server-address 127.0.0.1:8090 --nodelay >"$log-bench.txt" 2>&1 \
      || { echo "iggy-bench failed (see $log-bench.txt)"; exit 1; }
  else
    if [ "$SAME_DIR" = 1 ]; then data="$WORK/pagurus-$mode"; else data="$WORK/pagurus-$mode-$round"; fi
    local port=$((12000 + RANDOM % 18000)) poll=()
    [ -n "$IDLE_POLL_US" ] && poll=(--idle-poll-us "$IDLE_POLL_US")
    "$BIN" serve --data-dir "$data" --listen "127.0.0.1:$port" --cores "$CORES" --fsync "$mode" \
      "${poll[@]}" >"$log-server.log" 2>&1 &
    BROKER=$!
    wait_port "$port"
    ticks0=$(broker_ticks)
    local keep=(); [ "$SAME_DIR" = 1 ] && keep=(--keep-topics)
    timeout "$RUN_TIMEOUT_S" "$BENCH_BIN" bench --broker "127.0.0.1:$port" --producers 10 \
      --consumers 0 --topics 10 --partitions 1 --size 100 --batch 1000 --in-flight 1 \
      --count "$COUNT" --warmup 0 --topic-prefix "bench-$round" "${keep[@]}" --quiet --json \
      >"$log-bench.json" 2>"$log-bench.err" \
      || { echo "pagurus bench failed (see $log-bench.err)"; exit 1; }
  fi
  cpu=$(awk -v t="$(( $(broker_ticks) - ticks0 ))" -v hz="$CLK_TCK" 'BEGIN { print t / hz }')
  reclaimed=$(( $(reclaimed_mb) - reclaimed ))
  stop_broker
  [ "$SAME_DIR" = 1 ] && [ "$system" = pagurus ] || rm -rf "$data"
  python3 - "$system" "$mode" "$round" "$log" "$cpu" "$dirty" "$wb" "$free" "$reclaimed" >>"$WORK/results" <<'PY'
import json, re, sys
system, mode, round_, log, cpu, dirty, wb, free, reclaimed = sys.argv[1:]
if system == "iggy":
    text = re.sub(r"\x1b\[[0-9;]*m", "", open(log + "-bench.txt", errors="replace").read())
    m = re.search(r"Producers Results: Total throughput: [0-9.]+ MB/s, ([0-9.]+) messages/s.*?p99 latency: ([0-9.]+) ms", text)
    if not m:
        sys.exit(f"no producer results in {log}-bench.txt")
    rate, p99 = float(m.group(1)), float(m.group(2))
else:
    report = json.load(open(log + "-bench.json"))
    rate = report["produce"]["msgs_per_s"]
    p99 = report["produce"]["ack_latency_us"]["p99"] / 1000
print(system, mode, round_, rate, p99, cpu, dirty, wb, free, reclaimed)
PY
  echo ">> round $round, $system $mode: $(tail -n1 "$WORK/results")" >&2
}

: >"$WORK/results"
for round in $(seq "$ROUNDS"); do
  for mode in $MODES; do
    [ "$IGGY_DIR" != none ] && one_run iggy "$mode" "$round"
    one_run pagurus "$mode" "$round"
  done
done

python3 - "$WORK/results" "$ROUNDS" "$(nproc)" "$(uname -r)" "$COUNT" "$SAME_DIR" <<'PY' | tee "$OUT/summary.md"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
print(f"# Iggy's pinned-producer benchmark, medians of {sys.argv[2]} alternating rounds")
print()
print(f"{sys.argv[3]} CPUs, {sys.argv[4]}; 10 producers, 100 B messages, batches of 1 000, "
      f"one in flight each, {int(sys.argv[5]):,} messages; pagurus 10 topics x 1 partition"
      + (", every round into one data directory" if sys.argv[6] == "1" else "") + ".")
print()
print("| mode | broker | msgs/s (median) | x Iggy | p99 ms (median) | broker CPU s (median) | msgs/s, runs | p99 ms, runs | broker CPU s, runs | Dirty / Writeback / free MB before, reclaimed MB during each run |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode in dict.fromkeys(r[1] for r in rows):
    med = {}
    for system in ("iggy", "pagurus"):
        rs = [r for r in rows if r[0] == system and r[1] == mode]
        if not rs:
            continue
        rate = statistics.median(float(r[3]) for r in rs)
        med[system] = rate
        ratio = f"{rate / med['iggy']:.2f}" if system == "pagurus" and "iggy" in med else "-"
        print(f"| {mode} | {system} | {rate:,.0f} | {ratio} | "
              f"{statistics.median(float(r[4]) for r in rs):.2f} | "
              f"{statistics.median(float(r[5]) for r in rs):.2f} | "
              + ", ".join(f"{float(r[3]) / 1e6:.2f} M" for r in rs) + " | "
              + ", ".join(f"{float(r[4]):.2f}" for r in rs) + " | "
              + ", ".join(f"{float(r[5]):.2f}" for r in rs) + " | "
              + ", ".join(f"{r[6]}/{r[7]}/{r[8]}, {r[9]}" for r in rs) + " |")
PY
