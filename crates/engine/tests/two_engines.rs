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

/// Two connected sides on 127.0.0.`x` and 127.0.0.`x + 1`.
fn pair(x: u8) -> (Side, Side) {
    let p = common::free_udp_port();
    let a = side([127, 0, 0, x], p);
    let b = side([127, 0, 0, x + 1], p);
    connect(&a, &b);
    connect(&b, &a);
    (a, b)
}

fn wait_wc(s: &Side, n: usize) -> Vec<softrdma_engine::transport::Wc> {
    common::wait_wc(&s.e, s.cq, n)
}

#[test]
fn rc_send_and_write_between_engines() {
    let (mut a, mut b) = pair(2);
    for (i, x) in a.buf.iter_mut().enumerate().take(100_000) {
        *x = (i % 251) as u8;
    }
    let bptr = b.buf.as_ptr() as u64;
    b.e.post_recv(
        b.qpn,
        RecvWr {
            wr_id: 9,
            sgl: [Sge {
                addr: bptr,
                length: 65536,
                lkey: b.lkey,
            }]
            .into(),
        },
    )
    .unwrap();
    let aptr = a.buf.as_ptr() as u64;
    let mut wr = SendWr::new(1, WrOpcode::Send);
    wr.sgl = [Sge {
        addr: aptr,
        length: 50_000,
        lkey: a.lkey,
    }]
    .into();
    a.e.post_send(a.qpn, wr).unwrap();
    let mut w = SendWr::new(2, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [Sge {
        addr: aptr,
        length: 100_000,
        lkey: a.lkey,
    }]
    .into();
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
            sgl: [Sge {
                addr: b.buf.as_ptr() as u64,
                length: 65536,
                lkey: b.lkey,
            }]
            .into(),
        },
    )
    .unwrap();
    let mut wr = SendWr::new(8, WrOpcode::Send);
    wr.sgl = [Sge {
        addr: a.buf.as_ptr() as u64,
        length: len,
        lkey: a.lkey,
    }]
    .into();
    a.e.post_send(a.qpn, wr).unwrap();
}

/// A SEND of `len` bytes from `a` to `b` while a thread is blocked for the
/// completion event of `b`'s CQ (on channel `ch`); returns once it got it.
fn send_to_waiter(a: &Side, b: &Side, ch: &Arc<softrdma_engine::CompChannel>, len: u32) {
    let waiter = {
        let ch = Arc::clone(ch);
        std::thread::spawn(move || ch.get_event())
    };
    // Let it block (a send before that is received on the way in anyway).
    std::thread::sleep(Duration::from_millis(50));
    send_one(a, b, len);
    assert_eq!(waiter.join().unwrap().unwrap(), b.cq);
}

/// The waiter counter `name` of `e` (0 if absent).
fn waiter_counter(e: &Engine, name: &str) -> u64 {
    e.waiter_counters()
        .into_iter()
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| v)
}

fn rx_by_waiter(e: &Engine) -> u64 {
    waiter_counter(e, "rx_by_waiter")
}

/// Event mode costs one wake-up per completion: the thread blocked in
/// `get_event` receives the SEND itself (the progress thread would wake
/// first, then wake it).
#[test]
fn a_thread_blocked_for_its_completion_event_receives_the_packet_itself() {
    let (mut a, b) = pair(4);
    a.buf[..300].fill(0x5a);
    let ch = b.e.create_comp_channel().unwrap();
    b.e.set_cq_channel(b.cq, Some(Arc::clone(&ch)));
    b.e.req_notify_cq(b.cq, false).unwrap();
    let before = rx_by_waiter(&b.e);
    send_to_waiter(&a, &b, &ch, 300);
    let w = wait_wc(&b, 1);
    assert_eq!((w[0].status, w[0].byte_len), (WcStatus::Success, 300));
    assert!(b.buf[..300].iter().all(|&x| x == 0x5a));
    assert!(
        rx_by_waiter(&b.e) > before,
        "the waiting thread received the SEND: {:?}",
        b.e.waiter_counters()
    );
}

