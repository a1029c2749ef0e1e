//! Issue 12: `softrdma::cm` over the rdma-core backend (librdmacm loaded at
//! run time; softrdma's drop-in `target/compat/librdmacm.so.1` as "the
//! system's"), against peers on the native backend, both ways: RC through
//! `Acceptor`/`Connector` (a rejection, private data, SEND, WRITE, READ, an
//! atomic, disconnection flushing the peer), UD through the SIDR exchange of
//! an event channel, and (feature `tokio`) the async variants with a
//! completion channel waited on asynchronously.

mod backend_common;
mod cm_common;
mod common;

use backend_common::{Side, addr_pair, check_backend_line, child, pair, role};
use cm_common::{T, UDP_UD, expect, listener, resolved};
use common::loopback::ALL;
use common::{Proc, free_udp_port};
use softrdma::cm::*;
use softrdma::verbs::*;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, Ordering};

/// Runs child test `child_<kind>_server` on `server` and, once it listens,
/// `child_<kind>_client` on `client`.
fn cm_pair(kind: &str, server: Side, client: Side) {
    let (server_test, client_test) = (
        &format!("child_{kind}_server"),
        &format!("child_{kind}_client"),
    );
    static PORT: AtomicU16 = AtomicU16::new(0);
    let (sa, ca) = addr_pair(30);
    let udp = free_udp_port();
    let cm_port = 7400 + PORT.fetch_add(1, Ordering::SeqCst);
    let mut s = child(server_test, "server", server, &sa, udp);
    s.env("CM_PORT", cm_port.to_string());
    let s = Proc::spawn(&format!("{server_test} ({})", server.name()), s);
    let (so, co) = pair(s, "LISTENING", || {
        let mut c = child(client_test, "client", client, &ca, udp);
        c.env("CM_SERVER", format!("{sa}:{cm_port}"));
        Proc::spawn(&format!("{client_test} ({})", client.name()), c)
    });
    for (o, side) in [(&so, server), (&co, client)] {
        check_backend_line(o, side);
        assert!(o.stdout.contains("1 passed"), "the child ran no test\n{o}");
    }
}

fn env<T: std::str::FromStr>(k: &str) -> T {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{k} is not set"))
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(2_246_822_519) >> 23) as u8)
        .collect()
}

fn open() -> Context {
    let ctx = Context::open().unwrap();
    println!("backend: {}", ctx.backend_info());
    let want = std::env::var("SOFTRDMA_BACKEND").unwrap();
    assert_eq!(ctx.backend().to_string(), want);
    ctx
}

/// A server child's device and the address to listen on (port `CM_PORT`).
fn server_side() -> (Context, SocketAddr) {
    let ctx = open();
    let at = SocketAddr::new(ctx.local_addr().ip(), env("CM_PORT"));
    (ctx, at)
}

/// A client child's device and the server's address (`CM_SERVER`).
fn client_side() -> (Context, SocketAddr) {
    (open(), env("CM_SERVER"))
}

/// Connection options with the hang protection.
fn opts() -> ConnOptions {
    ConnOptions {
        timeout: Some(T),
        ..ConnOptions::default()
    }
}

/// Runs `f` to completion on a runtime of two worker threads.
#[cfg(feature = "tokio")]
fn block_on<F: Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

#[test]
fn rc_rdma_core_server_native_client() {
    cm_pair("rc", Side::RdmaCore, Side::Native);
}

#[test]
fn rc_native_server_rdma_core_client() {
    cm_pair("rc", Side::Native, Side::RdmaCore);
}

#[test]
fn rc_both_rdma_core() {
    cm_pair("rc", Side::RdmaCore, Side::RdmaCore);
}

