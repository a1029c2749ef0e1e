//! Bad input through the safe API (and, where the safe API rules it out, at
//! the engine level): every failure has the errno rdma-core gives, the
//! completion status rxe gives, and leaves the target memory byte-for-byte
//! untouched. Two devices in one process talk over real UDP on loopback.

mod common;

use common::loopback::{ALL, connect_pair, two_devices_in, ud_qp};
use softrdma::verbs::*;
use softrdma_engine::transport::{QpInitAttr, VerbsError};
use softrdma_transport::fill_icrc_between;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

const EINVAL: i32 = 22;
const ENOMEM: i32 = 12;
const EBUSY: i32 = 16;
const T: Duration = Duration::from_secs(10);

/// Two devices on distinct 127.0.1.x addresses sharing a free UDP port.
fn two_contexts() -> (Context, Context) {
    two_devices_in(1)
}

/// A connected RC pair; `a` on `ca`, `b` on `cb`, each with its own CQ.
struct Pair {
    qa: Qp,
    qb: Qp,
    cqa: Cq,
    cqb: Cq,
}

fn rc_pair(ca: &Context, pa: &Pd, cb: &Context, pb: &Pd, b_grants: Access) -> Pair {
    let cqa = ca.create_cq(64, None).unwrap();
    let cqb = cb.create_cq(64, None).unwrap();
    let qa = pa.create_qp(&QpInit::new(QpType::Rc, &cqa, &cqa)).unwrap();
    let qb = pb.create_qp(&QpInit::new(QpType::Rc, &cqb, &cqb)).unwrap();
    qa.to_init(ALL.without(Access::LOCAL_WRITE), 0).unwrap();
    qb.to_init(b_grants, 0).unwrap();
    connect_pair((ca, &qa), (cb, &qb), (0x200, 0x100));
    Pair { qa, qb, cqa, cqb }
}

/// A signalled request `id`: `op` from `sge`, to the start of `target` where
/// the operation has one.
fn signaled(id: u64, op: WrOpcode, sge: Sge, target: Option<&Mr>) -> SendWr {
    let mut w = SendWr::new(id, op);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [sge].into();
    if let Some(t) = target {
        w.remote_addr = t.addr();
        w.rkey = t.rkey();
    }
    w
}

impl Pair {
    /// Posts `w` on `qa`; returns its completion.
    fn complete(&self, w: SendWr) -> Wc {
        self.qa.post_send(w).unwrap();
        self.cqa.poll_blocking(1, T).unwrap()[0]
    }

    /// Posts receive `wr_id` into `sge` on `qb`.
    fn recv(&self, wr_id: u64, sge: Sge) {
        self.qb
            .post_recv(RecvWr {
                wr_id,
                sgl: [sge].into(),
            })
            .unwrap();
    }
}

fn errno<T: std::fmt::Debug>(r: softrdma::Result<T>) -> i32 {
    r.expect_err("the call must fail").errno()
}

fn state(q: &Qp) -> QpState {
    q.query().unwrap().qp_state
}

