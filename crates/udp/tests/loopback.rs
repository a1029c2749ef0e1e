//! Real sockets on loopback only (127.0.0.0/8 and ::1). Ports are kernel-chosen or probed
//! free ones, never 4791, so these tests can run in parallel with anything.

use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use softrdma_udp::{
    AddrConfig, BindError, EventFd, GsoPolicy, Interest, Poller, RecvBatch, RoceSocket,
    SocketConfig, TimerMode, Transmit,
};

const LONG: Duration = Duration::from_secs(10);

fn v4(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A UDP port that is free on 127.0.0.1 right now (bind port 0, read it back, release it).
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn default_selection_gives_127_0_0_1_then_127_0_0_2() {
    // Another process could grab the probed port in between; retry with a new one then.
    for _attempt in 0..5 {
        let port = free_port();
        let cfg = AddrConfig::loopback(port);
        let a = RoceSocket::open(&cfg, &SocketConfig::plain()).unwrap();
        if a.local_addr() != SocketAddr::from(([127, 0, 0, 1], port)) {
            continue;
        }
        let b = RoceSocket::open(&cfg, &SocketConfig::plain()).unwrap();
        assert_eq!(b.local_addr(), SocketAddr::from(([127, 0, 0, 2], port)));

        // A bounded scan that finds everything taken says so, naming the port and range.
        let small = AddrConfig {
            max_loopback: 2,
            ..cfg.clone()
        };
        let e = RoceSocket::open(&small, &SocketConfig::plain()).unwrap_err();
        assert!(
            matches!(e, BindError::LoopbackExhausted { last: 2, .. }),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(
            msg.contains(&port.to_string()) && msg.contains("127.0.0.2"),
            "{msg}"
        );

        // An exact address that is taken: a clear error naming it.
        let e = RoceSocket::bind(a.local_addr(), &SocketConfig::plain()).unwrap_err();
        assert!(matches!(e, BindError::InUse { .. }), "{e:?}");
        assert!(e.to_string().contains(&a.local_addr().to_string()));
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::AddrInUse);

        // After the first socket closes, its address is free again.
        drop(a);
        let c = RoceSocket::open(&cfg, &SocketConfig::plain()).unwrap();
        assert_eq!(c.local_addr(), SocketAddr::from(([127, 0, 0, 1], port)));
        return;
    }
    panic!("could not find a free port for the selection test");
}

#[test]
fn exact_address_not_on_this_host_is_a_clear_error() {
    // 192.0.2.0/24 is TEST-NET-1: never configured here. bind() fails locally; nothing is sent.
    let e = RoceSocket::bind(v4("192.0.2.1:0"), &SocketConfig::plain()).unwrap_err();
    assert!(matches!(e, BindError::NotAvailable { .. }), "{e:?}");
    assert!(e.to_string().contains("192.0.2.1"));
}

/// Payload for datagram `seq` of length `len` (>= 4): the sequence number, then a pattern.
fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    v.extend_from_slice(&seq.to_be_bytes());
    v.extend((4..len).map(|i| (seq as usize * 31 + i * 7) as u8));
    v
}

/// Mixed sizes with runs of equal sizes (so GSO has something to coalesce).
fn mixed_sizes(n: usize) -> Vec<usize> {
    (0..n)
        .map(|i| match (i / 12) % 5 {
            0 => 4096,
            1 => 4 + (i * 373) % 4200,
            2 => 1024,
            3 => 4 + i % 60,
            _ => {
                // Equal run whose last element is shorter.
                if i % 12 == 11 { 700 } else { 1500 }
            }
        })
        .collect()
}

