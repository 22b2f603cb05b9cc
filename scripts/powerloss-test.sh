#!/usr/bin/env bash
# Power-loss test (tests/powerloss.rs) on the powerfs crash-consistency file system
# (docs/POWERFS.md): the release broker with --fsync always under native and HermitMQ v1
# producers, a committer, topic creation and deletion, compaction and retention; kill -9 and
# a power cut at a random moment, remount, restart, verify. ROUNDS rounds (default 20) per
# mode (default: strict journal torn never_strict never_torn; the never_ ones run the broker
# with --fsync never, where a cut may take acknowledged batches from the end of a partition
# only). Prints one line per round and a summary per mode.
# SEED makes a run reproducible (each run prints its seed). Needs root and /dev/fuse.
#
#   scripts/powerloss-test.sh                 # 20 rounds in each mode
#   ROUNDS=3 MODES=strict scripts/powerloss-test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-20}
MODES=${MODES:-"strict journal torn never_strict never_torn"}
status=0
for mode in $MODES; do
  echo "== mode=$mode, $ROUNDS rounds"
  PAGURUS_POWERLOSS_ROUNDS=$ROUNDS ${SEED:+PAGURUS_POWERLOSS_SEED=$SEED} \
    cargo test --release --quiet --test powerloss "powerloss_$mode" -- --include-ignored --nocapture \
    2>&1 | grep -E '^(power-loss test|first start|round|powerloss summary|fetch |commit )|panicked|differs|retention moved|a cut under never' || status=1
done
exit $status
