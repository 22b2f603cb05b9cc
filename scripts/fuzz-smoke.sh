#!/usr/bin/env bash
# CI's fuzzing smoke test: builds the fuzz targets (without AddressSanitizer) and runs each
# for a short while (FUZZ_SMOKE_SECONDS, default 20) from the committed corpus, replaying
# every input that once crashed (fuzz/regressions/) too. New inputs go to a scratch
# directory, not into the repo. Fails on any crash, panic or broken property.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_SANITIZER=${FUZZ_SANITIZER:-none}
FUZZ_CODEGEN_UNITS=${FUZZ_CODEGEN_UNITS:-16}
source scripts/fuzz-common.sh
SECONDS_PER_TARGET=${FUZZ_SMOKE_SECONDS:-20}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

if ! rustup run "$NIGHTLY" rustc --version >/dev/null 2>&1; then
  echo "fuzz smoke SKIPPED: no $NIGHTLY toolchain on this machine (cargo-fuzz needs one)" >&2
  exit 0
fi
ensure_cargo_fuzz
cd fuzz
cargo "+$NIGHTLY" fuzz build "${FUZZ_FLAGS[@]}"
for target in "${FUZZ_TARGETS[@]}"; do
  mkdir -p "$WORK/$target"
  log="$WORK/$target.log"
  status=0
  cargo "+$NIGHTLY" fuzz run "${FUZZ_FLAGS[@]}" "$target" "$WORK/$target" "corpus/$target" "regressions/$target" -- \
    -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 \
    -artifact_prefix="$WORK/$target-" >"$log" 2>&1 || status=$?
  if [ "$status" != 0 ]; then
    tail -60 "$log" >&2
    echo "fuzz smoke: $target FAILED" >&2
    exit 1
  fi
  echo "fuzz smoke: $target: $(fuzz_execs "$log") execs in ${SECONDS_PER_TARGET}s, no crash"
done