/// Sends `msgs` to `rx` in chunks, receiving after each chunk; checks order, bytes, source
/// and destination.
fn round_trip(tx: &RoceSocket, rx: &RoceSocket, msgs: &[Vec<u8>]) {
    let dst = rx.local_addr();
    let mut batch = RecvBatch::for_socket(rx, 32);
    let mut next = 0usize;
    for chunk_start in (0..msgs.len()).step_by(100) {
        let chunk = &msgs[chunk_start..(chunk_start + 100).min(msgs.len())];
        let ts: Vec<Transmit<'_>> = chunk.iter().map(|p| Transmit { dst, payload: p }).collect();
        let mut sent = 0;
        let end = Instant::now() + LONG;
        while sent < ts.len() {
            sent += tx.send_batch(&ts[sent..]).unwrap();
            assert!(Instant::now() < end, "send stalled");
            if sent < ts.len() {
                std::thread::yield_now();
            }
        }
        let want = chunk_start + chunk.len();
        let end = Instant::now() + LONG;
        while next < want {
            assert!(Instant::now() < end, "received {next} of {want}");
            if rx.recv_batch(&mut batch).unwrap() == 0 {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
            for d in batch.datagrams() {
                assert!(next < msgs.len(), "more datagrams than sent");
                assert_eq!(d.data.len(), msgs[next].len(), "length of datagram {next}");
                assert!(
                    d.data == msgs[next].as_slice(),
                    "content of datagram {next}"
                );
                assert_eq!(d.src, tx.local_addr());
                assert_eq!(d.dst_ip, Some(dst.ip()));
                next += 1;
            }
        }
    }
    let (ts, rs) = (tx.stats(), rx.stats());
    assert_eq!(ts.datagrams_sent, msgs.len() as u64);
    assert_eq!(ts.send_errors, 0);
    assert_eq!(rs.datagrams_received, msgs.len() as u64);
    let bytes: u64 = msgs.iter().map(|m| m.len() as u64).sum();
    assert_eq!((ts.bytes_sent, rs.bytes_received), (bytes, bytes));
    assert!(ts.send_syscalls < msgs.len() as u64, "batching: {ts:?}");
}

fn thousand_mixed() -> Vec<Vec<u8>> {
    mixed_sizes(1000)
        .into_iter()
        .enumerate()
        .map(|(i, len)| payload(i as u32, len))
        .collect()
}

#[test]
fn round_trip_1000_mixed_with_gso_and_gro() {
    let cfg = SocketConfig::default();
    let tx = RoceSocket::bind(v4("127.0.0.1:0"), &cfg).unwrap();
    let rx = RoceSocket::bind(v4("127.0.0.9:0"), &cfg).unwrap();
    let caps = tx.capabilities();
    eprintln!("capabilities: {caps:?}");
    assert!(caps.pktinfo && caps.pmtudisc_do);
    round_trip(&tx, &rx, &thousand_mixed());
    let (ts, rs) = (tx.stats(), rx.stats());
    eprintln!("tx {ts:?}\nrx {rs:?}");
    if caps.gso {
        assert!(ts.gso_batches > 0, "{ts:?}");
    }
    if rx.capabilities().gro && caps.gso {
        assert!(rs.gro_batches > 0, "{rs:?}");
    }
}

#[test]
fn round_trip_1000_mixed_plain() {
    let cfg = SocketConfig::plain();
    let tx = RoceSocket::bind(v4("127.0.0.1:0"), &cfg).unwrap();
    let rx = RoceSocket::bind(v4("127.0.0.10:0"), &cfg).unwrap();
    assert!(!tx.gso_enabled() && !rx.capabilities().gro);
    round_trip(&tx, &rx, &thousand_mixed());
    let (ts, rs) = (tx.stats(), rx.stats());
    assert_eq!((ts.gso_batches, rs.gro_batches), (0, 0));
}

#[test]
fn round_trip_ipv6_loopback() {
    let cfg = SocketConfig::default();
    let any6 = SocketAddr::from((Ipv6Addr::LOCALHOST, 0));
    let tx = match RoceSocket::bind(any6, &cfg) {
        Err(BindError::NotAvailable { .. }) => {
            eprintln!("no ::1 on this host: skipping");
            return;
        }
        r => r.unwrap(),
    };
    let rx = RoceSocket::bind(any6, &cfg).unwrap();
    let caps = rx.capabilities();
    assert!(
        caps.zero_checksum_rx && caps.pktinfo && caps.pmtudisc_do,
        "{caps:?}"
    );
    assert!(!caps.zero_checksum_tx);
    let msgs: Vec<_> = thousand_mixed().into_iter().take(300).collect();
    round_trip(&tx, &rx, &msgs);
    if tx.capabilities().gso {
        assert!(tx.stats().gso_batches > 0);
    }
    // With zero-checksum transmit, GSO is not offered and everything still arrives.
    let tx0 = RoceSocket::bind(any6, &cfg.clone().with_ipv6_zero_checksum_tx(true)).unwrap();
    assert!(tx0.capabilities().zero_checksum_tx && !tx0.gso_enabled());
    let rx2 = RoceSocket::bind(any6, &cfg).unwrap();
    round_trip(&tx0, &rx2, &msgs[..50]);
}

/// 15 × 1000 B + 1 × 500 B to one destination: one GSO send; the receiver sees 16 datagrams,
/// in order and byte-exact, whether or not GRO coalesced them.
#[test]
fn gso_batch_arrives_as_individual_datagrams() {
    for gro in [true, false] {
        let tx = RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::default()).unwrap();
        let rx_cfg = SocketConfig::default().with_gro(gro);
        let rx = RoceSocket::bind(v4("127.0.0.1:0"), &rx_cfg).unwrap();
        let msgs: Vec<Vec<u8>> = (0..16u32)
            .map(|i| payload(i, if i == 15 { 500 } else { 1000 }))
            .collect();
        let dst = rx.local_addr();
        let ts: Vec<_> = msgs.iter().map(|p| Transmit { dst, payload: p }).collect();
        assert_eq!(tx.send_batch(&ts).unwrap(), 16);
        let s = tx.stats();
        assert_eq!(s.send_syscalls, 1);
        if tx.capabilities().gso {
            assert_eq!((s.gso_batches, s.gso_segments), (1, 16), "{s:?}");
        }

        let mut batch = RecvBatch::for_socket(&rx, 32);
        let mut got: Vec<Vec<u8>> = vec![];
        let end = Instant::now() + LONG;
        while got.len() < 16 && Instant::now() < end {
            if rx.recv_batch(&mut batch).unwrap() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            got.extend(batch.datagrams().map(|d| d.data.to_vec()));
        }
        assert_eq!(got, msgs, "gro={gro}");
        let r = rx.stats();
        if gro && rx.capabilities().gro && tx.capabilities().gso {
            // Loopback delivers the GSO send whole to a GRO socket: one super-datagram.
            assert_eq!((r.gro_batches, r.gro_segments), (1, 16), "{r:?}");
            assert_eq!(r.recv_syscalls, 1, "{r:?}");
        } else {
            assert_eq!(r.gro_batches, 0);
        }
    }
}

