#!/usr/bin/env bash
# The whole test suite: formatting, lints, then every test (unit, property, integration)
# against real files and real broker processes on 127.0.0.1. Release mode, so the
# property tests run their full case counts quickly. Ends with one line:
# "tests: N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --check
cargo clippy --all-targets --release -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --release --all-targets 2>&1 | tee "$log" || status=$?
passed=$(grep -oE '^test result: .* ([0-9]+) passed' "$log" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -oE '^test result: .* ([0-9]+) failed' "$log" | grep -oE '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
echo "tests: $passed passed, $failed failed"
exit $status
