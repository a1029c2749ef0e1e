//! Incoming MADs: the IB CM protocol's receive side.

use crate::cm::Cm;
use crate::id::{Conn, Id, State};
use crate::types::{ConnParam, EventKind, EventParam, IdHandle, PortSpace, QpOps, UdParam};
use softrdma_transport::{Instant, QpType, Qpn};
use softrdma_wire::cm::{
    CmMad, CmMessage, CmaHdr, Drep, Dreq, Rej, Rep, Req, Rtu, SidrRep, SidrReq, rej_reason,
    service_id_parts, sidr_status,
};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Bytes of the rdma_cm header at the start of REQ and SIDR_REQ private data.
const CMA_HDR_LEN: usize = 36;

impl Cm {
    /// Handles a MAD that arrived on QP1 from `src` to our address `dst`.
    /// Anything malformed or unexpected is ignored (the peer retransmits).
    pub fn handle_mad(
        &mut self,
        now: Instant,
        src: IpAddr,
        dst: IpAddr,
        mad: &[u8],
        qp: &mut dyn QpOps,
    ) {
        let Ok(m) = CmMad::parse(mad) else { return };
        let tid = m.hdr.tid;
        match m.msg {
            CmMessage::Req(r) => self.on_req(now, src, dst, tid, &r),
            CmMessage::Rep(r) => self.on_rep(now, &r, qp),
            CmMessage::Rtu(r) => self.on_rtu(&r),
            CmMessage::Rej(r) => self.on_rej(&r, qp),
            CmMessage::Dreq(r) => self.on_dreq(now, src, dst, tid, &r, qp),
            CmMessage::Drep(r) => self.on_drep(now, &r),
            CmMessage::Mra(r) => {
                // The peer needs time: push our retransmission back.
                if let Some(h) = self.by_comm(r.remote_comm_id)
                    && let Some(c) = self.ids_mut().get_mut(&h).and_then(|i| i.conn.as_mut())
                    && c.deadline.is_some()
                {
                    let t = (4096u64 << u64::from(r.service_timeout.min(31))).max(c.backoff_ns);
                    c.deadline = Some(now + Duration::from_nanos(t));
                }
            }
            CmMessage::SidrReq(r) => self.on_sidr_req(src, dst, tid, &r),
            CmMessage::SidrRep(r) => self.on_sidr_rep(&r),
            _ => {}
        }
    }

    /// The listener for `(ps, port)` that accepts requests sent to `dst`.
    fn listener(&self, ps: PortSpace, port: u16, dst: IpAddr) -> Option<IdHandle> {
        let users = self.ports().get(&(ps, port))?;
        users.iter().copied().find(|h| {
            self.ids_ref(*h).is_some_and(|i| {
                i.state == State::Listening
                    && i.local
                        .is_some_and(|a| a.ip().is_unspecified() || a.ip() == dst)
            })
        })
    }

    /// Whether a request no listener took is for a port bound on this host
    /// (see [`Cm::bound_without_listener`]): then it is dropped, not refused.
    fn awaits_listener(&mut self, dst: IpAddr, service_id: u64, private_data: &[u8]) -> bool {
        request_target(dst, service_id, private_data)
            .is_some_and(|(ps, port, target, _)| self.bound_without_listener(ps, port, target))
    }

    /// An existing child for a retransmitted request from `peer`.
    fn find_child(&self, peer: IpAddr, remote_comm: u32) -> Option<IdHandle> {
        self.ids_iter().find_map(|(h, i)| {
            let c = i.conn.as_ref()?;
            (i.listener.is_some() && c.peer_ip == peer && c.remote_comm_id == remote_comm)
                .then_some(h)
        })
    }

    /// The child id, in `state`, for a REQ or SIDR_REQ from `src` to `dst`;
    /// `None` when no listener takes its Service ID at the address its
    /// rdma_cm header names (the caller rejects it).
    fn child_for(
        &self,
        src: IpAddr,
        dst: IpAddr,
        service_id: u64,
        private_data: &[u8],
        default_qp_type: QpType,
        state: State,
    ) -> Option<Id> {
        let (ps, port, target, hdr) = request_target(dst, service_id, private_data)?;
        let l = self.listener(ps, port, target)?;
        let qp_type = self.ids_ref(l).map_or(default_qp_type, |i| i.qp_type);
        let mut child = Id::new(ps, qp_type);
        child.local = Some(SocketAddr::new(target, port));
        child.remote = Some(match &hdr {
            Some(h) => SocketAddr::new(h.src, h.src_port),
            None => SocketAddr::new(src, 0),
        });
        child.listener = Some(l);
        child.state = state;
        Some(child)
    }

