//! Two engines in one process over real UDP on loopback.

mod common;

use softrdma_engine::transport::{
    Access, Mtu, QpType, RecvWr, SendFlags, SendWr, Sge, WcStatus, WrOpcode,
};
use softrdma_engine::{Engine, EngineConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Side {
    e: Engine,
    qpn: u32,
    cq: softrdma_engine::transport::CqHandle,
    buf: Vec<u8>,
    lkey: u32,
    rkey: u32,
}

fn side(ip: [u8; 4], port: u16) -> Side {
    let e = Engine::start(EngineConfig::bound_to(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::from(ip)),
        port,
    )))
    .unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let ptr = buf.as_mut_ptr() as u64;
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(1024).unwrap();
    let qpn = common::create_qp(&e, QpType::Rc, pd, cq, 256, 4);
    let mr = e
        .reg_mr(
            pd,
            ptr,
            1 << 20,
            ptr,
            Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    Side {
        e,
        qpn,
        cq,
        buf,
        lkey: mr.lkey,
        rkey: mr.rkey,
    }
}

fn connect(s: &Side, peer: &Side) {
    common::connect_rc(&s.e, s.qpn, &peer.e, peer.qpn, Mtu::M1024, 0xFFFFF0);
}

fn wait_wc(s: &Side, n: usize) -> Vec<softrdma_engine::transport::Wc> {
    common::wait_wc(&s.e, s.cq, n)
}

#[test]
fn rc_send_and_write_between_engines() {
    let p = common::free_udp_port();
    let mut a = side([127, 0, 0, 2], p);
    let mut b = side([127, 0, 0, 3], p);
    connect(&a, &b);
    connect(&b, &a);
    for (i, x) in a.buf.iter_mut().enumerate().take(100_000) {
        *x = (i % 251) as u8;
    }
    let bptr = b.buf.as_ptr() as u64;
    b.e.post_recv(
        b.qpn,
        RecvWr {
            wr_id: 9,
            sgl: vec![Sge {
                addr: bptr,
                length: 65536,
                lkey: b.lkey,
            }],
        },
    )
    .unwrap();
    let aptr = a.buf.as_ptr() as u64;
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sgl = vec![Sge {
        addr: aptr,
        length: 50_000,
        lkey: a.lkey,
    }];
    a.e.post_send(a.qpn, wr).unwrap();
    let mut w = SendWr::new(2, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = vec![Sge {
        addr: aptr,
        length: 100_000,
        lkey: a.lkey,
    }];
    w.remote_addr = bptr + 200_000;
    w.rkey = b.rkey;
    a.e.post_send(a.qpn, w).unwrap();
    let wcs = wait_wc(&a, 2);
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let r = wait_wc(&b, 1);
    assert_eq!(r[0].byte_len, 50_000);
    assert_eq!(&b.buf[..50_000], &a.buf[..50_000]);
    assert_eq!(&b.buf[200_000..300_000], &a.buf[..100_000]);
    let _ = &mut b;
}

/// A SEND to `s` of `len` bytes of `a`'s buffer, and a receive for it.
fn send_one(a: &Side, b: &Side, len: u32) {
    b.e.post_recv(
        b.qpn,
        RecvWr {
            wr_id: 7,
            sgl: vec![Sge {
                addr: b.buf.as_ptr() as u64,
                length: 65536,
                lkey: b.lkey,
            }],
        },
    )
    .unwrap();
    let mut wr = SendWr::new(8, WrOpcode::Send);
    wr.sgl = vec![Sge {
        addr: a.buf.as_ptr() as u64,
        length: len,
        lkey: a.lkey,
    }];
    a.e.post_send(a.qpn, wr).unwrap();
}

fn rx_by_waiter(e: &Engine) -> u64 {
    e.waiter_counters()
        .into_iter()
        .find(|(n, _)| *n == "rx_by_waiter")
        .map_or(0, |(_, v)| v)
}

/// Event mode costs one wake-up per completion: the thread blocked in
/// `get_event` receives the SEND itself (the progress thread would wake
/// first, then wake it).
#[test]
fn a_thread_blocked_for_its_completion_event_receives_the_packet_itself() {
    let p = common::free_udp_port();
    let mut a = side([127, 0, 0, 4], p);
    let b = side([127, 0, 0, 5], p);
    connect(&a, &b);
    connect(&b, &a);
    a.buf[..300].fill(0x5a);
    let ch = b.e.create_comp_channel().unwrap();
    b.e.set_cq_channel(b.cq, Some(Arc::clone(&ch)));
    b.e.req_notify_cq(b.cq, false).unwrap();
    let before = rx_by_waiter(&b.e);
    let waiter = {
        let ch = Arc::clone(&ch);
        std::thread::spawn(move || ch.get_event())
    };
    // Let it block (a send before that is received on the way in anyway).
    std::thread::sleep(Duration::from_millis(50));
    send_one(&a, &b, 300);
    assert_eq!(waiter.join().unwrap().unwrap(), b.cq);
    let w = wait_wc(&b, 1);
    assert_eq!((w[0].status, w[0].byte_len), (WcStatus::Success, 300));
    assert!(b.buf[..300].iter().all(|&x| x == 0x5a));
    assert!(
        rx_by_waiter(&b.e) > before,
        "the waiting thread received the SEND: {:?}",
        b.e.waiter_counters()
    );
}

/// A signal ends a receiving wait with `Interrupted` (qperf's `SIGALRM`),
/// and the progress thread has the socket again afterwards: a SEND arriving
/// with nobody waiting completes.
#[test]
fn a_signal_ends_a_receiving_wait_and_the_progress_thread_takes_over() {
    let p = common::free_udp_port();
    let a = side([127, 0, 0, 6], p);
    let b = side([127, 0, 0, 7], p);
    connect(&a, &b);
    connect(&b, &a);
    let ch = b.e.create_comp_channel().unwrap();
    b.e.set_cq_channel(b.cq, Some(Arc::clone(&ch)));
    b.e.req_notify_cq(b.cq, false).unwrap();
    let waited = {
        let ch = Arc::clone(&ch);
        common::interrupted(move || ch.get_event().map_err(|e| e.kind()))
    };
    assert_eq!(waited, Err(std::io::ErrorKind::Interrupted));
    let before = rx_by_waiter(&b.e);
    send_one(&a, &b, 100);
    // B's application does not poll: only the progress thread can place it
    // (then wait_wc's polls find it done).
    let t0 = Instant::now();
    while b.e.stats().0.rx_packets == 0 {
        assert!(t0.elapsed() < Duration::from_secs(10), "nobody received");
        std::thread::sleep(Duration::from_millis(1));
    }
    let w = wait_wc(&b, 1);
    assert_eq!(w[0].status, WcStatus::Success);
    assert_eq!(rx_by_waiter(&b.e), before, "nobody was waiting");
    assert_eq!(ch.get_event().unwrap(), b.cq, "the event is there");
}
