//! rdmalib between two devices in one process: messages, one-sided
//! transfers and notifications in polling and event mode, sizes beyond the
//! MTU, a peer that goes away, misuse.

mod common;

use common::*;
use rdmalib::softrdma::cm::{self as cm, ConnOptions, Connector};
use rdmalib::softrdma::verbs::WcStatus;
use rdmalib::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

const MODES: [Mode; 2] = [Mode::Polling, Mode::Event];

/// Larger than any path MTU (4096), so every transfer is several packets.
const BIG: usize = 100_000;

#[test]
fn messages_arrive_in_order_including_empty_and_larger_than_the_mtu() {
    for mode in MODES {
        let cfg = Config {
            max_message: 128 << 10,
            ..config(mode)
        };
        let (mut s, mut c) = pair(cfg.clone(), cfg);
        assert_eq!(c.peer_max_message(), 128 << 10);
        // More messages than receive slots, sent while the receiver is not
        // taking them yet: RNR back-pressure, nothing lost or reordered.
        let msgs: Vec<Vec<u8>> = (0..40)
            .map(|i| match i % 4 {
                0 => Vec::new(),
                1 => pattern(BIG, i),
                _ => pattern(1 + i as usize * 37, i),
            })
            .collect();
        let expect = msgs.clone();
        let sender = std::thread::spawn(move || {
            for m in &msgs {
                c.send(m).unwrap();
            }
            c
        });
        for (i, m) in expect.iter().enumerate() {
            assert_eq!(&s.recv().unwrap(), m, "{mode:?}: message {i}");
        }
        let mut c = sender.join().unwrap();
        // And back the other way.
        s.send(&pattern(BIG, 99)).unwrap();
        assert_eq!(c.recv().unwrap(), pattern(BIG, 99), "{mode:?}");
        assert_eq!(s.try_recv().unwrap(), None);
        c.close().unwrap();
        s.close().unwrap();
    }
}

#[test]
fn writes_and_reads_larger_than_the_mtu_land_in_the_peers_buffer() {
    for mode in MODES {
        let cfg = Config {
            buffer_size: 512 << 10,
            ..config(mode)
        };
        let (mut s, mut c) = pair(cfg.clone(), cfg);
        assert_eq!(
            c.remote(),
            s.buffer().remote(),
            "{mode:?}: the advertised buffer"
        );
        assert_eq!(s.remote(), c.buffer().remote());
        let data = pattern(300_000, 7);
        c.buffer().write(4096, &data).unwrap();
        c.write(4096, 1000, data.len()).unwrap();
        // The bytes are in the server's buffer, and only there.
        assert_eq!(
            s.buffer().to_vec(1000, data.len()).unwrap(),
            data,
            "{mode:?}"
        );
        assert!(s.buffer().to_vec(0, 1000).unwrap().iter().all(|b| *b == 0));
        let end = 1000 + data.len();
        let rest = s.buffer().len() - end;
        assert!(
            s.buffer()
                .to_vec(end, rest)
                .unwrap()
                .iter()
                .all(|b| *b == 0)
        );
        // Read them back into another place of the client's buffer.
        c.read(400_000, 1000, 100_000).unwrap();
        assert_eq!(
            c.buffer().to_vec(400_000, 100_000).unwrap(),
            data[..100_000]
        );
        // The server writes into the client's buffer as well.
        s.buffer().write(0, b"from the server").unwrap();
        s.write(0, 200, 15).unwrap();
        assert_eq!(c.buffer().to_vec(200, 15).unwrap(), b"from the server");
        // A zero-length transfer is a no-op, even at the very end.
        c.write(0, (512 << 10) as u64, 0).unwrap();
        c.close().unwrap();
        s.close().unwrap();
    }
}

