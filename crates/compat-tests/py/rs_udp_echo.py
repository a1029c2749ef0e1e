"""An ordinary UDP echo pair for the LD_PRELOAD=librspreload.so test.

server ADDR PORT: echoes datagrams until one says "quit", prints "served N".
client ADDR PORT COUNT: sends COUNT random 512-byte datagrams, each until
its echo comes back byte-exact (0.5 s per try), prints "echoed N of COUNT".
Both print "rsocket" if their socket answers SOL_RDMA options, which only an
rsocket does (the datagrams went over RDMA UD, not the kernel's UDP).
"""
import os, socket, sys

SOL_RDMA, RDMA_SQSIZE = 0x10000, 0


def over_rdma(s):
    try:
        s.getsockopt(SOL_RDMA, RDMA_SQSIZE)
        return "rsocket"
    except OSError:
        return "kernel socket"


mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
s = socket.socket(fam, socket.SOCK_DGRAM)
if mode == "server":
    s.bind((addr, port))
    print("bound", over_rdma(s), flush=True)
    n = 0
    while True:
        d, a = s.recvfrom(2048)
        s.sendto(d, a)
        if d == b"quit":
            break
        n += 1
    print("served", n, flush=True)
else:
    count = int(sys.argv[4])
    s.settimeout(0.5)
    ok = 0
    for i in range(count):
        m = os.urandom(512)
        for _ in range(20):
            s.sendto(m, (addr, port))
            try:
                d, _ = s.recvfrom(2048)
                while d != m:
                    d, _ = s.recvfrom(2048)
            except socket.timeout:
                continue
            ok += 1
            break
    s.sendto(b"quit", (addr, port))
    print("echoed %d of %d %s" % (ok, count, over_rdma(s)), flush=True)
    sys.exit(0 if ok == count else 1)
