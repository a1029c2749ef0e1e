"""Keepalive finds a peer that stopped answering. Usage:
  rs_keepalive.py server ADDR PORT   accepts 3 connections, sends b"x" on each,
                                     then stops itself (SIGSTOP: a hung peer)
  rs_keepalive.py client ADDR PORT   connects A and C with SO_KEEPALIVE and
                                     TCP_KEEPIDLE 1, B without; after the peer
                                     stops, rpoll reports A broken and a
                                     blocked rrecv on C fails with ETIMEDOUT,
                                     while B stays quiet.
Prints "ok NAME" lines and exits 0, or fails loudly.
"""
import ctypes, errno, os, signal, socket, struct, sys, threading, time

lib = ctypes.CDLL("librdmacm.so.1", use_errno=True)
for name in ("rsend", "rrecv"):
    getattr(lib, name).restype = ctypes.c_ssize_t
    getattr(lib, name).argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

mode, addr, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET
POLLIN, POLLERR, POLLHUP = 1, 8, 16
SOL_SOCKET, SO_KEEPALIVE, SO_ERROR = socket.SOL_SOCKET, socket.SO_KEEPALIVE, socket.SO_ERROR
IPPROTO_TCP, TCP_KEEPIDLE = socket.IPPROTO_TCP, socket.TCP_KEEPIDLE


def sockaddr(a, p):
    if fam == socket.AF_INET:
        b = struct.pack("<H", socket.AF_INET) + struct.pack(">H", p) + socket.inet_pton(fam, a) + bytes(8)
    else:
        b = struct.pack("<H", socket.AF_INET6) + struct.pack(">H", p) + bytes(4) + socket.inet_pton(fam, a) + bytes(4)
    return ctypes.create_string_buffer(b, len(b)), len(b)


def check(cond, name):
    assert cond, name
    print("ok", name, flush=True)


def rsocket():
    fd = lib.rsocket(fam, socket.SOCK_STREAM, 0)
    assert fd >= 0, "rsocket: errno %d" % ctypes.get_errno()
    return fd


def setint(fd, level, name, v):
    val = ctypes.c_int(v)
    return lib.rsetsockopt(fd, level, name, ctypes.byref(val), 4)


def getint(fd, level, name):
    val = ctypes.c_int(0)
    ln = ctypes.c_uint32(4)
    assert lib.rgetsockopt(fd, level, name, ctypes.byref(val), ctypes.byref(ln)) == 0
    return val.value


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


sa, sl = sockaddr(addr, port)
if mode == "server":
    lst = rsocket()
    assert lib.rbind(lst, sa, sl) == 0 and lib.rlisten(lst, 4) == 0
    print("listening", flush=True)
    conns = []
    for _ in range(3):
        c = lib.raccept(lst, None, None)
        assert c >= 0, "raccept: errno %d" % ctypes.get_errno()
        conns.append(c)
    for c in conns:
        assert lib.rsend(c, b"x", 1, 0) == 1
    # Let the sends be acknowledged, then hang (all threads stop).
    time.sleep(1)
    print("stopping", flush=True)
    os.kill(os.getpid(), signal.SIGSTOP)
    sys.exit(0)

fds = []
for _ in range(3):
    s = rsocket()
    assert lib.rconnect(s, sa, sl) == 0, "rconnect: errno %d" % ctypes.get_errno()
    fds.append(s)
a, b, c = fds
for s in (a, c):
    check(setint(s, SOL_SOCKET, SO_KEEPALIVE, 1) == 0 and setint(s, IPPROTO_TCP, TCP_KEEPIDLE, 1) == 0,
          "keepalive on, 1 s")
check(getint(a, SOL_SOCKET, SO_KEEPALIVE) == 1 and getint(a, IPPROTO_TCP, TCP_KEEPIDLE) == 1, "options read back")
check(getint(b, SOL_SOCKET, SO_KEEPALIVE) == 0, "B without keepalive")
buf = ctypes.create_string_buffer(16)
for s in fds:
    n = lib.rrecv(s, buf, 16, 0)
    assert n == 1 and buf.raw[:1] == b"x", "first byte: %d" % n
print("ok got a byte on each", flush=True)

start = time.monotonic()
blocked = {}


def reader():
    n = lib.rrecv(c, buf, 16, 0)
    blocked["ret"], blocked["errno"], blocked["after"] = n, ctypes.get_errno(), time.monotonic() - start


t = threading.Thread(target=reader, daemon=True)
t.start()
pfds = (PollFd * 2)(PollFd(a, POLLIN, 0), PollFd(b, POLLIN, 0))
n = lib.rpoll(pfds, 2, 30000)
after = time.monotonic() - start
check(n == 1 and pfds[0].revents & (POLLERR | POLLHUP) and pfds[1].revents == 0,
      "rpoll: A broken after %.1f s, B quiet (n %d, revents %d %d)" % (after, n, pfds[0].revents, pfds[1].revents))
# As a TCP socket whose keepalive timed out: the error once (SO_ERROR takes
# it), then the end of the stream and EPIPE.
check(getint(a, SOL_SOCKET, SO_ERROR) == errno.ETIMEDOUT, "SO_ERROR on A: ETIMEDOUT")
check(getint(a, SOL_SOCKET, SO_ERROR) == 0, "SO_ERROR taken")
n = lib.rrecv(a, buf, 16, 0)
check(n == 0, "rrecv on A: end of stream (%d %d)" % (n, ctypes.get_errno()))
n = lib.rsend(a, b"z", 1, 0)
check(n == -1 and ctypes.get_errno() == errno.EPIPE, "rsend on A: EPIPE (%d %d)" % (n, ctypes.get_errno()))
t.join(30)
check(blocked.get("ret") == -1 and blocked.get("errno") == errno.ETIMEDOUT,
      "blocked rrecv on C woke with ETIMEDOUT after %.1f s (%r)" % (blocked.get("after", -1), blocked))
pb = (PollFd * 1)(PollFd(b, POLLIN, 0))
check(lib.rpoll(pb, 1, 0) == 0, "B still quiet")
print("all ok", flush=True)
os._exit(0)
