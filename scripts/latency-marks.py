#!/usr/bin/env python3
"""Where a same-host busy-poll ib_send_lat message's time goes, step by step.

Reads the two mark files a run of the build of scripts/latency-marks.patch
wrote (one per process: /tmp/marks.<pid>.<tid>), merges them by TSC and
prints, for each step of a message's one-way path, the median time between
its two marks (ns; the TSC rate from the kernel's "tsc: Detected" line or
--ghz). A mark is `lfence; rdtsc` and a buffer push (~20-30 ns, which the
steps include): the fence makes a stalled load show in the step that made
it, not in a later one.

    scripts/latency-marks.py /tmp/marks.A /tmp/marks.B [--ghz 2.445]
"""
import re
import subprocess
import sys

NAMES = {
    1: "post_send called", 19: "engine post_send", 20: "clock read (engine locked; express: the latest reading, before the transmit lock)",
    21: "record built (express cell, or the transport's WQE)", 22: "timers checked",
    23: "transmit lock taken (express: taken at 20-21, this step is its flag)", 2: "record pushed into the lane", 3: "post_send returned",
    13: "peer: inbox has work", 14: "peer: engine locked", 4: "peer: record popped",
    30: "peer: record read (in place, or as a Packet)", 31: "peer: responder done (receive WQE, copy, completion)",
    32: "peer: carried ACK done (send completion)", 33: "peer: QP scheduled",
    8: "peer: delivered", 15: "peer: lane read to its end (next slot empty)",
    16: "peer: then() called", 18: "peer: Endpoint::poll_cq found it",
    24: "peer: wc written to the app", 17: "peer: Endpoint::poll_cq returned",
    9: "peer: CQ polled under the lock", 10: "peer: after()",
    11: "peer: inbox read ends", 12: "peer: receive burst returns",
    5: "peer: poll_cq returns a completion", 6: "peer: post_recv called",
    7: "peer: post_recv returned",
}
# The one-way path, from the moment a post is called to the peer's next
# post: (from, to, across processes).
PATH = [
    (1, 19, False), (19, 20, False), (20, 21, False), (21, 22, False), (22, 23, False),
    (21, 23, False), (23, 2, False), (2, 13, True), (13, 14, False), (14, 4, False), (4, 30, False),
    (30, 31, False), (31, 32, False), (32, 33, False), (33, 8, False), (8, 15, False),
    (15, 16, False), (16, 18, False), (18, 24, False), (24, 17, False), (17, 9, False),
    (9, 10, False), (10, 11, False), (11, 12, False), (12, 5, False), (5, 18, False),
    (24, 5, False), (5, 6, False), (6, 7, False), (7, 1, False),
]


def ghz():
    if "--ghz" in sys.argv:
        return float(sys.argv[sys.argv.index("--ghz") + 1])
    log = subprocess.run(["dmesg"], capture_output=True, text=True).stdout
    m = re.search(r"tsc: Detected ([0-9.]+) MHz", log)
    if not m:
        sys.exit("no TSC rate in dmesg: pass --ghz")
    return float(m.group(1)) / 1000


def main():
    rate = ghz()
    events = []
    for p, path in enumerate(sys.argv[1:3]):
        for line in open(path):
            k, t = line.split()
            events.append((int(t), p, int(k)))
    events.sort()
    n = len(events)
    events = events[n // 5: n * 4 // 5]  # both processes in their loop
    steps = {}
    prev = {}
    pushed = {}
    for t, p, k in events:
        if p in prev:
            steps.setdefault((prev[p][0], k, False), []).append((t - prev[p][1]) / rate)
        if k == 13 and 1 - p in pushed:
            steps.setdefault((2, 13, True), []).append((t - pushed[1 - p]) / rate)
        if k == 2:
            pushed[p] = t
        prev[p] = (k, t)
    # The second poll (the send's completion, which the record's ACK made):
    # its own names, though its marks are the first poll's.
    label = {(21, 23): "transmit lock taken (express post: no engine lock, timers)",
             (5, 18): "peer: 2nd poll_cq finds the send completion",
             (24, 5): "peer: 2nd poll_cq returns it"}
    total = 0.0
    print(f"{'step (to the mark named)':62s} {'median ns':>9s} {'n':>7s}")
    for a, b, cross in PATH:
        v = sorted(steps.get((a, b, cross), []))
        name = label.get((a, b), NAMES[b])
        if not v:
            print(f"{name:62s} {'-':>9s}")
            continue
        med = v[len(v) // 2]
        total += med
        print(f"{name:62s} {med:9.0f} {len(v):7d}")
    print(f"{'sum of the medians (one way, marks included)':62s} {total:9.0f}")


main()
