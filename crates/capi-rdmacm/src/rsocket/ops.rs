//! The stream rsocket operations in safe Rust (the C exports in `mod.rs`
//! only convert arguments): each returns `Err(errno)` as sockets would.

use core::ffi::c_int;
use std::sync::Arc;
use std::time::Duration;

use super::conn::{self, Conn};
use super::dgram;
use super::listen::Listener;
use super::proto::{CTRL_DISCONNECT, MAX_TRANSFER, OLAP_START};
use super::sock::{self, Phase, RSock, settle, wait_conn};
use super::sys::Res;
use crate::ffi::*;
use softrdma_rsocket::stream::Half;

/// How long a close waits for its sends to complete before tearing down.
const CLOSE_LIMIT: Duration = Duration::from_secs(10);

pub(super) fn socket(domain: c_int, type_: c_int, protocol: c_int) -> Res<c_int> {
    let st = type_ & !(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK);
    if domain != libc::AF_INET && domain != libc::AF_INET6 {
        return Err(libc::EAFNOSUPPORT);
    }
    if st == libc::SOCK_DGRAM {
        if protocol != 0 && protocol != libc::IPPROTO_UDP {
            return Err(libc::EPROTONOSUPPORT);
        }
        return dgram::socket(domain, type_ & libc::SOCK_NONBLOCK != 0);
    }
    if st != libc::SOCK_STREAM {
        return Err(libc::EPROTONOSUPPORT);
    }
    if protocol != 0 && protocol != libc::IPPROTO_TCP {
        return Err(libc::EPROTONOSUPPORT);
    }
    let mut id = core::ptr::null_mut();
    // SAFETY: local output; a NULL channel makes a synchronous id.
    if unsafe {
        crate::cm::rdma_create_id(
            core::ptr::null_mut(),
            &mut id,
            core::ptr::null_mut(),
            RDMA_PS_TCP,
        )
    } != 0
    {
        return Err(crate::guard::errno());
    }
    // SAFETY: the new id; rdma-core records the domain the same way.
    unsafe { (*id).route.addr.src.src_addr.sa_family = domain as libc::sa_family_t };
    let s = RSock::new(
        id,
        Phase::Init,
        super::config::get().sizes,
        type_ & libc::SOCK_NONBLOCK != 0,
    );
    if type_ & libc::SOCK_CLOEXEC != 0 {
        s.lock().fd_flags = libc::FD_CLOEXEC;
    }
    let fd = s.fd;
    sock::insert(s);
    Ok(fd)
}

/// A socket address from C (length-checked), as a `sockaddr_storage`.
pub(super) fn sockaddr_in(
    addr: *const libc::sockaddr,
    len: libc::socklen_t,
) -> Res<libc::sockaddr_storage> {
    if addr.is_null() {
        return Err(libc::EFAULT);
    }
    // SAFETY: non-NULL; the family is the first field of every sockaddr.
    let fam = unsafe { (*addr).sa_family } as c_int;
    let need = match fam {
        libc::AF_INET => size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => size_of::<libc::sockaddr_in6>(),
        _ => return Err(libc::EAFNOSUPPORT),
    };
    if (len as usize) < need {
        return Err(libc::EINVAL);
    }
    let mut ss: libc::sockaddr_storage = super::sys::unsafe_zeroed();
    // SAFETY: `need` bytes are readable per `len`; the storage is larger.
    unsafe { core::ptr::copy_nonoverlapping(addr.cast::<u8>(), (&raw mut ss).cast::<u8>(), need) };
    Ok(ss)
}

pub(super) fn bind(fd: c_int, addr: &libc::sockaddr_storage) -> Res<()> {
    if dgram::lookup(fd).is_some() {
        return dgram::bind(fd, addr);
    }
    let s = sock::lookup(fd)?;
    let g = s.lock();
    if !matches!(g.phase, Phase::Init) {
        return Err(libc::EINVAL);
    }
    let a = (addr as *const libc::sockaddr_storage).cast_mut().cast();
    // SAFETY: live id; a valid address.
    if unsafe { crate::cm::rdma_bind_addr(g.id, a) } != 0 {
        return Err(crate::guard::errno());
    }
    Ok(())
}

