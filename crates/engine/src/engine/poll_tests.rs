//! A busy poller that found its CQ empty while another thread delivered.

use super::*;
use softrdma_transport::{
    Access, AddressVector, Mtu, PdHandle, QpAttr, QpAttrMask as M, QpCap, QpInitAttr, QpState,
    QpType, RecvWr, SendWr, Sge, WrOpcode,
};

/// An engine on a loopback address of its own.
fn loopback_engine() -> Engine {
    Engine::start(EngineConfig::bound_to(SocketAddr::new(
        IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        0,
    )))
    .unwrap()
}

/// A signalled 8-byte SEND of the buffer at `ptr` (its MR's `lkey`).
fn signaled_send(wr_id: u64, ptr: u64, lkey: u32) -> SendWr {
    let mut wr = SendWr::new(wr_id, WrOpcode::Send);
    wr.flags = softrdma_transport::SendFlags::SIGNALED;
    wr.sgl = [Sge {
        addr: ptr,
        length: 8,
        lkey,
    }]
    .into();
    wr
}

/// A UC QP of `e` connected to itself (no ACK comes back to be received).
fn uc_to_self(e: &Engine, pd: PdHandle, cq: CqHandle) -> u32 {
    let cap = QpCap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let (qpn, _) = e
        .create_qp(&QpInitAttr {
            qp_type: QpType::Uc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            sq_sig_all: false,
        })
        .unwrap();
    let mut a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    e.modify_qp(
        qpn,
        &a,
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
    )
    .unwrap();
    a.qp_state = QpState::Rtr;
    a.path_mtu = Mtu::M1024;
    a.dest_qp_num = qpn;
    a.ah_attr = AddressVector::to_ip(e.local_addr().ip());
    let rtr = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
    e.modify_qp(qpn, &a, rtr).unwrap();
    a.qp_state = QpState::Rts;
    e.modify_qp(qpn, &a, M::STATE | M::SQ_PSN).unwrap();
    qpn
}

/// The poller reads its CQ (empty), then waits for the receive lock while
/// the thread holding it delivers a message: the poll returns that
/// message's completion, not 0 with the completion in the CQ.
#[test]
fn a_poller_returns_what_was_delivered_while_it_waited() {
    let e = Arc::new(loopback_engine());
    let mut buf = vec![0u8; 64];
    let ptr = buf.as_mut_ptr() as u64;
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(16).unwrap();
    let qpn = uc_to_self(&e, pd, cq);
    let mr = e.reg_mr(pd, ptr, 64, ptr, Access::LOCAL_WRITE).unwrap();
    let sge = |addr, length| Sge {
        addr,
        length,
        lkey: mr.lkey,
    };
    e.post_recv(
        qpn,
        RecvWr {
            wr_id: 7,
            sgl: [sge(ptr + 32, 32)].into(),
        },
    )
    .unwrap();
    // No thread receives the message until this one lets it.
    let mut rx = e.shared.rx.lock().unwrap();
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sgl = [sge(ptr, 8)].into();
    e.post_send(qpn, wr).unwrap();
    let polled = e.shared.last_poll.load(Ordering::Relaxed);
    let e2 = Arc::clone(&e);
    let poller = std::thread::spawn(move || {
        let mut got = Vec::new();
        e2.poll_cq(cq, 4, |w| got.push(w.wr_id)).unwrap();
        got
    });
    // The poller stores `last_poll` after it found the CQ empty.
    let t0 = std::time::Instant::now();
    while e.shared.last_poll.load(Ordering::Relaxed) == polled {
        assert!(t0.elapsed().as_secs() < 10, "the poller never polled");
        std::thread::yield_now();
    }
    let mut requests = 0;
    let mut got = 0;
    while got == 0 {
        assert!(t0.elapsed().as_secs() < 10, "the message never came");
        got = e.shared.rx_socket(
            Rx::Progress,
            &mut rx,
            0,
            &e.shared.socket,
            None,
            &mut requests,
        );
    }
    drop(rx);
    assert_eq!(poller.join().unwrap(), vec![7]);
}

