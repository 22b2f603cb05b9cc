#!/usr/bin/env bash
# The kill -9 crash test (tests/crash.rs) with its data directory on real file systems:
# ext4, XFS and btrfs, each made on a loop device (mkfs from e2fsprogs, xfsprogs,
# btrfs-progs; installed with apt-get if missing). ROUNDS rounds (default 20) per file system
# and per fsync policy (POLICIES, default "always never"). Needs root and /dev/loop-control.
#
#   scripts/crash-test-fs.sh                   # ext4, xfs, btrfs; 20 rounds each
#   FILESYSTEMS=xfs ROUNDS=3 POLICIES=always scripts/crash-test-fs.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-20}
POLICIES=${POLICIES:-"always never"}
FILESYSTEMS=${FILESYSTEMS:-"ext4 xfs btrfs"}
SIZE_MB=${SIZE_MB:-1024}

need() { # command package
  command -v "$1" >/dev/null 2>&1 && return
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null 2>&1 || true
  apt-get install -y -qq "$2" >/dev/null
}
need mkfs.ext4 e2fsprogs
need mkfs.xfs xfsprogs
need mkfs.btrfs btrfs-progs

cargo build --release --quiet --tests
work=$(mktemp -d)
loop=""
cleanup() {
  if mountpoint -q "$work/mnt" 2>/dev/null; then umount "$work/mnt" || true; fi
  if [ -n "$loop" ]; then losetup -d "$loop" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/mnt"
status=0
for fs in $FILESYSTEMS; do
  truncate -s "${SIZE_MB}M" "$work/image"
  loop=$(losetup --find --show "$work/image")
  case $fs in
    ext4) mkfs.ext4 -q -F "$loop" ;;
    xfs) mkfs.xfs -q -f "$loop" ;;
    btrfs) mkfs.btrfs -q -f "$loop" >/dev/null ;;
    *) echo "unknown file system $fs"; exit 2 ;;
  esac
  mount "$loop" "$work/mnt"
  for policy in $POLICIES; do
    echo "== $fs, fsync=$policy, $ROUNDS rounds"
    # tempfile puts the test's data directory under TMPDIR: the file system under test.
    TMPDIR="$work/mnt" PAGURUS_CRASH_ROUNDS=$ROUNDS ${SEED:+PAGURUS_CRASH_SEED=$SEED} \
      cargo test --release --quiet --test crash "crash_rounds_fsync_$policy" -- --nocapture \
      2>&1 | grep -E '^(crash test|round|crash summary)|panicked' \
      | sed "s/^crash summary:/crash summary: fs=$fs/" || status=1
  done
  umount "$work/mnt"
  losetup -d "$loop"
  loop=""
  rm -f "$work/image"
done
exit $status
