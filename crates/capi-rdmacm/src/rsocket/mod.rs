//! The rsocket API (`<rdma/rsocket.h>`, RDMACM_1.0): sockets over RDMA with
//! rdma-core's wire protocol (`softrdma_rsocket::proto`), so Debian's `rstream`, `rcopy`,
//! `riostream`, `udpong` and `librspreload.so` run unmodified. Stream (RC)
//! rsockets with `riomap`/`riowrite`, and datagram (UD) rsockets
//! (`dgram.rs`).
//!
//! - `ops.rs`: the operations in safe Rust (`Result<_, errno>`);
//!   `conn.rs`: one connection's buffers and credits; `sock.rs`: the socket
//!   table and waits; `listen.rs` / `connect.rs`: both ends of set-up;
//!   `poll.rs`: `rpoll`/`rselect`; `opts.rs`: socket options; `dgram.rs`:
//!   datagram sockets;
//!   `sys.rs`: the verbs calls.
//! - This file: the C exports, converting arguments and errors only, each
//!   inside `ffi_guard` (no panic crosses the ABI).

use core::ffi::{c_int, c_long, c_void};

use libc::{fd_set, iovec, msghdr, nfds_t, off_t, pollfd, sockaddr, socklen_t, timeval};

use crate::guard::{ffi_guard, ret};

mod config;
mod conn;
mod connect;
mod dgram;
mod keepalive;
mod listen;
mod ops;
mod opts;
mod poll;
use softrdma_rsocket::proto;
mod sock;
mod sys;

fn int(r: Result<c_int, c_int>) -> c_int {
    r.unwrap_or_else(ret::neg)
}
fn unit(r: Result<(), c_int>) -> c_int {
    int(r.map(|()| 0))
}
fn size(r: Result<usize, c_int>) -> isize {
    match r {
        Ok(n) => n as isize,
        Err(e) => ret::neg_isize(e),
    }
}

/// Writes `a` to a caller's `(addr, addrlen)` as `getsockname` does.
///
/// # Safety
///
/// `addr` writable for `*addrlen` bytes, `addrlen` readable and writable.
unsafe fn put_addr(
    a: &libc::sockaddr_storage,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> Result<(), c_int> {
    if addrlen.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: non-NULL per the check, readable per the contract.
    if addr.is_null() && unsafe { *addrlen } != 0 {
        return Err(libc::EFAULT);
    }
    let full = if a.ss_family as c_int == libc::AF_INET6 {
        size_of::<libc::sockaddr_in6>()
    } else {
        size_of::<libc::sockaddr_in>()
    };
    // SAFETY: per the contract.
    unsafe {
        let n = full.min(*addrlen as usize);
        if n > 0 {
            core::ptr::copy_nonoverlapping(
                (a as *const libc::sockaddr_storage).cast::<u8>(),
                addr.cast::<u8>(),
                n,
            );
        }
        *addrlen = full as socklen_t;
    }
    Ok(())
}

/// A caller's buffer as a slice (empty for NULL/0).
///
/// # Safety
///
/// `buf` readable for `len` bytes.
unsafe fn slice<'a>(buf: *const c_void, len: usize) -> Result<&'a [u8], c_int> {
    if len == 0 {
        return Ok(&[]);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: per the contract.
    Ok(unsafe { core::slice::from_raw_parts(buf.cast(), len) })
}

/// # Safety
///
/// `buf` writable for `len` bytes.
unsafe fn slice_mut<'a>(buf: *mut c_void, len: usize) -> Result<&'a mut [u8], c_int> {
    if len == 0 {
        return Ok(&mut []);
    }
    if buf.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: per the contract.
    Ok(unsafe { core::slice::from_raw_parts_mut(buf.cast(), len) })
}

/// `int rsocket(int domain, int type, int protocol)`.
#[unsafe(no_mangle)]
pub extern "C" fn rsocket(domain: c_int, type_: c_int, protocol: c_int) -> c_int {
    ffi_guard(|| -1, || int(ops::socket(domain, type_, protocol)))
}

/// `int rbind(int socket, const struct sockaddr *addr, socklen_t addrlen)`.
///
/// # Safety
///
/// `addr` readable for `addrlen` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
    ffi_guard(
        || -1,
        || unit(ops::sockaddr_in(addr, addrlen).and_then(|a| ops::bind(socket, &a))),
    )
}

/// `int rlisten(int socket, int backlog)`.
#[unsafe(no_mangle)]
pub extern "C" fn rlisten(socket: c_int, backlog: c_int) -> c_int {
    ffi_guard(|| -1, || unit(ops::listen(socket, backlog)))
}

/// `int raccept(int socket, struct sockaddr *addr, socklen_t *addrlen)`.
///
/// # Safety
///
/// `addr`/`addrlen` NULL or as for `accept(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn raccept(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    ffi_guard(
        || -1,
        || {
            let s = match ops::accept(socket) {
                Ok(s) => s,
                Err(e) => return ret::neg(e),
            };
            if !addr.is_null()
                && !addrlen.is_null()
                && let Ok(a) = ops::name(s.fd, true)
            {
                // SAFETY: non-NULL, per the contract.
                let _ = unsafe { put_addr(&a, addr, addrlen) };
            }
            s.fd
        },
    )
}

