//! `softrdma::cm` between two devices in one process: connecting, rejecting,
//! disconnecting, errors, migration, ids without QPs, waits.

mod cm_common;
mod common;

use cm_common::*;
use common::free_udp_port;
use softrdma::cm::*;
use softrdma::verbs::*;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

/// A connection between a client id on `cha` and an accepted id on `chb`,
/// both with default QPs, both ESTABLISHED.
fn connected(cha: &EventChannel, chb: &EventChannel, dst: SocketAddr) -> (CmId, CmId) {
    let client = resolved(cha, TCP_RC, dst);
    client.create_qp(None, &QpOptions::default()).unwrap();
    client.connect(&conn_param(b"hello")).unwrap();
    let child = expect(chb, EventKind::ConnectRequest)
        .take_new_id()
        .unwrap();
    child.create_qp(None, &QpOptions::default()).unwrap();
    child.accept(&conn_param(b"welcome")).unwrap();
    assert!(expect(cha, EventKind::Established).is_for(&client));
    assert!(expect(chb, EventKind::Established).is_for(&child));
    (client, child)
}

fn state(id: &CmId) -> QpState {
    id.qp().unwrap().query().unwrap().qp_state
}

#[test]
fn rc_connect_accept_private_data_and_rdma_traffic() {
    let (ca, cb) = two_devices(21, 22);
    let (cha, chb, dst) = channels(&ca, &cb, 7471);
    let l = listener(&chb, TCP_RC, dst, 8);
    assert_eq!(l.local_addr(), Some(dst));

    let client = resolved(&cha, TCP_RC, dst);
    assert_eq!(client.peer_addr(), Some(dst));
    assert_eq!(client.local_addr().unwrap().ip(), ca.local_addr().ip());
    let cqpn = client.create_qp(None, &QpOptions::default()).unwrap().qpn();
    assert_eq!(state(&client), QpState::Init);
    let ma = client.pd().unwrap().alloc_mr(1 << 17, ALL).unwrap();
    let data = pattern(40_000, 1);
    ma.write(0, &data).unwrap();
    let desc_a = buf_desc(ma.addr(), ma.rkey(), 1 << 17);
    client.connect(&conn_param(&desc_a)).unwrap();

    // The server sees the request with the client's private data and parameters.
    let mut req = expect(&chb, EventKind::ConnectRequest);
    assert_eq!(req.listen_id(), Some(l.handle()));
    assert_eq!(req.status(), 0);
    let child = req.take_new_id().expect("a request carries a new id");
    assert!(req.take_new_id().is_none());
    assert!(req.is_for(&child));
    assert_eq!(req.private_data().len(), 56, "the REQ's whole user field");
    assert_eq!(&req.private_data()[..16], &desc_a[..]);
    let peer = req.conn_param().unwrap();
    assert_eq!(peer.qp_num, cqpn);
    assert_eq!(peer.responder_resources, 128, "u8::MAX: the device maximum");
    assert_eq!(peer.retry_count, 7);
    assert_eq!(child.local_addr(), Some(dst));
    assert_eq!(
        child.peer_addr(),
        client.local_addr(),
        "the request names the client's address and port"
    );
    let sqpn = child.create_qp(None, &QpOptions::default()).unwrap().qpn();
    let mb = child.pd().unwrap().alloc_mr(1 << 17, ALL).unwrap();
    let server_data = pattern(30_000, 2);
    mb.write(0, &server_data).unwrap();
    mb.write(120_000, b"hello from the server").unwrap();
    let desc_b = buf_desc(mb.addr(), mb.rkey(), 1 << 17);
    child.accept(&conn_param(&desc_b)).unwrap();

    let est = expect(&cha, EventKind::Established);
    assert!(est.is_for(&client));
    assert_eq!(est.private_data().len(), 196, "the REP's whole user field");
    assert_eq!(&est.private_data()[..16], &desc_b[..]);
    assert_eq!(est.conn_param().unwrap().qp_num, sqpn);
    assert!(expect(&chb, EventKind::Established).is_for(&child));
    assert_eq!(state(&client), QpState::Rts);
    assert_eq!(state(&child), QpState::Rts);

    // RDMA WRITE into the server, READ from it, SEND back: byte exact.
    let (baddr, brkey, _) = parse_desc(est.private_data());
    let cq = client.qp().unwrap();
    client
        .qp()
        .unwrap()
        .post_recv(RecvWr {
            wr_id: 100,
            sgl: [ma.sge(100_000, 1000).unwrap()].into(),
        })
        .unwrap();
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [ma.sge(0, 40_000).unwrap()].into();
    w.remote_addr = baddr + 65_536;
    w.rkey = brkey;
    cq.post_send(w).unwrap();
    let mut r = SendWr::new(2, WrOpcode::RdmaRead);
    r.flags = SendFlags::SIGNALED;
    r.sgl = [ma.sge(65_536, 30_000).unwrap()].into();
    r.remote_addr = baddr;
    r.rkey = brkey;
    cq.post_send(r).unwrap();
    let wcs = client.send_cq().unwrap().poll_blocking(2, T).unwrap();
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(mb.to_vec(65_536, 40_000).unwrap(), data);
    assert_eq!(ma.to_vec(65_536, 30_000).unwrap(), server_data);

    let mut s = SendWr::new(3, WrOpcode::SendWithImm);
    s.flags = SendFlags::SIGNALED;
    s.imm_data = 0xC0FFEE;
    s.sgl = [mb.sge(120_000, 21).unwrap()].into();
    child.qp().unwrap().post_send(s).unwrap();
    assert_eq!(
        child.send_cq().unwrap().poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    let rx = client.recv_cq().unwrap().poll_blocking(1, T).unwrap();
    assert_eq!((rx[0].wr_id, rx[0].status), (100, WcStatus::Success));
    assert_eq!(rx[0].byte_len, 21);
    assert_eq!(rx[0].imm_data, 0xC0FFEE);
    assert_eq!(rx[0].qp_num, cqpn);
    assert_eq!(
        ma.to_vec(100_000, 21).unwrap(),
        b"hello from the server".to_vec()
    );
}

#[test]
fn reject_carries_private_data() {
    let (ca, cb) = two_devices(21, 22);
    let (cha, chb, dst) = channels(&ca, &cb, 7472);
    let _l = listener(&chb, TCP_RC, dst, 8);
    let client = resolved(&cha, TCP_RC, dst);
    client.create_qp(None, &QpOptions::default()).unwrap();
    client.connect(&conn_param(b"knock knock")).unwrap();
    let mut req = expect(&chb, EventKind::ConnectRequest);
    assert_eq!(&req.private_data()[..11], b"knock knock");
    let child = req.take_new_id().unwrap();
    child.reject(b"not today").unwrap();
    let e = expect(&cha, EventKind::Rejected);
    assert!(e.is_for(&client));
    assert_eq!(e.status(), 28, "IB_CM_REJ_CONSUMER_DEFINED");
    assert_eq!(&e.private_data()[..9], b"not today");
    match e.error() {
        Some(err @ Error::Rejected { reason: 28, .. }) => {
            assert_eq!(&err.rejected_private_data().unwrap()[..9], b"not today");
            assert_eq!(err.errno(), libc::ECONNREFUSED);
        }
        other => panic!("{other:?}"),
    }
    assert!(chb.try_get_event().unwrap().is_none());
}

#[test]
fn no_listener_is_rejected_quickly() {
    let (ca, cb) = two_devices(21, 22);
    let cha = EventChannel::new(&ca).unwrap();
    let client = resolved(&cha, TCP_RC, SocketAddr::new(cb.local_addr().ip(), 7473));
    client.create_qp(None, &QpOptions::default()).unwrap();
    let t0 = Instant::now();
    client.connect(&conn_param(b"anyone?")).unwrap();
    let e = expect(&cha, EventKind::Rejected);
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "took {:?}",
        t0.elapsed()
    );
    assert_eq!(e.status(), 8, "IB_CM_REJ_INVALID_SERVICE_ID");
    // The same on a synchronous id: connect fails with the rejection.
    let s = resolved_sync(&ca, TCP_RC, SocketAddr::new(cb.local_addr().ip(), 7473));
    match s.connect(&conn_param(&[])) {
        Err(Error::Rejected { reason: 8, .. }) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(s.last_event().unwrap().kind(), EventKind::Rejected);
}

#[test]
fn address_nobody_owns_is_addr_error() {
    let port = free_udp_port();
    let ca = device(23, port);
    let ch = EventChannel::new(&ca).unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc).unwrap();
    let nobody = SocketAddr::new(ip(250), 7471);
    id.resolve_addr(None, nobody, Duration::from_secs(2))
        .unwrap();
    let e = expect(&ch, EventKind::AddrError);
    assert!(e.is_for(&id));
    assert!(e.status() < 0, "a negative errno: {}", e.status());
    assert!(matches!(e.error(), Some(Error::AddrError { .. })));
    // resolve_route before a resolved address is refused.
    assert!(id.resolve_route(Duration::from_secs(1)).is_err());
    // Synchronous: the call itself fails, with EHOSTUNREACH.
    let s = CmId::new_sync(&ca, PortSpace::Tcp, QpType::Rc).unwrap();
    let err = s
        .resolve_addr(None, nobody, Duration::from_secs(2))
        .unwrap_err();
    assert!(matches!(err, Error::AddrError { .. }), "{err:?}");
    assert_eq!(err.errno(), libc::EHOSTUNREACH);
    // A source address the device does not own is refused at once.
    let other = CmId::new(&ch, PortSpace::Tcp, QpType::Rc).unwrap();
    let err = other
        .resolve_addr(
            Some(SocketAddr::new(ip(251), 0)),
            nobody,
            Duration::from_secs(1),
        )
        .unwrap_err();
    assert_eq!(err.errno(), libc::EADDRNOTAVAIL);
}