/// A recognisable fill.
fn fill(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

// ---------------------------------------------------------------------------
// modify_qp: illegal transitions, missing/extra attributes, bad values

#[test]
fn illegal_transitions_and_missing_attributes_are_einval() {
    let (ca, cb) = two_contexts();
    let pd = ca.alloc_pd().unwrap();
    let cq = ca.create_cq(16, None).unwrap();
    let qp = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    let peer = Gid::from_ip(cb.local_addr().ip());
    use QpAttrMask as M;
    let init_mask = M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS;
    let rtr_mask = M::STATE
        | M::AV
        | M::PATH_MTU
        | M::DEST_QPN
        | M::RQ_PSN
        | M::MAX_DEST_RD_ATOMIC
        | M::MIN_RNR_TIMER;
    let rts_mask =
        M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC;
    let attr = |s: QpState| QpAttr {
        qp_state: s,
        port_num: 1,
        path_mtu: Mtu::M1024,
        dest_qp_num: 0x42,
        ah_attr: AddressVector::to_ip(peer.to_ip()),
        max_dest_rd_atomic: 1,
        max_rd_atomic: 1,
        min_rnr_timer: 12,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    };
    // Each failed modify names the problem and leaves the QP where it was.
    let refuse = |a: &QpAttr, m: M, why: &str| {
        let before = state(&qp);
        let e = qp.modify(a, m).expect_err(why);
        assert_eq!(e.errno(), EINVAL, "{why}: {e}");
        assert_eq!(
            state(&qp),
            before,
            "{why}: a failed modify changed the state"
        );
        e.to_string()
    };

    // From RESET only INIT (or RESET/ERR) is legal.
    for to in [QpState::Rtr, QpState::Rts, QpState::Sqd, QpState::Sqe] {
        let m = refuse(&attr(to), rtr_mask | rts_mask, "RESET -> beyond INIT");
        assert!(m.contains("illegal"), "{m}");
    }
    // RESET -> INIT without each required attribute, and with one RC does not take.
    for missing in [M::ACCESS_FLAGS, M::PORT, M::PKEY_INDEX] {
        let m = refuse(
            &attr(QpState::Init),
            init_mask.without(missing),
            "missing INIT attribute",
        );
        assert!(m.contains(&missing.names()), "{m}");
    }
    refuse(
        &attr(QpState::Init),
        init_mask | M::QKEY,
        "QKEY on an RC QP",
    );
    // Bad values.
    let mut a = attr(QpState::Init);
    a.port_num = 2;
    refuse(&a, init_mask, "port 2");
    let mut a = attr(QpState::Init);
    a.pkey_index = 1;
    refuse(&a, init_mask, "pkey index 1");

    qp.modify(&attr(QpState::Init), init_mask).unwrap();
    assert_eq!(state(&qp), QpState::Init);
    // INIT -> RTS skips RTR.
    refuse(&attr(QpState::Rts), rts_mask, "INIT -> RTS");
    // INIT -> RTR without each required attribute.
    for missing in [
        M::AV,
        M::PATH_MTU,
        M::DEST_QPN,
        M::RQ_PSN,
        M::MAX_DEST_RD_ATOMIC,
        M::MIN_RNR_TIMER,
    ] {
        let m = refuse(
            &attr(QpState::Rtr),
            rtr_mask.without(missing),
            "missing RTR attribute",
        );
        assert!(m.contains(&missing.names()), "{m}");
    }
    let mut a = attr(QpState::Rtr);
    a.ah_attr.sgid_index = 9;
    refuse(&a, rtr_mask, "no GID 9");
    let mut a = attr(QpState::Rtr);
    a.max_dest_rd_atomic = 200;
    refuse(&a, rtr_mask, "max_dest_rd_atomic above the device limit");
    let mut a = attr(QpState::Rtr);
    a.min_rnr_timer = 32;
    refuse(&a, rtr_mask, "min_rnr_timer 32");
    // cur_qp_state that does not match.
    let mut a = attr(QpState::Rtr);
    a.cur_qp_state = QpState::Rts;
    refuse(&a, rtr_mask | M::CUR_STATE, "cur_qp_state mismatch");

    qp.modify(&attr(QpState::Rtr), rtr_mask).unwrap();
    for missing in [
        M::TIMEOUT,
        M::RETRY_CNT,
        M::RNR_RETRY,
        M::SQ_PSN,
        M::MAX_QP_RD_ATOMIC,
    ] {
        refuse(
            &attr(QpState::Rts),
            rts_mask.without(missing),
            "missing RTS attribute",
        );
    }
    for (field, v) in [("timeout", 32u8), ("retry_cnt", 8), ("rnr_retry", 8)] {
        let mut a = attr(QpState::Rts);
        match field {
            "timeout" => a.timeout = v,
            "retry_cnt" => a.retry_cnt = v,
            _ => a.rnr_retry = v,
        }
        refuse(&a, rts_mask, field);
    }
    qp.modify(&attr(QpState::Rts), rts_mask).unwrap();
    assert_eq!(state(&qp), QpState::Rts);
    // RTS -> RTR and RTS -> INIT are illegal; any state -> ERR and -> RESET are legal.
    refuse(&attr(QpState::Rtr), M::STATE, "RTS -> RTR");
    refuse(&attr(QpState::Init), M::STATE, "RTS -> INIT");
    qp.modify(&attr(QpState::Err), M::STATE).unwrap();
    // SQE -> RTS exists for UC/UD only; ERR -> RTS never.
    refuse(&attr(QpState::Rts), M::STATE, "ERR -> RTS");
    qp.modify(&attr(QpState::Reset), M::STATE).unwrap();
    assert_eq!(state(&qp), QpState::Reset);

    // UD: INIT needs a Q_Key and takes no access flags.
    let ud = pd.create_qp(&QpInit::new(QpType::Ud, &cq, &cq)).unwrap();
    let mut a = attr(QpState::Init);
    a.qkey = 0x1111_1111;
    let e = ud
        .modify(&a, M::STATE | M::PKEY_INDEX | M::PORT)
        .unwrap_err();
    assert_eq!(e.errno(), EINVAL);
    assert!(e.to_string().contains("QKEY"), "{e}");
    assert_eq!(
        ud.modify(
            &a,
            M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY | M::ACCESS_FLAGS
        )
        .unwrap_err()
        .errno(),
        EINVAL
    );
    assert_eq!(state(&ud), QpState::Reset);
}

// ---------------------------------------------------------------------------
// Posting work requests the QP cannot take

#[test]
fn post_on_reset_or_init_qp_and_other_bad_posts_fail() {
    let (ca, cb) = two_contexts();
    let pd = ca.alloc_pd().unwrap();
    let mr = pd.alloc_mr(4096, Access::LOCAL_WRITE).unwrap();
    let cq = ca.create_cq(16, None).unwrap();
    let mut init = QpInit::new(QpType::Rc, &cq, &cq);
    init.cap.max_send_wr = 1;
    init.cap.max_recv_wr = 2;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    let qp = pd.create_qp(&init).unwrap();
    let send = || signaled(1, WrOpcode::Send, mr.sge(0, 64).unwrap(), None);
    let recv = |id| RecvWr {
        wr_id: id,
        sgl: [mr.sge(0, 64).unwrap()].into(),
    };

    // RESET: neither queue takes work.
    assert_eq!(errno(qp.post_send(send())), EINVAL);
    assert_eq!(errno(qp.post_recv(recv(1))), EINVAL);
    // INIT: receives yes (IBTA 10.8.2; rc_pingpong posts its receives in INIT), sends no.
    qp.to_init(Access::EMPTY, 0).unwrap();
    assert_eq!(errno(qp.post_send(send())), EINVAL);
    qp.post_recv(recv(1)).unwrap();
    qp.post_recv(recv(2)).unwrap();
    // Receive queue full (max_recv_wr 2): ENOMEM.
    assert_eq!(errno(qp.post_recv(recv(3))), ENOMEM);
    // More SGEs than max_recv_sge.
    let two = RecvWr {
        wr_id: 4,
        sgl: vec![mr.sge(0, 8).unwrap(), mr.sge(8, 8).unwrap()].into(),
    };
    assert_eq!(errno(qp.post_recv(two)), EINVAL);

    // RTR: still no sends. The peer QPN does not exist, so nothing is ever ACKed.
    let mut cp = ConnectParams::new(0xAB_CDEF, cb.query_gid(1, 0).unwrap(), 0, 0);
    cp.timeout = 0; // no retransmit timer: the send below stays outstanding
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: cp.mtu,
            dest_qp_num: cp.remote_qpn,
            ah_attr: AddressVector::to_ip(cb.local_addr().ip()),
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::AV
            | QpAttrMask::PATH_MTU
            | QpAttrMask::DEST_QPN
            | QpAttrMask::RQ_PSN
            | QpAttrMask::MAX_DEST_RD_ATOMIC
            | QpAttrMask::MIN_RNR_TIMER,
    )
    .unwrap();
    assert_eq!(errno(qp.post_send(send())), EINVAL);
    qp.modify(
        &QpAttr {
            qp_state: QpState::Rts,
            timeout: 0,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
            ..QpAttr::default()
        },
        QpAttrMask::STATE
            | QpAttrMask::TIMEOUT
            | QpAttrMask::RETRY_CNT
            | QpAttrMask::RNR_RETRY
            | QpAttrMask::SQ_PSN
            | QpAttrMask::MAX_QP_RD_ATOMIC,
    )
    .unwrap();

    // RTS: malformed requests are refused before they are queued.
    let mut w = send();
    w.sgl.push(mr.sge(64, 8).unwrap());
    assert_eq!(
        errno(qp.post_send(w)),
        EINVAL,
        "more SGEs than max_send_sge"
    );
    let mut w = SendWr::new(2, WrOpcode::AtomicFetchAndAdd);
    w.sgl = [mr.sge(0, 4).unwrap()].into();
    w.remote_addr = 0x1000;
    assert_eq!(errno(qp.post_send(w)), EINVAL, "4-byte atomic");
    let mut w = SendWr::new(2, WrOpcode::AtomicCmpAndSwp);
    w.sgl = [mr.sge(0, 8).unwrap()].into();
    w.remote_addr = 0x1004;
    assert_eq!(errno(qp.post_send(w)), EINVAL, "misaligned atomic");
    let mut w = SendWr::new(2, WrOpcode::Send);
    w.flags = SendFlags::INLINE;
    w.inline = Some(vec![0; 4096]);
    assert_eq!(errno(qp.post_send(w)), EINVAL, "inline above the limit");
    // Send queue full (max_send_wr 1, never ACKed): ENOMEM.
    qp.post_send(send()).unwrap();
    assert_eq!(errno(qp.post_send(send())), ENOMEM);

    // UD: RDMA opcodes and sends without an address handle are refused.
    let ud = ud_qp(&pd, &cq, 0x1111);
    let mut w = SendWr::new(3, WrOpcode::RdmaWrite);
    w.sgl = [mr.sge(0, 8).unwrap()].into();
    assert_eq!(errno(ud.post_send(w)), EINVAL);
    assert_eq!(errno(ud.post_send(send())), EINVAL, "UD send without an AH");
    // Nothing above produced a completion.
    assert_eq!(cq.poll_one().unwrap(), None);

    // Creation with impossible sizes.
    assert_eq!(errno(ca.create_cq(0, None)), EINVAL);
    assert_eq!(errno(ca.create_cq(u32::MAX, None)), EINVAL);
    let mut init = QpInit::new(QpType::Rc, &cq, &cq);
    init.cap.max_send_wr = 1 << 30;
    assert_eq!(errno(pd.create_qp(&init)), EINVAL);
    assert_eq!(
        errno(pd.alloc_mr(64, Access::REMOTE_WRITE)),
        EINVAL,
        "REMOTE_WRITE without LOCAL_WRITE"
    );
    // An address handle without a GRH has no destination on RoCE.
    let mut av = AddressVector::to_ip(cb.local_addr().ip());
    av.is_global = false;
    assert_eq!(errno(pd.create_ah(av)), EINVAL);
}

