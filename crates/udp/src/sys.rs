//! Thin wrappers over the Linux system calls this crate uses.
//!
//! **Every `unsafe` block of the crate (tests aside) is in this file.** Each wrapper is a safe function:
//! it takes borrowed Rust values (slices, `BorrowedFd`, plain integers), builds whatever raw
//! C structure the kernel wants on its own stack, and returns an `io::Result`. Callers in
//! `socket.rs` and `wake.rs` never see a raw pointer.
//!
//! Socket addresses and control messages are passed as plain byte buffers laid out in the
//! kernel ABI (see [`RawAddr`] and `cmsg.rs`), so decoding them needs no `unsafe` either.

use std::io::{self, IoSlice};
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;
use std::time::Duration;

/// Most messages one `sendmmsg`/`recvmmsg` call handles. The `mmsghdr` array lives on the
/// stack (64 B each).
pub(crate) const MAX_MMSG: usize = 64;

/// `SO_RCVBUFFORCE` / `SO_SNDBUFFORCE` (asm-generic/socket.h; identical on x86 and arm64).
/// Not exported by `libc` for every Linux target, so spelled out here.
pub(crate) const SO_SNDBUFFORCE: libc::c_int = 32;
pub(crate) const SO_RCVBUFFORCE: libc::c_int = 33;

/// Converts a `-1`-on-error return value into an `io::Result`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn cvt_isize(ret: isize) -> io::Result<usize> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}

/// Takes ownership of a descriptor a system call just returned.
fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: `fd` was returned by a successful fd-creating system call on this thread a
    // moment ago; nothing else owns it, so transferring ownership to `OwnedFd` is sound.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Points `fd` at `/dev/null` (close-on-exec), releasing what it referred to
/// (a socket closes if this was its last descriptor) while the number stays
/// valid: threads still using it get errors, never another file opened
/// meanwhile under the same number.
pub(crate) fn replace_with_dev_null(fd: BorrowedFd<'_>) -> io::Result<()> {
    point_at_dev_null(std::iter::once(fd.as_raw_fd()))
}

/// [`replace_with_dev_null`] for each of `fds` (negative entries skipped);
/// the first failure is returned, after the rest were tried. Only
/// async-signal-safe calls (open, dup3, close, no allocation): a forked
/// child runs it.
pub(crate) fn point_at_dev_null(fds: impl Iterator<Item = RawFd>) -> io::Result<()> {
    // SAFETY: a NUL-terminated literal path; open creates no Rust object.
    let null = cvt(unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) })?;
    let mut r = Ok(());
    for fd in fds.filter(|&fd| fd >= 0) {
        // SAFETY: dup3 only changes what the number `fd` refers to; whoever
        // owns the number still closes it once.
        let d = cvt(unsafe { libc::dup3(null, fd, libc::O_CLOEXEC) });
        if r.is_ok() {
            r = d.map(drop);
        }
    }
    // SAFETY: `null` was opened above and is not used after this.
    unsafe { libc::close(null) };
    r
}

/// Registers `child` to run in the child of every later `fork(2)`.
pub(crate) fn at_fork_in_child(child: extern "C" fn()) {
    // SAFETY: `child` is a plain function that lives forever; no prepare or
    // parent handler.
    unsafe { libc::pthread_atfork(None, None, Some(child)) };
}