#[test]
fn notifications_announce_writes_and_reads_and_messages_wait_their_turn() {
    for mode in MODES {
        let (mut s, mut c) = pair(config(mode), config(mode));
        c.buffer().write(0, &pattern(BIG / 2, 1)).unwrap();
        c.write(0, 8, BIG / 2).unwrap();
        c.send(b"first message").unwrap();
        c.notify_write(8, (BIG / 2) as u64).unwrap();
        c.send(b"second message").unwrap();
        // The notification comes first though a message arrived before it.
        let n = s.wait_notification().unwrap();
        assert_eq!(
            n,
            Notification {
                kind: NotifyKind::Write,
                offset: 8,
                len: (BIG / 2) as u64
            },
            "{mode:?}"
        );
        assert_eq!(s.buffer().to_vec(8, BIG / 2).unwrap(), pattern(BIG / 2, 1));
        assert_eq!(s.recv().unwrap(), b"first message");
        assert_eq!(s.recv().unwrap(), b"second message");
        assert_eq!(s.try_notification().unwrap(), None);

        // The server reads the client's buffer and says so.
        s.read(0, 0, 1000).unwrap();
        assert_eq!(
            s.buffer().to_vec(0, 1000).unwrap(),
            pattern(BIG / 2, 1)[..1000]
        );
        s.notify_read(0, 1000).unwrap();
        let n = c.wait_notification().unwrap();
        assert_eq!((n.kind, n.offset, n.len), (NotifyKind::Read, 0, 1000));
        c.close().unwrap();
        s.close().unwrap();
    }
}

#[test]
fn messages_go_to_and_from_the_buffer_without_loss() {
    let (mut s, mut c) = pair(config(Mode::Polling), config(Mode::Event));
    c.buffer().write(10, b"straight from the buffer").unwrap();
    c.send_from_buffer(10, 24).unwrap();
    assert_eq!(s.recv_to_buffer(100).unwrap(), 24);
    assert_eq!(
        s.buffer().to_vec(100, 24).unwrap(),
        b"straight from the buffer"
    );
    // Too big for the room at the end of the buffer: an error, and the
    // message stays queued for a receive with room.
    let len = s.buffer().len();
    c.send(&pattern(100, 3)).unwrap();
    assert!(matches!(
        s.recv_to_buffer(len - 50),
        Err(Error::MessageTooLarge { len: 100, max: 50 })
    ));
    assert_eq!(s.recv_to_buffer(0).unwrap(), 100);
    assert_eq!(s.buffer().to_vec(0, 100).unwrap(), pattern(100, 3));
    assert!(matches!(
        c.send_from_buffer(len - 1, 2),
        Err(Error::LocalOutOfBounds { .. })
    ));
}

#[test]
fn misuse_is_a_clear_error_and_sends_nothing() {
    let cfg = Config {
        buffer_size: 4096,
        max_message: 1024,
        ..config(Mode::Polling)
    };
    let (mut s, mut c) = pair(cfg.clone(), cfg);
    // Beyond the peer's buffer (write, read, notifications), and offsets that overflow.
    let oob = |r: Result<()>| match r {
        Err(e @ Error::RemoteOutOfBounds { .. }) => {
            assert_eq!(e.errno(), libc::ERANGE);
            assert!(
                e.to_string()
                    .contains("outside the peer's 4096-byte buffer"),
                "{e}"
            );
        }
        r => panic!("expected RemoteOutOfBounds, got {r:?}"),
    };
    oob(c.write(0, 4000, 100));
    oob(c.read(0, 4097, 0));
    oob(c.write(0, u64::MAX, 1));
    oob(c.notify_write(4096, 1));
    oob(c.notify_read(u64::MAX - 1, 2));
    // Beyond our own buffer.
    assert!(matches!(
        c.write(4000, 0, 100),
        Err(Error::LocalOutOfBounds {
            offset: 4000,
            len: 100,
            size: 4096
        })
    ));
    assert!(matches!(
        c.read(usize::MAX, 0, 2),
        Err(Error::LocalOutOfBounds { .. })
    ));
    // Larger than the peer takes.
    let e = c.send(&[0; 1025]).unwrap_err();
    assert!(matches!(
        e,
        Error::MessageTooLarge {
            len: 1025,
            max: 1024
        }
    ));
    assert_eq!(e.errno(), libc::EMSGSIZE);
    // None of it reached the server, and the connection still works.
    assert_eq!(s.try_recv().unwrap(), None);
    assert_eq!(s.try_notification().unwrap(), None);
    assert!(s.buffer().to_vec(0, 4096).unwrap().iter().all(|b| *b == 0));
    c.buffer().write(0, b"still fine").unwrap();
    c.write(0, 4086, 10).unwrap();
    assert_eq!(s.buffer().to_vec(4086, 10).unwrap(), b"still fine");
    assert!(!c.is_down());

    // Closed: every operation says so, and so does closing again.
    c.close().unwrap();
    assert!(!c.is_open());
    let e = c.close().unwrap_err();
    assert!(matches!(e, Error::Closed), "{e:?}");
    assert_eq!(e.errno(), libc::EBADF);
    assert_eq!(e.to_string(), "the connection is closed");
    assert!(matches!(c.write(0, 0, 1), Err(Error::Closed)));
    assert!(matches!(c.send(b"x"), Err(Error::Closed)));
    assert!(matches!(c.recv(), Err(Error::Closed)));
    assert!(matches!(c.wait_notification(), Err(Error::Closed)));
    assert!(matches!(c.notify_write(0, 1), Err(Error::Closed)));
    // The buffer stays readable until the connection is dropped.
    assert_eq!(c.buffer().to_vec(0, 10).unwrap(), b"still fine");
    // The server learns about it.
    assert!(matches!(s.recv(), Err(Error::Disconnected)));
    s.close().unwrap();
}

