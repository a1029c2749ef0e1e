//! The connection manager: rdma_cm ids, ports and listeners, and the IB CM
//! protocol (IBTA vol. 1 ch. 12) they speak over QP1.

use crate::id::{Conn, Id, State};
use crate::types::{
    CmError, ConnParam, ConnectQp, Event, EventKind, EventParam, IdHandle, PortSpace, QpOps,
    UdParam,
};
use softrdma_transport::{AddressVector, Instant, Mtu, QpType, Qpn, Rng};
use softrdma_wire::cm::{CmMad, CmaHdr, service_id};
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// Q_Key rdma_cm uses for UD (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;
/// First MAD retransmission timeout.
pub(crate) const MAD_RTO_NS: u64 = 250_000_000;
/// Longest MAD retransmission timeout (the RTO doubles up to this).
pub(crate) const MAD_RTO_MAX_NS: u64 = 2_000_000_000;
/// MAD retransmissions before giving up.
pub(crate) const MAD_RETRIES: u8 = 6;
/// How long a disconnected id stays in time-wait.
pub(crate) const TIMEWAIT_NS: u64 = 100_000_000;
/// QP local ACK timeout softrdma's CM asks for: 4.096 µs × 2^14 ≈ 67 ms, so a
/// dead peer surfaces within about half a second of retries.
pub const LOCAL_ACK_TIMEOUT: u8 = 14;
/// RNR NAK timer code for CM-connected QPs (12 = 0.64 ms, as librdmacm's default).
pub const MIN_RNR_TIMER: u8 = 12;

/// Static facts the CM needs about its device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmConfig {
    /// The device's addresses (GID table).
    pub addrs: Vec<IpAddr>,
    /// Node GUID.
    pub node_guid: u64,
    /// Path MTU to use for connections.
    pub mtu: Mtu,
    /// Seed for comm ids, PSNs and ephemeral ports.
    pub seed: u64,
    /// The host-device member slot (1..=255) carried in the top byte of this
    /// CM's comm IDs, SIDR request IDs and MAD TIDs, so answers to them are
    /// steered to this process (`softrdma_udp::steer`); 0: none.
    pub member_slot: u8,
}

/// Who owns rdma_cm ports beyond this CM: the host's other processes
/// (`softrdma_host::Registry`). Ports are host-wide like TCP ports, so a bind
/// checks with it and a listener tells it, which steers REQs for its service
/// ID to this process.
pub trait PortAuthority: std::fmt::Debug + Send {
    /// Takes `addr` (port 0: a free ephemeral port) in port space `ps` for
    /// `id`; returns the port, or `AddrInUse`.
    fn reserve(&mut self, id: IdHandle, ps: u16, addr: SocketAddr) -> Result<u16, CmError>;
    /// `id` listens on the port it reserved.
    fn listen(&mut self, id: IdHandle) -> Result<(), CmError>;
    /// `id` gave its port back.
    fn release(&mut self, id: IdHandle);
    /// Whether some process of the host holds `port` of port space `ps` at
    /// `addr` (bound, listening or not yet). See `Cm::bound_without_listener`.
    fn bound_on_host(&self, ps: u16, port: u16, addr: IpAddr) -> bool {
        let _ = (ps, port, addr);
        false
    }
}

/// A MAD to send to QP1 of `dst`, from `src`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Source address (one of the device's).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// The 256-byte MAD.
    pub mad: [u8; 256],
}

/// The connection manager of one device.
#[derive(Debug)]
pub struct Cm {
    cfg: CmConfig,
    rng: Rng,
    tid_hi: u32,
    ids: HashMap<IdHandle, Id>,
    next_id: u32,
    /// Local comm id → id.
    by_comm: HashMap<u32, IdHandle>,
    /// (port space, port) → ids bound there.
    ports: HashMap<(PortSpace, u16), Vec<IdHandle>>,
    out: VecDeque<Outgoing>,
    events: VecDeque<Event>,
    authority: Option<Box<dyn PortAuthority>>,
    /// A REQ for a port another process of the host holds reached this one
    /// (see [`Cm::take_misrouted`]).
    misrouted: bool,
}

impl Cm {
    /// A connection manager for a device.
    pub fn new(cfg: CmConfig) -> Cm {
        let mut rng = Rng::new(cfg.seed ^ 0xC0FF_EE00_1234_5678);
        let tid_hi = with_slot(cfg.member_slot, rng.next_u32());
        Cm {
            cfg,
            rng,
            tid_hi,
            ids: HashMap::new(),
            next_id: 1,
            by_comm: HashMap::new(),
            ports: HashMap::new(),
            out: VecDeque::new(),
            events: VecDeque::new(),
            authority: None,
            misrouted: false,
        }
    }

    /// Makes ports host-wide: binds and listens check with `a` from now on.
    pub fn set_port_authority(&mut self, a: Box<dyn PortAuthority>) {
        self.authority = Some(a);
    }

    /// The device's addresses.
    pub fn addrs(&self) -> &[IpAddr] {
        &self.cfg.addrs
    }

    /// Adds an address to the device, at `index` of its GID table (the
    /// transport's: the CM's list mirrors it, positions included).
    pub fn add_addr(&mut self, ip: IpAddr, index: usize) {
        let addrs = &mut self.cfg.addrs;
        if addrs.len() <= index {
            addrs.resize(index + 1, std::net::Ipv6Addr::UNSPECIFIED.into());
        }
        addrs[index] = ip;
    }

