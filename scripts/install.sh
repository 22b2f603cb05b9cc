#!/usr/bin/env bash
# Builds pagurus and installs it as a systemd service:
#   /usr/local/bin/pagurus                      the binary
#   /etc/systemd/system/pagurus.service         deploy/pagurus.service
#   /etc/pagurus/pagurus.env                    deploy/pagurus.env (an existing one is kept;
#                                               the new sample goes beside it as .env.new)
#   /usr/local/share/doc/pagurus/               README, docs/, deploy/TUNING.md
# and creates the system user `pagurus`. It does not start the service.
#
# Usage (as root):  scripts/install.sh
#   PAGURUS_BIN=path  install this binary instead of building one (cargo build --release)
#   DESTDIR=dir       stage everything under dir (packaging, tests): no user is created and
#                     systemd is not told
set -euo pipefail
cd "$(dirname "$0")/.."

destdir="${DESTDIR:-}"
bin="${PAGURUS_BIN:-}"
if [[ -z "$bin" ]]; then
  cargo build --release --locked
  bin="${CARGO_TARGET_DIR:-target}/release/pagurus"
fi
[[ -x "$bin" ]] || { echo "install.sh: no executable at $bin" >&2; exit 1; }
if [[ -z "$destdir" && $EUID -ne 0 ]]; then
  echo "install.sh: run as root (or set DESTDIR to stage the files)" >&2
  exit 1
fi

install -D -m 0755 "$bin" "$destdir/usr/local/bin/pagurus"
install -D -m 0644 deploy/pagurus.service "$destdir/etc/systemd/system/pagurus.service"
env_file="$destdir/etc/pagurus/pagurus.env"
if [[ -e "$env_file" ]]; then
  install -D -m 0640 deploy/pagurus.env "$env_file.new"
  echo "kept $env_file; the new sample is $env_file.new"
else
  install -D -m 0640 deploy/pagurus.env "$env_file"
fi
doc="$destdir/usr/local/share/doc/pagurus"
install -D -m 0644 -t "$doc" README.md docs/*.md deploy/TUNING.md

if [[ -n "$destdir" ]]; then
  echo "staged pagurus under $destdir"
  exit 0
fi

if ! id -u pagurus >/dev/null 2>&1; then
  useradd --system --user-group --home-dir /var/lib/pagurus --no-create-home \
    --shell /usr/sbin/nologin pagurus
fi
chgrp pagurus /etc/pagurus/pagurus.env
if command -v systemd-analyze >/dev/null 2>&1; then
  systemd-analyze verify /etc/systemd/system/pagurus.service
fi
if [[ -d /run/systemd/system ]]; then
  systemctl daemon-reload
fi
cat <<'DONE'
installed. Next:
  edit /etc/pagurus/pagurus.env (listen address, cores, fsync, metrics)
  systemctl enable --now pagurus
  journalctl -u pagurus -f
See /usr/local/share/doc/pagurus/TUNING.md before putting load on it.
DONE
