#!/usr/bin/env bash
# HermitMQ's own load tools against HermitMQ and against pagurus, side by side.
#
#   scripts/bench-hermit.sh HERMIT_DIR
#   QUICK=1 scripts/bench-hermit.sh HERMIT_DIR        # one round: a smoke test
#   ROUNDS=5 BROKER_CPUS=0 CLIENT_CPUS=1 scripts/bench-hermit.sh HERMIT_DIR
#   BROKER_BIN=/old/checkout/target/release/pagurus scripts/bench-hermit.sh HERMIT_DIR
#                                     # another build's pagurus: before/after comparisons
#   PERF=1 scripts/bench-hermit.sh HERMIT_DIR  # also kernel counts per batch (perf stat)
#
# HermitMQ is not part of this repository: HERMIT_DIR is a directory where you built it,
# holding bin/hermitmq, bin/spam_producer, bin/spam_consumer and its hermitmq.json. Build it
# from its public source as its README says ("Local Development", Go 1.25+):
#
#   git clone https://github.com/ekhidirov/hermitmq.git HERMIT_DIR && cd HERMIT_DIR
#   mkdir -p bin
#   go build -o bin/hermitmq ./cmd/hermitmq
#   go build -o bin/spam_producer ./cmd/spam_producer
#   go build -o bin/spam_consumer ./cmd/spam_consumer
#
# Any Go >= 1.21 fetches the 1.25 toolchain its go.mod asks for by itself when the Go module
# proxy is reachable (or set GOTOOLCHAIN=go1.25.0 or newer). On a Debian 12 machine without
# the proxy, this builds with bookworm-backports' Go 1.23 and Debian's x/exp instead (the
# code uses nothing newer; only the build copy's go.mod is changed):
#
#   echo 'deb http://deb.debian.org/debian bookworm-backports main' \
#     > /etc/apt/sources.list.d/backports.list && apt-get update   # if not configured
#   apt-get install -t bookworm-backports golang-1.23-go golang-golang-x-exp-dev
#   export PATH=/usr/lib/go-1.23/bin:$PATH GOTOOLCHAIN=local GOFLAGS=-mod=mod GOPROXY=off
#   go mod edit -go=1.23 -replace golang.org/x/exp=/usr/share/gocode/src/golang.org/x/exp
#   (then the three go build lines above)
#
# What the tools do (cmd/spam_producer, cmd/spam_consumer): 10 producer connections, each
# sends 100,000 records of 28 B in batches of 100 (one batch per HermitMQ v1 frame, record
# count 100) and waits for each batch's 9-byte ack before sending the next: one batch in
# flight per connection, all to topic load_test partition 0. The producer prints the wall
# time for all 1,000,000 records; its rate is 1,000,000 / that time. The consumer (group
# stress-group) counts logical records until 1,000,000 and prints its rate from its first
# batch on. Both hard-code 127.0.0.1:9092, so each broker runs on port 9092 in turn; as root
# the whole run happens in a private network namespace (unshare -n) so that nothing else on
# the machine can hold that port or see it. Set NETNS=0 to use the machine's loopback.
#
# Order per round: HermitMQ, pagurus --fsync always, pagurus --fsync never (HermitMQ never
# fsyncs before it acks; `never` is the like-for-like row, `always` is pagurus' default).
# Each run starts from an empty data directory. Prints every run, then medians and the
# pagurus / HermitMQ ratios. BROKER_CPUS / CLIENT_CPUS (taskset lists) pin the broker and
# the tools apart; CORES is pagurus' --cores (0 = every CPU it may use).
#
# Broker CPU: utime + stime of the broker process (all its threads, /proc/PID/stat) from just
# before the consumer connects to just after both tools are done, so start-up and shutdown
# are not in it; also per batch of 100 records (10,000 batches a run). pagurus runs with
# IDLE_POLL_US (default 0: `--idle-poll-us 0`, no polling before parking, which would count
# spinning as CPU; HermitMQ does not poll either). The resolution is one clock tick (10 ms).
set -euo pipefail
cd "$(dirname "$0")/.."
HERMIT_DIR=${1:?usage: scripts/bench-hermit.sh HERMIT_DIR (see the header)}
HERMIT_DIR=$(cd "$HERMIT_DIR" && pwd)
for f in bin/hermitmq bin/spam_producer bin/spam_consumer hermitmq.json; do
  [ -e "$HERMIT_DIR/$f" ] || { echo "$HERMIT_DIR/$f is missing: build HermitMQ as the header of $0 says"; exit 1; }