    /// The device lost an address: its GID entry is empty (unspecified).
    pub fn remove_addr(&mut self, index: usize) {
        if let Some(a) = self.cfg.addrs.get_mut(index) {
            *a = std::net::Ipv6Addr::UNSPECIFIED.into();
        }
    }

    fn id(&self, h: IdHandle) -> Result<&Id, CmError> {
        self.ids.get(&h).ok_or(CmError::NoId)
    }

    fn id_mut(&mut self, h: IdHandle) -> Result<&mut Id, CmError> {
        self.ids.get_mut(&h).ok_or(CmError::NoId)
    }

    fn push_event(&mut self, id: IdHandle, kind: EventKind, status: i32, param: EventParam) {
        let listen_id = if kind == EventKind::ConnectRequest {
            self.ids.get(&id).and_then(|i| i.listener)
        } else {
            None
        };
        self.events.push_back(Event {
            id,
            listen_id,
            kind,
            status,
            param,
        });
    }

    // ---- ids and addresses ----

    /// Creates an id (`rdma_create_id`).
    pub fn create_id(&mut self, ps: PortSpace, qp_type: QpType) -> IdHandle {
        let h = IdHandle(self.next_id);
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.ids.insert(h, Id::new(ps, qp_type));
        h
    }

    /// Attaches a QP to an id (`rdma_create_qp`), or detaches it.
    pub fn set_qp(&mut self, h: IdHandle, qpn: Option<Qpn>) -> Result<(), CmError> {
        self.id_mut(h)?.qpn = qpn;
        Ok(())
    }

    /// Sets the local ACK timeout (exponent, 4.096 µs × 2^t) the id's QP
    /// gets when the CM connects it (`RDMA_OPTION_ID_ACK_TIMEOUT`).
    pub fn set_ack_timeout(&mut self, h: IdHandle, timeout: u8) -> Result<(), CmError> {
        self.id_mut(h)?.ack_timeout = Some(timeout.min(31));
        Ok(())
    }

    /// The QP attached to an id.
    pub fn qpn(&self, h: IdHandle) -> Option<Qpn> {
        self.ids.get(&h).and_then(|i| i.qpn)
    }

    /// Local and remote addresses of an id.
    pub fn addrs_of(&self, h: IdHandle) -> (Option<SocketAddr>, Option<SocketAddr>) {
        self.ids
            .get(&h)
            .map_or((None, None), |i| (i.local, i.remote))
    }

    /// The port space of an id.
    pub fn port_space(&self, h: IdHandle) -> Option<PortSpace> {
        self.ids.get(&h).map(|i| i.ps)
    }

    /// Destroys an id (`rdma_destroy_id`): a connection still up is torn
    /// down with a DREQ (best effort); its port is released.
    pub fn destroy_id(&mut self, now: Instant, h: IdHandle, qp: &mut dyn QpOps) {
        if let Some(id) = self.ids.get(&h) {
            if matches!(
                id.state,
                State::Established | State::RepSent | State::RepRcvd
            ) {
                let _ = self.disconnect(now, h, qp);
            } else if matches!(id.state, State::ReqRcvd | State::SidrReqRcvd) {
                // As the kernel's cm_destroy_id: a request nobody accepted is
                // rejected (else the peer retransmits it into a new request).
                let _ = self.reject(h, &[]);
            }
        }
        let Some(id) = self.ids.remove(&h) else {
            return;
        };
        if let Some(c) = &id.conn {
            self.by_comm.remove(&c.local_comm_id);
        }
        if id.bound
            && let Some(l) = id.local
        {
            self.release_port(id.ps, l.port(), h);
            if let Some(a) = &mut self.authority {
                a.release(h);
            }
        }
        self.events.retain(|e| e.id != h);
    }

    fn release_port(&mut self, ps: PortSpace, port: u16, h: IdHandle) {
        if let Some(v) = self.ports.get_mut(&(ps, port)) {
            v.retain(|x| *x != h);
            if v.is_empty() {
                self.ports.remove(&(ps, port));
            }
        }
    }

    fn is_local(&self, ip: IpAddr) -> bool {
        ip.is_unspecified() || self.cfg.addrs.contains(&ip)
    }

    /// Binds an id to a local address (`rdma_bind_addr`); port 0 picks one.
    pub fn bind(&mut self, h: IdHandle, addr: SocketAddr) -> Result<(), CmError> {
        let ps = self.id(h)?.ps;
        if self.id(h)?.bound {
            return Err(CmError::Invalid("id already bound".into()));
        }
        if !self.is_local(addr.ip()) {
            return Err(CmError::AddrNotAvail(addr.ip()));
        }
        let port = match &mut self.authority {
            // The host's registry picks ephemeral ports: they must be free
            // in every process.
            Some(a) => a.reserve(h, ps.value(), addr)?,
            None if addr.port() == 0 => self
                .ephemeral_port(ps, addr.ip())
                .ok_or_else(|| CmError::Invalid("no free port".into()))?,
            None => addr.port(),
        };
        // A port is taken unless both bindings name different specific addresses.
        if let Some(users) = self.ports.get(&(ps, port)) {
            for u in users {
                let other = self.ids.get(u).and_then(|i| i.local).map(|a| a.ip());
                if let Some(o) = other
                    && (o == addr.ip() || o.is_unspecified() || addr.ip().is_unspecified())
                {
                    if let Some(a) = &mut self.authority {
                        a.release(h);
                    }
                    return Err(CmError::AddrInUse(SocketAddr::new(addr.ip(), port)));
                }
            }
        }
        self.ports.entry((ps, port)).or_default().push(h);
        let id = self.id_mut(h)?;
        id.local = Some(SocketAddr::new(addr.ip(), port));
        id.bound = true;
        Ok(())
    }