/// A poll that finds completions reads no clock: the newest completion's
/// time stands for now in `last_call`; only in a serve window (the
/// progress thread waits for the socket) does it hand back.
#[test]
fn a_poll_that_finds_completions_hands_back_only_in_a_serve_window() {
    let e = loopback_engine();
    let mut buf = [7u8; 8];
    let ptr = buf.as_mut_ptr() as u64;
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(16).unwrap();
    let qpn = uc_to_self(&e, pd, cq);
    let mr = e.reg_mr(pd, ptr, 8, ptr, Access::LOCAL_WRITE).unwrap();
    let completed = |wr_id| {
        e.post_send(qpn, signaled_send(wr_id, ptr, mr.lkey))
            .unwrap();
        // A UC SEND completes once sent (by this post, or the progress
        // thread's next tick when it was gathered).
        let t0 = std::time::Instant::now();
        while e.lock().ep.cq_len(cq) == 0 {
            assert!(t0.elapsed().as_secs() < 10, "the send never completed");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    };
    let s = &e.shared;
    completed(1);
    s.last_call.store(123, Ordering::Relaxed);
    s.left_at.store(0, Ordering::Relaxed);
    let mut got = Vec::new();
    let mut stamp = 0;
    let n = e
        .poll_cq(cq, 4, |w| {
            got.push(w.wr_id);
            stamp = w.timestamp.as_nanos();
        })
        .unwrap();
    assert_eq!((n, got.clone()), (1, vec![1]));
    assert!(stamp > 123);
    assert_eq!(s.last_call.load(Ordering::Relaxed), stamp);
    assert_eq!(s.left_at.load(Ordering::Relaxed), 0, "nothing handed back");
    // Never back in time (the post notes its own call).
    completed(3);
    s.last_call.store(u64::MAX - 1, Ordering::Relaxed);
    assert_eq!(e.poll_cq(cq, 4, |w| got.push(w.wr_id)).unwrap(), 1);
    assert_eq!(s.last_call.load(Ordering::Relaxed), u64::MAX - 1);
    // A serve window: the same poll hands the socket back at once.
    completed(2);
    s.serve_until.store(u64::MAX, Ordering::Relaxed);
    assert_eq!(e.poll_cq(cq, 4, |w| got.push(w.wr_id)).unwrap(), 1);
    assert_eq!(got, vec![1, 3, 2]);
    assert_ne!(s.left_at.load(Ordering::Relaxed), 0, "handed back");
    assert_eq!(s.last_call.load(Ordering::Relaxed), 0);
}

/// A poll through the CQ's ring (`Engine::poll_cq_ring`) takes completions
/// already queued while another thread holds the engine lock, in order; a
/// poll by handle waits for the lock.
#[test]
fn a_ring_poll_takes_queued_completions_without_the_engine_lock() {
    let e = Arc::new(loopback_engine());
    let mut buf = [7u8; 8];
    let ptr = buf.as_mut_ptr() as u64;
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(16).unwrap();
    let ring = e.cq_ring(cq).unwrap();
    let qpn = uc_to_self(&e, pd, cq);
    let mr = e.reg_mr(pd, ptr, 8, ptr, Access::LOCAL_WRITE).unwrap();
    for wr_id in 1..=3 {
        e.post_send(qpn, signaled_send(wr_id, ptr, mr.lkey))
            .unwrap();
    }
    // UC SENDs complete once sent (the progress thread's tick at the latest).
    let t0 = std::time::Instant::now();
    while ring.len() < 3 {
        assert!(t0.elapsed().as_secs() < 10, "the sends never completed");
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let held = e.lock();
    let (tx, rx) = std::sync::mpsc::channel();
    let poller = {
        let (e, ring) = (Arc::clone(&e), Arc::clone(&ring));
        std::thread::spawn(move || {
            let mut got = Vec::new();
            let n = e.poll_cq_ring(&ring, cq, 2, |w| got.push(w.wr_id)).unwrap();
            tx.send((n, got)).unwrap();
            // By handle: under the engine lock.
            let mut got = Vec::new();
            let n = e.poll_cq(cq, 4, |w| got.push(w.wr_id)).unwrap();
            tx.send((n, got)).unwrap();
        })
    };
    let first = rx.recv_timeout(std::time::Duration::from_secs(5));
    assert_eq!(
        first.expect("the ring poll waited for the engine lock"),
        (2, vec![1, 2])
    );
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(50))
            .is_err(),
        "a poll by handle takes the engine lock"
    );
    drop(held);
    assert_eq!(rx.recv().unwrap(), (1, vec![3]));
    poller.join().unwrap();
    assert!(ring.is_empty());
    // Empty: the same answer by ring or by handle.
    assert_eq!(e.poll_cq_ring(&ring, cq, 4, |_| ()).unwrap(), 0);
    // An empty ring with no DREQ held: no engine lock either (a busy
    // poller's empty polls are its reaction time).
    let held = e.lock();
    let (tx, rx) = std::sync::mpsc::channel();
    let poller = {
        let (e, ring) = (Arc::clone(&e), Arc::clone(&ring));
        std::thread::spawn(move || {
            let n = e.poll_cq_ring(&ring, cq, 4, |_| ()).unwrap();
            tx.send(n).unwrap();
        })
    };
    let empty = rx.recv_timeout(std::time::Duration::from_secs(5));
    drop(held);
    assert_eq!(
        empty.expect("an empty ring poll waited for the engine lock"),
        0
    );
    poller.join().unwrap();
}
