//! Verbs enumerations and flag sets, numbered exactly as rdma-core's `verbs.h`
//! so the C ABI converts them with a cast.

use core::fmt;

macro_rules! flags {
    ($(#[$m:meta])* $name:ident : $t:ty { $($(#[$fm:meta])* $f:ident = $v:expr;)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub $t);
        impl $name {
            $($(#[$fm])* pub const $f: $name = $name($v);)*
            /// The empty set.
            pub const EMPTY: $name = $name(0);
            /// True if all bits of `o` are set.
            pub const fn contains(self, o: $name) -> bool { self.0 & o.0 == o.0 }
            /// True if any bit of `o` is set.
            pub const fn intersects(self, o: $name) -> bool { self.0 & o.0 != 0 }
            /// Union.
            pub const fn with(self, o: $name) -> $name { $name(self.0 | o.0) }
            /// Difference.
            pub const fn without(self, o: $name) -> $name { $name(self.0 & !o.0) }
            /// True if no bit is set.
            pub const fn is_empty(self) -> bool { self.0 == 0 }
            /// Names of the set bits (unknown bits in hex).
            pub fn names(self) -> String {
                let mut v: Vec<String> = Vec::new();
                let mut rest = self.0;
                $(if $v != 0 && self.0 & $v == $v { v.push(stringify!($f).to_string()); rest &= !$v; })*
                if rest != 0 { v.push(format!("{:#x}", rest)); }
                v.join("|")
            }
        }
        impl core::ops::BitOr for $name {
            type Output = $name;
            fn bitor(self, o: $name) -> $name { $name(self.0 | o.0) }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.names())
            }
        }
    };
}

flags! {
    /// Memory region and QP access rights (`enum ibv_access_flags`).
    Access: u32 {
        /// Local write (required for receive buffers and read/atomic results).
        LOCAL_WRITE = 1;
        /// Remote RDMA WRITE.
        REMOTE_WRITE = 2;
        /// Remote RDMA READ.
        REMOTE_READ = 4;
        /// Remote atomics.
        REMOTE_ATOMIC = 8;
        /// Memory window binding.
        MW_BIND = 16;
        /// Zero-based addressing.
        ZERO_BASED = 32;
        /// On-demand paging: the memory need not be mapped at registration
        /// or stay mapped; accesses reach it through `Memory::*_on_demand`
        /// and fail where it is not there.
        ON_DEMAND = 64;
        /// Huge pages hint.
        HUGETLB = 128;
        /// FLUSH to global visibility.
        FLUSH_GLOBAL = 256;
        /// FLUSH to persistence.
        FLUSH_PERSISTENT = 512;
        /// Relaxed ordering (a hint; ignored).
        RELAXED_ORDERING = 1 << 20;
    }
}

flags! {
    /// Send work request flags (`enum ibv_send_flags`).
    SendFlags: u32 {
        /// Wait for prior READ/atomic WRs to complete first.
        FENCE = 1;
        /// Generate a completion even without `sq_sig_all`.
        SIGNALED = 2;
        /// Set the solicited-event bit.
        SOLICITED = 4;
        /// Payload copied from the SGEs at post time (no lkey needed).
        INLINE = 8;
        /// Checksum offload (ignored).
        IP_CSUM = 16;
    }
}

flags! {
    /// Work completion flags (`enum ibv_wc_flags`).
    WcFlags: u32 {
        /// The first 40 bytes of the buffer hold a GRH (UD).
        GRH = 1;
        /// `imm_data` is valid.
        WITH_IMM = 2;
        /// IP checksum verified.
        IP_CSUM_OK = 4;
        /// `invalidated_rkey` is valid.
        WITH_INV = 8;
        /// Tag matching: the unexpected count needs a SYNC operation.
        TM_SYNC_REQ = 1 << 4;
        /// Tag matching: the message matched a posted tag (`tm_tag` valid).
        TM_MATCH = 1 << 5;
        /// Tag matching: the data is in the matched tag's buffer.
        TM_DATA_VALID = 1 << 6;
    }
}

flags! {
    /// Which fields of [`crate::QpAttr`] a modify/query concerns (`enum ibv_qp_attr_mask`).
    QpAttrMask: u32 {
        /// qp_state.
        STATE = 1;
        /// cur_qp_state.
        CUR_STATE = 1 << 1;
        /// en_sqd_async_notify.
        EN_SQD_ASYNC_NOTIFY = 1 << 2;
        /// qp_access_flags.
        ACCESS_FLAGS = 1 << 3;
        /// pkey_index.
        PKEY_INDEX = 1 << 4;
        /// port_num.
        PORT = 1 << 5;
        /// qkey.
        QKEY = 1 << 6;
        /// ah_attr.
        AV = 1 << 7;
        /// path_mtu.
        PATH_MTU = 1 << 8;
        /// timeout.
        TIMEOUT = 1 << 9;
        /// retry_cnt.
        RETRY_CNT = 1 << 10;
        /// rnr_retry.
        RNR_RETRY = 1 << 11;
        /// rq_psn.
        RQ_PSN = 1 << 12;
        /// max_rd_atomic.
        MAX_QP_RD_ATOMIC = 1 << 13;
        /// alt path.
        ALT_PATH = 1 << 14;
        /// min_rnr_timer.
        MIN_RNR_TIMER = 1 << 15;
        /// sq_psn.
        SQ_PSN = 1 << 16;
        /// max_dest_rd_atomic.
        MAX_DEST_RD_ATOMIC = 1 << 17;
        /// path_mig_state.
        PATH_MIG_STATE = 1 << 18;
        /// cap.
        CAP = 1 << 19;
        /// dest_qp_num.
        DEST_QPN = 1 << 20;
        /// rate_limit.
        RATE_LIMIT = 1 << 25;
    }
}

macro_rules! open_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$fm:meta])* $f:ident = $v:expr,)* }) => {
        $(#[$m])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
        #[repr(u32)]
        pub enum $name { $($(#[$fm])* $f = $v,)* }
        impl $name {
            /// From the rdma-core numeric value.
            pub const fn from_u32(v: u32) -> Option<$name> {
                match v { $($v => Some($name::$f),)* _ => None }
            }
            /// The rdma-core numeric value.
            pub const fn as_u32(self) -> u32 { self as u32 }
        }
    };
}

open_enum! {
    /// Queue pair transport type (`enum ibv_qp_type`).
    QpType {
        /// Reliable connected.
        Rc = 2,
        /// Unreliable connected.
        Uc = 3,
        /// Unreliable datagram.
        Ud = 4,
        /// XRC initiator (`IBV_QPT_XRC_SEND`): an RC requester whose every
        /// request names the target's XRC SRQ (XRCETH); no receive queue.
        XrcSend = 9,
        /// XRC target (`IBV_QPT_XRC_RECV`): an RC responder of an XRC
        /// domain; receives go to the XRC SRQ each request names.
        XrcRecv = 10,
    }
}

impl QpType {
    /// True for the reliable connected services (RC and both XRC halves):
    /// ACKs, retransmission, READ and atomics.
    pub const fn is_reliable(self) -> bool {
        matches!(self, QpType::Rc | QpType::XrcSend | QpType::XrcRecv)
    }
    /// True for the two XRC halves.
    pub const fn is_xrc(self) -> bool {
        matches!(self, QpType::XrcSend | QpType::XrcRecv)
    }
}

open_enum! {
    /// Queue pair state (`enum ibv_qp_state`).
    QpState {
        /// Reset.
        Reset = 0,
        /// Initialized.
        Init = 1,
        /// Ready to receive.
        Rtr = 2,
        /// Ready to send.
        Rts = 3,
        /// Send queue drain.
        Sqd = 4,
        /// Send queue error.
        Sqe = 5,
        /// Error.
        Err = 6,
    }
}

open_enum! {
    /// Path MTU (`enum ibv_mtu`).
    Mtu {
        /// 256 bytes.
        M256 = 1,
        /// 512 bytes.
        M512 = 2,
        /// 1024 bytes.
        M1024 = 3,
        /// 2048 bytes.
        M2048 = 4,
        /// 4096 bytes.
        M4096 = 5,
    }
}

impl Mtu {
    /// Payload bytes per packet.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

open_enum! {
    /// Send work request opcode (`enum ibv_wr_opcode`).
    WrOpcode {
        /// RDMA WRITE.
        RdmaWrite = 0,
        /// RDMA WRITE with immediate.
        RdmaWriteWithImm = 1,
        /// SEND.
        Send = 2,
        /// SEND with immediate.
        SendWithImm = 3,
        /// RDMA READ.
        RdmaRead = 4,
        /// Atomic compare and swap.
        AtomicCmpAndSwp = 5,
        /// Atomic fetch and add.
        AtomicFetchAndAdd = 6,
        /// Local invalidate.
        LocalInv = 7,
        /// Memory window bind.
        BindMw = 8,
        /// SEND with invalidate.
        SendWithInv = 9,
        /// 8-byte atomic RDMA WRITE (IBA 1.5).
        AtomicWrite = 15,
    }
}

impl WrOpcode {
    /// The completion opcode reported for this request.
    pub const fn wc_opcode(self) -> WcOpcode {
        match self {
            WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm => WcOpcode::RdmaWrite,
            WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv => WcOpcode::Send,
            WrOpcode::RdmaRead => WcOpcode::RdmaRead,
            WrOpcode::AtomicCmpAndSwp => WcOpcode::CompSwap,
            WrOpcode::AtomicFetchAndAdd => WcOpcode::FetchAdd,
            WrOpcode::LocalInv => WcOpcode::LocalInv,
            WrOpcode::BindMw => WcOpcode::BindMw,
            WrOpcode::AtomicWrite => WcOpcode::AtomicWrite,
        }
    }
    /// True for the READ and the two atomics (they use responder resources).
    pub const fn is_read_or_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::RdmaRead | WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
    /// True for the two atomics.
    pub const fn is_atomic(self) -> bool {
        matches!(
            self,
            WrOpcode::AtomicCmpAndSwp | WrOpcode::AtomicFetchAndAdd
        )
    }
}

open_enum! {
    /// Completion opcode (`enum ibv_wc_opcode`).
    WcOpcode {
        /// SEND completed.
        Send = 0,
        /// RDMA WRITE completed.
        RdmaWrite = 1,
        /// RDMA READ completed.
        RdmaRead = 2,
        /// Compare and swap completed.
        CompSwap = 3,
        /// Fetch and add completed.
        FetchAdd = 4,
        /// Memory window bind completed.
        BindMw = 5,
        /// Local invalidate completed.
        LocalInv = 6,
        /// Atomic write completed.
        AtomicWrite = 9,
        /// A SEND was received.
        Recv = 128,
        /// An RDMA WRITE with immediate was received.
        RecvRdmaWithImm = 129,
        /// Tag matching: a tag was added to a TM SRQ's list.
        TmAdd = 130,
        /// Tag matching: a tag was removed from the list.
        TmDel = 131,
        /// Tag matching: the unexpected-message count was synchronised.
        TmSync = 132,
        /// Tag matching: a tagged message (eager or rendezvous) was received.
        TmRecv = 133,
        /// Tag matching: a message with a TMH of opcode NO_TAG was received.
        TmNoTag = 134,
    }
}

open_enum! {
    /// Completion status (`enum ibv_wc_status`).
    WcStatus {
        /// Success.
        Success = 0,
        /// Local length error.
        LocLenErr = 1,
        /// Local QP operation error.
        LocQpOpErr = 2,
        /// Local EE context operation error.
        LocEecOpErr = 3,
        /// Local protection error.
        LocProtErr = 4,
        /// Flushed because the QP is in the error state.
        WrFlushErr = 5,
        /// Memory window bind error.
        MwBindErr = 6,
        /// Bad response.
        BadRespErr = 7,
        /// Local access error.
        LocAccessErr = 8,
        /// Remote invalid request.
        RemInvReqErr = 9,
        /// Remote access error.
        RemAccessErr = 10,
        /// Remote operational error.
        RemOpErr = 11,
        /// Transport retry counter exceeded.
        RetryExcErr = 12,
        /// RNR retry counter exceeded.
        RnrRetryExcErr = 13,
        /// Local RDD violation.
        LocRddViolErr = 14,
        /// Remote invalid RD request.
        RemInvRdReqErr = 15,
        /// Remote aborted.
        RemAbortErr = 16,
        /// Invalid EE context number.
        InvEecnErr = 17,
        /// Invalid EE context state.
        InvEecStateErr = 18,
        /// Fatal error.
        FatalErr = 19,
        /// Response timeout.
        RespTimeoutErr = 20,
        /// General error.
        GeneralErr = 21,
        /// Tag matching: a tag operation failed (e.g. DEL of a consumed tag).
        TmErr = 22,
        /// Tag matching: a rendezvous transfer did not complete.
        TmRndvIncomplete = 23,
    }
}

/// The 24-bit QP number.
pub type Qpn = u32;

/// Destination QPN that addresses a multicast group.
pub const MULTICAST_QPN: Qpn = 0x00FF_FFFF;
/// The general services (CM) QP.
pub const GSI_QPN: Qpn = 1;
/// Q_Key of the GSI QP.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Async event kinds (`enum ibv_event_type`), for the ones this transport raises.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
#[repr(u32)]
pub enum AsyncEventType {
    /// CQ error (overflow).
    CqErr = 0,
    /// QP fatal error.
    QpFatal = 1,
    /// Invalid request on the QP (local work queue catastrophic error).
    QpReqErr = 2,
    /// QP access violation.
    QpAccessErr = 3,
    /// Communication established (first packet received in RTR).
    CommEst = 4,
    /// Send queue drained.
    SqDrained = 5,
    /// SRQ limit reached.
    SrqLimitReached = 15,
    /// Last WQE reached on a QP attached to an SRQ.
    QpLastWqeReached = 16,
}
