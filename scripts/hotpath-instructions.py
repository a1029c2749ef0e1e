#!/usr/bin/env python3
"""Instructions per call of the wire path's per-packet functions, per build.

A load-independent comparison of builds (BENCHMARKS.md, "Issue 16, outcome
6"): for each libibverbs directory given, runs a perftest latency pair over
UDP (`SOFTRDMA_SHM=0`) with the client under valgrind's callgrind and prints,
for each hot-path function, its calls and its inclusive instructions per
call. Busy polling makes totals depend on timing; instructions per call do
not (except where a call's work does: how many datagrams a receive returns).

    unshare -n sh -c 'ip link set lo up; exec scripts/hotpath-instructions.py \
        ib_send_lat <before>/compat target/compat'

Needs valgrind and perftest; run it in a fresh network namespace (it binds
127.0.0.2 and 127.0.0.3).
"""

import collections
import os
import re
import subprocess
import sys
import tempfile
import time

ITERS = 5000
# (label, a substring of the symbol)
FUNCS = [
    ("ibv_post_send", "ibverbs::verbs::post::post_send"),
    ("ibv_poll_cq", "ibverbs::verbs::post::poll_cq"),
    ("send_batch (sendmmsg)", "softrdma_udp::socket::RoceSocket::send_batch"),
    ("recv_batch (recvmmsg)", "softrdma_udp::socket::RoceSocket::recv_batch"),
    ("transport: handle one datagram", "softrdma_transport::endpoint::Endpoint::handle_datagram"),
    ("transport: post_send", "softrdma_transport::endpoint::Endpoint::post_send"),
    ("responder: execute", "responder::<impl softrdma_transport::qp::Qp>::execute"),
    ("requester: handle_response", "completer::<impl softrdma_transport::qp::Qp>::handle_response"),
    ("scatter", "softrdma_transport::qp::sgl::scatter"),
    ("memset (all callers)", "__memset_avx2_unaligned_erms"),
]


def parse(path):
    """Calls into each function and the inclusive cost of those calls."""
    names, calls, incl = {}, collections.Counter(), collections.Counter()
    npos, cfn, pending = 1, None, None

    def name(tok):
        m = re.match(r"\((\d+)\)(?: (.*))?", tok)
        if not m:
            return tok
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names[m.group(1)]

    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("positions:"):
                npos = len(line.split()) - 1
            elif line.startswith("fn="):
                name(line[3:])
            elif line.startswith("cfn="):
                cfn = name(line[4:])
            elif line.startswith("calls="):
                pending = (cfn, int(line[6:].split()[0]))
            elif pending and line and (line[0].isdigit() or line[0] in "+-*"):
                parts = line.split()
                if len(parts) > npos:
                    calls[pending[0]] += pending[1]
                    incl[pending[0]] += int(parts[npos])
                pending = None
    return calls, incl


def run(libs, tool, port, out):
    env = dict(os.environ, LD_LIBRARY_PATH=libs, SOFTRDMA_SHM="0")
    args = [tool, "-d", "softrdma0", "-x", "0", "-F", "-p", str(port), "-s", "8", "-n", str(ITERS)]
    server = subprocess.Popen(
        args, env=dict(env, SOFTRDMA_ADDR="127.0.0.2"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    try:
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + args + ["127.0.0.1"],
            env=dict(env, SOFTRDMA_ADDR="127.0.0.3"),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300, check=True,
        )
    finally:
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    tool, builds = sys.argv[1], sys.argv[2:]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for i, libs in enumerate(builds):
            out = os.path.join(d, f"cg.{i}")
            run(libs, tool, 18800 + i, out)
            rows.append(parse(out))
    print(f"{tool} -s 8 -n {ITERS}, client under callgrind: instructions per call (calls)")
    print("| function | " + " | ".join(builds) + " |")
    print("|---" * (len(builds) + 1) + "|")
    for label, pat in FUNCS:
        cells = []
        for calls, incl in rows:
            fs = [f for f in calls if pat in f]
            n = sum(calls[f] for f in fs)
            cells.append(f"{sum(incl[f] for f in fs) / n:.0f} ({n})" if n else "-")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
