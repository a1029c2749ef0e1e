//! The async API (feature `tokio`; `cargo test` enables it through the
//! crate's self dev-dependency) in polling and event mode.
#![cfg(feature = "tokio")]

mod common;

use common::*;
use rdmalib::*;
use std::net::SocketAddr;
use std::time::Duration;

async fn exchange(mode: Mode) {
    let (cs, cc) = two_devices();
    let cfg = Config {
        buffer_size: 256 << 10,
        max_message: 128 << 10,
        ..config(mode)
    };
    let mut srv =
        Server::bind_on(&cs, SocketAddr::new(cs.local_addr().ip(), 0), cfg.clone()).unwrap();
    let at = srv.local_addr();
    // The server task echoes messages and answers each write notification
    // with a read notification for the same range, until the client leaves.
    let server = tokio::spawn(async move {
        let mut conn = srv.accept_async().await.unwrap();
        let m = conn.recv_async().await.unwrap();
        conn.send_async(&m).await.unwrap();
        let n = conn.wait_notification_async().await.unwrap();
        assert_eq!(n.kind, NotifyKind::Write);
        let got = conn
            .buffer()
            .to_vec(n.offset as usize, n.len as usize)
            .unwrap();
        // Read the same bytes from the client's buffer, then say so.
        conn.read_async(0, 0, n.len as usize).await.unwrap();
        assert_eq!(conn.buffer().to_vec(0, n.len as usize).unwrap(), got);
        conn.notify_read_async(0, n.len).await.unwrap();
        let e = conn.recv_async().await.unwrap_err();
        assert!(matches!(e, Error::Disconnected), "{e:?}");
        conn.close_async().await.unwrap();
        got
    });
    let mut c = Client::on_async(&cc, at, cfg)
        .await
        .unwrap()
        .connect_async()
        .await
        .unwrap();
    let big = pattern(100_000, 5);
    c.send_async(&big).await.unwrap();
    assert_eq!(c.recv_async().await.unwrap(), big, "{mode:?}");
    c.buffer().write(0, &pattern(200_000, 6)).unwrap();
    c.write_async(0, 50_000, 200_000).await.unwrap();
    c.notify_write_async(50_000, 200_000).await.unwrap();
    let n = c.wait_notification_async().await.unwrap();
    assert_eq!((n.kind, n.offset, n.len), (NotifyKind::Read, 0, 200_000));
    c.close_async().await.unwrap();
    assert!(matches!(c.close_async().await, Err(Error::Closed)));
    assert_eq!(server.await.unwrap(), pattern(200_000, 6), "{mode:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_exchange_in_event_mode() {
    exchange(Mode::Event).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_exchange_in_polling_mode() {
    exchange(Mode::Polling).await;
}

/// Both sides on one thread: waits must yield to the runtime, never block it.
#[tokio::test(flavor = "current_thread")]
async fn async_waits_share_one_thread() {
    for mode in [Mode::Event, Mode::Polling] {
        let (cs, cc) = two_devices();
        let mut srv =
            Server::bind_on(&cs, SocketAddr::new(cs.local_addr().ip(), 0), config(mode)).unwrap();
        let at = srv.local_addr();
        let server = async {
            let mut conn = srv.accept_async().await.unwrap();
            for _ in 0..20 {
                let m = conn.recv_async().await.unwrap();
                conn.send_async(&m).await.unwrap();
            }
            conn
        };
        let client = async {
            let mut c = Client::on_async(&cc, at, config(mode))
                .await
                .unwrap()
                .connect_async()
                .await
                .unwrap();
            for i in 0..20u32 {
                c.send_async(&i.to_be_bytes()).await.unwrap();
                assert_eq!(c.recv_async().await.unwrap(), i.to_be_bytes());
            }
            c
        };
        let (mut s, mut c) = tokio::join!(server, client);
        // A timeout ends an async wait too.
        s.set_timeout(Some(Duration::from_millis(50)));
        assert!(
            matches!(s.recv_async().await, Err(Error::Timeout(_))),
            "{mode:?}"
        );
        c.close_async().await.unwrap();
        assert!(matches!(s.recv_async().await, Err(Error::Disconnected)));
    }
}