/// Test helper: forks; the child checks, for each `(fd, at_null)`, whether
/// `fd` refers to `/dev/null` as expected, and exits 0 if all do (1 if
/// not). Returns the child's exit status (-1 if it could not run).
#[cfg(test)]
pub(crate) fn fork_and_check(expect: &[(RawFd, bool)]) -> i32 {
    let stat_of = |fd: RawFd| -> Option<(u64, u64)> {
        // SAFETY: all-zero bytes are a valid `stat`; fstat writes into this
        // buffer only, and a bad fd only fails.
        let mut st: libc::stat = unsafe { mem::zeroed() };
        // SAFETY: as above.
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_rdev, st.st_ino))
    };
    // Read before fork: the child only calls fstat and _exit.
    let null = std::fs::File::open("/dev/null").ok();
    let Some(null_id) = null.as_ref().and_then(|f| stat_of(f.as_raw_fd())) else {
        return -1;
    };
    // SAFETY: the child runs only async-signal-safe calls (fstat, _exit).
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let ok = expect
            .iter()
            .all(|&(fd, at_null)| (stat_of(fd) == Some(null_id)) == at_null);
        // SAFETY: ends the child without running the parent's exit hooks.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    if pid < 0 {
        return -1;
    }
    let mut status = 0;
    // SAFETY: waits for the child forked above.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    }
}

// ---------------------------------------------------------------------------------------------
// Socket addresses in the kernel ABI
// ---------------------------------------------------------------------------------------------

/// A `sockaddr_in` or `sockaddr_in6` as raw bytes (the kernel ABI: family in native byte order
/// at offset 0, port in network order at offset 2, then the address; see `linux/in.h`,
/// `linux/in6.h`). 28 bytes is `sizeof(struct sockaddr_in6)`.
#[derive(Clone, Copy)]
#[repr(C, align(4))]
pub(crate) struct RawAddr {
    pub(crate) bytes: [u8; 28],
    pub(crate) len: u32,
}

impl std::fmt::Debug for RawAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.decode() {
            Some(a) => write!(f, "RawAddr({a})"),
            None => write!(f, "RawAddr(len {})", self.len),
        }
    }
}

impl RawAddr {
    pub(crate) const EMPTY: RawAddr = RawAddr {
        bytes: [0; 28],
        len: 28,
    };

    pub(crate) fn encode(addr: &SocketAddr) -> RawAddr {
        let mut bytes = [0u8; 28];
        match addr {
            SocketAddr::V4(a) => {
                bytes[0..2].copy_from_slice(&(libc::AF_INET as u16).to_ne_bytes());
                bytes[2..4].copy_from_slice(&a.port().to_be_bytes());
                bytes[4..8].copy_from_slice(&a.ip().octets());
                RawAddr { bytes, len: 16 }
            }
            SocketAddr::V6(a) => {
                bytes[0..2].copy_from_slice(&(libc::AF_INET6 as u16).to_ne_bytes());
                bytes[2..4].copy_from_slice(&a.port().to_be_bytes());
                bytes[4..8].copy_from_slice(&a.flowinfo().to_be_bytes());
                bytes[8..24].copy_from_slice(&a.ip().octets());
                bytes[24..28].copy_from_slice(&a.scope_id().to_ne_bytes());
                RawAddr { bytes, len: 28 }
            }
        }
    }