/// `int rconnect(int socket, const struct sockaddr *addr, socklen_t addrlen)`.
///
/// # Safety
///
/// `addr` readable for `addrlen` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rconnect(
    socket: c_int,
    addr: *const sockaddr,
    addrlen: socklen_t,
) -> c_int {
    ffi_guard(
        || -1,
        || unit(ops::sockaddr_in(addr, addrlen).and_then(|a| ops::connect(socket, a))),
    )
}

/// `int rshutdown(int socket, int how)`.
#[unsafe(no_mangle)]
pub extern "C" fn rshutdown(socket: c_int, how: c_int) -> c_int {
    ffi_guard(|| -1, || unit(ops::shutdown(socket, how)))
}

/// `int rclose(int socket)`.
#[unsafe(no_mangle)]
pub extern "C" fn rclose(socket: c_int) -> c_int {
    ffi_guard(|| -1, || unit(ops::close(socket)))
}

/// `ssize_t rrecv(int socket, void *buf, size_t len, int flags)`.
///
/// # Safety
///
/// `buf` writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
    // SAFETY: per the contract.
    ffi_guard(
        || -1,
        || size(unsafe { slice_mut(buf, len) }.and_then(|b| ops::recv(socket, b, flags))),
    )
}

/// `ssize_t rrecvfrom(int, void *buf, size_t len, int flags, struct sockaddr *, socklen_t *)`.
///
/// # Safety
///
/// `buf` writable for `len` bytes; `src_addr`/`addrlen` NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rrecvfrom(
    socket: c_int,
    buf: *mut c_void,
    len: usize,
    flags: c_int,
    src_addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> isize {
    ffi_guard(
        || -1,
        || {
            // SAFETY: per the contract.
            let b = match unsafe { slice_mut(buf, len) } {
                Ok(b) => b,
                Err(e) => return ret::neg_isize(e),
            };
            if let Some(r) = ops::dgram_recvfrom(socket, b, flags) {
                return match r {
                    Ok((n, from)) => {
                        if !src_addr.is_null() {
                            // SAFETY: per the contract.
                            let _ = unsafe { put_addr(&from, src_addr, addrlen) };
                        }
                        n as isize
                    }
                    Err(e) => ret::neg_isize(e),
                };
            }
            let r = ops::recv(socket, b, flags);
            if matches!(r, Ok(n) if n > 0)
                && !src_addr.is_null()
                && let Ok(a) = ops::name(socket, true)
            {
                // SAFETY: per the contract.
                let _ = unsafe { put_addr(&a, src_addr, addrlen) };
            }
            size(r)
        },
    )
}