    fn on_req(&mut self, now: Instant, src: IpAddr, dst: IpAddr, tid: u64, r: &Req) {
        if let Some(h) = self.find_child(src, r.local_comm_id) {
            // A retransmitted REQ: our REP was lost; send it again.
            let mad = self.ids_ref(h).and_then(|i| {
                (i.state == State::RepSent)
                    .then(|| i.conn.as_ref().and_then(|c| c.last_mad))
                    .flatten()
            });
            if let Some(m) = mad {
                self.resend(h, m);
            }
            return;
        }
        let data = r.private_data.as_bytes();
        let Some(mut child) =
            self.child_for(src, dst, r.service_id, data, QpType::Rc, State::ReqRcvd)
        else {
            if self.awaits_listener(dst, r.service_id, data) {
                return;
            }
            let rej = Rej {
                local_comm_id: 0,
                remote_comm_id: r.local_comm_id,
                message_rejected: 0,
                reason: rej_reason::INVALID_SERVICE_ID,
                ..Default::default()
            };
            self.send_once(dst, src, CmMad::new(tid, rej));
            return;
        };
        let mut c = Conn::new(src);
        c.remote_comm_id = r.local_comm_id;
        c.tid = tid;
        c.remote_qpn = r.local_qpn;
        c.remote_psn = r.starting_psn.get();
        c.mtu = r.path_mtu.clamp(1, self.cfg().mtu.as_u32() as u8);
        c.peer = ConnParam {
            private_data: r.private_data.as_bytes()[CMA_HDR_LEN..].to_vec(),
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            flow_control: r.end_to_end_flow_control,
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
        };
        let peer = c.peer.clone();
        child.conn = Some(c);
        let h = self.new_id(child);
        self.event(h, EventKind::ConnectRequest, 0, EventParam::Conn(peer));
        let _ = now;
    }

    fn on_rep(&mut self, now: Instant, r: &Rep, qp: &mut dyn QpOps) {
        let Some(h) = self.by_comm(r.remote_comm_id) else {
            return;
        };
        let Some(id) = self.ids_ref(h).cloned() else {
            return;
        };
        match id.state {
            State::ReqSent => {}
            State::Established => {
                // Our RTU was lost: the passive side resends its REP.
                if let Some(c) = &id.conn {
                    let rtu = Rtu {
                        local_comm_id: c.local_comm_id,
                        remote_comm_id: c.remote_comm_id,
                        ..Default::default()
                    };
                    let src = id.local.map_or(c.peer_ip, |a| a.ip());
                    self.send_once(src, c.peer_ip, CmMad::new(c.tid, rtu));
                }
                return;
            }
            _ => return,
        }
        let mut c = id.conn.clone().expect("ReqSent has a conn");
        // The REQ is answered: this copy replaces the stored one, so settle it here.
        c.last_mad = None;
        c.deadline = None;
        c.remote_comm_id = r.local_comm_id;
        c.remote_qpn = r.local_qpn;
        c.remote_psn = r.starting_psn.get();
        c.peer = ConnParam {
            private_data: r.private_data.as_bytes().to_vec(),
            responder_resources: r.responder_resources,
            initiator_depth: r.initiator_depth,
            flow_control: r.end_to_end_flow_control,
            retry_count: id.mine.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            srq: r.srq,
            qp_num: r.local_qpn,
        };
        let peer = c.peer.clone();
        let local_ip = id.local.map_or(c.peer_ip, |a| a.ip());
        let Some(qpn) = id.qpn else {
            if let Some(i) = self.ids_mut().get_mut(&h) {
                i.conn = Some(c);
                i.state = State::RepRcvd;
            }
            self.event(h, EventKind::ConnectResponse, 0, EventParam::Conn(peer));
            return;
        };
        let mut cq = self.connect_qp(
            local_ip,
            &c,
            id.mine.responder_resources,
            id.mine.initiator_depth.min(r.responder_resources),
            id.mine.retry_count.min(7),
            r.rnr_retry_count,
        );
        cq.timeout = id.ack_timeout.unwrap_or(cq.timeout);
        if qp.connect(qpn, &cq).is_err() {
            let rej = Rej {
                local_comm_id: c.local_comm_id,
                remote_comm_id: c.remote_comm_id,
                message_rejected: 1,
                reason: rej_reason::NO_QP,
                ..Default::default()
            };
            let tid = c.tid;
            let peer_ip = c.peer_ip;
            if let Some(i) = self.ids_mut().get_mut(&h) {
                i.conn = Some(c);
                i.state = State::Closed;
            }
            self.send_once(local_ip, peer_ip, CmMad::new(tid, rej));
            self.event(h, EventKind::ConnectError, -22, EventParam::None);
            return;
        }
        let rtu = Rtu {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            ..Default::default()
        };
        let (tid, peer_ip) = (c.tid, c.peer_ip);
        if let Some(i) = self.ids_mut().get_mut(&h) {
            i.conn = Some(c);
            i.state = State::Established;
        }
        self.send_once(local_ip, peer_ip, CmMad::new(tid, rtu));
        self.event(h, EventKind::Established, 0, EventParam::Conn(peer));
        let _ = now;
    }