#[test]
#[ignore = "child process of the rc_* tests"]
fn child_rc_server() {
    if role().is_none() {
        return;
    }
    let (ctx, at) = server_side();
    let acc = Acceptor::bind_with(&ctx, at, opts()).unwrap();
    assert_eq!(acc.local_addr().port(), at.port());
    println!("LISTENING");
    // The first request is rejected, with private data.
    let req = acc.incoming().unwrap();
    assert!(req.private_data().starts_with(b"first"));
    req.reject(b"not you").unwrap();
    // The second is accepted.
    let req = acc.incoming().unwrap();
    assert!(req.private_data().starts_with(b"hello"));
    assert!(req.peer_addr().is_some());
    let conn = req.accept(b"welcome").unwrap();
    assert_eq!(conn.qp().query().unwrap().qp_state, QpState::Rts);
    let mr = conn.pd().alloc_mr(1 << 17, ALL).unwrap();
    conn.qp()
        .post_recv(RecvWr {
            wr_id: 1,
            sgl: [mr.sge(0, 64).unwrap()].into(),
        })
        .unwrap();
    let wc = conn.cq().poll_blocking(1, T).unwrap()[0];
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (1, WcStatus::Success, 16)
    );
    let d = mr.to_vec(0, 16).unwrap();
    let addr = u64::from_le_bytes(d[..8].try_into().unwrap());
    let rkey = u32::from_le_bytes(d[8..12].try_into().unwrap());
    // WRITE a pattern into the client's buffer, READ it back, add to its counter.
    let pat = pattern(32768);
    mr.write(4096, &pat).unwrap();
    let mut w = SendWr::new(10, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [mr.sge(4096, 32768).unwrap()].into();
    (w.remote_addr, w.rkey) = (addr, rkey);
    let mut r = SendWr::new(11, WrOpcode::RdmaRead);
    r.flags = SendFlags::SIGNALED;
    r.sgl = [mr.sge(65536, 32768).unwrap()].into();
    (r.remote_addr, r.rkey) = (addr, rkey);
    let mut f = SendWr::new(12, WrOpcode::AtomicFetchAndAdd);
    f.flags = SendFlags::SIGNALED;
    f.sgl = [mr.sge(128, 8).unwrap()].into();
    (f.remote_addr, f.rkey, f.compare_add) = (addr + 32768, rkey, 5);
    let mut s = SendWr::new(13, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.inline = Some(b"done".to_vec());
    for wr in [w, r, f, s] {
        conn.qp().post_send(wr).unwrap();
    }
    let mut wcs = conn.cq().poll_blocking(4, T).unwrap();
    wcs.sort_by_key(|w| w.wr_id);
    for (w, id) in wcs.iter().zip(10..) {
        assert_eq!((w.wr_id, w.status), (id, WcStatus::Success), "{wcs:?}");
    }
    assert_eq!(mr.to_vec(65536, 32768).unwrap(), pat);
    assert_eq!(mr.to_vec(128, 8).unwrap(), 100u64.to_ne_bytes());
    // The client disconnects: our QP goes to ERR, the posted receive is flushed.
    conn.qp()
        .post_recv(RecvWr {
            wr_id: 9,
            sgl: [mr.sge(0, 64).unwrap()].into(),
        })
        .unwrap();
    assert!(conn.wait_disconnected(Some(T)).unwrap());
    let wc = conn.cq().poll_blocking(1, T).unwrap()[0];
    assert_eq!((wc.wr_id, wc.status), (9, WcStatus::WrFlushErr));
    assert_eq!(conn.qp().query().unwrap().qp_state, QpState::Err);
}

#[test]
#[ignore = "child process of the rc_* tests"]
fn child_rc_client() {
    if role().is_none() {
        return;
    }
    let (ctx, server) = client_side();
    let e = Connector::on(&ctx)
        .options(opts())
        .connect(server, b"first")
        .unwrap_err();
    assert!(matches!(e, Error::Rejected { .. }), "{e:?}");
    assert_eq!(e.errno(), 111); // ECONNREFUSED
    assert!(
        e.rejected_private_data()
            .is_some_and(|p| p.starts_with(b"not you"))
    );
    let conn = Connector::on(&ctx)
        .options(opts())
        .connect(server, b"hello")
        .unwrap();
    assert!(conn.peer_private_data().starts_with(b"welcome"));
    assert_eq!(conn.peer_addr(), Some(server));
    let mr = conn.pd().alloc_mr(65536, ALL).unwrap();
    mr.write(32768, &100u64.to_ne_bytes()).unwrap();
    conn.qp()
        .post_recv(RecvWr {
            wr_id: 1,
            sgl: [mr.sge(40000, 64).unwrap()].into(),
        })
        .unwrap();
    let mut desc = mr.addr().to_le_bytes().to_vec();
    desc.extend_from_slice(&mr.rkey().to_le_bytes());
    desc.extend_from_slice(&0u32.to_le_bytes());
    let out = conn.pd().register(&desc, Access::LOCAL_WRITE).unwrap();
    let mut s = SendWr::new(2, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [out.sge(0, 16).unwrap()].into();
    conn.qp().post_send(s).unwrap();
    let mut wcs = conn.cq().poll_blocking(2, T).unwrap();
    wcs.sort_by_key(|w| w.wr_id);
    assert_eq!(
        wcs.iter().map(|w| (w.wr_id, w.status)).collect::<Vec<_>>(),
        vec![(1, WcStatus::Success), (2, WcStatus::Success)]
    );
    assert_eq!(mr.to_vec(40000, 4).unwrap(), b"done");
    assert_eq!(mr.to_vec(0, 32768).unwrap(), pattern(32768));
    assert_eq!(mr.to_vec(32768, 8).unwrap(), 105u64.to_ne_bytes());
    conn.disconnect().unwrap();
}

#[test]
fn ud_rdma_core_server_native_client() {
    cm_pair("ud", Side::RdmaCore, Side::Native);
}

#[test]
fn ud_native_server_rdma_core_client() {
    cm_pair("ud", Side::Native, Side::RdmaCore);
}

#[test]
#[ignore = "child process of the ud_* tests"]
fn child_ud_server() {
    if role().is_none() {
        return;
    }
    let (ctx, at) = server_side();
    let ch = EventChannel::new(&ctx).unwrap();
    let l = listener(&ch, UDP_UD, at, 8);
    println!("LISTENING");
    let mut ev = expect(&ch, EventKind::ConnectRequest);
    assert_eq!(ev.listen_id(), Some(l.handle()));
    assert!(ev.private_data().starts_with(b"ud hello"));
    let id = ev.take_new_id().unwrap();
    assert_eq!(id.qp_type(), QpType::Ud);
    let qp = id.create_qp(None, &QpOptions::default()).unwrap();
    assert_eq!(qp.query().unwrap().qp_state, QpState::Rts);
    let buf = id
        .pd()
        .unwrap()
        .alloc_mr(40 + 64, Access::LOCAL_WRITE)
        .unwrap();
    qp.post_recv(RecvWr {
        wr_id: 1,
        sgl: [buf.sge(0, 40 + 64).unwrap()].into(),
    })
    .unwrap();
    id.accept(&conn_param(b"ud ok")).unwrap();
    let wc = id.recv_cq().unwrap().poll_blocking(1, T).unwrap()[0];
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 40 + 8));
    assert_eq!(buf.to_vec(40, 8).unwrap(), b"datagram");
}

