//! Spoofed and malformed packets on the RoCE port, from a rogue UDP socket
//! on loopback, against two real devices with connected RC and UC QPs and a
//! UD QP (what `bad_input.rs` does not cover already: a sender that forges
//! the *peer's* address).
//!
//! Each case sends datagrams, waits until the device received them, and
//! checks that exactly the expected drop counters moved (by exactly the
//! expected amounts), that no byte of the target region changed and no
//! completion appeared, and that the connection still works. The rogue
//! socket binds the peer's IP address (another port): RoCEv2 has no
//! authentication, so the source IP is all a receiver can check, and what
//! still protects a connection is the QPN, the PSN window, the R_Key and the
//! ICRC. The last test shows the limit: a forgery right in all of them is
//! accepted (docs/SECURITY.md).

mod common;

use common::loopback::{ALL, connect_pair, two_devices_in, ud_qp};
use softrdma::verbs::*;
use softrdma_engine::transport::Stats;
use softrdma_transport::fill_icrc_between;
use softrdma_wire::{AtomicEth, Bth, Deth, Headers, Opcode, Psn, Reth};
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(10);
/// A's first send PSN = B's expected receive PSN.
const PSN_A: u32 = 0x00A0_0000;
const PSN_B: u32 = 0x0000_0300;
const LEN: usize = 8192;

/// A (on `ca`) and B (on `cb`): connected RC and UC pairs, a UD QP on B,
/// and an 8 KiB region on B with every right.
struct Setup {
    ca: Context,
    cb: Context,
    rc_a: Qp,
    rc_b: Qp,
    uc_b: Qp,
    ud_b: Qp,
    cq_a: Cq,
    cq_b: Cq,
    ma: Mr,
    mb: Mr,
    _pds: (Pd, Pd),
}

