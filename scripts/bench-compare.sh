#!/usr/bin/env bash
# bench.sh against two brokers, alternating, with this checkout's bench client for both:
# the before/after figures of a change, measured side by side in one run (the machines are
# shared and noisy; alternating spreads the noise over both sides). Prints the median of
# each figure per side and the after/before ratio.
#
#   scripts/bench-compare.sh OLD_BROKER_BIN               # 3 rounds of the full suite
#   scripts/bench-compare.sh OLD_BROKER_BIN NEW_BROKER_BIN  # two other builds (default
#                                                         # NEW: this checkout's)
#   ROUNDS=5 QUICK=1 scripts/bench-compare.sh OLD_BROKER_BIN
#
# OLD_BROKER_BIN is a release `pagurus` built from the "before" commit, e.g.
#   git worktree add /tmp/before <commit> && (cd /tmp/before && cargo build --release)
#   scripts/bench-compare.sh /tmp/before/target/release/pagurus
# Every other variable of bench.sh (QUICK, CORES, BROKER_CPUS, CLIENT_CPUS ...) passes through.
set -euo pipefail
cd "$(dirname "$0")/.."
OLD=${1:?usage: scripts/bench-compare.sh OLD_BROKER_BIN}
[ -x "$OLD" ] || { echo "$OLD is not an executable"; exit 1; }
ROUNDS=${ROUNDS:-3}
cargo build --release --quiet
NEW=${2:-${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus}
[ -x "$NEW" ] || { echo "$NEW is not an executable"; exit 1; }
DIR=${OUT:-bench-results/compare-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$DIR"
for round in $(seq "$ROUNDS"); do
  for side in before after; do
    if [ "$side" = before ]; then bin=$OLD; else bin=$NEW; fi
    echo ">> round $round, $side: $bin" >&2
    OUT="$DIR/$side-$round" BROKER_BIN="$bin" scripts/bench.sh > "$DIR/$side-$round.log"
  done
done
python3 - "$DIR" "$ROUNDS" <<'PY' | tee "$DIR/compare.md"
import glob, json, os, statistics, sys
root, rounds = sys.argv[1], int(sys.argv[2])
FIGURES = [  # name, path into the JSON
    ("produce msg/s", ("produce", "msgs_per_s")),
    ("consume msg/s", ("consume", "msgs_per_s")),
    ("ack p50 µs", ("produce", "ack_latency_us", "p50")),
    ("ack p99 µs", ("produce", "ack_latency_us", "p99")),
    ("e2e p99 µs", ("end_to_end_latency_us", "p99")),
]
def get(r, path):
    for k in path:
        r = r[k]
    return r
labels = sorted(os.path.basename(p)[:-5] for p in glob.glob(f"{root}/after-1/*.json"))
print(f"# bench.sh, before vs after, medians of {rounds} alternating rounds\n")
print("| run | figure | before | after | after/before |")
print("|---|---|---|---|---|")
for label in labels:
    if label == "e-fill":
        continue
    for name, path in FIGURES:
        side = {}
        for s in ("before", "after"):
            vals = []
            for i in range(1, rounds + 1):
                try:
                    vals.append(get(json.load(open(f"{root}/{s}-{i}/{label}.json")), path))
                except (OSError, KeyError):
                    pass
            side[s] = statistics.median(vals) if vals else None
        b, a = side["before"], side["after"]
        if not b and not a:
            continue
        ratio = f"{a / b:.2f}x" if a and b else "-"
        fmt = lambda v: "-" if v is None else f"{v:,.0f}"
        print(f"| {label} | {name} | {fmt(b)} | {fmt(a)} | {ratio} |")
PY
