#!/usr/bin/env bash
# Live interoperability of softrdma with the Linux kernel's Soft-RoCE (rdma_rxe).
#
#   sudo scripts/interop.sh [--no-build] [--keep-lab] [--only REGEX]
#
# Boots one QEMU guest running Debian's rdma_rxe with the interop lab in
# ../shared/interop (beside the checkout; SOFTRDMA_LAB=DIR overrides), then runs
# softrdma inside the lab's network namespace (host side, 10.77.0.1) against rxe
# in the guest (10.77.0.2), in both roles:
#   - ibv_rc_pingpong 64 B / 4 KiB / 64 KiB at MTU 1024: Debian's binary over
#     target/compat (LD_LIBRARY_PATH) and the Rust example rc_pingpong;
#   - ibv_ud_pingpong (Debian's binary and the Rust example ud_pingpong);
#   - rping (rdma_cm) over target/compat;
#   - perftest ib_atomic_lat (FETCH_AND_ADD, CMP_AND_SWAP), ib_atomic_bw and
#     ib_read_lat over target/compat: each side sets its QP's READ/atomic
#     depth to the peer's max_qp_rd_atom (rxe's 128), and softrdma's must
#     print "Outstand reads  : 128";
#   - two softrdma servers at once sharing the host side's address (the host
#     device), ibv_rc_pingpong and rping, each with its own rxe client.
# Every softrdma process writes its own traffic (SOFTRDMA_PCAP); each capture
# must pass `softrdma decode` (parse + ICRC) and tshark's RRoCE dissector (no
# malformed packet, no expert warning). The guest NIC is captured too (QEMU
# filter-dump: the real wire) and every RoCE packet's ICRC there is checked.
#
# Prints a pass/fail table; exit status 1 if any case failed. When the machine
# cannot run the lab (not root, no lab directory, no /dev/net/tun, less than
# 2 GB of free memory, QEMU neither installed nor installable, the lab already
# in use) it prints a loud "SKIPPED: <reason>" line and exits 0.
#
# Options: --no-build    use the already built target/compat, examples and CLI
#          --keep-lab    leave the lab up afterwards (./lab.sh down to stop it)
#          --only REGEX  run only the cases whose name matches REGEX
# Environment: CARGO_TARGET_DIR, SOFTRDMA_LAB, ACCEL=kvm|tcg (passed to the lab),
#              INTEROP_FORCE=1 (tear down an existing lab first), INTEROP_ITERS.
# Output: <target>/interop/ (per-case logs and pcaps, results.txt).
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BUILD=1
KEEP=0
ONLY=
while [ $# -gt 0 ]; do
  case $1 in
    --no-build) BUILD=0 ;;
    --keep-lab) KEEP=1 ;;
    --only) ONLY=${2:?--only needs a regex}; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "interop.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done

skip() {
  echo "======================================================================"
  echo "SKIPPED: rxe interop tests: $*"
  echo "======================================================================"
  exit 0
}

# ---- can this machine run the lab? -------------------------------------------
LAB=${SOFTRDMA_LAB:-$REPO/../shared/interop}
[ "$(id -u)" = 0 ] || skip "must run as root (the lab uses network namespaces and taps)"
[ -x "$LAB/lab.sh" ] || skip "lab not found at $LAB (../shared/interop beside the checkout)"
LAB=$(cd "$LAB" && pwd)
[ -c /dev/net/tun ] || modprobe tun 2>/dev/null || true
[ -c /dev/net/tun ] || skip "/dev/net/tun is missing"
avail_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
[ "${avail_kb:-0}" -ge $((2 * 1024 * 1024)) ] ||
  skip "less than 2 GB of free memory ($((${avail_kb:-0} / 1024)) MB available)"
NS=${LAB_NS:-softrdma-lab}
if [ -e "/run/netns/$NS" ]; then
  if [ "${INTEROP_FORCE:-0}" = 1 ]; then
    "$LAB/lab.sh" down || true
  else
    skip "the lab is in use (network namespace $NS exists; INTEROP_FORCE=1 tears it down)"
  fi
fi
# QEMU, the guest kernel, rdma-core tools, tshark: installed or installable.
"$LAB/lab.sh" deps > /tmp/interop-deps.$$ 2>&1 ||
  { cat /tmp/interop-deps.$$; rm -f /tmp/interop-deps.$$; skip "cannot install the lab's Debian packages (QEMU etc.)"; }