    fn on_rtu(&mut self, r: &Rtu) {
        let Some(h) = self.by_comm(r.remote_comm_id) else {
            return;
        };
        if self.ids_ref(h).map(|i| i.state) != Some(State::RepSent) {
            return;
        }
        self.stop_retransmit(h);
        if let Some(i) = self.ids_mut().get_mut(&h) {
            i.state = State::Established;
        }
        let p = self
            .ids_ref(h)
            .and_then(|i| i.conn.as_ref())
            .map(|c| c.peer.clone())
            .unwrap_or_default();
        self.event(h, EventKind::Established, 0, EventParam::Conn(p));
    }

    fn on_rej(&mut self, r: &Rej, qp: &mut dyn QpOps) {
        let Some(h) = self.by_comm(r.remote_comm_id) else {
            return;
        };
        let Some(id) = self.ids_ref(h).cloned() else {
            return;
        };
        if !matches!(id.state, State::ReqSent | State::RepSent | State::RepRcvd) {
            return;
        }
        self.stop_retransmit(h);
        if let Some(q) = id.qpn.filter(|_| id.state != State::ReqSent) {
            qp.set_error(q);
        }
        if let Some(i) = self.ids_mut().get_mut(&h) {
            i.state = State::Closed;
        }
        let p = ConnParam {
            private_data: r.private_data.as_bytes().to_vec(),
            ..Default::default()
        };
        self.event(
            h,
            EventKind::Rejected,
            i32::from(r.reason),
            EventParam::Conn(p),
        );
    }

    /// The QP of the connection a DREQ MAD (`mad`, as [`Cm::handle_mad`]
    /// takes it) would disconnect: `Some(None)` for a known connection
    /// whose id has no QP, `None` for anything else.
    pub fn dreq_qpn(&self, mad: &[u8]) -> Option<Option<Qpn>> {
        let Ok(CmMad {
            msg: CmMessage::Dreq(r),
            ..
        }) = CmMad::parse(mad)
        else {
            return None;
        };
        let h = self.dreq_target(&r)?;
        Some(self.ids_ref(h)?.qpn)
    }

    /// The id a DREQ is for: ours by its remote comm id, connected to its
    /// sender's local one.
    fn dreq_target(&self, r: &Dreq) -> Option<IdHandle> {
        self.by_comm(r.remote_comm_id).filter(|h| {
            self.ids_ref(*h)
                .and_then(|i| i.conn.as_ref())
                .is_some_and(|c| c.remote_comm_id == r.local_comm_id)
        })
    }

    fn on_dreq(
        &mut self,
        now: Instant,
        src: IpAddr,
        dst: IpAddr,
        tid: u64,
        r: &Dreq,
        qp: &mut dyn QpOps,
    ) {
        let found = self.dreq_target(r);
        // IBTA 12.9.8.4: answer every DREQ, known or not.
        let drep = Drep {
            local_comm_id: r.remote_comm_id,
            remote_comm_id: r.local_comm_id,
            ..Default::default()
        };
        self.send_once(dst, src, CmMad::new(tid, drep));
        let Some(h) = found else { return };
        let Some(id) = self.ids_ref(h).cloned() else {
            return;
        };
        if let Some(q) = id.qpn {
            qp.set_error(q);
        }
        if matches!(
            id.state,
            State::Established | State::RepSent | State::RepRcvd | State::DreqSent
        ) {
            self.enter_timewait(now, h);
            self.report_disconnected(h);
        }
    }

