//! What the engine's integration tests share: ports, QPs, signals.
#![allow(dead_code)]

use softrdma_engine::Engine;
use softrdma_engine::transport::{
    Access, AddressVector, CqHandle, Mtu, PdHandle, QpAttr, QpAttrMask as M, QpCap, QpInitAttr,
    QpState, QpType, Wc,
};

/// A free UDP port on 127.0.0.1 (very likely free on other 127/8 addresses).
pub(crate) fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
}

/// An engine on 127.0.0.1 (a free port) with the same-host path on, busy
/// polling or not: its QPs connected to each other use its own lane.
pub(crate) fn own_lane_engine(busy_poll: bool) -> Engine {
    let at = std::net::SocketAddr::new(std::net::Ipv4Addr::LOCALHOST.into(), free_udp_port());
    let mut cfg = softrdma_engine::EngineConfig::bound_to(at);
    cfg.busy_poll = busy_poll;
    cfg.shm = true;
    Engine::start(cfg).unwrap()
}

/// A QP of `qp_type` on `cq`, with room for `wrs` work requests each way
/// and `sges` SGEs; returns its number.
pub(crate) fn create_qp(
    e: &Engine,
    qp_type: QpType,
    pd: PdHandle,
    cq: CqHandle,
    wrs: u32,
    sges: u32,
) -> u32 {
    e.create_qp(&QpInitAttr {
        qp_type,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: QpCap {
            max_send_wr: wrs,
            max_recv_wr: wrs,
            max_send_sge: sges,
            max_recv_sge: sges,
            max_inline_data: 64,
        },
        sq_sig_all: true,
    })
    .unwrap()
    .0
}

/// Brings RC QP `qpn` of `e` through INIT and RTR to RTS, connected to QP
/// `peer_qpn` of `peer`: remote WRITE, READ and atomic rights, four READs
/// or atomics outstanding each way, `mtu`, both PSNs starting at `psn`.
pub(crate) fn connect_rc(e: &Engine, qpn: u32, peer: &Engine, peer_qpn: u32, mtu: Mtu, psn: u32) {
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        ..QpAttr::default()
    };
    let init = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    e.modify_qp(qpn, &a, init).unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = mtu;
    a.dest_qp_num = peer_qpn;
    a.rq_psn = psn;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.ah_attr = AddressVector::to_ip(peer.local_addr().ip());
    let rtr = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    e.modify_qp(qpn, &a, rtr).unwrap();
    a.qp_state = QpState::Rts;
    a.sq_psn = psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 4;
    let rts = M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
    e.modify_qp(qpn, &a, rts).unwrap();
}

/// Polls `cq` until `n` completions came (at most 10 s).
pub(crate) fn wait_wc(e: &Engine, cq: CqHandle, n: usize) -> Vec<Wc> {
    let mut v = Vec::new();
    let t0 = std::time::Instant::now();
    while v.len() < n {
        e.poll_cq(cq, 16, |w| v.push(w)).unwrap();
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "timeout waiting for {n} completions, got {} ({v:?})",
            v.len()
        );
    }
    v
}

extern "C" fn on_signal(_: libc::c_int) {}

/// Runs `f` on a thread and sends it SIGUSR2 (a handler without
/// `SA_RESTART`, as qperf's SIGALRM) every 20 ms until it returns, for at
/// most 5 s; returns what `f` returned.
pub(crate) fn interrupted<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    // SAFETY: a zeroed sigaction with a handler that does nothing, and no
    // SA_RESTART, installed for a signal only these tests send.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        // SAFETY: pthread_self has no preconditions.
        tx.send(unsafe { libc::pthread_self() }).unwrap();
        f()
    });
    let me = rx.recv().unwrap();
    for _ in 0..250 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        if t.is_finished() {
            break;
        }
        // SAFETY: `me` is the thread's, alive until joined below.
        assert_eq!(unsafe { libc::pthread_kill(me, libc::SIGUSR2) }, 0);
    }
    t.join().unwrap()
}
