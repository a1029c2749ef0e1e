//! Datagram (UD) rsockets, rdma-core's protocol: each socket has a kernel
//! UDP socket (its number, as in rdma-core) for address discovery, and one
//! UD QP per local source address (an rdma_cm id of `RDMA_PS_UDP` bound to
//! the socket's address and port). Every datagram starts with a
//! `ds_header` naming its sender's address. A send to a destination
//! without an address handle yet goes over UDP with a `ds_udp_header`
//! (our QPN); the receiver's service thread answers with one (its QPN),
//! makes an address handle back, and passes the data to its own QP. From
//! then on datagrams are UD SENDs with Q_Key `RDMA_UDP_QKEY`.

use core::ffi::c_int;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::proto::{
    DEF_INLINE, DEF_MEM, DEF_RQSIZE, DEF_SQSIZE, DEF_WMEM, OP_CTRL, OP_DATA, SNDLOWAT, WR_RECV,
};
use super::sys::{Region, Res, Verbs, unsafe_zeroed};
use crate::ffi::*;

#[path = "daddr.rs"]
mod addr;
#[path = "dsvc.rs"]
mod svc;

use addr::*;
use svc::{svc_loop, udp_send};

const DS_UDP_TAG: u32 = 0x5555_5555;
const GRH: usize = 40;

/// One UD QP bound to a local address.
struct DQp {
    v: Verbs,
    src: Addr,
    hdr: Vec<u8>,
    rbuf: Region,
    rmr: *mut ibv_mr,
    smr: *mut ibv_mr,
    /// An address handle to this QP itself (the service thread's forwards).
    self_ah: *mut ibv_ah,
    armed: bool,
}

struct Dest {
    qp: usize,
    ah: *mut ibv_ah,
    qpn: u32,
}

struct State {
    qps: Vec<DQp>,
    dests: HashMap<Vec<u8>, (Addr, Dest)>,
    conn: Option<Vec<u8>>,
    sbuf: Region,
    free: Vec<u32>,
    rmsgs: VecDeque<(usize, u32, u32)>,
    sq: u32,
    rq: u32,
    rbuf_size: u32,
    nonblock: bool,
    ready: bool,
}

// SAFETY: raw engine objects used under the socket's mutex.
unsafe impl Send for State {}

pub(super) struct DSock {
    pub(super) fd: c_int,
    epfd: c_int,
    st: Mutex<State>,
    stop: AtomicBool,
    svc: Mutex<Option<std::thread::JoinHandle<()>>>,
}

fn table() -> MutexGuard<'static, HashMap<c_int, Arc<DSock>>> {
    static T: OnceLock<Mutex<HashMap<c_int, Arc<DSock>>>> = OnceLock::new();
    T.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

pub(super) fn lookup(fd: c_int) -> Option<Arc<DSock>> {
    table().get(&fd).cloned()
}

