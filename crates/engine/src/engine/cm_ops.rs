//! The engine's command boundary for the connection manager: the typed
//! rdma_cm operations higher layers (the safe Rust API, the C ABI) call,
//! like the verbs ones in `ops.rs` (modelled on rdma-core's
//! `verbs_context_ops`).
//!
//! Each operation names an id by its handle and returns what the CM
//! returns; none hands out the [`Cm`](softrdma_cm::Cm) or the endpoint's
//! QPs. That keeps the engine free to change how it locks, where per-QP
//! state lives and how it progresses without touching its callers. Today
//! each one runs under the engine lock through the private `with_cm` (then
//! delivers the CM's events, sends its MADs and refreshes the host
//! device's steering).
//!
//! Creating and destroying ids, address resolution and event channels keep
//! their dedicated methods in `engine/mod.rs`.

use super::Engine;
use softrdma_cm::{CmError, ConnParam, ConnectQp, IdHandle, PortSpace};
use softrdma_transport::Qpn;
use std::net::{IpAddr, SocketAddr};

impl Engine {
    /// Binds an id to a local address (`rdma_bind_addr`); port 0 picks a
    /// free one. Returns the address bound.
    pub fn cm_bind(&self, id: IdHandle, addr: SocketAddr) -> Result<Option<SocketAddr>, CmError> {
        self.with_cm(|cm, _, _| cm.bind(id, addr).map(|()| cm.addrs_of(id).0))
    }

    /// Completes address resolution (`rdma_resolve_addr`) once the route to
    /// `dst` from `local` was found: queues ADDR_RESOLVED.
    pub fn cm_addr_resolved(
        &self,
        id: IdHandle,
        local: IpAddr,
        dst: SocketAddr,
    ) -> Result<(), CmError> {
        self.with_cm(|cm, _, _| cm.resolve_addr(id, local, dst))
    }

    /// Fails address resolution (`rdma_resolve_addr`) with `errno`: queues
    /// ADDR_ERROR.
    pub fn cm_addr_error(&self, id: IdHandle, errno: i32) -> Result<(), CmError> {
        self.with_cm(|cm, _, _| cm.addr_error(id, errno))
    }

    /// Resolves the route (`rdma_resolve_route`): queues ROUTE_RESOLVED.
    pub fn cm_resolve_route(&self, id: IdHandle) -> Result<(), CmError> {
        self.with_cm(|cm, _, _| cm.resolve_route(id))
    }

    /// Listens for connection requests (`rdma_listen`). Returns the address
    /// bound.
    pub fn cm_listen(&self, id: IdHandle) -> Result<Option<SocketAddr>, CmError> {
        self.with_cm(|cm, _, _| cm.listen(id).map(|()| cm.addrs_of(id).0))
    }

    /// Connects to the resolved peer (`rdma_connect`).
    pub fn cm_connect(&self, id: IdHandle, param: &ConnParam) -> Result<(), CmError> {
        self.with_cm(|cm, qps, now| cm.connect(now, id, param, qps))
    }

    /// Accepts the connection request an id was created for (`rdma_accept`).
    pub fn cm_accept(&self, id: IdHandle, param: &ConnParam) -> Result<(), CmError> {
        self.with_cm(|cm, qps, now| cm.accept(now, id, param, qps))
    }

    /// Rejects the connection request an id was created for (`rdma_reject`).
    pub fn cm_reject(&self, id: IdHandle, private_data: &[u8]) -> Result<(), CmError> {
        self.with_cm(|cm, _, _| cm.reject(id, private_data))
    }

    /// Sends the RTU of an active connection without a QP (`rdma_establish`).
    pub fn cm_establish(&self, id: IdHandle) -> Result<(), CmError> {
        self.with_cm(|cm, _, now| cm.establish(now, id))
    }

    /// Disconnects (`rdma_disconnect`): the QP goes to ERR, a DREQ goes out.
    pub fn cm_disconnect(&self, id: IdHandle) -> Result<(), CmError> {
        self.with_cm(|cm, qps, now| cm.disconnect(now, id, qps))
    }

    /// Attaches a QP to an id (`rdma_create_qp`), or detaches it with `None`
    /// (`rdma_destroy_qp`).
    pub fn cm_set_qp(&self, id: IdHandle, qpn: Option<Qpn>) -> Result<(), CmError> {
        self.with_cm(|cm, _, _| cm.set_qp(id, qpn))
    }

    /// The local ACK timeout the id's QP gets when connected
    /// (`RDMA_OPTION_ID_ACK_TIMEOUT`).
    pub fn cm_set_ack_timeout(&self, id: IdHandle, timeout: u8) -> Result<(), CmError> {
        self.with_cm(|cm, _, _| cm.set_ack_timeout(id, timeout))
    }

    /// Joins a multicast group (`rdma_join_multicast`).
    pub fn cm_join_multicast(&self, id: IdHandle, group: IpAddr) -> Result<(), CmError> {
        self.with_cm(|cm, _, _| cm.join_multicast(id, group))
    }

    /// An id's local and remote addresses (`rdma_get_local_addr`,
    /// `rdma_get_peer_addr`).
    pub fn cm_addrs(&self, id: IdHandle) -> (Option<SocketAddr>, Option<SocketAddr>) {
        self.with_cm(|cm, _, _| cm.addrs_of(id))
    }

    /// The local address an id resolves `dst` from (`rdma_resolve_addr`):
    /// the source it names, else the address it is bound to, else
    /// [`Engine::source_for`] (the address routing picks, as rdma_cm does).
    pub fn cm_resolve_source(&self, id: IdHandle, src: Option<IpAddr>, dst: IpAddr) -> IpAddr {
        [src, self.cm_addrs(id).0.map(|a| a.ip())]
            .into_iter()
            .flatten()
            .find(|ip| !ip.is_unspecified())
            .unwrap_or_else(|| self.source_for(dst))
    }

    /// An id's port space (`None`: no such id).
    pub fn cm_port_space(&self, id: IdHandle) -> Option<PortSpace> {
        self.with_cm(|cm, _, _| cm.port_space(id))
    }

    /// The connection parameters the peer sent (its REQ or REP), once known.
    pub fn cm_peer_param(&self, id: IdHandle) -> Option<ConnParam> {
        self.with_cm(|cm, _, _| cm.peer_param(id))
    }

    /// The QP parameters of an id's connection (`rdma_init_qp_attr` for RTR
    /// and RTS), once the peer's REQ or REP is known.
    pub fn cm_qp_params(&self, id: IdHandle) -> Option<ConnectQp> {
        self.with_cm(|cm, _, _| cm.qp_params(id))
    }
}
