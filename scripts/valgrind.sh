#!/usr/bin/env bash
# Part of the compat suite under valgrind's memcheck (a CI step, about a
# minute): unmodified rdma-core programs and our own C programs against
# target/compat/libibverbs.so.1 and librdmacm.so.1, both sides of every pair
# under valgrind.
#
#   ./scripts/valgrind.sh            (needs `cargo xtask compat`, valgrind, gcc)
#
# Fails on any invalid read or write, use of uninitialised memory, invalid
# free, or *definite* leak (possible and still-reachable leaks are not
# errors: the device of a process lives in a static until exit, and its
# progress thread is still running when the process ends). Known noise of
# glibc and the dynamic loader is suppressed in scripts/valgrind.supp.
# Valgrind 3.19 does not know epoll_pwait2 (syscall 441) and says so; the
# engine then falls back to epoll_wait, which is not an error.
#
# Logs: target/valgrind/<name>.log (VALGRIND_DIR to change). `target` is
# CARGO_TARGET_DIR when set, as for `cargo xtask compat`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}

command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind" >&2; exit 1; }
command -v cc >/dev/null || { echo "cc is missing: apt-get install gcc" >&2; exit 1; }
for lib in libibverbs.so.1 librdmacm.so.1; do
  [ -f "$TARGET/compat/$lib" ] || { echo "$TARGET/compat/$lib is missing: run cargo xtask compat" >&2; exit 1; }
done

DIR=${VALGRIND_DIR:-$TARGET/valgrind}
mkdir -p "$DIR"
export LD_LIBRARY_PATH=$TARGET/compat
unset LD_PRELOAD SOFTRDMA_PORT SOFTRDMA_PCAP SOFTRDMA_FAULTS
VG=(valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --num-callers=40 --suppressions="$ROOT/scripts/valgrind.supp" -q)
TIMEOUT=180
fail=0
pids=()
trap 'for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done' EXIT

# Valgrind's reports: lines "==PID== ..." (memcheck errors and leak records).
reported() { grep -E '^==[0-9]+== ' "$1" | grep -v 'WARNING' || true; }

verdict() { # name rc log
  local name=$1 rc=$2 log=$3 errs
  errs=$(reported "$log")
  if [ "$rc" -eq 0 ] && [ -z "$errs" ]; then
    echo "ok    $name"
  else
    echo "FAIL  $name (exit $rc, log $log)"
    [ -n "$errs" ] && echo "$errs" | head -40
    [ -z "$errs" ] && tail -20 "$log"
    fail=1
  fi
}

# One program under valgrind.
single() { # name addr cmd...
  local name=$1 addr=$2; shift 2
  local rc=0
  SOFTRDMA_ADDR=$addr timeout "$TIMEOUT" "${VG[@]}" "$@" > "$DIR/$name.log" 2>&1 || rc=$?
  verdict "$name" "$rc" "$DIR/$name.log"
}

# Waits until `check` succeeds (the server is ready), at most 60 s.
wait_until() {
  for _ in $(seq 1200); do "$@" && return 0; sleep 0.05; done
  return 1
}
tcp_listening() { ss -ltnH "sport = :$1" | grep -q .; }
udp_bound() { ss -uanH | awk '{print $4}' | grep -qx "$1:4791"; }

# A server and a client, both under valgrind.
pair() { # name ready-kind ready-arg server-addr client-addr -- server args -- client args
  local name=$1 kind=$2 arg=$3 saddr=$4 caddr=$5; shift 5
  [ "$1" = "--" ] && shift
  local sargs=() cargs=()
  while [ "$1" != "--" ]; do sargs+=("$1"); shift; done
  shift
  cargs=("$@")
  local src=0 crc=0
  SOFTRDMA_ADDR=$saddr timeout "$TIMEOUT" "${VG[@]}" "${sargs[@]}" > "$DIR/$name-server.log" 2>&1 &
  local spid=$!
  pids+=("$spid")
  if [ "$kind" = tcp ]; then wait_until tcp_listening "$arg"; else wait_until udp_bound "$arg"; fi ||
    echo "($name: the server was not ready within 60 s)"
  SOFTRDMA_ADDR=$caddr timeout "$TIMEOUT" "${VG[@]}" "${cargs[@]}" > "$DIR/$name-client.log" 2>&1 || crc=$?
  wait "$spid" || src=$?
  verdict "$name (server)" "$src" "$DIR/$name-server.log"
  verdict "$name (client)" "$crc" "$DIR/$name-client.log"
}

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0",0)); print(s.getsockname()[1])'; }

echo "memcheck on the C ABI (logs in $DIR)"
N=127.63.$(( $$ % 200 ))

single devinfo "$N.2" ibv_devinfo -v

p=$(port)
pair rc_pingpong tcp "$p" "$N.3" "$N.4" -- ibv_rc_pingpong -g 0 -p "$p" -n 50 -c \
  -- ibv_rc_pingpong -g 0 -p "$p" -n 50 -c "$N.3"
p=$(port)
pair rc_pingpong_multi_packet tcp "$p" "$N.5" "$N.6" -- ibv_rc_pingpong -g 0 -p "$p" -n 10 -s 65536 -m 1024 \
  -- ibv_rc_pingpong -g 0 -p "$p" -n 10 -s 65536 -m 1024 "$N.5"
p=$(port)
pair ud_pingpong tcp "$p" "$N.7" "$N.8" -- ibv_ud_pingpong -g 0 -p "$p" -n 50 \
  -- ibv_ud_pingpong -g 0 -p "$p" -n 50 "$N.7"
p=$(port)
pair srq_pingpong tcp "$p" "$N.9" "$N.10" -- ibv_srq_pingpong -g 0 -p "$p" -n 20 \
  -- ibv_srq_pingpong -g 0 -p "$p" -n 20 "$N.9"
pair rping udp "$N.11" "$N.11" "$N.12" -- rping -s -a "$N.11" -C 10 -v -V \
  -- rping -c -a "$N.11" -C 10 -v -V
pair rdma_server_client udp "$N.13" "$N.13" "$N.14" -- rdma_server -s "$N.13" \
  -- rdma_client -s "$N.13"

# Our program of verbs under garbage (error paths, NULL, destroyed and wild
# pointers: the library must refuse them without touching them).
cc -std=gnu11 -O1 -g -Wall -Wextra -o "$DIR/garbage" crates/compat-tests/c/garbage.c -libverbs
single garbage "$N.15" "$DIR/garbage"

if [ "$fail" -eq 0 ]; then
  echo "valgrind: no invalid accesses, no definite leaks"
else
  echo "valgrind: FAILED"
fi
exit "$fail"
