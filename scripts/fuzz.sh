#!/usr/bin/env bash
# Long local fuzzing runs: each target in turn for SECONDS seconds (default 600), one
# process each, growing the committed corpus in fuzz/corpus/<target>, then minimising it.
# Crashes land in fuzz/artifacts/<target>/; the script stops at the first one.
#
#   scripts/fuzz.sh                      # every target, 10 minutes each
#   scripts/fuzz.sh 3600 recovery_scan   # one target for an hour
#   CMIN=0 scripts/fuzz.sh 60            # skip the corpus minimisation
#
# Targets (fuzz/fuzz_targets/): native_request (native request decoder), hermit_v1
# (HermitMQ v1 handshakes and batch headers), recovery_scan (the segment scanner).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/fuzz-common.sh
SECONDS_PER_TARGET=${1:-600}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${FUZZ_TARGETS[@]}")
CMIN=${CMIN:-1}
LOGS=${LOGS:-$(mktemp -d)}
mkdir -p "$LOGS"

ensure_cargo_fuzz
cd fuzz
cargo "+$NIGHTLY" fuzz build "${FUZZ_FLAGS[@]}"
summary=()
for target in "${TARGETS[@]}"; do
  mkdir -p "corpus/$target"
  log="$LOGS/$target.log"
  echo ">> fuzzing $target for ${SECONDS_PER_TARGET}s (log: $log)" >&2
  status=0
  cargo "+$NIGHTLY" fuzz run "${FUZZ_FLAGS[@]}" "$target" "corpus/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 >"$log" 2>&1 || status=$?
  execs=$(fuzz_execs "$log")
  if [ "$status" != 0 ]; then
    grep -E 'panicked|SUMMARY|Test unit written' "$log" >&2 || tail -30 "$log" >&2
    echo "$target: FAILED after ${execs:-?} execs; see $log" >&2
    exit 1
  fi
  if [ "$CMIN" = 1 ]; then
    cargo "+$NIGHTLY" fuzz cmin "${FUZZ_FLAGS[@]}" "$target" "corpus/$target" >"$LOGS/$target-cmin.log" 2>&1
  fi
  summary+=("$target: ${execs:-?} execs in ${SECONDS_PER_TARGET}s, no crash, corpus $(ls "corpus/$target" | wc -l) files")
done
printf '%s\n' "${summary[@]}"
