#!/usr/bin/env bash
# Three pagurus nodes, each in its own network namespace, joined by veth pairs to a bridge;
# one node is cut off (its link down) for 30 s, then healed. Checks what pre-vote and
# check-quorum promise (docs/CLUSTER.md):
#
#   MODE=follower (default): a follower is cut off. The leader and its term never change,
#     on the others or after the heal; the cut-off node never leads and never raises its
#     term (it cannot win a pre-vote, so it never starts a real election); the leader marks
#     it down meanwhile and live again after the heal.
#   MODE=leader: the leader is cut off. The other two elect a new leader within 5 s; the
#     cut-off node steps down (check-quorum) and never leads again after the heal; every
#     node ends on the new leader and its term.
#
#   sudo scripts/cluster-netns.sh
#   MODE=leader ISOLATE_SECS=60 sudo scripts/cluster-netns.sh
#
# Needs root (ip netns, veth, bridge) and python3. A long-run tool, not part of CI. It
# leaves nothing behind: namespaces, links and processes are removed at exit, and the data
# directories unless KEEP=1 (then their path and the nodes' logs are printed).
set -euo pipefail
cd "$(dirname "$0")/.."
MODE=${MODE:-follower}
ISOLATE_SECS=${ISOLATE_SECS:-30}
NET=${NET:-10.77.0}
PREFIX=pgcl
[ "$(id -u)" = 0 ] || { echo "run as root (ip netns)"; exit 2; }
case "$MODE" in follower | leader) ;; *) echo "MODE is follower or leader"; exit 2 ;; esac
cargo build --release --quiet
BIN=${CARGO_TARGET_DIR:-$PWD/target}/release/pagurus
WORK=$(mktemp -d)
PIDS=()
PEERS="1=$NET.1:9100,2=$NET.2:9100,3=$NET.3:9100"

