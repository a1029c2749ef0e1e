//! Async (tokio) waits of `softrdma::cm`: event channels, Connector/Acceptor.
//! Run with `cargo test -p softrdma --features tokio --test cm_async`.
#![cfg(feature = "tokio")]

mod cm_common;
mod common;

use cm_common::*;
use softrdma::cm::*;
use softrdma::verbs::*;
use std::net::SocketAddr;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_channel_waits_without_blocking_the_runtime() {
    let (ca, cb) = two_devices(51, 52);
    let ch = EventChannel::new(&ca).unwrap();
    let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc).unwrap();
    // Nothing pending: the wait yields to the runtime (a timer still fires).
    let idle = tokio::time::timeout(Duration::from_millis(30), ch.get_event_async()).await;
    assert!(idle.is_err(), "no event yet");
    id.resolve_addr(
        None,
        SocketAddr::new(cb.local_addr().ip(), 7471),
        Duration::from_secs(2),
    )
    .unwrap();
    let e = tokio::time::timeout(T, ch.get_event_async())
        .await
        .expect("in time")
        .unwrap();
    assert_eq!(e.kind(), EventKind::AddrResolved);
    assert!(e.is_for(&id));
    // An event already queued is returned at once.
    id.resolve_route(Duration::from_secs(1)).unwrap();
    let e = ch.get_event_async().await.unwrap();
    assert_eq!(e.kind(), EventKind::RouteResolved);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_and_acceptor_async() {
    let (ca, cb) = two_devices(53, 54);
    let opts = ConnOptions {
        timeout: Some(T),
        ..ConnOptions::default()
    };
    let acceptor =
        Acceptor::bind_with(&cb, SocketAddr::new(cb.local_addr().ip(), 0), opts.clone()).unwrap();
    let at = acceptor.local_addr();
    let server = async {
        let req = acceptor.incoming_async().await.unwrap();
        assert_eq!(&req.private_data()[..5], b"async");
        let conn = req.accept_async(b"accepted").await.unwrap();
        let mr = recv_buffer(&conn, 64);
        (conn, mr)
    };
    let client = async {
        Connector::on(&ca)
            .options(opts.clone())
            .connect_async(at, b"async")
            .await
            .unwrap()
    };
    let ((sconn, smr), cconn) = tokio::join!(server, client);
    assert_eq!(&cconn.peer_private_data()[..8], b"accepted");
    let out = cconn
        .pd()
        .register(b"over async", Access::LOCAL_WRITE)
        .unwrap();
    let mut s = SendWr::new(2, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [out.sge(0, 10).unwrap()].into();
    cconn.qp().post_send(s).unwrap();
    assert_eq!(
        cconn.cq().poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    assert_eq!(sconn.cq().poll_blocking(1, T).unwrap()[0].byte_len, 10);
    assert_eq!(smr.to_vec(0, 10).unwrap(), b"over async".to_vec());
    cconn.disconnect_async().await.unwrap();
    assert!(sconn.wait_disconnected(Some(T)).unwrap());
    // A second acceptor task can accept while the runtime keeps running.
    let accept2 = tokio::spawn(async move { acceptor.accept_async().await.map(|_| ()) });
    let c2 = Connector::on(&ca)
        .options(opts)
        .connect_async(at, &[])
        .await
        .unwrap();
    accept2.await.unwrap().unwrap();
    drop(c2);
}
