//! Every remote access rule, one test each, from one table.
//!
//! A peer may only touch memory it was given: the responder checks each
//! request's R_Key (it must name a live region, slot and random tag both),
//! the region's protection domain (the QP's), the region's rights and the
//! QP's access flags, and the byte range (inside the region, no wrap past
//! 2^64) before it copies a byte, and again for every packet of a message
//! (a region may be deregistered while a message is in flight). The
//! requester checks its local SGEs the same way when responses arrive, and
//! never writes more than it asked for. Zero-length transfers need no valid
//! key (IBTA C9-88).
//!
//! [`RULES`] lists the rules; `rules!` at the end makes one `#[test]` per
//! row. Static rows post one work request on node 0 (requester A) against
//! node 1 (responder B) and check the completion status, both QPs' states,
//! the violation counter and every byte of both nodes' memory; scenario rows
//! are functions for the rules that need a sequence of steps (deregistration
//! mid-message, forged packets, UC). The older trace tests in
//! `rules/access.rs` and the real-socket suite in
//! `crates/softrdma/tests/bad_input.rs` check some of the same rules from
//! other angles (exact packets, real UDP).

use softrdma_sim::Net;
use softrdma_sim::setup::{PairOpts, Side, connect};
use softrdma_transport::{
    Access, Instant, Mr, QpState, QpType, RecvWr, SendFlags, SendWr, Sge, Wc, WcFlags, WcOpcode,
    WcStatus, WrOpcode,
};
use softrdma_wire::{Aeth, Bth, Headers, Opcode, Psn, Reth, Syndrome};

const ALL: Access = Access::LOCAL_WRITE
    .with(Access::REMOTE_WRITE)
    .with(Access::REMOTE_READ)
    .with(Access::REMOTE_ATOMIC);
const REMOTE: Access = Access::REMOTE_WRITE
    .with(Access::REMOTE_READ)
    .with(Access::REMOTE_ATOMIC);
/// FETCH_ADD's operand.
const ADD: u64 = 0x0101_0101_0000_0011;
/// Size of the extra regions some rows target.
const EXTRA: u64 = 64 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    WriteImm,
    Read,
    Cas,
    Fadd,
}

/// The region a request targets, on node 1.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// The pair's 1 MiB region (all rights, the QP's PD).
    Main,
    /// A new 64 KiB region in the QP's PD with these rights.
    Extra(Access),
    /// A new 64 KiB region with all rights in another PD.
    OtherPd,
}

/// The R_Key the request carries.
#[derive(Debug, Clone, Copy)]
enum Key {
    Good,
    /// The right slot, one tag bit flipped.
    WrongTag,
    /// A slot no region uses, with the right tag.
    EmptySlot,
    Zero,
}

