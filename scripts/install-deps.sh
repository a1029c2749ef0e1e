#!/usr/bin/env bash
# Installs the Debian packages softrdma's tests use, if any is missing:
# reference headers (libibverbs-dev, librdmacm-dev), unmodified rdma-core
# programs (ibverbs-utils, rdmacm-utils, perftest), network namespaces and
# loss injection (iproute2, nftables; this kernel has no netem), qperf and
# tshark for baselines and captures, valgrind (scripts/valgrind.sh); RDMA
# middleware the compat tests run (fio's rdma engine, libfabric's fi_info
# and fi_pingpong; qperf's rdma_cm tests);
# UCX (ucx-utils: ucx_info, ucx_perftest; libucx-dev: its examples) and
# Open MPI (openmpi-bin, libopenmpi-dev: mpirun, mpicc) for the middleware
# tests run through `softrdma run` (crates/cli/tests/{ucx,mpi}.rs);
# rsockets (crates/compat-tests/tests/rsocket.rs): rdmacm-utils' rstream,
# riostream, rcopy and udpong, librdmacm1's librspreload.so
# (/usr/lib/<arch>/rsocket/) and python3;
# infiniband-diags (ibstat) and libibumad-dev (umad.h) for libibumad's
# tests (crates/compat-tests/tests/umad.rs);
# rdma-core's own test suite
# (python3-pyverbs, run by scripts/pyverbs.sh) if the distribution has it.
set -euo pipefail
PKGS=(libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils perftest
      iproute2 nftables qperf tshark gcc valgrind fio libfabric-bin
      ucx-utils libucx-dev openmpi-bin libopenmpi-dev librdmacm1 python3
      python3-pyverbs infiniband-diags libibumad-dev)
# Installed if possible; scripts that need them say SKIPPED without them.
OPTIONAL=(python3-pyverbs)
PKGS+=(ucx-utils)  # ucx_perftest: `cargo xtask bench`'s same-host baselines (UCX sm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "all packages present: ${PKGS[*]}"
  exit 0
fi
required=()
optional=()
for p in "${missing[@]}"; do
  if [[ " ${OPTIONAL[*]} " == *" $p "* ]]; then optional+=("$p"); else required+=("$p"); fi
done
if [ "$(id -u)" -ne 0 ]; then
  if [ ${#required[@]} -eq 0 ]; then
    echo "WARNING: optional packages missing: ${optional[*]} (their tests will be SKIPPED)"
    exit 0
  fi
  echo "missing packages: ${missing[*]} (run as root, or install them with apt-get)" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
if [ ${#required[@]} -gt 0 ]; then
  apt-get install -y -qq --no-install-recommends "${required[@]}" >/dev/null
fi
for p in ${optional[@]+"${optional[@]}"}; do
  apt-get install -y -qq --no-install-recommends "$p" >/dev/null ||
    echo "WARNING: optional package $p cannot be installed (its tests will be SKIPPED)"
done
echo "installed: ${missing[*]}"
