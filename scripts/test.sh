#!/usr/bin/env bash
# The test suite: formatting, lints, then every test (unit, property, integration) against
# real files and real broker processes on 127.0.0.1. Release mode, so the property tests
# run their full case counts quickly. Ends with one line: "tests: N passed, N failed".
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  cat <<'USAGE'
Usage: scripts/test.sh [FILTER] [-- TEST-ARGS...]

Without FILTER: cargo fmt --check, cargo clippy (-D warnings), then every test of every
target (cargo test --release --all-targets).
With FILTER: only the tests whose name contains FILTER (cargo test's filter, over every
target), without the format and lint checks. TEST-ARGS go to the test binaries
(e.g. -- --nocapture, -- --exact).

Examples:
  scripts/test.sh                       # the whole suite, as CI runs it
  scripts/test.sh log_level             # every test with log_level in its name
  scripts/test.sh completion -- --nocapture

Prerequisites (the README's "Tests" lists them): kcat, confluent-kafka and kafka-python,
zsh, fish, systemd-analyze, strace, fuse3 (with /dev/fuse), and root for some tests.
Ends with one line: "tests: N passed, N failed".
USAGE
}

filter=()
test_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --) shift; test_args=("$@"); break ;;
    -*) echo "scripts/test.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *)
      if [ ${#filter[@]} -gt 0 ]; then
        echo "scripts/test.sh: one FILTER at most (see --help)" >&2
        exit 2
      fi
      filter=("$1")
      ;;
  esac
  shift
done

if [ ${#filter[@]} -eq 0 ]; then
  cargo fmt --check
  cargo clippy --all-targets --release -- -D warnings
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
status=0
cargo test --release --all-targets "${filter[@]}" ${test_args[@]+-- "${test_args[@]}"} 2>&1 \
  | tee "$log" || status=$?
passed=$(grep -oE '^test result: .* ([0-9]+) passed' "$log" | grep -oE '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep -oE '^test result: .* ([0-9]+) failed' "$log" | grep -oE '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
echo "tests: $passed passed, $failed failed"
exit $status