pub(super) fn socket(domain: c_int, nonblock: bool) -> Res<c_int> {
    let fd = raw_socket(domain, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC);
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: plain syscall.
    let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epfd < 0 {
        let e = errno();
        // SAFETY: ours.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    let rq = (DEF_MEM / SNDLOWAT).min(DEF_RQSIZE);
    let sq = (DEF_WMEM / SNDLOWAT).min(DEF_SQSIZE);
    let s = Arc::new(DSock {
        fd,
        epfd,
        st: Mutex::new(State {
            qps: Vec::new(),
            dests: HashMap::new(),
            conn: None,
            sbuf: Region::new((sq * SNDLOWAT) as usize)?,
            free: (0..sq).map(|i| i * SNDLOWAT).collect(),
            rmsgs: VecDeque::new(),
            sq,
            rq,
            rbuf_size: rq * SNDLOWAT,
            nonblock,
            ready: false,
        }),
        stop: AtomicBool::new(false),
        svc: Mutex::new(None),
    });
    table().insert(fd, s);
    Ok(fd)
}

impl DSock {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `ds_init_ep`: starts the UDP service thread once.
    fn init(self: &Arc<Self>) -> Res<()> {
        let mut g = self.svc.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_some() {
            return Ok(());
        }
        let me = Arc::downgrade(self);
        let t = std::thread::Builder::new()
            .name("rsocket-udp".into())
            .spawn(move || svc_loop(me))
            .map_err(|_| libc::EAGAIN)?;
        *g = Some(t);
        self.lock().ready = true;
        Ok(())
    }

    pub(super) fn set_nonblock(&self, on: bool) {
        self.lock().nonblock = on;
    }
    pub(super) fn nonblock(&self) -> bool {
        self.lock().nonblock
    }
}

pub(super) fn bind(fd: c_int, a: &Addr) -> Res<()> {
    let s = lookup(fd).ok_or(libc::EBADF)?;
    s.init()?;
    // SAFETY: our socket, a valid address.
    if unsafe { libc::bind(fd, (a as *const Addr).cast(), addr_len(a)) } != 0 {
        return Err(errno());
    }
    Ok(())
}

pub(super) fn connect(fd: c_int, a: &Addr) -> Res<()> {
    let s = lookup(fd).ok_or(libc::EBADF)?;
    s.init()?;
    // SAFETY: our socket, a valid address.
    if unsafe { libc::connect(fd, (a as *const Addr).cast(), addr_len(a)) } != 0 {
        return Err(errno());
    }
    let mut g = s.lock();
    get_dest(&s, &mut g, a)?;
    g.conn = Some(addr_key(a));
    Ok(())
}

/// `ds_get_dest`: the destination entry for `a`, creating the QP for the
/// source address it needs.
fn get_dest(s: &DSock, g: &mut State, a: &Addr) -> Res<Vec<u8>> {
    let key = addr_key(a);
    if g.dests.contains_key(&key) {
        return Ok(key);
    }
    let src = src_addr(s.fd, a)?;
    let skey = addr_key(&src);
    let qp = match g.qps.iter().position(|q| addr_key(&q.src) == skey) {
        Some(i) => i,
        None => create_qp(s, g, src)?,
    };
    g.dests.insert(
        key.clone(),
        (
            *a,
            Dest {
                qp,
                ah: core::ptr::null_mut(),
                qpn: 0,
            },
        ),
    );
    Ok(key)
}

fn create_qp(s: &DSock, g: &mut State, src: Addr) -> Res<usize> {
    let mut id = core::ptr::null_mut();
    // SAFETY: local output; a synchronous id.
    if unsafe {
        crate::cm::rdma_create_id(
            core::ptr::null_mut(),
            &mut id,
            core::ptr::null_mut(),
            RDMA_PS_UDP,
        )
    } != 0
    {
        return Err(errno());
    }
    let mut b = src;
    // SAFETY: live id, a valid address.
    if unsafe { crate::cm::rdma_bind_addr(id, (&raw mut b).cast()) } != 0 {
        let e = errno();
        // SAFETY: our id.
        unsafe { crate::cm::rdma_destroy_id(id) };
        return Err(e);
    }
    let (v, _inline) = match Verbs::create_qp(id, IBV_QPT_UD, g.sq, g.rq, DEF_INLINE) {
        Ok(x) => x,
        Err(e) => {
            // SAFETY: our id.
            unsafe { crate::cm::rdma_destroy_id(id) };
            return Err(e);
        }
    };
    let rbuf = Region::new(g.rbuf_size as usize + GRH)?;
    let rmr = v.reg(rbuf.ptr(), g.rbuf_size as usize + GRH)?;
    let smr = v.reg(g.sbuf.ptr(), (g.sq * SNDLOWAT) as usize)?;
    let gid = gid_of(&src);
    let self_ah = v.create_ah(gid, gid)?;
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: g.qps.len() as u64,
    };
    // SAFETY: our epoll fd and the channel's fd.
    unsafe { libc::epoll_ctl(s.epfd, libc::EPOLL_CTL_ADD, v.fd(), &mut ev) };
    let q = DQp {
        v,
        hdr: ds_header(&src),
        src,
        rbuf,
        rmr,
        smr,
        self_ah,
        armed: false,
    };
    for i in 0..g.rq {
        post_recv(&q, g.rbuf_size, i * SNDLOWAT)?;
    }
    g.qps.push(q);
    Ok(g.qps.len() - 1)
}

fn post_recv(q: &DQp, rbuf_size: u32, off: u32) -> Res<()> {
    // SAFETY: our live MR.
    let lkey = unsafe { (*q.rmr).lkey };
    let mut sges = [
        ibv_sge {
            addr: q.rbuf.addr(rbuf_size as usize),
            length: GRH as u32,
            lkey,
        },
        ibv_sge {
            addr: q.rbuf.addr(off as usize),
            length: SNDLOWAT,
            lkey,
        },
    ];
    q.v.post_recv_sges(WR_RECV | off as u64, &mut sges)
}