pub(super) fn listen(fd: c_int, backlog: c_int) -> Res<()> {
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    match g.phase {
        Phase::Listening(_) => return Ok(()),
        Phase::Init => {}
        _ => return Err(libc::EINVAL),
    }
    // SAFETY: live id.
    if unsafe { crate::cm::rdma_listen(g.id, backlog.max(1)) } != 0 {
        return Err(crate::guard::errno());
    }
    let l = Listener::start(g.id, Arc::downgrade(&s))?;
    g.phase = Phase::Listening(l);
    Ok(())
}

pub(super) fn accept(fd: c_int) -> Res<Arc<RSock>> {
    let s = sock::lookup(fd)?;
    let (l, nonblock) = {
        let g = s.lock();
        match &g.phase {
            Phase::Listening(l) => (l.clone(), g.nonblock),
            _ => return Err(libc::EINVAL),
        }
    };
    loop {
        if let Some(n) = l.pop() {
            return Ok(n);
        }
        if nonblock {
            return Err(libc::EAGAIN);
        }
        sock::wait_fd(l.efd, 200);
        if sock::lookup(fd).is_err() {
            return Err(libc::EBADF);
        }
    }
}

pub(super) fn connect(fd: c_int, dst: libc::sockaddr_storage) -> Res<()> {
    if dgram::lookup(fd).is_some() {
        return dgram::connect(fd, &dst);
    }
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    settle(&mut g);
    match g.phase {
        Phase::Init => {}
        Phase::Connecting(_) => return Err(libc::EALREADY),
        Phase::Connected(_) => return Err(libc::EISCONN),
        Phase::Listening(_) | Phase::Closed => return Err(libc::EINVAL),
        Phase::Failed => return Err(libc::ECONNREFUSED),
    }
    if g.nonblock {
        let p = super::connect::start(g.id, dst, g.sizes)?;
        g.phase = Phase::Connecting(p);
        return Err(libc::EINPROGRESS);
    }
    let (id, sizes) = (g.id, g.sizes);
    match super::connect::connect(id, &dst, &sizes) {
        Ok(c) => {
            g.phase = Phase::Connected(c);
            Ok(())
        }
        Err(e) => {
            g.phase = Phase::Failed;
            Err(e)
        }
    }
}

fn nonblocking(g: &sock::Inner, flags: c_int) -> bool {
    g.nonblock || flags & libc::MSG_DONTWAIT != 0
}

/// `Ok(guard)` if connected (a pending connect settled), else the errno
/// sockets give for data calls.
fn connected<'a>(g: &mut std::sync::MutexGuard<'a, sock::Inner>) -> Res<()> {
    settle(g);
    match g.phase {
        Phase::Connected(_) => Ok(()),
        Phase::Connecting(_) => Err(libc::EAGAIN),
        _ => Err(libc::ENOTCONN),
    }
}

fn conn(g: &mut sock::Inner) -> &mut Conn {
    match &mut g.phase {
        Phase::Connected(c) => c,
        _ => unreachable!("checked connected"),
    }
}

pub(super) fn recv(fd: c_int, buf: &mut [u8], flags: c_int) -> Res<usize> {
    if let Some(d) = dgram::lookup(fd) {
        return dgram::recvfrom(&d, buf, flags).map(|(n, _)| n);
    }
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    connected(&mut g)?;
    let nb = nonblocking(&g, flags);
    let mut done = 0usize;
    loop {
        if !conn(&mut g).have_rdata() {
            let r;
            (g, r) = wait_conn(&s, g, nb, None, Conn::conn_have_rdata);
            if let Err(e) = r {
                return if done > 0 { Ok(done) } else { Err(e) };
            }
        }
        let c = conn(&mut g);
        // A broken connection reports its error once, as a socket does
        // (`SO_ERROR` takes it too); afterwards reads see the end.
        if c.s.state == conn::ERROR && !c.have_rdata() && c.s.err != 0 && done == 0 {
            return Err(core::mem::take(&mut c.s.err));
        }
        if flags & libc::MSG_PEEK != 0 {
            return Ok(c.read(buf, true));
        }
        done += c.read(&mut buf[done..], false);
        if done == buf.len() || flags & libc::MSG_WAITALL == 0 || c.s.state & conn::READABLE == 0 {
            c.update_credits();
            return Ok(done);
        }
    }
}

