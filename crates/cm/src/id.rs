//! Per-id state.

use crate::types::{ConnParam, PortSpace};
use softrdma_transport::{Instant, QpType, Qpn};
use std::net::{IpAddr, SocketAddr};

/// Connection state of an id (IBTA 12.9 CM states, as rdma_cm sees them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    /// Fresh, or bound to an address.
    Idle,
    /// Address (and possibly route) resolved.
    Resolved,
    /// Listening for requests.
    Listening,
    /// Active: REQ sent, waiting for REP.
    ReqSent,
    /// Active: REP received, no QP attached: the application calls establish.
    RepRcvd,
    /// Passive: REQ received, waiting for the application.
    ReqRcvd,
    /// Passive: REP sent, waiting for RTU.
    RepSent,
    /// Connected.
    Established,
    /// DREQ sent, waiting for DREP.
    DreqSent,
    /// Disconnected; waiting out stray packets.
    TimeWait,
    /// UD: SIDR_REQ sent.
    SidrReqSent,
    /// UD: SIDR_REQ received, waiting for the application.
    SidrReqRcvd,
    /// Ended (rejected, unreachable, error): only destroy remains.
    Closed,
}

/// The connection an id is part of.
#[derive(Debug, Clone)]
pub(crate) struct Conn {
    pub(crate) local_comm_id: u32,
    pub(crate) remote_comm_id: u32,
    /// Transaction id of the exchange (the REQ's, echoed in REP/RTU/REJ).
    pub(crate) tid: u64,
    /// Transaction id of an outstanding DREQ.
    pub(crate) dreq_tid: u64,
    pub(crate) peer_ip: IpAddr,
    pub(crate) remote_qpn: Qpn,
    /// The starting PSN the peer's REQ/REP carried: the PSN *we* send from
    /// (Linux ib_cm's reading, which rxe follows; see docs/INTEROP.md).
    pub(crate) remote_psn: u32,
    /// The starting PSN our REQ/REP carries: the PSN the peer sends from.
    pub(crate) local_psn: u32,
    /// The peer's parameters (from its REQ or REP).
    pub(crate) peer: ConnParam,
    /// Path MTU enum negotiated.
    pub(crate) mtu: u8,
    /// Last MAD sent and when to resend it.
    pub(crate) last_mad: Option<[u8; 256]>,
    pub(crate) deadline: Option<Instant>,
    pub(crate) retries_left: u8,
    pub(crate) backoff_ns: u64,
    /// Disconnected was already reported.
    pub(crate) disconnected: bool,
}

impl Conn {
    pub(crate) fn new(peer_ip: IpAddr) -> Conn {
        Conn {
            local_comm_id: 0,
            remote_comm_id: 0,
            tid: 0,
            dreq_tid: 0,
            peer_ip,
            remote_qpn: 0,
            remote_psn: 0,
            local_psn: 0,
            peer: ConnParam::default(),
            mtu: 3,
            last_mad: None,
            deadline: None,
            retries_left: 0,
            backoff_ns: 0,
            disconnected: false,
        }
    }
}

/// One CM id.
#[derive(Debug, Clone)]
pub(crate) struct Id {
    pub(crate) ps: PortSpace,
    pub(crate) qp_type: QpType,
    pub(crate) qpn: Option<Qpn>,
    pub(crate) local: Option<SocketAddr>,
    pub(crate) remote: Option<SocketAddr>,
    /// Holds a port reservation in `local`.
    pub(crate) bound: bool,
    pub(crate) state: State,
    pub(crate) conn: Option<Conn>,
    /// For children: the listener.
    pub(crate) listener: Option<crate::IdHandle>,
    /// Our own parameters given at connect/accept.
    pub(crate) mine: ConnParam,
    /// `RDMA_OPTION_ID_ACK_TIMEOUT`: the QP's local ACK timeout instead of
    /// the CM's default.
    pub(crate) ack_timeout: Option<u8>,
}

impl Id {
    pub(crate) fn new(ps: PortSpace, qp_type: QpType) -> Id {
        Id {
            ps,
            qp_type,
            qpn: None,
            local: None,
            remote: None,
            bound: false,
            state: State::Idle,
            conn: None,
            listener: None,
            mine: ConnParam::default(),
            ack_timeout: None,
        }
    }
}
