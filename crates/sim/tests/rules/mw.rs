//! Memory windows (type 1 and 2), ATOMIC WRITE and re-registration: what
//! pyverbs' test_mr.py / test_qpex.py exercise, at the transport level.
//!
//! Node 1's MR is registered with MW_BIND here, and windows are bound on
//! node 1's QP (the one remote requests arrive at).

use crate::{Pair, rdma, sge, wr};
use softrdma_sim::setup::PairOpts;
use softrdma_transport::{Access, MwBind, MwType, QpState, Rereg, SendFlags, SendWr, WrOpcode};

fn opts() -> PairOpts {
    PairOpts {
        mr_access: PairOpts::default().mr_access | Access::MW_BIND,
        ..PairOpts::default()
    }
}

/// A window of `mw_type` allocated in node 1's PD; returns its R_Key.
fn alloc(p: &mut Pair, mw_type: MwType) -> u32 {
    let pd = p.b.pd;
    p.net.nodes[1].ep.alloc_mw(pd, mw_type).unwrap()
}

/// A signaled BIND_MW of `[off, off + len)` of node 1's MR with `access`;
/// the window's new key is its old one with the key byte incremented.
fn bind_wr(p: &Pair, id: u64, mw_rkey: u32, off: u64, len: u64, access: Access) -> SendWr {
    let mut w = wr(id, WrOpcode::BindMw, vec![]);
    w.bind = Some(MwBind {
        mw_rkey,
        new_rkey: (mw_rkey & !0xFF) | ((mw_rkey + 1) & 0xFF),
        mr_lkey: p.b.mr.lkey,
        addr: p.b.mr.iova + off,
        length: len,
        access,
    });
    w
}

fn bound_key(p: &Pair, mw_rkey: u32) -> u32 {
    p.net.nodes[1].ep.query_mw(mw_rkey).unwrap().rkey
}

/// Node 0 writes 16 bytes at `roff` of node 1's MR through `rkey`; returns
/// the completion status.
fn write_via(p: &mut Pair, id: u64, rkey: u32, roff: u64) -> String {
    let b = p.b;
    let mut w = rdma(id, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 16)], &b, roff);
    w.rkey = rkey;
    p.pattern(0, 0, 16, id as u8);
    p.post(0, w);
    p.idle();
    p.swc(0).join(" | ")
}

const RW: Access = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_READ.0);

#[test]
fn type2_bind_write_and_bounds() {
    let mut p = Pair::new(opts());
    let mw = alloc(&mut p, MwType::Two);
    let w = bind_wr(&p, 5, mw, 0x100, 0x100, RW);
    p.post(1, w);
    p.idle();
    assert_eq!(p.swc(1), ["5 BindMw Success len=0"]);
    // Binding sends nothing.
    assert!(p.net.lines().is_empty());
    let key = bound_key(&p, mw);
    assert_eq!(key, (mw & !0xFF) | ((mw + 1) & 0xFF));
    assert_eq!(
        write_via(&mut p, 1, key, 0x100),
        "1 RdmaWrite Success len=16"
    );
    assert_eq!(p.bytes(1, 0x100, 16), p.bytes(0, 0, 16));
    // The old key is dead, and the window ends where it ends.
    assert_eq!(
        write_via(&mut p, 2, key, 0x1F8),
        "2 RdmaWrite RemAccessErr len=16"
    );
    assert_eq!(p.state(0), QpState::Err);
}

#[test]
fn window_rights_are_the_windows() {
    let mut p = Pair::new(opts());
    let mw = alloc(&mut p, MwType::Two);
    let w = bind_wr(&p, 5, mw, 0, 0x1000, Access::REMOTE_READ);
    p.post(1, w);
    p.idle();
    assert_eq!(p.swc(1), ["5 BindMw Success len=0"]);
    // The MR allows REMOTE_WRITE, the window does not.
    let key = bound_key(&p, mw);
    assert_eq!(
        write_via(&mut p, 1, key, 0),
        "1 RdmaWrite RemAccessErr len=16"
    );
}