#[test]
fn gso_policy_off_sends_plain() {
    let cfg = SocketConfig::default().with_gso(GsoPolicy::Off);
    let tx = RoceSocket::bind(v4("127.0.0.1:0"), &cfg).unwrap();
    let rx = RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::default()).unwrap();
    assert!(!tx.gso_enabled());
    let msgs: Vec<_> = (0..40u32).map(|i| payload(i, 512)).collect();
    round_trip(&tx, &rx, &msgs);
    assert_eq!(tx.stats().gso_batches, 0);
}

#[test]
fn poller_wakes_on_socket_readable() {
    for mode in [TimerMode::EpollPwait2, TimerMode::TimerFd] {
        let Ok(p) = Poller::with_mode(mode) else {
            eprintln!("{mode:?} unsupported");
            continue;
        };
        let rx = Arc::new(RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::default()).unwrap());
        let tx = RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::default()).unwrap();
        p.add_socket(&rx, 3).unwrap();
        let dst = rx.local_addr();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            let n = tx
                .send_batch(&[Transmit {
                    dst,
                    payload: b"hello",
                }])
                .unwrap();
            assert_eq!(n, 1);
        });
        let start = Instant::now();
        let ev = p.wait(Some(start + LONG)).unwrap();
        t.join().unwrap();
        assert!(ev.socket_readable && ev.is_readable(3), "{ev:?}");
        assert!(!ev.timer && !ev.woken);
        assert!(start.elapsed() < LONG);
        let mut b = RecvBatch::for_socket(&rx, 4);
        assert_eq!(rx.recv_batch(&mut b).unwrap(), 1);
        assert_eq!(b.datagrams().next().unwrap().data, b"hello");
        // Drained: the next wait times out.
        let ev = p
            .wait(Some(Instant::now() + Duration::from_millis(5)))
            .unwrap();
        assert!(ev.timer && !ev.socket_readable, "{ev:?}");
    }
}

