//! Steering datagrams among the processes of one host device (DESIGN §4).
//!
//! Every member process binds its own socket to the device's address and port with
//! `SO_REUSEPORT` ([`SocketConfig::reuseport`](crate::SocketConfig::reuseport)); the kernel
//! makes them one *reuseport group* and, for each datagram, runs the group's classic BPF
//! program ([`RoceSocket::attach_steering`](crate::RoceSocket::attach_steering)) on the UDP
//! payload — the RoCEv2 BTH at offset 0 — and delivers to the socket whose index in the group
//! the program returns. [`SteerProgram::new`] compiles a [`SteerTable`] (member slot → group
//! index, rdma_cm listeners → member slot) into that program.
//!
//! # Decision order (offsets from the UDP payload start)
//!
//! 1. **Probe** ([`probe_datagram`]): 16 bytes `"SRDMAPRB"`, epoch (BE u32), index (BE u32).
//!    Goes to the index it names, so a member can learn which socket sits where.
//! 2. **QP1** (dest QPN = 1, CM MADs: BTH 12 B + DETH 8 B + MAD at 20). Only MADs of
//!    management class CM (0x07, payload byte 21) are read by CM attribute:
//!    - `REQ` (0x0010), `SIDR_REQ` (0x0017): ServiceID (payload 52..60) of a listener → that
//!      listener's member;
//!    - `MRA`, `REJ`, `REP`, `RTU`, `DREQ`, `DREP`, `LAP`, `APR` (0x0011–0x0016, 0x0019,
//!      0x001A): the RemoteCommunicationID (payload 48..52) is the receiver's own; its top
//!      byte is the member slot;
//!    - `SIDR_REP` (0x0018): the RequestID (payload 44..48) is the receiver's own; top byte;
//!    - any other MAD (any class) with a response method (`R` bit, 0x80 of payload byte 23):
//!      the top byte of the TransactionID (payload 28) is the requester's slot;
//!    - anything else, or a datagram shorter than 60 bytes (a MAD is 256): fallback.
//! 3. **Any other QPN**: member slot = bits 23..16 of the destination QPN ([`member_slot`]);
//!    the multicast QPN 0xFFFFFF goes to fallback.
//!
//! A slot no member holds, and a datagram shorter than a BTH (12 bytes), goes to
//! [`SteerTable::fallback`]. An index the group does not have (e.g. `u32::MAX`) makes the
//! kernel pick a member by its flow hash.
//!
//! # The program
//!
//! About 40 fixed instructions, 2 per member and 2 per listener (+3 per 127 listeners), at
//! most [`MAX_INSNS`] (the kernel's `BPF_MAXINSNS`): 255 members and 500 listeners take
//! about 1 560. Slots and service IDs are matched by linear chains of `jeq` (each skips one
//! `ret`, so no conditional jump is longer than 255); the rules reach the member chain with
//! `ja`, whose offset is 32 bits. Every absolute load is preceded by a length check (`ld
//! len`), so short datagrams go to fallback — without the check, a load past the end would
//! end the program with 0 (see below) and send them to index 0.
//!
//! # Kernel facts the engine must respect (measured by `tests/steer.rs`)
//!
//! Linux 6.18.44 (`uname -r`: 6.18.44-fc-v669), 2 vCPUs, as root; numbers vary per run.
//!
//! * **A GSO send is steered by its first segment.** On loopback a `UDP_SEGMENT` send of
//!   four datagrams for slots 2, 1, 3, 4 arrived entirely at slot 2's socket (as one GRO
//!   super-datagram if that socket has `UDP_GRO`, else as four datagrams); sent one by one,
//!   each reached its own socket. **Never put datagrams for different destination member
//!   slots into one GSO send** ([`RoceSocket::send_batch`](crate::RoceSocket::send_batch)
//!   coalesces any run of equal-size datagrams to one address: the engine must cut runs
//!   where the slot changes).
//! * **GRO merges datagrams for different slots.** GRO joins consecutive same-size
//!   datagrams of one flow (same addresses and ports — a softrdma peer sends all its QPs'
//!   traffic from one port) whatever they carry, before the socket lookup; the program then
//!   sees only the first. 4096 datagrams of 1200 B alternating between slots 1 and 2 from
//!   one socket:
//!   - loopback, sockets with `UDP_GRO`: 0 merged, 0 mis-steered (no NAPI on loopback:
//!     only GSO sends arrive merged);
//!   - veth as created (no NAPI): 0;
//!   - veth receiving like a NIC (`rx-gro`, `rx-udp-gro-forwarding`, threaded NAPI), group
//!     sockets with `UDP_GRO`: 919 mis-steered, in 116 super-datagrams;
//!   - the same, sockets without `UDP_GRO`: 0 while any socket on the host has `UDP_GRO`
//!     or a UDP tunnel (GRO then looks up the group's socket — by hash, without the
//!     program — and sees no `UDP_GRO`); 925 mis-steered when none has (GRO then treats
//!     the packets as forwarded traffic, which `rx-udp-gro-forwarding` merges);
//!   - veth with `rx-gro-list` (fraglist GRO), sockets without `UDP_GRO`: 741 mis-steered
//!     (split again only after steering).
//!
//!   So on a non-loopback address the group's sockets must not enable `UDP_GRO` (NICs have
//!   GRO on by default; `rx-gro-list` and `rx-udp-gro-forwarding`, off by default, break
//!   steering even then), or a member must pass on what it receives for other slots
//!   ([`SteerTable::route`] says whose it is). On loopback `UDP_GRO` is safe.
//! * **Indices shift when a member leaves.** Closing the socket at index 1 of 4 moved the
//!   last socket into index 1 (`__reuseport_detach_sock`): probes for 0..3 reached the
//!   sockets bound 1st, 4th and 3rd, and the one for 3 (now out of range) a member chosen by
//!   hash. Until a corrected table is attached, the moved member receives the departed
//!   member's traffic and its own goes to the hash. The program is the group's: attached
//!   from the member that closed, it kept steering; attaching from any member replaces it.
//! * **A load past the end ends the program with 0.** `ld [100]; ret #3` delivered 16-byte
//!   datagrams from 16 source ports all to index 0, 200-byte ones to index 3. `ld len` is
//!   the UDP payload length (`ld len; ret a` delivered n-byte datagrams to index n). Hence
//!   the length checks.
//! * **An out-of-range result falls back to the flow hash**: `ret #7` in a group of 4
//!   spread 16 flows over the members. A socket outside any group: `EINVAL` on attach.
//!
//! Attach the program after `bind` (a [`RoceSocket`](crate::RoceSocket) always is): attached
//! to an unbound socket, it would go to a group of that socket's own, which joining the
//! shared group at bind discards (`reuseport_attach_prog`, `reuseport_add_sock`).