#[test]
fn type2_local_and_remote_invalidate() {
    let mut p = Pair::new(opts());
    let mw = alloc(&mut p, MwType::Two);
    let w = bind_wr(&p, 5, mw, 0, 0x1000, RW);
    p.post(1, w);
    p.idle();
    p.swc(1);
    let key = bound_key(&p, mw);
    // SEND_WITH_INV from node 0 invalidates node 1's window.
    p.recv(1, 70, 0x8000, 64);
    let mut s = wr(6, WrOpcode::SendWithInv, vec![sge(&p.a, 0, 8)]);
    s.imm_data = key;
    p.post(0, s);
    p.idle();
    assert_eq!(p.swc(0), ["6 Send Success len=8"]);
    assert_eq!(p.rwc(1), [format!("70 Recv Success len=8 inv={key:#x}")]);
    assert!(!p.net.nodes[1].ep.query_mw(mw).unwrap().valid);
    assert_eq!(
        write_via(&mut p, 1, key, 0),
        "1 RdmaWrite RemAccessErr len=16"
    );

    // LOCAL_INV on the owner's side.
    let mut p = Pair::new(opts());
    let mw = alloc(&mut p, MwType::Two);
    let w = bind_wr(&p, 5, mw, 0, 0x1000, RW);
    p.post(1, w);
    let key = (mw & !0xFF) | ((mw + 1) & 0xFF);
    let mut inv = wr(7, WrOpcode::LocalInv, vec![]);
    inv.imm_data = key;
    p.post(1, inv);
    p.idle();
    assert_eq!(
        p.swc(1),
        ["5 BindMw Success len=0", "7 LocalInv Success len=0"]
    );
    assert_eq!(
        write_via(&mut p, 1, key, 0),
        "1 RdmaWrite RemAccessErr len=16"
    );
}

#[test]
fn type1_bind_unbind_and_dealloc() {
    let mut p = Pair::new(opts());
    let mw = alloc(&mut p, MwType::One);
    let w = bind_wr(&p, 5, mw, 0, 0x1000, RW);
    p.post(1, w);
    p.idle();
    assert_eq!(p.swc(1), ["5 BindMw Success len=0"]);
    let key = bound_key(&p, mw);
    assert_eq!(
        write_via(&mut p, 1, key, 0x10),
        "1 RdmaWrite Success len=16"
    );
    // Type 1 cannot be invalidated with LOCAL_INV: the bind error flushes the QP.
    let mut inv = wr(7, WrOpcode::LocalInv, vec![]);
    inv.imm_data = key;
    p.post(1, inv);
    p.idle();
    assert_eq!(p.swc(1), ["7 LocalInv LocQpOpErr len=0"]);
    assert_eq!(p.state(1), QpState::Err);

    // Rebinding with length 0 unbinds; deallocating kills the key.
    let mut p = Pair::new(opts());
    let mw = alloc(&mut p, MwType::One);
    let w = bind_wr(&p, 5, mw, 0, 0x1000, RW);
    p.post(1, w);
    p.idle();
    let key = bound_key(&p, mw);
    let w = bind_wr(&p, 6, key, 0, 0, Access::EMPTY);
    p.post(1, w);
    p.idle();
    assert_eq!(
        p.swc(1),
        ["5 BindMw Success len=0", "6 BindMw Success len=0"]
    );
    let key2 = bound_key(&p, mw);
    assert_eq!(
        write_via(&mut p, 1, key2, 0),
        "1 RdmaWrite RemAccessErr len=16"
    );

    let mut p = Pair::new(opts());
    let mw = alloc(&mut p, MwType::One);
    let w = bind_wr(&p, 5, mw, 0, 0x1000, RW);
    p.post(1, w);
    p.idle();
    let key = bound_key(&p, mw);
    p.net.nodes[1].ep.dealloc_mw(key).unwrap();
    assert_eq!(
        write_via(&mut p, 1, key, 0),
        "1 RdmaWrite RemAccessErr len=16"
    );
}