    fn ephemeral_port(&mut self, ps: PortSpace, _ip: IpAddr) -> Option<u16> {
        for _ in 0..1000 {
            let p = 32768 + self.rng.below(28232) as u16;
            if !self.ports.contains_key(&(ps, p)) {
                return Some(p);
            }
        }
        None
    }

    /// Resolves the destination (`rdma_resolve_addr`). `src` is the local
    /// address the driver chose for reaching `dst` (its route lookup); an
    /// unbound id is bound to it with an ephemeral port. Queues ADDR_RESOLVED.
    pub fn resolve_addr(
        &mut self,
        h: IdHandle,
        src: IpAddr,
        dst: SocketAddr,
    ) -> Result<(), CmError> {
        if !self.id(h)?.bound {
            self.bind(h, SocketAddr::new(src, 0))?;
        } else if let Some(l) = self.id(h)?.local
            && l.ip().is_unspecified()
        {
            self.id_mut(h)?.local = Some(SocketAddr::new(src, l.port()));
        }
        let id = self.id_mut(h)?;
        id.remote = Some(dst);
        id.state = State::Resolved;
        self.push_event(h, EventKind::AddrResolved, 0, EventParam::None);
        Ok(())
    }

    /// Reports a failed address resolution (the driver found no route).
    pub fn addr_error(&mut self, h: IdHandle, errno: i32) -> Result<(), CmError> {
        self.id(h)?;
        self.push_event(h, EventKind::AddrError, -errno, EventParam::None);
        Ok(())
    }

    /// Resolves the route (`rdma_resolve_route`): RoCE needs nothing more.
    pub fn resolve_route(&mut self, h: IdHandle) -> Result<(), CmError> {
        let id = self.id(h)?;
        if id.remote.is_none() {
            return Err(CmError::Invalid("resolve_route before resolve_addr".into()));
        }
        self.push_event(h, EventKind::RouteResolved, 0, EventParam::None);
        Ok(())
    }

    /// Listens for requests (`rdma_listen`); an unbound id gets the wildcard
    /// address and an ephemeral port.
    pub fn listen(&mut self, h: IdHandle) -> Result<(), CmError> {
        if !self.id(h)?.bound {
            let any = match self.cfg.addrs.first() {
                Some(IpAddr::V6(_)) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
                _ => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            };
            self.bind(h, SocketAddr::new(any, 0))?;
        }
        if let Some(a) = &mut self.authority {
            a.listen(h)?;
        }
        self.id_mut(h)?.state = State::Listening;
        Ok(())
    }

    fn gid(ip: IpAddr) -> [u8; 16] {
        softrdma_wire::ip::to_v6(ip).octets()
    }

    fn new_comm_id(&mut self, h: IdHandle) -> u32 {
        loop {
            let c = with_slot(self.cfg.member_slot, self.rng.next_u32());
            if c != 0 && !self.by_comm.contains_key(&c) {
                self.by_comm.insert(c, h);
                return c;
            }
        }
    }

    fn psn(&mut self) -> u32 {
        self.rng.next_u32() & 0x00FF_FFFF
    }

    /// Queues a MAD; with `reliable`, it is resent until answered.
    fn send(&mut self, now: Instant, h: IdHandle, dst: IpAddr, mad: CmMad, reliable: bool) {
        let bytes = mad.to_bytes();
        let src = self
            .ids
            .get(&h)
            .and_then(|i| i.local)
            .map(|a| a.ip())
            .filter(|ip| !ip.is_unspecified())
            .or_else(|| self.cfg.addrs.first().copied())
            .unwrap_or(dst);
        self.out.push_back(Outgoing {
            src,
            dst,
            mad: bytes,
        });
        if reliable && let Some(c) = self.ids.get_mut(&h).and_then(|i| i.conn.as_mut()) {
            c.last_mad = Some(bytes);
            c.retries_left = MAD_RETRIES;
            c.backoff_ns = MAD_RTO_NS;
            c.deadline = Some(now + Duration::from_nanos(MAD_RTO_NS));
        }
    }

    /// Stops retransmitting on an id.
    fn settle(&mut self, h: IdHandle) {
        if let Some(c) = self.ids.get_mut(&h).and_then(|i| i.conn.as_mut()) {
            c.last_mad = None;
            c.deadline = None;
        }
    }

    /// Sends a MAD that answers one we received (no id, never retransmitted).
    fn reply(&mut self, src: IpAddr, dst: IpAddr, mad: CmMad) {
        self.out.push_back(Outgoing {
            src,
            dst,
            mad: mad.to_bytes(),
        });
    }

    fn path_av(&self, local: IpAddr, peer: IpAddr) -> AddressVector {
        let mut av = AddressVector::to_ip(peer);
        av.sgid_index = self.cfg.addrs.iter().position(|a| *a == local).unwrap_or(0) as u8;
        av
    }

