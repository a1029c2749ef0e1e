//! Two connection managers talking through a lossless (or lossy) in-memory link.

use softrdma_cm::*;
use softrdma_transport::{Instant, Mtu, QpType, Qpn};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

#[derive(Default)]
struct MockQps {
    qps: HashMap<Qpn, (QpType, Option<ConnectQp>, bool)>,
}

impl QpOps for MockQps {
    fn qp_info(&mut self, qpn: Qpn) -> Option<QpInfo> {
        self.qps.get(&qpn).map(|q| QpInfo {
            qp_type: q.0,
            srq: false,
        })
    }
    fn connect(&mut self, qpn: Qpn, p: &ConnectQp) -> Result<(), softrdma_transport::VerbsError> {
        let q = self.qps.get_mut(&qpn).expect("known QP");
        q.1 = Some(*p);
        Ok(())
    }
    fn set_error(&mut self, qpn: Qpn) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.2 = true;
        }
    }
}

struct Side {
    cm: Cm,
    qps: MockQps,
    ip: IpAddr,
}

fn side(last: u8) -> Side {
    let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, last));
    Side {
        cm: Cm::new(CmConfig {
            addrs: vec![ip],
            node_guid: u64::from(last),
            mtu: Mtu::M4096,
            seed: u64::from(last),
            member_slot: 0,
        }),
        qps: MockQps::default(),
        ip,
    }
}

/// Moves MADs between the two sides until quiet; `drop` decides which to lose.
fn pump(a: &mut Side, b: &mut Side, now: Instant, mut drop: impl FnMut(&Outgoing) -> bool) {
    loop {
        let mut moved = false;
        while let Some(o) = a.cm.poll_transmit() {
            moved = true;
            assert_eq!(o.dst, b.ip);
            if !drop(&o) {
                b.cm.handle_mad(now, o.src, o.dst, &o.mad, &mut b.qps);
            }
        }
        while let Some(o) = b.cm.poll_transmit() {
            moved = true;
            assert_eq!(o.dst, a.ip);
            if !drop(&o) {
                a.cm.handle_mad(now, o.src, o.dst, &o.mad, &mut a.qps);
            }
        }
        if !moved {
            return;
        }
    }
}

fn events(s: &mut Side) -> Vec<Event> {
    std::iter::from_fn(|| s.cm.poll_event()).collect()
}

/// An RC id on `s` with QP `qpn` attached, its address resolved to `dst`.
fn rc_id(s: &mut Side, qpn: Qpn, dst: SocketAddr) -> IdHandle {
    let c = s.cm.create_id(PortSpace::Tcp, QpType::Rc);
    s.qps.qps.insert(qpn, (QpType::Rc, None, false));
    s.cm.set_qp(c, Some(qpn)).unwrap();
    s.cm.resolve_addr(c, s.ip, dst).unwrap();
    c
}

/// `rc_id`, its events dropped, connecting at `now` with default parameters.
fn rc_connect(s: &mut Side, qpn: Qpn, dst: SocketAddr, now: Instant) -> IdHandle {
    let c = rc_id(s, qpn, dst);
    events(s);
    s.cm.connect(now, c, &ConnParam::default(), &mut s.qps)
        .unwrap();
    c
}

/// The passive side attaches QP 0x200 to `child` and accepts it with `p`.
fn accept_rc(b: &mut Side, child: IdHandle, now: Instant, p: &ConnParam) {
    b.qps.qps.insert(0x200, (QpType::Rc, None, false));
    b.cm.set_qp(child, Some(0x200)).unwrap();
    b.cm.accept(now, child, p, &mut b.qps).unwrap();
}

fn rc_pair() -> (Side, Side, IdHandle, IdHandle) {
    let (mut a, mut b) = (side(1), side(2));
    let now = Instant::from_millis(1);
    let l = b.cm.create_id(PortSpace::Tcp, QpType::Rc);
    b.cm.bind(l, SocketAddr::new(b.ip, 7471)).unwrap();
    b.cm.listen(l).unwrap();
    let c = rc_id(&mut a, 0x100, SocketAddr::new(b.ip, 7471));
    a.cm.resolve_route(c).unwrap();
    let e = events(&mut a);
    assert_eq!(
        e.iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::AddrResolved, EventKind::RouteResolved]
    );
    let p = ConnParam {
        private_data: b"hello".to_vec(),
        responder_resources: 4,
        initiator_depth: 4,
        retry_count: 7,
        rnr_retry_count: 7,
        ..Default::default()
    };
    a.cm.connect(now, c, &p, &mut a.qps).unwrap();
    pump(&mut a, &mut b, now, |_| false);
    let e = events(&mut b);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].kind, EventKind::ConnectRequest);
    assert_eq!(e[0].listen_id, Some(l));
    let EventParam::Conn(cp) = &e[0].param else {
        panic!()
    };
    assert_eq!(&cp.private_data[..5], b"hello");
    assert_eq!(cp.qp_num, 0x100);
    assert_eq!(cp.responder_resources, 4);
    let child = e[0].id;
    assert_eq!(b.cm.addrs_of(child).0, Some(SocketAddr::new(b.ip, 7471)));
    (a, b, c, child)
}