use std::collections::HashSet;
use std::fmt;

/// Largest program the kernel accepts (`BPF_MAXINSNS`).
pub const MAX_INSNS: usize = 4096;

/// The first 8 bytes of a probe datagram.
pub const PROBE_MAGIC: [u8; 8] = *b"SRDMAPRB";

/// Length of a probe datagram ([`probe_datagram`]).
pub const PROBE_LEN: usize = 16;

/// Base Transport Header length: anything shorter goes to fallback.
const BTH_LEN: u32 = 12;
/// Shortest QP1 datagram whose CM fields are read (BTH + DETH + MAD header + 16 bytes of
/// attribute data, through the ServiceID).
const QP1_MIN_LEN: u32 = 60;

/// Destination QPN of the General Services Interface (CM MADs).
const QP1: u32 = 1;
/// Multicast destination QPN.
const MULTICAST_QPN: u32 = 0x00FF_FFFF;

/// Payload offsets (BTH 12 B + DETH 8 B, then the MAD; IBTA vol. 1 §13.4 and §12.6).
const OFF_DEST_QP: u32 = 4;
const OFF_MGMT_CLASS: u32 = 21;
const OFF_METHOD: u32 = 23;
const OFF_TRANSACTION_ID: u32 = 28;
const OFF_ATTRIBUTE_ID: u32 = 36;
/// First word of the MAD data: LocalCommunicationID / RequestID.
const OFF_REQUEST_ID: u32 = 44;
const OFF_REMOTE_COMM_ID: u32 = 48;
const OFF_SERVICE_ID: u32 = 52;

/// Management class of the Communication Manager.
const MGMT_CLASS_CM: u32 = 0x07;
/// The response bit of the MAD method.
const METHOD_RESPONSE: u32 = 0x80;

/// CM attribute IDs (IBTA vol. 1 §12.6).
const ATTR_REQ: u32 = 0x0010;
const ATTR_MRA: u32 = 0x0011;
const ATTR_SIDR_REQ: u32 = 0x0017;
const ATTR_SIDR_REP: u32 = 0x0018;
const ATTR_APR: u32 = 0x001A;

/// Listeners compared after one load of the ServiceID's high word: the block's first jump
/// skips `1 + 2 × n` instructions and must stay within 255.
const LISTENERS_PER_BLOCK: usize = 127;

/// The destination QPN of a RoCE datagram (the BTH at UDP payload offset 0;
/// `None` if it is too short for one). What the program steers on.
pub fn dest_qpn(payload: &[u8]) -> Option<u32> {
    if payload.len() < BTH_LEN as usize {
        return None;
    }
    be32(payload, OFF_DEST_QP as usize).map(|w| w & 0x00FF_FFFF)
}

/// Member slot of a QPN: bits 23..16 (a member's QPNs are `slot << 16 | n`).
pub const fn member_slot(qpn: u32) -> u8 {
    (qpn >> 16) as u8
}

/// A probe datagram asking the group's program to deliver it to `index`. `epoch` lets the
/// receiver tell this round of probes from older ones.
pub fn probe_datagram(epoch: u32, index: u32) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    p[..8].copy_from_slice(&PROBE_MAGIC);
    p[8..12].copy_from_slice(&epoch.to_be_bytes());
    p[12..16].copy_from_slice(&index.to_be_bytes());
    p
}

/// `(epoch, index)` of a probe datagram, or `None` if `payload` is not one. Accepts exactly
/// what the program steers as a probe: at least 16 bytes starting with [`PROBE_MAGIC`].
pub fn parse_probe(payload: &[u8]) -> Option<(u32, u32)> {
    if payload.len() < PROBE_LEN || payload[..8] != PROBE_MAGIC {
        return None;
    }
    Some((be32(payload, 8)?, be32(payload, 12)?))
}

