"""An ordinary TCP echo pair for the LD_PRELOAD=librspreload.so test.

server ADDR PORT: accepts one connection, echoes until EOF, prints "served N".
client ADDR PORT BYTES: sends BYTES random bytes in 64 KiB pieces, reads the
echo back, prints "echo N ok" if it is byte-exact (exit 1 otherwise).
Each side prints "rsocket" if its socket answers SOL_RDMA options, which only
an rsocket does: the bytes went over RDMA, not over the kernel's TCP.
"""
import ctypes, hashlib, os, socket, sys

SOL_RDMA, RDMA_SQSIZE = 0x10000, 0


def over_rdma(s):
    try:
        s.getsockopt(SOL_RDMA, RDMA_SQSIZE)
        return "rsocket"
    except OSError:
        return "kernel socket"


mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
if mode == "server":
    s = socket.socket(fam, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(1)
    print("listening", over_rdma(s), flush=True)
    # Python's accept() calls accept4(2), which Debian's librspreload
    # (rdma-core 44) does not intercept: accept(2) it does.
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.accept(s.fileno(), None, None)
    if fd < 0:
        sys.exit("accept: " + os.strerror(ctypes.get_errno()))
    c = socket.socket(fam, socket.SOCK_STREAM, 0, fileno=fd)
    n = 0
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
        n += len(d)
    c.close()
    s.close()
    print("served", n, flush=True)
else:
    total = int(sys.argv[4])
    data = os.urandom(total)
    c = socket.create_connection((addr, port))
    kind = over_rdma(c)
    got = bytearray()
    sent = 0
    while sent < total:
        k = min(65536, total - sent)
        c.sendall(data[sent:sent + k])
        sent += k
        while len(got) < sent:
            d = c.recv(sent - len(got))
            if not d:
                sys.exit("unexpected EOF after %d bytes" % len(got))
            got += d
    c.close()
    ok = hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    print("echo", len(got), "ok" if ok else "MISMATCH", kind, flush=True)
    sys.exit(0 if ok else 1)
