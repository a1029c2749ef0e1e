//! Public types: ids, port spaces, connection parameters, events, errors.

use softrdma_transport::{AddressVector, Mtu, QpType, Qpn};
use std::net::SocketAddr;

/// A CM identifier (`struct rdma_cm_id`), as a handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdHandle(pub u32);

/// rdma_cm port spaces (`enum rdma_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// IPoIB (0x0002).
    Ipoib,
    /// Reliable connections (0x0106).
    Tcp,
    /// Unreliable datagrams via SIDR (0x0111).
    Udp,
    /// Native IB (0x013F).
    Ib,
}

impl PortSpace {
    /// The rdma_cm value.
    pub const fn value(self) -> u16 {
        match self {
            PortSpace::Ipoib => 0x0002,
            PortSpace::Tcp => 0x0106,
            PortSpace::Udp => 0x0111,
            PortSpace::Ib => 0x013F,
        }
    }
    /// From the rdma_cm value.
    pub const fn from_value(v: u16) -> Option<PortSpace> {
        match v {
            0x0002 => Some(PortSpace::Ipoib),
            0x0106 => Some(PortSpace::Tcp),
            0x0111 => Some(PortSpace::Udp),
            0x013F => Some(PortSpace::Ib),
            _ => None,
        }
    }
    /// Whether connections in this space use SIDR (UD) rather than REQ/REP.
    pub const fn is_ud(self) -> bool {
        matches!(self, PortSpace::Udp | PortSpace::Ipoib)
    }
}

/// `struct rdma_conn_param`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConnParam {
    /// Private data (truncated to what the message carries).
    pub private_data: Vec<u8>,
    /// READ/atomic requests the sender of this parameter accepts.
    pub responder_resources: u8,
    /// READ/atomic requests the sender issues.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: bool,
    /// Transport retries (0..=7).
    pub retry_count: u8,
    /// RNR retries (0..=7).
    pub rnr_retry_count: u8,
    /// The sender uses an SRQ.
    pub srq: bool,
    /// QP number (for ids without an attached QP).
    pub qp_num: Qpn,
}

/// UD parameters (`struct rdma_ud_param`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UdParam {
    /// Private data.
    pub private_data: Vec<u8>,
    /// Address of the peer (or group).
    pub ah_attr: AddressVector,
    /// Remote QP (0xFFFFFF for multicast).
    pub qp_num: Qpn,
    /// Q_Key.
    pub qkey: u32,
}

/// `enum rdma_cm_event_type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum EventKind {
    /// Address resolved.
    AddrResolved = 0,
    /// Address resolution failed.
    AddrError = 1,
    /// Route resolved.
    RouteResolved = 2,
    /// Route resolution failed.
    RouteError = 3,
    /// A connection request for a listener.
    ConnectRequest = 4,
    /// A reply, for an id without a QP (the application calls establish).
    ConnectResponse = 5,
    /// Connection setup failed.
    ConnectError = 6,
    /// The peer did not answer.
    Unreachable = 7,
    /// The peer rejected the connection.
    Rejected = 8,
    /// The connection is up.
    Established = 9,
    /// The connection went down.
    Disconnected = 10,
    /// The device went away.
    DeviceRemoval = 11,
    /// A multicast join completed.
    MulticastJoin = 12,
    /// A multicast join failed.
    MulticastError = 13,
    /// The local address changed.
    AddrChange = 14,
    /// Time-wait ended.
    TimewaitExit = 15,
}

/// Event parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventParam {
    /// None.
    None,
    /// Connection parameters (requests, replies, rejects with private data).
    Conn(ConnParam),
    /// UD parameters.
    Ud(UdParam),
}

/// A CM event (`struct rdma_cm_event`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// The id the event is for (a new child id for connection requests).
    pub id: IdHandle,
    /// The listener, for connection requests.
    pub listen_id: Option<IdHandle>,
    /// What happened.
    pub kind: EventKind,
    /// Status: 0, a negative errno, or the REJ reason for `Rejected`.
    pub status: i32,
    /// Parameters.
    pub param: EventParam,
}

/// Why a CM call failed; each maps to the errno librdmacm sets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CmError {
    /// Bad argument or call in the wrong state (EINVAL).
    #[error("invalid: {0}")]
    Invalid(String),
    /// Address or port already in use (EADDRINUSE).
    #[error("address in use: {0}")]
    AddrInUse(SocketAddr),
    /// Address not owned by this device (EADDRNOTAVAIL).
    #[error("address not available on this device: {0}")]
    AddrNotAvail(std::net::IpAddr),
    /// No such id (EINVAL at the ABI).
    #[error("no such id")]
    NoId,
    /// The QP refused a transition.
    #[error("QP: {0}")]
    Qp(#[from] softrdma_transport::VerbsError),
}

impl CmError {
    /// The positive errno.
    pub fn errno(&self) -> i32 {
        match self {
            CmError::Invalid(_) | CmError::NoId => 22,
            CmError::AddrInUse(_) => 98,
            CmError::AddrNotAvail(_) => 99,
            CmError::Qp(e) => e.errno(),
        }
    }
}

/// What the CM needs to know about a QP to connect it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpInfo {
    /// Transport.
    pub qp_type: QpType,
    /// Uses an SRQ.
    pub srq: bool,
}

/// Parameters for moving a QP to RTR and RTS (what librdmacm passes to `ibv_modify_qp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectQp {
    /// Path to the peer.
    pub av: AddressVector,
    /// Path MTU.
    pub mtu: Mtu,
    /// Peer QP.
    pub remote_qpn: Qpn,
    /// First PSN the peer sends.
    pub rq_psn: u32,
    /// First PSN we send.
    pub sq_psn: u32,
    /// READ/atomic we accept.
    pub max_dest_rd_atomic: u8,
    /// READ/atomic we issue.
    pub max_rd_atomic: u8,
    /// Local ACK timeout exponent.
    pub timeout: u8,
    /// Transport retries.
    pub retry_cnt: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// RNR NAK timer code.
    pub min_rnr_timer: u8,
}

/// How the CM reaches QPs (the engine implements it over the endpoint).
pub trait QpOps {
    /// Facts about `qpn`, if it exists.
    fn qp_info(&mut self, qpn: Qpn) -> Option<QpInfo>;
    /// INIT → RTR → RTS with `p` (RC/UC). Errors leave the QP as it was.
    fn connect(&mut self, qpn: Qpn, p: &ConnectQp) -> Result<(), softrdma_transport::VerbsError>;
    /// Moves the QP to ERR (flushing its work requests).
    fn set_error(&mut self, qpn: Qpn);
}
