#!/usr/bin/env bash
# Per-call costs of ibv_post_send, ibv_post_recv and ibv_poll_cq in a
# same-host perftest latency pair (scripts/verbs-call-costs.c, preloaded in
# both processes), over the libibverbs.so.1 in LIB (default target/compat).
#
#   scripts/verbs-call-costs.sh [LIB] [TEST] [ITERS]
#
#   TEST   ib_write_lat (default), ib_send_lat, ib_read_lat
#
# Prints perftest's line for 8 bytes and one line per process. Needs gcc,
# libibverbs-dev and perftest (scripts/install-deps.sh); x86-64 only.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB=${1:-target/compat}
TEST=${2:-ib_write_lat}
ITERS=${3:-200000}
SHIM=target/verbs-call-costs.so
mkdir -p target
gcc -O2 -shared -fPIC -o "$SHIM" scripts/verbs-call-costs.c -ldl -libverbs
GHZ=$(awk '/^cpu MHz/ {printf "%.3f", $4 / 1000; exit}' /proc/cpuinfo)
PORT=$((20000 + $$ % 10000))
ARGS=(-d softrdma0 -x 0 -F -p "$PORT" -s 8 -n "$ITERS")
export LD_LIBRARY_PATH=$LIB LD_PRELOAD=$PWD/$SHIM VERBS_COST_GHZ=${GHZ:-2.0}
SRV=$(mktemp)
timeout 120 "$TEST" "${ARGS[@]}" > "$SRV" 2>&1 &
sleep 0.5
timeout 120 "$TEST" "${ARGS[@]}" 127.0.0.1 2>&1 | grep -E '^ *8 |verbs-call-costs'
wait
grep verbs-call-costs "$SRV" || true
rm -f "$SRV"