/// Receives into the first non-empty iovec (rdma-core does the same).
///
/// # Safety
///
/// `iov` readable for `iovcnt` entries, each writable.
unsafe fn recvv(
    socket: c_int,
    iov: *const iovec,
    iovcnt: c_int,
    flags: c_int,
) -> Result<usize, c_int> {
    if iovcnt < 0 || (iovcnt > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    // SAFETY: per the contract.
    let v = unsafe { core::slice::from_raw_parts(iov, iovcnt as usize) };
    match v.iter().find(|i| i.iov_len > 0) {
        // SAFETY: per the contract.
        Some(i) => ops::recv(socket, unsafe { slice_mut(i.iov_base, i.iov_len) }?, flags),
        None => ops::recv(socket, &mut [], flags),
    }
}

/// Sends the iovecs in order (stops at a short send).
///
/// # Safety
///
/// `iov` readable for `iovcnt` entries, each readable.
unsafe fn sendv(
    socket: c_int,
    iov: *const iovec,
    iovcnt: c_int,
    flags: c_int,
) -> Result<usize, c_int> {
    if iovcnt < 0 || (iovcnt > 0 && iov.is_null()) {
        return Err(libc::EINVAL);
    }
    // SAFETY: per the contract.
    let v = unsafe { core::slice::from_raw_parts(iov, iovcnt as usize) };
    let mut total = 0usize;
    for i in v.iter().filter(|i| i.iov_len > 0) {
        // SAFETY: per the contract.
        let b = unsafe { slice(i.iov_base, i.iov_len) }?;
        match ops::send(socket, b, flags) {
            Ok(n) => {
                total += n;
                if n < b.len() {
                    break;
                }
            }
            Err(e) if total == 0 => return Err(e),
            Err(_) => break,
        }
    }
    Ok(total)
}

/// The `msghdr` of `rrecvmsg`/`rsendmsg`: `EFAULT` if NULL, `ENOTSUP` with
/// ancillary data (rsockets carry none).
///
/// # Safety
///
/// `msg` NULL or a valid `msghdr` for `'a`.
unsafe fn plain_msghdr<'a>(msg: *const msghdr) -> Result<&'a msghdr, c_int> {
    if msg.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: non-NULL, valid per the contract.
    let m = unsafe { &*msg };
    if !m.msg_control.is_null() && m.msg_controllen > 0 {
        return Err(libc::ENOTSUP);
    }
    Ok(m)
}

/// `ssize_t rrecvmsg(int socket, struct msghdr *msg, int flags)`.
///
/// # Safety
///
/// `msg` a valid `msghdr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> isize {
    ffi_guard(
        || -1,
        || {
            // SAFETY: per the contract.
            let m = match unsafe { plain_msghdr(msg) } {
                Ok(m) => m,
                Err(e) => return ret::neg_isize(e),
            };
            // SAFETY: per the contract.
            size(unsafe { recvv(socket, m.msg_iov, m.msg_iovlen as c_int, flags) })
        },
    )
}

/// `ssize_t rsend(int socket, const void *buf, size_t len, int flags)`.
///
/// # Safety
///
/// `buf` readable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsend(
    socket: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
) -> isize {
    // SAFETY: per the contract.
    ffi_guard(
        || -1,
        || size(unsafe { slice(buf, len) }.and_then(|b| ops::send(socket, b, flags))),
    )
}

/// `ssize_t rsendto(...)`: the address must be NULL on a stream socket
/// (`EISCONN` otherwise, as for TCP).
///
/// # Safety
///
/// `buf` readable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsendto(
    socket: c_int,
    buf: *const c_void,
    len: usize,
    flags: c_int,
    dest_addr: *const sockaddr,
    addrlen: socklen_t,
) -> isize {
    ffi_guard(
        || -1,
        || {
            if !dest_addr.is_null() && addrlen > 0 {
                let to = match ops::sockaddr_in(dest_addr, addrlen) {
                    Ok(a) => a,
                    Err(e) => return ret::neg_isize(e),
                };
                // SAFETY: per the contract.
                let b = match unsafe { slice(buf, len) } {
                    Ok(b) => b,
                    Err(e) => return ret::neg_isize(e),
                };
                return match ops::dgram_sendto(socket, b, &to, flags) {
                    Some(r) => size(r),
                    None => ret::neg_isize(libc::EISCONN),
                };
            }
            // SAFETY: per the contract.
            size(unsafe { slice(buf, len) }.and_then(|b| ops::send(socket, b, flags)))
        },
    )
}

