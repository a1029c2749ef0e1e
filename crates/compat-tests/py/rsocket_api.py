"""The rsocket C API of target/compat/librdmacm.so.1 called through ctypes:
errors as sockets give them, half-close, nothing lost on close, non-blocking
calls, rpoll, IPv4 and IPv6. Usage: rsocket_api.py ADDR PORT (ADDR may be
IPv6). Prints one "ok NAME" line per check and exits 0, or fails loudly.
"""
import ctypes, errno, hashlib, os, socket, struct, sys, threading

lib = ctypes.CDLL("librdmacm.so.1", use_errno=True)
for name in ("rsend", "rrecv"):
    getattr(lib, name).restype = ctypes.c_ssize_t
    getattr(lib, name).argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]

addr, port = sys.argv[1], int(sys.argv[2])
fam = socket.AF_INET6 if ":" in addr else socket.AF_INET


def sockaddr(a, p):
    if fam == socket.AF_INET:
        b = struct.pack("<H", socket.AF_INET) + struct.pack(">H", p) + socket.inet_pton(fam, a) + bytes(8)
    else:
        b = struct.pack("<H", socket.AF_INET6) + struct.pack(">H", p) + bytes(4) + socket.inet_pton(fam, a) + bytes(4)
    return ctypes.create_string_buffer(b, len(b)), len(b)


def expect_err(name, ret, want):
    e = ctypes.get_errno()
    assert ret == -1 and e == want, "%s: got %r errno %s, want -1 %s" % (
        name, ret, errno.errorcode.get(e, e), errno.errorcode[want])
    print("ok", name, flush=True)


def check(cond, name):
    assert cond, name
    print("ok", name, flush=True)


def rsocket():
    fd = lib.rsocket(fam, socket.SOCK_STREAM, 0)
    assert fd >= 0, "rsocket: errno %d" % ctypes.get_errno()
    return fd


# Bad descriptors, bad arguments.
expect_err("rsend EBADF", lib.rsend(-7, None, 0, 0), errno.EBADF)
expect_err("rclose EBADF", lib.rclose(99999), errno.EBADF)
expect_err("rsocket EAFNOSUPPORT", lib.rsocket(socket.AF_UNIX, socket.SOCK_STREAM, 0), errno.EAFNOSUPPORT)
s = rsocket()
expect_err("rshutdown EINVAL", lib.rshutdown(s, 77), errno.EINVAL)
buf = ctypes.create_string_buffer(16)
expect_err("rsend unconnected ENOTCONN", lib.rsend(s, buf, 16, 0), errno.ENOTCONN)
expect_err("raccept not listening EINVAL", lib.raccept(s, None, None), errno.EINVAL)
# Nobody listens on port+1.
sa, sl = sockaddr(addr, port + 1)
expect_err("rconnect ECONNREFUSED", lib.rconnect(s, sa, sl), errno.ECONNREFUSED)
check(lib.rclose(s) == 0, "rclose")

# A listener and a connection in this process (the accept runs in the background).
lst = rsocket()
sa, sl = sockaddr(addr, port)
check(lib.rbind(lst, sa, sl) == 0, "rbind")
check(lib.rlisten(lst, 4) == 0, "rlisten")
cli = rsocket()
check(lib.rconnect(cli, sa, sl) == 0, "rconnect")
srv = lib.raccept(lst, None, None)
check(srv >= 0, "raccept")
name = ctypes.create_string_buffer(128)
nl = ctypes.c_uint32(128)
check(lib.rgetpeername(srv, name, ctypes.byref(nl)) == 0 and struct.unpack("<H", name.raw[:2])[0] == fam,
      "rgetpeername")
nl = ctypes.c_uint32(128)
check(lib.rgetsockname(lst, name, ctypes.byref(nl)) == 0 and struct.unpack(">H", name.raw[2:4])[0] == port,
      "rgetsockname")

# Non-blocking receive with nothing there; rpoll says when there is.
O_NONBLOCK, F_GETFL, F_SETFL = os.O_NONBLOCK, 3, 4
check(lib.rfcntl(srv, F_SETFL, O_NONBLOCK) == 0 and lib.rfcntl(srv, F_GETFL) & O_NONBLOCK, "rfcntl O_NONBLOCK")
expect_err("rrecv EAGAIN", lib.rrecv(srv, buf, 16, 0), errno.EAGAIN)


class PollFd(ctypes.Structure):
    _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]


pfd = PollFd(srv, 1, 0)
check(lib.rpoll(ctypes.byref(pfd), 1, 0) == 0, "rpoll nothing yet")
check(lib.rsend(cli, b"hello", 5, 0) == 5, "rsend")
check(lib.rpoll(ctypes.byref(pfd), 1, 5000) == 1 and pfd.revents & 1, "rpoll POLLIN")
check(lib.rrecv(srv, buf, 16, 0) == 5 and buf.raw[:5] == b"hello", "rrecv")
lib.rfcntl(srv, F_SETFL, 0)

# Half-close: the writer's further sends fail with EPIPE, the reader sees
# EOF, and the other direction still works.
check(lib.rshutdown(cli, 1) == 0, "rshutdown SHUT_WR")
expect_err("rsend after SHUT_WR EPIPE", lib.rsend(cli, b"x", 1, 0), errno.EPIPE)
check(lib.rrecv(srv, buf, 16, 0) == 0, "rrecv EOF after peer's SHUT_WR")
check(lib.rsend(srv, b"back", 4, 0) == 4, "rsend on the open direction")
check(lib.rrecv(cli, buf, 16, 0) == 4 and buf.raw[:4] == b"back", "rrecv on the open direction")
check(lib.rclose(srv) == 0 and lib.rclose(cli) == 0, "rclose both")

# Nothing lost on close: 8 MiB written, closed at once, all read back.
total = 8 << 20
data = os.urandom(total)
cli = rsocket()
check(lib.rconnect(cli, sa, sl) == 0, "rconnect again")
srv = lib.raccept(lst, None, None)
got = []


def reader():
    b = ctypes.create_string_buffer(1 << 16)
    while True:
        n = lib.rrecv(srv, b, 1 << 16, 0)
        if n <= 0:
            break
        got.append(b.raw[:n])


t = threading.Thread(target=reader)
t.start()
off = 0
while off < total:
    n = lib.rsend(cli, data[off:off + (1 << 20)], min(1 << 20, total - off), 0)
    assert n > 0, "rsend: errno %d" % ctypes.get_errno()
    off += n
check(lib.rclose(cli) == 0, "rclose right after the last rsend")
t.join(30)
check(not t.is_alive(), "reader saw EOF")
rx = b"".join(got)
check(len(rx) == total and hashlib.sha256(rx).digest() == hashlib.sha256(data).digest(),
      "all %d bytes arrived, byte-exact" % total)
expect_err("rsend to a closed peer EPIPE", lib.rsend(srv, b"x", 1, 0), errno.EPIPE)
check(lib.rclose(srv) == 0 and lib.rclose(lst) == 0, "rclose server and listener")
print("all ok", flush=True)
