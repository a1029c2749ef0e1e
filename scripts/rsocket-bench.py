#!/usr/bin/env python3
"""rsockets next to TCP, same run: Debian's unmodified rstream over
target/compat's librdmacm (rsockets over softrdma), the same rstream with
`-T s` (its own kernel-TCP mode, same program and pattern), and qperf
tcp_lat / tcp_bw. Prints a Markdown table of medians (with ranges).

Usage: scripts/rsocket-bench.py [COMPAT_DIR] [REPS] [RSTREAM_OPTS]   (after `cargo xtask compat`)
RSTREAM_OPTS: e.g. "-T b" (blocking calls instead of rstream's spinning default).
"""
import os, re, statistics, subprocess, sys, time

compat = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.environ.get("CARGO_TARGET_DIR", "target"), "compat")
reps = int(sys.argv[2]) if len(sys.argv) > 2 else 3
port = [7900 + os.getpid() % 500]
extra_opts = sys.argv[3].split() if len(sys.argv) > 3 else []

CASES = [  # label, rstream args, what to report
    ("64 B ping-pong (one-way latency)", ["-S", "64", "-C", "1", "-I", "20000"], "lat"),
    ("4 KiB stream", ["-S", "4096", "-C", "100000", "-B", "524288"], "bw"),
    ("64 KiB stream", ["-S", "65536", "-C", "20000", "-B", "524288"], "bw"),
    ("1 MiB stream", ["-S", "1048576", "-C", "2000", "-B", "524288"], "bw"),
]


def rstream(args, tcp):
    port[0] += 1
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if not tcp:
        env["LD_LIBRARY_PATH"] = os.path.abspath(compat)
    extra = extra_opts + (["-T", "s"] if tcp else [])
    common = ["-p", str(port[0])] + args + extra
    srv = subprocess.Popen(["rstream", "-b", "127.0.0.1"] + common, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for attempt in range(20):  # the server may not listen yet on a busy machine
        time.sleep(0.5)
        cli = subprocess.run(["rstream", "-s", "127.0.0.1"] + common, env=env, capture_output=True,
                             text=True, timeout=300)
        if cli.returncode == 0 or "connect" not in cli.stdout + cli.stderr:
            break
    try:
        srv.wait(timeout=60)
    except subprocess.TimeoutExpired:
        srv.kill()
        srv.wait()
    line = cli.stdout.strip().splitlines()[-1].split()
    if cli.returncode != 0 or len(line) < 8:
        raise RuntimeError("rstream failed: %s %s" % (cli.stdout, cli.stderr))
    return float(line[6]), float(line[7])  # Gb/s (both directions), usec/xfer


def qperf(test, size):
    srv = subprocess.Popen(["qperf"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env={k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_PRELOAD")})
    time.sleep(0.3)
    try:
        out = subprocess.run(["qperf", "127.0.0.1", "-t", "2", "-m", size, test], capture_output=True,
                             text=True, timeout=60).stdout
    finally:
        srv.kill()
        srv.wait()
    m = re.search(r"(bw|latency)\s*=\s*([\d.]+)\s*(\S+)", out)
    v, unit = float(m.group(2)), m.group(3)
    scale = {"GB/sec": 1e3, "MB/sec": 1.0, "KB/sec": 1e-3, "us": 1.0, "ms": 1e3, "ns": 1e-3}[unit]
    return v * scale  # MB/s or us


res = {}
for rep in range(reps):
    for label, args, kind in CASES:
        for tcp in (False, True):
            gbps, usec = rstream(args, tcp)
            res.setdefault((label, tcp), []).append(usec if kind == "lat" else gbps / 8 / 2)
    res.setdefault("qperf_lat", []).append(qperf("tcp_lat", "64"))
    res.setdefault("qperf_bw", []).append(qperf("tcp_bw", "64K") / 1e3)


def med(v):
    return statistics.median(v), min(v), max(v)


print("| measurement | rsockets (softrdma) | TCP, same program (`rstream -T s`) | rsockets / TCP | ranges |")
print("|---|---|---|---|---|")
for label, args, kind in CASES:
    r, t = med(res[(label, False)]), med(res[(label, True)])
    unit = "µs" if kind == "lat" else "GB/s"
    fmt = "%.1f" if kind == "lat" else "%.2f"
    print("| %s, `rstream %s` | %s %s | %s %s | %.2f× | %s–%s / %s–%s |" % (
        label, " ".join(args + extra_opts), fmt % r[0], unit, fmt % t[0], unit, r[0] / t[0],
        fmt % r[1], fmt % r[2], fmt % t[1], fmt % t[2]))
ql, qb = med(res["qperf_lat"]), med(res["qperf_bw"])
print("| TCP 64 B one-way latency, `qperf tcp_lat -m 64` | | %.1f µs | | %.1f–%.1f |" % ql)
print("| TCP 64 KiB bandwidth, `qperf tcp_bw -m 64K` | | %.2f GB/s | | %.2f–%.2f |" % qb)
print()
print("%d repetitions, medians. rstream's Gb/sec counts both directions: GB/s here is one direction "
      "(Gb/sec / 8 / 2); its usec/xfer for `-C 1` is half a round trip." % reps)