/// `ssize_t rsendmsg(int socket, const struct msghdr *msg, int flags)`.
///
/// # Safety
///
/// `msg` a valid `msghdr`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> isize {
    ffi_guard(
        || -1,
        || {
            // SAFETY: per the contract.
            let m = match unsafe { plain_msghdr(msg) } {
                Ok(m) => m,
                Err(e) => return ret::neg_isize(e),
            };
            // SAFETY: per the contract.
            size(unsafe { sendv(socket, m.msg_iov, m.msg_iovlen as c_int, flags) })
        },
    )
}

/// `ssize_t rread(int socket, void *buf, size_t count)`.
///
/// # Safety
///
/// As [`rrecv`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize {
    // SAFETY: same contract.
    unsafe { rrecv(socket, buf, count, 0) }
}

/// `ssize_t rreadv(int socket, const struct iovec *iov, int iovcnt)`.
///
/// # Safety
///
/// `iov` valid for `iovcnt` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize {
    // SAFETY: per the contract.
    ffi_guard(|| -1, || size(unsafe { recvv(socket, iov, iovcnt, 0) }))
}

/// `ssize_t rwrite(int socket, const void *buf, size_t count)`.
///
/// # Safety
///
/// As [`rsend`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize {
    // SAFETY: same contract.
    unsafe { rsend(socket, buf, count, 0) }
}

/// `ssize_t rwritev(int socket, const struct iovec *iov, int iovcnt)`.
///
/// # Safety
///
/// `iov` valid for `iovcnt` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize {
    // SAFETY: per the contract.
    ffi_guard(|| -1, || size(unsafe { sendv(socket, iov, iovcnt, 0) }))
}

/// `int rpoll(struct pollfd *fds, nfds_t nfds, int timeout)`.
///
/// # Safety
///
/// `fds` valid for `nfds` entries.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
    ffi_guard(
        || -1,
        || {
            let f: &mut [pollfd] = if nfds == 0 {
                &mut []
            } else if fds.is_null() {
                return ret::neg(libc::EFAULT);
            } else {
                // SAFETY: per the contract.
                unsafe { core::slice::from_raw_parts_mut(fds, nfds as usize) }
            };
            int(poll::rpoll(f, timeout))
        },
    )
}

/// `int rselect(int nfds, fd_set *, fd_set *, fd_set *, struct timeval *)`.
///
/// # Safety
///
/// Each set NULL or valid; `timeout` NULL or valid.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rselect(
    nfds: c_int,
    readfds: *mut fd_set,
    writefds: *mut fd_set,
    exceptfds: *mut fd_set,
    timeout: *mut timeval,
) -> c_int {
    ffi_guard(
        || -1,
        || {
            if !(0..=libc::FD_SETSIZE as c_int).contains(&nfds) {
                return ret::neg(libc::EINVAL);
            }
            let ms = if timeout.is_null() {
                -1
            } else {
                // SAFETY: per the contract.
                let t = unsafe { &*timeout };
                (t.tv_sec * 1000 + t.tv_usec / 1000) as c_int
            };
            // SAFETY: per the contract (NULL or valid).
            let (r, w, e) = unsafe { (readfds.as_mut(), writefds.as_mut(), exceptfds.as_mut()) };
            int(poll::rselect(nfds, r, w, e, ms))
        },
    )
}

/// `int rgetpeername(int socket, struct sockaddr *addr, socklen_t *addrlen)`.
///
/// # Safety
///
/// As `getpeername(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rgetpeername(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    // SAFETY: per the contract.
    ffi_guard(
        || -1,
        || unit(ops::name(socket, true).and_then(|a| unsafe { put_addr(&a, addr, addrlen) })),
    )
}