#[test]
#[ignore = "child process of the ud_* tests"]
fn child_ud_client() {
    if role().is_none() {
        return;
    }
    let (ctx, server) = client_side();
    let ch = EventChannel::new(&ctx).unwrap();
    let id = resolved(&ch, UDP_UD, server);
    let qp = id.create_qp(None, &QpOptions::default()).unwrap();
    id.connect(&conn_param(b"ud hello")).unwrap();
    let ev = expect(&ch, EventKind::Established);
    assert!(ev.private_data().starts_with(b"ud ok"));
    let ud = ev.ud_param().expect("UD parameters").clone();
    assert_eq!(ud.qkey, RDMA_UDP_QKEY);
    let ah = id.pd().unwrap().create_ah(ud.ah_attr).unwrap();
    let mut s = SendWr::new(3, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.inline = Some(b"datagram".to_vec());
    s.ud = Some(ah.dest(ud.qp_num, ud.qkey));
    qp.post_send(s).unwrap();
    let wc = id.send_cq().unwrap().poll_blocking(1, T).unwrap()[0];
    assert_eq!((wc.wr_id, wc.status), (3, WcStatus::Success));
}

#[cfg(feature = "tokio")]
#[test]
fn async_rdma_core_client_native_server() {
    cm_pair("async", Side::Native, Side::RdmaCore);
}

#[cfg(feature = "tokio")]
#[test]
fn async_rdma_core_server_native_client() {
    cm_pair("async", Side::RdmaCore, Side::Native);
}

#[cfg(feature = "tokio")]
#[test]
#[ignore = "child process of the async_* tests"]
fn child_async_server() {
    if role().is_none() {
        return;
    }
    block_on(async {
        let (ctx, at) = server_side();
        let opts = ConnOptions {
            comp_channel: true,
            ..opts()
        };
        let acc = Acceptor::bind_with(&ctx, at, opts).unwrap();
        println!("LISTENING");
        let req = acc.incoming_async().await.unwrap();
        let conn = req.accept_async(b"async").await.unwrap();
        let mr = cm_common::recv_buffer(&conn, 64);
        // Wait for the message on the completion channel, asynchronously.
        let ch = conn.comp_channel().unwrap();
        conn.cq().req_notify(false).unwrap();
        let mut wcs = Vec::new();
        while conn.cq().poll(&mut wcs, 1).unwrap() == 0 {
            let id = tokio::time::timeout(T, ch.wait_async())
                .await
                .expect("a completion event in time")
                .unwrap();
            assert_eq!(id, conn.cq().id());
            conn.cq().req_notify(false).unwrap();
        }
        assert_eq!((wcs[0].status, wcs[0].byte_len), (WcStatus::Success, 11));
        assert_eq!(mr.to_vec(0, 11).unwrap(), b"hello async");
        assert!(conn.wait_disconnected(Some(T)).unwrap());
    });
}

#[cfg(feature = "tokio")]
#[test]
#[ignore = "child process of the async_* tests"]
fn child_async_client() {
    if role().is_none() {
        return;
    }
    block_on(async {
        let (ctx, server) = client_side();
        let conn = Connector::on(&ctx)
            .options(opts())
            .connect_async(server, b"hi")
            .await
            .unwrap();
        assert!(conn.peer_private_data().starts_with(b"async"));
        let mut s = SendWr::new(2, WrOpcode::Send);
        s.flags = SendFlags::SIGNALED;
        s.inline = Some(b"hello async".to_vec());
        conn.qp().post_send(s).unwrap();
        assert_eq!(
            conn.cq().poll_blocking(1, T).unwrap()[0].status,
            WcStatus::Success
        );
        conn.disconnect_async().await.unwrap();
    });
}
