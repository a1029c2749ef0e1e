//! Connection management: the Rust face of `librdmacm`.
//!
//! RDMA connections are set up by the IB connection manager (CM MADs on QP1,
//! with `rdma_cm`'s conventions: IP addresses and ports name services). This
//! module offers three levels:
//!
//! - [`Connector`] / [`Acceptor`] → [`Connection`]: a connected RC QP with its
//!   CQ and PD in one call each, blocking or (feature `tokio`) async.
//! - [`CmId`] and [`EventChannel`]: every `rdma_cm` verb (`bind_addr`,
//!   `resolve_addr`, `resolve_route`, `listen`, `connect`, `accept`, `reject`,
//!   `disconnect`, `establish`, `init_qp_attr`, `set_option`, `migrate`,
//!   multicast, QP creation on an id) with events read from a channel, a real
//!   file descriptor that can be waited on blocking, non-blocking, with a
//!   timeout or asynchronously.
//! - Synchronous ids ([`CmId::new_sync`], librdmacm's ids without a channel):
//!   each verb waits for its own result, as do the endpoint helpers
//!   [`getaddrinfo`], [`CmId::create_ep`] and [`CmId::get_request`].
//!
//! ```no_run
//! use softrdma::cm::{Acceptor, Connector};
//! use softrdma::verbs::{Access, RecvWr, SendFlags, SendWr, WrOpcode};
//! use std::time::Duration;
//!
//! // Server: accept one connection and receive one message.
//! fn server() -> softrdma::cm::Result<Vec<u8>> {
//!     let acceptor = Acceptor::bind("0.0.0.0:7471".parse().unwrap())?;
//!     let req = acceptor.incoming()?; // a connection request
//!     println!("{:?} sent {:?}", req.peer_addr(), &req.private_data()[..5]);
//!     let conn = req.accept(b"welcome")?; // QP in RTS, connection established
//!     let mr = conn.pd().alloc_mr(64, Access::LOCAL_WRITE)?;
//!     conn.qp().post_recv(RecvWr { wr_id: 1, sgl: [mr.sge(0, 64)?].into() })?;
//!     let wc = conn.cq().poll_blocking(1, Duration::from_secs(5))?;
//!     Ok(mr.to_vec(0, wc[0].byte_len as usize)?)
//! }
//!
//! // Client: connect, send, disconnect.
//! fn client() -> softrdma::cm::Result<()> {
//!     let conn = Connector::new().connect("127.0.0.1:7471".parse().unwrap(), b"hello")?;
//!     assert_eq!(&conn.peer_private_data()[..7], b"welcome");
//!     let mr = conn.pd().register(b"ping!", Access::LOCAL_WRITE)?;
//!     let mut s = SendWr::new(7, WrOpcode::Send);
//!     s.flags = SendFlags::SIGNALED;
//!     s.sgl = [mr.sge(0, 5)?].into();
//!     conn.qp().post_send(s)?;
//!     conn.cq().poll_blocking(1, Duration::from_secs(5))?;
//!     conn.disconnect() // both sides see the disconnection
//! }
//! # let _ = (server, client);
//! ```
//!
//! A lower-level exchange, with an event channel:
//!
//! ```no_run
//! use softrdma::cm::{conn_param, CmId, EventChannel, EventKind, PortSpace, QpOptions};
//! use softrdma::verbs::{Context, QpType};
//! use std::time::Duration;
//! # fn main() -> softrdma::cm::Result<()> {
//! let ctx = Context::open()?;
//! let ch = EventChannel::new(&ctx)?;
//! let id = CmId::new(&ch, PortSpace::Tcp, QpType::Rc)?;
//! id.resolve_addr(None, "127.0.0.2:7471".parse().unwrap(), Duration::from_secs(2))?;
//! assert_eq!(ch.get_event()?.kind(), EventKind::AddrResolved);
//! id.resolve_route(Duration::from_secs(2))?;
//! assert_eq!(ch.get_event()?.kind(), EventKind::RouteResolved);
//! id.create_qp(None, &QpOptions::default())?; // default PD, CQs and completion channel
//! id.connect(&conn_param(b"hi"))?;
//! let ev = ch.get_event()?;
//! match ev.kind() {
//!     EventKind::Established => println!("peer said {:?}", ev.private_data()),
//!     _ => return Err(ev.error().unwrap()),
//! }
//! # Ok(()) }
//! ```
//!
//! Private data arrives as the whole fixed-size field of the CM message (56
//! bytes in a REQ, 196 in a REP, 148 in a REJ, ...), padded with zeros: send a
//! length with it if the receiver needs one.
//!
//! Differences from librdmacm: ids are owned values (dropping one destroys
//! it, rejecting a request nobody accepted); the QP, PD and CQs an id creates
//! live in the id; address resolution checks the route and that some device
//! answers on the RoCE port (like ARP) within the given timeout.

mod addr;
mod channel;
mod conn;
mod error;
mod id;

pub use addr::{AddrFamily, AddrInfo, AddrInfoHints, getaddrinfo};
pub use channel::{CmEvent, EventChannel};
pub use conn::{Acceptor, ConnOptions, Connection, Connector, Incoming};
pub use error::{Error, Result};
pub use id::{CmId, CmOption, CmOptions, QpOptions};
pub use softrdma_engine::cm_proto::{
    CmError, ConnParam, EventKind, EventParam, IdHandle, PortSpace, RDMA_UDP_QKEY, UdParam,
};

/// Connection parameters with librdmacm's defaults for a NULL
/// `rdma_conn_param`: the device's READ/atomic depth both ways, 7 transport
/// and 7 RNR retries (RNR: retry forever), no end-to-end flow control, and
/// `private_data`.
///
/// `responder_resources`/`initiator_depth` of [`u8::MAX`] mean "the device
/// maximum" (librdmacm's `RDMA_MAX_RESP_RES`); larger than the device
/// allows is clamped to it.
pub fn conn_param(private_data: &[u8]) -> ConnParam {
    ConnParam {
        private_data: private_data.to_vec(),
        responder_resources: u8::MAX,
        initiator_depth: u8::MAX,
        // What librdmacm leaves in a zeroed conn_param (and rxe's REP says).
        flow_control: false,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: false,
        qp_num: 0,
    }
}

/// The port space an rdma_cm QP type uses by default (RC/UC: TCP, UD: UDP).
pub fn port_space_for(qp_type: softrdma_transport::QpType) -> PortSpace {
    match qp_type {
        softrdma_transport::QpType::Ud => PortSpace::Udp,
        _ => PortSpace::Tcp,
    }
}

/// The QP type ids of a port space get by default (TCP/IB: RC, UDP/IPoIB: UD).
pub fn qp_type_for(ps: PortSpace) -> softrdma_transport::QpType {
    if ps.is_ud() {
        softrdma_transport::QpType::Ud
    } else {
        softrdma_transport::QpType::Rc
    }
}
