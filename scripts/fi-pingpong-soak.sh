#!/usr/bin/env bash
# Runs libfabric's fi_pingpong (verbs;ofi_rxm, rdm) over target/compat many
# times, as compat-tests `libfabric.rs` does once, to measure how often its
# end hangs. Root only: it makes a network namespace with an `ib0` (veth)
# interface, as libfabric's verbs provider wants, and removes it at the end.
#
#   sudo scripts/fi-pingpong-soak.sh [RUNS] [--burn]
#
#   RUNS     pairs to run (default 50)
#   --burn   two `yes > /dev/null` burners run meanwhile (CPU contention)
#
# Environment passes through (SOFTRDMA_DIRECT=1, ...). A pair still running
# after 12 s is a hang: the gdb backtraces of what is left, the outputs and
# SOFTRDMA_STATS blocks go to target/fi-soak/hang.N/, then it is killed.
# Prints "hangs H / RUNS"; exit status 1 if any hung.
set -uo pipefail
cd "$(dirname "$0")/.."

RUNS=${1:-50}
BURN=${2:-}
NS=fisoak$$
OUT=target/fi-soak
LIB=$PWD/target/compat
command -v fi_pingpong >/dev/null || { echo "apt-get install libfabric-bin" >&2; exit 2; }
[ -e "$LIB/libibverbs.so.1" ] || { echo "run cargo xtask compat first" >&2; exit 2; }
rm -rf "$OUT" && mkdir -p "$OUT"

burners=()
cleanup() {
    for b in "${burners[@]}"; do kill "$b" 2>/dev/null; done
    pkill -9 -f "fi_pingpong -p verbs;ofi_rxm -e rdm -I 100" 2>/dev/null
    ip netns del "$NS" 2>/dev/null
}
trap cleanup EXIT

ip netns add "$NS"
ip -n "$NS" link add ib0 type veth peer name ibpeer0
ip -n "$NS" addr add 10.251.1.1/24 dev ib0
for l in lo ibpeer0 ib0; do ip -n "$NS" link set "$l" up; done
if [ "$BURN" = --burn ]; then
    yes >/dev/null & burners+=($!)
    yes >/dev/null & burners+=($!)
fi

hangs=0
for i in $(seq 1 "$RUNS"); do
    port=$((39000 + i % 900))
    run() { # side, args...
        local side=$1; shift
        SOFTRDMA_STATS=$OUT/$side.stats LD_LIBRARY_PATH=$LIB \
            ip netns exec "$NS" fi_pingpong -p "verbs;ofi_rxm" -e rdm -I 100 -c "$@" \
            >"$OUT/$side.out" 2>&1
    }
    rm -f "$OUT"/*.out "$OUT"/*.stats
    run server -B "$port" & srv=$!
    sleep 0.3
    run client -P "$port" 10.251.1.1 & cli=$!
    for _ in $(seq 120); do
        kill -0 "$srv" 2>/dev/null || kill -0 "$cli" 2>/dev/null || break
        sleep 0.1
    done
    left=$(pgrep -f "fi_pingpong .* $port( |$)")
    if [ -n "$left" ]; then
        hangs=$((hangs + 1))
        d=$OUT/hang.$i
        mkdir -p "$d" && cp "$OUT"/*.out "$OUT"/*.stats "$d"/ 2>/dev/null
        for p in $left; do
            gdb -p "$p" -batch -ex "thread apply all bt" >"$d/gdb.$p" 2>&1
        done
        kill -9 $left 2>/dev/null
        echo "run $i: hang ($d)"
    fi
    wait "$srv" "$cli" 2>/dev/null
done
echo "hangs $hangs / $RUNS"
[ "$hangs" -eq 0 ]