    /// Decodes what the kernel wrote (`len` = the returned `msg_namelen`).
    pub(crate) fn decode(&self) -> Option<SocketAddr> {
        let b = &self.bytes;
        let family = u16::from_ne_bytes([b[0], b[1]]);
        let port = u16::from_be_bytes([b[2], b[3]]);
        if family == libc::AF_INET as u16 && self.len >= 16 {
            let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
            Some(SocketAddr::V4(SocketAddrV4::new(ip, port)))
        } else if family == libc::AF_INET6 as u16 && self.len >= 28 {
            let flow = u32::from_be_bytes([b[4], b[5], b[6], b[7]]);
            let mut o = [0u8; 16];
            o.copy_from_slice(&b[8..24]);
            let scope = u32::from_ne_bytes([b[24], b[25], b[26], b[27]]);
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(o),
                port,
                flow,
                scope,
            )))
        } else {
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Socket creation and options
// ---------------------------------------------------------------------------------------------

/// `socket(AF_INET[6], SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_UDP)`.
pub(crate) fn udp_socket(ipv6: bool) -> io::Result<OwnedFd> {
    let domain = if ipv6 { libc::AF_INET6 } else { libc::AF_INET };
    owned(raw_socket(
        domain,
        libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        libc::IPPROTO_UDP,
    ))
}

/// `socket(2)` as the system call itself, not through the C library's
/// `socket` symbol: under `LD_PRELOAD=librspreload.so` that symbol makes
/// rsockets, and the device's own sockets must be the kernel's.
pub(crate) fn raw_socket(domain: libc::c_int, ty: libc::c_int, proto: libc::c_int) -> libc::c_int {
    // SAFETY: plain system call with integer arguments; no memory is passed.
    unsafe { libc::syscall(libc::SYS_socket, domain, ty, proto) as libc::c_int }
}

/// A kernel UDP socket bound to `local`, made with the `socket(2)` system
/// call itself (not the C library symbol librspreload interposes).
pub fn kernel_udp_socket(local: SocketAddr) -> io::Result<std::net::UdpSocket> {
    use std::os::fd::FromRawFd;
    let domain = if local.is_ipv6() {
        libc::AF_INET6
    } else {
        libc::AF_INET
    };
    let fd = raw_socket(
        domain,
        libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
        libc::IPPROTO_UDP,
    );
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor nobody else owns.
    let s = unsafe { std::net::UdpSocket::from_raw_fd(fd) };
    let (ss, len) = sockaddr_of(local);
    // SAFETY: our socket; a valid address of `len` bytes.
    if unsafe { libc::bind(fd, (&raw const ss).cast(), len) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(s)
}

/// `local` as a `sockaddr_storage` and its length.
fn sockaddr_of(a: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { mem::zeroed() };
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: the storage is large enough and suitably aligned.
            unsafe { (&raw mut ss).cast::<libc::sockaddr_in>().write(sin) };
            (ss, size_of::<libc::sockaddr_in>() as libc::socklen_t)
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above.
            unsafe { (&raw mut ss).cast::<libc::sockaddr_in6>().write(sin6) };
            (ss, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
        }
    }
}

pub(crate) fn setsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    setsockopt_bytes(fd, level, name, &value.to_ne_bytes())
}

/// `setsockopt` with a value given as raw bytes (struct-valued options).
pub(crate) fn setsockopt_bytes(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: &[u8],
) -> io::Result<()> {
    // SAFETY: `value` is a live slice and we pass its exact length; the kernel only reads it.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            value.as_ptr().cast(),
            value.len() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// `setsockopt(SOL_SOCKET, SO_ATTACH_REUSEPORT_CBPF)` with a classic BPF program.
pub(crate) fn attach_reuseport_cbpf(
    fd: BorrowedFd<'_>,
    prog: &[libc::sock_filter],
) -> io::Result<()> {
    let len = u16::try_from(prog.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "BPF program too long"))?;
    /// `struct sock_fprog` with its padding spelled out, so every byte
    /// passed to the kernel is initialised (memcheck checks them all).
    #[repr(C)]
    struct Fprog {
        len: u16,
        pad: [u8; size_of::<usize>() - 2],
        filter: *const libc::sock_filter,
    }
    const _: () = assert!(size_of::<Fprog>() == size_of::<libc::sock_fprog>());
    let fprog = Fprog {
        len,
        pad: [0; size_of::<usize>() - 2],
        // The kernel only reads the instructions (copy_from_user).
        filter: prog.as_ptr(),
    };
    // SAFETY: `fprog` is a live local with `struct sock_fprog`'s layout (checked above) whose
    // `filter` points at `len` initialized instructions borrowed for the whole call; the
    // kernel copies the program and keeps no pointer to it.
    cvt(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ATTACH_REUSEPORT_CBPF,
            ptr::from_ref(&fprog).cast(),
            size_of::<Fprog>() as libc::socklen_t,
        )
    })
    .map(drop)
}