/// The remote address, relative to the target region.
#[derive(Debug, Clone, Copy)]
enum Va {
    /// `iova + n`.
    Start(u64),
    /// `iova - n`.
    Before(u64),
    /// `iova + length - n`.
    End(u64),
    /// An absolute address.
    Abs(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    /// Completes successfully; exactly the requested bytes change.
    Done,
    /// NAK "remote access error": RemAccessErr, both QPs in ERR, a violation
    /// counted, no byte anywhere changed.
    AccessErr,
    /// NAK "invalid request" (rxe's answer for rights the QP lacks):
    /// RemInvReqErr, both QPs in ERR, no byte changed.
    InvReq,
}

#[derive(Debug, Clone, Copy)]
struct Static {
    op: Op,
    target: Target,
    /// Rights B's QP grants.
    qp_access: Access,
    key: Key,
    va: Va,
    len: u32,
    expect: Expect,
}

#[derive(Debug, Clone, Copy)]
enum Case {
    Static(Static),
    Scenario(fn()),
}

struct Rule {
    name: &'static str,
    /// The rule, in one sentence.
    what: &'static str,
    case: Case,
}

const fn row(
    op: Op,
    target: Target,
    qp_access: Access,
    key: Key,
    va: Va,
    len: u32,
    expect: Expect,
) -> Case {
    Case::Static(Static {
        op,
        target,
        qp_access,
        key,
        va,
        len,
        expect,
    })
}

use Expect::{AccessErr, Done, InvReq};
use Key::{EmptySlot, Good, WrongTag, Zero};
use Op::{Cas, Fadd, Read, Write, WriteImm};
use Target::{Extra, Main, OtherPd};
use Va::{Abs, Before, End, Start};

const RULES: &[Rule] = &[
    // ---- R_Key
    Rule {
        name: "rkey_naming_no_region_is_refused",
        what: "an R_Key whose slot holds no region",
        case: row(Write, Main, REMOTE, EmptySlot, Start(0), 64, AccessErr),
    },
    Rule {
        name: "rkey_with_wrong_tag_is_refused",
        what: "the right slot with another random tag",
        case: row(Write, Main, REMOTE, WrongTag, Start(0), 64, AccessErr),
    },
    Rule {
        name: "rkey_zero_is_refused",
        what: "R_Key 0 names nothing",
        case: row(Read, Main, REMOTE, Zero, Start(0), 64, AccessErr),
    },
    Rule {
        name: "rkey_of_deregistered_region_is_refused",
        what: "a key stays dead after dereg, also when the memory is registered again",
        case: Case::Scenario(stale_rkey_after_dereg),
    },
    // ---- protection domain
    Rule {
        name: "region_of_another_pd_refuses_write",
        what: "a region in another PD than the QP's",
        case: row(Write, OtherPd, REMOTE, Good, Start(0), 64, AccessErr),
    },
    Rule {
        name: "region_of_another_pd_refuses_atomic",
        what: "a region in another PD than the QP's (atomic)",
        case: row(Fadd, OtherPd, REMOTE, Good, Start(0), 8, AccessErr),
    },
    // ---- region rights
    Rule {
        name: "region_without_remote_write_refuses_write",
        what: "WRITE needs REMOTE_WRITE on the region",
        case: row(
            Write,
            Extra(ALL.without(Access::REMOTE_WRITE)),
            REMOTE,
            Good,
            Start(0),
            64,
            AccessErr,
        ),
    },
    Rule {
        name: "region_without_remote_write_refuses_write_with_imm",
        what: "WRITE with immediate needs REMOTE_WRITE too, and consumes no receive",
        case: row(
            WriteImm,
            Extra(ALL.without(Access::REMOTE_WRITE)),
            REMOTE,
            Good,
            Start(0),
            64,
            AccessErr,
        ),
    },
    Rule {
        name: "region_without_remote_read_refuses_read",
        what: "READ needs REMOTE_READ on the region",
        case: row(
            Read,
            Extra(ALL.without(Access::REMOTE_READ)),
            REMOTE,
            Good,
            Start(0),
            64,
            AccessErr,
        ),
    },
    Rule {
        name: "region_without_remote_atomic_refuses_cmp_swap",
        what: "CMP_SWAP needs REMOTE_ATOMIC on the region",
        case: row(
            Cas,
            Extra(ALL.without(Access::REMOTE_ATOMIC)),
            REMOTE,
            Good,
            Start(0),
            8,
            AccessErr,
        ),
    },
    Rule {
        name: "region_without_remote_atomic_refuses_fetch_add",
        what: "FETCH_ADD needs REMOTE_ATOMIC on the region",
        case: row(
            Fadd,
            Extra(ALL.without(Access::REMOTE_ATOMIC)),
            REMOTE,
            Good,
            Start(0),
            8,
            AccessErr,
        ),
    },
    Rule {
        name: "local_only_region_refuses_read",
        what: "a region registered for local access only is invisible remotely",
        case: row(
            Read,
            Extra(Access::LOCAL_WRITE),
            REMOTE,
            Good,
            Start(0),
            64,
            AccessErr,
        ),
    },
    // ---- QP access flags
    Rule {
        name: "qp_without_remote_write_refuses_write",
        what: "the QP's access flags must grant the operation (rxe: invalid request)",
        case: row(
            Write,
            Main,
            REMOTE.without(Access::REMOTE_WRITE),
            Good,
            Start(0),
            64,
            InvReq,
        ),
    },
    Rule {
        name: "qp_without_remote_read_refuses_read",
        what: "READ needs REMOTE_READ in the QP's access flags",
        case: row(
            Read,
            Main,
            REMOTE.without(Access::REMOTE_READ),
            Good,
            Start(0),
            64,
            InvReq,
        ),
    },
    Rule {
        name: "qp_without_remote_atomic_refuses_atomic",
        what: "atomics need REMOTE_ATOMIC in the QP's access flags",
        case: row(
            Cas,
            Main,
            REMOTE.without(Access::REMOTE_ATOMIC),
            Good,
            Start(0),
            8,
            InvReq,
        ),
    },
    // ---- bounds
    Rule {
        name: "write_starting_one_byte_before_region_is_refused",
        what: "va below the region's start",
        case: row(Write, Extra(ALL), REMOTE, Good, Before(1), 16, AccessErr),
    },
    Rule {
        name: "write_ending_one_byte_past_region_is_refused",
        what: "va + len one byte past the region's end",
        case: row(Write, Extra(ALL), REMOTE, Good, End(15), 16, AccessErr),
    },
    Rule {
        name: "read_ending_one_byte_past_region_is_refused",
        what: "va + len one byte past the region's end (READ)",
        case: row(Read, Extra(ALL), REMOTE, Good, End(15), 16, AccessErr),
    },
    Rule {
        name: "write_ending_exactly_at_region_end_is_done",
        what: "the last bytes of a region are reachable",
        case: row(Write, Extra(ALL), REMOTE, Good, End(16), 16, Done),
    },
    Rule {
        name: "read_of_the_whole_region_is_done",
        what: "a whole region, many packets, is reachable",
        case: row(Read, Extra(ALL), REMOTE, Good, Start(0), EXTRA as u32, Done),
    },
    Rule {
        name: "write_longer_than_region_is_refused_before_any_byte",
        what: "a multi-packet WRITE whose range crosses the end writes none of its packets",
        case: row(Write, Extra(ALL), REMOTE, Good, End(8192), 16384, AccessErr),
    },
    Rule {
        name: "atomic_on_last_eight_bytes_is_done",
        what: "an atomic on the region's last 8 bytes",
        case: row(Fadd, Extra(ALL), REMOTE, Good, End(8), 8, Done),
    },
    Rule {
        name: "atomic_just_past_region_is_refused",
        what: "an atomic starting at the region's end",
        case: row(Cas, Extra(ALL), REMOTE, Good, End(0), 8, AccessErr),
    },
    // ---- 64-bit wrap
    Rule {
        name: "write_wrapping_past_2_64_is_refused",
        what: "va + len wraps around 2^64 (not into the region)",
        case: row(Write, Main, REMOTE, Good, Abs(u64::MAX - 15), 32, AccessErr),
    },
    Rule {
        name: "read_wrapping_past_2_64_is_refused",
        what: "va + len wraps around 2^64 (READ)",
        case: row(Read, Main, REMOTE, Good, Abs(u64::MAX - 7), 64, AccessErr),
    },
    Rule {
        name: "atomic_at_top_of_address_space_is_refused",
        what: "an atomic at 2^64 - 8",
        case: row(Fadd, Main, REMOTE, Good, Abs(u64::MAX - 7), 8, AccessErr),
    },
    // ---- zero length
    Rule {
        name: "zero_length_write_needs_no_key",
        what: "C9-88: a zero-length WRITE is not checked and touches nothing",
        case: row(Write, Main, REMOTE, Zero, Abs(0xDEAD_0000), 0, Done),
    },
    Rule {
        name: "zero_length_read_needs_no_key",
        what: "C9-88: a zero-length READ is not checked and reads nothing",
        case: row(Read, Main, REMOTE, Zero, Abs(0xDEAD_0000), 0, Done),
    },
    Rule {
        name: "zero_length_write_with_imm_only_consumes_a_receive",
        what: "a zero-length WRITE with immediate completes a receive and writes nothing",
        case: Case::Scenario(zero_length_write_with_imm),
    },
    // ---- deregistration while in use
    Rule {
        name: "region_deregistered_during_write_takes_no_more_bytes",
        what: "every packet of a WRITE is checked: after dereg, the rest is refused",
        case: Case::Scenario(dereg_during_write),
    },
    Rule {
        name: "region_deregistered_during_read_sends_no_more_bytes",
        what: "every READ response packet is checked: after dereg, a NAK instead of data",
        case: Case::Scenario(dereg_during_read),
    },
    Rule {
        name: "local_region_deregistered_before_read_response_is_not_written",
        what: "the requester checks its own SGEs when the response arrives",
        case: Case::Scenario(local_dereg_before_read_response),
    },
    // ---- lengths a peer cannot exceed
    Rule {
        name: "write_payload_beyond_reth_length_is_refused",
        what: "a WRITE carries exactly its RETH's DMA length, checked per packet",
        case: Case::Scenario(write_payload_beyond_reth),
    },
    Rule {
        name: "read_response_longer_than_requested_is_dropped",
        what: "a forged READ response with more bytes than asked writes nothing",
        case: Case::Scenario(read_response_too_long),
    },
    // ---- UC
    Rule {
        name: "uc_write_violation_is_dropped_silently",
        what: "UC has no NAK: a refused WRITE is dropped, counted, and the QP lives on",
        case: Case::Scenario(uc_violation),
    },
];

// ---------------------------------------------------------------------------
// The fixture

struct Fx {
    net: Net,
    a: Side,
    b: Side,
}

impl Fx {
    fn new(qp_type: QpType, qp_access: Access) -> Fx {
        let mut net = Net::new(2, 11);
        let o = PairOpts {
            qp_type,
            qp_access,
            ..PairOpts::default()
        };
        let (a, b) = connect(&mut net, 0, 1, &o);
        let mut fx = Fx { net, a, b };
        let (am, bm) = (fx.a.mr, fx.b.mr);
        fx.fill(0, &am, 0x11);
        fx.fill(1, &bm, 0x22);
        fx
    }