#[test]
fn disconnect_reaches_both_sides_and_flushes_receives() {
    let (ca, cb) = two_devices(21, 22);
    let (cha, chb, dst) = channels(&ca, &cb, 7474);
    let _l = listener(&chb, TCP_RC, dst, 8);
    let (client, child) = connected(&cha, &chb, dst);
    let mb = child
        .pd()
        .unwrap()
        .alloc_mr(4096, Access::LOCAL_WRITE)
        .unwrap();
    for i in 0..3 {
        child
            .qp()
            .unwrap()
            .post_recv(RecvWr {
                wr_id: 10 + i,
                sgl: [mb.sge(i as usize * 1024, 1024).unwrap()].into(),
            })
            .unwrap();
    }
    let ma = client
        .pd()
        .unwrap()
        .alloc_mr(1024, Access::LOCAL_WRITE)
        .unwrap();
    client
        .qp()
        .unwrap()
        .post_recv(RecvWr {
            wr_id: 99,
            sgl: [ma.sge(0, 1024).unwrap()].into(),
        })
        .unwrap();
    client.disconnect().unwrap();
    assert_eq!(
        state(&client),
        QpState::Err,
        "disconnect moves the QP to ERR"
    );
    assert!(expect(&cha, EventKind::Disconnected).is_for(&client));
    assert!(expect(&chb, EventKind::Disconnected).is_for(&child));
    assert_eq!(state(&child), QpState::Err);
    let flushed = child.recv_cq().unwrap().poll_blocking(3, T).unwrap();
    assert_eq!(
        flushed
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        vec![
            (10, WcStatus::WrFlushErr),
            (11, WcStatus::WrFlushErr),
            (12, WcStatus::WrFlushErr)
        ]
    );
    let own = client.recv_cq().unwrap().poll_blocking(1, T).unwrap();
    assert_eq!((own[0].wr_id, own[0].status), (99, WcStatus::WrFlushErr));
    // Disconnecting again (either side) is harmless and reports nothing new.
    client.disconnect().unwrap();
    child.disconnect().unwrap();
    assert!(
        cha.get_event_timeout(Duration::from_millis(100))
            .unwrap()
            .is_none()
    );
    assert!(chb.try_get_event().unwrap().is_none());
}