fn setup() -> Setup {
    // Two devices at 127.0.3.x sharing a free UDP port.
    let (ca, cb) = two_devices_in(3);
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let ma = pa.alloc_mr(LEN, ALL).unwrap();
    let mb = pb.alloc_mr(LEN, ALL).unwrap();
    mb.write(0, &pattern(LEN, 9)).unwrap();
    let cq_a = ca.create_cq(64, None).unwrap();
    let cq_b = cb.create_cq(64, None).unwrap();
    let mut qps = Vec::new();
    for t in [QpType::Rc, QpType::Uc] {
        let qa = pa.create_qp(&QpInit::new(t, &cq_a, &cq_a)).unwrap();
        let qb = pb.create_qp(&QpInit::new(t, &cq_b, &cq_b)).unwrap();
        let grant = if t == QpType::Rc {
            Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
        } else {
            Access::REMOTE_WRITE
        };
        qa.to_init(grant, 0).unwrap();
        qb.to_init(grant, 0).unwrap();
        connect_pair((&ca, &qa), (&cb, &qb), (PSN_A, PSN_B));
        qps.push((qa, qb));
    }
    let ud_b = ud_qp(&pb, &cq_b, 0x1234);
    ud_b.post_recv(RecvWr {
        wr_id: 50,
        sgl: [mb.sge(4096, 2048).unwrap()].into(),
    })
    .unwrap();
    let (uc, rc) = (qps.pop().unwrap(), qps.pop().unwrap());
    Setup {
        ca,
        cb,
        rc_a: rc.0,
        rc_b: rc.1,
        uc_b: uc.1,
        ud_b,
        cq_a,
        cq_b,
        ma,
        mb,
        _pds: (pa, pb),
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

/// A socket on the peer's IP address (any port): the receiver cannot tell
/// its packets from the peer's by address.
fn spoofer(s: &Setup) -> UdpSocket {
    UdpSocket::bind(SocketAddr::new(s.ca.local_addr().ip(), 0)).unwrap()
}

/// Headers + payload as a datagram from `from` to `to`, ICRC right (or
/// flipped), and optionally cut to `truncate` bytes before the ICRC.
fn frame(
    h: &Headers,
    payload: &[u8],
    from: SocketAddr,
    to: SocketAddr,
    bad_icrc: bool,
    truncate: Option<usize>,
) -> Vec<u8> {
    let mut p = Vec::new();
    softrdma_wire::emit(h, payload, &mut p).unwrap();
    if let Some(n) = truncate {
        p.truncate(n);
        p.extend_from_slice(&[0; 4]);
    }
    fill_icrc_between(from, to, &mut p);
    if bad_icrc {
        let n = p.len();
        p[n - 2] ^= 0x10;
    }
    p
}

fn hdr(op: Opcode, qpn: u32, psn: u32) -> Headers {
    let mut b = Bth::new(op, qpn, Psn::new(psn));
    b.ack_req = true;
    Headers::new(b)
}

fn reth(mr: &Mr, off: u64, len: u32) -> Option<Reth> {
    Some(Reth {
        va: mr.addr() + off,
        rkey: mr.rkey(),
        dma_len: len,
    })
}

/// The drop and error counters, by name.
fn counters(s: &Stats) -> [(&'static str, u64); 13] {
    [
        ("drop_bad_icrc", s.drop_bad_icrc),
        ("drop_malformed", s.drop_malformed),
        ("drop_unknown_qpn", s.drop_unknown_qpn),
        ("drop_bad_state", s.drop_bad_state),
        ("drop_bad_pkey", s.drop_bad_pkey),
        ("drop_bad_qkey", s.drop_bad_qkey),
        ("drop_bad_addr", s.drop_bad_addr),
        ("drop_out_of_seq", s.drop_out_of_seq),
        ("drop_no_wqe", s.drop_no_wqe),
        ("rx_duplicates", s.rx_duplicates),
        ("tx_nak_seq", s.tx_nak_seq),
        ("tx_nak_other", s.tx_nak_other),
        ("access_violations", s.access_violations),
    ]
}

/// Sends `datagrams` from `sock` to B and waits until B received them all;
/// then checks that exactly `want` counters moved by exactly those amounts.
fn send_and_count(s: &Setup, sock: &UdpSocket, datagrams: &[Vec<u8>], want: &[(&str, u64)]) {
    let s0 = s.cb.stats().0;
    for d in datagrams {
        sock.send_to(d, s.cb.local_addr()).unwrap();
    }
    let n = datagrams.len() as u64;
    let t0 = Instant::now();
    while s.cb.stats().0.rx_packets < s0.rx_packets + n {
        assert!(t0.elapsed() < T, "B did not receive the datagrams");
        std::thread::sleep(Duration::from_millis(1));
    }
    let s1 = s.cb.stats().0;
    let moved: Vec<(&str, u64)> = counters(&s1)
        .iter()
        .zip(counters(&s0))
        .filter(|((_, a), (_, b))| a != b)
        .map(|((k, a), (_, b))| (*k, a - b))
        .collect();
    let mut want = want.to_vec();
    want.sort();
    let mut got = moved.clone();
    got.sort();
    assert_eq!(got, want, "counters that moved on B");
}

/// B's region is as set up and nothing completed on B.
fn untouched(s: &Setup) {
    assert_eq!(
        s.mb.to_vec(0, LEN).unwrap(),
        pattern(LEN, 9),
        "B's memory changed"
    );
    assert_eq!(s.cq_b.poll_one().unwrap(), None, "a completion on B");
}

/// The RC pair still carries a message both ways round.
fn still_works(s: &Setup) {
    assert_eq!(s.rc_b.query().unwrap().qp_state, QpState::Rts);
    s.ma.write(0, b"genuine").unwrap();
    s.rc_b
        .post_recv(RecvWr {
            wr_id: 7,
            sgl: [s.mb.sge(6144, 64).unwrap()].into(),
        })
        .unwrap();
    let mut w = SendWr::new(8, WrOpcode::Send);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [s.ma.sge(0, 7).unwrap()].into();
    s.rc_a.post_send(w).unwrap();
    let wa = s.cq_a.poll_blocking(1, T).unwrap()[0];
    assert_eq!((wa.wr_id, wa.status), (8, WcStatus::Success));
    let wb = s.cq_b.poll_blocking(1, T).unwrap()[0];
    assert_eq!(
        (wb.wr_id, wb.status, wb.byte_len),
        (7, WcStatus::Success, 7)
    );
    assert_eq!(s.mb.to_vec(6144, 7).unwrap(), b"genuine");
}

#[test]
fn spoofed_packets_outside_the_psn_window_are_dropped() {
    let s = setup();
    let sock = spoofer(&s);
    let (me, dev) = (sock.local_addr().unwrap(), s.cb.local_addr());
    let qpn = s.rc_b.qpn();
    let write = |psn: u32| {
        let mut h = hdr(Opcode::RC_RDMA_WRITE_ONLY, qpn, psn);
        h.reth = reth(&s.mb, 0, 64);
        frame(&h, &[0xEE; 64], me, dev, false, None)
    };
    // Ahead of the window: one sequence NAK for the gap, then silence.
    send_and_count(
        &s,
        &sock,
        &[write(PSN_A + 1000)],
        &[("drop_out_of_seq", 1), ("tx_nak_seq", 1)],
    );
    send_and_count(
        &s,
        &sock,
        &[write(PSN_A + 5), write(PSN_A + 0x7F_0000)],
        &[("drop_out_of_seq", 2)],
    );
    // Behind it: a duplicate, answered with an ACK, never executed again.
    send_and_count(
        &s,
        &sock,
        &[
            write(PSN_A.wrapping_sub(1)),
            write(PSN_A.wrapping_sub(0x40_0000)),
        ],
        &[("rx_duplicates", 2)],
    );
    // A READ or an atomic "duplicate" with no matching resource: dropped.
    let mut h = hdr(Opcode::RC_RDMA_READ_REQUEST, qpn, PSN_A - 3);
    h.reth = reth(&s.mb, 0, 4096);
    let read = frame(&h, &[], me, dev, false, None);
    let mut h = hdr(Opcode::RC_FETCH_ADD, qpn, PSN_A - 2);
    h.atomic_eth = Some(AtomicEth {
        va: s.mb.addr(),
        rkey: s.mb.rkey(),
        swap_add: 1,
        compare: 0,
    });
    let fadd = frame(&h, &[], me, dev, false, None);
    send_and_count(
        &s,
        &sock,
        &[read, fadd],
        &[("rx_duplicates", 2), ("drop_out_of_seq", 2)],
    );
    untouched(&s);
    still_works(&s);
}

#[test]
fn wrong_qpn_and_opcodes_for_the_qp_type_are_dropped() {
    let s = setup();
    let sock = spoofer(&s);
    let (me, dev) = (sock.local_addr().unwrap(), s.cb.local_addr());
    let (rc, uc, ud) = (s.rc_b.qpn(), s.uc_b.qpn(), s.ud_b.qpn());
    let mut dgs = Vec::new();
    // RC WRITE to the UC and UD QPs; UC WRITE and UD SEND to the RC QP.
    for q in [uc, ud] {
        let mut h = hdr(Opcode::RC_RDMA_WRITE_ONLY, q, PSN_A);
        h.reth = reth(&s.mb, 0, 8);
        dgs.push(frame(&h, &[1; 8], me, dev, false, None));
    }
    let mut h = hdr(Opcode::UC_RDMA_WRITE_ONLY, rc, PSN_A);
    h.reth = reth(&s.mb, 0, 8);
    dgs.push(frame(&h, &[2; 8], me, dev, false, None));
    let mut h = hdr(Opcode::UD_SEND_ONLY, rc, 0);
    h.deth = Some(Deth {
        qkey: 0x1234,
        resv8: 0,
        src_qp: 0x42,
    });
    dgs.push(frame(&h, &[3; 8], me, dev, false, None));
    // An RC READ request to the UC QP (UC has no READ).
    let mut h = hdr(Opcode::RC_RDMA_READ_REQUEST, uc, PSN_A);
    h.reth = reth(&s.mb, 0, 8);
    dgs.push(frame(&h, &[], me, dev, false, None));
    // An RC ACK to the UD QP.
    dgs.push(frame(
        &hdr(Opcode::RC_ACKNOWLEDGE, ud, 0),
        &[],
        me,
        dev,
        false,
        None,
    ));
    send_and_count(&s, &sock, &dgs, &[("drop_bad_state", 6)]);

    // A QPN nobody has.
    let mut h = hdr(Opcode::RC_SEND_ONLY, 0x00_0BAD, PSN_A);
    h.bth.ack_req = false;
    let a = frame(&h, &[4; 8], me, dev, false, None);
    send_and_count(&s, &sock, &[a], &[("drop_unknown_qpn", 1)]);

    // Opcodes no transport defines (UC 0x2C, the reserved 0x1F and 0xE0):
    // the parser refuses them.
    let mut dgs = Vec::new();
    for op in [0x2Cu8, 0x1F, 0xE0] {
        let mut p = frame(
            &hdr(Opcode::RC_SEND_ONLY, rc, PSN_A),
            &[5; 8],
            me,
            dev,
            false,
            None,
        );
        p[0] = op;
        assert!(
            softrdma_wire::Packet::parse(&p).is_err(),
            "opcode {op:#x} parses"
        );
        // The ICRC covers the opcode: recompute it over the changed byte.
        fill_icrc_between(me, dev, &mut p);
        dgs.push(p);
    }
    send_and_count(&s, &sock, &dgs, &[("drop_malformed", 3)]);
    // An RC ACK for nothing outstanding: a stale response.
    let mut h = hdr(Opcode::RC_ACKNOWLEDGE, s.rc_a.qpn(), PSN_A + 10);
    h.aeth = Some(softrdma_wire::Aeth {
        syndrome: softrdma_wire::Syndrome::Ack { credits: 0x1F },
        msn: 3,
    });
    // (to A this time, from B's address)
    let sock_b = UdpSocket::bind(SocketAddr::new(s.cb.local_addr().ip(), 0)).unwrap();
    let ack = frame(
        &h,
        &[],
        sock_b.local_addr().unwrap(),
        s.ca.local_addr(),
        false,
        None,
    );
    let a0 = s.ca.stats().0;
    sock_b.send_to(&ack, s.ca.local_addr()).unwrap();
    let t0 = Instant::now();
    while s.ca.stats().0.rx_packets == a0.rx_packets {
        assert!(t0.elapsed() < T);
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.ca.stats().0.drop_out_of_seq, a0.drop_out_of_seq + 1);
    untouched(&s);
    still_works(&s);
}

#[test]
fn truncated_headers_and_bad_icrc_are_dropped() {
    let s = setup();
    let sock = spoofer(&s);
    let (me, dev) = (sock.local_addr().unwrap(), s.cb.local_addr());
    let (rc, ud) = (s.rc_b.qpn(), s.ud_b.qpn());
    let mut dgs = Vec::new();
    // Cut inside the RETH (BTH 12 + 8 of 16 bytes), inside the AtomicETH,
    // inside the DETH, and a READ response cut inside its AETH: each with a
    // correct ICRC over what is left.
    let mut h = hdr(Opcode::RC_RDMA_WRITE_ONLY, rc, PSN_A);
    h.reth = reth(&s.mb, 0, 8);
    dgs.push(frame(&h, &[], me, dev, false, Some(20)));
    let mut h = hdr(Opcode::RC_COMPARE_SWAP, rc, PSN_A);
    h.atomic_eth = Some(AtomicEth {
        va: s.mb.addr(),
        rkey: s.mb.rkey(),
        swap_add: 1,
        compare: 0,
    });
    dgs.push(frame(&h, &[], me, dev, false, Some(30)));
    let mut h = hdr(Opcode::UD_SEND_ONLY, ud, 0);
    h.deth = Some(Deth {
        qkey: 0x1234,
        resv8: 0,
        src_qp: 0x42,
    });
    dgs.push(frame(&h, &[], me, dev, false, Some(16)));
    dgs.push(frame(
        &hdr(Opcode::RC_RDMA_READ_RESPONSE_ONLY, rc, PSN_B),
        &[],
        me,
        dev,
        false,
        Some(14),
    ));
    // BTH only, no room for anything: 12 bytes + ICRC of an opcode that
    // needs a RETH.
    let h = hdr(Opcode::RC_RDMA_READ_REQUEST, rc, PSN_A);
    dgs.push(frame(&h, &[], me, dev, false, Some(12)));
    send_and_count(&s, &sock, &dgs, &[("drop_malformed", 5)]);

    // A perfect in-window WRITE from the peer's address with a valid R_Key,
    // one ICRC bit wrong; and the same with one payload bit flipped after
    // the ICRC was computed.
    let mut h = hdr(Opcode::RC_RDMA_WRITE_ONLY, rc, PSN_A);
    h.reth = reth(&s.mb, 0, 64);
    let bad = frame(&h, &[0xEE; 64], me, dev, true, None);
    let mut flipped = frame(&h, &[0xEE; 64], me, dev, false, None);
    flipped[40] ^= 0x01;
    send_and_count(&s, &sock, &[bad, flipped], &[("drop_bad_icrc", 2)]);
    untouched(&s);
    still_works(&s);
}

#[test]
fn huge_lengths_touch_nothing() {
    // Out of the window, a huge length is dropped at the PSN check like
    // anything else.
    let s = setup();
    let sock = spoofer(&s);
    let (me, dev) = (sock.local_addr().unwrap(), s.cb.local_addr());
    let rc = s.rc_b.qpn();
    let mut h = hdr(Opcode::RC_RDMA_WRITE_ONLY, rc, PSN_A + 77);
    h.reth = reth(&s.mb, 0, u32::MAX);
    let w = frame(&h, &[0xEE; 64], me, dev, false, None);
    send_and_count(
        &s,
        &sock,
        &[w],
        &[("drop_out_of_seq", 1), ("tx_nak_seq", 1)],
    );
    untouched(&s);
    still_works(&s);

    // In the window (a forger who knows the PSN): a 4 GiB WRITE or READ is
    // refused before any byte moves, and a SEND longer than the path MTU
    // too. Each such request ends the connection (NAK, QP in ERR): RoCE has
    // no way to tell the forger from the peer (docs/SECURITY.md).
    type Make = fn(&Setup, u32) -> (Headers, Vec<u8>);
    type Case = (&'static str, Make, &'static [(&'static str, u64)]);
    let cases: [Case; 4] = [
        (
            "WRITE of 4 GiB",
            |s, qpn| {
                let mut h = hdr(Opcode::RC_RDMA_WRITE_ONLY, qpn, PSN_A);
                h.reth = reth(&s.mb, 0, u32::MAX);
                (h, vec![0xEE; 64])
            },
            &[("tx_nak_other", 1)],
        ),
        (
            "READ of 4 GiB",
            |s, qpn| {
                let mut h = hdr(Opcode::RC_RDMA_READ_REQUEST, qpn, PSN_A);
                h.reth = reth(&s.mb, 0, u32::MAX);
                (h, vec![])
            },
            &[("tx_nak_other", 1)],
        ),
        (
            "WRITE of a region's length + 1 from its start",
            |s, qpn| {
                let mut h = hdr(Opcode::RC_RDMA_WRITE_FIRST, qpn, PSN_A);
                h.reth = reth(&s.mb, 0, LEN as u32 + 1);
                (h, vec![0xEE; 1024])
            },
            &[("tx_nak_other", 1), ("access_violations", 1)],
        ),
        (
            "SEND of 1500 bytes at path MTU 1024",
            |_, qpn| (hdr(Opcode::RC_SEND_ONLY, qpn, PSN_A), vec![0xEE; 1500]),
            &[("tx_nak_other", 1)],
        ),
    ];
    for (what, make, want) in cases {
        let s = setup();
        let sock = spoofer(&s);
        let (me, dev) = (sock.local_addr().unwrap(), s.cb.local_addr());
        if what.starts_with("SEND") {
            s.rc_b
                .post_recv(RecvWr {
                    wr_id: 1,
                    sgl: [s.mb.sge(0, LEN).unwrap()].into(),
                })
                .unwrap();
        }
        let (h, payload) = make(&s, s.rc_b.qpn());
        let d = frame(&h, &payload, me, dev, false, None);
        send_and_count(&s, &sock, &[d], want);
        assert_eq!(s.mb.to_vec(0, LEN).unwrap(), pattern(LEN, 9), "{what}");
        let t0 = Instant::now();
        while s.rc_b.query().unwrap().qp_state != QpState::Err {
            assert!(t0.elapsed() < T, "{what}: B's QP did not enter ERR");
            std::thread::sleep(Duration::from_millis(1));
        }
        // A posted receive is flushed, never filled.
        while let Some(wc) = s.cq_b.poll_one().unwrap() {
            assert_ne!(wc.status, WcStatus::Success, "{what}");
        }
    }
}

/// The limit of what RoCEv2 can check: a packet with the peer's source IP,
/// the right QPN, the next PSN, a valid R_Key and a correct ICRC is the
/// peer's packet as far as any receiver can tell. It is executed. (What
/// protects a connection from this is that the QPN, PSN and R_Key are not
/// guessable by someone who cannot see the traffic; see docs/SECURITY.md.)
#[test]
fn a_forgery_right_in_every_field_is_accepted() {
    let s = setup();
    let sock = spoofer(&s);
    let (me, dev) = (sock.local_addr().unwrap(), s.cb.local_addr());
    let mut h = hdr(Opcode::RC_RDMA_WRITE_ONLY, s.rc_b.qpn(), PSN_A);
    h.reth = reth(&s.mb, 100, 16);
    let d = frame(&h, b"forged by a peer", me, dev, false, None);
    send_and_count(&s, &sock, &[d], &[]);
    let t0 = Instant::now();
    while s.mb.to_vec(100, 16).unwrap() != b"forged by a peer" {
        assert!(t0.elapsed() < T, "the forgery was not executed");
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut want = pattern(LEN, 9);
    want[100..116].copy_from_slice(b"forged by a peer");
    assert_eq!(
        s.mb.to_vec(0, LEN).unwrap(),
        want,
        "bytes beyond the forged 16"
    );
}
