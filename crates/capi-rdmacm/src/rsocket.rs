//! The rsocket API (`<rdma/rsocket.h>`, RDMACM_1.0). All stubs: `-1` with
//! `errno = ENOSYS`. rping, ucmatose, udaddy, mckey and cmtime import `rpoll`
//! without calling it; rstream, riostream, rcopy and udpong use the API for
//! real (see `shared/reference/abi.md` §3).

use core::ffi::{c_int, c_void};

use libc::{fd_set, iovec, msghdr, nfds_t, off_t, pollfd, sockaddr, socklen_t, timeval};

use crate::guard::{NOT_IMPLEMENTED, ffi_guard, ret, stubs};

stubs! {
    /// `int rsocket(int domain, int type, int protocol)`.
    fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)`.
    fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rlisten(int socket, int backlog)`.
    fn rlisten(socket: c_int, backlog: c_int) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)`.
    fn raccept(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)`.
    fn rconnect(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rshutdown(int socket, int how)`.
    fn rshutdown(socket: c_int, how: c_int) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rclose(int socket)`.
    fn rclose(socket: c_int) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `ssize_t rrecv(int socket, void *buf, size_t len, int flags)`.
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize
        => ret::neg_isize(NOT_IMPLEMENTED);
    /// `ssize_t rrecvfrom(int, void *buf, size_t len, int flags, struct sockaddr *, socklen_t *)`.
    fn rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src_addr: *mut sockaddr,
        addrlen: *mut socklen_t) -> isize => ret::neg_isize(NOT_IMPLEMENTED);
    /// `ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)`.
    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> isize => ret::neg_isize(NOT_IMPLEMENTED);
    /// `ssize_t rsend(int socket, const void *buf, size_t len, int flags)`.
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize
        => ret::neg_isize(NOT_IMPLEMENTED);
    /// `ssize_t rsendto(int, const void *buf, size_t len, int flags, const struct sockaddr *,
    /// socklen_t)`.
    fn rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, dest_addr: *const sockaddr,
        addrlen: socklen_t) -> isize => ret::neg_isize(NOT_IMPLEMENTED);
    /// `ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)`.
    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> isize => ret::neg_isize(NOT_IMPLEMENTED);
    /// `ssize_t rread(int socket, void *buf, size_t count)`.
    fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize => ret::neg_isize(NOT_IMPLEMENTED);
    /// `ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)`.
    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize => ret::neg_isize(NOT_IMPLEMENTED);
    /// `ssize_t rwrite(int socket, const void *buf, size_t count)`.
    fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize => ret::neg_isize(NOT_IMPLEMENTED);
    /// `ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)`.
    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize => ret::neg_isize(NOT_IMPLEMENTED);
    /// `int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)`.
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rselect(int nfds, fd_set *, fd_set *, fd_set *, struct timeval *)`.
    fn rselect(nfds: c_int, readfds: *mut fd_set, writefds: *mut fd_set, exceptfds: *mut fd_set,
        timeout: *mut timeval) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)`.
    fn rgetpeername(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)`.
    fn rgetsockname(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int
        => ret::neg(NOT_IMPLEMENTED);
    /// `int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)`.
    fn rsetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *const c_void, optlen: socklen_t)
        -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)`.
    fn rgetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut socklen_t)
        -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)`.
    fn riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: off_t) -> off_t
        => ret::neg_isize(NOT_IMPLEMENTED) as off_t;
    /// `int riounmap(int socket, void *buf, size_t len)`.
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int => ret::neg(NOT_IMPLEMENTED);
    /// `size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)`.
    fn riowrite(socket: c_int, buf: *const c_void, count: usize, offset: off_t, flags: c_int) -> usize
        => ret::neg_usize(NOT_IMPLEMENTED);
}

/// `int rfcntl(int socket, int cmd, ... /* arg */)`. Variadic in C; defined
/// with the fixed arguments only, which is sound on x86_64 SysV for a callee
/// that does not read the variadic part. A real implementation needs the
/// optional `arg` (`F_SETFL` flags): read it as a third `c_long` argument, which
/// is where the x86_64 ABI passes the first variadic integer.
#[unsafe(no_mangle)]
pub extern "C" fn rfcntl(socket: c_int, cmd: c_int) -> c_int {
    let _ = (socket, cmd);
    ffi_guard(
        || -1,
        || {
            crate::guard::stub_hit("rfcntl");
            ret::neg(NOT_IMPLEMENTED)
        },
    )
}
