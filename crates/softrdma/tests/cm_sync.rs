//! Synchronous use of `softrdma::cm`: getaddrinfo, endpoints
//! (create_ep / get_request), and the Connector/Acceptor layer.

mod cm_common;
mod common;

use cm_common::*;
use common::free_udp_port;
use softrdma::cm::*;
use softrdma::verbs::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

#[test]
fn getaddrinfo_passive_active_names_and_errors() {
    let passive = AddrInfoHints {
        passive: true,
        ..AddrInfoHints::default()
    };
    let ai = getaddrinfo(None, Some("7471"), &passive).unwrap();
    assert!(ai.passive);
    assert_eq!(
        ai.src,
        Some("0.0.0.0:7471".parse().unwrap()),
        "passive + no node: wildcard"
    );
    assert_eq!(ai.dst, None);
    assert_eq!((ai.port_space, ai.qp_type), (PortSpace::Tcp, QpType::Rc));
    let v6 = AddrInfoHints {
        family: AddrFamily::V6,
        ..passive.clone()
    };
    assert_eq!(
        getaddrinfo(None, Some("7471"), &v6).unwrap().src,
        Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), 7471))
    );
    let ai = getaddrinfo(Some("127.0.0.5"), Some("7471"), &passive).unwrap();
    assert_eq!(ai.src, Some("127.0.0.5:7471".parse().unwrap()));

    let active = AddrInfoHints::default();
    let ai = getaddrinfo(Some("127.0.0.6"), Some("18515"), &active).unwrap();
    assert!(!ai.passive);
    assert_eq!(ai.dst, Some("127.0.0.6:18515".parse().unwrap()));
    assert_eq!(ai.src, None);
    assert_eq!(ai.canonname, None);
    let with_src = AddrInfoHints {
        src: Some("127.0.0.7:0".parse().unwrap()),
        ..active.clone()
    };
    assert_eq!(
        getaddrinfo(Some("127.0.0.6"), Some("1"), &with_src)
            .unwrap()
            .src,
        with_src.src
    );
    let ud = AddrInfoHints {
        port_space: PortSpace::Udp,
        ..active.clone()
    };
    assert_eq!(
        getaddrinfo(Some("::1"), None, &ud).unwrap().qp_type,
        QpType::Ud
    );
    assert_eq!(
        getaddrinfo(Some("[::1]"), Some("9"), &ud).unwrap().dst,
        Some(SocketAddr::new(IpAddr::V6(Ipv6Addr::LOCALHOST), 9))
    );
    // Names through the system resolver, IPv4 preferred.
    let ai = getaddrinfo(Some("localhost"), Some("7471"), &active).unwrap();
    assert_eq!(
        ai.dst,
        Some(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7471))
    );
    assert_eq!(ai.canonname.as_deref(), Some("localhost"));
    // Active without a node: loopback.
    assert_eq!(
        getaddrinfo(None, Some("5"), &active).unwrap().dst,
        Some("127.0.0.1:5".parse().unwrap())
    );
    // Errors.
    let numeric = AddrInfoHints {
        numeric_host: true,
        ..active.clone()
    };
    assert!(matches!(
        getaddrinfo(Some("localhost"), None, &numeric),
        Err(Error::AddrInfo(_))
    ));
    let v4 = AddrInfoHints {
        family: AddrFamily::V4,
        ..active.clone()
    };
    assert!(getaddrinfo(Some("::1"), None, &v4).is_err());
    assert!(getaddrinfo(Some("127.0.0.1"), Some("no-such-service-x"), &active).is_err());
    assert!(getaddrinfo(Some("no-such-host.invalid"), Some("1"), &active).is_err());
}

