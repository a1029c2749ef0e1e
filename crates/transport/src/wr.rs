//! Work requests and completions as the transport sees them.

use crate::attr::AddressVector;
use crate::mw::MwBind;
use crate::time::Instant;
use crate::types::{Qpn, SendFlags, WcFlags, WcOpcode, WcStatus, WrOpcode};

/// A scatter/gather element: `length` bytes at `addr` of the MR named by `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    /// Address in the MR's I/O virtual address space.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// Local key of the MR.
    pub lkey: u32,
}

/// A scatter/gather list. One element is kept in place: the common work
/// request (perftest, the pingpongs, UCX's small messages) has one, and a
/// `Vec` cost each message an allocation at the post and a free at its
/// completion, for its send and for its receive (~350 instructions a
/// same-host `ib_send_lat` message, callgrind; BENCHMARKS.md, "The
/// scatter list in place").
pub type Sgl = smallvec::SmallVec<[Sge; 1]>;

/// UD destination of a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    /// Address vector (from the AH).
    pub av: AddressVector,
    /// Destination QP.
    pub remote_qpn: Qpn,
    /// Destination Q_Key (MSB set: use the QP's own Q_Key, IBTA 10.2.5).
    pub remote_qkey: u32,
}

/// A send work request (`struct ibv_send_wr`), with inline data already copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendWr {
    /// Caller's cookie, returned in the completion.
    pub wr_id: u64,
    /// Operation.
    pub opcode: WrOpcode,
    /// Flags.
    pub flags: SendFlags,
    /// Gather list (ignored when `inline` is set).
    pub sgl: Sgl,
    /// Inline payload copied at post time (`IBV_SEND_INLINE`).
    pub inline: Option<Vec<u8>>,
    /// Immediate data as the big-endian word on the wire (or the rkey to invalidate).
    pub imm_data: u32,
    /// Remote address (RDMA and atomics).
    pub remote_addr: u64,
    /// Remote key (RDMA and atomics).
    pub rkey: u32,
    /// Compare value (CmpSwap) or addend (FetchAdd).
    pub compare_add: u64,
    /// Swap value (CmpSwap).
    pub swap: u64,
    /// UD destination.
    pub ud: Option<UdDest>,
    /// What a BIND_MW binds (`ibv_send_wr.bind_mw`).
    pub bind: Option<MwBind>,
    /// XRC send QPs: the XRC SRQ number at the target (`wr.xrc.remote_srqn`,
    /// `ibv_wr_set_xrc_srqn`), carried in every request's XRCETH.
    pub xrc_remote_srqn: u32,
}

impl SendWr {
    /// A request with the given id and opcode and nothing else set.
    pub fn new(wr_id: u64, opcode: WrOpcode) -> SendWr {
        SendWr {
            wr_id,
            opcode,
            flags: SendFlags::EMPTY,
            sgl: Sgl::new(),
            inline: None,
            imm_data: 0,
            remote_addr: 0,
            rkey: 0,
            compare_add: 0,
            swap: 0,
            xrc_remote_srqn: 0,
            ud: None,
            bind: None,
        }
    }

    /// Total payload length.
    pub fn length(&self) -> u64 {
        match &self.inline {
            Some(d) => d.len() as u64,
            None => self.sgl.iter().map(|s| u64::from(s.length)).sum(),
        }
    }
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RecvWr {
    /// Caller's cookie.
    pub wr_id: u64,
    /// Scatter list.
    pub sgl: Sgl,
}

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// Cookie of the completed request.
    pub wr_id: u64,
    /// Status.
    pub status: WcStatus,
    /// Operation.
    pub opcode: WcOpcode,
    /// Vendor error (a softrdma reason code for errors, 0 on success).
    pub vendor_err: u32,
    /// Bytes transferred (receives: including the 40-byte GRH area on UD).
    pub byte_len: u32,
    /// Immediate data (big-endian wire word) or the invalidated rkey.
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: Qpn,
    /// Source QP (UD receives).
    pub src_qp: Qpn,
    /// Flags.
    pub wc_flags: WcFlags,
    /// P_Key index.
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits.
    pub dlid_path_bits: u8,
    /// When the completion was queued on its CQ, on the transport's clock
    /// (the `now` of the call that produced it). The engine turns it into
    /// the device clock and wall-clock time of `ibv_wc_read_completion_ts`
    /// and `ibv_wc_read_completion_wallclock_ns`.
    pub timestamp: Instant,
    /// Tag matching (`ibv_wc_read_tm_info`): the message's tag when
    /// `WcFlags::TM_MATCH` is set, else 0.
    pub tm_tag: u64,
    /// Tag matching: the TMH's application context when `TM_MATCH` is set.
    pub tm_priv: u32,
}

impl Wc {
    /// A completion with everything but the identity fields zeroed.
    pub fn new(wr_id: u64, status: WcStatus, opcode: WcOpcode, qp_num: Qpn) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            vendor_err: 0,
            byte_len: 0,
            imm_data: 0,
            qp_num,
            src_qp: 0,
            wc_flags: WcFlags::EMPTY,
            pkey_index: 0,
            slid: 0,
            sl: 0,
            dlid_path_bits: 0,
            timestamp: Instant::ZERO,
            tm_tag: 0,
            tm_priv: 0,
        }
    }
}