pub(super) fn send(fd: c_int, buf: &[u8], flags: c_int) -> Res<usize> {
    if let Some(d) = dgram::lookup(fd) {
        return dgram::sendto(&d, buf, None, flags);
    }
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    connected(&mut g)?;
    let nb = nonblocking(&g, flags);
    let c = conn(&mut g);
    if c.s.state == conn::ERROR && c.s.err != 0 {
        return Err(core::mem::take(&mut c.s.err));
    }
    if conn(&mut g).s.state & conn::WRITABLE == 0 {
        return Err(libc::EPIPE);
    }
    let r;
    (g, r) = flush_iomaps(&s, g, nb);
    r?;
    let mut done = 0usize;
    let mut olen = OLAP_START;
    while done < buf.len() {
        if !conn(&mut g).can_send() {
            let r;
            (g, r) = wait_conn(&s, g, nb, None, Conn::conn_can_send);
            if let Err(e) = r {
                return if done > 0 { Ok(done) } else { Err(e) };
            }
            if conn(&mut g).s.state & conn::WRITABLE == 0 {
                return if done > 0 { Ok(done) } else { Err(libc::EPIPE) };
            }
        }
        let c = conn(&mut g);
        match c.write_once(&buf[done..], olen) {
            Ok(n) => done += n,
            Err(e) => return if done > 0 { Ok(done) } else { Err(e) },
        }
        if olen < MAX_TRANSFER {
            olen <<= 1;
        }
    }
    Ok(done)
}

/// Sends the mappings `riomap` queued (before any data, as rdma-core).
fn flush_iomaps<'a>(
    s: &'a RSock,
    mut g: std::sync::MutexGuard<'a, sock::Inner>,
    nb: bool,
) -> (std::sync::MutexGuard<'a, sock::Inner>, Res<()>) {
    while conn(&mut g).iomap_pending() {
        if !conn(&mut g).can_send() {
            let r;
            (g, r) = wait_conn(s, g, nb, None, Conn::conn_can_send);
            if r.is_err() {
                return (g, r);
            }
            if conn(&mut g).s.state & conn::WRITABLE == 0 {
                return (g, Err(libc::EPIPE));
            }
        }
        if let Err(e) = conn(&mut g).send_one_iomap() {
            return (g, Err(e));
        }
    }
    (g, Ok(()))
}

pub(super) fn iomap(fd: c_int, buf: *mut u8, len: usize, prot: c_int, offset: i64) -> Res<i64> {
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    connected(&mut g).map_err(|_| libc::EINVAL)?;
    conn(&mut g).iomap(buf, len, prot, offset)
}

pub(super) fn iounmap(fd: c_int, buf: *mut u8, len: usize) -> Res<()> {
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    connected(&mut g).map_err(|_| libc::EINVAL)?;
    conn(&mut g).iounmap(buf, len)
}

