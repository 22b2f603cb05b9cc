#!/usr/bin/env bash
# Fetch over TLS against plaintext: the catch-up read of GB gigabytes (default 1) by kcat,
# over a PLAINTEXT listener and over an SSL listener of the same broker, ROUNDS times each
# (default 3), alternating. Reports each run's MB/s and the broker's CPU seconds (from
# /proc/PID/stat), then the medians and the TLS/plaintext ratios.
#
#   scripts/bench-tls.sh              # 1 GB, 3 rounds
#   GB=2 ROUNDS=5 scripts/bench-tls.sh
#   KTLS=off scripts/bench-tls.sh     # user-space TLS even where the kernel offers kTLS
#
# Where the kernel offers the `tls` ULP, TLS connections move into kernel TLS after their
# handshake and fetches keep sendfile (the kernel encrypts). Where it does not (this build
# machine), or with KTLS=off, TLS is encrypted in user space: fetched file ranges are read
# into memory and encrypted by rustls instead of sendfile. The broker's start line, printed
# below, says which.
# kcat (librdkafka) decrypts on the client side: its CPU is in the wall time, not in the
# broker's CPU column.
set -euo pipefail
cd "$(dirname "$0")/.."
GB=${GB:-1}
ROUNDS=${ROUNDS:-3}
KTLS=${KTLS:-auto}
MESSAGE_BYTES=1000
COUNT=$((GB * 1000 * 1000 * 1000 / MESSAGE_BYTES))

command -v kcat >/dev/null || { echo "bench-tls: needs kcat" >&2; exit 1; }
command -v openssl >/dev/null || { echo "bench-tls: needs openssl" >&2; exit 1; }
cargo build --release --quiet
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
WORK=$(mktemp -d)
BROKER=""
cleanup() {
  [ -n "$BROKER" ] && kill "$BROKER" 2>/dev/null && wait "$BROKER" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# A CA, the broker's certificate and a client certificate (as docs/SECURITY.md makes them).
(
  cd "$WORK"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj "/CN=bench CA" -keyout ca.key -out ca.pem 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=localhost" \
    -keyout broker.key -out broker.csr 2>/dev/null
  printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >broker.ext
  openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile broker.ext -out broker.pem 2>/dev/null
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=bench" \
    -keyout client.key -out client.csr 2>/dev/null
  printf 'extendedKeyUsage=clientAuth\n' >client.ext
  openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -extfile client.ext -out client.pem 2>/dev/null
)

PORT=$((12000 + RANDOM % 18000))
TLS_PORT=$((PORT + 100))
"$BIN" serve --data-dir "$WORK/data" --cores 2 --fsync never \
  --listener "PLAIN=PLAINTEXT://127.0.0.1:$PORT" --listener "MTLS=SSL://127.0.0.1:$TLS_PORT" \
  --tls-cert "$WORK/broker.pem" --tls-key "$WORK/broker.key" --tls-client-ca "$WORK/ca.pem" \
  --ktls "$KTLS" 2>"$WORK/broker.log" &
BROKER=$!
for _ in $(seq 200); do (exec 3<>/dev/tcp/127.0.0.1/$PORT) 2>/dev/null && break; sleep 0.05; done

echo ">> producing $GB GB ($COUNT messages of $MESSAGE_BYTES B) to tls-0" >&2
"$BIN" bench --broker "127.0.0.1:$PORT" --producers 4 --consumers 0 --partitions 2 \
  --size "$MESSAGE_BYTES" --count "$COUNT" --topic-prefix tls --keep-topics --quiet >/dev/null

cpu_seconds() { # the broker's user + system CPU time
  awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' "/proc/$BROKER/stat"
}

read_all() { # label port kcat-settings...
  local label=$1 port=$2; shift 2
  local cpu0 cpu1 t0 t1 bytes
  cpu0=$(cpu_seconds); t0=$(date +%s.%N)
  bytes=$(kcat -C -b "127.0.0.1:$port" -t tls-0 -o beginning -e -q -f '%s' "$@" | wc -c)
  t1=$(date +%s.%N); cpu1=$(cpu_seconds)
  awk -v l="$label" -v b="$bytes" -v t="$(echo "$t1 - $t0" | bc)" -v c="$(echo "$cpu1 - $cpu0" | bc)" \
    'BEGIN {printf "%s %.1f %.2f %d\n", l, b / t / 1e6, c, b}'
}

TLS=(-X security.protocol=SSL -X "ssl.ca.location=$WORK/ca.pem"
  -X "ssl.certificate.location=$WORK/client.pem" -X "ssl.key.location=$WORK/client.key")
RESULTS="$WORK/results"
for round in $(seq "$ROUNDS"); do
  read_all plaintext "$PORT" | tee -a "$RESULTS" >&2
  read_all tls "$TLS_PORT" "${TLS[@]}" | tee -a "$RESULTS" >&2
done

median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
plain_mbs=$(awk '$1 == "plaintext" {print $2}' "$RESULTS" | median)
tls_mbs=$(awk '$1 == "tls" {print $2}' "$RESULTS" | median)
plain_cpu=$(awk '$1 == "plaintext" {print $3}' "$RESULTS" | median)
tls_cpu=$(awk '$1 == "tls" {print $3}' "$RESULTS" | median)
grep -oE 'TLS (is encrypted|moves into kernel TLS)[^"]*' "$WORK/broker.log" | head -1 >&2 || true
printf 'catch-up of %s GB, median of %s: plaintext %s MB/s (broker CPU %s s), TLS %s MB/s (broker CPU %s s)\n' \
  "$GB" "$ROUNDS" "$plain_mbs" "$plain_cpu" "$tls_mbs" "$tls_cpu"
awk -v p="$plain_mbs" -v t="$tls_mbs" -v pc="$plain_cpu" -v tc="$tls_cpu" \
  'BEGIN {printf "TLS/plaintext: rate %.2fx, broker CPU %.2fx\n", t / p, (pc > 0 ? tc / pc : 0)}'