cleanup() {
  for pid in "${PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  for n in 1 2 3; do ip netns del "$PREFIX-n$n" 2>/dev/null || true; ip link del "$PREFIX-h$n" 2>/dev/null || true; done
  ip link del "$PREFIX-br" 2>/dev/null || true
  if [ "${KEEP:-0}" = 1 ]; then echo "kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# The bridge lives in this namespace, with an address, so this script's client reaches
# every node; each node's veth end is `eth0` in its namespace.
ip link add "$PREFIX-br" type bridge
ip addr add "$NET.254/24" dev "$PREFIX-br"
ip link set "$PREFIX-br" up
for n in 1 2 3; do
  ns="$PREFIX-n$n"
  ip netns add "$ns"
  ip link add "$PREFIX-h$n" type veth peer name eth0 netns "$ns"
  ip link set "$PREFIX-h$n" master "$PREFIX-br" up
  ip netns exec "$ns" ip addr add "$NET.$n/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip link set lo up
done

start() { # node id
  local n=$1
  # Listening on every address: the node answers on 127.0.0.1 inside its namespace even
  # while its link is down, so the script can ask a cut-off node what it thinks.
  ip netns exec "$PREFIX-n$n" "$BIN" serve --data-dir "$WORK/n$n" --node-id "$n" \
    --listen 0.0.0.0:9092 --no-shard-ports --cores 1 --advertised-host "$NET.$n" \
    --cluster-listen "0.0.0.0:9100" --cluster-peers "$PEERS" >>"$WORK/n$n.log" 2>&1 &
  PIDS+=($!)
}

# `leader term role live-count` as node N sees it (asked inside its namespace), or `- - - -`.
view() {
  ip netns exec "$PREFIX-n$1" "$BIN" cluster status --broker 127.0.0.1:9092 --timeout-ms 2000 \
    --output json 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(s["leader"] or 0, s["term"], s["role"], sum(1 for n in s["nodes"] if n["live"]))
' 2>/dev/null || echo "- - - -"
}

# Waits until the nodes in $2.. agree on one leader with $1 nodes live (`any`: however many);
# prints `leader term`. A leader named in $NOT_LEADER does not count.
agree() {
  local live=$1; shift
  local deadline=$((SECONDS + 30))
  while [ $SECONDS -lt $deadline ]; do
    local first="" ok=1 leader_says=0
    for n in "$@"; do
      read -r leader term role count <<<"$(view "$n")"
      [ "$leader" != "-" ] && [ "$leader" != 0 ] && [ "$leader" != "${NOT_LEADER:-}" ] || { ok=0; break; }
      [ "$live" = any ] || [ "$count" = "$live" ] || { ok=0; break; }
      [ -z "$first" ] && first="$leader $term"
      [ "$first" = "$leader $term" ] || { ok=0; break; }
      [ "$n" = "$leader" ] && [ "$role" = leader ] && leader_says=1
    done
    if [ $ok = 1 ] && [ -n "$first" ]; then
      # The leader may be outside the nodes asked (MODE=leader's survivors never are).
      [ $leader_says = 1 ] || [[ " $* " != *" ${first%% *} "* ]] && { echo "$first"; return 0; }
    fi
    sleep 0.2
  done
  echo "the nodes $* did not agree within 30 s:" >&2
  for n in "$@"; do echo "  node $n: $(view "$n")" >&2; done
  return 1
}

FAILED=0
fail() { echo "FAIL: $*"; FAILED=1; }

for n in 1 2 3; do start "$n"; done
OUT=$(agree 3 1 2 3) || exit 1
read -r LEADER TERM <<<"$OUT"
echo "three nodes agree: leader $LEADER, term $TERM"

if [ "$MODE" = follower ]; then
  CUT=$(( LEADER % 3 + 1 ))
else
  CUT=$LEADER
fi
OTHERS=(); for n in 1 2 3; do [ "$n" = "$CUT" ] || OTHERS+=("$n"); done
echo "cutting node $CUT off for $ISOLATE_SECS s (link down)"
ip link set "$PREFIX-h$CUT" down
CUT_AT=$SECONDS

NEW_LEADER=$LEADER NEW_TERM=$TERM
if [ "$MODE" = leader ]; then
  start_wait=$(date +%s.%N)
  OUT=$(NOT_LEADER=$CUT agree any "${OTHERS[@]}") || { fail "no new leader among ${OTHERS[*]}"; exit 1; }
  read -r NEW_LEADER NEW_TERM <<<"$OUT"
  took=$(python3 -c "import time; print(round(time.time() - $start_wait, 2))")
  echo "nodes ${OTHERS[*]} elected node $NEW_LEADER (term $NEW_TERM) in ${took} s"
  python3 -c "import sys; sys.exit(0 if $took < 5 else 1)" || fail "the new leader took ${took} s (over 5 s)"
  [ "$NEW_LEADER" != "$CUT" ] || fail "the cut-off node still leads the others"
fi

# While cut off, every 2 s: the others keep one leader and term; the cut-off node never
# leads past an election timeout (check-quorum) and never raises its term.
CUT_TERM_MAX=0 DOWN_SEEN=0
while [ $((SECONDS - CUT_AT)) -lt "$ISOLATE_SECS" ]; do
  for n in "${OTHERS[@]}"; do
    read -r leader term role count <<<"$(view "$n")"
    [ "$leader $term" = "$NEW_LEADER $NEW_TERM" ] || fail "node $n moved to leader $leader term $term while node $CUT was cut off"
    [ "$count" = 2 ] && DOWN_SEEN=1
  done
  read -r leader term role count <<<"$(view "$CUT")"
  [ "$term" != "-" ] && [ "$term" -gt "$CUT_TERM_MAX" ] && CUT_TERM_MAX=$term
  if [ "$role" = leader ] && [ $((SECONDS - CUT_AT)) -gt 3 ]; then
    fail "the cut-off node $CUT still says it leads $((SECONDS - CUT_AT)) s after the cut"
  fi
  sleep 2
done
[ $DOWN_SEEN = 1 ] || fail "the leader never marked node $CUT down"
if [ "$MODE" = follower ] && [ "$CUT_TERM_MAX" -gt "$TERM" ]; then
  fail "the cut-off follower raised its term to $CUT_TERM_MAX (pre-vote should prevent it)"
fi
echo "cut-off node $CUT: highest term seen $CUT_TERM_MAX"

echo "healing node $CUT"
ip link set "$PREFIX-h$CUT" up
OUT=$(agree 3 1 2 3) || { fail "the nodes did not agree after the heal"; exit 1; }
read -r END_LEADER END_TERM <<<"$OUT"
echo "after the heal: leader $END_LEADER, term $END_TERM"
[ "$END_LEADER $END_TERM" = "$NEW_LEADER $NEW_TERM" ] ||
  fail "the heal disrupted the leader: was $NEW_LEADER term $NEW_TERM, now $END_LEADER term $END_TERM"
[ "$END_LEADER" != "$CUT" ] || [ "$MODE" = follower ] || fail "the cut-off node took leadership back"

if [ "${KEEP:-0}" = 1 ]; then for n in 1 2 3; do echo "log: $WORK/n$n.log"; done; fi
if [ $FAILED = 0 ]; then echo "PASS ($MODE cut off for $ISOLATE_SECS s)"; else echo "FAILED"; exit 1; fi
