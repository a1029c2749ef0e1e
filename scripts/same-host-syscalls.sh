#!/usr/bin/env bash
# System calls and context switches behind a same-host perftest latency
# pair: runs TEST (ib_write_lat by default, -s 8) between two processes over
# the libibverbs.so.1 in LIB, with `perf stat -a` counting, machine-wide,
# the receives, sends, epoll waits and changes, eventfd writes and context
# switches while the client runs. Prints perftest's minimum, typical and
# average one-way latency (µs), then the counts.
#
#   scripts/same-host-syscalls.sh [LIB] [TEST] [ITERS]
#
# A busy-polling pair should make few system calls: what it makes comes
# from the socket reads (`policy::poller_reads_socket`), the progress
# threads' ticks and the socket's hand-over (BENCHMARKS.md, "The socket's
# gap on the same-host path"). Needs perf (linux-perf, with syscall
# tracepoints) and perftest (scripts/install-deps.sh); run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
LIB=${1:-target/compat}
TEST=${2:-ib_write_lat}
ITERS=${3:-200000}
PORT=$((20000 + $$ % 10000))
ARGS=(-d softrdma0 -x 0 -F -p "$PORT" -s 8 -n "$ITERS")
EVENTS=syscalls:sys_enter_recvmmsg,syscalls:sys_enter_sendmmsg
EVENTS+=,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_epoll_pwait2
EVENTS+=,syscalls:sys_enter_epoll_ctl,syscalls:sys_enter_write,context-switches
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
export LD_LIBRARY_PATH=$LIB
timeout 120 "$TEST" "${ARGS[@]}" > /dev/null 2>&1 &
sleep 0.5
perf stat -a -e "$EVENTS" -o "$OUT" timeout 120 "$TEST" "${ARGS[@]}" 127.0.0.1 2>&1 |
    awk '$1 == 8 { printf "min %s typical %s avg %s us\n", $3, $5, $6 }'
wait
awk '/syscalls:|context-switches/ { sub("syscalls:sys_enter_", "", $2); printf "%s %s\n", $2, $1 }' "$OUT"
