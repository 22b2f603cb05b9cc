#!/usr/bin/env bash
# Proves the zero-copy fetch path: runs the release broker under strace while a consumer
# catches up on MB megabytes (default 128), then shows which system calls carried the bytes.
# Expected: sendfile carries (almost) all of them; pread64 only moves single bytes (one per
# socket-full wait, see src/server/sendfile.rs), and no read of segment data happens.
#
#   scripts/strace-fetch.sh [MB]
set -euo pipefail
cd "$(dirname "$0")/.."
MB=${1:-128}
command -v strace >/dev/null || { echo "strace is not installed (apt-get install strace)"; exit 1; }
cargo build --release --quiet
BIN=target/release/pagurus
WORK=$(mktemp -d)
PORT=$((12000 + RANDOM % 18000))  # below the ephemeral range (32768+), where shard ports (PORT+1+core) could collide with outgoing connections
trap 'kill -9 $BROKER 2>/dev/null || true; rm -rf "$WORK"' EXIT

# 1. Fill a topic without strace.
$BIN serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --cores 2 --fsync never 2>"$WORK/fill.log" &
BROKER=$!
sleep 1
COUNT=$((MB * 1024 * 1024 / 1000))
$BIN bench --broker 127.0.0.1:$PORT --producers 2 --consumers 0 --size 1000 --batch 100 \
  --count $COUNT --topic-prefix strace --keep-topics --quiet >/dev/null
kill -TERM $BROKER; wait $BROKER || true

# 2. Restart under strace and let a consumer catch up from the earliest offset.
strace -f -qq -e trace=sendfile,read,pread64,readv,preadv,preadv2,recvfrom,recvmsg \
  -o "$WORK/trace" $BIN serve --data-dir "$WORK/data" --listen 127.0.0.1:$PORT --cores 2 \
  2>"$WORK/serve.log" &
BROKER=$!
for _ in $(seq 100); do
  (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break
  sleep 0.2
done
$BIN bench --broker 127.0.0.1:$PORT --producers 0 --consumers 1 --from earliest \
  --count $COUNT --topic-prefix strace --quiet
# SIGTERM the broker itself (strace's child); strace exits with it.
kill -TERM "$(pgrep -P $BROKER)"; wait $BROKER || true

python3 - "$WORK/trace" "$MB" <<'PY'
import re, sys, collections
calls = collections.Counter()
bytes_ = collections.Counter()
for line in open(sys.argv[1]):
    m = re.match(r'\d+\s+(\w+)\(.*\)\s+=\s+(-?\d+)', line)
    if not m:
        continue
    name, ret = m.group(1), int(m.group(2))
    calls[name] += 1
    if ret > 0:
        bytes_[name] += ret
print(f"catch-up of {sys.argv[2]} MB of batches; system calls that moved bytes in the broker:")
print(f"{'syscall':<10} {'calls':>8} {'bytes':>14}")
for name in sorted(calls, key=lambda n: -bytes_[n]):
    print(f"{name:<10} {calls[name]:>8} {bytes_[name]:>14}")
total = sum(bytes_.values())
share = bytes_["sendfile"] / total * 100 if total else 0
print(f"sendfile carried {share:.2f}% of the bytes read or sent")
PY