    /// Fills a region with a pattern that differs per salt.
    fn fill(&mut self, node: usize, mr: &Mr, salt: u8) {
        let d: Vec<u8> = (0..mr.length)
            .map(|i| (i as u8).wrapping_mul(37).wrapping_add(salt) ^ (i >> 8) as u8)
            .collect();
        self.net.nodes[node].mem.fill(mr.host, &d);
    }

    /// A new region of `EXTRA` bytes on `node` (in a new PD if `other_pd`).
    fn extra(&mut self, node: usize, access: Access, other_pd: bool) -> Mr {
        let pd = if other_pd {
            self.net.nodes[node].ep.alloc_pd().unwrap()
        } else if node == 0 {
            self.a.pd
        } else {
            self.b.pd
        };
        let n = &mut self.net.nodes[node];
        let host = n.mem.alloc(EXTRA as usize);
        let mr = n.ep.reg_mr(pd, host, EXTRA, host, access).unwrap();
        self.fill(node, &mr, 0x33 + node as u8);
        mr
    }

    fn post(&mut self, node: usize, wr: SendWr) {
        let qpn = if node == 0 { self.a.qpn } else { self.b.qpn };
        let now = self.net.now;
        self.net.nodes[node].ep.post_send(now, qpn, wr).unwrap();
    }