#[test]
fn rc_connect_accept_disconnect() {
    let (mut a, mut b, c, child) = rc_pair();
    let now = Instant::from_millis(2);
    let p = ConnParam {
        private_data: b"welcome".to_vec(),
        responder_resources: 2,
        initiator_depth: 2,
        rnr_retry_count: 7,
        ..Default::default()
    };
    accept_rc(&mut b, child, now, &p);
    pump(&mut a, &mut b, now, |_| false);
    let ea = events(&mut a);
    assert_eq!(ea.len(), 1);
    assert_eq!(ea[0].kind, EventKind::Established);
    let EventParam::Conn(cp) = &ea[0].param else {
        panic!()
    };
    assert_eq!(&cp.private_data[..7], b"welcome");
    let eb = events(&mut b);
    assert_eq!(
        eb.iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::Established]
    );
    // Both QPs were connected to each other with matching PSNs.
    let qa = a.qps.qps[&0x100].1.unwrap();
    let qb = b.qps.qps[&0x200].1.unwrap();
    assert_eq!(qa.remote_qpn, 0x200);
    assert_eq!(qb.remote_qpn, 0x100);
    assert_eq!(qa.sq_psn, qb.rq_psn);
    assert_eq!(qb.sq_psn, qa.rq_psn);
    assert_eq!(
        qa.max_rd_atomic, 2,
        "initiator depth limited by the peer's responder resources"
    );
    assert_eq!(qb.av.dest_ip(), a.ip);
    // Disconnect from the passive side.
    b.cm.disconnect(now, child, &mut b.qps).unwrap();
    assert!(b.qps.qps[&0x200].2, "disconnect moves the QP to ERR");
    pump(&mut a, &mut b, now, |_| false);
    assert_eq!(
        events(&mut a).iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::Disconnected]
    );
    assert!(a.qps.qps[&0x100].2, "a DREQ moves the peer's QP to ERR");
    assert_eq!(
        events(&mut b).iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::Disconnected]
    );
    let _ = c;
}

#[test]
fn reject_carries_private_data() {
    let (mut a, mut b, c, child) = rc_pair();
    b.cm.reject(child, b"go away").unwrap();
    pump(&mut a, &mut b, Instant::from_millis(2), |_| false);
    let e = events(&mut a);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].kind, EventKind::Rejected);
    assert_eq!(e[0].status, 28);
    let EventParam::Conn(cp) = &e[0].param else {
        panic!()
    };
    assert_eq!(&cp.private_data[..7], b"go away");
    assert_eq!(e[0].id, c);
}

#[test]
fn no_listener_is_rejected_with_invalid_service_id() {
    let (mut a, mut b) = (side(1), side(2));
    let now = Instant::from_millis(1);
    rc_connect(&mut a, 7, SocketAddr::new(b.ip, 9), now);
    pump(&mut a, &mut b, now, |_| false);
    let e = events(&mut a);
    assert_eq!(e[0].kind, EventKind::Rejected);
    assert_eq!(e[0].status, 8);
    assert!(events(&mut b).is_empty());
}

#[test]
fn a_req_for_a_bound_port_waits_for_its_listener() {
    // Debian's qperf tells its client the port before it calls
    // rdma_listen: the REQ is dropped, not rejected, and its
    // retransmission reaches the listener.
    let (mut a, mut b) = (side(1), side(2));
    let now = Instant::from_millis(1);
    let l = b.cm.create_id(PortSpace::Tcp, QpType::Rc);
    b.cm.bind(l, SocketAddr::new(b.ip, 9)).unwrap();
    rc_connect(&mut a, 7, SocketAddr::new(b.ip, 9), now);
    let mut answered = false;
    pump(&mut a, &mut b, now, |o| {
        answered |= o.src == IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        false
    });
    assert!(!answered, "no REJ for a bound port");
    assert!(events(&mut a).is_empty());
    assert!(events(&mut b).is_empty());
    b.cm.listen(l).unwrap();
    let t = a.cm.poll_timeout().expect("the REQ is retransmitted");
    a.cm.handle_timeout(t, &mut a.qps);
    pump(&mut a, &mut b, t, |_| false);
    let e = events(&mut b);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].kind, EventKind::ConnectRequest);
}