done
command -v python3 >/dev/null || { echo "bench-hermit.sh needs python3"; exit 1; }

if [ "${NETNS:-1}" = 1 ] && [ -z "${BENCH_HERMIT_IN_NETNS:-}" ] && [ "$(id -u)" = 0 ] \
  && unshare -n true 2>/dev/null; then
  cargo build --release --quiet  # outside the namespace: the build may need the network
  BENCH_HERMIT_IN_NETNS=1 exec unshare -n "$0" "$HERMIT_DIR"
fi
if [ -n "${BENCH_HERMIT_IN_NETNS:-}" ]; then ip link set lo up; else cargo build --release --quiet; fi

QUICK=${QUICK:-0}
ROUNDS=${ROUNDS:-3}
[ "$QUICK" = 1 ] && ROUNDS=1
CORES=${CORES:-0}
RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-120}
IDLE_POLL_US=${IDLE_POLL_US:-0}
CLK_TCK=$(getconf CLK_TCK)
BIN=${BROKER_BIN:-${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus}
OUT=${OUT:-bench-results/hermit-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
BROKER=""
PERF_PID=""
# PERF=1: pagurus runs under `perf stat` (needs root or perf_event_paranoid <= -1), and the
# summary adds these kernel counts per produced batch, which do not depend on how busy the
# machine is (scripts/latency-probe.sh does the same for `pagurus bench`).
PERF=${PERF:-0}
PERF_EVENTS=${PERF_EVENTS:-context-switches,sched:sched_wakeup,syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_membarrier}
if [ "$PERF" = 1 ]; then command -v perf >/dev/null || { echo "PERF=1 needs perf (apt-get install linux-perf)"; exit 1; }; fi
cleanup() { [ -n "$BROKER" ] && kill -9 "$BROKER" 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

# `taskset -c LIST` or nothing: a prefix, not a function, so that `$!` of a background
# command is the process itself (taskset execs it) and a TERM reaches it.
BROKER_PIN=(); [ -n "${BROKER_CPUS:-}" ] && BROKER_PIN=(taskset -c "$BROKER_CPUS")
CLIENT_PIN=(); [ -n "${CLIENT_CPUS:-}" ] && CLIENT_PIN=(taskset -c "$CLIENT_CPUS")

wait_port() {
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null && return; sleep 0.05; done
  echo "broker did not start on 127.0.0.1:9092"; exit 1
}

start_broker() { # hermit | always | never
  rm -rf "$WORK/run"; mkdir -p "$WORK/run"
  if [ "$1" = hermit ]; then
    # HermitMQ reads ./hermitmq.json and keeps its data in ./hermitmq-data.
    cp "$HERMIT_DIR/hermitmq.json" "$WORK/run/"
    (cd "$WORK/run" && exec "${BROKER_PIN[@]}" "$HERMIT_DIR/bin/hermitmq") >"$OUT/broker-$1-$2.log" 2>&1 &
  elif [ "$PERF" = 1 ]; then
    perf stat -x, -o "$OUT/perf-$1-$2.csv" -e "$PERF_EVENTS" -- \
      "${BROKER_PIN[@]}" "$BIN" serve --data-dir "$WORK/run/data" --listen 127.0.0.1:9092 \
      --cores "$CORES" --fsync "$1" --idle-poll-us "$IDLE_POLL_US" >"$OUT/broker-$1-$2.log" 2>&1 &
    PERF_PID=$!
    # perf does not pass signals on: the broker is perf's child.
    for _ in $(seq 100); do BROKER=$(pgrep -P "$PERF_PID" || true); [ -n "$BROKER" ] && break; sleep 0.05; done
    wait_port
    return
  else
    "${BROKER_PIN[@]}" "$BIN" serve --data-dir "$WORK/run/data" --listen 127.0.0.1:9092 \
      --cores "$CORES" --fsync "$1" --idle-poll-us "$IDLE_POLL_US" >"$OUT/broker-$1-$2.log" 2>&1 &
  fi
  BROKER=$!
  wait_port
}

stop_broker() {
  kill -TERM "$BROKER" 2>/dev/null || true
  wait "$BROKER" 2>/dev/null || true
  BROKER=""
  # perf writes its counts when the broker exits.
  if [ -n "$PERF_PID" ]; then wait "$PERF_PID" 2>/dev/null || true; PERF_PID=""; fi
  # The next broker binds the same port with SO_REUSEPORT: make sure this one is gone.
  for _ in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null || return 0; sleep 0.1; done
  echo "a broker still listens on 127.0.0.1:9092 after its TERM"; exit 1
}

# utime + stime of the broker process, all threads, in clock ticks (fields 14 and 15; the
# command name in field 2 is in parentheses and has no spaces for either broker).
broker_ticks() { awk '{ print $14 + $15 }' "/proc/$BROKER/stat"; }

one_run() { # broker kind, round -> appends "kind producer_rate consumer_rate ..." to $WORK/results
  local kind=$1 round=$2 log="$OUT/$1-$2"
  start_broker "$kind" "$round"
  local ticks0; ticks0=$(broker_ticks)
  "${CLIENT_PIN[@]}" timeout "$RUN_TIMEOUT_S" "$HERMIT_DIR/bin/spam_consumer" >"$log-consumer.txt" 2>&1 &
  local consumer=$!
  sleep 0.3  # the consumer is connected before the first batch, as with `make stress-consumer` first
  "${CLIENT_PIN[@]}" timeout "$RUN_TIMEOUT_S" "$HERMIT_DIR/bin/spam_producer" >"$log-producer.txt" 2>&1 \
    || { echo "spam_producer failed against $kind (see $log-producer.txt)"; exit 1; }
  wait "$consumer" || { echo "spam_consumer failed against $kind (see $log-consumer.txt)"; exit 1; }
  local cpu_s; cpu_s=$(( $(broker_ticks) - ticks0 )); cpu_s=$(awk -v t="$cpu_s" -v hz="$CLK_TCK" 'BEGIN { print t / hz }')
  stop_broker
  python3 - "$kind" "$log-producer.txt" "$log-consumer.txt" "$OUT/broker-$kind-$round.log" \
    "$OUT/perf-$kind-$round.csv" "$cpu_s" >>"$WORK/results" <<'PY'
import re, sys
kind, prod, cons = sys.argv[1], open(sys.argv[2]).read(), open(sys.argv[3]).read()
cpu_s = float(sys.argv[6])
# pagurus's stop lines ("core stopped ... counters=name=value ..."), summed over cores.
counters = {}
for line in open(sys.argv[4], errors="replace"):
    if "core stopped" in line and "counters=" in line:
        for item in line.split("counters=", 1)[1].split():
            name, _, value = item.partition("=")
            if value.isdigit():
                counters[name] = counters.get(name, 0) + int(value)
m = re.search(r"All Producers finished in (\S+)", prod)
if not m:
    sys.exit(f"no producer time in {sys.argv[2]}")
# A Go time.Duration string: e.g. 1m2.5s, 812.3ms, 950µs.
units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
secs = sum(float(v) * units[u] for v, u in re.findall(r"([0-9.]+)(h|ms|us|µs|ns|m|s)", m.group(1)))
c = re.search(r"Throughput: ([0-9.]+) JSONs/sec", cons)
if not c:
    sys.exit(f"no consumer rate in {sys.argv[3]}")
if "Producer" in prod and "failed" in prod:
    sys.exit(f"a producer failed: {sys.argv[2]}")
batches = max(counters.get("batches_in", 0), 1)
# perf stat -x, lines: value,unit,event,...
perf = []
try:
    for line in open(sys.argv[5]):
        f = line.strip().split(",")
        if len(f) >= 3 and f[0].replace(".", "").isdigit():
            perf.append(f"{f[2]}={float(f[0]) / batches:.2f}")
except (FileNotFoundError, IndexError):
    pass
print(kind, 1_000_000 / secs, float(c.group(1)), counters.get("mesh_calls", 0) / batches,
      counters.get("connections_handed_off", 0), cpu_s, *perf)
PY
  echo ">> round $round, $kind: $(tail -n1 "$WORK/results")" >&2
}

: >"$WORK/results"
for round in $(seq "$ROUNDS"); do
  for kind in hermit always never; do one_run "$kind" "$round"; done
done

python3 - "$WORK/results" "$ROUNDS" "$(nproc)" "$(uname -r)" "${BROKER_CPUS:-any}" "${CLIENT_CPUS:-any}" "$IDLE_POLL_US" <<'PY' | tee "$OUT/summary.md"
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
med = {}
for kind in ("hermit", "always", "never"):
    p = [float(r[1]) for r in rows if r[0] == kind]
    c = [float(r[2]) for r in rows if r[0] == kind]
    u = [float(r[5]) for r in rows if r[0] == kind]
    med[kind] = (statistics.median(p), statistics.median(c), p, c, statistics.median(u), u)
name = {"hermit": "HermitMQ", "always": "pagurus --fsync always", "never": "pagurus --fsync never"}
print(f"# HermitMQ's spam_producer / spam_consumer, medians of {sys.argv[2]} alternating rounds")
print()
print(f"{sys.argv[3]} CPUs, {sys.argv[4]}, broker CPUs {sys.argv[5]}, tools' CPUs {sys.argv[6]}.")
print("10 producer connections x 100,000 records of 28 B, 100 per batch, one batch in flight each.")
print(f"pagurus --idle-poll-us {sys.argv[7]}.")
print()
print("| broker | producer rec/s (median) | x HermitMQ | consumer rec/s (median) | x HermitMQ | broker CPU s (median) | x HermitMQ | broker CPU us per batch | producer runs | broker CPU s, runs | mesh calls per batch | connections handed off |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
h = med["hermit"]
for kind in ("hermit", "always", "never"):
    p, c, ps, _, u, us = med[kind]
    runs = ", ".join(f"{x:,.0f}" for x in ps)
    cpus = ", ".join(f"{x:.2f}" for x in us)
    mesh = "-" if kind == "hermit" else ", ".join(f"{float(r[3]):.3f}" for r in rows if r[0] == kind)
    handed = "-" if kind == "hermit" else ", ".join(r[4] for r in rows if r[0] == kind)
    ux = f"{u / h[4]:.2f}" if h[4] > 0 else "-"
    print(f"| {name[kind]} | {p:,.0f} | {p / h[0]:.2f} | {c:,.0f} | {c / h[1]:.2f} | {u:.2f} | {ux} | {u / 10_000 * 1e6:.1f} | {runs} | {cpus} | {mesh} | {handed} |")
print()
print("Broker CPU: utime + stime from /proc/PID/stat over the run (consumer start to both tools")
print("done), 10 ms ticks; per batch = that / 10,000 batches. Mesh calls per batch and hand-offs")
print("come from pagurus's stop lines (all cores, each run).")
perf = [r for r in rows if len(r) > 6]
if perf:
    print()
    print("Kernel counts of the broker per produced batch (perf stat), each run:")
    print()
    for r in perf:
        print(f"- {name[r[0]]}: " + ", ".join(r[6:]))
PY