    /// The QP attributes of connection `c` from our address `local`: path,
    /// MTU, remote QPN and both starting PSNs come from the REQ/REP exchange;
    /// the READ/atomic depths and retry counts, which the active and passive
    /// sides settle differently, are given.
    pub(crate) fn connect_qp(
        &self,
        local: IpAddr,
        c: &Conn,
        max_dest_rd_atomic: u8,
        max_rd_atomic: u8,
        retry_cnt: u8,
        rnr_retry: u8,
    ) -> ConnectQp {
        ConnectQp {
            av: self.path_av(local, c.peer_ip),
            mtu: Mtu::from_u32(u32::from(c.mtu)).unwrap_or(Mtu::M1024),
            remote_qpn: c.remote_qpn,
            // Linux ib_cm: each side sends from the PSN its peer advertised.
            rq_psn: c.local_psn,
            sq_psn: c.remote_psn,
            max_dest_rd_atomic,
            max_rd_atomic,
            timeout: LOCAL_ACK_TIMEOUT,
            retry_cnt,
            rnr_retry,
            min_rnr_timer: MIN_RNR_TIMER,
        }
    }

    // ---- active side ----

    /// Connects (`rdma_connect`): sends a REQ (RC/UC) or SIDR_REQ (UD).
    pub fn connect(
        &mut self,
        now: Instant,
        h: IdHandle,
        p: &ConnParam,
        qp: &mut dyn QpOps,
    ) -> Result<(), CmError> {
        let id = self.id(h)?;
        if id.state != State::Resolved {
            return Err(CmError::Invalid(format!("connect in state {:?}", id.state)));
        }
        let (Some(local), Some(remote)) = (id.local, id.remote) else {
            return Err(CmError::Invalid("connect before resolve".into()));
        };
        let ps = id.ps;
        let qpn = id.qpn.unwrap_or(p.qp_num);
        let hdr = CmaHdr::new(local.ip(), local.port(), remote.ip()).to_bytes();
        let mut pd = hdr.to_vec();
        pd.extend_from_slice(&p.private_data);
        let comm = self.new_comm_id(h);
        let tid = (u64::from(self.tid_hi) << 32) | u64::from(comm);
        let mut c = Conn::new(remote.ip());
        c.local_comm_id = comm;
        c.tid = tid;
        if ps.is_ud() {
            let mut r = softrdma_wire::cm::SidrReq {
                request_id: comm,
                pkey: 0xFFFF,
                service_id: service_id(ps.value(), remote.port()),
                ..Default::default()
            };
            r.private_data =
                pdata(&pd).ok_or_else(|| CmError::Invalid("private data too long".into()))?;
            let id = self.id_mut(h)?;
            id.mine = p.clone();
            id.conn = Some(c);
            id.state = State::SidrReqSent;
            self.send(now, h, remote.ip(), CmMad::new(tid, r), true);
            return Ok(());
        }
        let info = qp
            .qp_info(qpn)
            .ok_or_else(|| CmError::Invalid(format!("no QP {qpn:#x} for connect")))?;
        c.local_psn = self.psn();
        c.mtu = self.cfg.mtu.as_u32() as u8;
        let req = softrdma_wire::cm::Req {
            local_comm_id: comm,
            service_id: service_id(ps.value(), remote.port()),
            local_ca_guid: self.cfg.node_guid,
            local_qkey: 0,
            local_qpn: qpn,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            remote_cm_response_timeout: 20,
            transport_type: if info.qp_type == QpType::Uc { 1 } else { 0 },
            end_to_end_flow_control: p.flow_control,
            starting_psn: softrdma_wire::Psn::new(c.local_psn),
            local_cm_response_timeout: 20,
            retry_count: p.retry_count.min(7),
            pkey: 0xFFFF,
            path_mtu: c.mtu,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: 15,
            srq: info.srq,
            primary_path: softrdma_wire::cm::CmPath {
                local_lid: 0xFFFF,
                remote_lid: 0xFFFF,
                local_gid: Self::gid(local.ip()),
                remote_gid: Self::gid(remote.ip()),
                hop_limit: 64,
                local_ack_timeout: LOCAL_ACK_TIMEOUT,
                ..Default::default()
            },
            private_data: pdata(&pd)
                .ok_or_else(|| CmError::Invalid("private data longer than 56 bytes".into()))?,
            ..Default::default()
        };
        let id = self.id_mut(h)?;
        id.mine = p.clone();
        // A QP named only by `p.qp_num` (none attached with `set_qp`) stays
        // the application's: the REP is reported as CONNECT_RESPONSE and the
        // application connects it (`rdma_init_qp_attr`, `rdma_establish`).
        id.conn = Some(c);
        id.state = State::ReqSent;
        self.send(now, h, remote.ip(), CmMad::new(tid, req), true);
        Ok(())
    }

    /// Finishes an active connection whose REP was reported as CONNECT_RESPONSE
    /// (`rdma_establish`): sends the RTU.
    pub fn establish(&mut self, now: Instant, h: IdHandle) -> Result<(), CmError> {
        let id = self.id(h)?;
        if id.state != State::RepRcvd {
            return Err(CmError::Invalid(format!(
                "establish in state {:?}",
                id.state
            )));
        }
        let c = id.conn.clone().expect("connected state has a conn");
        let rtu = softrdma_wire::cm::Rtu {
            local_comm_id: c.local_comm_id,
            remote_comm_id: c.remote_comm_id,
            ..Default::default()
        };
        self.id_mut(h)?.state = State::Established;
        self.send(now, h, c.peer_ip, CmMad::new(c.tid, rtu), false);
        Ok(())
    }

    // ---- passive side ----

