#!/usr/bin/env bash
# The README's first command, exactly as written: `cargo run --release -- serve`, from the
# repository's root, with its defaults (127.0.0.1:9092, ./pagurus-data). Waits for the port,
# stops the broker with SIGTERM and checks that it stopped cleanly; exits non-zero
# otherwise. Run by .ci/run on its clean clone, so a change that breaks the first thing a
# new user types (a second binary that makes `cargo run` ask which one, say) fails CI.
set -euo pipefail
cd "$(dirname "$0")/.."

PORT_WAIT_S=${PORT_WAIT_S:-60}   # the binary is built first: this is the broker's start
STOP_WAIT_S=${STOP_WAIT_S:-30}

port_open() { (exec 3<>/dev/tcp/127.0.0.1/9092) 2>/dev/null; }

if [ -e pagurus-data ]; then
  echo "readme-serve: ./pagurus-data exists; not touching someone's data" >&2
  exit 1
fi
if port_open; then
  echo "readme-serve: 127.0.0.1:9092 is already in use" >&2
  exit 1
fi

# Compile outside the port timeout (a fresh machine takes minutes).
cargo build --release --quiet
log=$(mktemp)
pid=
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  rm -rf pagurus-data "$log"
}
trap cleanup EXIT

# Without PAGURUS_* from the environment: the command must work with its defaults. cargo
# execs the broker in its own place on Unix, so $pid is the broker itself.
env $(env | grep -o '^PAGURUS_[A-Z_]*' | sed 's/^/-u /') RUST_LOG= \
  cargo run --release -- serve >"$log" 2>&1 &
pid=$!

waited=0
until port_open; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "readme-serve: \`cargo run --release -- serve\` exited before listening:" >&2
    cat "$log" >&2
    exit 1
  fi
  if [ "$waited" -ge $((PORT_WAIT_S * 10)) ]; then
    echo "readme-serve: nothing listens on 127.0.0.1:9092 after ${PORT_WAIT_S} s:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
  waited=$((waited + 1))
done

kill -TERM "$pid"
waited=0
while kill -0 "$pid" 2>/dev/null; do
  if [ "$waited" -ge $((STOP_WAIT_S * 10)) ]; then
    echo "readme-serve: the broker did not stop within ${STOP_WAIT_S} s of SIGTERM:" >&2
    cat "$log" >&2
    exit 1
  fi
  sleep 0.1
  waited=$((waited + 1))
done
status=0
wait "$pid" || status=$?
pid=
if [ "$status" -ne 0 ] || ! grep -q 'broker stopped cleanly' "$log"; then
  echo "readme-serve: the broker exited with status $status after SIGTERM:" >&2
  cat "$log" >&2
  exit 1
fi
echo "readme-serve: \`cargo run --release -- serve\` listened on 127.0.0.1:9092 and stopped cleanly"
