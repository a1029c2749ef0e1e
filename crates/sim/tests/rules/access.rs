//! Remote access violations: the responder NAKs (remote access error, or
//! invalid request where rxe uses it), never touches memory, and both QPs end
//! in ERR with everything else flushed.

use crate::{Pair, atomic, rdma, sge, wr};
use softrdma_sim::setup::PairOpts;
use softrdma_sim::trace::assert_lines;
use softrdma_transport::{Access, Mr, QpAttr, QpAttrMask, QpState, SendWr, WrOpcode};
use softrdma_wire::{AtomicEth, Bth, Headers, Opcode, Psn};

/// Registers a second 4 KiB MR on node 1 with `access`, in a new PD if `other_pd`.
fn extra_mr(p: &mut Pair, access: Access, other_pd: bool) -> Mr {
    let n = &mut p.net.nodes[1];
    let pd = if other_pd {
        n.ep.alloc_pd().unwrap()
    } else {
        p.b.pd
    };
    let host = n.mem.alloc(4096);
    let mr = n.ep.reg_mr(pd, host, 4096, host, access).unwrap();
    p.net.key_names.push((mr.rkey, "mrX".into()));
    mr
}

/// Posts `bad` then a SEND, runs, and checks the outcome: the request line and
/// the NAK line as given, `status` for `bad`, a flush for the SEND and for the
/// responder's posted receive, both QPs in ERR and node 1's memory unchanged.
fn violation(p: &mut Pair, bad: SendWr, request: &str, nak: &str, status: &str) {
    p.recv(1, 77, 0x8000, 64);
    let before = p.net.nodes[1].mem.snapshot();
    let id = bad.wr_id;
    let opcode = match bad.opcode {
        WrOpcode::RdmaWrite => "RdmaWrite",
        WrOpcode::RdmaRead => "RdmaRead",
        WrOpcode::AtomicFetchAndAdd => "FetchAdd",
        _ => "CompSwap",
    };
    let len = bad.length();
    p.post(0, bad);
    p.post(0, wr(9, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            &format!("0.000 0>1 {request}"),
            "0.000 0>1 RC_SEND_ONLY psn=101 A len=8",
            &format!("5.000 1>0 {nak}"),
        ],
    );
    assert_eq!(
        p.swc(0),
        [
            format!("{id} {opcode} {status} len={len}"),
            "9 Send WrFlushErr len=8".to_string()
        ]
    );
    assert_eq!(p.rwc(1), ["77 Recv WrFlushErr len=0"]);
    assert_eq!(p.state(0), QpState::Err);
    assert_eq!(p.state(1), QpState::Err);
    assert!(
        p.net.nodes[1].mem.snapshot() == before,
        "responder memory changed"
    );
}

const NAK_ACC: &str = "RC_ACKNOWLEDGE psn=100 NAK-ACC msn=0";
const NAK_INV: &str = "RC_ACKNOWLEDGE psn=100 NAK-INV msn=0";

#[test]
fn bad_rkey() {
    let mut p = Pair::new(PairOpts::default());
    let b = p.b;
    let mut w = rdma(1, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 16)], &b, 0);
    w.rkey ^= 0x1_0000; // another slot: no such MR
    let line = format!(
        "RC_RDMA_WRITE_ONLY psn=100 A va=0x100001000 rkey={:#x} dlen=16 len=16",
        w.rkey
    );
    violation(&mut p, w, &line, NAK_ACC, "RemAccessErr");
    assert_eq!(p.net.nodes[1].ep.stats().access_violations, 1);
}

#[test]
fn wrong_pd() {
    let mut p = Pair::new(PairOpts::default());
    let mr = extra_mr(&mut p, Access(15), true);
    let mut w = SendWr::new(1, WrOpcode::RdmaRead);
    w.flags = softrdma_transport::SendFlags::SIGNALED;
    w.sgl = [sge(&p.a, 0, 16)].into();
    w.remote_addr = mr.iova;
    w.rkey = mr.rkey;
    let line = "RC_RDMA_READ_REQUEST psn=100 A va=0x200001000 rkey=mrX dlen=16";
    violation(&mut p, w, line, NAK_ACC, "RemAccessErr");
}

#[test]
fn mr_without_remote_write_read_atomic() {
    let rights = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    for (missing, op) in [
        (Access::REMOTE_WRITE, WrOpcode::RdmaWrite),
        (Access::REMOTE_READ, WrOpcode::RdmaRead),
        (Access::REMOTE_ATOMIC, WrOpcode::AtomicFetchAndAdd),
    ] {
        let mut p = Pair::new(PairOpts::default());
        let mr = extra_mr(
            &mut p,
            rights.with(Access::REMOTE_ATOMIC).without(missing),
            false,
        );
        let len = if op == WrOpcode::AtomicFetchAndAdd {
            8
        } else {
            16
        };
        let mut w = SendWr::new(1, op);
        w.flags = softrdma_transport::SendFlags::SIGNALED;
        w.sgl = [sge(&p.a, 0, len)].into();
        w.remote_addr = mr.iova;
        w.rkey = mr.rkey;
        w.compare_add = 1;
        let line = match op {
            WrOpcode::RdmaWrite => {
                "RC_RDMA_WRITE_ONLY psn=100 A va=0x200001000 rkey=mrX dlen=16 len=16"
            }
            WrOpcode::RdmaRead => "RC_RDMA_READ_REQUEST psn=100 A va=0x200001000 rkey=mrX dlen=16",
            _ => "RC_FETCH_ADD psn=100 A va=0x200001000 rkey=mrX swap_add=1 cmp=0",
        };
        violation(&mut p, w, line, NAK_ACC, "RemAccessErr");
    }
}