    fn post_recv(&mut self, node: usize, wr_id: u64, sgl: Vec<Sge>) {
        let qpn = if node == 0 { self.a.qpn } else { self.b.qpn };
        let now = self.net.now;
        self.net.nodes[node]
            .ep
            .post_recv(
                now,
                qpn,
                RecvWr {
                    wr_id,
                    sgl: sgl.into(),
                },
            )
            .unwrap();
    }

    fn idle(&mut self) {
        self.net.run_idle(Instant::from_millis(10_000));
    }

    fn wcs(&mut self, node: usize, recv: bool) -> Vec<Wc> {
        let s = if node == 0 { self.a } else { self.b };
        let cq = if recv { s.rcq } else { s.scq };
        let mut v = Vec::new();
        self.net.nodes[node]
            .ep
            .poll_cq(cq, usize::MAX, |w| v.push(w))
            .unwrap();
        v
    }

    fn state(&self, node: usize) -> QpState {
        let qpn = if node == 0 { self.a.qpn } else { self.b.qpn };
        self.net.nodes[node].ep.query_qp(qpn).unwrap().0.qp_state
    }

    fn mem(&self, node: usize) -> Vec<(u64, Vec<u8>)> {
        self.net.nodes[node].mem.snapshot()
    }

    fn bytes(&self, node: usize, addr: u64, len: usize) -> Vec<u8> {
        self.net.nodes[node].mem.bytes(addr, len).to_vec()
    }