    /// Accepts a connection request (`rdma_accept`): connects the QP and
    /// sends a REP (RC/UC) or SIDR_REP (UD).
    pub fn accept(
        &mut self,
        now: Instant,
        h: IdHandle,
        p: &ConnParam,
        qp: &mut dyn QpOps,
    ) -> Result<(), CmError> {
        let id = self.id(h)?;
        let local = id.local.map(|a| a.ip());
        match id.state {
            State::SidrReqRcvd => {
                let c = id.conn.clone().expect("request has a conn");
                let qpn = id.qpn.unwrap_or(p.qp_num);
                let port = id.local.map_or(0, |a| a.port());
                let mut rep = softrdma_wire::cm::SidrRep {
                    request_id: c.remote_comm_id,
                    status: 0,
                    qpn,
                    service_id: service_id(id.ps.value(), port),
                    qkey: RDMA_UDP_QKEY,
                    ..Default::default()
                };
                rep.private_data = pdata(&p.private_data)
                    .ok_or_else(|| CmError::Invalid("private data too long".into()))?;
                let src = local.unwrap_or(c.peer_ip);
                self.id_mut(h)?.state = State::Established;
                self.reply(src, c.peer_ip, CmMad::new(c.tid, rep));
                Ok(())
            }
            State::ReqRcvd => {
                let mut c = id.conn.clone().expect("request has a conn");
                let qpn = id.qpn.unwrap_or(p.qp_num);
                let info = qp
                    .qp_info(qpn)
                    .ok_or_else(|| CmError::Invalid(format!("no QP {qpn:#x} for accept")))?;
                let local_ip = local.unwrap_or(c.peer_ip);
                // `c.local_psn` was chosen when the request arrived, so what
                // `qp_params` reported before this accept holds.
                // IB CM: each side uses the RNR retry count its peer advertised
                // and the REQ's transport retry count.
                let mut cq = self.connect_qp(
                    local_ip,
                    &c,
                    p.responder_resources,
                    p.initiator_depth,
                    c.peer.retry_count.min(7),
                    c.peer.rnr_retry_count.min(7),
                );
                cq.timeout = id.ack_timeout.unwrap_or(cq.timeout);
                // Only a QP attached to the id is the CM's to connect; one named
                // by `p.qp_num` alone the application connected itself (rping -q).
                if id.qpn.is_some() {
                    qp.connect(qpn, &cq)?;
                }
                let attached = id.qpn.is_some();
                let comm = self.new_comm_id(h);
                c.local_comm_id = comm;
                let rep = softrdma_wire::cm::Rep {
                    local_comm_id: comm,
                    remote_comm_id: c.remote_comm_id,
                    local_qkey: 0,
                    local_qpn: qpn,
                    starting_psn: softrdma_wire::Psn::new(c.local_psn),
                    responder_resources: p.responder_resources,
                    initiator_depth: p.initiator_depth,
                    target_ack_delay: 15,
                    failover_accepted: 0,
                    end_to_end_flow_control: p.flow_control,
                    rnr_retry_count: p.rnr_retry_count.min(7),
                    srq: info.srq,
                    local_ca_guid: self.cfg.node_guid,
                    private_data: pdata(&p.private_data).ok_or_else(|| {
                        CmError::Invalid("private data longer than 196 bytes".into())
                    })?,
                    ..Default::default()
                };
                let tid = c.tid;
                let peer = c.peer_ip;
                let id = self.id_mut(h)?;
                if attached {
                    id.qpn = Some(qpn);
                }
                id.mine = p.clone();
                id.conn = Some(c);
                id.state = State::RepSent;
                self.send(now, h, peer, CmMad::new(tid, rep), true);
                Ok(())
            }
            s => Err(CmError::Invalid(format!("accept in state {s:?}"))),
        }
    }

    /// Rejects a connection request (`rdma_reject`) with private data.
    pub fn reject(&mut self, h: IdHandle, private_data: &[u8]) -> Result<(), CmError> {
        let id = self.id(h)?;
        let local = id.local.map(|a| a.ip());
        let c = id
            .conn
            .clone()
            .ok_or_else(|| CmError::Invalid("nothing to reject".into()))?;
        let src = local.unwrap_or(c.peer_ip);
        match id.state {
            State::SidrReqRcvd => {
                let mut rep = softrdma_wire::cm::SidrRep {
                    request_id: c.remote_comm_id,
                    status: softrdma_wire::cm::sidr_status::REJECT,
                    ..Default::default()
                };
                rep.private_data = pdata(private_data)
                    .ok_or_else(|| CmError::Invalid("private data too long".into()))?;
                self.reply(src, c.peer_ip, CmMad::new(c.tid, rep));
            }
            State::ReqRcvd | State::RepSent => {
                let rej = softrdma_wire::cm::Rej {
                    local_comm_id: c.local_comm_id,
                    remote_comm_id: c.remote_comm_id,
                    message_rejected: 0,
                    reason: softrdma_wire::cm::rej_reason::CONSUMER_DEFINED,
                    private_data: pdata(private_data).ok_or_else(|| {
                        CmError::Invalid("private data longer than 148 bytes".into())
                    })?,
                    ..Default::default()
                };
                self.reply(src, c.peer_ip, CmMad::new(c.tid, rej));
            }
            s => return Err(CmError::Invalid(format!("reject in state {s:?}"))),
        }
        self.settle(h);
        self.id_mut(h)?.state = State::Closed;
        Ok(())
    }

