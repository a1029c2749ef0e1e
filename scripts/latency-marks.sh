#!/usr/bin/env bash
# Where a same-host busy-poll ib_send_lat message's time goes, step by step:
# builds HEAD with scripts/latency-marks.patch applied (TSC marks at each
# step of the post and of the peer's receive path; never landed) into
# target/marks/compat, runs ib_send_lat -s 8 between two processes over it,
# and prints the median of each step (scripts/latency-marks.py).
#
#   scripts/latency-marks.sh [ITERS]     (default 40000; perftest on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
ITERS=${1:-40000}
ROOT=$PWD
WT=$(mktemp -d)
trap 'git -C "$ROOT" worktree remove --force "$WT/wt" 2>/dev/null; rm -rf "$WT"' EXIT
git worktree add -q --detach "$WT/wt" HEAD
if ! git -C "$WT/wt" apply "$ROOT/scripts/latency-marks.patch"; then
    echo "scripts/latency-marks.patch no longer applies to HEAD: refresh it" >&2
    exit 1
fi
(cd "$WT/wt" && CARGO_TARGET_DIR="$ROOT/target/marks" cargo xtask compat >/dev/null)
LIB=$ROOT/target/marks/compat
rm -f /tmp/marks.*
PORT=$((20000 + $$ % 10000))
ARGS=(-d softrdma0 -x 0 -F -p "$PORT" -s 8 -n "$ITERS")
LD_LIBRARY_PATH=$LIB ib_send_lat "${ARGS[@]}" > /dev/null 2>&1 &
sleep 0.5
LD_LIBRARY_PATH=$LIB ib_send_lat "${ARGS[@]}" 127.0.0.1 |
    awk '$1 == 8 { printf "perftest: t_typical %s us, t_avg %s us\n", $5, $6 }'
wait
mapfile -t FILES < <(ls /tmp/marks.* 2>/dev/null)
if [ "${#FILES[@]}" -ne 2 ]; then
    echo "expected two mark files (one per process), found ${#FILES[@]}: more iterations?" >&2
    exit 1
fi
python3 scripts/latency-marks.py "${FILES[@]}"