    fn violations(&self, node: usize) -> u64 {
        self.net.nodes[node].ep.stats().access_violations
    }
}

fn wr(id: u64, op: WrOpcode, sgl: Vec<Sge>) -> SendWr {
    let mut w = SendWr::new(id, op);
    w.flags = SendFlags::SIGNALED;
    w.sgl = sgl.into();
    w
}

fn sge(mr: &Mr, off: u64, len: u32) -> Sge {
    Sge {
        addr: mr.iova + off,
        length: len,
        lkey: mr.lkey,
    }
}

/// The single send completion of node 0.
fn one(fx: &mut Fx) -> Wc {
    let w = fx.wcs(0, false);
    assert_eq!(w.len(), 1, "send completions: {w:?}");
    w[0]
}

/// Which memory changed between two snapshots: (host address, bytes changed).
fn changed(before: &[(u64, Vec<u8>)], after: &[(u64, Vec<u8>)]) -> Vec<(u64, usize)> {
    let mut v = Vec::new();
    for ((base, b), (_, a)) in before.iter().zip(after) {
        for (i, (x, y)) in b.iter().zip(a).enumerate() {
            if x != y {
                v.push((base + i as u64, 1));
            }
        }
    }
    v
}

// ---------------------------------------------------------------------------
// Static rows

fn run_static(name: &str, s: &Static) {
    let mut fx = Fx::new(QpType::Rc, s.qp_access);
    let target = match s.target {
        Main => fx.b.mr,
        Extra(access) => fx.extra(1, access, false),
        OtherPd => fx.extra(1, ALL, true),
    };
    let rkey = match s.key {
        Good => target.rkey,
        WrongTag => target.rkey ^ (1 << 20),
        // Slot 0x7000: far beyond the few regions these tests register.
        EmptySlot => (target.rkey & !0x7FFF) | 0x7000,
        Zero => 0,
    };
    let va = match s.va {
        Start(n) => target.iova + n,
        Before(n) => target.iova - n,
        End(n) => target.iova + target.length - n,
        Abs(a) => a,
    };
    let local = fx.a.mr;
    // Atomic results go to offset 4096 of A's region, so the operand source
    // (offset 0) and the result are distinct.
    let (opcode, local_off) = match s.op {
        Write => (WrOpcode::RdmaWrite, 0),
        WriteImm => (WrOpcode::RdmaWriteWithImm, 0),
        Read => (WrOpcode::RdmaRead, 0),
        Cas => (WrOpcode::AtomicCmpAndSwp, 4096),
        Fadd => (WrOpcode::AtomicFetchAndAdd, 4096),
    };
    let sgl = if s.len == 0 {
        vec![]
    } else {
        vec![sge(&local, local_off, s.len)]
    };
    let mut w = wr(1, opcode, sgl);
    w.remote_addr = va;
    w.rkey = rkey;
    w.imm_data = 0xABCD_0001;
    // CMP_SWAP compares with what is there (when it is readable); FETCH_ADD adds ADD.
    let readable = target.iova <= va && va.saturating_add(8) <= target.iova + target.length;
    w.compare_add = match s.op {
        Cas if readable => u64::from_ne_bytes(fx.bytes(1, va, 8).try_into().unwrap()),
        _ => ADD,
    };
    w.swap = 0x0123_4567_89AB_CDEF;
    if s.op == WriteImm {
        fx.post_recv(1, 77, vec![]);
    }
    let before = [fx.mem(0), fx.mem(1)];
    let v0 = fx.violations(1);
    fx.post(0, w);
    fx.idle();
    let wc = one(&mut fx);
    let after = [fx.mem(0), fx.mem(1)];
    let want_op = match s.op {
        Write | WriteImm => WcOpcode::RdmaWrite,
        Read => WcOpcode::RdmaRead,
        Cas => WcOpcode::CompSwap,
        Fadd => WcOpcode::FetchAdd,
    };
    assert_eq!(wc.opcode, want_op, "{name}");
    let recvs = fx.wcs(1, true);
    match s.expect {
        Done => {
            assert_eq!(wc.status, WcStatus::Success, "{name}");
            assert_eq!((fx.state(0), fx.state(1)), (QpState::Rts, QpState::Rts));
            assert_eq!(fx.violations(1), v0, "{name}");
            let len = s.len as usize;
            match s.op {
                Write | WriteImm => {
                    assert_eq!(after[0], before[0], "{name}: requester memory changed");
                    if len > 0 {
                        assert_eq!(fx.bytes(1, va, len), fx.bytes(0, local.host, len));
                    }
                    // Nothing but [va, va + len) changed on the responder.
                    for (addr, _) in changed(&before[1], &after[1]) {
                        assert!(
                            (va..va + s.len as u64).contains(&addr),
                            "{name}: byte {addr:#x} outside the target range changed"
                        );
                    }
                }
                Read => {
                    assert_eq!(after[1], before[1], "{name}: responder memory changed");
                    if len > 0 {
                        assert_eq!(fx.bytes(0, local.host, len), fx.bytes(1, va, len));
                    }
                    for (addr, _) in changed(&before[0], &after[0]) {
                        assert!(
                            (local.host..local.host + s.len as u64).contains(&addr),
                            "{name}: byte {addr:#x} outside the READ's SGE changed"
                        );
                    }
                }
                Cas | Fadd => {
                    let orig = u64::from_ne_bytes(
                        before[1]
                            .iter()
                            .find(|(b, d)| *b <= va && va + 8 <= b + d.len() as u64)
                            .map(|(b, d)| d[(va - b) as usize..][..8].try_into().unwrap())
                            .unwrap(),
                    );
                    let result =
                        u64::from_ne_bytes(fx.bytes(0, local.host + 4096, 8).try_into().unwrap());
                    assert_eq!(result, orig, "{name}: the original value comes back");
                    let now = u64::from_ne_bytes(fx.bytes(1, va, 8).try_into().unwrap());
                    let want = if s.op == Fadd {
                        orig.wrapping_add(ADD)
                    } else {
                        0x0123_4567_89AB_CDEF
                    };
                    assert_eq!(now, want, "{name}");
                    assert!(changed(&before[1], &after[1]).len() <= 8, "{name}");
                }
            }
            if s.op == WriteImm {
                assert_eq!(recvs.len(), 1);
                assert_eq!(recvs[0].status, WcStatus::Success);
            }
        }
        AccessErr | InvReq => {
            let want = if s.expect == AccessErr {
                WcStatus::RemAccessErr
            } else {
                WcStatus::RemInvReqErr
            };
            assert_eq!(wc.status, want, "{name}");
            assert_eq!(after[1], before[1], "{name}: responder memory changed");
            assert_eq!(after[0], before[0], "{name}: requester memory changed");
            assert_eq!(
                (fx.state(0), fx.state(1)),
                (QpState::Err, QpState::Err),
                "{name}"
            );
            let counted = fx.violations(1) - v0;
            assert_eq!(
                counted,
                u64::from(s.expect == AccessErr),
                "{name}: access violations counted"
            );
            assert!(
                recvs.iter().all(|r| r.status != WcStatus::Success),
                "{name}: a refused request completed a receive: {recvs:?}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// Scenario rows

fn stale_rkey_after_dereg() {
    let mut fx = Fx::new(QpType::Rc, REMOTE);
    let old = fx.extra(1, ALL, false);
    fx.net.nodes[1].ep.dereg_mr(old.lkey).unwrap();
    // The same memory registered again gets another key.
    let pd = fx.b.pd;
    let new = fx.net.nodes[1]
        .ep
        .reg_mr(pd, old.host, EXTRA, old.iova, ALL)
        .unwrap();
    assert_ne!(new.rkey, old.rkey);
    // The old key is refused...
    let before = fx.mem(1);
    let local = fx.a.mr;
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(&local, 0, 64)]);
    w.remote_addr = old.iova;
    w.rkey = old.rkey;
    fx.post(0, w);
    fx.idle();
    assert_eq!(one(&mut fx).status, WcStatus::RemAccessErr);
    assert_eq!(fx.mem(1), before);
    // ...and the new one works (on a fresh pair: the old one is in ERR).
    let mut fx = Fx::new(QpType::Rc, REMOTE);
    let old = fx.extra(1, ALL, false);
    fx.net.nodes[1].ep.dereg_mr(old.lkey).unwrap();
    let pd = fx.b.pd;
    let new = fx.net.nodes[1]
        .ep
        .reg_mr(pd, old.host, EXTRA, old.iova, ALL)
        .unwrap();
    let local = fx.a.mr;
    let mut w = wr(2, WrOpcode::RdmaWrite, vec![sge(&local, 0, 64)]);
    w.remote_addr = new.iova;
    w.rkey = new.rkey;
    fx.post(0, w);
    fx.idle();
    assert_eq!(one(&mut fx).status, WcStatus::Success);
    assert_eq!(fx.bytes(1, new.host, 64), fx.bytes(0, local.host, 64));
}

fn zero_length_write_with_imm() {
    let mut fx = Fx::new(QpType::Rc, REMOTE);
    fx.post_recv(1, 5, vec![]);
    let before = [fx.mem(0), fx.mem(1)];
    let mut w = wr(1, WrOpcode::RdmaWriteWithImm, vec![]);
    w.remote_addr = 0xBAD0_0000;
    w.rkey = 0xFFFF_FFFF;
    w.imm_data = 0x1234_5678;
    fx.post(0, w);
    fx.idle();
    assert_eq!(one(&mut fx).status, WcStatus::Success);
    let r = fx.wcs(1, true);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].wr_id, r[0].status, r[0].opcode, r[0].byte_len),
        (5, WcStatus::Success, WcOpcode::RecvRdmaWithImm, 0)
    );
    assert_eq!(r[0].imm_data, 0x1234_5678);
    assert!(r[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!([fx.mem(0), fx.mem(1)], before);
}

/// A 64-packet WRITE loses its packet 10; packets 0..9 land, then B's region
/// is deregistered before the go-back-N resend: nothing more is written.
fn dereg_during_write() {
    let mut fx = Fx::new(QpType::Rc, REMOTE);
    let target = fx.extra(1, ALL, false);
    let local = fx.a.mr;
    let first = PairOpts::default().psn_a;
    fx.net
        .drops
        .push(softrdma_sim::DropRule::psn(0, first + 10));
    let before = fx.mem(1);
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(&local, 0, EXTRA as u32)]);
    w.remote_addr = target.iova;
    w.rkey = target.rkey;
    fx.post(0, w);
    // t = 5 us: packets 0..9 arrive and are written, 11.. are out of sequence.
    fx.net.run_to(Instant::from_micros(7));
    let written = changed(&before, &fx.mem(1)).len();
    assert!(
        written > 0 && written <= 10 * 1024,
        "{written} bytes written"
    );
    fx.net.nodes[1].ep.dereg_mr(target.lkey).unwrap();
    let at_dereg = fx.mem(1);
    fx.idle();
    assert_eq!(one(&mut fx).status, WcStatus::RemAccessErr);
    assert_eq!(
        fx.mem(1),
        at_dereg,
        "bytes written after the region was deregistered"
    );
    assert_eq!(fx.state(1), QpState::Err);
    assert!(fx.violations(1) >= 1);
}

