#!/usr/bin/env bash
# Crash test (tests/crash.rs): the release broker on 2 cores under 4 pipelined producers on
# 3 topics x 2 partitions plus a consumer-offset committer; kill -9 at a random moment,
# restart, and a fresh consumer checks every acknowledged batch is present exactly once at
# its acknowledged offset, byte for byte (CRC checked by the client), offsets contiguous, and
# acknowledged commits intact. ROUNDS rounds (default 20) per fsync policy (default: always,
# then never). Prints one line per round and a summary per policy. SEED makes a run
# reproducible (the seed of each run is printed).
#
#   scripts/crash-test.sh                  # 20 rounds, fsync=always and fsync=never
#   ROUNDS=3 POLICIES=always scripts/crash-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-20}
POLICIES=${POLICIES:-"always never"}
status=0
for policy in $POLICIES; do
  echo "== fsync=$policy, $ROUNDS rounds"
  PAGURUS_CRASH_ROUNDS=$ROUNDS ${SEED:+PAGURUS_CRASH_SEED=$SEED} \
    cargo test --release --quiet --test crash "crash_rounds_fsync_$policy" -- --nocapture \
    2>&1 | grep -E -A2 '^(crash test|round|crash summary)|panicked|lost$|differs' || status=1
done
exit $status