// ---------------------------------------------------------------------------
// Local protection errors

#[test]
fn bad_lkey_is_local_protection_error() {
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let ma = pa.alloc_mr(8192, ALL).unwrap();
    let mb = pb.alloc_mr(8192, ALL).unwrap();
    let ro = pa.alloc_mr(4096, Access::REMOTE_READ).unwrap(); // no LOCAL_WRITE
    ma.write(0, &fill(8192, 1)).unwrap();
    mb.write(0, &fill(8192, 2)).unwrap();
    let before_b = mb.to_vec(0, 8192).unwrap();

    // (1) A SEND whose SGE names a key that does not exist.
    let p = rc_pair(&ca, &pa, &cb, &pb, ALL);
    p.recv(7, mb.sge(0, 4096).unwrap());
    let mut sge = ma.sge(0, 100).unwrap();
    sge.lkey ^= 0x5A; // same slot, wrong random tag
    let wc = p.complete(signaled(1, WrOpcode::Send, sge, None));
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocProtErr));
    assert_eq!(state(&p.qa), QpState::Err);
    // Nothing reached the peer.
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(p.cqb.poll_one().unwrap(), None);
    assert_eq!(mb.to_vec(0, 8192).unwrap(), before_b);

    // (2) A valid key but a range past the end of its region.
    let p = rc_pair(&ca, &pa, &cb, &pb, ALL);
    let past_end = Sge {
        addr: ma.addr() + 8000,
        length: 300,
        lkey: ma.lkey(),
    };
    let w = signaled(2, WrOpcode::RdmaWrite, past_end, Some(&mb));
    assert_eq!(p.complete(w).status, WcStatus::LocProtErr);
    assert_eq!(mb.to_vec(0, 8192).unwrap(), before_b);

    // (3) An RDMA READ into a region without LOCAL_WRITE.
    let p = rc_pair(&ca, &pa, &cb, &pb, ALL);
    let before_ro = ro.to_vec(0, 4096).unwrap();
    let w = signaled(3, WrOpcode::RdmaRead, ro.sge(0, 4096).unwrap(), Some(&mb));
    assert_eq!(p.complete(w).status, WcStatus::LocProtErr);
    assert_eq!(ro.to_vec(0, 4096).unwrap(), before_ro);

    // (4) A receive with a bad key: the responder completes it with LOC_PROT_ERR
    // and NAKs, so the requester sees a remote operational error (as rxe does).
    let p = rc_pair(&ca, &pa, &cb, &pb, ALL);
    let mut bad = mb.sge(0, 4096).unwrap();
    bad.lkey ^= 0x5A;
    p.recv(9, bad);
    p.qa.post_send(signaled(4, WrOpcode::Send, ma.sge(0, 2000).unwrap(), None))
        .unwrap();
    let rx = p.cqb.poll_blocking(1, T).unwrap()[0];
    assert_eq!((rx.wr_id, rx.status), (9, WcStatus::LocProtErr));
    assert_eq!(
        p.cqa.poll_blocking(1, T).unwrap()[0].status,
        WcStatus::RemOpErr
    );
    assert_eq!(mb.to_vec(0, 8192).unwrap(), before_b);
}