    fn on_drep(&mut self, now: Instant, r: &Drep) {
        let Some(h) = self.by_comm(r.remote_comm_id) else {
            return;
        };
        if self.ids_ref(h).map(|i| i.state) != Some(State::DreqSent) {
            return;
        }
        self.enter_timewait(now, h);
        self.report_disconnected(h);
    }

    fn on_sidr_req(&mut self, src: IpAddr, dst: IpAddr, tid: u64, r: &SidrReq) {
        if let Some(h) = self.find_child(src, r.request_id) {
            // Retransmitted: resend our answer if we gave one.
            if let Some(m) = self
                .ids_ref(h)
                .and_then(|i| i.conn.as_ref())
                .and_then(|c| c.last_mad)
            {
                self.resend(h, m);
            }
            return;
        }
        let data = r.private_data.as_bytes();
        let Some(mut child) =
            self.child_for(src, dst, r.service_id, data, QpType::Ud, State::SidrReqRcvd)
        else {
            if self.awaits_listener(dst, r.service_id, data) {
                return;
            }
            let rep = SidrRep {
                request_id: r.request_id,
                status: sidr_status::UNSUPPORTED,
                service_id: r.service_id,
                ..Default::default()
            };
            self.send_once(dst, src, CmMad::new(tid, rep));
            return;
        };
        // The address the request was for (its rdma_cm header's).
        let target = child.local.map_or(dst, |a| a.ip());
        let mut c = Conn::new(src);
        c.remote_comm_id = r.request_id;
        c.tid = tid;
        child.conn = Some(c);
        let pd = r.private_data.as_bytes()[CMA_HDR_LEN..].to_vec();
        let h = self.new_id(child);
        let av = self.path(target, src);
        self.event(
            h,
            EventKind::ConnectRequest,
            0,
            EventParam::Ud(UdParam {
                private_data: pd,
                ah_attr: av,
                qp_num: 0,
                qkey: 0,
            }),
        );
    }

    fn on_sidr_rep(&mut self, r: &SidrRep) {
        let Some(h) = self.by_comm(r.request_id) else {
            return;
        };
        let Some(id) = self.ids_ref(h).cloned() else {
            return;
        };
        if id.state != State::SidrReqSent {
            return;
        }
        self.stop_retransmit(h);
        let peer = id
            .conn
            .as_ref()
            .map_or(IpAddr::from([0, 0, 0, 0]), |c| c.peer_ip);
        let local = id.local.map_or(peer, |a| a.ip());
        let (state, kind, status, param) = match r.status {
            sidr_status::OK => (
                State::Established,
                EventKind::Established,
                0,
                EventParam::Ud(UdParam {
                    private_data: r.private_data.as_bytes().to_vec(),
                    ah_attr: self.path(local, peer),
                    qp_num: r.qpn,
                    qkey: r.qkey,
                }),
            ),
            sidr_status::REJECT => (
                State::Closed,
                EventKind::Rejected,
                i32::from(r.status),
                EventParam::Conn(ConnParam {
                    private_data: r.private_data.as_bytes().to_vec(),
                    ..Default::default()
                }),
            ),
            _ => (State::Closed, EventKind::Unreachable, -22, EventParam::None),
        };
        if let Some(i) = self.ids_mut().get_mut(&h) {
            i.state = state;
        }
        self.event(h, kind, status, param);
    }

    fn resend(&mut self, h: IdHandle, m: [u8; 256]) {
        let Some(i) = self.ids_ref(h) else { return };
        let Some(c) = &i.conn else { return };
        let src = i.local.map_or(c.peer_ip, |a| a.ip());
        let dst = c.peer_ip;
        self.push_raw(src, dst, m);
    }
}

/// The port space, port and address a REQ or SIDR_REQ sent to `dst` is for:
/// its Service ID's, and the destination its rdma_cm header names; and the
/// header (parsed once, for the child's remote address too).
fn request_target(
    dst: IpAddr,
    service_id: u64,
    private_data: &[u8],
) -> Option<(PortSpace, u16, IpAddr, Option<CmaHdr>)> {
    let hdr = CmaHdr::parse(private_data).ok();
    let target = hdr.as_ref().map_or(dst, |h| h.dst);
    let (ps, port) = service_id_parts(service_id)
        .and_then(|(ps, port)| PortSpace::from_value(ps).map(|p| (p, port)))?;
    Some((ps, port, target, hdr))
}