#[test]
fn bind_errors() {
    // The MR lacks MW_BIND.
    let mut p = Pair::new(PairOpts::default());
    let mw = alloc(&mut p, MwType::Two);
    let w = bind_wr(&p, 5, mw, 0, 0x100, RW);
    p.post(1, w);
    p.idle();
    assert_eq!(p.swc(1), ["5 BindMw MwBindErr len=0"]);
    assert_eq!(p.state(1), QpState::Err);
    // Outside the MR, and a stale window key.
    for (off, len, stale) in [(opts().buf_len as u64 - 8, 16, false), (0, 16, true)] {
        let mut p = Pair::new(opts());
        let mw = alloc(&mut p, MwType::Two);
        let key = if stale { mw ^ 0x80 } else { mw };
        let w = bind_wr(&p, 5, key, off, len, RW);
        p.post(1, w);
        p.idle();
        assert_eq!(p.swc(1), ["5 BindMw MwBindErr len=0"]);
    }
    // A BIND_MW naming no window is refused at post time.
    let mut p = Pair::new(opts());
    let w = bind_wr(&p, 5, 0x8123_4500, 0, 16, RW);
    let (now, qpn) = (p.net.now, p.b.qpn);
    assert!(p.net.nodes[1].ep.post_send(now, qpn, w).is_err());
}

#[test]
fn local_op_completes_after_what_precedes_it() {
    let mut p = Pair::new(opts());
    let a = p.a;
    let mw = p.net.nodes[0].ep.alloc_mw(a.pd, MwType::Two).unwrap();
    let a_mr = p.a.mr;
    let b = p.b;
    let w1 = rdma(1, WrOpcode::RdmaWrite, vec![sge(&p.a, 0, 4000)], &b, 0);
    p.post(0, w1);
    let mut bind = wr(2, WrOpcode::BindMw, vec![]);
    bind.bind = Some(MwBind {
        mw_rkey: mw,
        new_rkey: mw.wrapping_add(1),
        mr_lkey: a_mr.lkey,
        addr: a_mr.iova,
        length: 64,
        access: RW,
    });
    p.post(0, bind);
    // Before the WRITE is acknowledged, neither has completed.
    p.net.step();
    assert!(p.swc(0).is_empty());
    p.idle();
    assert_eq!(
        p.swc(0),
        ["1 RdmaWrite Success len=4000", "2 BindMw Success len=0"]
    );
}

#[test]
fn atomic_write_places_eight_bytes() {
    let mut p = Pair::new(PairOpts::default());
    let b = p.b;
    let mut w = SendWr::new(1, WrOpcode::AtomicWrite);
    w.flags = SendFlags::SIGNALED;
    w.inline = Some(0x1122_3344_5566_7788u64.to_ne_bytes().to_vec());
    w.remote_addr = b.mr.iova + 0x40;
    w.rkey = b.mr.rkey;
    p.post(0, w);
    p.idle();
    let lines = p.net.lines();
    assert!(lines[0].contains("RC_ATOMIC_WRITE"), "{lines:?}");
    assert_eq!(p.swc(0), ["1 AtomicWrite Success len=8"]);
    assert_eq!(crate::u64_at(&p, 1, 0x40), 0x1122_3344_5566_7788);
    // Misaligned or not 8 bytes: refused at post time.
    let mut w = SendWr::new(2, WrOpcode::AtomicWrite);
    w.inline = Some(vec![0; 8]);
    w.remote_addr = b.mr.iova + 4;
    w.rkey = b.mr.rkey;
    let (now, qpn) = (p.net.now, p.a.qpn);
    assert!(p.net.nodes[0].ep.post_send(now, qpn, w).is_err());
}