rm -f /tmp/interop-deps.$$
command -v qemu-system-x86_64 >/dev/null || skip "qemu-system-x86_64 is not available"

# ---- build --------------------------------------------------------------------
case ${CARGO_TARGET_DIR:-} in
  "") TARGET=$REPO/target ;;
  /*) TARGET=$CARGO_TARGET_DIR ;;
  *) TARGET=$REPO/$CARGO_TARGET_DIR ;;
esac
if [ $BUILD = 1 ]; then
  command -v cargo >/dev/null || { echo "interop.sh: cargo not on PATH (sudo resets PATH: use sudo env PATH=\$PATH, or --no-build)" >&2; exit 1; }
  echo "=== building target/compat, the pingpong examples and the CLI (release)"
  (cd "$REPO" && cargo xtask compat &&
    cargo build --release -p softrdma --example rc_pingpong --example ud_pingpong &&
    cargo build --release -p softrdma-cli) || { echo "interop.sh: build failed" >&2; exit 1; }
fi
COMPAT=$TARGET/compat
EXAMPLES=$TARGET/release/examples
CLI=$TARGET/release/softrdma
for f in "$COMPAT/libibverbs.so.1" "$COMPAT/librdmacm.so.1" "$EXAMPLES/rc_pingpong" "$EXAMPLES/ud_pingpong" "$CLI"; do
  [ -e "$f" ] || { echo "interop.sh: $f is missing (build without --no-build)" >&2; exit 1; }
done
for b in ibv_rc_pingpong ibv_ud_pingpong rping ib_atomic_lat ib_atomic_bw ib_read_lat tshark; do
  command -v "$b" >/dev/null || { echo "interop.sh: $b is missing (scripts/install-deps.sh)" >&2; exit 1; }
done

OUT=$TARGET/interop
rm -rf "$OUT"; mkdir -p "$OUT"
HOST_IP=10.77.0.1
GUEST_IP=10.77.0.2
ITERS=${INTEROP_ITERS:-20}
T=40            # per-program timeout (s)
HOST_PIDS=()
CAPTURING=0

lab() { "$LAB/lab.sh" "$@"; }

cleanup() {
  local p
  for p in "${HOST_PIDS[@]}"; do kill "$p" 2>/dev/null; done
  [ $CAPTURING = 1 ] && lab capture stop > /dev/null 2>&1
  if [ $KEEP = 1 ]; then echo "lab left up (--keep-lab): $LAB/lab.sh down"
  else lab down > "$OUT/lab-down.log" 2>&1; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }

# ---- lab up ---------------------------------------------------------------------
T0=$(now)
echo "=== lab up (1 guest, ACCEL=${ACCEL:-tcg})"
lab up 1 > "$OUT/lab-up.log" 2>&1 || { cat "$OUT/lab-up.log"; echo "interop.sh: the lab did not come up" >&2; exit 1; }
echo "    guest ready after $(since "$T0") s"
# rxe's RoCEv2/IPv4 GID index (GID[0] is the IPv6 link-local one).
GID=$(lab job gA 'ibv_devinfo -v' 30 | awk -v ip="::ffff:$GUEST_IP," '
  $1 ~ /^GID\[/ && $0 ~ ip { gsub(/[^0-9]/, "", $2); print $2; exit }')
GID=${GID:-1}
echo "    rxe0 IPv4 GID index: $GID"
lab capture start "$OUT/wire-gA.pcap" gA > /dev/null && CAPTURING=1

# ---- one case -----------------------------------------------------------------
# Waits until a guest program listens (TCP port, or an rdma_cm listener).
guest_ready() {
  local test=$1
  lab job gA "i=0; while [ \$i -lt 100 ]; do $test && exit 0; i=\$((i+1)); sleep 0.1; done; exit 1" 30 |
    tail -n1 | grep -q '^rc=0'
}
# Waits until host-side process $1 listens ($2: ss protocol flag, $3: ss filter),
# or it exited.
host_ready() {
  local pid=$1 proto=$2 filter=$3 i
  for i in $(seq 1 150); do
    kill -0 "$pid" 2>/dev/null || return 1
    [ -n "$(lab host ss -Hln "$proto" "$filter" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  return 1
}

# run_case NAME KIND IMPL ROLE SIZE: KIND rc|ud|rping|perf, IMPL c|rust (perf:
# the perftest program), ROLE = softrdma's role (server|client), SIZE (perf: the
# -A atomic type, or - for none). Sets RUN_OK and RUN_WHY; logs in
# $OUT/NAME.{host,guest}.log.
run_case() {
  local name=$1 kind=$2 impl=$3 role=$4 size=$5
  local hlog=$OUT/$name.host.log glog=$OUT/$name.guest.log pcap=$OUT/$name.pcap
  local -a hprog genv=()
  local gprog args ready proto filter
  case $kind in
    rc|ud)
      args="-n $ITERS -s $size"
      [ "$kind" = rc ] && args="$args -m 1024"
      gprog="ibv_${kind}_pingpong -d rxe0 -g $GID $args"
      if [ "$impl" = c ]; then hprog=(/usr/bin/ibv_${kind}_pingpong -g 0 $args)
      else hprog=("$EXAMPLES/${kind}_pingpong" -g 0 $args); fi
      genv=(SOFTRDMA_ADDR=$HOST_IP)
      ready="netstat -ltn | grep -q ':18515 '"
      proto=-t filter='sport = :18515'
      ;;
    rping)
      # No SOFTRDMA_ADDR: the device takes the bound (-a) or the routed address.
      gprog="rping -C 10 -v"
      hprog=(/usr/bin/rping -C 10 -v)
      ready="rdma res show cm_id | grep -q 'state LISTEN'"
      proto=-u filter='sport = :4791'
      ;;
    perf)
      # perftest's own TCP exchange on 18515; MTU 1024 as rxe's port.
      args="-n $ITERS -m 1024"
      [ "$size" = - ] || args="$args -A $size"
      gprog="$impl -d rxe0 -x $GID $args"
      hprog=(/usr/bin/$impl -x 0 $args)
      genv=(SOFTRDMA_ADDR=$HOST_IP)
      ready="netstat -ltn | grep -q ':18515 '"
      proto=-t filter='sport = :18515'
      ;;
  esac
  local -a henv=(env SOFTRDMA_PCAP="$pcap" "${genv[@]}")
  [ "$impl" = rust ] || henv+=(LD_LIBRARY_PATH="$COMPAT")
  local hrc grc jid hpid
  if [ "$role" = client ]; then
    # rxe serves in the guest, softrdma connects.
    if [ "$kind" = rping ]; then gprog="$gprog -s -a $GUEST_IP"; hprog+=(-c -a "$GUEST_IP")
    else hprog+=("$GUEST_IP"); fi
    jid=$(lab jobbg gA "timeout $T $gprog")
    if ! guest_ready "$ready"; then
      lab wait gA "$jid" $((T + 10)) > "$glog" 2>&1
      RUN_OK=0; RUN_WHY="rxe server did not start"; return
    fi
    lab host "${henv[@]}" timeout -k 5 "$T" "${hprog[@]}" > "$hlog" 2>&1
    hrc=$?
    lab wait gA "$jid" $((T + 10)) > "$glog" 2>&1
  else
    # softrdma serves on the host side, rxe connects from the guest.
    if [ "$kind" = rping ]; then gprog="$gprog -c -a $HOST_IP"; hprog+=(-s -a "$HOST_IP")
    else gprog="$gprog $HOST_IP"; fi
    # lab.sh execs down to `timeout`, so $! is the process to stop.
    "$LAB/lab.sh" host "${henv[@]}" timeout -k 5 "$T" "${hprog[@]}" > "$hlog" 2>&1 &
    hpid=$!
    HOST_PIDS+=("$hpid")
    if ! host_ready "$hpid" "$proto" "$filter"; then
      kill "$hpid" 2>/dev/null; wait "$hpid" 2>/dev/null
      RUN_OK=0; RUN_WHY="softrdma server did not start"; return
    fi
    [ "$kind" = rping ] && sleep 0.5   # the CM listener follows the device's socket
    lab job gA "timeout $T $gprog" $((T + 10)) > "$glog" 2>&1
    wait "$hpid"; hrc=$?
  fi
  grc=$(tail -n1 "$glog" | sed -n 's/^rc=//p')
  RUN_OK=1; RUN_WHY=
  [ "$hrc" = 0 ] || { RUN_OK=0; RUN_WHY="softrdma exit $hrc"; }
  [ "${grc:-x}" = 0 ] || { RUN_OK=0; RUN_WHY="${RUN_WHY:+$RUN_WHY, }rxe exit ${grc:-?}"; }
  if [ $RUN_OK = 1 ]; then
    if [ "$kind" = rping ]; then
      [ "$(grep -c 'ping data: rdma-ping-' "$hlog")" -ge 10 ] &&
        [ "$(grep -c 'ping data: rdma-ping-' "$glog")" -ge 10 ] ||
        { RUN_OK=0; RUN_WHY="fewer than 10 pings reported"; }
    elif [ "$kind" = perf ]; then
      # The client measures (the passive side of a latency test prints no
      # table); softrdma took rxe's depth.
      local clog=$hlog
      [ "$role" = server ] && clog=$glog
      grep -q '#iterations' "$clog" && grep -Eq "^ *[0-9]+ +$ITERS " "$clog" ||
        { RUN_OK=0; RUN_WHY="no result line with $ITERS iterations"; }
      grep -q 'Outstand reads  : 128' "$hlog" ||
        { RUN_OK=0; RUN_WHY="${RUN_WHY:+$RUN_WHY, }softrdma did not print \"Outstand reads  : 128\""; }
    else
      grep -q "$ITERS iters in" "$hlog" && grep -q "$ITERS iters in" "$glog" ||
        { RUN_OK=0; RUN_WHY="no \"$ITERS iters in\" line"; }
    fi
  fi
}

# run_two_servers NAME KIND: two softrdma servers at once on the host side,
# sharing its address (the host device: one UDP 4791, steered by QP and CM
# service ID), and an rxe client for each, started together in the guest.
# KIND rc2 (ibv_rc_pingpong on TCP 18515 and 18516) or rping2 (rdma_cm ports
# 7471 and 7472). Sets RUN_OK, RUN_WHY; the first server's capture is
# $OUT/NAME.pcap, the second's $OUT/NAME-2.pcap.
run_two_servers() {
  local name=$1 kind=$2 i hpid jid hrc grc
  local -a hpids=() jids=() hprog
  local gprog proto filter
  RUN_OK=1; RUN_WHY=
  for i in 1 2; do
    local pcap=$OUT/$name.pcap
    [ $i = 2 ] && pcap=$OUT/$name-2.pcap
    case $kind in
      rc2) hprog=(/usr/bin/ibv_rc_pingpong -g 0 -n "$ITERS" -s 4096 -m 1024 -p $((18514 + i)))
           proto=-t filter="sport = :$((18514 + i))" ;;
      rping2) hprog=(/usr/bin/rping -s -a "$HOST_IP" -C 10 -v -p $((7470 + i)))
           proto=-u filter='sport = :4791' ;;
    esac
    "$LAB/lab.sh" host env SOFTRDMA_PCAP="$pcap" SOFTRDMA_ADDR=$HOST_IP LD_LIBRARY_PATH="$COMPAT" \
      timeout -k 5 "$T" "${hprog[@]}" > "$OUT/$name.host$i.log" 2>&1 &
    hpid=$!
    hpids+=("$hpid"); HOST_PIDS+=("$hpid")
    if ! host_ready "$hpid" "$proto" "$filter"; then
      RUN_OK=0; RUN_WHY="softrdma server $i did not start"
    fi
  done
  [ "$kind" = rping2 ] && sleep 0.5   # the CM listeners follow the device's socket
  if [ $RUN_OK = 1 ]; then
    for i in 1 2; do
      case $kind in
        rc2) gprog="ibv_rc_pingpong -d rxe0 -g $GID -n $ITERS -s 4096 -m 1024 -p $((18514 + i)) $HOST_IP" ;;
        rping2) gprog="rping -c -a $HOST_IP -C 10 -v -p $((7470 + i))" ;;
      esac
      jids+=("$(lab jobbg gA "timeout $T $gprog")")
    done
    for i in 1 2; do
      lab wait gA "${jids[$((i - 1))]}" $((T + 10)) > "$OUT/$name.guest$i.log" 2>&1
      grc=$(tail -n1 "$OUT/$name.guest$i.log" | sed -n 's/^rc=//p')
      [ "${grc:-x}" = 0 ] || { RUN_OK=0; RUN_WHY="${RUN_WHY:+$RUN_WHY, }rxe client $i exit ${grc:-?}"; }
    done
  fi
  for i in 1 2; do
    hpid=${hpids[$((i - 1))]}
    [ $RUN_OK = 1 ] || kill "$hpid" 2>/dev/null
    wait "$hpid"; hrc=$?
    [ "$hrc" = 0 ] || { RUN_OK=0; RUN_WHY="${RUN_WHY:+$RUN_WHY, }softrdma server $i exit $hrc"; }
    if [ $RUN_OK = 1 ]; then
      case $kind in
        rc2) grep -q "$ITERS iters in" "$OUT/$name.host$i.log" &&
               grep -q "$ITERS iters in" "$OUT/$name.guest$i.log" ||
               { RUN_OK=0; RUN_WHY="pair $i: no \"$ITERS iters in\" line"; } ;;
        rping2) [ "$(grep -c 'ping data: rdma-ping-' "$OUT/$name.host$i.log")" -ge 10 ] &&
               [ "$(grep -c 'ping data: rdma-ping-' "$OUT/$name.guest$i.log")" -ge 10 ] ||
               { RUN_OK=0; RUN_WHY="pair $i: fewer than 10 pings reported"; } ;;
      esac
    fi
  done
}

# check_capture PCAP: softrdma decode + tshark. Sets CAP_OK, CAP_WHY, CAP_N.
check_capture() {
  local pcap=$1 n bad
  CAP_OK=1; CAP_WHY=; CAP_N=0
  [ -s "$pcap" ] || { CAP_OK=0; CAP_WHY="no capture"; return; }
  "$CLI" decode "$pcap" > "${pcap%.pcap}.decode.txt" 2>&1 ||
    { CAP_OK=0; CAP_WHY="softrdma decode: $(tail -n1 "${pcap%.pcap}.decode.txt")"; }
  n=$(tshark -r "$pcap" -T fields -e frame.protocols 2>/dev/null | wc -l)
  CAP_N=$n
  [ "$n" -gt 0 ] || { CAP_OK=0; CAP_WHY="${CAP_WHY:+$CAP_WHY; }tshark read no packets"; return; }
  bad=$(tshark -r "$pcap" -T fields -e frame.protocols 2>/dev/null | grep -vc ':udp:infiniband')
  [ "$bad" = 0 ] || { CAP_OK=0; CAP_WHY="${CAP_WHY:+$CAP_WHY; }tshark: $bad frames not RRoCE"; }
  # Malformed packets and expert infos of warning severity or worse.
  bad=$(tshark -r "$pcap" -o ip.check_checksum:TRUE \
    -Y '_ws.malformed || _ws.expert.severity >= 0x00600000 || ip.checksum.status == 0' 2>/dev/null | wc -l)
  [ "$bad" = 0 ] || { CAP_OK=0; CAP_WHY="${CAP_WHY:+$CAP_WHY; }tshark: $bad malformed/warning frames"; }
}

# ---- the cases ------------------------------------------------------------------
# name kind impl role size
CASES="
rc-c-64-client        rc    c    client 64
rc-c-4096-client      rc    c    client 4096
rc-c-65536-client     rc    c    client 65536
rc-c-64-server        rc    c    server 64
rc-c-4096-server      rc    c    server 4096
rc-c-65536-server     rc    c    server 65536
rc-rust-64-client     rc    rust client 64
rc-rust-4096-client   rc    rust client 4096
rc-rust-65536-client  rc    rust client 65536
rc-rust-64-server     rc    rust server 64
rc-rust-4096-server   rc    rust server 4096
rc-rust-65536-server  rc    rust server 65536
ud-c-client           ud    c    client 512
ud-c-server           ud    c    server 512
ud-rust-client        ud    rust client 512
ud-rust-server        ud    rust server 512
rping-c-client        rping c    client 64
rping-c-server        rping c    server 64
atomic-lat-fadd-client perf ib_atomic_lat client FETCH_AND_ADD
atomic-lat-fadd-server perf ib_atomic_lat server FETCH_AND_ADD
atomic-lat-cas-client perf  ib_atomic_lat client CMP_AND_SWAP
atomic-lat-cas-server perf  ib_atomic_lat server CMP_AND_SWAP
atomic-bw-client      perf  ib_atomic_bw  client -
atomic-bw-server      perf  ib_atomic_bw  server -
read-lat-client       perf  ib_read_lat   client -
read-lat-server       perf  ib_read_lat   server -
rc-c-two-servers      rc2   c    server 4096
rping-c-two-servers   rping2 c   server 64
"
RESULTS=()
FAILED=0
while read -r name kind impl role size; do
  [ -n "$name" ] || continue
  [ -z "$ONLY" ] || [[ $name =~ $ONLY ]] || continue
  t=$(now)
  printf '=== %-22s ' "$name"
  case $kind in
    rc2|rping2) run_two_servers "$name" "$kind"
                check_capture "$OUT/$name-2.pcap"; [ $CAP_OK = 1 ] || RUN_OK=0 ;;
    *) run_case "$name" "$kind" "$impl" "$role" "$size" ;;
  esac
  check_capture "$OUT/$name.pcap"
  secs=$(since "$t")
  if [ $RUN_OK = 1 ]; then run=PASS; else run="FAIL ($RUN_WHY)"; fi
  if [ $CAP_OK = 1 ]; then cap="ok, $CAP_N pkts"; else cap="FAIL ($CAP_WHY)"; fi
  [ $RUN_OK = 1 ] && [ $CAP_OK = 1 ] || FAILED=1
  echo "$run, capture $cap (${secs} s)"
  case $impl in c) what="ibv_${kind%2}_pingpong"; [ "${kind%2}" = rping ] && what=rping
                   [ "$kind" = "${kind%2}" ] || what="2 x $what"; what="$what (compat)" ;;
                rust) what="${kind}_pingpong (Rust)" ;;
                *) what="$impl (compat)"; [ "$size" = - ] || what="$impl -A $size" ;; esac
  [ "${kind%2}" = rping ] || [ "$kind" = ud ] || [ "$kind" = perf ] || what="$what ${size} B"
  RESULTS+=("$(printf '%-22s | %-34s | softrdma %-6s | %5s s | %-22s | %s' \
    "$name" "$what" "$role" "$secs" "$cap" "$run")")
done <<< "$CASES"

# ---- the real wire, seen at the guest's NIC ---------------------------------------
wire="not captured (lab.sh capture start failed)"
if [ $CAPTURING = 1 ]; then
  lab capture stop > "$OUT/capture-stop.log" 2>&1; CAPTURING=0
  if [ -s "$OUT/wire-gA.pcap" ]; then
    # Datagrams to 4791 too short to be RoCE are rdma_resolve_addr's route probes
    # (see docs/INTEROP.md); everything else must verify.
    tshark -r "$OUT/wire-gA.pcap" -Y 'udp.length >= 28' -F pcap -w "$OUT/wire-gA-roce.pcap" 2>/dev/null
    probes=$(tshark -r "$OUT/wire-gA.pcap" -Y 'udp.length < 28' 2>/dev/null | wc -l)
    if "$CLI" decode -q "$OUT/wire-gA-roce.pcap" > "$OUT/wire-gA.decode.txt" 2>&1; then
      wire="PASS ($(tail -n1 "$OUT/wire-gA.decode.txt"); $probes route probes left out)"
    else
      wire="FAIL (see $OUT/wire-gA.decode.txt)"; FAILED=1
    fi
    if [ -f "$LAB/tools/icrc_check.py" ]; then
      python3 "$LAB/tools/icrc_check.py" "$OUT/wire-gA-roce.pcap" > "$OUT/wire-gA.icrc.txt" 2>&1
      grep -q ' bad=0 ' "$OUT/wire-gA.icrc.txt" ||
        { wire="$wire; lab icrc_check.py FAILED"; FAILED=1; }
    fi
  else
    wire="FAIL (empty capture)"; FAILED=1
  fi
fi

{
  echo
  echo "softrdma <-> Linux rxe (guest $GUEST_IP, rxe GID index $GID; softrdma on $HOST_IP, GID 0)"
  printf '%-22s | %-34s | %-15s | %7s | %-22s | %s\n' case program role time "own capture" result
  printf '%s\n' "${RESULTS[@]}"
  echo "(own capture: softrdma's SOFTRDMA_PCAP file; ok = softrdma decode (parse, ICRC) and tshark (RRoCE, no malformed/warning) clean)"
  echo "wire capture at the guest NIC (every ICRC): $wire"
  echo "total $(since "$T0") s; logs and captures in $OUT"
} | tee "$OUT/results.txt"
if [ $FAILED = 0 ]; then echo "INTEROP: ALL PASSED"; else echo "INTEROP: SOME CASES FAILED"; fi
exit $FAILED
