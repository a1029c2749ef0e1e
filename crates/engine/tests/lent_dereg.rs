//! No write after `ibv_dereg_mr` returns, with the responder lent: SENDs
//! stream into receives of one region, executed by a busy poller without
//! the engine lock (`engine/shm/lent.rs`), while the main thread
//! deregisters the region halfway, with a message in flight, and at once
//! fills it with a pattern. That message lands before the deregistration
//! returns or not at all, whatever comes after fails (the region is gone),
//! and the pattern is still whole at the end.

mod common;

use softrdma_engine::transport::{
    Access, Mtu, QpType, RecvWr, SendFlags, SendWr, Sge, Wc, WcOpcode, WcStatus, WrOpcode,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const MESSAGES: u64 = 600;
const SLOTS: u64 = 32;
const PATTERN: u8 = 0xEE;

#[test]
fn a_deregistered_region_is_never_written_after_dereg_returns() {
    let e = Arc::new(common::own_lane_engine(true));
    let mut src = vec![0x5Au8; 64];
    let mut dst = vec![0u8; (64 * SLOTS) as usize];
    let (src_at, dst_at) = (src.as_mut_ptr() as u64, dst.as_mut_ptr() as u64);
    let pd = e.alloc_pd().unwrap();
    let ms = e
        .reg_mr(pd, src_at, 64, src_at, Access::LOCAL_WRITE)
        .unwrap();
    let md = e
        .reg_mr(pd, dst_at, 64 * SLOTS, dst_at, Access::LOCAL_WRITE)
        .unwrap();
    let (cq_a, _) = e.create_cq(256).unwrap();
    let (cq_b, _) = e.create_cq(256).unwrap();
    let a = common::create_qp(&e, QpType::Rc, pd, cq_a, 64, 1);
    let b = common::create_qp(&e, QpType::Rc, pd, cq_b, 64, 1);
    common::connect_rc(&e, a, &e, b, Mtu::M1024, 100);
    common::connect_rc(&e, b, &e, a, Mtu::M1024, 100);
    let (xa, xb) = (e.express(a).unwrap(), e.express(b).unwrap());
    let (ra, rb) = (e.cq_ring(cq_a).unwrap(), e.cq_ring(cq_b).unwrap());
    let recv = move |i: u64| RecvWr {
        wr_id: i,
        sgl: [Sge {
            addr: dst_at + 64 * (i % SLOTS),
            length: 64,
            lkey: md.lkey,
        }]
        .into(),
    };
    for i in 0..SLOTS {
        e.post_recv_via(Some(&xb), b, [recv(i)]).unwrap();
    }
    // What A sends from, and where B's one message to A lands.
    let at_a = Sge {
        addr: src_at,
        length: 64,
        lkey: ms.lkey,
    };
    let send = |wr_id: u64| {
        let mut wr = SendWr::new(wr_id, WrOpcode::Send);
        wr.flags = SendFlags::SIGNALED;
        wr.sgl = [at_a].into();
        wr
    };
    // B posts once, so that its requester, and its responder with it, is
    // lent (a QP that never posts lends neither); its ACKs to the stream
    // below then leave with the flushes of its polls.
    let mut to_a = recv(0);
    to_a.sgl = [at_a].into();
    e.post_recv_via(Some(&xa), a, [to_a]).unwrap();
    e.post_send_via(Some(&xb), b, send(1 << 40)).unwrap();
    let got = common::wait_wc(&e, cq_a, 1);
    assert_eq!(
        (got[0].status, got[0].opcode),
        (WcStatus::Success, WcOpcode::Recv)
    );
    let got = common::wait_wc(&e, cq_b, 1);
    assert_eq!(
        (got[0].status, got[0].opcode),
        (WcStatus::Success, WcOpcode::Send)
    );
    // B's side: a busy poller that reposts each receive, until told to
    // stop or its QP fails.
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let (e, stop) = (Arc::clone(&e), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut next = SLOTS;
            while !stop.load(Ordering::Relaxed) {
                let mut got: Option<Wc> = None;
                e.poll_cq_ring(&rb, cq_b, 1, |w| got = Some(w)).unwrap();
                match got {
                    Some(w) if w.status == WcStatus::Success => {
                        assert_eq!(w.opcode, WcOpcode::Recv);
                        // Reposted into a region that may be gone by now:
                        // the cell takes it, its message fails.
                        let _ = e.post_recv_via(Some(&xb), b, [recv(next)]);
                        next += 1;
                    }
                    Some(_) => return,
                    None => {}
                }
            }
        })
    };
    let mut sent = 0;
    for i in 0..MESSAGES {
        if e.post_send_via(Some(&xa), a, send(i)).is_err() {
            break;
        }
        // With this message in flight: it lands before `dereg_mr` returns,
        // or never.
        if i == MESSAGES / 2 {
            e.dereg_mr(md.lkey).unwrap();
            dst.fill(PATTERN);
        }
        // Its completion, or an error once B's QP failed; bounded.
        let t0 = Instant::now();
        let mut status = None;
        while status.is_none() && t0.elapsed() < Duration::from_secs(5) {
            e.poll_cq_ring(&ra, cq_a, 1, |w| status = Some(w.status))
                .unwrap();
        }
        match status {
            Some(WcStatus::Success) => sent += 1,
            _ => break,
        }
    }
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    assert!(
        sent >= MESSAGES / 2,
        "{sent} messages before the region went"
    );
    assert!(sent < MESSAGES, "the region's loss failed a message");
    assert!(
        dst.iter().all(|&b| b == PATTERN),
        "a message landed after dereg_mr returned"
    );
    let (stats, _) = e.stats();
    assert!(stats.rx_lent > 0, "{stats:?}");
    drop(src);
}