#[test]
fn poller_wakes_from_another_thread() {
    for mode in [TimerMode::EpollPwait2, TimerMode::TimerFd] {
        let Ok(p) = Poller::with_mode(mode) else {
            continue;
        };
        let w = p.waker();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            w.wake().unwrap();
        });
        let start = Instant::now();
        let ev = p.wait(Some(start + LONG)).unwrap();
        t.join().unwrap();
        assert!(
            ev.woken && !ev.timer && !ev.socket_readable,
            "{mode:?} {ev:?}"
        );

        // Any other fd, e.g. a completion-channel eventfd, under its own key.
        let e = Arc::new(EventFd::new().unwrap());
        p.add_fd(e.as_fd(), 7, Interest::Readable).unwrap();
        let e2 = Arc::clone(&e);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            e2.notify().unwrap();
        });
        let ev = p.wait(None).unwrap();
        t.join().unwrap();
        assert!(
            ev.is_readable(7) && !ev.socket_readable && !ev.woken,
            "{ev:?}"
        );
        assert_eq!(e.drain().unwrap(), 1);
    }
}

/// Thread CPU time in ns from /proc (schedstat: first field is time on CPU).
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

#[test]
fn poller_deadline_is_never_early_and_idle_is_free() {
    for mode in [TimerMode::EpollPwait2, TimerMode::TimerFd] {
        let Ok(p) = Poller::with_mode(mode) else {
            continue;
        };
        for ms in [1u64, 20, 150] {
            let start = Instant::now();
            let deadline = start + Duration::from_millis(ms);
            let cpu0 = thread_cpu_ns();
            let ev = p.wait(Some(deadline)).unwrap();
            let now = Instant::now();
            assert!(ev.timer && !ev.woken && !ev.socket_readable, "{ev:?}");
            assert!(now >= deadline, "{mode:?}: returned early");
            assert!(now - start < Duration::from_secs(5), "{mode:?}: way late");
            if let (Some(a), Some(b)) = (cpu0, thread_cpu_ns())
                && ms == 150
            {
                // Blocking, not spinning: far less CPU than wall time.
                assert!(
                    b - a < 40_000_000,
                    "{mode:?}: {} ns CPU in 150 ms wait",
                    b - a
                );
            }
        }
        // A deadline already passed: a non-blocking poll.
        let ev = p
            .wait(Some(Instant::now() - Duration::from_millis(1)))
            .unwrap();
        assert!(ev.timer);
        // Deadline moves earlier and later between waits (timerfd re-arming).
        let d1 = Instant::now() + Duration::from_millis(40);
        let d2 = Instant::now() + Duration::from_millis(10);
        assert!(p.wait(Some(d2)).unwrap().timer && Instant::now() >= d2);
        assert!(p.wait(Some(d1)).unwrap().timer && Instant::now() >= d1);
    }
}

/// Pitfall 2 of the interop notes: our IPv4 datagrams carry DF and IP ID 0 (the ID is inside
/// the ICRC). Checked by watching loopback with a raw socket; needs CAP_NET_RAW.
#[test]
fn ipv4_datagrams_carry_df_and_ip_id_zero() {
    let Some(raw) = raw::RawUdp::open() else {
        eprintln!("no CAP_NET_RAW: skipping");
        return;
    };
    let tx = RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::plain()).unwrap();
    let rx = RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::plain()).unwrap();
    let (sp, dp) = (tx.local_addr().port(), rx.local_addr().port());
    let dst = rx.local_addr();
    let p = [0xAAu8; 64];
    let ts = [Transmit { dst, payload: &p }; 5];
    assert_eq!(tx.send_batch(&ts).unwrap(), 5);
    let mut seen = 0;
    let end = Instant::now() + LONG;
    while seen < 5 && Instant::now() < end {
        let Some(pkt) = raw.recv(Duration::from_millis(100)) else {
            continue;
        };
        let ihl = usize::from(pkt[0] & 0x0f) * 4;
        if pkt.len() < ihl + 8 {
            continue;
        }
        let (s, d) = (
            u16::from_be_bytes([pkt[ihl], pkt[ihl + 1]]),
            u16::from_be_bytes([pkt[ihl + 2], pkt[ihl + 3]]),
        );
        if (s, d) != (sp, dp) {
            continue;
        }
        let id = u16::from_be_bytes([pkt[4], pkt[5]]);
        let frag = u16::from_be_bytes([pkt[6], pkt[7]]);
        assert_eq!(id, 0, "IP ID must be 0");
        assert_eq!(frag, 0x4000, "DF set, no fragment offset");
        seen += 1;
    }
    assert_eq!(seen, 5);
}

