#!/usr/bin/env bash
# Disk full: runs the broker on a small file system of its own and fills it (tests/disk_full.rs):
# produce gets StorageFull (native) or a 0xFF ack (HermitMQ v1), fetches go on, nothing
# acknowledged is lost (also across kill -9 and a restart on the full disk), and writing
# resumes once space returns. Runs once on tmpfs (size=) and once on an ext4 image on a
# loop device. Needs root (mount).
#
#   scripts/disk-full.sh
set -euo pipefail
cd "$(dirname "$0")/.."
for fs in tmpfs ext4; do
  echo "== disk full on $fs"
  PAGURUS_TEST_FS=$fs cargo test --release --quiet --test disk_full -- --nocapture 2>&1 \
    | grep -E '^test |test result|SKIPPED|panicked'
done
