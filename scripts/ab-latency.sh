#!/usr/bin/env bash
# Interleaved A/B latency of two builds (this VM changes speed between
# minutes: only runs side by side compare): per round one perftest pair
# over each build's libraries in turn, then the medians and how many rounds
# each build won. t_typical of `TEST -s 8 -n ITERS`, one way (µs).
#
#   scripts/ab-latency.sh TEST ROUNDS LIBDIR_A LIBDIR_B [ITERS] [CUT]
#   e.g. scripts/ab-latency.sh ib_send_lat 8 /tmp/before target/compat
#
# With CUT (µs), also the mean of each build's runs at or under it: the
# VM's slow modes (a slow vCPU, slow line transfers) move a run by 0.1-0.4
# µs, so a change of a few ns shows only among the runs both builds made
# in the fast mode (BENCHMARKS.md, "The VM's modes, taken apart").
set -euo pipefail
T=$1 R=$2 A=$3 B=$4 N=${5:-30000} CUT=${6:-}
run() {
    local lib=$1 port=$((21000 + RANDOM % 5000))
    LD_LIBRARY_PATH=$lib timeout 60 "$T" -d softrdma0 -x 0 -F -p $port -s 8 -n "$N" >/dev/null 2>&1 &
    sleep 0.4
    LD_LIBRARY_PATH=$lib timeout 60 "$T" -d softrdma0 -x 0 -F -p $port -s 8 -n "$N" 127.0.0.1 2>&1 |
        awk '$1 == 8 { print $5 }'
    wait
}
a=() b=() wins=0
for _ in $(seq "$R"); do
    x=$(run "$A") y=$(run "$B")
    a+=("$x") b+=("$y")
    if awk -v x="$x" -v y="$y" 'BEGIN { exit !(y < x) }'; then wins=$((wins + 1)); fi
done
median() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "$T A ($A): median $(median "${a[@]}") [${a[*]}]"
echo "$T B ($B): median $(median "${b[@]}") [${b[*]}]; B faster in $wins of $R rounds"
under() { printf '%s\n' "$@" | awk -v c="$CUT" '$1 <= c { s += $1; n++ } END { if (n) printf "mean %.4f of %d runs", s / n, n; else printf "no run" }'; }
if [ -n "$CUT" ]; then
    echo "$T runs <= $CUT us: A $(under "${a[@]}"), B $(under "${b[@]}")"
fi