    /// Disconnects (`rdma_disconnect`): the QP goes to ERR (flushing its
    /// receives), a DREQ goes out, DISCONNECTED follows the DREP.
    pub fn disconnect(
        &mut self,
        now: Instant,
        h: IdHandle,
        qp: &mut dyn QpOps,
    ) -> Result<(), CmError> {
        let id = self.id(h)?;
        if let Some(q) = id.qpn {
            qp.set_error(q);
        }
        match id.state {
            State::Established | State::RepSent | State::RepRcvd => {
                let c = id.conn.clone().expect("connected state has a conn");
                if id.ps.is_ud() {
                    self.id_mut(h)?.state = State::Closed;
                    return Ok(());
                }
                let dreq_tid = (u64::from(self.tid_hi) << 32) | u64::from(self.rng.next_u32());
                let dreq = softrdma_wire::cm::Dreq {
                    local_comm_id: c.local_comm_id,
                    remote_comm_id: c.remote_comm_id,
                    remote_qpn: c.remote_qpn,
                    ..Default::default()
                };
                let id = self.id_mut(h)?;
                id.state = State::DreqSent;
                if let Some(c) = id.conn.as_mut() {
                    c.dreq_tid = dreq_tid;
                }
                self.send(now, h, c.peer_ip, CmMad::new(dreq_tid, dreq), true);
                Ok(())
            }
            // Already disconnecting or disconnected: only the QP flush was wanted.
            State::DreqSent | State::TimeWait | State::Closed => Ok(()),
            s => Err(CmError::Invalid(format!("disconnect in state {s:?}"))),
        }
    }

    /// A QP event the driver saw: data on a QP whose RTU was lost establishes
    /// the connection (IBTA 12.9.5, COMM_EST); a fatal QP error (e.g. retries
    /// exhausted towards a dead peer) disconnects it.
    pub fn qp_event(&mut self, now: Instant, qpn: Qpn, fatal: bool, qp: &mut dyn QpOps) {
        let hs: Vec<IdHandle> = self
            .ids
            .iter()
            .filter(|(_, i)| i.qpn == Some(qpn))
            .map(|(h, _)| *h)
            .collect();
        for h in hs {
            let Some(st) = self.ids.get(&h).map(|i| i.state) else {
                continue;
            };
            if !fatal && st == State::RepSent {
                self.settle(h);
                if let Some(id) = self.ids.get_mut(&h) {
                    id.state = State::Established;
                }
                let p = self.conn_param_of(h);
                self.push_event(h, EventKind::Established, 0, EventParam::Conn(p));
            } else if fatal && matches!(st, State::Established | State::RepSent | State::RepRcvd) {
                let _ = self.disconnect(now, h, qp);
                self.report_disconnected(h);
            }
        }
    }

    /// The parameters the peer sent (its REQ or REP), once known.
    pub fn peer_param(&self, h: IdHandle) -> Option<ConnParam> {
        self.ids.get(&h)?.conn.as_ref().map(|c| c.peer.clone())
    }

    /// What `rdma_init_qp_attr` reports: the QP parameters of the connection
    /// an id is part of (once the peer's REQ or REP is known).
    pub fn qp_params(&self, h: IdHandle) -> Option<ConnectQp> {
        let id = self.ids.get(&h)?;
        let c = id.conn.as_ref()?;
        let local = id.local.map_or(c.peer_ip, |a| a.ip());
        let passive = id.listener.is_some();
        let (max_dest_rd_atomic, max_rd_atomic) = if passive {
            (c.peer.initiator_depth, c.peer.responder_resources)
        } else {
            (
                id.mine.responder_resources,
                id.mine.initiator_depth.min(c.peer.responder_resources),
            )
        };
        let mut cq = self.connect_qp(
            local,
            c,
            max_dest_rd_atomic,
            max_rd_atomic,
            c.peer.retry_count.min(7),
            c.peer.rnr_retry_count.min(7),
        );
        cq.timeout = id.ack_timeout.unwrap_or(cq.timeout);
        Some(cq)
    }

    /// The network reported that nothing listens at `ip` any more (ICMP port
    /// unreachable to its RoCE port: the peer process is gone). Every
    /// connection to it ends now instead of after MAD or transport retries:
    /// pending requests are UNREACHABLE, a pending disconnect completes, and
    /// live connections are DISCONNECTED with their QPs flushed.
    pub fn peer_unreachable(&mut self, now: Instant, ip: IpAddr, qp: &mut dyn QpOps) {
        self.peers_gone(now, qp, |c| c.peer_ip == ip);
    }

    /// A member process of this host device died (its slot is free in the
    /// host's registry): connections to it at `ip` end as for
    /// [`Cm::peer_unreachable`]. Its comm IDs carry `slot` in their top byte.
    pub fn member_gone(&mut self, now: Instant, ip: IpAddr, slot: u8, qp: &mut dyn QpOps) {
        self.peers_gone(now, qp, |c| {
            c.peer_ip == ip && slot_of(c.remote_comm_id) == slot
        });
    }