/// The peer closes (or is dropped) while this side waits or transfers:
/// the waits end with `Disconnected`, quickly, in both modes.
#[test]
fn a_peer_that_leaves_mid_transfer_ends_every_wait_with_an_error() {
    for mode in MODES {
        let cfg = Config {
            buffer_size: 128 << 10,
            ..config(mode)
        };
        let (mut s, mut c) = pair(cfg.clone(), cfg);
        // The server consumes chunks until the client goes away.
        let server = std::thread::spawn(move || {
            let mut seen = Vec::new();
            let e = loop {
                match s.wait_notification() {
                    Ok(n) => {
                        seen.push(
                            s.buffer()
                                .to_vec(n.offset as usize, n.len as usize)
                                .unwrap(),
                        );
                        s.send(&[]).unwrap();
                    }
                    Err(e) => break e,
                }
            };
            (s, seen, e, Instant::now())
        });
        for k in 0..3u32 {
            c.buffer().write(0, &pattern(BIG, k)).unwrap();
            c.write(0, 0, BIG).unwrap();
            c.notify_write(0, BIG as u64).unwrap();
            assert!(c.recv().unwrap().is_empty());
        }
        // Mid-transfer: the fourth chunk is written but never announced.
        c.write(0, 0, BIG).unwrap();
        let left = Instant::now();
        c.close().unwrap();
        let (mut s, seen, e, at) = server.join().unwrap();
        assert!(matches!(e, Error::Disconnected), "{mode:?}: {e:?}");
        assert_eq!(e.errno(), libc::ECONNRESET);
        assert!(at - left < Duration::from_secs(5), "{mode:?}: noticed late");
        assert_eq!(seen.len(), 3);
        for (k, chunk) in seen.iter().enumerate() {
            assert_eq!(chunk, &pattern(BIG, k as u32), "{mode:?}: chunk {k}");
        }
        // Every later operation fails the same way; closing still works once.
        assert!(matches!(s.write(0, 0, 10), Err(Error::Disconnected)));
        assert!(matches!(s.send(b"anyone?"), Err(Error::Disconnected)));
        assert!(s.is_down());
        s.close().unwrap();
        assert!(matches!(s.close(), Err(Error::Closed)));
    }
}

#[test]
fn a_server_that_leaves_fails_the_writer_instead_of_hanging_it() {
    for mode in MODES {
        let (s, mut c) = pair(config(mode), config(mode));
        c.write(0, 0, BIG / 2).unwrap();
        let t0 = Instant::now();
        drop(s); // no close: dropping disconnects too
        let e = loop {
            match c.write(0, 0, BIG / 2).and_then(|()| c.notify_write(0, 1)) {
                Ok(()) => assert!(t0.elapsed() < Duration::from_secs(5), "{mode:?}: no error"),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(e, Error::Disconnected | Error::Completion { .. }),
            "{mode:?}: {e:?}"
        );
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{mode:?}: noticed late"
        );
        assert!(matches!(
            c.recv(),
            Err(Error::Disconnected | Error::Completion { .. })
        ));
        c.close().unwrap();
    }
}