fn be32(p: &[u8], off: usize) -> Option<u32> {
    let b = p.get(off..off.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn be64(p: &[u8], off: usize) -> Option<u64> {
    Some(u64::from(be32(p, off)?) << 32 | u64::from(be32(p, off + 4)?))
}

/// Who receives what: the input of [`SteerProgram::new`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SteerTable {
    /// `(member slot 1..=255, index of that member's socket in the reuseport group)`.
    pub members: Vec<(u8, u32)>,
    /// rdma_cm listeners: `(IB CM ServiceID, member slot)`; a `REQ` / `SIDR_REQ` for that
    /// ServiceID goes to that member. A listener whose slot is not in `members` is ignored
    /// (its requests go to fallback).
    pub listeners: Vec<(u64, u8)>,
    /// Index for everything else (unknown slot, QP1 requests with no listener, short
    /// datagrams, ...). An index outside the group means "the kernel's hash decides".
    pub fallback: u32,
}

impl SteerTable {
    /// The group index of the member holding `slot`, if any.
    pub fn member_index(&self, slot: u8) -> Option<u32> {
        self.members
            .iter()
            .find(|&&(s, _)| s == slot)
            .map(|&(_, i)| i)
    }

    /// The index the compiled program returns for `payload` (the same decision, computed
    /// here: for tests, and for a member that receives a datagram meant for another).
    /// Meaningful for tables [`SteerProgram::new`] accepts.
    pub fn route(&self, payload: &[u8]) -> u32 {
        let fallback = self.fallback;
        if let Some((_, index)) = parse_probe(payload) {
            return index;
        }
        let Some(qpn) = dest_qpn(payload) else {
            return fallback;
        };
        let slot = match qpn {
            QP1 => match self.qp1_slot(payload) {
                Some(slot) => slot,
                None => return fallback,
            },
            MULTICAST_QPN => return fallback,
            _ => member_slot(qpn),
        };
        self.member_index(slot).unwrap_or(fallback)
    }

    /// The member slot a QP1 datagram is for, per the rules in the module doc.
    fn qp1_slot(&self, p: &[u8]) -> Option<u8> {
        match qp1_kind(p)? {
            Qp1Kind::Request(sid) => self
                .listeners
                .iter()
                .find(|&&(s, _)| s == sid)
                .map(|&(_, slot)| slot),
            Qp1Kind::Answer(slot) => Some(slot),
            Qp1Kind::Other => None,
        }
    }
}

/// What steers a QP1 datagram: a connection request's ServiceID, or the
/// member slot an answer names.
enum Qp1Kind {
    Request(u64),
    Answer(u8),
    Other,
}

fn qp1_kind(p: &[u8]) -> Option<Qp1Kind> {
    if p.len() < QP1_MIN_LEN as usize {
        return None;
    }
    let byte = |off: u32| p.get(off as usize).copied();
    if u32::from(byte(OFF_MGMT_CLASS)?) == MGMT_CLASS_CM {
        let attr = u32::from(byte(OFF_ATTRIBUTE_ID)?) << 8 | u32::from(byte(OFF_ATTRIBUTE_ID + 1)?);
        match attr {
            ATTR_REQ | ATTR_SIDR_REQ => {
                return Some(Qp1Kind::Request(be64(p, OFF_SERVICE_ID as usize)?));
            }
            ATTR_SIDR_REP => return byte(OFF_REQUEST_ID).map(Qp1Kind::Answer),
            ATTR_MRA..=ATTR_APR => return byte(OFF_REMOTE_COMM_ID).map(Qp1Kind::Answer),
            _ => {}
        }
    }
    if u32::from(byte(OFF_METHOD)?) & METHOD_RESPONSE != 0 {
        byte(OFF_TRANSACTION_ID).map(Qp1Kind::Answer)
    } else {
        Some(Qp1Kind::Other)
    }
}

/// The member slot a QP1 answer (REP, RTU, REJ, MRA, DREQ, DREP, SIDR_REP, a
/// MAD response) is for: the top byte of the comm ID, request ID or TID its
/// asker chose. `None` for requests and anything else. A member receiving an
/// answer for another slot knows the group's table is stale.
pub fn qp1_answer_slot(payload: &[u8]) -> Option<u8> {
    if dest_qpn(payload)? != QP1 {
        return None;
    }
    match qp1_kind(payload)? {
        Qp1Kind::Answer(slot) => Some(slot),
        _ => None,
    }
}

/// The ServiceID of a QP1 connection request (REQ, SIDR_REQ): the program
/// steers it to the member listening on it. `None` for anything else.
pub fn qp1_request_service(payload: &[u8]) -> Option<u64> {
    if dest_qpn(payload)? != QP1 {
        return None;
    }
    match qp1_kind(payload)? {
        Qp1Kind::Request(sid) => Some(sid),
        _ => None,
    }
}

/// Why a [`SteerTable`] cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SteerError {
    /// Member slot 0 is reserved (QPNs below 0x10000: QP0, QP1, ...).
    #[error("member slot 0 is reserved")]
    ReservedSlot,
    /// Two members claim one slot.
    #[error("member slot {0} listed twice")]
    DuplicateSlot(u8),
    /// Two listeners claim one ServiceID.
    #[error("service ID {0:#018x} listed twice")]
    DuplicateListener(u64),
    /// The program would exceed the kernel's [`MAX_INSNS`].
    #[error("steering program of {0} instructions exceeds the kernel's limit of 4096")]
    TooLong(usize),
    /// The program's jumps did not resolve (a bug in this module, never a table's fault).
    #[error("steering program jump does not resolve")]
    BadJump,
}