    /// The member slots (top byte of the remote comm ID) of live
    /// connections to `ip`, a shared address of this host device.
    pub fn member_peers(&self, ip: IpAddr) -> Vec<u8> {
        let mut v: Vec<u8> = self
            .ids
            .values()
            .filter_map(|i| i.conn.as_ref())
            .filter(|c| c.peer_ip == ip && c.remote_comm_id != 0)
            .map(|c| slot_of(c.remote_comm_id))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    fn peers_gone(&mut self, now: Instant, qp: &mut dyn QpOps, gone: impl Fn(&Conn) -> bool) {
        let hs: Vec<IdHandle> = self
            .ids
            .iter()
            .filter(|(_, i)| i.conn.as_ref().is_some_and(&gone))
            .map(|(h, _)| *h)
            .collect();
        for h in hs {
            let Some(st) = self.ids.get(&h).map(|i| i.state) else {
                continue;
            };
            match st {
                State::ReqSent | State::SidrReqSent => {
                    self.settle(h);
                    if let Some(i) = self.ids.get_mut(&h) {
                        i.state = State::Closed;
                    }
                    self.push_event(h, EventKind::Unreachable, -111, EventParam::None);
                }
                State::DreqSent => {
                    self.enter_timewait(now, h);
                    self.report_disconnected(h);
                }
                State::Established | State::RepSent | State::RepRcvd => {
                    if let Some(q) = self.ids.get(&h).and_then(|i| i.qpn) {
                        qp.set_error(q);
                    }
                    self.enter_timewait(now, h);
                    self.report_disconnected(h);
                }
                _ => {}
            }
        }
    }

    /// Sends a keepalive to every peer with a live connection: a CM
    /// ClassPortInfo Get, which CMs ignore or answer harmlessly. Its only job is
    /// to reach the peer's port, so that a peer whose process died (killed, so
    /// it never sent its DREQ) answers with ICMP port unreachable, which the
    /// driver reports through [`Cm::peer_unreachable`]. Returns the peers probed.
    pub fn send_keepalives(&mut self) -> usize {
        let mut peers: Vec<(IpAddr, IpAddr)> = self
            .ids
            .values()
            .filter(|i| {
                matches!(
                    i.state,
                    State::Established | State::RepSent | State::RepRcvd
                )
            })
            .filter_map(|i| {
                let c = i.conn.as_ref()?;
                let src = i.local.map(|a| a.ip()).filter(|a| !a.is_unspecified())?;
                Some((src, c.peer_ip))
            })
            .collect();
        peers.sort();
        peers.dedup();
        for (src, dst) in &peers {
            let tid = (u64::from(self.tid_hi) << 32) | u64::from(self.rng.next_u32());
            let mut hdr =
                softrdma_wire::mad::MadHdr::cm(softrdma_wire::cm::attr::CLASS_PORT_INFO, tid);
            hdr.method = softrdma_wire::mad::method::GET;
            let mad = CmMad {
                hdr,
                msg: softrdma_wire::cm::CmMessage::Other {
                    attr_id: softrdma_wire::cm::attr::CLASS_PORT_INFO,
                    body: softrdma_wire::cm::PrivateData::zeroed(),
                },
            };
            self.out.push_back(Outgoing {
                src: *src,
                dst: *dst,
                mad: mad.to_bytes(),
            });
        }
        peers.len()
    }

    fn conn_param_of(&self, h: IdHandle) -> ConnParam {
        self.ids
            .get(&h)
            .and_then(|i| i.conn.as_ref())
            .map(|c| c.peer.clone())
            .unwrap_or_default()
    }

    pub(crate) fn report_disconnected(&mut self, h: IdHandle) {
        let Some(c) = self.ids.get_mut(&h).and_then(|i| i.conn.as_mut()) else {
            return;
        };
        if !c.disconnected {
            c.disconnected = true;
            self.push_event(h, EventKind::Disconnected, 0, EventParam::None);
        }
    }

    /// Joins a multicast group (`rdma_join_multicast`): the driver attaches
    /// the QP; the event carries the group's UD parameters.
    pub fn join_multicast(&mut self, h: IdHandle, group: IpAddr) -> Result<(), CmError> {
        let id = self.id(h)?;
        let local = id.local.map_or(group, |a| a.ip());
        let mut av = self.path_av(local, group);
        av.hop_limit = 1;
        self.push_event(
            h,
            EventKind::MulticastJoin,
            0,
            EventParam::Ud(UdParam {
                private_data: Vec::new(),
                ah_attr: av,
                qp_num: softrdma_transport::MULTICAST_QPN,
                qkey: RDMA_UDP_QKEY,
            }),
        );
        Ok(())
    }

    // ---- driver interface ----

    /// The next MAD to send.
    pub fn poll_transmit(&mut self) -> Option<Outgoing> {
        self.out.pop_front()
    }

    /// The next event for the application.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The earliest retransmission or time-wait deadline.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.ids
            .values()
            .filter_map(|i| i.conn.as_ref().and_then(|c| c.deadline))
            .min()
    }

    /// Resends MADs and ends time-waits due at `now`.
    pub fn handle_timeout(&mut self, now: Instant, qp: &mut dyn QpOps) {
        let due: Vec<IdHandle> = self
            .ids
            .iter()
            .filter(|(_, i)| {
                i.conn
                    .as_ref()
                    .and_then(|c| c.deadline)
                    .is_some_and(|d| d <= now)
            })
            .map(|(h, _)| *h)
            .collect();
        for h in due {
            let Some(id) = self.ids.get_mut(&h) else {
                continue;
            };
            let state = id.state;
            let Some(c) = id.conn.as_mut() else { continue };
            if state == State::TimeWait {
                c.deadline = None;
                id.state = State::Closed;
                continue;
            }
            if c.retries_left > 0
                && let Some(m) = c.last_mad
            {
                c.retries_left -= 1;
                c.backoff_ns = (c.backoff_ns * 2).min(MAD_RTO_MAX_NS);
                c.deadline = Some(now + Duration::from_nanos(c.backoff_ns));
                let src = id.local.map(|a| a.ip()).filter(|i| !i.is_unspecified());
                let src = src
                    .or_else(|| self.cfg.addrs.first().copied())
                    .unwrap_or(c.peer_ip);
                self.out.push_back(Outgoing {
                    src,
                    dst: c.peer_ip,
                    mad: m,
                });
                continue;
            }
            c.deadline = None;
            c.last_mad = None;
            match state {
                State::ReqSent | State::SidrReqSent => {
                    id.state = State::Closed;
                    self.push_event(h, EventKind::Unreachable, -110, EventParam::None);
                }
                State::RepSent => {
                    id.state = State::Closed;
                    if let Some(q) = id.qpn {
                        qp.set_error(q);
                    }
                    self.push_event(h, EventKind::ConnectError, -110, EventParam::None);
                }
                State::DreqSent => {
                    self.enter_timewait(now, h);
                    self.report_disconnected(h);
                }
                _ => {}
            }
        }
    }