#[test]
fn endpoints_connect_send_and_disconnect() {
    let (ca, cb) = two_devices(31, 32);
    let server_ip = cb.local_addr().ip().to_string();
    let passive = AddrInfoHints {
        passive: true,
        ..AddrInfoHints::default()
    };
    let ai = getaddrinfo(Some(&server_ip), Some("7471"), &passive).unwrap();
    let init = QpOptions::default();
    let listen = CmId::create_ep(&cb, &ai, None, Some(&init)).unwrap();
    assert!(listen.is_sync());
    assert!(listen.qp().is_none(), "a passive endpoint has no QP itself");
    listen.set_sync_timeout(Some(T));
    listen.listen(4).unwrap();
    let server = std::thread::spawn(move || {
        let child = listen.get_request().unwrap();
        assert!(child.is_sync());
        let req = child.last_event().unwrap();
        assert_eq!(req.kind(), EventKind::ConnectRequest);
        assert_eq!(&req.private_data()[..10], b"ep connect");
        let qp = child
            .qp()
            .expect("get_request creates the QP of the endpoint");
        let mr = child
            .pd()
            .unwrap()
            .alloc_mr(4096, Access::LOCAL_WRITE)
            .unwrap();
        qp.post_recv(RecvWr {
            wr_id: 7,
            sgl: [mr.sge(0, 4096).unwrap()].into(),
        })
        .unwrap();
        child.accept(&conn_param(b"ep accept")).unwrap();
        assert_eq!(child.last_event().unwrap().kind(), EventKind::Established);
        let rx = child.recv_cq().unwrap().poll_blocking(1, T).unwrap();
        assert_eq!((rx[0].wr_id, rx[0].status), (7, WcStatus::Success));
        let got = mr.to_vec(0, rx[0].byte_len as usize).unwrap();
        assert!(child.wait_disconnected(Some(T)).unwrap());
        assert_eq!(child.qp().unwrap().query().unwrap().qp_state, QpState::Err);
        // Disconnecting after the peer did returns at once.
        child.disconnect().unwrap();
        (got, listen)
    });

    let ai = getaddrinfo(Some(&server_ip), Some("7471"), &AddrInfoHints::default()).unwrap();
    let ep = CmId::create_ep(&ca, &ai, None, Some(&QpOptions::default())).unwrap();
    ep.set_sync_timeout(Some(T));
    assert_eq!(ep.peer_addr(), ai.dst);
    assert_eq!(ep.last_event().unwrap().kind(), EventKind::RouteResolved);
    assert_eq!(ep.qp().unwrap().query().unwrap().qp_state, QpState::Init);
    ep.connect(&conn_param(b"ep connect")).unwrap();
    let est = ep.last_event().unwrap();
    assert_eq!(est.kind(), EventKind::Established);
    assert_eq!(&est.private_data()[..9], b"ep accept");
    let data = pattern(3000, 9);
    let mr = ep
        .pd()
        .unwrap()
        .register(&data, Access::LOCAL_WRITE)
        .unwrap();
    let mut s = SendWr::new(1, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [mr.sge(0, 3000).unwrap()].into();
    ep.qp().unwrap().post_send(s).unwrap();
    assert_eq!(
        ep.send_cq().unwrap().poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    ep.disconnect().unwrap();
    assert_eq!(ep.last_event().unwrap().kind(), EventKind::Disconnected);
    let (got, _listen) = server.join().unwrap();
    assert_eq!(got, data);
}

#[test]
fn connector_and_acceptor_round_trip() {
    let (ca, cb) = two_devices(33, 34);
    let opts = ConnOptions {
        comp_channel: true,
        timeout: Some(T),
        ..ConnOptions::default()
    };
    let acceptor =
        Acceptor::bind_with(&cb, SocketAddr::new(cb.local_addr().ip(), 0), opts.clone()).unwrap();
    let at = acceptor.local_addr();
    assert_ne!(at.port(), 0, "port 0 picks one");
    let server = std::thread::spawn(move || {
        // First request: accepted, echoes what it receives with RDMA WRITE.
        let req = acceptor.incoming().unwrap();
        assert_eq!(&req.private_data()[..5], b"hello");
        assert!(req.peer_addr().is_some());
        let conn = req.accept(b"welcome").unwrap();
        assert_eq!(conn.qp().query().unwrap().qp_state, QpState::Rts);
        let mr = conn
            .pd()
            .alloc_mr(1 << 16, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
            .unwrap();
        // Wait through the completion channel (armed before the receive
        // can complete).
        conn.cq().req_notify(false).unwrap();
        conn.qp()
            .post_recv(RecvWr {
                wr_id: 1,
                sgl: [mr.sge(0, 1 << 16).unwrap()].into(),
            })
            .unwrap();
        let ch = conn.comp_channel().expect("comp_channel option");
        assert_eq!(ch.wait().unwrap(), conn.cq().id());
        let wc = conn.cq().poll_one().unwrap().unwrap();
        assert_eq!(wc.status, WcStatus::Success);
        let got = mr.to_vec(0, wc.byte_len as usize).unwrap();
        let (addr, rkey, _) = parse_desc(&got[..16]);
        let mut w = SendWr::new(2, WrOpcode::RdmaWrite);
        w.flags = SendFlags::SIGNALED;
        w.sgl = [mr.sge(16, got.len() - 16).unwrap()].into();
        w.remote_addr = addr;
        w.rkey = rkey;
        conn.qp().post_send(w).unwrap();
        assert_eq!(
            conn.cq().poll_blocking(1, T).unwrap()[0].status,
            WcStatus::Success
        );
        // Second request: rejected.
        acceptor.incoming().unwrap().reject(b"full").unwrap();
        assert!(conn.wait_disconnected(Some(T)).unwrap());
        assert_eq!(conn.qp().query().unwrap().qp_state, QpState::Err);
    });

    let connector = Connector::on(&ca).options(opts);
    let conn = connector.connect(at, b"hello").unwrap();
    assert_eq!(&conn.peer_private_data()[..7], b"welcome");
    assert_eq!(conn.peer_addr(), Some(at));
    assert_eq!(conn.local_addr().unwrap().ip(), ca.local_addr().ip());
    assert_ne!(conn.peer_param().qp_num, 0);
    let payload = pattern(20_000, 5);
    let landing = conn
        .pd()
        .alloc_mr(20_000, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let mut msg = buf_desc(landing.addr(), landing.rkey(), 20_000);
    msg.extend_from_slice(&payload);
    let out = conn.pd().register(&msg, Access::LOCAL_WRITE).unwrap();
    let mut s = SendWr::new(9, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [out.sge(0, msg.len()).unwrap()].into();
    conn.qp().post_send(s).unwrap();
    assert_eq!(
        conn.cq().poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    // The echo lands by RDMA WRITE; the rejection of the second connection
    // comes after it, so by then the bytes are there.
    match connector.connect(at, b"again") {
        Err(e @ Error::Rejected { reason: 28, .. }) => {
            assert_eq!(&e.rejected_private_data().unwrap()[..4], b"full");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(landing.to_vec(0, 20_000).unwrap(), payload);
    conn.disconnect().unwrap();
    assert_eq!(conn.qp().query().unwrap().qp_state, QpState::Err);
    server.join().unwrap();
}

#[test]
fn connector_to_nobody_is_refused() {
    let (ca, cb) = two_devices(35, 36);
    let c = Connector::on(&ca).options(ConnOptions {
        timeout: Some(T),
        ..ConnOptions::default()
    });
    let e = c
        .connect(SocketAddr::new(cb.local_addr().ip(), 4444), &[])
        .unwrap_err();
    assert!(matches!(e, Error::Rejected { reason: 8, .. }), "{e:?}");
    assert_eq!(e.errno(), libc::ECONNREFUSED);
    let e = c.connect(SocketAddr::new(ip(252), 4444), &[]).unwrap_err();
    assert!(matches!(e, Error::AddrError { .. }), "{e:?}");
    // Into the crate's error type, keeping the kind.
    let io: softrdma::Error = e.into();
    assert!(matches!(io, softrdma::Error::Io(_)));
    let ud = ConnOptions {
        qp_type: QpType::Ud,
        ..ConnOptions::default()
    };
    assert!(
        Connector::on(&ca)
            .options(ud.clone())
            .connect(ca.local_addr(), &[])
            .is_err()
    );
    assert!(Acceptor::bind_with(&ca, ca.local_addr(), ud).is_err());
}

#[test]
fn handles_are_send_and_sync() {
    fn both<T: Send + Sync>() {}
    both::<CmId>();
    both::<EventChannel>();
    both::<CmEvent>();
    both::<Connection>();
    both::<Acceptor>();
    both::<Incoming>();
    both::<Connector>();
    both::<Error>();
}

#[test]
fn acceptor_timeout_bounds_the_wait_for_a_request() {
    let port = free_udp_port();
    let cb = device(38, port);
    let opts = ConnOptions {
        timeout: Some(std::time::Duration::from_millis(50)),
        ..ConnOptions::default()
    };
    let acceptor = Acceptor::bind_with(&cb, SocketAddr::new(ip(38), 0), opts).unwrap();
    match acceptor.incoming() {
        Err(e @ Error::TimedOut(_)) => assert_eq!(e.errno(), libc::ETIMEDOUT),
        other => panic!("{other:?}"),
    }
    // Without the limit, a request arriving later is served.
    acceptor.listener().set_sync_timeout(None);
    let ca = device(39, port);
    let at = acceptor.local_addr();
    let server = std::thread::spawn(move || acceptor.accept().map(|_| ()));
    let c = Connector::on(&ca).connect(at, &[]).unwrap();
    server.join().unwrap().unwrap();
    drop(c);
}