/// The QP (not the MR) lacks the right: rxe answers "invalid request".
#[test]
fn qp_without_remote_write() {
    let mut p = Pair::new(PairOpts::default());
    let attr = QpAttr {
        qp_access_flags: Access::REMOTE_READ,
        ..QpAttr::default()
    };
    let (qpn, now) = (p.b.qpn, p.net.now);
    p.net.nodes[1]
        .ep
        .modify_qp(now, qpn, &attr, QpAttrMask::ACCESS_FLAGS)
        .unwrap();
    let b = p.b;
    let w = rdma(1, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 16)], &b, 0);
    let line = "RC_RDMA_WRITE_ONLY psn=100 A va=0x100001000 rkey=mr1 dlen=16 len=16";
    violation(&mut p, w, line, NAK_INV, "RemInvReqErr");
}

/// One byte past the end of the MR, for a WRITE and for a READ.
#[test]
fn out_of_bounds_by_one_byte() {
    let end = PairOpts::default().buf_len as u64;
    for op in [WrOpcode::RdmaWrite, WrOpcode::RdmaRead] {
        let mut p = Pair::new(PairOpts::default());
        let b = p.b;
        let w = rdma(1, op, vec![sge(&p.a, 0, 1024)], &b, end - 1023);
        let va = b.mr.iova + end - 1023;
        let line = if op == WrOpcode::RdmaWrite {
            format!("RC_RDMA_WRITE_ONLY psn=100 A va={va:#x} rkey=mr1 dlen=1024 len=1024")
        } else {
            format!("RC_RDMA_READ_REQUEST psn=100 A va={va:#x} rkey=mr1 dlen=1024")
        };
        let st = "RemAccessErr";
        violation(&mut p, w, &line, NAK_ACC, st);
    }
    // Exactly up to the end is fine.
    let mut p = Pair::new(PairOpts::default());
    let b = p.b;
    p.post(
        0,
        rdma(
            1,
            WrOpcode::RdmaWrite,
            vec![sge(&p.a, 0, 1024)],
            &b,
            end - 1024,
        ),
    );
    p.idle();
    assert_eq!(p.swc(0), ["1 RdmaWrite Success len=1024"]);
}

/// va + len wraps around 2^64: refused, not wrapped into the MR.
#[test]
fn va_plus_len_wraps_64_bits() {
    let mut p = Pair::new(PairOpts::default());
    let b = p.b;
    let mut w = rdma(1, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 32)], &b, 0);
    w.remote_addr = u64::MAX - 15;
    let line = "RC_RDMA_WRITE_ONLY psn=100 A va=0xfffffffffffffff0 rkey=mr1 dlen=32 len=32";
    violation(&mut p, w, line, NAK_ACC, "RemAccessErr");
}

/// A misaligned atomic is refused at post time (EINVAL); one injected on the
/// wire is NAKed "invalid request" (rxe) and the responder goes to ERR.
#[test]
fn misaligned_atomic() {
    let mut p = Pair::new(PairOpts::default());
    let b = p.b;
    let w = atomic(1, WrOpcode::AtomicFetchAndAdd, sge(&p.a, 0, 8), &b, 4);
    let now = p.net.now;
    let e = p.net.nodes[0].ep.post_send(now, p.a.qpn, w).unwrap_err();
    assert_eq!(e.errno(), 22);
    let before = p.net.nodes[1].mem.snapshot();
    let mut h = Headers::new(Bth::new(Opcode::RC_FETCH_ADD, b.qpn, Psn::new(100)));
    h.bth.ack_req = true;
    h.atomic_eth = Some(AtomicEth {
        va: b.mr.iova + 4,
        rkey: b.mr.rkey,
        swap_add: 1,
        compare: 0,
    });
    p.net.inject(0, 1, &h, &[]);
    p.idle();
    assert_lines(
        &p.net.lines(),
        &[
            "0.000 0>1 RC_FETCH_ADD psn=100 A va=0x100001004 rkey=mr1 swap_add=1 cmp=0",
            "5.000 1>0 RC_ACKNOWLEDGE psn=100 NAK-INV msn=0",
        ],
    );
    assert_eq!(p.state(1), QpState::Err);
    assert!(p.net.nodes[1].mem.snapshot() == before);
    // The requester never sent that PSN: the NAK is stale to it.
    assert_eq!(p.state(0), QpState::Rts);
    assert_eq!(p.net.nodes[0].ep.stats().drop_out_of_seq, 1);
}