#[test]
fn rereg_keeps_keys_and_changes_rights_pd_translation() {
    let mut p = Pair::new(PairOpts::default());
    let b = p.b;
    let key = b.mr.rkey;
    let ep = &mut p.net.nodes[1].ep;
    let mr = ep
        .rereg_mr(
            key,
            Rereg {
                access: Some(Access::LOCAL_WRITE),
                ..Rereg::default()
            },
        )
        .unwrap();
    assert_eq!((mr.lkey, mr.rkey), (key, key));
    assert_eq!(
        write_via(&mut p, 1, key, 0),
        "1 RdmaWrite RemAccessErr len=16"
    );

    // Another PD: the peer's writes are refused (the QP's PD differs).
    let mut p = Pair::new(PairOpts::default());
    let key = p.b.mr.rkey;
    let ep = &mut p.net.nodes[1].ep;
    let pd2 = ep.alloc_pd().unwrap();
    ep.rereg_mr(
        key,
        Rereg {
            pd: Some(pd2),
            ..Rereg::default()
        },
    )
    .unwrap();
    assert!(ep.dealloc_pd(pd2).is_err(), "the PD has the MR now");
    assert_eq!(
        write_via(&mut p, 1, key, 0),
        "1 RdmaWrite RemAccessErr len=16"
    );

    // New memory: the same key reaches the new buffer.
    let mut p = Pair::new(PairOpts::default());
    let key = p.b.mr.rkey;
    let n = &mut p.net.nodes[1];
    let host = n.mem.alloc(4096);
    n.ep.rereg_mr(
        key,
        Rereg {
            translation: Some((host, 4096, host)),
            ..Rereg::default()
        },
    )
    .unwrap();
    let a = p.a;
    let mut w = rdma(1, WrOpcode::RdmaWrite, vec![sge(&a, 0, 16)], &p.b, 0);
    w.remote_addr = host + 32;
    w.rkey = key;
    p.pattern(0, 0, 16, 9);
    p.post(0, w);
    p.idle();
    assert_eq!(p.swc(0), ["1 RdmaWrite Success len=16"]);
    assert_eq!(
        p.net.nodes[1].mem.bytes(host + 32, 16),
        &p.bytes(0, 0, 16)[..]
    );
    // Refused changes leave the region alone.
    let ep = &mut p.net.nodes[1].ep;
    let bad = Rereg {
        access: Some(Access::REMOTE_WRITE),
        ..Rereg::default()
    };
    assert!(ep.rereg_mr(key, bad).is_err());
    assert_eq!(ep.query_mr(key).unwrap().host, host);
}

#[test]
fn dereg_and_destroy_unbind_windows() {
    // Deregistering the region behind a window ends the window's access.
    let mut p = Pair::new(opts());
    let mw = alloc(&mut p, MwType::One);
    let w = bind_wr(&p, 5, mw, 0, 0x1000, RW);
    p.post(1, w);
    p.idle();
    let key = bound_key(&p, mw);
    let mr_key = p.b.mr.lkey;
    p.net.nodes[1].ep.dereg_mr(mr_key).unwrap();
    assert!(p.net.nodes[1].ep.query_mw(mw).unwrap().mr_key.is_none());
    assert_eq!(
        write_via(&mut p, 1, key, 0),
        "1 RdmaWrite RemAccessErr len=16"
    );

    // Destroying the QP a type 2 window is bound to unbinds it.
    let mut p = Pair::new(opts());
    let mw = alloc(&mut p, MwType::Two);
    let w = bind_wr(&p, 5, mw, 0, 0x1000, RW);
    p.post(1, w);
    p.idle();
    let qpn = p.b.qpn;
    p.net.nodes[1].ep.destroy_qp(qpn).unwrap();
    let m = p.net.nodes[1].ep.query_mw(mw).unwrap();
    assert!(!m.valid && m.qpn.is_none());
}