/// `riowrite`: bytes written (short if `offset` leaves the peer's mapping).
pub(super) fn iowrite(fd: c_int, buf: &[u8], offset: u64, flags: c_int) -> Res<usize> {
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    connected(&mut g)?;
    let nb = nonblocking(&g, flags);
    let r;
    (g, r) = flush_iomaps(&s, g, nb);
    r?;
    let mut done = 0usize;
    let mut olen = OLAP_START;
    while done < buf.len() {
        if !conn(&mut g).can_send() {
            let r;
            (g, r) = wait_conn(&s, g, nb, None, Conn::conn_can_send);
            if let Err(e) = r {
                return if done > 0 { Ok(done) } else { Err(e) };
            }
            if conn(&mut g).s.state & conn::WRITABLE == 0 {
                return if done > 0 { Ok(done) } else { Err(libc::EPIPE) };
            }
        }
        match conn(&mut g).iowrite_once(&buf[done..], offset + done as u64, olen) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) => return if done > 0 { Ok(done) } else { Err(e) },
        }
        if olen < MAX_TRANSFER {
            olen <<= 1;
        }
    }
    if done == 0 && !buf.is_empty() {
        return Err(libc::EINVAL);
    }
    Ok(done)
}

pub(super) fn shutdown(fd: c_int, how: c_int) -> Res<()> {
    let s = sock::lookup(fd)?;
    shutdown_sock(&s, how)
}

fn shutdown_sock(s: &RSock, how: c_int) -> Res<()> {
    if !matches!(how, libc::SHUT_RD | libc::SHUT_WR | libc::SHUT_RDWR) {
        return Err(libc::EINVAL);
    }
    let mut g = s.lock();
    connected(&mut g).map_err(|_| libc::ENOTCONN)?;
    let half = match how {
        libc::SHUT_RD => Half::Read,
        libc::SHUT_WR => Half::Write,
        _ => Half::Both,
    };
    let Some(ctrl) = conn(&mut g).s.shutdown(half) else {
        return Ok(());
    };
    let r;
    (g, r) = wait_conn(s, g, false, Some(CLOSE_LIMIT), Conn::conn_can_send_ctrl);
    r?;
    let c = conn(&mut g);
    c.send_ctrl(ctrl)?;
    if ctrl == CTRL_DISCONNECT {
        c.s.state = conn::DISCONNECTED;
    }
    let _ = wait_conn(s, g, false, Some(CLOSE_LIMIT), Conn::all_sends_done);
    Ok(())
}

pub(super) fn close(fd: c_int) -> Res<()> {
    if dgram::lookup(fd).is_some() {
        return dgram::close(fd);
    }
    let s = sock::remove(fd)?;
    super::keepalive::remove(fd);
    let connected_now = {
        let mut g = s.lock();
        settle(&mut g);
        matches!(&g.phase, Phase::Connected(c) if c.s.state & conn::CONNECTED != 0)
    };
    if connected_now {
        let _ = shutdown_sock(&s, libc::SHUT_RDWR);
    }
    let (phase, id) = {
        let mut g = s.lock();
        let id = core::mem::replace(&mut g.id, core::ptr::null_mut());
        (core::mem::replace(&mut g.phase, Phase::Closed), id)
    };
    match phase {
        Phase::Listening(l) => l.stop(),
        Phase::Connecting(p) => {
            if let Some(t) = p.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
                let _ = t.join();
            }
            drop(p.result.lock().unwrap_or_else(|e| e.into_inner()).take());
        }
        Phase::Connected(c) => {
            // SAFETY: live id: tell the peer (DREQ), then free the QP.
            unsafe { crate::cm::rdma_disconnect(id) };
            drop(c);
        }
        _ => {}
    }
    if !id.is_null() {
        // SAFETY: the socket's own id, no longer used by anyone.
        unsafe { crate::cm::rdma_destroy_id(id) };
    }
    Ok(())
}

/// `rgetsockname` (`peer` false) / `rgetpeername`.
pub(super) fn name(fd: c_int, peer: bool) -> Res<libc::sockaddr_storage> {
    if let Some(d) = dgram::lookup(fd) {
        return dgram::name(&d, peer);
    }
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    settle(&mut g);
    if peer && !matches!(g.phase, Phase::Connected(_)) {
        return Err(libc::ENOTCONN);
    }
    // SAFETY: live id; the storage members are plain data.
    let a = unsafe {
        if peer {
            (*g.id).route.addr.dst.dst_storage
        } else {
            (*g.id).route.addr.src.src_storage
        }
    };
    let mut out: libc::sockaddr_storage = super::sys::unsafe_zeroed();
    // SAFETY: same size, plain data.
    unsafe {
        core::ptr::copy_nonoverlapping(
            (&raw const a).cast::<u8>(),
            (&raw mut out).cast::<u8>(),
            size_of_val(&out).min(size_of_val(&a)),
        )
    };
    Ok(out)
}

