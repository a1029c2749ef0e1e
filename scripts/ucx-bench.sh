#!/usr/bin/env bash
# ucx_perftest over softrdma (rc_verbs, through `softrdma run`) next to UCX's
# own shared-memory (UCX_TLS=sm,self) and TCP (UCX_TLS=tcp,self) transports,
# interleaved in one run, medians of REPS repetitions. Prints a Markdown table.
#
#   cargo xtask compat && cargo build --release -p softrdma-cli
#   ./scripts/ucx-bench.sh            # REPS=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${REPS:-3}
SOFTRDMA=${SOFTRDMA:-${CARGO_TARGET_DIR:-target}/release/softrdma}
PORT=${PORT:-13377}
[ -x "$SOFTRDMA" ] || { echo "no $SOFTRDMA: cargo build --release -p softrdma-cli" >&2; exit 2; }
command -v ucx_perftest >/dev/null || { echo "ucx_perftest missing: apt-get install ucx-utils" >&2; exit 2; }

# name | ucx_perftest arguments | column of the Final line (3: median latency, 6: MB/s)
TESTS=(
  "tag_lat 8 B|-t tag_lat -s 8 -n 20000 -w 2000|3"
  "tag_bw 64 KiB|-t tag_bw -s 65536 -n 4000 -w 200|6"
  "ucp_put_bw 64 KiB|-t ucp_put_bw -s 65536 -n 4000 -w 200|6"
  "ucp_put_bw 1 MiB|-t ucp_put_bw -s 1048576 -n 400 -w 20|6"
)
TRANSPORTS=("softrdma|rc_verbs,ud_verbs,self" "sm|sm,self" "tcp|tcp,self")

# one_run TRANSPORT_TLS NAME ARGS COLUMN -> prints the value or "fail"
one_run() {
  local tls=$1 args=$2 col=$3 wrap=()
  [ "$tls" = "rc_verbs,ud_verbs,self" ] && wrap=("$SOFTRDMA" run --)
  PORT=$((PORT + 1))
  # shellcheck disable=SC2086
  UCX_TLS=$tls timeout 120 "${wrap[@]}" ucx_perftest -p $PORT $args >/dev/null 2>&1 &
  local srv=$!
  sleep 0.5
  local out
  # shellcheck disable=SC2086
  out=$(UCX_TLS=$tls timeout 120 "${wrap[@]}" ucx_perftest -p $PORT $args 127.0.0.1 2>/dev/null | awk -v c="$col" '/^Final:/{print $c}') || true
  wait $srv 2>/dev/null || true
  echo "${out:-fail}"
}

median() { sort -g | awk '{a[NR]=$1} END{ if (NR==0) print "fail"; else print a[int((NR+1)/2)] }'; }
range() { sort -g | awk '{a[NR]=$1} END{ if (NR>0) printf "%s–%s", a[1], a[NR] }'; }

echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
declare -A results
for ((r = 1; r <= REPS; r++)); do
  for t in "${TESTS[@]}"; do
    IFS='|' read -r name args col <<<"$t"
    for tr in "${TRANSPORTS[@]}"; do
      IFS='|' read -r label tls <<<"$tr"
      v=$(one_run "$tls" "$args" "$col")
      results["$name|$label"]+="$v "
      echo "rep $r: $name $label: $v" >&2
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

echo "| ucx_perftest (median, range) | softrdma (rc_verbs) | sm (UCX shared memory) | tcp (UCX TCP) | softrdma / tcp |"
echo "|---|---|---|---|---|"
for t in "${TESTS[@]}"; do
  IFS='|' read -r name args col <<<"$t"
  row="| \`$name\`"
  vals=()
  for tr in "${TRANSPORTS[@]}"; do
    IFS='|' read -r label tls <<<"$tr"
    all=$(tr ' ' '\n' <<<"${results["$name|$label"]}" | grep -v '^$' | grep -v fail || true)
    m=$(median <<<"$all")
    vals+=("$m")
    unit="MB/s"
    [ "$col" = 3 ] && unit="µs"
    row+=" | $m $unit ($(range <<<"$all"))"
  done
  ratio=$(awk -v a="${vals[0]}" -v b="${vals[2]}" 'BEGIN{ if (a+0>0 && b+0>0) printf "%.2f", a/b; else print "-" }')
  row+=" | $ratio |"
  echo "$row"
done