/// `ds_poll_cqs`: takes every completion of every QP.
fn poll_cqs(g: &mut State) {
    let mut wcs: [ibv_wc; 16] = unsafe_zeroed();
    for qi in 0..g.qps.len() {
        loop {
            let n = g.qps[qi].v.poll(&mut wcs).unwrap_or(0);
            if n == 0 {
                break;
            }
            for wc in &wcs[..n] {
                let off = wc.wr_id as u32;
                if wc.wr_id & WR_RECV != 0 {
                    let ok = wc.status == IBV_WC_SUCCESS
                        && (wc.byte_len as usize) >= GRH + 8
                        && g.rmsgs.len() < g.rq as usize;
                    if ok {
                        g.rmsgs.push_back((qi, off, wc.byte_len - GRH as u32));
                    } else {
                        let _ = post_recv(&g.qps[qi], g.rbuf_size, off);
                    }
                } else {
                    g.free.push(off);
                }
            }
        }
    }
}

/// Sends one datagram (header + `data`) to `key` over UD; `src` replaces
/// our own header (the service thread's forwards).
fn ud_send(g: &mut State, key: &[u8], data: &[u8], fwd_from: Option<&Addr>) -> Res<()> {
    let (qi, ah, qpn) = {
        let (_, d) = g.dests.get(key).ok_or(libc::EDESTADDRREQ)?;
        (d.qp, d.ah, d.qpn)
    };
    let (ah, qpn) = match fwd_from {
        Some(_) => (g.qps[qi].self_ah, g.qps[qi].v.qp_num()),
        None => (ah, qpn),
    };
    let hdr = match fwd_from {
        Some(a) => ds_header(a),
        None => g.qps[qi].hdr.clone(),
    };
    if hdr.len() + data.len() > SNDLOWAT as usize {
        return Err(libc::EMSGSIZE);
    }
    let off = g.free.pop().ok_or(libc::EWOULDBLOCK)?;
    g.sbuf.write(off as usize, &hdr);
    g.sbuf.write(off as usize + hdr.len(), data);
    let q = &g.qps[qi];
    // SAFETY: our live MR.
    let lkey = unsafe { (*q.smr).lkey };
    let mut sge = ibv_sge {
        addr: g.sbuf.addr(off as usize),
        length: (hdr.len() + data.len()) as u32,
        lkey,
    };
    let mut wr: ibv_send_wr = unsafe_zeroed();
    wr.wr_id = off as u64;
    wr.sg_list = &mut sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_SEND;
    wr.wr.ud = ibv_send_wr_ud {
        ah,
        remote_qpn: qpn,
        remote_qkey: RDMA_UDP_QKEY,
    };
    let r = q.v.post_send(&mut wr);
    if r.is_err() {
        g.free.push(off);
    }
    r
}

/// `rsendto` / `rsend` on a datagram socket.
pub(super) fn sendto(s: &Arc<DSock>, data: &[u8], to: Option<&Addr>, flags: c_int) -> Res<usize> {
    s.init()?;
    let mut g = s.lock();
    let key = match to {
        Some(a) => get_dest(s, &mut g, a)?,
        None => g.conn.clone().ok_or(libc::EDESTADDRREQ)?,
    };
    if g.dests.get(&key).is_some_and(|(_, d)| d.ah.is_null()) {
        return udp_send(s.fd, &g, &key, OP_DATA as u8, data);
    }
    let nb = g.nonblock || flags & libc::MSG_DONTWAIT != 0;
    loop {
        poll_cqs(&mut g);
        if !g.free.is_empty() {
            ud_send(&mut g, &key, data, None)?;
            return Ok(data.len());
        }
        if nb {
            return Err(libc::EWOULDBLOCK);
        }
        g = wait(s, g);
    }
}

/// Arms every CQ, sleeps on the epoll set for a while, takes the events.
fn wait<'a>(s: &'a DSock, mut g: MutexGuard<'a, State>) -> MutexGuard<'a, State> {
    for q in g.qps.iter_mut().filter(|q| !q.armed) {
        q.armed = q.v.arm().is_ok();
    }
    poll_cqs(&mut g);
    if !g.rmsgs.is_empty() {
        return g;
    }
    // A non-blocking ibv_get_cq_event tells the device this thread stops
    // polling (see `Conn::prepare_sleep`).
    let mut took = false;
    for q in g.qps.iter_mut() {
        if q.armed && q.v.take_event() {
            q.armed = false;
            took = true;
        }
    }
    if took {
        return g;
    }
    drop(g);
    super::sock::wait_fd(s.epfd, 20);
    let mut g = s.lock();
    for q in g.qps.iter_mut() {
        if q.v.take_event() {
            q.armed = false;
        }
    }
    g
}