#[test]
fn a_timeout_ends_a_wait_and_leaves_the_connection_usable() {
    for mode in MODES {
        let (mut s, mut c) = pair(config(mode), config(mode));
        s.set_timeout(Some(Duration::from_millis(100)));
        let t0 = Instant::now();
        let e = s.wait_notification().unwrap_err();
        assert!(
            matches!(e, Error::Timeout(d) if d == Duration::from_millis(100)),
            "{e:?}"
        );
        assert_eq!(e.errno(), libc::ETIMEDOUT);
        assert!(t0.elapsed() >= Duration::from_millis(100));
        assert!(matches!(s.recv(), Err(Error::Timeout(_))));
        c.notify_write(0, 1).unwrap();
        assert_eq!(s.wait_notification().unwrap().len, 1, "{mode:?}");
    }
}

#[test]
fn a_client_that_is_not_rdmalib_is_rejected_and_the_server_goes_on() {
    let (cs, cc) = two_devices();
    let mut srv = Server::bind_on(
        &cs,
        SocketAddr::new(cs.local_addr().ip(), 0),
        config(Mode::Event),
    )
    .unwrap();
    let at = srv.local_addr();
    let foreign = {
        let cc = cc.clone();
        std::thread::spawn(move || {
            let opts = ConnOptions {
                timeout: Some(T),
                ..ConnOptions::default()
            };
            Connector::on(&cc)
                .options(opts)
                .connect(at, b"hello, I am not rdmalib")
        })
    };
    let e = srv.accept().unwrap_err();
    assert!(matches!(e, Error::Protocol(_)), "{e:?}");
    match foreign.join().unwrap() {
        Err(cm::Error::Rejected { private_data, .. }) => {
            assert!(private_data.starts_with(b"rdmalib: not an rdmalib client"));
        }
        r => panic!("the foreign client was not rejected: {r:?}"),
    }
    // The next client is served.
    let t = std::thread::spawn(move || srv.accept().map(|_| ()));
    let mut c = Client::on(&cc, at, config(Mode::Event))
        .unwrap()
        .connect()
        .unwrap();
    t.join().unwrap().unwrap();
    c.close().unwrap();
}

#[test]
fn connecting_where_nobody_listens_is_refused() {
    let (cs, cc) = two_devices();
    let nobody = SocketAddr::new(cs.local_addr().ip(), 9);
    let e = Client::on(&cc, nobody, config(Mode::Polling))
        .unwrap()
        .connect()
        .unwrap_err();
    assert!(matches!(e, Error::Cm(cm::Error::Rejected { .. })), "{e:?}");
    assert_eq!(e.errno(), libc::ECONNREFUSED);
}

#[test]
fn bad_configurations_are_refused() {
    let (cs, _) = two_devices();
    let at = SocketAddr::new(cs.local_addr().ip(), 0);
    for (cfg, what) in [
        (
            Config {
                buffer_size: 0,
                ..Config::default()
            },
            "buffer_size",
        ),
        (
            Config {
                max_message: 8,
                ..Config::default()
            },
            "max_message",
        ),
        (
            Config {
                recv_depth: 0,
                ..Config::default()
            },
            "recv_depth",
        ),
    ] {
        let e = Server::bind_on(&cs, at, cfg).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument(m) if m.contains(what)),
            "{what}: {e:?}"
        );
        assert_eq!(e.errno(), libc::EINVAL);
    }
}

#[test]
fn failed_completions_name_the_operation_and_status() {
    let e = Error::Completion {
        op: Op::Write,
        status: WcStatus::RetryExcErr,
    };
    assert_eq!(e.errno(), libc::ETIMEDOUT);
    assert_eq!(
        e.to_string(),
        "RDMA write failed: completion status RetryExcErr"
    );
}