/// `int rgetsockname(int socket, struct sockaddr *addr, socklen_t *addrlen)`.
///
/// # Safety
///
/// As `getsockname(2)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rgetsockname(
    socket: c_int,
    addr: *mut sockaddr,
    addrlen: *mut socklen_t,
) -> c_int {
    // SAFETY: per the contract.
    ffi_guard(
        || -1,
        || unit(ops::name(socket, false).and_then(|a| unsafe { put_addr(&a, addr, addrlen) })),
    )
}

/// `int rsetsockopt(int socket, int level, int optname, const void *optval, socklen_t optlen)`.
///
/// # Safety
///
/// `optval` readable for `optlen` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rsetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *const c_void,
    optlen: socklen_t,
) -> c_int {
    ffi_guard(
        || -1,
        || {
            unit(
                // SAFETY: per the contract.
                unsafe { slice(optval, optlen as usize) }
                    .and_then(|v| opts::set(socket, level, optname, v)),
            )
        },
    )
}

/// `int rgetsockopt(int socket, int level, int optname, void *optval, socklen_t *optlen)`.
///
/// # Safety
///
/// `optlen` valid; `optval` writable for `*optlen` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rgetsockopt(
    socket: c_int,
    level: c_int,
    optname: c_int,
    optval: *mut c_void,
    optlen: *mut socklen_t,
) -> c_int {
    ffi_guard(
        || -1,
        || {
            if optval.is_null() || optlen.is_null() {
                return ret::neg(libc::EFAULT);
            }
            match opts::get(socket, level, optname) {
                Ok(v) => {
                    // SAFETY: per the contract.
                    unsafe {
                        let n = v.len().min(*optlen as usize);
                        core::ptr::copy_nonoverlapping(v.as_ptr(), optval.cast::<u8>(), n);
                        *optlen = n as socklen_t;
                    }
                    0
                }
                Err(e) => ret::neg(e),
            }
        },
    )
}

/// `int rfcntl(int socket, int cmd, ... /* arg */)`. Variadic in C; the
/// first variadic integer arrives where a third fixed `long` argument would
/// (x86_64 SysV), and it is read only for the commands that take one.
#[unsafe(no_mangle)]
pub extern "C" fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int {
    ffi_guard(|| -1, || int(ops::fcntl(socket, cmd, arg as c_int)))
}

/// `off_t riomap(int socket, void *buf, size_t len, int prot, int flags, off_t offset)`.
///
/// # Safety
///
/// `buf` valid for `len` bytes for as long as it stays mapped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn riomap(
    socket: c_int,
    buf: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    offset: off_t,
) -> off_t {
    let _ = flags;
    ffi_guard(
        || -1,
        || match ops::iomap(socket, buf.cast(), len, prot, offset) {
            Ok(o) => o,
            Err(e) => ret::neg_isize(e) as off_t,
        },
    )
}

/// `int riounmap(int socket, void *buf, size_t len)`.
///
/// # Safety
///
/// As [`riomap`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int {
    ffi_guard(|| -1, || unit(ops::iounmap(socket, buf.cast(), len)))
}

/// `size_t riowrite(int socket, const void *buf, size_t count, off_t offset, int flags)`;
/// `(size_t)-1` with errno on failure.
///
/// # Safety
///
/// `buf` readable for `count` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn riowrite(
    socket: c_int,
    buf: *const c_void,
    count: usize,
    offset: off_t,
    flags: c_int,
) -> usize {
    ffi_guard(
        || usize::MAX,
        || {
            if offset < 0 {
                return ret::neg_usize(libc::EINVAL);
            }
            // SAFETY: per the contract.
            match unsafe { slice(buf, count) }
                .and_then(|b| ops::iowrite(socket, b, offset as u64, flags))
            {
                Ok(n) => n,
                Err(e) => ret::neg_usize(e),
            }
        },
    )
}