/// A 64-packet READ loses response 10; the requester asks again from there
/// after B deregistered the region: B answers with a NAK, not with data.
fn dereg_during_read() {
    let mut fx = Fx::new(QpType::Rc, REMOTE);
    let target = fx.extra(1, ALL, false);
    let local = fx.a.mr;
    let first = PairOpts::default().psn_a;
    fx.net
        .drops
        .push(softrdma_sim::DropRule::psn(1, first + 10));
    fx.net.record();
    let mut w = wr(1, WrOpcode::RdmaRead, vec![sge(&local, 0, EXTRA as u32)]);
    w.remote_addr = target.iova;
    w.rkey = target.rkey;
    fx.post(0, w);
    // t = 5: B sends 64 responses; t = 10: A has 0..9, sees the gap.
    fx.net.run_to(Instant::from_micros(7));
    fx.net.nodes[1].ep.dereg_mr(target.lkey).unwrap();
    let _ = fx.net.lines();
    fx.idle();
    assert_eq!(one(&mut fx).status, WcStatus::RemAccessErr);
    // After the dereg B sent no READ response carrying data.
    let after: Vec<String> = fx.net.lines();
    let from_b: Vec<&String> = after.iter().filter(|l| l.contains(" 1>0 ")).collect();
    assert!(!from_b.is_empty());
    for l in &from_b {
        assert!(
            !l.contains("READ_RESPONSE"),
            "B sent READ data after the region was deregistered: {l}\n{after:#?}"
        );
    }
    assert!(
        from_b.iter().any(|l| l.contains("NAK-ACC")),
        "no access NAK: {after:#?}"
    );
    assert!(fx.violations(1) >= 1);
}

