#!/usr/bin/env python3
"""rsockets next to TCP, same run: Debian's unmodified rstream over
target/compat's librdmacm (rsockets over softrdma), the same rstream with
`-T s` (its own kernel-TCP mode, same program and pattern), and qperf
tcp_lat / tcp_bw. Prints a Markdown table of medians (with ranges), and the
CPU time both rstream processes used (user + system, from wait4).

Usage: scripts/rsocket-bench.py [COMPAT_DIR] [REPS] [RSTREAM_OPTS]   (after `cargo xtask compat`)
RSTREAM_OPTS: e.g. "-T b" (blocking calls instead of rstream's spinning default).
Environment:
  BEFORE=DIR  also run rsockets over the libraries in DIR (an older
              `cargo xtask compat`), interleaved: a before/after column.
  SHM=1       also run rsockets with SOFTRDMA_SHM=1 (the same-host
              shared-memory path instead of UDP over loopback).
Run it in a fresh network namespace so no other softrdma process shares the
host device:  unshare -n sh -c 'ip link set lo up; exec scripts/rsocket-bench.py ...'
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

# name, library dir (None: kernel TCP through `-T s`), extra environment
VARIANTS = [("rsockets (softrdma)", compat, {})]
if os.environ.get("BEFORE"):
    VARIANTS.append(("rsockets, before", os.environ["BEFORE"], {}))
if os.environ.get("SHM") == "1":
    VARIANTS.append(("rsockets, `SOFTRDMA_SHM=1`", compat, {"SOFTRDMA_SHM": "1"}))
VARIANTS.append(("TCP, same program (`rstream -T s`)", None, {}))


def rstream(args, libdir, extra_env):
    port[0] += 1
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.pop("SOFTRDMA_SHM", None)
    env.update(extra_env)
    if libdir:
        env["LD_LIBRARY_PATH"] = os.path.abspath(libdir)
    extra = extra_opts + ([] if libdir else ["-T", "s"])
    common = ["-p", str(port[0])] + args + extra
    before = os.times()
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
    after = os.times()
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    line = cli.stdout.strip().splitlines()[-1].split()
    if cli.returncode != 0 or len(line) < 8:
        raise RuntimeError("rstream failed: %s %s" % (cli.stdout, cli.stderr))
    return float(line[6]), float(line[7]), cpu  # Gb/s (both directions), usec/xfer, CPU s


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


load_before = os.getloadavg()
res, cpu = {}, {}
for rep in range(reps):
    for label, args, kind in CASES:
        for name, libdir, env in VARIANTS:
            gbps, usec, c = rstream(args, libdir, env)
            res.setdefault((label, name), []).append(usec if kind == "lat" else gbps / 8 / 2)
            cpu.setdefault((label, name), []).append(c)
    res.setdefault("qperf_lat", []).append(qperf("tcp_lat", "64"))
    res.setdefault("qperf_bw", []).append(qperf("tcp_bw", "64K") / 1e3)
load_after = os.getloadavg()


def med(v):
    return statistics.median(v), min(v), max(v)


tcp = VARIANTS[-1][0]
names = [v[0] for v in VARIANTS]
print("| measurement | " + " | ".join(names) + " | rsockets / TCP | ranges (same order) | CPU s, both processes (same order) |")
print("|---|" + "---|" * len(names) + "---|---|---|")
for label, args, kind in CASES:
    unit = "µs" if kind == "lat" else "GB/s"
    fmt = "%.1f" if kind == "lat" else "%.2f"
    ms = [med(res[(label, n)]) for n in names]
    ratio = ms[0][0] / ms[-1][0]
    cells = ["%s %s" % (fmt % m[0], unit) for m in ms]
    ranges = " / ".join("%s–%s" % (fmt % m[1], fmt % m[2]) for m in ms)
    cpus = " / ".join("%.2f" % statistics.median(cpu[(label, n)]) for n in names)
    print("| %s, `rstream %s` | %s | %.2f× | %s | %s |" % (
        label, " ".join(args + extra_opts), " | ".join(cells), ratio, ranges, cpus))
pad = " |" * (len(names) - 1)
ql, qb = med(res["qperf_lat"]), med(res["qperf_bw"])
print("| TCP 64 B one-way latency, `qperf tcp_lat -m 64` |%s %.1f µs | | %.1f–%.1f | |" % ((pad,) + ql))
print("| TCP 64 KiB bandwidth, `qperf tcp_bw -m 64K` |%s %.2f GB/s | | %.2f–%.2f | |" % ((pad,) + qb))
print()
print("%d repetitions, medians; load average %.1f before, %.1f after. rstream's Gb/sec counts both "
      "directions: GB/s here is one direction (Gb/sec / 8 / 2); its usec/xfer for `-C 1` is half a "
      "round trip. rsockets / TCP compares the first column with the last." % (
          reps, load_before[0], load_after[0]))