/// One side of an event-mode ping-pong of `n` 8-byte SENDs (`first`: it
/// sends first): each message waited for through the completion channel,
/// its first byte checked.
fn event_pingpong_side(s: &Side, ch: &softrdma_engine::CompChannel, first: bool, n: usize) {
    use softrdma_engine::transport::WcOpcode;
    for i in 0..n {
        s.e.post_recv(
            s.qpn,
            RecvWr {
                wr_id: i as u64,
                sgl: [Sge {
                    addr: s.buf.as_ptr() as u64,
                    length: 64,
                    lkey: s.lkey,
                }]
                .into(),
            },
        )
        .unwrap();
        let send = || {
            let mut wr = SendWr::new(i as u64, WrOpcode::Send);
            wr.inline = Some(vec![i as u8; 8]);
            s.e.post_send(s.qpn, wr).unwrap();
        };
        if first {
            send();
        }
        let mut got = false;
        let poll = |got: &mut bool| {
            s.e.poll_cq(s.cq, 16, |w| {
                assert_eq!(w.status, WcStatus::Success);
                *got |= w.opcode == WcOpcode::Recv;
            })
            .unwrap();
        };
        loop {
            poll(&mut got);
            if got {
                break;
            }
            s.e.req_notify_cq(s.cq, false).unwrap();
            poll(&mut got);
            if got {
                break;
            }
            assert_eq!(ch.get_event().unwrap(), s.cq);
        }
        assert_eq!(s.buf[0], i as u8, "message {i}");
        if !first {
            send();
        }
    }
}

/// An event-mode ping-pong: after the first waits (each slept: nothing
/// came for a while before), the waiters poll before they sleep and
/// messages find them awake (`policy::WaiterSpin`); every message arrives,
/// in order. On a quiet machine most waits end while polling; a loaded one
/// (parallel tests on 2 vCPUs) stretches round trips past the spin, so
/// the test asks for some on each side within a few rounds.
#[test]
fn event_mode_ping_pong_finds_the_waiters_awake() {
    let (a, b) = pair(12);
    let n = 200;
    let ch_a = a.e.create_comp_channel().unwrap();
    let ch_b = b.e.create_comp_channel().unwrap();
    a.e.set_cq_channel(a.cq, Some(Arc::clone(&ch_a)));
    b.e.set_cq_channel(b.cq, Some(Arc::clone(&ch_b)));
    let mut spun = (0, 0);
    for _ in 0..5 {
        std::thread::scope(|t| {
            t.spawn(|| event_pingpong_side(&b, &ch_b, false, n));
            event_pingpong_side(&a, &ch_a, true, n);
        });
        spun = (
            waiter_counter(&a.e, "waits_spun"),
            waiter_counter(&b.e, "waits_spun"),
        );
        if spun.0 > n as u64 / 4 && spun.1 > n as u64 / 4 {
            return;
        }
    }
    assert!(
        spun.0 > 0 && spun.1 > 0,
        "waits that ended while polling: {spun:?} of about {} each",
        5 * n
    );
}

/// After an event-mode ping-pong, whose waits end while polling, a waiter
/// keeps the socket for its next wait (`policy::keeps_socket_after_wait`);
/// when its thread then stops calling in, the progress thread takes the
/// socket back at its next tick: a SEND that comes then is received.
#[test]
fn a_waiter_that_stops_waiting_after_a_ping_pong_leaves_the_socket_to_the_progress_thread() {
    let (a, b) = pair(14);
    let ch_a = a.e.create_comp_channel().unwrap();
    let ch_b = b.e.create_comp_channel().unwrap();
    a.e.set_cq_channel(a.cq, Some(Arc::clone(&ch_a)));
    b.e.set_cq_channel(b.cq, Some(Arc::clone(&ch_b)));
    for _ in 0..5 {
        std::thread::scope(|t| {
            t.spawn(|| event_pingpong_side(&b, &ch_b, false, 100));
            event_pingpong_side(&a, &ch_a, true, 100);
        });
        if waiter_counter(&b.e, "waits_spun") > 0 {
            break;
        }
    }
    // The last ACKs land, and both CQs are emptied of the send completions.
    std::thread::sleep(Duration::from_millis(20));
    for s in [&a, &b] {
        while s.e.poll_cq(s.cq, 16, |_| {}).unwrap() > 0 {}
    }
    // B's application thread calls in no more: only the progress thread
    // can receive the SEND (then wait_wc's polls find it done).
    let rx_before = b.e.stats().0.rx_packets;
    send_one(&a, &b, 64);
    let t0 = Instant::now();
    while b.e.stats().0.rx_packets == rx_before {
        assert!(t0.elapsed() < Duration::from_secs(10), "nobody received");
        std::thread::sleep(Duration::from_millis(1));
    }
    let w = wait_wc(&b, 1);
    assert_eq!((w[0].status, w[0].byte_len), (WcStatus::Success, 64));
}