/// A deregisters the region a READ lands in before the response arrives: the
/// response is not written, the READ completes with LOC_PROT_ERR.
fn local_dereg_before_read_response() {
    let mut fx = Fx::new(QpType::Rc, REMOTE);
    let dst = fx.extra(0, ALL, false);
    let remote = fx.b.mr;
    let mut w = wr(1, WrOpcode::RdmaRead, vec![sge(&dst, 0, 4096)]);
    w.remote_addr = remote.iova;
    w.rkey = remote.rkey;
    fx.post(0, w);
    fx.net.run_to(Instant::from_micros(2));
    fx.net.nodes[0].ep.dereg_mr(dst.lkey).unwrap();
    let before = fx.mem(0);
    fx.idle();
    assert_eq!(one(&mut fx).status, WcStatus::LocProtErr);
    assert_eq!(
        fx.mem(0),
        before,
        "a response landed in a deregistered region"
    );
    assert_eq!(fx.state(0), QpState::Err);
}

/// A forged WRITE_FIRST whose RETH announces 16 bytes but which carries a
/// full MTU: refused with "invalid request", nothing written.
fn write_payload_beyond_reth() {
    let mut fx = Fx::new(QpType::Rc, REMOTE);
    let target = fx.b.mr;
    let before = fx.mem(1);
    let mut h = Headers::new(Bth::new(
        Opcode::RC_RDMA_WRITE_FIRST,
        fx.b.qpn,
        Psn::new(PairOpts::default().psn_a),
    ));
    h.reth = Some(Reth {
        va: target.iova,
        rkey: target.rkey,
        dma_len: 16,
    });
    fx.net.inject(0, 1, &h, &[0xEE; 1024]);
    // And a WRITE_ONLY whose payload is longer than its RETH says (new pair).
    fx.idle();
    assert_eq!(fx.mem(1), before);
    assert_eq!(fx.state(1), QpState::Err);
    let nak = fx.net.nodes[1].ep.stats().tx_nak_other;
    assert_eq!(nak, 1);

    let mut fx = Fx::new(QpType::Rc, REMOTE);
    let target = fx.b.mr;
    let before = fx.mem(1);
    let mut h = Headers::new(Bth::new(
        Opcode::RC_RDMA_WRITE_ONLY,
        fx.b.qpn,
        Psn::new(PairOpts::default().psn_a),
    ));
    h.reth = Some(Reth {
        va: target.iova + target.length - 16,
        rkey: target.rkey,
        dma_len: 16,
    });
    fx.net.inject(0, 1, &h, &[0xEE; 64]);
    fx.idle();
    assert_eq!(fx.mem(1), before);
    assert_eq!(fx.state(1), QpState::Err);
}

/// B's real response to a 16-byte READ is lost; a forged one with 1000
/// bytes arrives instead: dropped as malformed, nothing written. The retried
/// READ then completes with the right 16 bytes.
fn read_response_too_long() {
    let mut fx = Fx::new(QpType::Rc, REMOTE);
    let remote = fx.b.mr;
    let local = fx.a.mr;
    fx.net.drops.push(softrdma_sim::DropRule::opcode(
        1,
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
    ));
    let mut w = wr(1, WrOpcode::RdmaRead, vec![sge(&local, 0, 16)]);
    w.remote_addr = remote.iova;
    w.rkey = remote.rkey;
    fx.post(0, w);
    fx.net.run_to(Instant::from_micros(6));
    let before = fx.mem(0);
    let mut h = Headers::new(Bth::new(
        Opcode::RC_RDMA_READ_RESPONSE_ONLY,
        fx.a.qpn,
        Psn::new(PairOpts::default().psn_a),
    ));
    h.aeth = Some(Aeth {
        syndrome: Syndrome::Ack { credits: 0x1F },
        msn: 1,
    });
    let malformed0 = fx.net.nodes[0].ep.stats().drop_malformed;
    fx.net.inject(1, 0, &h, &[0xEE; 1000]);
    fx.net.run_to(Instant::from_micros(12));
    assert_eq!(fx.mem(0), before, "the forged response was written");
    assert_eq!(fx.net.nodes[0].ep.stats().drop_malformed, malformed0 + 1);
    fx.idle();
    let wc = one(&mut fx);
    assert_eq!((wc.status, wc.byte_len), (WcStatus::Success, 16));
    assert_eq!(fx.bytes(0, local.host, 16), fx.bytes(1, remote.host, 16));
    for (addr, _) in changed(&before, &fx.mem(0)) {
        assert!((local.host..local.host + 16).contains(&addr));
    }
}