// ---------------------------------------------------------------------------
// Remote access errors: the requester gets REM_ACCESS_ERR, the target is untouched

#[test]
fn remote_access_errors_leave_remote_memory_untouched() {
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let other_pd = cb.alloc_pd().unwrap();
    const LEN: usize = 64 * 1024;
    let ma = pa.alloc_mr(LEN, ALL).unwrap();
    ma.write(0, &fill(LEN, 3)).unwrap();
    // Target regions on B: full rights, and each right missing in turn.
    let full = pb.alloc_mr(LEN, ALL).unwrap();
    let no_write = pb
        .alloc_mr(
            LEN,
            Access::LOCAL_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    let no_read = pb
        .alloc_mr(
            LEN,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_ATOMIC,
        )
        .unwrap();
    let no_atomic = pb
        .alloc_mr(
            LEN,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let foreign = other_pd.alloc_mr(LEN, ALL).unwrap();
    let targets = [&full, &no_write, &no_read, &no_atomic, &foreign];
    for (i, m) in targets.iter().enumerate() {
        m.write(0, &fill(LEN, 0x40 + i as u8)).unwrap();
    }
    let snapshot = |m: &Mr| m.to_vec(0, LEN).unwrap();
    let originals: Vec<Vec<u8>> = targets.iter().map(|m| snapshot(m)).collect();
    let local_before = snapshot(&ma);

    enum Op {
        Write,
        WriteImm,
        Read,
        Cas,
        Fadd,
    }
    struct Case {
        name: &'static str,
        op: Op,
        target: usize,
        offset: i64,
        len: usize,
        rkey_xor: u32,
    }
    let c = |name, op, target, offset, len, rkey_xor| Case {
        name,
        op,
        target,
        offset,
        len,
        rkey_xor,
    };
    let cases = [
        c("WRITE, bad rkey", Op::Write, 0, 0, 4096, 0x5A),
        c(
            "WRITE, one byte past the end",
            Op::Write,
            0,
            (LEN - 4095) as i64,
            4096,
            0,
        ),
        c("WRITE, starting before the region", Op::Write, 0, -1, 16, 0),
        c(
            "WRITE, multi-packet, past the end",
            Op::Write,
            0,
            8192,
            LEN,
            0,
        ),
        c("WRITE without REMOTE_WRITE", Op::Write, 1, 0, 4096, 0),
        c("WRITE into another PD's region", Op::Write, 4, 0, 4096, 0),
        c(
            "WRITE with immediate, past the end",
            Op::WriteImm,
            0,
            (LEN - 10) as i64,
            64,
            0,
        ),
        c("READ, bad rkey", Op::Read, 0, 0, 4096, 0x5A),
        c(
            "READ, past the end",
            Op::Read,
            0,
            (LEN - 100) as i64,
            4096,
            0,
        ),
        c("READ without REMOTE_READ", Op::Read, 2, 0, 4096, 0),
        c("CMP_SWAP, bad rkey", Op::Cas, 0, 0, 8, 0x5A),
        c("CMP_SWAP without REMOTE_ATOMIC", Op::Cas, 3, 0, 8, 0),
        c("FETCH_ADD without REMOTE_ATOMIC", Op::Fadd, 3, 64, 8, 0),
        c("FETCH_ADD past the end", Op::Fadd, 0, LEN as i64, 8, 0),
    ];
    for case in cases {
        let p = rc_pair(&ca, &pa, &cb, &pb, ALL);
        let violations_before = cb.stats().0.access_violations;
        let t = targets[case.target];
        let (opcode, want) = match case.op {
            Op::Write => (WrOpcode::RdmaWrite, WcOpcode::RdmaWrite),
            Op::WriteImm => (WrOpcode::RdmaWriteWithImm, WcOpcode::RdmaWrite),
            Op::Read => (WrOpcode::RdmaRead, WcOpcode::RdmaRead),
            Op::Cas => (WrOpcode::AtomicCmpAndSwp, WcOpcode::CompSwap),
            Op::Fadd => (WrOpcode::AtomicFetchAndAdd, WcOpcode::FetchAdd),
        };
        if matches!(case.op, Op::WriteImm) {
            p.qb.post_recv(RecvWr {
                wr_id: 99,
                sgl: vec![].into(),
            })
            .unwrap();
        }
        let mut w = signaled(1, opcode, ma.sge(0, case.len).unwrap(), None);
        w.remote_addr = t.addr().wrapping_add_signed(case.offset);
        w.rkey = t.rkey() ^ case.rkey_xor;
        w.compare_add = u64::from_ne_bytes(originals[case.target][..8].try_into().unwrap());
        w.swap = 0xFFFF_FFFF_FFFF_FFFF;
        let wc = p.complete(w);
        assert_eq!(
            (wc.status, wc.opcode),
            (WcStatus::RemAccessErr, want),
            "{}",
            case.name
        );
        assert_eq!(state(&p.qa), QpState::Err, "{}", case.name);
        for (i, m) in targets.iter().enumerate() {
            assert!(
                snapshot(m) == originals[i],
                "{}: target region {i} was modified",
                case.name
            );
        }
        assert!(
            snapshot(&ma) == local_before,
            "{}: the requester's own buffer was modified",
            case.name
        );
        assert!(
            cb.stats().0.access_violations > violations_before,
            "{}: the responder did not count the violation",
            case.name
        );
        // A WRITE with immediate that was refused consumes no receive.
        if matches!(case.op, Op::WriteImm) {
            let got = p.cqb.poll_one().unwrap();
            assert!(
                got.is_none_or(|w| w.status != WcStatus::Success),
                "{}: {got:?}",
                case.name
            );
        }
    }

    // Rights the *QP* does not grant (qp_access_flags) are refused too. rxe answers
    // those with an invalid-request NAK, so the requester sees REM_INV_REQ_ERR;
    // either way the memory is untouched.
    for (grant, opcode, len) in [
        (Access::REMOTE_READ, WrOpcode::RdmaWrite, 4096),
        (Access::REMOTE_WRITE, WrOpcode::RdmaRead, 4096),
        (
            Access::REMOTE_WRITE | Access::REMOTE_READ,
            WrOpcode::AtomicFetchAndAdd,
            8,
        ),
    ] {
        let p = rc_pair(&ca, &pa, &cb, &pb, grant);
        let mut w = signaled(1, opcode, ma.sge(0, len).unwrap(), Some(&full));
        w.compare_add = 1;
        let wc = p.complete(w);
        assert_eq!(
            wc.status,
            WcStatus::RemInvReqErr,
            "{opcode:?} with {grant:?}"
        );
        assert!(
            snapshot(&full) == originals[0],
            "{opcode:?}: target modified"
        );
        assert!(
            snapshot(&ma) == local_before,
            "{opcode:?}: local buffer modified"
        );
    }

    // And the same regions are reachable when everything is right.
    let p = rc_pair(&ca, &pa, &cb, &pb, ALL);
    let w = signaled(1, WrOpcode::RdmaWrite, ma.sge(0, LEN).unwrap(), Some(&full));
    assert_eq!(p.complete(w).status, WcStatus::Success);
    assert!(snapshot(&full) == local_before);
}

// ---------------------------------------------------------------------------
// CQ overflow

#[test]
fn cq_overflow_moves_the_qp_to_error() {
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let ma = pa.alloc_mr(4096, ALL).unwrap();
    let mb = pb.alloc_mr(4096, ALL).unwrap();
    let cqa = ca.create_cq(64, None).unwrap();
    let small = cb.create_cq(2, None).unwrap(); // B's receive CQ holds two entries
    let send_cq = cb.create_cq(64, None).unwrap();
    let qa = pa.create_qp(&QpInit::new(QpType::Rc, &cqa, &cqa)).unwrap();
    let qb = pb
        .create_qp(&QpInit::new(QpType::Rc, &send_cq, &small))
        .unwrap();
    qa.to_init(Access::EMPTY, 0).unwrap();
    qb.to_init(Access::EMPTY, 0).unwrap();
    connect_pair((&ca, &qa), (&cb, &qb), (9, 5));
    let events = cb.engine().async_channel();
    events.set_nonblocking(true).unwrap();
    while events.get_event().is_ok() {}
    let overflows_before = cb.stats().0.cq_overflows;

    for i in 0..4 {
        qb.post_recv(RecvWr {
            wr_id: 100 + i,
            sgl: [mb.sge(0, 64).unwrap()].into(),
        })
        .unwrap();
    }
    // Three messages, one at a time, nobody polls B's CQ: the third overflows it.
    // (The third send may never be acknowledged; the test does not wait for it.)
    for i in 0..3 {
        qa.post_send(signaled(i, WrOpcode::Send, ma.sge(0, 32).unwrap(), None))
            .unwrap();
        if i < 2 {
            let wc = cqa.poll_blocking(1, T).unwrap()[0];
            assert_eq!((wc.wr_id, wc.status), (i, WcStatus::Success));
        }
    }
    let t0 = Instant::now();
    while state(&qb) != QpState::Err && t0.elapsed() < T {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(
        state(&qb),
        QpState::Err,
        "CQ overflow must move the QP to ERR"
    );
    assert!(cb.stats().0.cq_overflows > overflows_before);
    // The two completions that fitted are intact; the CQ error was reported.
    let got: Vec<_> = small
        .poll_blocking(2, T)
        .unwrap()
        .iter()
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(got, [(100, WcStatus::Success), (101, WcStatus::Success)]);
    let mut saw_cq_err = false;
    while let Ok(e) = events.get_event() {
        if let softrdma_engine::AsyncEvent::Cq(_, AsyncEventType::CqErr) = e {
            saw_cq_err = true;
        }
    }
    assert!(saw_cq_err, "no IBV_EVENT_CQ_ERR async event");
}

// ---------------------------------------------------------------------------
// Destroying objects that are still in use

/// The safe API cannot even express "destroy a PD that still has an MR": every
/// object holds its parent (`Arc`), so dropping a parent early only defers its
/// destruction until the last child is gone. The EBUSY rule rdma-core enforces
/// (`ibv_dealloc_pd`, `ibv_destroy_cq`, `ibv_destroy_srq` on objects in use)
/// lives in the engine, which the C ABI calls directly; test it there.
#[test]
fn destroying_objects_still_in_use_is_ebusy() {
    let (ca, _cb) = two_contexts();
    let mut buf = vec![0u8; 4096];
    let addr = buf.as_mut_ptr() as u64;
    let busy = |r: Result<(), VerbsError>, what: &str| {
        let e = r.expect_err(what);
        assert!(matches!(e, VerbsError::Busy(_)), "{what}: {e}");
        assert_eq!(softrdma::Error::from(e).errno(), EBUSY, "{what}");
    };
    let eng = ca.engine();
    let pd = eng.alloc_pd().unwrap();
    let (cq, _) = eng.create_cq(16).unwrap();
    let (srq, _, _) = eng.create_srq(pd, 16, 1, 0).unwrap();
    let mr = eng
        .reg_mr(pd, addr, 4096, addr, Access::LOCAL_WRITE)
        .unwrap();
    let (qpn, _) = eng
        .create_qp(&QpInitAttr {
            qp_type: QpType::Rc,
            pd,
            send_cq: cq,
            recv_cq: cq,
            srq: Some(srq),
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 0,
                max_send_sge: 1,
                max_recv_sge: 0,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .unwrap();
    busy(eng.dealloc_pd(pd), "PD with a QP, an SRQ and an MR");
    busy(eng.destroy_cq(cq), "CQ of a QP");
    busy(eng.destroy_srq(srq), "SRQ of a QP");
    eng.destroy_qp(qpn).unwrap();
    // The QP is gone: its CQ and SRQ are free, the PD still has the SRQ and MR.
    eng.destroy_cq(cq).unwrap();
    busy(eng.dealloc_pd(pd), "PD with an SRQ and an MR");
    eng.destroy_srq(srq).unwrap();
    busy(eng.dealloc_pd(pd), "PD with an MR");
    // An address handle counts as a user of its PD too.
    eng.dereg_mr(mr.lkey).unwrap();
    eng.pd_acquire(pd).unwrap();
    busy(eng.dealloc_pd(pd), "PD with an AH");
    eng.pd_release(pd);
    eng.dealloc_pd(pd).unwrap();
    // Destroyed handles are gone: a second destroy fails with EINVAL.
    let e = eng.dealloc_pd(pd).unwrap_err();
    assert_eq!(e.errno(), EINVAL);
    drop(buf);

    // Through the safe API, dropping parents first is harmless: the children
    // keep them alive and still work.
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let ma = pa.alloc_mr(64, ALL).unwrap();
    let mb = pb.alloc_mr(64, ALL).unwrap();
    let p = rc_pair(&ca, &pa, &cb, &pb, ALL);
    drop((pa, pb, ca, cb));
    p.recv(1, mb.sge(0, 64).unwrap());
    let w = signaled(2, WrOpcode::Send, ma.sge(0, 64).unwrap(), None);
    assert_eq!(p.complete(w).status, WcStatus::Success);
    assert_eq!(
        p.cqb.poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
}

// ---------------------------------------------------------------------------
// Malformed packets on the socket

/// A RoCEv2 packet to craft: BTH + `ext` headers + payload + ICRC.
struct Pkt<'a> {
    opcode: u8,
    dest_qp: u32,
    psn: u32,
    pkey: u16,
    ext: &'a [u8],
    payload: &'a [u8],
    corrupt_icrc: bool,
}

impl Pkt<'_> {
    /// A SEND-like packet to `dest_qp` with the default P_Key and a good ICRC.
    fn new(opcode: u8, dest_qp: u32) -> Self {
        Pkt {
            opcode,
            dest_qp,
            psn: 0x200,
            pkey: 0xFFFF,
            ext: &[],
            payload: b"12345678",
            corrupt_icrc: false,
        }
    }

    /// The UDP payload as `src` would send it to `dst` (ICRC over both addresses).
    fn build(&self, src: SocketAddr, dst: SocketAddr) -> Vec<u8> {
        let pad = (4 - self.payload.len() % 4) % 4;
        let mut p = vec![self.opcode, (pad as u8) << 4]; // SE=0 M=0 PadCnt TVer=0
        p.extend_from_slice(&self.pkey.to_be_bytes());
        p.push(0);
        p.extend_from_slice(&self.dest_qp.to_be_bytes()[1..]);
        p.push(0x80); // AckReq
        p.extend_from_slice(&self.psn.to_be_bytes()[1..]);
        p.extend_from_slice(self.ext);
        p.extend_from_slice(self.payload);
        p.extend(std::iter::repeat_n(0u8, pad));
        p.extend_from_slice(&[0; 4]);
        fill_icrc_between(src, dst, &mut p);
        if self.corrupt_icrc {
            let n = p.len();
            p[n - 1] ^= 0x01;
        }
        p
    }
}

#[test]
fn malformed_packets_are_dropped_and_counted() {
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let ma = pa.alloc_mr(4096, ALL).unwrap();
    let mb = pb.alloc_mr(4096, ALL).unwrap();
    let p = rc_pair(&ca, &pa, &cb, &pb, ALL);
    // A UD QP on B with Q_Key 0x1234.
    let udcq = cb.create_cq(8, None).unwrap();
    let ud = ud_qp(&pb, &udcq, 0x1234);
    ud.post_recv(RecvWr {
        wr_id: 1,
        sgl: [mb.sge(0, 1024).unwrap()].into(),
    })
    .unwrap();

    let dev = cb.local_addr();
    // The rogue sender is on yet another loopback address, so it is nobody's peer.
    let sock = UdpSocket::bind(SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(127, 0, 1, 250)),
        0,
    ))
    .unwrap();
    let me = sock.local_addr().unwrap();
    let rc = p.qb.qpn();
    let mut garbage = vec![0u8; 200];
    for (i, b) in garbage.iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(151).wrapping_add(7);
    }
    let reth = {
        let mut r = Vec::new();
        r.extend_from_slice(&mb.addr().to_be_bytes());
        r.extend_from_slice(&mb.rkey().to_be_bytes());
        r.extend_from_slice(&8u32.to_be_bytes());
        r
    };
    let deth = |qkey: u32| {
        let mut d = qkey.to_be_bytes().to_vec();
        d.push(0);
        d.extend_from_slice(&0x42u32.to_be_bytes()[1..]);
        d
    };
    const SEND_ONLY: u8 = 0x04;
    const WRITE_ONLY: u8 = 0x0A;
    const UD_SEND_ONLY: u8 = 0x64;
    let datagrams: Vec<(&str, Vec<u8>)> = vec![
        ("garbage", garbage),
        ("empty datagram", vec![]),
        (
            "truncated below BTH + ICRC",
            vec![0x04, 0, 0xFF, 0xFF, 0, 0, 1, 2],
        ),
        (
            "bad ICRC",
            Pkt {
                corrupt_icrc: true,
                ..Pkt::new(SEND_ONLY, rc)
            }
            .build(me, dev),
        ),
        ("reserved opcode", Pkt::new(0x1F, rc).build(me, dev)),
        (
            "WRITE without its RETH",
            Pkt {
                payload: &[],
                ..Pkt::new(WRITE_ONLY, rc)
            }
            .build(me, dev),
        ),
        ("unknown QPN", Pkt::new(SEND_ONLY, 0x00_0003).build(me, dev)),
        (
            "RC packet from a stranger",
            Pkt {
                ext: &reth,
                payload: b"ABCDEFGH",
                ..Pkt::new(WRITE_ONLY, rc)
            }
            .build(me, dev),
        ),
        (
            "wrong P_Key",
            Pkt {
                pkey: 0x1234,
                ..Pkt::new(SEND_ONLY, rc)
            }
            .build(me, dev),
        ),
        (
            "UD send with the wrong Q_Key",
            Pkt {
                psn: 0,
                ext: &deth(0x9999),
                payload: b"xy",
                ..Pkt::new(UD_SEND_ONLY, ud.qpn())
            }
            .build(me, dev),
        ),
    ];
    let (s0, k0) = cb.stats();
    let a0 = ca.stats().0;
    let before_b = mb.to_vec(0, 4096).unwrap();
    let mut bytes = 0;
    for (_, d) in &datagrams {
        sock.send_to(d, dev).unwrap();
        bytes += d.len() as u64;
    }
    let n = datagrams.len() as u64;
    let t0 = Instant::now();
    while cb.stats().0.rx_packets < s0.rx_packets + n && t0.elapsed() < T {
        std::thread::sleep(Duration::from_millis(1));
    }
    std::thread::sleep(Duration::from_millis(20));
    let (s1, k1) = cb.stats();
    let mut want = s0;
    want.rx_packets += n;
    want.rx_bytes += bytes;
    want.drop_bad_icrc += 4; // garbage, empty, truncated, bad ICRC
    want.drop_malformed += 2; // reserved opcode, WRITE without RETH
    want.drop_unknown_qpn += 1;
    want.drop_bad_addr += 1;
    want.drop_bad_pkey += 1;
    want.drop_bad_qkey += 1;
    assert_eq!(
        s1, want,
        "exactly these counters move, by exactly these amounts"
    );
    assert_eq!(k1.datagrams_received, k0.datagrams_received + n);
    // Nothing answered, nothing was written, nothing completed.
    assert_eq!(ca.stats().0, a0);
    assert_eq!(mb.to_vec(0, 4096).unwrap(), before_b);
    assert_eq!(udcq.poll_one().unwrap(), None);
    assert_eq!(p.cqb.poll_one().unwrap(), None);

    // The QPs still work.
    assert_eq!(state(&p.qb), QpState::Rts);
    ma.write(0, b"still alive").unwrap();
    p.recv(5, mb.sge(100, 64).unwrap());
    let w = signaled(6, WrOpcode::Send, ma.sge(0, 11).unwrap(), None);
    assert_eq!(p.complete(w).status, WcStatus::Success);
    let rx = p.cqb.poll_blocking(1, T).unwrap()[0];
    assert_eq!(
        (rx.wr_id, rx.status, rx.byte_len),
        (5, WcStatus::Success, 11)
    );
    assert_eq!(mb.to_vec(100, 11).unwrap(), b"still alive");
}
