#!/usr/bin/env bash
# Installs the Debian packages softrdma's tests use, if any is missing:
# reference headers (libibverbs-dev, librdmacm-dev), unmodified rdma-core
# programs (ibverbs-utils, rdmacm-utils, perftest), network namespaces and
# loss injection (iproute2, nftables; this kernel has no netem), qperf and
# tshark for baselines and captures.
set -euo pipefail
PKGS=(libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils perftest
      iproute2 nftables qperf tshark gcc)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "all packages present: ${PKGS[*]}"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing packages: ${missing[*]} (run as root, or install them with apt-get)" >&2
  exit 1
fi
echo "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "installed: ${missing[*]}"
