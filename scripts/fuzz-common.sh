# Shared by scripts/fuzz.sh and scripts/fuzz-smoke.sh (sourced, not run).
# The fuzz crate (fuzz/) builds with the nightly toolchain, which exists for tools only.
NIGHTLY=${NIGHTLY:-nightly}
FUZZ_TARGETS=(native_request hermit_v1 recovery_scan sasl_scram)
# AddressSanitizer for long runs; CI's smoke builds without it (a shorter build; the
# targets' own checks and Rust's bounds and overflow checks still apply).
FUZZ_SANITIZER=${FUZZ_SANITIZER:-address}
FUZZ_TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/fuzz/target}/fuzz-$FUZZ_SANITIZER
# -O: optimised; -a: debug assertions, so an arithmetic overflow is a finding too.
# More codegen units build faster and run somewhat slower: CI's smoke uses 16.
FUZZ_FLAGS=(-O -a -s "$FUZZ_SANITIZER" --codegen-units "${FUZZ_CODEGEN_UNITS:-1}"
  --target-dir "$FUZZ_TARGET_DIR")

ensure_cargo_fuzz() {
  if ! cargo "+$NIGHTLY" fuzz --version >/dev/null 2>&1; then
    echo ">> installing cargo-fuzz" >&2
    cargo "+$NIGHTLY" install cargo-fuzz --locked --quiet
  fi
}

# Executions libFuzzer reports in a run's log.
fuzz_execs() {
  grep -oE 'stat::number_of_executed_units: [0-9]+' "$1" | awk '{print $2}' | tail -1
}