pub(crate) fn getsockopt_int(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
) -> io::Result<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` and `len` are live locals; `len` tells the kernel how much it may write.
    cvt(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            ptr::from_mut(&mut value).cast(),
            &mut len,
        )
    })?;
    Ok(value)
}

pub(crate) fn bind(fd: BorrowedFd<'_>, addr: &SocketAddr) -> io::Result<()> {
    let raw = RawAddr::encode(addr);
    // SAFETY: `raw.bytes` holds a complete sockaddr_in/sockaddr_in6 of `raw.len` bytes and
    // outlives the call; the kernel copies it.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), raw.bytes.as_ptr().cast(), raw.len) }).map(drop)
}

pub(crate) fn local_addr(fd: BorrowedFd<'_>) -> io::Result<SocketAddr> {
    let mut raw = RawAddr::EMPTY;
    let mut len: libc::socklen_t = raw.bytes.len() as libc::socklen_t;
    // SAFETY: the kernel writes at most `len` (= 28) bytes into `raw.bytes`, which is 28 bytes.
    cvt(unsafe { libc::getsockname(fd.as_raw_fd(), raw.bytes.as_mut_ptr().cast(), &mut len) })?;
    raw.len = len;
    raw.decode()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected address family"))
}

/// `if_nametoindex`; `None` if there is no such interface.
pub(crate) fn if_nametoindex(name: &str) -> Option<u32> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    (idx != 0).then_some(idx)
}

// ---------------------------------------------------------------------------------------------
// Batched send / receive
// ---------------------------------------------------------------------------------------------

/// One message for [`sendmmsg`]: destination, payload pieces and control bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SendMsg<'a> {
    pub(crate) name: &'a RawAddr,
    pub(crate) iov: &'a [IoSlice<'a>],
    pub(crate) control: &'a [u8],
}

fn zeroed_mmsghdr() -> libc::mmsghdr {
    // SAFETY: `mmsghdr` is a C struct of integers and raw pointers, for which the all-zero bit
    // pattern is a valid value (null pointers, zero lengths).
    unsafe { mem::zeroed() }
}

/// Room for [`MAX_MMSG`] message headers, of which a call fills only those it passes: zeroing
/// all 64 (4 KiB) cost each `sendmmsg` and each busy poller's empty `recvmmsg` more
/// instructions than the rest of their setup (BENCHMARKS.md, "Issue 16, outcome 6").
type MmsgHdrs = [mem::MaybeUninit<libc::mmsghdr>; MAX_MMSG];

const NO_MMSGHDRS: MmsgHdrs = [const { mem::MaybeUninit::uninit() }; MAX_MMSG];

/// `sendmmsg(fd, msgs, MSG_DONTWAIT)`; returns how many messages the kernel accepted (at
/// least 1 on success). At most [`MAX_MMSG`] messages are passed.
pub(crate) fn sendmmsg(fd: BorrowedFd<'_>, msgs: &[SendMsg<'_>]) -> io::Result<usize> {
    let n = msgs.len().min(MAX_MMSG);
    let mut hdrs = NO_MMSGHDRS;
    for (slot, m) in hdrs.iter_mut().zip(&msgs[..n]) {
        let mut h = zeroed_mmsghdr();
        h.msg_hdr.msg_name = ptr::from_ref(&m.name.bytes).cast_mut().cast();
        h.msg_hdr.msg_namelen = m.name.len;
        // `IoSlice` is documented to be ABI-compatible with `struct iovec` on Unix.
        h.msg_hdr.msg_iov = m.iov.as_ptr().cast_mut().cast();
        h.msg_hdr.msg_iovlen = m.iov.len() as _;
        if !m.control.is_empty() {
            h.msg_hdr.msg_control = m.control.as_ptr().cast_mut().cast();
            h.msg_hdr.msg_controllen = m.control.len() as _;
        }
        slot.write(h);
    }
    // SAFETY: the first `n` headers were written above, and the kernel touches no other;
    // each points into buffers borrowed by `msgs` (names, iovec arrays whose entries borrow
    // the payloads, control bytes), all alive for the duration of the call; the kernel only
    // reads them (it writes nothing but `msg_len`, inside `hdrs`).
    let ret = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            hdrs.as_mut_ptr().cast(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    cvt(ret).map(|k| k as usize)
}

/// What the kernel reported for one received message.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecvResult {
    pub(crate) len: usize,
    pub(crate) control_len: usize,
    pub(crate) flags: libc::c_int,
}

/// `recvmmsg(fd, ..., MSG_DONTWAIT, NULL)` into `data` split in slots of `stride` bytes (of
/// which the first `slot_len` are offered to the kernel). `names`, `controls` and `out` must
/// have at least as many entries as slots used; at most [`MAX_MMSG`] slots are used.
pub(crate) fn recvmmsg<const C: usize>(
    fd: BorrowedFd<'_>,
    data: &mut [u8],
    stride: usize,
    slot_len: usize,
    names: &mut [RawAddr],
    controls: &mut [crate::cmsg::CmsgBuf<C>],
    out: &mut [RecvResult],
) -> io::Result<usize> {
    assert!(slot_len <= stride && stride > 0);
    let slots = (data.len() / stride)
        .min(names.len())
        .min(controls.len())
        .min(out.len())
        .min(MAX_MMSG);
    let mut iovs = [const { mem::MaybeUninit::<libc::iovec>::uninit() }; MAX_MMSG];
    let mut hdrs = NO_MMSGHDRS;
    let base = data.as_mut_ptr();
    for i in 0..slots {
        // In bounds: i * stride + slot_len <= slots * stride <= data.len().
        let iov = iovs[i].write(libc::iovec {
            iov_base: base.wrapping_add(i * stride).cast(),
            iov_len: slot_len,
        });
        let mut h = zeroed_mmsghdr();
        h.msg_hdr.msg_name = ptr::from_mut(&mut names[i].bytes).cast();
        h.msg_hdr.msg_namelen = names[i].bytes.len() as libc::socklen_t;
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_control = controls[i].0.as_mut_ptr().cast();
        h.msg_hdr.msg_controllen = C as _;
        hdrs[i].write(h);
    }
    let ret = loop {
        // SAFETY: the first `slots` headers and iovecs were written above, and the kernel
        // touches no other. Each header points at a distinct, exclusively borrowed region:
        // slot `i` of `data` (in bounds, see above), `names[i]` (28 bytes, as `msg_namelen`
        // says) and `controls[i]` (C bytes, as `msg_controllen` says). All outlive the call. A
        // null timeout means "no timeout"; MSG_DONTWAIT makes the call non-blocking.
        let r = unsafe {
            libc::recvmmsg(
                fd.as_raw_fd(),
                hdrs.as_mut_ptr().cast(),
                slots as libc::c_uint,
                libc::MSG_DONTWAIT,
                ptr::null_mut(),
            )
        };
        match cvt(r) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => break other?,
        }
    };
    let k = ret as usize;
    for (i, h) in hdrs[..k].iter().enumerate() {
        // SAFETY: the kernel filled `k <= slots` headers, all written above.
        let h = unsafe { h.assume_init_ref() };
        let msg_len = h.msg_len;
        let h = &h.msg_hdr;
        // `msg_controllen` is size_t on glibc but socklen_t on musl.
        #[allow(clippy::unnecessary_cast)]
        let control_len = h.msg_controllen as usize;
        out[i] = RecvResult {
            len: msg_len as usize,
            control_len,
            flags: h.msg_flags,
        };
        names[i].len = h.msg_namelen;
    }
    Ok(k)
}

// ---------------------------------------------------------------------------------------------
// eventfd, timerfd, epoll, poll
// ---------------------------------------------------------------------------------------------

pub(crate) fn eventfd(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    owned(unsafe { libc::eventfd(0, flags) })
}

/// Writes one native-endian `u64` (eventfd counter increment).
pub(crate) fn write_u64(fd: BorrowedFd<'_>, value: u64) -> io::Result<()> {
    let buf = value.to_ne_bytes();
    loop {
        // SAFETY: `buf` is 8 live bytes; the kernel reads exactly `buf.len()` bytes.
        let r = unsafe { libc::write(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len()) };
        match cvt_isize(r) {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Reads one native-endian `u64` (eventfd counter / timerfd expirations). Retries `EINTR`.
pub(crate) fn read_u64(fd: BorrowedFd<'_>) -> io::Result<u64> {
    loop {
        match read_u64_once(fd) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r,
        }
    }
}

/// One `read(2)` of a native-endian `u64`; a signal handler interrupting it
/// yields `Interrupted` (`EINTR`), as the `read(2)` behind rdma-core's
/// blocking event calls does.
pub(crate) fn read_u64_once(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is 8 writable bytes; the kernel writes at most `buf.len()` bytes.
    let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
    match cvt_isize(r)? {
        8 => Ok(u64::from_ne_bytes(buf)),
        _ => Err(io::Error::new(io::ErrorKind::InvalidData, "short read")),
    }
}

/// `poll(fd, POLLIN, timeout_ms)`: whether `fd` became readable. Retries `EINTR` only when
/// `timeout_ms` is 0 or -1 (so a finite timeout is never silently extended).
pub(crate) fn poll_readable(fd: BorrowedFd<'_>, timeout_ms: libc::c_int) -> io::Result<bool> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    loop {
        // SAFETY: `p` is one live `pollfd`, and we pass a count of 1.
        let r = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        match cvt(r) {
            Ok(n) => return Ok(n > 0),
            Err(e) if e.kind() == io::ErrorKind::Interrupted && timeout_ms <= 0 => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `fcntl(F_GETFL)` / `fcntl(F_SETFL)` toggling `O_NONBLOCK`.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, on: bool) -> io::Result<()> {
    // SAFETY: F_GETFL takes no pointer argument.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    let new = if on {
        flags | libc::O_NONBLOCK
    } else {
        flags & !libc::O_NONBLOCK
    };
    if new != flags {
        // SAFETY: F_SETFL takes an integer argument.
        cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, new) })?;
    }
    Ok(())
}

pub(crate) fn is_nonblocking(fd: BorrowedFd<'_>) -> io::Result<bool> {
    // SAFETY: F_GETFL takes no pointer argument.
    let flags = cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) })?;
    Ok(flags & libc::O_NONBLOCK != 0)
}

pub(crate) fn timerfd() -> io::Result<OwnedFd> {
    // SAFETY: plain system call with integer arguments.
    owned(unsafe {
        libc::timerfd_create(
            libc::CLOCK_MONOTONIC,
            libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
        )
    })
}

/// Arms a timerfd to fire once after `after` (relative), or disarms it with `None`.
pub(crate) fn timerfd_set(fd: BorrowedFd<'_>, after: Option<Duration>) -> io::Result<()> {
    let value = match after {
        // A zero it_value would disarm the timer; 1 ns means "already due".
        Some(d) if d.is_zero() => libc::timespec {
            tv_sec: 0,
            tv_nsec: 1,
        },
        Some(d) => libc::timespec {
            tv_sec: d.as_secs().min(i64::MAX as u64) as libc::time_t,
            tv_nsec: d.subsec_nanos() as _,
        },
        None => libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
    };
    let spec = libc::itimerspec {
        it_interval: libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: value,
    };
    // SAFETY: `spec` is a live, fully initialised itimerspec; the old-value pointer is null.
    cvt(unsafe { libc::timerfd_settime(fd.as_raw_fd(), 0, &spec, ptr::null_mut()) }).map(drop)
}

pub(crate) fn epoll_create() -> io::Result<OwnedFd> {
    // SAFETY: plain system call with an integer argument.
    owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })
}

/// `epoll_ctl`; `events`/`data` are ignored for `EPOLL_CTL_DEL`.
pub(crate) fn epoll_ctl(
    epfd: BorrowedFd<'_>,
    op: libc::c_int,
    fd: RawFd,
    events: u32,
    data: u64,
) -> io::Result<()> {
    let mut ev = libc::epoll_event { events, u64: data };
    // SAFETY: `ev` is a live epoll_event the kernel only reads; `fd` is an integer (epoll_ctl
    // validates it and never dereferences anything through it).
    cvt(unsafe { libc::epoll_ctl(epfd.as_raw_fd(), op, fd, &mut ev) }).map(drop)
}

/// `struct __kernel_timespec` (64-bit fields on every architecture), as `epoll_pwait2` wants.
#[repr(C)]
struct KernelTimespec {
    tv_sec: i64,
    tv_nsec: i64,
}

/// How [`epoll_wait`] should time out.
#[derive(Clone, Copy, Debug)]
pub(crate) enum EpollTimeout {
    /// Block until an event.
    Infinite,
    /// Nanosecond-precision timeout through the raw `epoll_pwait2` system call (Linux ≥ 5.11).
    Precise(Duration),
    /// Do not block.
    Zero,
}

/// Waits on `epfd`; returns the number of entries of `events` filled (0 on timeout), or
/// `Interrupted` if a signal handler ran.
///
/// `epoll_pwait2` is called through `syscall(2)` rather than glibc's wrapper so the binary
/// does not require glibc ≥ 2.35; `ENOSYS` tells the caller the kernel is older.
pub(crate) fn epoll_wait(
    epfd: BorrowedFd<'_>,
    events: &mut [libc::epoll_event],
    timeout: EpollTimeout,
) -> io::Result<usize> {
    let max = events.len().min(i32::MAX as usize) as libc::c_int;
    let r = match timeout {
        EpollTimeout::Infinite | EpollTimeout::Zero => {
            let ms = if matches!(timeout, EpollTimeout::Zero) {
                0
            } else {
                -1
            };
            // SAFETY: `events` is a writable slice of `max` entries; the kernel writes at most
            // `max` of them.
            unsafe { libc::epoll_wait(epfd.as_raw_fd(), events.as_mut_ptr(), max, ms) }
        }
        EpollTimeout::Precise(d) => {
            let ts = KernelTimespec {
                tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
                tv_nsec: i64::from(d.subsec_nanos()),
            };
            // SAFETY: arguments follow the epoll_pwait2(2) ABI: `events` has room for `max`
            // entries, `ts` is a live __kernel_timespec, and a null sigmask (with size 0) means
            // "do not change the signal mask".
            let r = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    epfd.as_raw_fd(),
                    events.as_mut_ptr(),
                    max,
                    ptr::from_ref(&ts),
                    ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            r as libc::c_int
        }
    };
    cvt(r).map(|n| n as usize)
}

// ---------------------------------------------------------------------------------------------
// Error queue (IP_RECVERR)
// ---------------------------------------------------------------------------------------------

/// One `recvmsg(fd, MSG_ERRQUEUE | MSG_DONTWAIT)`: the original destination goes to `name`,
/// the control messages to `ctrl`. `Ok(None)` when the queue is empty.
pub(crate) fn recv_errqueue(
    fd: BorrowedFd<'_>,
    name: &mut RawAddr,
    ctrl: &mut [u8],
) -> io::Result<Option<usize>> {
    let mut buf = [0u8; 64];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: a zeroed msghdr is valid; the fields set below point at live buffers.
    let mut h: libc::msghdr = unsafe { mem::zeroed() };
    h.msg_name = ptr::from_mut(&mut name.bytes).cast();
    h.msg_namelen = name.bytes.len() as libc::socklen_t;
    h.msg_iov = &mut iov;
    h.msg_iovlen = 1;
    h.msg_control = ctrl.as_mut_ptr().cast();
    h.msg_controllen = ctrl.len() as _;
    loop {
        // SAFETY: `h` points at `buf`, `name.bytes` and `ctrl`, all valid for their stated
        // lengths and exclusively borrowed for the call.
        let r = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut h,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        match cvt(r as libc::c_int) {
            Ok(_) => {
                name.len = h.msg_namelen;
                #[allow(clippy::unnecessary_cast)]
                return Ok(Some(h.msg_controllen as usize));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}