#[test]
fn lost_req_is_retransmitted_and_silence_is_unreachable() {
    let (mut a, mut b, _c, child) = rc_pair();
    // Lose the REP once: the REQ retransmission makes B resend it.
    let t = Instant::from_millis(3);
    accept_rc(&mut b, child, t, &ConnParam::default());
    let mut lost = 0;
    pump(&mut a, &mut b, t, |o| {
        let lose = lost == 0;
        lost += 1;
        lose && o.src == IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))
    });
    assert!(events(&mut a).is_empty());
    let t2 = a.cm.poll_timeout().unwrap();
    assert_eq!(
        t2,
        Instant::from_millis(251),
        "REQ RTO counts from the connect at 1 ms"
    );
    a.cm.handle_timeout(t2, &mut a.qps);
    pump(&mut a, &mut b, t2, |_| false);
    assert_eq!(
        events(&mut a).iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::Established]
    );
    assert_eq!(
        events(&mut b).iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::Established]
    );

    // A peer that never answers: UNREACHABLE after the retries.
    let mut x = side(3);
    let nobody = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 99)), 1);
    rc_connect(&mut x, 9, nobody, Instant::ZERO);
    let mut sent = 0;
    while let Some(t) = x.cm.poll_timeout() {
        while x.cm.poll_transmit().is_some() {
            sent += 1;
        }
        x.cm.handle_timeout(t, &mut x.qps);
    }
    while x.cm.poll_transmit().is_some() {
        sent += 1;
    }
    assert_eq!(sent, 7, "one REQ and six retransmissions");
    let e = events(&mut x);
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].kind, EventKind::Unreachable);
}

#[test]
fn ud_sidr_resolves_qpn_and_qkey() {
    let (mut a, mut b) = (side(1), side(2));
    let now = Instant::from_millis(1);
    let l = b.cm.create_id(PortSpace::Udp, QpType::Ud);
    b.cm.bind(l, SocketAddr::new(b.ip, 7174)).unwrap();
    b.cm.listen(l).unwrap();
    let c = a.cm.create_id(PortSpace::Udp, QpType::Ud);
    a.cm.resolve_addr(c, a.ip, SocketAddr::new(b.ip, 7174))
        .unwrap();
    events(&mut a);
    a.cm.connect(
        now,
        c,
        &ConnParam {
            private_data: vec![1, 2, 3],
            ..Default::default()
        },
        &mut a.qps,
    )
    .unwrap();
    pump(&mut a, &mut b, now, |_| false);
    let e = events(&mut b);
    assert_eq!(e[0].kind, EventKind::ConnectRequest);
    let EventParam::Ud(u) = &e[0].param else {
        panic!()
    };
    assert_eq!(&u.private_data[..3], &[1, 2, 3]);
    assert_eq!(u.ah_attr.dest_ip(), a.ip);
    let child = e[0].id;
    b.cm.set_qp(child, Some(0x55)).unwrap();
    b.cm.accept(now, child, &ConnParam::default(), &mut b.qps)
        .unwrap();
    pump(&mut a, &mut b, now, |_| false);
    let e = events(&mut a);
    assert_eq!(e[0].kind, EventKind::Established);
    let EventParam::Ud(u) = &e[0].param else {
        panic!()
    };
    assert_eq!(u.qp_num, 0x55);
    assert_eq!(u.qkey, RDMA_UDP_QKEY);
    assert_eq!(u.ah_attr.dest_ip(), b.ip);
}

#[test]
fn ports_are_exclusive_and_released() {
    let mut s = side(1);
    let a = s.cm.create_id(PortSpace::Tcp, QpType::Rc);
    let b = s.cm.create_id(PortSpace::Tcp, QpType::Rc);
    s.cm.bind(a, SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 5000))
        .unwrap();
    assert!(matches!(
        s.cm.bind(b, SocketAddr::new(s.ip, 5000)),
        Err(CmError::AddrInUse(_))
    ));
    s.cm.destroy_id(Instant::ZERO, a, &mut MockQps::default());
    s.cm.bind(b, SocketAddr::new(s.ip, 5000)).unwrap();
    let c = s.cm.create_id(PortSpace::Tcp, QpType::Rc);
    assert!(matches!(
        s.cm.bind(
            c,
            SocketAddr::new(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)), 1)
        ),
        Err(CmError::AddrNotAvail(_))
    ));
}