mod raw {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::time::Duration;

    /// A raw IPv4 UDP socket: receives a copy of every UDP datagram delivered on this host,
    /// IP header included. Receive only; nothing is ever sent on it.
    pub(super) struct RawUdp(OwnedFd);

    impl RawUdp {
        pub(super) fn open() -> Option<RawUdp> {
            // SAFETY: plain system call with integer arguments.
            let fd = unsafe {
                libc::socket(
                    libc::AF_INET,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                    libc::IPPROTO_UDP,
                )
            };
            // SAFETY: a successful socket() returns a fresh descriptor nobody else owns.
            (fd >= 0).then(|| RawUdp(unsafe { OwnedFd::from_raw_fd(fd) }))
        }

        pub(super) fn recv(&self, timeout: Duration) -> Option<Vec<u8>> {
            let mut p = libc::pollfd {
                fd: self.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one live pollfd, count 1.
            if unsafe { libc::poll(&mut p, 1, timeout.as_millis() as i32) } <= 0 {
                return None;
            }
            let mut buf = vec![0u8; 65536];
            // SAFETY: `buf` is writable for `buf.len()` bytes.
            let n =
                unsafe { libc::recv(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            (n > 0).then(|| {
                buf.truncate(n as usize);
                buf
            })
        }
    }
}

#[test]
fn ipv4_mapped_destination_is_accepted_by_an_ipv4_socket() {
    let tx = RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::plain()).unwrap();
    let rx = RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::plain()).unwrap();
    let IpAddr::V4(ip) = rx.local_addr().ip() else {
        unreachable!()
    };
    let mapped = SocketAddr::from((ip.to_ipv6_mapped(), rx.local_addr().port()));
    assert_eq!(
        tx.send_batch(&[Transmit {
            dst: mapped,
            payload: b"gid"
        }])
        .unwrap(),
        1
    );
    let mut b = RecvBatch::for_socket(&rx, 1);
    let end = Instant::now() + LONG;
    while rx.recv_batch(&mut b).unwrap() == 0 {
        assert!(Instant::now() < end);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(b.datagrams().next().unwrap().data, b"gid");
    assert_eq!(tx.stats().send_errors, 0);
}

#[test]
fn closed_port_is_reported_unreachable_and_next_sends_still_go_out() {
    let rx = RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::plain()).unwrap();
    let tx = RoceSocket::bind(v4("127.0.0.1:0"), &SocketConfig::plain()).unwrap();
    let closed = SocketAddr::from(([127, 0, 0, 1], free_port()));
    assert!(
        tx.take_unreachable().is_empty(),
        "nothing reported before anything was sent"
    );
    tx.send_batch(&[Transmit {
        dst: closed,
        payload: b"x",
    }])
    .unwrap();
    // The ICMP report arrives at once on loopback; a receive notices the socket error.
    let mut batch = RecvBatch::for_socket(&tx, 4);
    let t0 = Instant::now();
    let mut got = Vec::new();
    while got.is_empty() && t0.elapsed() < LONG {
        let _ = tx.recv_batch(&mut batch);
        got = tx.take_unreachable();
    }
    assert_eq!(got, vec![closed]);
    assert_eq!(tx.stats().unreachable, 1);
    // The parked error must not swallow the next datagram to a live peer.
    tx.send_batch(&[Transmit {
        dst: closed,
        payload: b"y",
    }])
    .unwrap();
    std::thread::sleep(Duration::from_millis(20));
    tx.send_batch(&[Transmit {
        dst: rx.local_addr(),
        payload: b"z",
    }])
    .unwrap();
    let mut rb = RecvBatch::for_socket(&rx, 4);
    let t0 = Instant::now();
    let mut n = 0;
    while n == 0 && t0.elapsed() < LONG {
        n = rx.recv_batch(&mut rb).unwrap();
    }
    assert_eq!(rb.datagrams().next().unwrap().data, b"z");
}
