#!/usr/bin/env bash
# The whole test suite: formatting, lints, then every test (unit, property, integration)
# against real files and real broker processes on 127.0.0.1. Release mode, so the
# property tests run their full case counts quickly.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo fmt --check
cargo clippy --all-targets --release -- -D warnings
cargo test --release --all-targets