#[test]
fn established_connection_retransmits_nothing() {
    let (mut a, mut b, _c, child) = rc_pair();
    let t = Instant::from_millis(2);
    accept_rc(&mut b, child, t, &ConnParam::default());
    pump(&mut a, &mut b, t, |_| false);
    assert_eq!(events(&mut a).len(), 1);
    // Nothing is armed any more on either side: the REQ and REP were answered.
    assert_eq!(
        a.cm.poll_timeout(),
        None,
        "active side still retransmitting"
    );
    assert_eq!(
        b.cm.poll_timeout(),
        None,
        "passive side still retransmitting"
    );
}

#[test]
fn unreachable_peer_ends_its_connections_at_once() {
    let (mut a, mut b, c, child) = rc_pair();
    let t = Instant::from_millis(2);
    accept_rc(&mut b, child, t, &ConnParam::default());
    pump(&mut a, &mut b, t, |_| false);
    events(&mut a);
    events(&mut b);
    // B's process dies: ICMP tells A that nothing listens at B any more.
    let b_ip = b.ip;
    a.cm.peer_unreachable(Instant::from_millis(3), b_ip, &mut a.qps);
    let e = events(&mut a);
    assert_eq!(
        e.iter().map(|e| (e.id, e.kind)).collect::<Vec<_>>(),
        vec![(c, EventKind::Disconnected)]
    );
    assert!(a.qps.qps[&0x100].2, "the dead peer's QP is flushed");
    // A pending request to a dead address is unreachable at once.
    let mut x = side(3);
    rc_connect(&mut x, 5, SocketAddr::new(b_ip, 1), Instant::ZERO);
    x.cm.peer_unreachable(Instant::from_millis(1), b_ip, &mut x.qps);
    assert_eq!(
        events(&mut x).iter().map(|e| e.kind).collect::<Vec<_>>(),
        vec![EventKind::Unreachable]
    );
    assert_eq!(x.cm.poll_timeout(), None, "no REQ retransmission left");
}

/// Linux ib_cm (and so rxe) reads the Starting PSN of a REQ as the *passive*
/// side's send PSN and that of a REP as the *active* side's send PSN
/// (`cm_req_handler`: `sq_psn = REQ starting PSN`; `ib_send_cm_req`:
/// `rq_psn = REQ starting PSN`). The golden rxe capture `rping.pcap` shows it:
/// REQ 0xa56785 / REP 0x0cddad, the client sends from 0x0cddad and the server's
/// READ from 0xa56785. A peer reading it the other way gets duplicate ACKs only.
#[test]
fn starting_psns_follow_linux_ib_cm() {
    use softrdma_wire::cm::{CmMad, CmMessage};
    let (mut a, mut b, _c, child) = rc_pair();
    let now = Instant::from_millis(2);
    let p = ConnParam {
        responder_resources: 1,
        initiator_depth: 1,
        rnr_retry_count: 7,
        ..Default::default()
    };
    accept_rc(&mut b, child, now, &p);
    let mut rep_psn = None;
    pump(&mut a, &mut b, now, |o| {
        if let Ok(CmMad {
            msg: CmMessage::Rep(r),
            ..
        }) = CmMad::parse(&o.mad)
        {
            rep_psn = Some(r.starting_psn.get());
        }
        false
    });
    let rep_psn = rep_psn.expect("a REP was sent");
    let qa = a.qps.qps[&0x100].1.unwrap();
    let qb = b.qps.qps[&0x200].1.unwrap();
    assert_eq!(
        qa.sq_psn, rep_psn,
        "the active side sends from the REP's PSN"
    );
    assert_eq!(qb.rq_psn, rep_psn);
    assert_eq!(
        qb.sq_psn, qa.rq_psn,
        "the passive side sends from the REQ's PSN"
    );
    assert_ne!(qa.sq_psn, qa.rq_psn);
    // What rdma_init_qp_attr reports agrees with what the CM connected.
    assert_eq!(b.cm.qp_params(child).unwrap().sq_psn, qb.sq_psn);
}