/// A signal ends a receiving wait with `Interrupted` (qperf's `SIGALRM`),
/// and the progress thread has the socket again afterwards: a SEND arriving
/// with nobody waiting completes.
#[test]
fn a_signal_ends_a_receiving_wait_and_the_progress_thread_takes_over() {
    let (a, b) = pair(6);
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

/// How many epoll sets of this process watch a UDP socket bound to `addr`
/// (IPv4): `/proc/net/udp` gives the sockets' inodes, `/proc/self/fd` their
/// descriptors, and each epoll descriptor's `fdinfo` lists a `tfd:` line per
/// descriptor it watches.
fn epoll_sets_watching(addr: SocketAddr) -> usize {
    let SocketAddr::V4(a) = addr else {
        panic!("IPv4 only")
    };
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_ne_bytes(a.ip().octets()),
        a.port()
    );
    let udp = std::fs::read_to_string("/proc/net/udp").unwrap();
    let inodes: Vec<String> = udp
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.len() > 9 && f[1] == local)
        .map(|f| format!("socket:[{}]", f[9]))
        .collect();
    assert!(!inodes.is_empty(), "no socket at {addr} ({local})");
    let fds: Vec<String> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter(|e| {
            std::fs::read_link(e.path())
                .is_ok_and(|t| inodes.iter().any(|i| t.to_string_lossy() == *i))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    std::fs::read_dir("/proc/self/fdinfo")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .map(|info| {
            info.lines()
                .filter_map(|l| l.strip_prefix("tfd:"))
                .filter(|l| {
                    l.split_whitespace()
                        .next()
                        .is_some_and(|fd| fds.iter().any(|f| f == fd))
                })
                .count()
        })
        .sum()
}

/// Busy-polls `s`'s empty CQ (an application spinning on it) until `f`,
/// run meanwhile on another thread, returns; returns what it returned.
fn while_spinning<T: Send>(s: &Side, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|sc| {
        let t = sc.spawn(f);
        while !t.is_finished() {
            assert_eq!(s.e.poll_cq(s.cq, 16, |w| panic!("{w:?}")).unwrap(), 0);
        }
        t.join().unwrap()
    })
}

/// An RDMA WRITE of 64 bytes from `a` into `b`'s buffer (a completion on
/// `a`'s CQ only, which the tests leave there).
fn write_one(a: &Side, b: &Side) {
    let mut w = SendWr::new(3, WrOpcode::RdmaWrite);
    w.sgl = [Sge {
        addr: a.buf.as_ptr() as u64,
        length: 64,
        lkey: a.lkey,
    }]
    .into();
    w.remote_addr = b.buf.as_ptr() as u64 + 4096;
    w.rkey = b.rkey;
    a.e.post_send(a.qpn, w).unwrap();
}

/// A socket in any epoll set costs every datagram a wake-up callback in the
/// kernel, asleep there or not (BENCHMARKS.md, "Issue 16, outcome 6"). Once
/// a thread waited for a completion event, the socket stays in its epoll set
/// between waits; an application that busy-polls instead and waits no more
/// takes it out (the progress thread has let go of it too), and a later
/// wait puts it back and receives itself again.
#[test]
fn a_busy_poller_leaves_the_socket_in_no_epoll_set_after_a_wait() {
    let (mut a, mut b) = pair(8);
    let ch = b.e.create_comp_channel().unwrap();
    b.e.set_cq_channel(b.cq, Some(Arc::clone(&ch)));
    for round in 0..2u8 {
        b.e.req_notify_cq(b.cq, false).unwrap();
        let before = rx_by_waiter(&b.e);
        a.buf[..64].fill(0x30 + round);
        send_to_waiter(&a, &b, &ch, 64);
        let w = wait_wc(&b, 1);
        assert_eq!((w[0].status, w[0].byte_len), (WcStatus::Success, 64));
        assert!(b.buf[..64].iter().all(|&x| x == 0x30 + round));
        assert!(
            rx_by_waiter(&b.e) > before,
            "round {round}: the waiter received"
        );
        // Spinning on the empty CQ past the waiter's window, with WRITEs
        // arriving (no completion here; the first wakes a progress thread
        // asleep without a deadline, which then lets go of the socket),
        // nothing but this thread's reads takes the socket's datagrams: no
        // epoll set watches it. (Retried: under load the spinner may lose
        // its CPU long enough for the progress thread to take the socket
        // back for a while.)
        let mut sets = usize::MAX;
        for _ in 0..20 {
            sets = while_spinning(&b, || {
                for _ in 0..3 {
                    write_one(&a, &b);
                    std::thread::sleep(Duration::from_millis(5));
                }
                epoll_sets_watching(b.e.local_addr())
            });
            if sets == 0 {
                break;
            }
        }
        assert_eq!(
            sets, 0,
            "round {round}: the socket is still in an epoll set"
        );
    }
    let _ = &mut b;
}