/// `rrecvfrom` on a datagram socket.
pub(super) fn recvfrom(s: &Arc<DSock>, buf: &mut [u8], flags: c_int) -> Res<(usize, Addr)> {
    let mut g = s.lock();
    let nb = g.nonblock || flags & libc::MSG_DONTWAIT != 0;
    loop {
        poll_cqs(&mut g);
        if let Some(&(qi, off, len)) = g.rmsgs.front() {
            let mut m = vec![0u8; len as usize];
            g.qps[qi].rbuf.read(off as usize, &mut m);
            let Some((from, hl)) = parse_ds_header(&m) else {
                // Not a datagram of rsockets: drop it.
                g.rmsgs.pop_front();
                let _ = post_recv(&g.qps[qi], g.rbuf_size, off);
                continue;
            };
            let n = (len as usize - hl).min(buf.len());
            buf[..n].copy_from_slice(&m[hl..hl + n]);
            if flags & libc::MSG_PEEK == 0 {
                g.rmsgs.pop_front();
                let _ = post_recv(&g.qps[qi], g.rbuf_size, off);
            }
            return Ok((n, from));
        }
        if nb {
            return Err(libc::EWOULDBLOCK);
        }
        g = wait(s, g);
    }
}

/// rpoll: (revents, fd to sleep on).
pub(super) fn poll_events(s: &DSock, events: i16) -> i16 {
    let mut g = s.lock();
    poll_cqs(&mut g);
    let mut r = 0;
    if !g.rmsgs.is_empty() {
        r |= events & libc::POLLIN;
    }
    if !g.free.is_empty() {
        r |= events & libc::POLLOUT;
    }
    r
}

/// The fd rpoll sleeps on (the epoll set of the CQ channels), arming the
/// CQs: `again` if one was just armed (a completion may have come before).
pub(super) fn sleep_fd(s: &DSock, again: &mut bool) -> c_int {
    let mut g = s.lock();
    for q in g.qps.iter_mut() {
        if !q.armed {
            q.armed = q.v.arm().is_ok();
            *again = true;
        } else if q.v.take_event() {
            // (also tells the device this thread stops polling)
            q.armed = false;
            *again = true;
        }
    }
    s.epfd
}

pub(super) fn after_wake(s: &DSock) {
    let mut g = s.lock();
    for q in g.qps.iter_mut() {
        if q.v.take_event() {
            q.armed = false;
        }
    }
}

pub(super) fn name(s: &DSock, peer: bool) -> Res<Addr> {
    let mut a: Addr = unsafe_zeroed();
    let mut l = size_of::<Addr>() as libc::socklen_t;
    // SAFETY: our socket, local output.
    let r = unsafe {
        if peer {
            libc::getpeername(s.fd, (&raw mut a).cast(), &mut l)
        } else {
            libc::getsockname(s.fd, (&raw mut a).cast(), &mut l)
        }
    };
    if r != 0 { Err(errno()) } else { Ok(a) }
}

pub(super) fn close(fd: c_int) -> Res<()> {
    let s = table().remove(&fd).ok_or(libc::EBADF)?;
    s.stop.store(true, Ordering::SeqCst);
    if let Some(t) = s.svc.lock().unwrap_or_else(|e| e.into_inner()).take() {
        let _ = t.join();
    }
    let mut g = s.lock();
    // Let sends in flight finish (a second at most).
    let start = std::time::Instant::now();
    while g.free.len() < g.sq as usize && start.elapsed().as_secs() < 1 {
        poll_cqs(&mut g);
        std::thread::yield_now();
    }
    let dests: Vec<Dest> = g.dests.drain().map(|(_, (_, d))| d).collect();
    for d in dests {
        if !d.ah.is_null()
            && let Some(q) = g.qps.get(d.qp)
        {
            q.v.destroy_ah(d.ah);
        }
    }
    for mut q in g.qps.drain(..) {
        q.v.destroy_ah(q.self_ah);
        let id = q.v.id;
        let mut mrs = [q.rmr, q.smr];
        q.v.destroy(&mut mrs);
        // SAFETY: the QP's own id, nothing uses it any more.
        unsafe { crate::cm::rdma_destroy_id(id) };
    }
    drop(g);
    // SAFETY: our fds, closed once.
    unsafe {
        libc::close(s.epfd);
        libc::close(fd);
    }
    Ok(())
}