/// A compiled steering program: classic BPF for `SO_ATTACH_REUSEPORT_CBPF`.
#[derive(Clone)]
pub struct SteerProgram {
    insns: Vec<libc::sock_filter>,
}

impl fmt::Debug for SteerProgram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SteerProgram")
            .field("instructions", &self.insns.len())
            .finish()
    }
}

impl SteerProgram {
    /// Compiles `table` (see the module doc for what the program decides).
    pub fn new(table: &SteerTable) -> Result<SteerProgram, SteerError> {
        let mut members = table.members.clone();
        members.sort_unstable();
        let mut seen = HashSet::new();
        for &(slot, _) in &members {
            if slot == 0 {
                return Err(SteerError::ReservedSlot);
            }
            if !seen.insert(slot) {
                return Err(SteerError::DuplicateSlot(slot));
            }
        }
        // Listeners resolved to the index their member has; unknown members drop out.
        let mut listeners = Vec::with_capacity(table.listeners.len());
        let mut sids = HashSet::new();
        for &(sid, slot) in &table.listeners {
            if slot == 0 {
                return Err(SteerError::ReservedSlot);
            }
            if !sids.insert(sid) {
                return Err(SteerError::DuplicateListener(sid));
            }
            if let Some(index) = table.member_index(slot) {
                listeners.push((sid, index));
            }
        }
        listeners.sort_unstable();
        let insns = emit(&members, &listeners, table.fallback)?;
        Ok(SteerProgram { insns })
    }

    /// The instructions, as `SO_ATTACH_REUSEPORT_CBPF` takes them.
    pub fn instructions(&self) -> &[libc::sock_filter] {
        &self.insns
    }
}

// Classic BPF opcodes (linux/bpf_common.h, linux/filter.h).
const fn op(parts: u32) -> u16 {
    parts as u16
}
const LD_W_ABS: u16 = op(libc::BPF_LD | libc::BPF_W | libc::BPF_ABS);
const LD_H_ABS: u16 = op(libc::BPF_LD | libc::BPF_H | libc::BPF_ABS);
const LD_B_ABS: u16 = op(libc::BPF_LD | libc::BPF_B | libc::BPF_ABS);
const LD_W_LEN: u16 = op(libc::BPF_LD | libc::BPF_W | libc::BPF_LEN);
const AND_K: u16 = op(libc::BPF_ALU | libc::BPF_AND | libc::BPF_K);
const RSH_K: u16 = op(libc::BPF_ALU | libc::BPF_RSH | libc::BPF_K);
const JA: u16 = op(libc::BPF_JMP | libc::BPF_JA);
const JEQ_K: u16 = op(libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K);
const JGE_K: u16 = op(libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K);
const JSET_K: u16 = op(libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K);
const RET_K: u16 = op(libc::BPF_RET | libc::BPF_K);
const RET_A: u16 = op(libc::BPF_RET | libc::BPF_A);

/// Where a jump goes: `n` instructions past the next one, or a label.
#[derive(Clone, Copy)]
enum To {
    Skip(u8),
    Label(usize),
}

const NEXT: To = To::Skip(0);

struct Insn {
    code: u16,
    jt: To,
    jf: To,
    k: u32,
    /// `ja`: the 32-bit offset in `k` goes to this label.
    ja: Option<usize>,
}

/// A two-pass assembler: labels are resolved when the program is finished.
#[derive(Default)]
struct Asm {
    insns: Vec<Insn>,
    labels: Vec<Option<usize>>,
}

impl Asm {
    fn label(&mut self) -> usize {
        self.labels.push(None);
        self.labels.len() - 1
    }

    fn place(&mut self, label: usize) {
        if let Some(l) = self.labels.get_mut(label) {
            *l = Some(self.insns.len());
        }
    }

    fn stmt(&mut self, code: u16, k: u32) {
        self.jump(code, k, NEXT, NEXT);
    }

    fn jump(&mut self, code: u16, k: u32, jt: To, jf: To) {
        self.insns.push(Insn {
            code,
            jt,
            jf,
            k,
            ja: None,
        });
    }

    fn ret(&mut self, k: u32) {
        self.stmt(RET_K, k);
    }

    fn ja(&mut self, label: usize) {
        self.insns.push(Insn {
            code: JA,
            jt: NEXT,
            jf: NEXT,
            k: 0,
            ja: Some(label),
        });
    }

    fn finish(self) -> Result<Vec<libc::sock_filter>, SteerError> {
        if self.insns.len() > MAX_INSNS {
            return Err(SteerError::TooLong(self.insns.len()));
        }
        // Forward offset from the instruction after `pc` to `to`.
        let offset = |pc: usize, to: To| -> Result<usize, SteerError> {
            match to {
                To::Skip(n) => Ok(usize::from(n)),
                To::Label(l) => {
                    let at = self.labels.get(l).copied().flatten();
                    at.and_then(|at| at.checked_sub(pc + 1))
                        .ok_or(SteerError::BadJump)
                }
            }
        };
        let short = |n: usize| u8::try_from(n).map_err(|_| SteerError::BadJump);
        let mut out = Vec::with_capacity(self.insns.len());
        for (pc, i) in self.insns.iter().enumerate() {
            let k = match i.ja {
                Some(l) => {
                    u32::try_from(offset(pc, To::Label(l))?).map_err(|_| SteerError::BadJump)?
                }
                None => i.k,
            };
            let (jt, jf) = (short(offset(pc, i.jt)?)?, short(offset(pc, i.jf)?)?);
            // Like the kernel's checker: every jump lands inside the program.
            let far = match i.ja {
                Some(_) => k as usize,
                None => usize::from(jt.max(jf)),
            };
            let is_jump = u32::from(i.code) & 0x07 == libc::BPF_JMP;
            if is_jump && pc + 1 + far >= self.insns.len() {
                return Err(SteerError::BadJump);
            }
            out.push(libc::sock_filter {
                code: i.code,
                jt,
                jf,
                k,
            });
        }
        Ok(out)
    }
}

