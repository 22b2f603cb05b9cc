#!/usr/bin/env bash
# Counts what the broker does per produced batch, without timing anything: the broker runs
# under `perf stat` (kernel tracepoints: syscalls, io_uring requests and their hand-offs to
# io-wq workers, ext4 syncs and journal commits, wake-ups, context switches, dirty-page
# throttling) while `pagurus bench` sends a fixed count of batches. Counts divided by the
# batches sent do not depend on how busy the machine is, unlike latencies. See
# docs/LATENCY.md for what the numbers mean.
#
#   scripts/latency-probe.sh                     # one in flight, fsync always and never
#   WORKLOAD=half scripts/latency-probe.sh       # 10 producers, 4 partitions, batch 100, open loop
#   BATCHES=5000 POLICIES="always" scripts/latency-probe.sh
#   TASKSET=1 scripts/latency-probe.sh           # broker on CPU 0, bench client on CPU 1
#   LOOPFS=1 scripts/latency-probe.sh            # data on a private ext4 (loop device)
#
# With LOOPFS=1 the data directory is on an ext4 file system of its own (a 2 GiB image in a
# loop device), so the journal commits of that file system (`jbd2:jbd2_start_commit`,
# counted machine-wide and filtered by device) are the broker's alone: whether an fdatasync
# committed the journal shows per batch. Its flushes go to the image file, not the disk, so
# its latencies mean even less.
#
# Needs root (or perf_event_paranoid <= -1) and Debian's linux-perf (and e2fsprogs for
# LOOPFS).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { echo "latency-probe.sh needs perf (apt-get install linux-perf)"; exit 1; }
BATCHES=${BATCHES:-2000}
POLICIES=${POLICIES:-always never}
WORKLOAD=${WORKLOAD:-one}
RATE=${RATE:-200000}
CORES=${CORES:-0}
TASKSET=${TASKSET:-0}
cargo build --release --quiet
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
WORK=$(mktemp -d)
BROKER=""
LOOP=""
cleanup() {
  [ -n "$BROKER" ] && kill -9 "$BROKER" 2>/dev/null || true
  if [ -n "$LOOP" ]; then umount "$WORK/fs" 2>/dev/null || true; losetup -d "$LOOP" || true; fi
  rm -rf "$WORK"
}
trap cleanup EXIT
DATA=$WORK/data
JOURNAL=()
if [ "${LOOPFS:-0}" = 1 ]; then
  truncate -s 2G "$WORK/image"
  LOOP=$(losetup --find --show "$WORK/image")
  mkfs.ext4 -q -F "$LOOP"
  mkdir -p "$WORK/fs" && mount "$LOOP" "$WORK/fs"
  DATA=$WORK/fs/data
  # The kernel's dev_t of the loop device: major << 20 | minor.
  DEVT=$(( ($(stat -c '0x%t' "$LOOP") << 20) | $(stat -c '0x%T' "$LOOP") ))
  JOURNAL=(-a -e jbd2:jbd2_start_commit --filter "dev == $DEVT")
fi
BROKER_PIN=(); CLIENT_PIN=()
if [ "$TASKSET" = 1 ]; then BROKER_PIN=(taskset -c 0); CLIENT_PIN=(taskset -c 1); fi

EVENTS=syscalls:sys_enter_io_uring_enter,syscalls:sys_enter_membarrier,syscalls:sys_enter_futex
EVENTS+=,syscalls:sys_enter_write,syscalls:sys_enter_read,syscalls:sys_enter_epoll_wait
EVENTS+=,syscalls:sys_enter_sendto,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendfile64
EVENTS+=,io_uring:io_uring_submit_req,io_uring:io_uring_queue_async_work
EVENTS+=,ext4:ext4_sync_file_enter,jbd2:jbd2_start_commit,writeback:balance_dirty_pages
EVENTS+=,sched:sched_wakeup,context-switches,cpu-migrations

for policy in $POLICIES; do
  PORT=$((12000 + RANDOM % 18000))
  rm -rf "$DATA"
  if [ ${#JOURNAL[@]} -gt 0 ]; then
    perf stat -x, -o "$WORK/journal-$policy.csv" "${JOURNAL[@]}" &
    JPERF=$!
  fi
  # jbd2 commits run in the journal's kernel thread: counted for the whole machine (-a),
  # so other load on the same file system adds to them; everything else is the broker's.
  perf stat -x, -o "$WORK/perf-$policy.csv" -e "$EVENTS" -- \
    "${BROKER_PIN[@]}" "$BIN" serve --data-dir "$DATA" --listen 127.0.0.1:$PORT --cores "$CORES" \
    --fsync "$policy" 2>"$WORK/broker-$policy.log" &
  PERF=$!
  for _ in $(seq 100); do BROKER=$(pgrep -P "$PERF" || true); [ -n "$BROKER" ] && break; sleep 0.05; done
  for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done
  case $WORKLOAD in
    one) ARGS=(--producers 1 --consumers 0 --size 100 --batch 1 --in-flight 1 --count "$BATCHES") ;;
    half) ARGS=(--producers 10 --consumers 0 --partitions 4 --size 100 --batch 100 --in-flight 8
                --rate "$RATE" --count $((BATCHES * 100))) ;;
    *) echo "WORKLOAD is one or half"; exit 1 ;;
  esac
  "${CLIENT_PIN[@]}" timeout 120 "$BIN" bench --broker 127.0.0.1:$PORT --warmup 0 --topic-prefix "probe-$policy" \
    --json --quiet "${ARGS[@]}" >"$WORK/bench-$policy.json"
  # TERM the broker itself (perf does not pass signals on); perf writes its counts when
  # its child exits.
  kill -TERM "$BROKER"; wait "$PERF" || true; BROKER=""
  if [ ${#JOURNAL[@]} -gt 0 ]; then
    kill -INT "$JPERF"; wait "$JPERF" || true
    sed 's/jbd2:jbd2_start_commit/jbd2:jbd2_start_commit (this file system)/' "$WORK/journal-$policy.csv" >>"$WORK/perf-$policy.csv"
  fi
  python3 - "$WORK/perf-$policy.csv" "$BATCHES" "$policy" "$WORKLOAD" "$WORK/bench-$policy.json" <<'PY'
import json, sys
path, batches, policy, workload = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
r = json.load(open(sys.argv[5]))
a = r["produce"]["ack_latency_us"]
print(f"## fsync={policy}, workload={workload}, {batches} batches "
      f"(ack p50 {a['p50']:,.0f} us, p99 {a['p99']:,.0f} us: noisy, for orientation only)")
print("| event | count | per batch |")
print("|---|---|---|")
for line in open(path):
    f = line.strip().split(",")
    if len(f) < 3 or not f[0].replace(".", "").isdigit():
        continue
    n = float(f[0])
    print(f"| {f[2]} | {n:,.0f} | {n / batches:.2f} |")
PY
done
