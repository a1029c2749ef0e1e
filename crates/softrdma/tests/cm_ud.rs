//! `softrdma::cm` for UD: SIDR resolution of a service to a QPN and Q_Key,
//! datagrams over the result, multicast joins.

mod cm_common;
mod common;

use cm_common::*;
use common::free_udp_port;
use softrdma::cm::*;
use softrdma::verbs::*;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

#[test]
fn sidr_resolves_the_service_and_datagrams_flow_both_ways() {
    let (ca, cb) = two_devices(41, 42);
    let (cha, chb, dst) = channels(&ca, &cb, 7174);
    let l = listener(&chb, UDP_UD, dst, 4);

    let client = resolved(&cha, UDP_UD, dst);
    let cqpn = client.create_qp(None, &QpOptions::default()).unwrap().qpn();
    let qa = client.qp().unwrap().query().unwrap();
    assert_eq!(qa.qp_state, QpState::Rts, "UD QPs are ready at once");
    assert_eq!(qa.qkey, RDMA_UDP_QKEY);
    client.connect(&conn_param(b"udp hello")).unwrap();

    let mut req = expect(&chb, EventKind::ConnectRequest);
    assert_eq!(req.listen_id(), Some(l.handle()));
    let ud = req
        .ud_param()
        .expect("SIDR requests carry UD parameters")
        .clone();
    assert_eq!(&ud.private_data[..9], b"udp hello");
    assert_eq!(ud.ah_attr.dest_ip(), ca.local_addr().ip());
    let child = req.take_new_id().unwrap();
    assert_eq!(child.port_space(), PortSpace::Udp);
    assert_eq!(child.qp_type(), QpType::Ud);
    let sqpn = child.create_qp(None, &QpOptions::default()).unwrap().qpn();
    let mb = child
        .pd()
        .unwrap()
        .alloc_mr(4096, Access::LOCAL_WRITE)
        .unwrap();
    child
        .qp()
        .unwrap()
        .post_recv(RecvWr {
            wr_id: 1,
            sgl: [mb.sge(0, 40 + 1024).unwrap()].into(),
        })
        .unwrap();
    child.accept(&conn_param(b"sidr ok")).unwrap();
    assert!(
        chb.get_event_timeout(Duration::from_millis(50))
            .unwrap()
            .is_none(),
        "the passive side of SIDR gets no event"
    );

    let est = expect(&cha, EventKind::Established);
    let to_server = est.ud_param().expect("UD parameters").clone();
    assert_eq!(to_server.qp_num, sqpn);
    assert_eq!(to_server.qkey, RDMA_UDP_QKEY);
    assert_eq!(to_server.ah_attr.dest_ip(), cb.local_addr().ip());
    assert_eq!(&to_server.private_data[..7], b"sidr ok");

    // A datagram to the resolved QPN and Q_Key.
    let pa = client.pd().unwrap();
    let ma = pa.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    ma.write(0, b"datagram via SIDR").unwrap();
    let ah = pa.create_ah(to_server.ah_attr).unwrap();
    let mut s = SendWr::new(2, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [ma.sge(0, 17).unwrap()].into();
    s.ud = Some(ah.dest(to_server.qp_num, to_server.qkey));
    client.qp().unwrap().post_send(s).unwrap();
    assert_eq!(
        client.send_cq().unwrap().poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    let rx = child.recv_cq().unwrap().poll_blocking(1, T).unwrap();
    assert_eq!(rx[0].status, WcStatus::Success);
    assert_eq!(rx[0].byte_len, 40 + 17);
    assert_eq!(rx[0].src_qp, cqpn);
    assert_eq!(mb.to_vec(40, 17).unwrap(), b"datagram via SIDR".to_vec());

    // The reply goes back along the request's address and the sender's QPN.
    client
        .qp()
        .unwrap()
        .post_recv(RecvWr {
            wr_id: 3,
            sgl: [ma.sge(1024, 40 + 64).unwrap()].into(),
        })
        .unwrap();
    let back = child.pd().unwrap().create_ah(ud.ah_attr).unwrap();
    mb.write(2048, b"reply").unwrap();
    let mut s = SendWr::new(4, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [mb.sge(2048, 5).unwrap()].into();
    s.ud = Some(back.dest(rx[0].src_qp, RDMA_UDP_QKEY));
    child.qp().unwrap().post_send(s).unwrap();
    let rx = client.recv_cq().unwrap().poll_blocking(1, T).unwrap();
    assert_eq!((rx[0].status, rx[0].src_qp), (WcStatus::Success, sqpn));
    assert_eq!(ma.to_vec(1024 + 40, 5).unwrap(), b"reply".to_vec());
}

#[test]
fn sidr_reject_and_missing_service() {
    let (ca, cb) = two_devices(41, 42);
    let chb = EventChannel::new(&cb).unwrap();
    let dst = SocketAddr::new(cb.local_addr().ip(), 7175);
    let l = listener(&chb, UDP_UD, dst, 4);
    let client = resolved_sync(&ca, UDP_UD, dst);
    let server = std::thread::spawn(move || {
        let mut req = expect(&chb, EventKind::ConnectRequest);
        req.take_new_id().unwrap().reject(b"no room").unwrap();
        (l, chb)
    });
    match client.connect(&conn_param(&[])) {
        Err(Error::Rejected { private_data, .. }) => assert_eq!(&private_data[..7], b"no room"),
        other => panic!("{other:?}"),
    }
    let _ = server.join().unwrap();
    // Nobody on the port: SIDR answers "unsupported service".
    let other = resolved_sync(&ca, UDP_UD, SocketAddr::new(cb.local_addr().ip(), 7999));
    let e = other.connect(&conn_param(&[])).unwrap_err();
    assert!(matches!(e, Error::Unreachable { .. }), "{e:?}");
}

#[test]
fn multicast_join_reports_the_group() {
    let port = free_udp_port();
    let ca = device(43, port);
    let ch = EventChannel::new(&ca).unwrap();
    let group = IpAddr::V4(Ipv4Addr::new(224, 1, 2, 3));
    let id = CmId::new(&ch, PortSpace::Udp, QpType::Ud).unwrap();
    id.resolve_addr(None, SocketAddr::new(group, 0), Duration::from_secs(2))
        .unwrap();
    expect(&ch, EventKind::AddrResolved);
    id.create_qp(None, &QpOptions::default()).unwrap();
    id.join_multicast(group).unwrap();
    let e = expect(&ch, EventKind::MulticastJoin);
    assert!(e.is_for(&id));
    assert_eq!(e.status(), 0);
    let ud = e.ud_param().expect("a join carries UD parameters");
    assert_eq!(ud.ah_attr.dest_ip(), group);
    assert!(ud.ah_attr.is_global);
    assert_eq!(ud.qp_num, 0xFF_FFFF);
    assert_eq!(ud.qkey, RDMA_UDP_QKEY);
    id.leave_multicast(group).unwrap();
    assert!(id.leave_multicast(group).is_err(), "not a member any more");
    assert!(id.join_multicast(ca.local_addr().ip()).is_err());
    // A synchronous id waits for the join.
    let s = CmId::new_sync(&ca, PortSpace::Udp, QpType::Ud).unwrap();
    s.set_sync_timeout(Some(T));
    s.join_multicast(group).unwrap();
    let e = s.last_event().unwrap();
    assert_eq!(e.kind(), EventKind::MulticastJoin);
    assert_eq!(e.ud_param().unwrap().qp_num, 0xFF_FFFF);
}

/// A UD id on `ctx` that joined `group`, with a receive posted.
fn member(ctx: &Context, group: IpAddr, block_self: bool) -> (CmId, EventChannel, UdParam, Mr) {
    let ch = EventChannel::new(ctx).unwrap();
    let id = CmId::new(&ch, PortSpace::Udp, QpType::Ud).unwrap();
    id.resolve_addr(None, SocketAddr::new(group, 0), Duration::from_secs(2))
        .unwrap();
    expect(&ch, EventKind::AddrResolved);
    let opts = QpOptions {
        block_self_mcast_lb: block_self,
        ..QpOptions::default()
    };
    id.create_qp(None, &opts).unwrap();
    let mr = id
        .pd()
        .unwrap()
        .alloc_mr(4096, Access::LOCAL_WRITE)
        .unwrap();
    id.qp()
        .unwrap()
        .post_recv(RecvWr {
            wr_id: 1,
            sgl: [mr.sge(0, 40 + 256).unwrap()].into(),
        })
        .unwrap();
    id.join_multicast(group).unwrap();
    let ud = expect(&ch, EventKind::MulticastJoin)
        .ud_param()
        .unwrap()
        .clone();
    (id, ch, ud, mr)
}

#[test]
fn multicast_datagrams_reach_every_member() {
    let port = free_udp_port();
    let (ca, cb, cc) = (device(44, port), device(45, port), device(46, port));
    let group = IpAddr::V4(Ipv4Addr::new(239, 7, 7, 7));
    let (a, _cha, ud, ma) = member(&ca, group, true);
    let (b, _chb, _, mb) = member(&cb, group, false);
    let (c, _chc, _, mc) = member(&cc, group, false);
    ma.write(1024, b"to the group").unwrap();
    let ah = a.pd().unwrap().create_ah(ud.ah_attr).unwrap();
    let mut s = SendWr::new(2, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [ma.sge(1024, 12).unwrap()].into();
    s.ud = Some(ah.dest(ud.qp_num, ud.qkey));
    a.qp().unwrap().post_send(s).unwrap();
    assert_eq!(
        a.send_cq().unwrap().poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    let aqpn = a.qp().unwrap().qpn();
    for (id, mr) in [(&b, &mb), (&c, &mc)] {
        let wc = id.recv_cq().unwrap().poll_blocking(1, T).unwrap();
        assert_eq!((wc[0].status, wc[0].byte_len), (WcStatus::Success, 40 + 12));
        assert_eq!(wc[0].src_qp, aqpn);
        assert_eq!(mr.to_vec(40, 12).unwrap(), b"to the group".to_vec());
    }
    // The sender blocked its own copy (checked after the others got theirs).
    assert!(a.recv_cq().unwrap().poll_one().unwrap().is_none());
    // After leaving, c gets nothing more; b still does.
    c.leave_multicast(group).unwrap();
    c.qp()
        .unwrap()
        .post_recv(RecvWr {
            wr_id: 3,
            sgl: [mc.sge(0, 40 + 256).unwrap()].into(),
        })
        .unwrap();
    b.qp()
        .unwrap()
        .post_recv(RecvWr {
            wr_id: 4,
            sgl: [mb.sge(0, 40 + 256).unwrap()].into(),
        })
        .unwrap();
    let mut s = SendWr::new(5, WrOpcode::Send);
    s.sgl = [ma.sge(1024, 12).unwrap()].into();
    s.ud = Some(ah.dest(ud.qp_num, ud.qkey));
    a.qp().unwrap().post_send(s).unwrap();
    assert_eq!(
        b.recv_cq().unwrap().poll_blocking(1, T).unwrap()[0].wr_id,
        4
    );
    assert!(c.recv_cq().unwrap().poll_one().unwrap().is_none());
}
