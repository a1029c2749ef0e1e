"""A forking TCP echo pair for librspreload's fork mode (RDMAV_FORK_SAFE=1).

server ADDR PORT N: accepts N connections one after another, forks a child
  for each that echoes until EOF and prints "child K served BYTES KIND".
client ADDR PORT N BYTES: N connections in turn, each sends BYTES random
  bytes in 64 KiB pieces and reads them back; prints "echo K ok KIND".
KIND is "rsocket" if the socket answers SOL_RDMA options (only an rsocket
does), so a line saying "rsocket" means the bytes went over RDMA. In fork
mode librspreload makes every stream socket a kernel TCP socket first and
moves each connection to an rsocket at its first read or write, after the
fork: the server child's first call must be a read, the client's a write.
Its fork mode takes only `socket(domain, SOCK_STREAM, 0 or IPPROTO_TCP)`:
Python's socket() adds SOCK_CLOEXEC to the type, so the sockets here are
made with socket(2) through ctypes and wrapped.
"""
import ctypes, os, socket, sys

SOL_RDMA, RDMA_SQSIZE = 0x10000, 0


def over_rdma(s):
    try:
        s.getsockopt(SOL_RDMA, RDMA_SQSIZE)
        return "rsocket"
    except OSError:
        return "kernel socket"


mode, addr, port, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
libc = ctypes.CDLL(None, use_errno=True)


def stream_socket():
    fd = libc.socket(fam, socket.SOCK_STREAM, 0)
    if fd < 0:
        sys.exit("socket: " + os.strerror(ctypes.get_errno()))
    return socket.socket(fam, socket.SOCK_STREAM, 0, fileno=fd)


if mode == "server":
    s = stream_socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((addr, port))
    s.listen(4)
    print("listening", over_rdma(s), flush=True)
    for k in range(n):
        # accept(2), not Python's accept4(2): Debian's librspreload (rdma-core
        # 44) intercepts only the former.
        fd = libc.accept(s.fileno(), None, None)
        if fd < 0:
            sys.exit("accept: " + os.strerror(ctypes.get_errno()))
        pid = os.fork()
        if pid == 0:
            c = socket.socket(fam, socket.SOCK_STREAM, 0, fileno=fd)
            total = 0
            kind = None
            while True:
                d = c.recv(65536)
                if kind is None:
                    kind = over_rdma(c)
                if not d:
                    break
                c.sendall(d)
                total += len(d)
            c.close()
            print("child", k, "served", total, kind, flush=True)
            os._exit(0)
        os.close(fd)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            sys.exit("child %d failed: %d" % (k, status))
    print("all served", flush=True)
else:
    total = int(sys.argv[5])
    for k in range(n):
        data = os.urandom(total)
        c = stream_socket()
        c.connect((addr, port))
        got = bytearray()
        sent = 0
        kind = None
        while sent < total:
            m = min(65536, total - sent)
            c.sendall(data[sent:sent + m])
            if kind is None:
                kind = over_rdma(c)
            sent += m
            while len(got) < sent:
                d = c.recv(sent - len(got))
                if not d:
                    sys.exit("connection %d closed early at %d" % (k, len(got)))
                got += d
        c.close()
        if bytes(got) != data:
            sys.exit("echo %d differs" % k)
        print("echo", k, "ok", kind, flush=True)
