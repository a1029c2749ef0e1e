//! What the engine's integration tests share: ports, QPs, signals.
#![allow(dead_code)]

use softrdma_engine::Engine;
use softrdma_engine::transport::{CqHandle, PdHandle, QpCap, QpInitAttr, QpType, Wc};

/// A free UDP port on 127.0.0.1 (very likely free on other 127/8 addresses).
pub(crate) fn free_udp_port() -> u16 {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.local_addr().unwrap().port()
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
