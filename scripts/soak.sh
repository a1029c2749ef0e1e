#!/usr/bin/env bash
# The long soak (CI runs a 15 s version: `cargo test -p softrdma --test soak`).
#
#   ./scripts/soak.sh                 10 minutes
#   SOAK_SECS=3600 ./scripts/soak.sh  an hour
#
# Two churns run side by side, on loopback, with the release build of the
# `fault_peer` example (crates/softrdma/tests/bin/fault_peer.rs):
#
# 1. connection churn with faults: two devices in one process open
#    SOAK_CONNS rdma_cm connections per cycle, run WRITE, READ, atomics and
#    SEND on each (checked byte for byte), register and deregister 64
#    regions, disconnect and free everything, under SOFTRDMA_FAULTS (1 %
#    loss, duplication, reordering by default); it fails if open fds move
#    after warm-up, if memory grows by more than 8 MiB + 10 %, if a memory
#    key is reused within 1024 registrations or initial PSNs repeat;
# 2. kill churn: a long-lived survivor (`fault_peer serve`) streams to peers
#    (`fault_peer stream`) that are killed with SIGKILL mid-transfer, one
#    after another; every round must end with error completions for all
#    outstanding work and DISCONNECTED within SOAK_BOUND_MS, and the
#    survivor's fds must stay exactly at their level before the first
#    connection and its memory flat (at most 4 MiB over the run).
#
# Logs go to SOAK_DIR (default target/soak/). Exit status 0: both passed.
set -euo pipefail
cd "$(dirname "$0")/.."

SECS=${SOAK_SECS:-600}
CONNS=${SOAK_CONNS:-8}
FAULTS=${SOAK_FAULTS:-loss=0.01,dup=0.01,reorder=0.02,seed=1}
BOUND_MS=${SOAK_BOUND_MS:-5000}
DIR=${SOAK_DIR:-target/soak}
mkdir -p "$DIR"

echo "building the release fault_peer example"
cargo build --release -q -p softrdma --example fault_peer
BIN=target/release/examples/fault_peer

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

echo "1. connection churn for ${SECS}s, ${CONNS} connections per cycle, faults ${FAULTS} -> $DIR/churn.log"
SOFTRDMA_FAULTS="$FAULTS" "$BIN" soak --secs "$SECS" --conns "$CONNS" --addr-base 127.0.13 \
  > "$DIR/churn.log" 2>&1 &
churn=$!
pids+=("$churn")

echo "2. kill churn for ${SECS}s -> $DIR/kill.log"
port=$(python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
srv=127.0.14.1
# Enough rounds for the duration (a round takes well under a second).
rounds=$(( SECS * 4 ))
SOFTRDMA_ADDR=$srv SOFTRDMA_PORT=$port "$BIN" serve "$srv:7471" --rounds "$rounds" \
  --bound-ms "$BOUND_MS" > "$DIR/kill.log" 2>&1 &
survivor=$!
pids+=("$survivor")
end=$(( $(date +%s) + SECS ))
done_rounds=0
while [ "$(date +%s)" -lt "$end" ] && [ "$done_rounds" -lt "$rounds" ]; do
  r=$done_rounds
  host=$(( 2 + r % 250 ))
  # Truncate here, not in the background job: a check must never see the
  # previous victim's output.
  : > "$DIR/victim.log"
  SOFTRDMA_ADDR=127.0.15.$host SOFTRDMA_PORT=$port "$BIN" stream "$srv:7471" \
    >> "$DIR/victim.log" 2>&1 &
  victim=$!
  for _ in $(seq 400); do
    grep -q STREAMING "$DIR/victim.log" && break
    if ! kill -0 "$victim" 2>/dev/null; then
      echo "victim $r exited early:"; cat "$DIR/victim.log"; exit 1
    fi
    sleep 0.05
  done
  grep -q STREAMING "$DIR/victim.log" || { echo "victim $r never streamed"; exit 1; }
  kill -9 "$victim"
  wait "$victim" 2>/dev/null || true
  for _ in $(seq $(( BOUND_MS / 50 + 100 ))); do
    grep -q "^ROUND $r status=" "$DIR/kill.log" && break
    sleep 0.05
  done
  grep -q "^ROUND $r status=" "$DIR/kill.log" || { echo "survivor: no report for round $r"; tail "$DIR/kill.log"; exit 1; }
  done_rounds=$(( done_rounds + 1 ))
done
kill -9 "$survivor" 2>/dev/null || true
wait "$survivor" 2>/dev/null || true

fail=0
if wait "$churn"; then
  echo "connection churn: $(grep '^SOAK ' "$DIR/churn.log")"
else
  echo "connection churn FAILED:"; tail -20 "$DIR/churn.log"; fail=1
fi

# The survivor: fds exactly at their level before the first connection,
# memory within 4 MiB of the first round's.
if ! awk -v rounds="$done_rounds" '
  /^LISTENING/ { for (i = 1; i <= NF; i++) if ($i ~ /^fds=/) { sub("fds=", "", $i); fd0 = $i } }
  /^ROUND [0-9]+ status=/ {
    n++
    for (i = 1; i <= NF; i++) {
      if ($i ~ /^fds=/) { v = $i; sub("fds=", "", v); if (v != fd0) { print "round " $2 ": " v " fds, " fd0 " before"; bad = 1 } }
      if ($i ~ /^rss_kb=/) { v = $i; sub("rss_kb=", "", v); if (n == 1) rss1 = v; last = v }
      if ($i ~ /^status=/ && $i != "status=WrFlushErr" && $i != "status=RetryExcErr") { print "round " $2 ": " $i; bad = 1 }
    }
  }
  END {
    if (n != rounds) { print n " reports for " rounds " rounds"; bad = 1 }
    if (last > rss1 + 4096) { print "survivor memory grew from " rss1 " to " last " KiB"; bad = 1 }
    printf "kill churn: %d rounds, fds %s, rss %s -> %s KiB\n", n, fd0, rss1, last
    exit bad
  }' "$DIR/kill.log"; then
  echo "kill churn FAILED (see $DIR/kill.log)"; fail=1
fi

[ "$fail" -eq 0 ] && echo "soak passed"
exit "$fail"