    pub(crate) fn enter_timewait(&mut self, now: Instant, h: IdHandle) {
        if let Some(id) = self.ids.get_mut(&h) {
            id.state = State::TimeWait;
            if let Some(c) = id.conn.as_mut() {
                c.last_mad = None;
                c.deadline = Some(now + Duration::from_nanos(TIMEWAIT_NS));
            }
        }
    }

    pub(crate) fn ids_ref(&self, h: IdHandle) -> Option<&Id> {
        self.ids.get(&h)
    }
    pub(crate) fn ids_iter(&self) -> impl Iterator<Item = (IdHandle, &Id)> {
        self.ids.iter().map(|(h, i)| (*h, i))
    }
    pub(crate) fn push_raw(&mut self, src: IpAddr, dst: IpAddr, mad: [u8; 256]) {
        self.out.push_back(Outgoing { src, dst, mad });
    }
    pub(crate) fn ids_mut(&mut self) -> &mut HashMap<IdHandle, Id> {
        &mut self.ids
    }
    pub(crate) fn by_comm(&self, comm: u32) -> Option<IdHandle> {
        self.by_comm.get(&comm).copied()
    }
    pub(crate) fn ports(&self) -> &HashMap<(PortSpace, u16), Vec<IdHandle>> {
        &self.ports
    }
    /// Whether `(ps, port)` at `addr` is bound on this host (here, or by
    /// another process of the host device) though no listener took the REQ.
    /// Such a REQ is dropped instead of rejected, and the client's
    /// retransmission (after [`MAD_RTO_NS`]) finds the listener once there
    /// is one: a server may tell its client the port before it listens
    /// (Debian's qperf 0.4.11 does, fixed upstream in 2018), and a listener
    /// of another process is reached once steering has caught up. Linux's
    /// CM rejects at once; with its slower path the race is rarely lost.
    pub(crate) fn bound_without_listener(
        &mut self,
        ps: PortSpace,
        port: u16,
        addr: IpAddr,
    ) -> bool {
        let here = self.ports.get(&(ps, port)).is_some_and(|users| {
            users.iter().any(|h| {
                self.ids.get(h).is_some_and(|i| {
                    i.local.is_some_and(|a| {
                        a.ip().is_unspecified() || addr.is_unspecified() || a.ip() == addr
                    })
                })
            })
        });
        if here {
            return true;
        }
        let elsewhere = self
            .authority
            .as_ref()
            .is_some_and(|a| a.bound_on_host(ps.value(), port, addr));
        self.misrouted |= elsewhere;
        elsewhere
    }

    /// Whether a connection request meant for another process of the host
    /// (it holds the port) reached this one since the last call: the host
    /// device's steering table is stale, and the engine reconciles it.
    pub fn take_misrouted(&mut self) -> bool {
        std::mem::take(&mut self.misrouted)
    }
    pub(crate) fn cfg(&self) -> &CmConfig {
        &self.cfg
    }
    pub(crate) fn event(&mut self, id: IdHandle, kind: EventKind, status: i32, param: EventParam) {
        self.push_event(id, kind, status, param);
    }
    pub(crate) fn send_once(&mut self, src: IpAddr, dst: IpAddr, mad: CmMad) {
        self.reply(src, dst, mad);
    }
    pub(crate) fn stop_retransmit(&mut self, h: IdHandle) {
        self.settle(h);
    }
    pub(crate) fn path(&self, local: IpAddr, peer: IpAddr) -> AddressVector {
        self.path_av(local, peer)
    }
    pub(crate) fn new_id(&mut self, mut id: Id) -> IdHandle {
        if let Some(c) = id.conn.as_mut() {
            // A request's id: our starting PSN is fixed now, so that
            // `qp_params` (rdma_init_qp_attr) before `accept` reports it.
            c.local_psn = self.psn();
        }
        let h = IdHandle(self.next_id);
        self.next_id = self.next_id.wrapping_add(1).max(1);
        self.ids.insert(h, id);
        h
    }
}

/// Private data into a fixed CM field; `None` if it does not fit.
pub(crate) fn pdata<const N: usize>(d: &[u8]) -> Option<softrdma_wire::cm::PrivateData<N>> {
    softrdma_wire::cm::PrivateData::from_slice(d).ok()
}

/// `x` with its top byte replaced by the member slot (unless there is none).
fn with_slot(slot: u8, x: u32) -> u32 {
    match slot {
        0 => x,
        s => (u32::from(s) << 24) | (x & 0x00FF_FFFF),
    }
}

/// The member slot a comm ID (or TID half) of [`with_slot`] carries.
fn slot_of(x: u32) -> u8 {
    (x >> 24) as u8
}
