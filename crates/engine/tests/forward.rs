//! Issue 16: a stale steering table delays datagrams, never loses them.
//!
//! Two engines of this process are members of one host device (one address
//! and port, one reuseport group). The test joins the group with a socket of
//! its own and attaches a program whose table swaps the two members, as a
//! death moves sockets before a reconciliation catches up. UD datagrams
//! from A to B then reach A's socket first: A hands them on to B through its
//! forwarding socket, and every one arrives, byte for byte (UD has no
//! retransmission: a dropped datagram would be lost).

mod common;

use softrdma_engine::transport::{
    Access, AddressVector, QpAttr, QpAttrMask as M, QpState, QpType, RecvWr, SendFlags, SendWr,
    Sge, UdDest, WcStatus, WrOpcode,
};
use softrdma_engine::{Engine, EngineConfig};
use softrdma_udp::{RoceSocket, SocketConfig, SteerProgram, SteerTable};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

const QKEY: u32 = 0x1111_2222;
const N: usize = 32;
const GRH: usize = 40;

struct Ud {
    e: Engine,
    qpn: u32,
    cq: softrdma_engine::transport::CqHandle,
    buf: Vec<u8>,
    lkey: u32,
}

fn ud(addr: SocketAddr) -> Ud {
    let e = Engine::start(EngineConfig::bound_to(addr)).unwrap();
    let mut buf = vec![0u8; 1 << 16];
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(256).unwrap();
    let qpn = common::create_qp(&e, QpType::Ud, pd, cq, 64, 1);
    let ptr = buf.as_mut_ptr() as u64;
    let mr = e
        .reg_mr(pd, ptr, buf.len() as u64, ptr, Access::LOCAL_WRITE)
        .unwrap();
    let mut a = QpAttr {
        qp_state: QpState::Init,
        qkey: QKEY,
        port_num: 1,
        ..QpAttr::default()
    };
    e.modify_qp(qpn, &a, M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY)
        .unwrap();
    a.qp_state = QpState::Rtr;
    e.modify_qp(qpn, &a, M::STATE).unwrap();
    a.qp_state = QpState::Rts;
    e.modify_qp(qpn, &a, M::STATE | M::SQ_PSN).unwrap();
    Ud {
        e,
        qpn,
        cq,
        buf,
        lkey: mr.lkey,
    }
}

/// The member slot of an engine's QPs (bits 23..16 of a QPN).
fn slot(u: &Ud) -> u8 {
    (u.qpn >> 16) as u8
}

#[test]
fn a_stale_table_delays_ud_datagrams_but_loses_none() {
    let port = common::free_udp_port();
    let ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 61));
    let addr = SocketAddr::new(ip, port);
    let mut a = ud(addr);
    let mut b = ud(addr);
    assert_ne!(slot(&a), slot(&b), "two members of one host device");
    // The group is [A, B]; a third socket joins and swaps them in the table.
    let spy = RoceSocket::bind(addr, &SocketConfig::default().with_reuseport(true)).unwrap();
    let swapped = SteerTable {
        members: vec![(slot(&a), 1), (slot(&b), 0)],
        listeners: vec![],
        fallback: 0,
    };
    spy.attach_steering(&SteerProgram::new(&swapped).unwrap())
        .unwrap();

    let base = b.buf.as_mut_ptr() as u64;
    for i in 0..N {
        b.e.post_recv(
            b.qpn,
            RecvWr {
                wr_id: i as u64,
                sgl: [Sge {
                    addr: base + (i * 1024) as u64,
                    length: 1024,
                    lkey: b.lkey,
                }]
                .into(),
            },
        )
        .unwrap();
    }
    for i in 0..N {
        a.buf[i * 100..i * 100 + 100].fill(i as u8 + 1);
    }
    let src = a.buf.as_ptr() as u64;
    for i in 0..N {
        let mut wr = SendWr::new(i as u64, WrOpcode::Send);
        wr.flags = SendFlags::SIGNALED;
        wr.sgl = [Sge {
            addr: src + (i * 100) as u64,
            length: 100,
            lkey: a.lkey,
        }]
        .into();
        wr.ud = Some(UdDest {
            av: AddressVector::to_ip(ip),
            remote_qpn: b.qpn,
            remote_qkey: QKEY,
        });
        a.e.post_send(a.qpn, wr).unwrap();
    }
    let sent = wait_wc(&a, N);
    assert!(
        sent.iter().all(|w| w.status == WcStatus::Success),
        "{sent:?}"
    );
    let got = wait_wc(&b, N);
    for w in &got {
        assert_eq!(w.status, WcStatus::Success, "{w:?}");
        assert_eq!(w.byte_len as usize, GRH + 100, "{w:?}");
        let i = w.wr_id as usize;
        let at = i * 1024 + GRH;
        // Receives complete in order: the i-th datagram sent landed in the i-th buffer.
        assert!(
            b.buf[at..at + 100].iter().all(|&x| x == i as u8 + 1),
            "datagram {i} corrupted"
        );
    }
    let count = |e: &Engine, name: &str| {
        e.host_counters()
            .into_iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| v)
    };
    assert!(
        count(&a.e, "host_forwarded") >= 1,
        "the swapped table sent B's datagrams to A: {:?}",
        a.e.host_counters()
    );
    assert!(
        count(&b.e, "host_forwarded_in") >= 1,
        "{:?}",
        b.e.host_counters()
    );
    drop(spy);
}

fn wait_wc(s: &Ud, n: usize) -> Vec<softrdma_engine::transport::Wc> {
    common::wait_wc(&s.e, s.cq, n)
}