/// Emits the program for validated `members` `(slot, index)` and `listeners`
/// `(ServiceID, index)`, both sorted.
fn emit(
    members: &[(u8, u32)],
    listeners: &[(u64, u32)],
    fallback: u32,
) -> Result<Vec<libc::sock_filter>, SteerError> {
    let mut a = Asm::default();
    let [
        not_probe,
        qp1,
        fb_near,
        cm_other,
        sidr_rep,
        fb_mad,
        request,
        slot,
    ] = std::array::from_fn(|_| a.label());
    let magic_hi = u32::from_be_bytes([b'S', b'R', b'D', b'M']);
    let magic_lo = u32::from_be_bytes([b'A', b'P', b'R', b'B']);

    // Shorter than a BTH: nothing to read.
    a.stmt(LD_W_LEN, 0);
    a.jump(JGE_K, BTH_LEN, To::Skip(1), NEXT);
    a.ret(fallback);

    // 1. Probe: return the index it asks for.
    a.jump(JGE_K, PROBE_LEN as u32, NEXT, To::Label(not_probe));
    a.stmt(LD_W_ABS, 0);
    a.jump(JEQ_K, magic_hi, NEXT, To::Label(not_probe));
    a.stmt(LD_W_ABS, 4);
    a.jump(JEQ_K, magic_lo, NEXT, To::Label(not_probe));
    a.stmt(LD_W_ABS, 12);
    a.stmt(RET_A, 0);

    // 3. Any QPN but QP1 and multicast: slot = QPN bits 23..16.
    a.place(not_probe);
    a.stmt(LD_W_ABS, OFF_DEST_QP);
    a.stmt(AND_K, 0x00FF_FFFF);
    a.jump(JEQ_K, QP1, To::Label(qp1), NEXT);
    a.jump(JEQ_K, MULTICAST_QPN, To::Label(fb_near), NEXT);
    a.stmt(RSH_K, 16);
    a.ja(slot);
    a.place(fb_near);
    a.ret(fallback);

    // 2. QP1: CM MADs by attribute, other responses by TransactionID.
    a.place(qp1);
    a.stmt(LD_W_LEN, 0);
    a.jump(JGE_K, QP1_MIN_LEN, NEXT, To::Label(fb_mad));
    a.stmt(LD_B_ABS, OFF_MGMT_CLASS);
    a.jump(JEQ_K, MGMT_CLASS_CM, NEXT, To::Label(cm_other));
    a.stmt(LD_H_ABS, OFF_ATTRIBUTE_ID);
    a.jump(JEQ_K, ATTR_REQ, To::Label(request), NEXT);
    a.jump(JEQ_K, ATTR_SIDR_REQ, To::Label(request), NEXT);
    a.jump(JEQ_K, ATTR_SIDR_REP, To::Label(sidr_rep), NEXT);
    // What is left of 0x11..=0x1A: MRA REJ REP RTU DREQ DREP LAP APR.
    a.jump(JGE_K, ATTR_APR + 1, To::Label(cm_other), NEXT);
    a.jump(JGE_K, ATTR_MRA, NEXT, To::Label(cm_other));
    a.stmt(LD_B_ABS, OFF_REMOTE_COMM_ID);
    a.ja(slot);
    a.place(sidr_rep);
    a.stmt(LD_B_ABS, OFF_REQUEST_ID);
    a.ja(slot);
    a.place(cm_other);
    a.stmt(LD_B_ABS, OFF_METHOD);
    a.jump(JSET_K, METHOD_RESPONSE, NEXT, To::Label(fb_mad));
    a.stmt(LD_B_ABS, OFF_TRANSACTION_ID);
    a.ja(slot);
    a.place(fb_mad);
    a.ret(fallback);

    // REQ / SIDR_REQ: ServiceID → listener's index, in blocks sharing the high word.
    a.place(request);
    for group in listeners.chunk_by(|x, y| x.0 >> 32 == y.0 >> 32) {
        for block in group.chunks(LISTENERS_PER_BLOCK) {
            let hi = (block[0].0 >> 32) as u32;
            // block.len() <= 127, so the skip is at most 255.
            let skip = u8::try_from(1 + 2 * block.len()).map_err(|_| SteerError::BadJump)?;
            a.stmt(LD_W_ABS, OFF_SERVICE_ID);
            a.jump(JEQ_K, hi, NEXT, To::Skip(skip));
            a.stmt(LD_W_ABS, OFF_SERVICE_ID + 4);
            for &(sid, index) in block {
                a.jump(JEQ_K, sid as u32, NEXT, To::Skip(1));
                a.ret(index);
            }
        }
    }
    a.ret(fallback);

    // A = member slot: its index, else fallback.
    a.place(slot);
    for &(s, index) in members {
        a.jump(JEQ_K, u32::from(s), NEXT, To::Skip(1));
        a.ret(index);
    }
    a.ret(fallback);

    a.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs a classic BPF program the way the kernel does for `SO_ATTACH_REUSEPORT_CBPF`
    /// (payload at offset 0; a load past the end ends the program with 0). Only the opcodes
    /// [`emit`] uses.
    fn run(prog: &[libc::sock_filter], pkt: &[u8]) -> u32 {
        let mut a: u32 = 0;
        let mut pc = 0usize;
        let load = |k: u32, n: usize| -> Option<u32> {
            let b = pkt.get(k as usize..k as usize + n)?;
            Some(b.iter().fold(0u32, |v, &x| v << 8 | u32::from(x)))
        };
        let mut steps = 0;
        loop {
            steps += 1;
            assert!(steps <= prog.len(), "no loops in classic BPF");
            let i = prog[pc];
            let mut next = pc + 1;
            match i.code {
                LD_W_ABS | LD_H_ABS | LD_B_ABS => {
                    let n = match i.code {
                        LD_W_ABS => 4,
                        LD_H_ABS => 2,
                        _ => 1,
                    };
                    match load(i.k, n) {
                        Some(v) => a = v,
                        None => return 0,
                    }
                }
                LD_W_LEN => a = pkt.len() as u32,
                AND_K => a &= i.k,
                RSH_K => a >>= i.k,
                JA => next += i.k as usize,
                JEQ_K | JGE_K | JSET_K => {
                    let taken = match i.code {
                        JEQ_K => a == i.k,
                        JGE_K => a >= i.k,
                        _ => a & i.k != 0,
                    };
                    next += usize::from(if taken { i.jt } else { i.jf });
                }
                RET_K => return i.k,
                RET_A => return a,
                c => panic!("unexpected opcode {c:#x}"),
            }
            pc = next;
        }
    }

    const FB: u32 = 99;

    fn table() -> SteerTable {
        SteerTable {
            members: vec![(3, 0), (1, 2), (2, 1), (255, 3)],
            listeners: vec![(0x0000_0000_0106_4e20, 1), (0x1234_5678_0106_0001, 255)],
            fallback: FB,
        }
    }

    /// A BTH for `qpn`, `len` bytes long (the rest zero).
    fn bth(qpn: u32, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = 0x04; // RC SEND Only
        let w = (qpn & 0x00FF_FFFF).to_be_bytes();
        p[4..8].copy_from_slice(&w);
        p
    }

    /// A 280-byte QP1 datagram (BTH + DETH + 256-byte MAD) with the given MAD fields.
    fn mad(class: u8, method: u8, attr: u16, tid: u64) -> Vec<u8> {
        let mut p = bth(1, 20 + 256 + 4);
        p[21] = class;
        p[23] = method;
        p[28..36].copy_from_slice(&tid.to_be_bytes());
        p[36..38].copy_from_slice(&attr.to_be_bytes());
        p
    }

    fn with(mut p: Vec<u8>, off: usize, bytes: &[u8]) -> Vec<u8> {
        p[off..off + bytes.len()].copy_from_slice(bytes);
        p
    }

    /// Checks the program against `expect` and against `SteerTable::route`.
    fn check(t: &SteerTable, prog: &SteerProgram, pkt: &[u8], expect: u32) {
        assert_eq!(run(prog.instructions(), pkt), expect, "program, {pkt:02x?}");
        assert_eq!(t.route(pkt), expect, "route, {pkt:02x?}");
    }

    #[test]
    fn probe() {
        let t = table();
        let p = SteerProgram::new(&t).unwrap();
        let probe = probe_datagram(7, 2);
        assert_eq!(&probe[..8], b"SRDMAPRB");
        assert_eq!(parse_probe(&probe), Some((7, 2)));
        check(&t, &p, &probe, 2);
        check(&t, &p, &probe_datagram(1, 0xdead_beef), 0xdead_beef);
        // Longer datagrams starting with the magic are probes too.
        let mut long = probe.to_vec();
        long.extend_from_slice(&[0; 40]);
        assert_eq!(parse_probe(&long), Some((7, 2)));
        check(&t, &p, &long, 2);
        // 15 bytes are not a probe: read as a BTH (QPN "APR" = 0x505242, slot 0x50: none).
        assert_eq!(parse_probe(&probe[..15]), None);
        check(&t, &p, &probe[..15], FB);
        // One wrong magic byte: not a probe.
        let bad = with(probe.to_vec(), 7, b"C");
        assert_eq!(parse_probe(&bad), None);
        check(&t, &p, &bad, FB);
        let bad = with(probe.to_vec(), 0, b"X");
        check(&t, &p, &bad, FB);
    }

    #[test]
    fn short_datagrams_go_to_fallback() {
        let t = table();
        let p = SteerProgram::new(&t).unwrap();
        for len in 0..12 {
            check(&t, &p, &bth(0x01_0005, 16)[..len], FB);
        }
        // A bare 12-byte BTH is enough for rule 3.
        check(&t, &p, &bth(0x01_0005, 12), 2);
        // QP1 shorter than the ServiceID: fallback, whatever it holds.
        let req = with(mad(7, 3, 0x10, 0), 52, &0x0106_4e20u64.to_be_bytes());
        for len in [12, 20, 37, 44, 49, 59] {
            check(&t, &p, &req[..len], FB);
        }
        check(&t, &p, &req[..60], 2);
    }

    #[test]
    fn qpn_slots() {
        let t = table();
        let p = SteerProgram::new(&t).unwrap();
        check(&t, &p, &bth(0x03_0000, 40), 0);
        check(&t, &p, &bth(0x01_1234, 40), 2);
        check(&t, &p, &bth(0x02_ffff, 40), 1);
        check(&t, &p, &bth(0xff_0001, 40), 3);
        check(&t, &p, &bth(0xff_fffe, 40), 3);
        // Multicast QPN: fallback although slot 255 is a member.
        check(&t, &p, &bth(0xff_ffff, 40), FB);
        // Slot 0 (QP0, low QPNs) and unknown slots.
        check(&t, &p, &bth(0x00_0000, 40), FB);
        check(&t, &p, &bth(0x00_0002, 40), FB);
        check(&t, &p, &bth(0x04_0001, 40), FB);
        // The BTH's byte 4 (reserved) is ignored.
        check(&t, &p, &with(bth(0x02_0001, 40), 4, &[0xff]), 1);
    }

    #[test]
    fn cm_requests_follow_listeners() {
        let t = table();
        let p = SteerProgram::new(&t).unwrap();
        for attr in [0x10u16, 0x17] {
            let m = mad(7, 0x03, attr, 0x0500_0000_0000_0001);
            check(
                &t,
                &p,
                &with(m.clone(), 52, &0x0106_4e20u64.to_be_bytes()),
                2,
            );
            check(
                &t,
                &p,
                &with(m.clone(), 52, &0x1234_5678_0106_0001u64.to_be_bytes()),
                3,
            );
            // Same low word, other high word; other low word: no listener.
            check(
                &t,
                &p,
                &with(m.clone(), 52, &0x0000_0001_0106_4e20u64.to_be_bytes()),
                FB,
            );
            check(
                &t,
                &p,
                &with(m.clone(), 52, &0x0106_4e21u64.to_be_bytes()),
                FB,
            );
            // What a member handed a REQ by a stale table looks up.
            let req = with(m, 52, &0x0106_4e20u64.to_be_bytes());
            assert_eq!(qp1_request_service(&req), Some(0x0106_4e20));
            assert_eq!(qp1_request_service(&req[..59]), None, "short");
            assert_eq!(qp1_answer_slot(&req), None);
        }
        // Answers and data packets name no service.
        let rep = with(mad(7, 0x03, 0x13, 0), 48, &[2, 0, 0, 9]);
        assert_eq!(qp1_request_service(&rep), None);
        assert_eq!(qp1_answer_slot(&rep), Some(2));
        assert_eq!(qp1_request_service(&bth(0x01_0005, 300)), None);
        // A listener whose member is gone is ignored.
        let t2 = SteerTable {
            listeners: vec![(5, 9)],
            ..table()
        };
        let p2 = SteerProgram::new(&t2).unwrap();
        check(
            &t2,
            &p2,
            &with(mad(7, 3, 0x10, 0), 52, &5u64.to_be_bytes()),
            FB,
        );
    }

    #[test]
    fn cm_messages_follow_comm_ids() {
        let t = table();
        let p = SteerProgram::new(&t).unwrap();
        // MRA REJ REP RTU DREQ DREP LAP APR: RemoteCommunicationID's top byte.
        for attr in [0x11u16, 0x12, 0x13, 0x14, 0x15, 0x16, 0x19, 0x1a] {
            let m = with(mad(7, 0x03, attr, 0x0300_0000_0000_0000), 44, &[1, 0, 0, 7]);
            check(&t, &p, &with(m.clone(), 48, &[2, 0, 0, 9]), 1);
            check(&t, &p, &with(m.clone(), 48, &[255, 1, 2, 3]), 3);
            check(&t, &p, &with(m, 48, &[4, 0, 0, 1]), FB);
        }
        // SIDR_REP: RequestID's top byte.
        let m = with(mad(7, 0x03, 0x18, 0), 48, &[2, 0, 0, 0]);
        check(&t, &p, &with(m.clone(), 44, &[3, 0, 0, 1]), 0);
        check(&t, &p, &with(m, 44, &[0, 0, 0, 1]), FB);
    }

    #[test]
    fn other_mads_follow_transaction_ids() {
        let t = table();
        let p = SteerProgram::new(&t).unwrap();
        let tid = 0x0200_0000_dead_beef;
        // CM ClassPortInfo GetResp (0x81) and a CM attribute with the R bit in another class
        // (PerfMgt 0x04, PortCounters 0x12 GetResp).
        check(&t, &p, &mad(7, 0x81, 0x0001, tid), 1);
        check(&t, &p, &mad(4, 0x81, 0x0012, tid), 1);
        check(&t, &p, &mad(3, 0x81, 0x0010, 0x0300_0000_0000_0000), 0);
        check(&t, &p, &mad(7, 0x81, 0x0001, 0x0900_0000_0000_0000), FB);
        // Requests (Get 0x01, Set 0x02, Send 0x03) without a listener rule: fallback.
        check(&t, &p, &mad(7, 0x01, 0x0001, tid), FB);
        check(&t, &p, &mad(4, 0x02, 0x0012, tid), FB);
        // Non-CM class with CM attribute numbers is not read as CM.
        let m = with(mad(4, 0x03, 0x0013, tid), 48, &[2, 0, 0, 0]);
        check(&t, &p, &m, FB);
    }

    #[test]
    fn errors() {
        let t = |members, listeners| SteerTable {
            members,
            listeners,
            fallback: 0,
        };
        let e = |t: SteerTable| SteerProgram::new(&t).unwrap_err();
        assert_eq!(e(t(vec![(0, 1)], vec![])), SteerError::ReservedSlot);
        assert_eq!(e(t(vec![(1, 1)], vec![(7, 0)])), SteerError::ReservedSlot);
        assert_eq!(
            e(t(vec![(1, 1), (2, 2), (1, 3)], vec![])),
            SteerError::DuplicateSlot(1)
        );
        assert_eq!(
            e(t(vec![(1, 1)], vec![(7, 1), (7, 2)])),
            SteerError::DuplicateListener(7)
        );
        let many: Vec<(u64, u8)> = (0..2100u64).map(|i| (i, 1)).collect();
        assert!(matches!(
            e(t(vec![(1, 1)], many)),
            SteerError::TooLong(n) if n > MAX_INSNS
        ));
        // Empty table: everything to fallback, probes still work.
        let empty = SteerTable {
            fallback: 5,
            ..SteerTable::default()
        };
        let p = SteerProgram::new(&empty).unwrap();
        check(&empty, &p, &bth(0x01_0001, 40), 5);
        check(&empty, &p, &probe_datagram(0, 1), 1);
    }

    /// 255 members and 500 listeners (in 4 high words, one of them with 300 listeners, so
    /// a group spans several blocks): fits, and every entry is reached.
    #[test]
    fn big_tables() {
        let members: Vec<(u8, u32)> = (1..=255u8)
            .rev()
            .map(|s| (s, 1000 + u32::from(s)))
            .collect();
        let listeners: Vec<(u64, u8)> = (0..500u64)
            .map(|i| {
                let hi = [0u64, 1, 0xffff_ffff, 7][(i % 4) as usize];
                let hi = if i < 300 { 0 } else { hi };
                (hi << 32 | 0x0106_0000 | i, (i % 255 + 1) as u8)
            })
            .collect();
        let t = SteerTable {
            members,
            listeners: listeners.clone(),
            fallback: FB,
        };
        let p = SteerProgram::new(&t).unwrap();
        let n = p.instructions().len();
        assert!(n < 1700, "{n} instructions");
        for s in 1..=255u8 {
            check(
                &t,
                &p,
                &bth(u32::from(s) << 16 | 5, 12),
                1000 + u32::from(s),
            );
        }
        check(&t, &p, &bth(0xff_ffff, 12), FB);
        for &(sid, slot) in &listeners {
            let m = with(mad(7, 3, 0x10, 0), 52, &sid.to_be_bytes());
            check(&t, &p, &m, 1000 + u32::from(slot));
            let m = with(mad(7, 3, 0x10, 0), 52, &(sid ^ 1 << 20).to_be_bytes());
            check(&t, &p, &m, FB);
        }
        for s in 1..=255u8 {
            let m = with(mad(7, 3, 0x13, 0), 48, &[s, 0, 0, 1]);
            check(&t, &p, &m, 1000 + u32::from(s));
        }
    }

    /// No conditional jump leaves the program and every path ends in a `ret`, like the
    /// kernel's checker demands; conditional offsets fit a u8 by construction.
    #[test]
    fn jumps_stay_inside() {
        let t = SteerTable {
            members: (1..=255u8).map(|s| (s, u32::from(s))).collect(),
            listeners: (0..400u64).map(|i| (i << 20, 1)).collect(),
            fallback: FB,
        };
        let p = SteerProgram::new(&t).unwrap();
        let insns = p.instructions();
        for (pc, i) in insns.iter().enumerate() {
            let max = match i.code {
                JA => i.k as usize,
                JEQ_K | JGE_K | JSET_K => usize::from(i.jt.max(i.jf)),
                _ => continue,
            };
            assert!(pc + 1 + max < insns.len(), "pc {pc}");
        }
        assert!(matches!(insns.last().map(|i| i.code), Some(RET_K)));
    }

    /// The program and `SteerTable::route` agree on pseudo-random datagrams biased toward
    /// the interesting fields.
    #[test]
    fn program_matches_route() {
        let t = table();
        let p = SteerProgram::new(&t).unwrap();
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let len = (rnd() % 300) as usize;
            let mut pkt: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            let pick = |r: u64, v: &[u8]| v[(r % v.len() as u64) as usize];
            if len > 7 && rnd() % 2 == 0 {
                pkt[5] = pick(rnd(), &[0, 1, 2, 3, 4, 255]);
                if rnd() % 2 == 0 {
                    pkt[4..8].copy_from_slice(&[0, 0, 0, 1]);
                }
            }
            if len > 60 {
                pkt[21] = pick(rnd(), &[7, 7, 4]);
                pkt[23] = pick(rnd(), &[1, 3, 0x81, 0x83]);
                pkt[36] = 0;
                pkt[37] = pick(
                    rnd(),
                    &[0x01, 0x10, 0x11, 0x13, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1b],
                );
                for off in [28, 44, 48] {
                    pkt[off] = pick(rnd(), &[0, 1, 2, 3, 5, 255]);
                }
                if rnd() % 2 == 0 {
                    let sid = t.listeners[(rnd() % 2) as usize].0;
                    pkt[52..60].copy_from_slice(&sid.to_be_bytes());
                }
            }
            if len >= 16 && rnd() % 8 == 0 {
                pkt[..8].copy_from_slice(&PROBE_MAGIC);
            }
            assert_eq!(run(p.instructions(), &pkt), t.route(&pkt), "{pkt:02x?}");
        }
    }
}
