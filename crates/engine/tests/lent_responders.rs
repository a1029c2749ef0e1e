//! Records for lent responders, executed by busy pollers without the
//! engine lock (`engine/shm/lent.rs`): two threads ping-pong SENDs between
//! two QPs of one process, through their express cells and CQ rings, while
//! a third busy-polls an empty CQ of its own, taking records for the other
//! two's QPs too. Every message lands once, in order, with its bytes; the
//! lock-free path took most of them; every datagram of the lane was read
//! once.

mod common;

use softrdma_engine::Engine;
use softrdma_engine::transport::{
    Access, CqHandle, CqRing, Express, Mtu, QpType, RecvWr, SendFlags, SendWr, Sge, Wc, WcOpcode,
    WcStatus, WrOpcode,
};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROUNDS: u64 = 2000;

/// One side of the ping-pong: its QP, cell, CQ and ring, and its part of
/// the shared buffer (8-byte slots: what it sends, then what it receives).
struct Side {
    qpn: u32,
    x: Arc<Express>,
    cq: CqHandle,
    ring: Arc<CqRing>,
    base: u64,
    lkey: u32,
    early: Mutex<VecDeque<Wc>>,
}

impl Side {
    fn recv(&self, e: &Engine, i: u64) {
        let wr = RecvWr {
            wr_id: i,
            sgl: [self.sge(8 + 8 * (i % 64))].into(),
        };
        e.post_recv_via(Some(&self.x), self.qpn, [wr]).unwrap();
    }

    fn send(&self, e: &Engine, i: u64) {
        // SAFETY: the slot is inside the registered buffer the test keeps
        // alive; only this side writes it, and the post reads it.
        unsafe { std::ptr::write_unaligned(self.base as *mut u64, i) };
        let mut wr = SendWr::new(i, WrOpcode::Send);
        wr.flags = SendFlags::SIGNALED;
        wr.sgl = [self.sge(0)].into();
        e.post_send_via(Some(&self.x), self.qpn, wr).unwrap();
    }

    fn sge(&self, at: u64) -> Sge {
        Sge {
            addr: self.base + at,
            length: 8,
            lkey: self.lkey,
        }
    }

    /// Polls until a completion of `opcode` comes; returns it (those of
    /// the other kind wait in `early`: a receive completes before the send
    /// whose ACK its message carried).
    fn wait(&self, e: &Engine, opcode: WcOpcode) -> Wc {
        let t0 = Instant::now();
        loop {
            let mut early = self.early.lock().unwrap();
            if let Some(i) = early.iter().position(|w| w.opcode == opcode) {
                return early.remove(i).unwrap();
            }
            let mut got = None;
            e.poll_cq_ring(&self.ring, self.cq, 1, |w| got = Some(w))
                .unwrap();
            match got {
                Some(w) if w.opcode == opcode => return w,
                Some(w) => early.push_back(w),
                None => assert!(
                    t0.elapsed() < Duration::from_secs(20),
                    "no {opcode:?} on QP {:#x}: {:?}",
                    self.qpn,
                    e.stats().0
                ),
            }
        }
    }

    /// The 8 bytes receive `i` landed in.
    fn received(&self, i: u64) -> u64 {
        // SAFETY: the slot is inside the buffer the test keeps alive, and
        // its receive completed: nothing writes it until it is posted again.
        unsafe { std::ptr::read_unaligned((self.base + 8 + 8 * (i % 64)) as *const u64) }
    }
}

#[test]
fn busy_pollers_execute_records_for_lent_responders_once_and_in_order() {
    let e = Arc::new(common::own_lane_engine(true));
    let mut buf = vec![0u8; 4096];
    let ptr = buf.as_mut_ptr() as u64;
    let pd = e.alloc_pd().unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let mr = e.reg_mr(pd, ptr, 4096, ptr, all).unwrap();
    let side = |base: u64| {
        let (cq, _) = e.create_cq(256).unwrap();
        let qpn = common::create_qp(&e, QpType::Rc, pd, cq, 128, 1);
        Side {
            qpn,
            x: e.express(qpn).expect("a cell"),
            cq,
            ring: e.cq_ring(cq).unwrap(),
            base,
            lkey: mr.lkey,
            early: Mutex::default(),
        }
    };
    let (a, b) = (side(ptr), side(ptr + 2048));
    common::connect_rc(&e, a.qpn, &e, b.qpn, Mtu::M1024, 100);
    common::connect_rc(&e, b.qpn, &e, a.qpn, Mtu::M1024, 100);
    // A third thread busy-polls a CQ no message completes on.
    let (idle_cq, _) = e.create_cq(4).unwrap();
    let idle_ring = e.cq_ring(idle_cq).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let third = {
        let (e, done) = (Arc::clone(&e), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                e.poll_cq_ring(&idle_ring, idle_cq, 1, |w| panic!("{w:?}"))
                    .unwrap();
            }
        })
    };
    for i in 0..8 {
        a.recv(&e, i);
        b.recv(&e, i);
    }
    let echo = {
        let e = Arc::clone(&e);
        std::thread::spawn(move || {
            for i in 0..ROUNDS {
                let w = b.wait(&e, WcOpcode::Recv);
                assert_eq!((w.status, w.wr_id), (WcStatus::Success, i));
                assert_eq!(b.received(i), i, "message {i} at B");
                b.recv(&e, i + 8);
                b.send(&e, i);
                assert_eq!(b.wait(&e, WcOpcode::Send).wr_id, i);
            }
        })
    };
    for i in 0..ROUNDS {
        a.send(&e, i);
        assert_eq!(a.wait(&e, WcOpcode::Send).wr_id, i);
        let w = a.wait(&e, WcOpcode::Recv);
        assert_eq!((w.status, w.wr_id), (WcStatus::Success, i));
        assert_eq!(a.received(i), i, "message {i} at A");
        a.recv(&e, i + 8);
    }
    echo.join().unwrap();
    done.store(true, Ordering::Relaxed);
    third.join().unwrap();
    let (stats, _) = e.stats();
    assert_eq!((stats.rx_duplicates, stats.retransmits), (0, 0));
    assert!(stats.rx_lent > ROUNDS, "{stats:?}");
    let shm: std::collections::HashMap<_, _> = e.shm_counters().into_iter().collect();
    assert_eq!(shm["shm_tx"], shm["shm_rx"], "{shm:?}");
    // Most, alone; under load, the engine's path takes more.
    assert!(shm["shm_rx_lent"] > ROUNDS / 20, "{shm:?}");
    drop(buf);
}
