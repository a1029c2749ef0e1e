//! Both QPs of a connection in one engine: their traffic goes through the
//! process's own same-host lane. A thread blocked for a completion event
//! reads the socket and the inbox itself (`receiving.rs`), asleep in an
//! epoll set of its own with the doorbell flag up. A push into the own lane
//! by another thread of the process (the application's post, the progress
//! thread's retransmission or held ACK) must wake that thread: it used to
//! wake only the progress thread, which does not read while a waiter has
//! the socket, so the datagram sat in the inbox until the requester's
//! retries ran out (pyverbs' `test_cq_events_rc` failed with "Retry
//! exceeded", about one run in 60).

mod common;

use softrdma_engine::transport::{Access, Mtu, QpType, RecvWr, SendWr, Sge, WcStatus, WrOpcode};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

#[test]
fn a_post_into_the_own_lane_wakes_the_thread_waiting_for_the_event() {
    let e = common::own_lane_engine(false);
    let mut buf = vec![0u8; 4096];
    let ptr = buf.as_mut_ptr() as u64;
    let pd = e.alloc_pd().unwrap();
    let (cq_a, _) = e.create_cq(16).unwrap();
    let (cq_b, _) = e.create_cq(16).unwrap();
    let a = common::create_qp(&e, QpType::Rc, pd, cq_a, 16, 1);
    let b = common::create_qp(&e, QpType::Rc, pd, cq_b, 16, 1);
    let mr = e.reg_mr(pd, ptr, 4096, ptr, Access::LOCAL_WRITE).unwrap();
    common::connect_rc(&e, a, &e, b, Mtu::M1024, 100);
    common::connect_rc(&e, b, &e, a, Mtu::M1024, 100);
    buf[..8].copy_from_slice(b"own lane");
    let sge = |at: u64| Sge {
        addr: ptr + at,
        length: 8,
        lkey: mr.lkey,
    };
    e.post_recv(
        b,
        RecvWr {
            wr_id: 2,
            sgl: [sge(2048)].into(),
        },
    )
    .unwrap();
    let ch = e.create_comp_channel().unwrap();
    e.set_cq_channel(cq_b, Some(Arc::clone(&ch)));
    e.req_notify_cq(cq_b, false).unwrap();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || tx.send(ch.get_event().unwrap()).unwrap());
    // Long enough for the waiter to stop polling and sleep.
    std::thread::sleep(Duration::from_millis(200));
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sgl = [sge(0)].into();
    e.post_send(a, wr).unwrap();
    // The RC timeout (14: 67 ms) times 8 tries is ~0.5 s; a wake-up is µs.
    let got = rx.recv_timeout(Duration::from_millis(300));
    assert_eq!(got, Ok(cq_b), "the waiter was not woken");
    waiter.join().unwrap();
    let w = common::wait_wc(&e, cq_b, 1);
    assert_eq!((w[0].status, w[0].byte_len), (WcStatus::Success, 8));
    assert_eq!(&buf[2048..2056], b"own lane");
    let w = common::wait_wc(&e, cq_a, 1);
    assert_eq!(w[0].status, WcStatus::Success);
}