/// A connection whose client sent `child` one 8-byte SEND (ACKed, so its
/// completion waits in the child's CQ, not polled), then disconnected.
fn sent_then_disconnected(
    cha: &EventChannel,
    chb: &EventChannel,
    dst: SocketAddr,
) -> (CmId, CmId, Mr) {
    let (client, child, mb) = sent(cha, chb, dst);
    client.disconnect().unwrap();
    (client, child, mb)
}

/// A connection whose client sent `child` one 8-byte SEND, ACKed: its
/// completion waits in the child's receive CQ, not polled.
fn sent(cha: &EventChannel, chb: &EventChannel, dst: SocketAddr) -> (CmId, CmId, Mr) {
    let (client, child) = connected(cha, chb, dst);
    let mb = child
        .pd()
        .unwrap()
        .alloc_mr(64, Access::LOCAL_WRITE)
        .unwrap();
    child
        .qp()
        .unwrap()
        .post_recv(RecvWr {
            wr_id: 5,
            sgl: [mb.sge(0, 64).unwrap()].into(),
        })
        .unwrap();
    let ma = client
        .pd()
        .unwrap()
        .alloc_mr(64, Access::LOCAL_WRITE)
        .unwrap();
    let mut s = SendWr::new(1, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [ma.sge(0, 8).unwrap()].into();
    client.qp().unwrap().post_send(s).unwrap();
    let sent = client.send_cq().unwrap().poll_blocking(1, T).unwrap();
    assert_eq!(sent[0].status, WcStatus::Success);
    (client, child, mb)
}

/// The hold is the disconnected QP's own: a message of another connection
/// waiting unpolled does not delay its DISCONNECTED.
#[test]
fn disconnected_waits_only_for_its_own_qps_completions() {
    let (ca, cb) = two_devices(37, 38);
    let (cha, chb, dst) = channels(&ca, &cb, 7483);
    let _l = listener(&chb, TCP_RC, dst, 8);
    let (_client1, child1, _mb) = sent(&cha, &chb, dst);
    let (client2, child2) = connected(&cha, &chb, dst);
    let t0 = Instant::now();
    client2.disconnect().unwrap();
    assert!(expect(&chb, EventKind::Disconnected).is_for(&child2));
    assert!(
        t0.elapsed() < Duration::from_millis(30),
        "held {:?} for another QP's completion",
        t0.elapsed()
    );
    assert_eq!(state(&child2), QpState::Err);
    // The other connection's message is still there, and it stays up.
    assert_eq!(state(&child1), QpState::Rts);
    let mut got = Vec::new();
    child1.recv_cq().unwrap().poll(&mut got, 4).unwrap();
    assert_eq!((got[0].wr_id, got[0].status), (5, WcStatus::Success));
}

/// The peer's DREQ comes while the completion of its last message waits in
/// the CQ: DISCONNECTED waits for the poll that finds the CQ empty (as on a
/// NIC, where the message's completion is there long before the DREQ), so
/// an application that reads its CQ and then its events (libfabric's rxm)
/// takes the message before it closes the connection.
#[test]
fn disconnected_waits_for_the_poll_of_the_last_message() {
    let (ca, cb) = two_devices(27, 28);
    let (cha, chb, dst) = channels(&ca, &cb, 7481);
    let _l = listener(&chb, TCP_RC, dst, 8);
    let (client, child, _mb) = sent_then_disconnected(&cha, &chb, dst);
    assert!(
        chb.get_event_timeout(Duration::from_millis(20))
            .unwrap()
            .is_none(),
        "DISCONNECTED before the message's completion was polled"
    );
    assert_eq!(state(&child), QpState::Rts, "the DREQ is not handled yet");
    let cq = child.recv_cq().unwrap();
    let mut got = Vec::new();
    cq.poll(&mut got, 4).unwrap();
    assert_eq!((got[0].wr_id, got[0].status), (5, WcStatus::Success));
    let t0 = Instant::now();
    assert_eq!(cq.poll(&mut got, 4).unwrap(), 0);
    assert!(expect(&chb, EventKind::Disconnected).is_for(&child));
    assert!(
        t0.elapsed() < Duration::from_millis(40),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(state(&child), QpState::Err);
    assert!(expect(&cha, EventKind::Disconnected).is_for(&client));
}

/// With nobody polling, the held DREQ goes after the hold (50 ms), and the
/// message's completion is still in the CQ.
#[test]
fn disconnected_comes_without_a_poll_after_the_hold() {
    let (ca, cb) = two_devices(29, 30);
    let (cha, chb, dst) = channels(&ca, &cb, 7482);
    let _l = listener(&chb, TCP_RC, dst, 8);
    let (client, child, _mb) = sent_then_disconnected(&cha, &chb, dst);
    let t0 = Instant::now();
    assert!(expect(&chb, EventKind::Disconnected).is_for(&child));
    // (The DREQ left in `disconnect`, just before `t0`.)
    assert!(
        t0.elapsed() >= Duration::from_millis(45),
        "{:?}",
        t0.elapsed()
    );
    assert!(expect(&cha, EventKind::Disconnected).is_for(&client));
    let got = child.recv_cq().unwrap().poll_blocking(1, T).unwrap();
    assert_eq!((got[0].wr_id, got[0].status), (5, WcStatus::Success));
}

#[test]
fn migrate_moves_events_to_another_channel() {
    let (ca, cb) = two_devices(21, 22);
    let (cha, chb, dst) = channels(&ca, &cb, 7475);
    let cha2 = EventChannel::new(&ca).unwrap();
    let chb2 = EventChannel::new(&cb).unwrap();
    let _l = listener(&chb, TCP_RC, dst, 8);
    let id = CmId::new(&cha, PortSpace::Tcp, QpType::Rc).unwrap();
    id.migrate(&cha2).unwrap();
    assert!(!id.is_sync());
    id.resolve_addr(None, dst, Duration::from_secs(2)).unwrap();
    assert!(expect(&cha2, EventKind::AddrResolved).is_for(&id));
    assert!(cha.try_get_event().unwrap().is_none());
    // Migrating back and forth, and an accepted id to its own channel.
    id.migrate(&cha).unwrap();
    id.resolve_route(Duration::from_secs(1)).unwrap();
    expect(&cha, EventKind::RouteResolved);
    id.create_qp(None, &QpOptions::default()).unwrap();
    id.connect(&conn_param(&[])).unwrap();
    let child = expect(&chb, EventKind::ConnectRequest)
        .take_new_id()
        .unwrap();
    child.migrate(&chb2).unwrap();
    child.create_qp(None, &QpOptions::default()).unwrap();
    child.accept(&conn_param(&[])).unwrap();
    expect(&cha, EventKind::Established);
    assert!(expect(&chb2, EventKind::Established).is_for(&child));
    id.disconnect().unwrap();
    expect(&chb2, EventKind::Disconnected);
    assert!(chb.try_get_event().unwrap().is_none());
    // A channel of another device is refused.
    assert!(id.migrate(&chb).is_err());
}

#[test]
fn ids_without_qps_connect_with_init_qp_attr_and_establish() {
    let (ca, cb) = two_devices(21, 22);
    let (cha, chb, dst) = channels(&ca, &cb, 7476);
    let _l = listener(&chb, TCP_RC, dst, 8);
    let client = resolved(&cha, TCP_RC, dst);
    client.set_option(CmOption::AckTimeout(18)).unwrap();
    client.set_option(CmOption::Tos(0x20)).unwrap();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (cqa, cqb) = (
        ca.create_cq(16, None).unwrap(),
        cb.create_cq(16, None).unwrap(),
    );
    let qa = pa.create_qp(&QpInit::new(QpType::Rc, &cqa, &cqa)).unwrap();
    let qb = pb.create_qp(&QpInit::new(QpType::Rc, &cqb, &cqb)).unwrap();
    // Before a connection only INIT is known.
    let (a, m) = client.init_qp_attr(QpState::Init).unwrap();
    assert!(m.contains(QpAttrMask::ACCESS_FLAGS | QpAttrMask::PORT));
    qa.modify(&a, m).unwrap();
    assert!(client.init_qp_attr(QpState::Rtr).is_err());

    let mut p = conn_param(b"qp-less");
    p.qp_num = qa.qpn();
    client.connect(&p).unwrap();
    let mut req = expect(&chb, EventKind::ConnectRequest);
    assert_eq!(req.conn_param().unwrap().qp_num, qa.qpn());
    let child = req.take_new_id().unwrap();
    // The passive side connects its QP itself before accepting (rping -q).
    for s in [QpState::Init, QpState::Rtr, QpState::Rts] {
        let (a, m) = child.init_qp_attr(s).unwrap();
        qb.modify(&a, m).unwrap();
    }
    let (rtr, _) = child.init_qp_attr(QpState::Rtr).unwrap();
    assert_eq!(rtr.dest_qp_num, qa.qpn());
    assert_eq!(rtr.ah_attr.dest_ip(), ca.local_addr().ip());
    let mut p = conn_param(b"ok");
    p.qp_num = qb.qpn();
    child.accept(&p).unwrap();
    // Without a QP on the id the reply is CONNECT_RESPONSE, not ESTABLISHED.
    let resp = expect(&cha, EventKind::ConnectResponse);
    assert_eq!(&resp.private_data()[..2], b"ok");
    assert_eq!(resp.conn_param().unwrap().qp_num, qb.qpn());
    let (rtr, m) = client.init_qp_attr(QpState::Rtr).unwrap();
    assert_eq!(rtr.dest_qp_num, qb.qpn());
    assert_eq!(rtr.ah_attr.traffic_class, 0x20, "TOS option");
    assert!(m.contains(QpAttrMask::AV | QpAttrMask::DEST_QPN | QpAttrMask::RQ_PSN));
    qa.modify(&rtr, m).unwrap();
    let (rts, m) = client.init_qp_attr(QpState::Rts).unwrap();
    assert_eq!(rts.timeout, 18, "ACK timeout option");
    assert!(m.contains(QpAttrMask::SQ_PSN | QpAttrMask::TIMEOUT));
    qa.modify(&rts, m).unwrap();
    // PSNs agree both ways.
    let (brts, _) = child.init_qp_attr(QpState::Rts).unwrap();
    let (brtr, _) = child.init_qp_attr(QpState::Rtr).unwrap();
    assert_eq!(rtr.rq_psn, brts.sq_psn);
    assert_eq!(rts.sq_psn, brtr.rq_psn);
    assert_eq!(
        qb.query().unwrap().sq_psn,
        rtr.rq_psn,
        "the PSN reported before accept is the one the REP carried"
    );
    client.establish().unwrap();
    assert!(expect(&chb, EventKind::Established).is_for(&child));

    // Traffic over the self-connected QPs.
    let ma = pa.register(b"self-made QPs", Access::LOCAL_WRITE).unwrap();
    let mb = pb.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    qb.post_recv(RecvWr {
        wr_id: 1,
        sgl: [mb.sge(0, 64).unwrap()].into(),
    })
    .unwrap();
    let mut s = SendWr::new(2, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [ma.sge(0, 13).unwrap()].into();
    qa.post_send(s).unwrap();
    assert_eq!(
        cqa.poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    let rx = cqb.poll_blocking(1, T).unwrap();
    assert_eq!((rx[0].status, rx[0].byte_len), (WcStatus::Success, 13));
    assert_eq!(mb.to_vec(0, 13).unwrap(), b"self-made QPs".to_vec());
    // And back.
    qa.post_recv(RecvWr {
        wr_id: 3,
        sgl: [ma.sge(0, 13).unwrap()].into(),
    })
    .unwrap();
    mb.write(0, b"...both ways!").unwrap();
    let mut s = SendWr::new(4, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [mb.sge(0, 13).unwrap()].into();
    qb.post_send(s).unwrap();
    assert_eq!(
        cqb.poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    assert_eq!(
        cqa.poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    assert_eq!(ma.to_vec(0, 13).unwrap(), b"...both ways!".to_vec());
}

#[test]
fn dropping_an_unaccepted_request_rejects_it() {
    let (ca, cb) = two_devices(21, 22);
    let (cha, chb, dst) = channels(&ca, &cb, 7477);
    let _l = listener(&chb, TCP_RC, dst, 8);
    let client = resolved(&cha, TCP_RC, dst);
    client.create_qp(None, &QpOptions::default()).unwrap();
    client.connect(&conn_param(&[])).unwrap();
    drop(expect(&chb, EventKind::ConnectRequest));
    let e = expect(&cha, EventKind::Rejected);
    assert_eq!(e.status(), 28);
    // And the server hears nothing more of it (no retransmitted request).
    assert!(
        chb.get_event_timeout(Duration::from_millis(600))
            .unwrap()
            .is_none()
    );
}

#[test]
fn silent_peer_is_unreachable() {
    // A "device" that receives and never answers: address resolution
    // succeeds (no ICMP), the REQ is retransmitted, then UNREACHABLE.
    let port = free_udp_port();
    let ca = device(24, port);
    let silent = std::net::UdpSocket::bind(SocketAddr::new(ip(25), port)).unwrap();
    let ch = EventChannel::new(&ca).unwrap();
    let client = resolved(&ch, TCP_RC, SocketAddr::new(ip(25), 7478));
    client.create_qp(None, &QpOptions::default()).unwrap();
    client.connect(&conn_param(&[])).unwrap();
    let t0 = Instant::now();
    let e = ch
        .get_event_timeout(Duration::from_secs(30))
        .unwrap()
        .expect("UNREACHABLE within 30 s");
    assert_eq!(e.kind(), EventKind::Unreachable, "{e:?}");
    assert!(e.status() < 0);
    assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
    // The silent peer saw the probe and the REQ with its retransmissions.
    silent.set_nonblocking(true).unwrap();
    let mut n = 0;
    let mut b = [0u8; 512];
    while silent.recv(&mut b).is_ok() {
        n += 1;
    }
    assert_eq!(n, 1 + 7, "probe, REQ and 6 retransmissions");
}

#[test]
fn non_blocking_timed_and_fd_waits() {
    let (ca, cb) = two_devices(21, 22);
    let ch = EventChannel::new(&ca).unwrap();
    assert!(ch.try_get_event().unwrap().is_none());
    let t0 = Instant::now();
    assert!(
        ch.get_event_timeout(Duration::from_millis(30))
            .unwrap()
            .is_none()
    );
    assert!(t0.elapsed() >= Duration::from_millis(30));
    let id = ch.create_id(PortSpace::Tcp, QpType::Rc).unwrap();
    id.resolve_addr(
        None,
        SocketAddr::new(cb.local_addr().ip(), 1),
        Duration::from_secs(2),
    )
    .unwrap();
    // The channel is a real fd: poll(2) it, then read without blocking.
    let mut p = libc::pollfd {
        fd: ch.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for the duration of the call.
    let r = unsafe { libc::poll(&mut p, 1, T.as_millis() as i32) };
    assert_eq!(r, 1);
    let e = ch
        .try_get_event()
        .unwrap()
        .expect("readable means an event");
    assert_eq!(e.kind(), EventKind::AddrResolved);
    assert!(ch.try_get_event().unwrap().is_none());
    // A blocked reader is woken by an event from another thread's call.
    let ch2 = ch.clone();
    let waiter = std::thread::spawn(move || ch2.get_event().unwrap().kind());
    id.resolve_route(Duration::from_secs(1)).unwrap();
    assert_eq!(waiter.join().unwrap(), EventKind::RouteResolved);
}

#[test]
fn binding_addresses_options_and_misuse() {
    let port = free_udp_port();
    let ca = device(26, port);
    let me = ca.local_addr().ip();
    let ch = EventChannel::new(&ca).unwrap();
    let a = ch.create_id(PortSpace::Tcp, QpType::Rc).unwrap();
    let b = ch.create_id(PortSpace::Tcp, QpType::Rc).unwrap();
    a.bind_addr(SocketAddr::new(me, 7000)).unwrap();
    assert_eq!(a.local_addr(), Some(SocketAddr::new(me, 7000)));
    assert_eq!(a.peer_addr(), None);
    let e = b.bind_addr(SocketAddr::new(me, 7000)).unwrap_err();
    assert_eq!(e.errno(), libc::EADDRINUSE, "{e}");
    let e = b
        .bind_addr(SocketAddr::new(IpAddr::from([10, 9, 8, 7]), 7001))
        .unwrap_err();
    assert_eq!(e.errno(), libc::EADDRNOTAVAIL, "{e}");
    // The port is free again once its id is gone; UDP ports are separate.
    drop(a);
    b.bind_addr(SocketAddr::new(me, 7000)).unwrap();
    let u = ch.create_id(PortSpace::Udp, QpType::Ud).unwrap();
    u.bind_addr(SocketAddr::new(me, 7000)).unwrap();
    // Port 0 picks one.
    let c = ch.create_id(PortSpace::Tcp, QpType::Rc).unwrap();
    c.bind_addr(SocketAddr::new(me, 0)).unwrap();
    assert_ne!(c.local_addr().unwrap().port(), 0);

    // Options are stored.
    c.set_option(CmOption::Tos(0x10)).unwrap();
    c.set_option(CmOption::ReuseAddr(true)).unwrap();
    c.set_option(CmOption::AckTimeout(20)).unwrap();
    assert_eq!(
        c.set_option(CmOption::AckTimeout(32)).unwrap_err().errno(),
        libc::EINVAL
    );
    let o = c.options();
    assert_eq!(
        (o.tos, o.ack_timeout, o.reuse_addr),
        (Some(0x10), Some(20), true)
    );

    // Misuse is refused with EINVAL.
    assert!(CmId::new(&ch, PortSpace::Udp, QpType::Rc).is_err());
    assert!(CmId::new(&ch, PortSpace::Tcp, QpType::Ud).is_err());
    assert_eq!(
        c.connect(&conn_param(&[])).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(
        c.accept(&conn_param(&[])).unwrap_err().errno(),
        libc::EINVAL
    );
    assert_eq!(c.reject(&[]).unwrap_err().errno(), libc::EINVAL);
    assert_eq!(c.establish().unwrap_err().errno(), libc::EINVAL);
    assert!(
        c.get_request().is_err(),
        "get_request needs a synchronous id"
    );
    c.create_qp(None, &QpOptions::default()).unwrap();
    assert!(c.create_qp(None, &QpOptions::default()).is_err());
    let (init, m) = c.init_qp_attr(QpState::Init).unwrap();
    assert_eq!(
        m,
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS
    );
    assert!(
        init.qp_access_flags
            .contains(Access::REMOTE_WRITE | Access::REMOTE_READ)
    );
    assert!(c.init_qp_attr(QpState::Rtr).is_err());
    assert!(c.init_qp_attr(QpState::Sqd).is_err());
    // The default PD is shared by the ids of a device; QPs start in INIT.
    b.create_qp(None, &QpOptions::default()).unwrap();
    assert_eq!(
        format!("{:?}", b.pd().unwrap()),
        format!("{:?}", c.pd().unwrap())
    );
    assert_eq!(state(&b), QpState::Init);
    assert!(
        b.comp_channel().is_some(),
        "CQs made with the QP report to a channel"
    );
    let mut b = b;
    b.destroy_qp();
    assert!(b.qp().is_none());
    b.create_qp(None, &QpOptions::default()).unwrap();
    // A PD of another device is refused.
    let other = device(27, port);
    let pd = other.alloc_pd().unwrap();
    let d = ch.create_id(PortSpace::Tcp, QpType::Rc).unwrap();
    assert!(d.create_qp(Some(&pd), &QpOptions::default()).is_err());
}

#[test]
fn uc_connection_inherits_the_transport_and_writes() {
    let (ca, cb) = two_devices(21, 22);
    let (cha, chb, dst) = channels(&ca, &cb, 7479);
    let _l = listener(&chb, TCP_UC, dst, 1);
    let client = resolved(&cha, TCP_UC, dst);
    assert_eq!(
        client
            .create_qp(None, &QpOptions::default())
            .unwrap()
            .qp_type(),
        QpType::Uc
    );
    let ma = client
        .pd()
        .unwrap()
        .register(&pattern(5000, 3), Access::LOCAL_WRITE)
        .unwrap();
    client.connect(&conn_param(&[])).unwrap();
    let child = expect(&chb, EventKind::ConnectRequest)
        .take_new_id()
        .unwrap();
    assert_eq!(
        child.qp_type(),
        QpType::Uc,
        "a request inherits its listener's transport"
    );
    assert_eq!(
        child
            .create_qp(None, &QpOptions::default())
            .unwrap()
            .qp_type(),
        QpType::Uc
    );
    let (_, m) = child.init_qp_attr(QpState::Rtr).unwrap();
    assert!(
        !m.contains(QpAttrMask::MAX_DEST_RD_ATOMIC),
        "UC RTR has no READ depth"
    );
    let mb = child
        .pd()
        .unwrap()
        .alloc_mr(8192, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let desc = buf_desc(mb.addr(), mb.rkey(), 8192);
    child.accept(&conn_param(&desc)).unwrap();
    let est = expect(&cha, EventKind::Established);
    expect(&chb, EventKind::Established);
    let (addr, rkey, _) = parse_desc(est.private_data());
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [ma.sge(0, 5000).unwrap()].into();
    w.remote_addr = addr + 100;
    w.rkey = rkey;
    client.qp().unwrap().post_send(w).unwrap();
    assert_eq!(
        client.send_cq().unwrap().poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    // UC has no acknowledgements: wait for the bytes themselves.
    let t0 = Instant::now();
    while mb.to_vec(100, 5000).unwrap() != pattern(5000, 3) {
        assert!(t0.elapsed() < T, "the WRITE never landed");
        std::thread::yield_now();
    }
}