/// UC: a WRITE with a bad R_Key is dropped at the responder (no NAK exists),
/// counted, and the next good WRITE lands.
fn uc_violation() {
    let mut fx = Fx::new(QpType::Uc, Access::REMOTE_WRITE);
    let target = fx.b.mr;
    let local = fx.a.mr;
    let before = fx.mem(1);
    let mut w = wr(1, WrOpcode::RdmaWrite, vec![sge(&local, 0, 4096)]);
    w.remote_addr = target.iova;
    w.rkey = target.rkey ^ (1 << 21);
    fx.post(0, w);
    fx.idle();
    // The UC requester completes once sent.
    assert_eq!(one(&mut fx).status, WcStatus::Success);
    assert_eq!(fx.mem(1), before);
    assert_eq!(fx.violations(1), 1);
    assert_eq!(fx.state(1), QpState::Rts);
    let mut w = wr(2, WrOpcode::RdmaWrite, vec![sge(&local, 0, 4096)]);
    w.remote_addr = target.iova;
    w.rkey = target.rkey;
    fx.post(0, w);
    fx.idle();
    assert_eq!(one(&mut fx).status, WcStatus::Success);
    assert_eq!(
        fx.bytes(1, target.host, 4096),
        fx.bytes(0, local.host, 4096)
    );
}

// ---------------------------------------------------------------------------

fn run(name: &str) {
    let r = RULES
        .iter()
        .find(|r| r.name == name)
        .unwrap_or_else(|| panic!("no rule {name}"));
    match r.case {
        Case::Static(s) => run_static(r.name, &s),
        Case::Scenario(f) => f(),
    }
    let _ = r.what;
}

macro_rules! rules {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                run(stringify!($name));
            }
        )*

        /// The table and the tests agree: every rule has exactly one test.
        #[test]
        fn every_rule_has_one_test() {
            let tests = [$(stringify!($name)),*];
            for r in RULES {
                assert_eq!(
                    tests.iter().filter(|t| **t == r.name).count(),
                    1,
                    "rule {} ({})",
                    r.name,
                    r.what
                );
            }
            assert_eq!(tests.len(), RULES.len());
        }
    };
}

rules!(
    rkey_naming_no_region_is_refused,
    rkey_with_wrong_tag_is_refused,
    rkey_zero_is_refused,
    rkey_of_deregistered_region_is_refused,
    region_of_another_pd_refuses_write,
    region_of_another_pd_refuses_atomic,
    region_without_remote_write_refuses_write,
    region_without_remote_write_refuses_write_with_imm,
    region_without_remote_read_refuses_read,
    region_without_remote_atomic_refuses_cmp_swap,
    region_without_remote_atomic_refuses_fetch_add,
    local_only_region_refuses_read,
    qp_without_remote_write_refuses_write,
    qp_without_remote_read_refuses_read,
    qp_without_remote_atomic_refuses_atomic,
    write_starting_one_byte_before_region_is_refused,
    write_ending_one_byte_past_region_is_refused,
    read_ending_one_byte_past_region_is_refused,
    write_ending_exactly_at_region_end_is_done,
    read_of_the_whole_region_is_done,
    write_longer_than_region_is_refused_before_any_byte,
    atomic_on_last_eight_bytes_is_done,
    atomic_just_past_region_is_refused,
    write_wrapping_past_2_64_is_refused,
    read_wrapping_past_2_64_is_refused,
    atomic_at_top_of_address_space_is_refused,
    zero_length_write_needs_no_key,
    zero_length_read_needs_no_key,
    zero_length_write_with_imm_only_consumes_a_receive,
    region_deregistered_during_write_takes_no_more_bytes,
    region_deregistered_during_read_sends_no_more_bytes,
    local_region_deregistered_before_read_response_is_not_written,
    write_payload_beyond_reth_length_is_refused,
    read_response_longer_than_requested_is_dropped,
    uc_write_violation_is_dropped_silently,
);