pub(super) fn fcntl(fd: c_int, cmd: c_int, arg: c_int) -> Res<c_int> {
    if let Some(d) = dgram::lookup(fd) {
        return match cmd {
            libc::F_GETFL => Ok(libc::O_RDWR | if d.nonblock() { libc::O_NONBLOCK } else { 0 }),
            libc::F_SETFL => {
                d.set_nonblock(arg & libc::O_NONBLOCK != 0);
                Ok(0)
            }
            libc::F_GETFD | libc::F_SETFD => Ok(0),
            _ => Err(libc::ENOTSUP),
        };
    }
    let s = sock::lookup(fd)?;
    let mut g = s.lock();
    match cmd {
        libc::F_GETFL => Ok(libc::O_RDWR | if g.nonblock { libc::O_NONBLOCK } else { 0 }),
        libc::F_SETFL => {
            g.nonblock = arg & libc::O_NONBLOCK != 0;
            Ok(0)
        }
        libc::F_GETFD => Ok(g.fd_flags),
        libc::F_SETFD => {
            g.fd_flags = arg;
            Ok(0)
        }
        _ => Err(libc::ENOTSUP),
    }
}

/// `rsendto`/`rrecvfrom` on a datagram socket; `None` if `fd` is not one.
pub(super) fn dgram_sendto(
    fd: c_int,
    buf: &[u8],
    to: &libc::sockaddr_storage,
    flags: c_int,
) -> Option<Res<usize>> {
    dgram::lookup(fd).map(|d| dgram::sendto(&d, buf, Some(to), flags))
}

pub(super) fn dgram_recvfrom(
    fd: c_int,
    buf: &mut [u8],
    flags: c_int,
) -> Option<Res<(usize, libc::sockaddr_storage)>> {
    dgram::lookup(fd).map(|d| dgram::recvfrom(&d, buf, flags))
}

/// Socket options of a datagram socket: SOL_RDMA ones are accepted and
/// ignored, the others are the kernel UDP socket's (as rdma-core).
pub(super) fn dgram_setsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: &[u8],
) -> Option<Res<()>> {
    dgram::lookup(fd)?;
    if level == SOL_RDMA {
        return Some(Ok(()));
    }
    // SAFETY: our socket; `val` is the caller's option bytes.
    let r = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            val.as_ptr().cast(),
            val.len() as libc::socklen_t,
        )
    };
    Some(if r == 0 {
        Ok(())
    } else {
        Err(crate::guard::errno())
    })
}

/// `rgetsockopt` on a datagram socket: SOL_RDMA sizes are rdma-core's
/// defaults, the rest the kernel UDP socket's.
pub(super) fn dgram_getsockopt(fd: c_int, level: c_int, name: c_int) -> Option<Res<Vec<u8>>> {
    dgram::lookup(fd)?;
    if level == SOL_RDMA {
        let v: c_int = match name {
            RDMA_SQSIZE => super::proto::DEF_SQSIZE as c_int,
            RDMA_RQSIZE => super::proto::DEF_RQSIZE as c_int,
            RDMA_INLINE => super::proto::DEF_INLINE as c_int,
            _ => return Some(Err(libc::ENOTSUP)),
        };
        return Some(Ok(v.to_ne_bytes().to_vec()));
    }
    let mut buf = [0u8; 64];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: our socket; a local buffer of `len` bytes.
    let r = unsafe { libc::getsockopt(fd, level, name, buf.as_mut_ptr().cast(), &mut len) };
    Some(if r == 0 {
        Ok(buf[..len as usize].to_vec())
    } else {
        Err(crate::guard::errno())
    })
}
