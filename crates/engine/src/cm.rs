//! The connection manager inside the engine: CM MADs framed as UD packets
//! on QP1, CM event channels, the CM's access to QPs, and address resolution.

use crate::channel::EventQueue;
use softrdma_cm::{ConnectQp, Event as CmEvent, IdHandle, QpInfo, QpOps};
use softrdma_transport::{
    Access, Endpoint, GSI_QKEY, GSI_QPN, Instant, QpAttr, QpAttrMask as M, QpState, Qpn, VerbsError,
};
use softrdma_wire::{Bth, Deth, Headers, Opcode, Packet, Psn};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

/// A CM event channel (`struct rdma_event_channel`): an eventfd plus a queue.
#[derive(Debug)]
pub struct CmChannel {
    queue: EventQueue<CmEvent>,
}

impl CmChannel {
    /// A new channel (it needs no device).
    pub fn new() -> io::Result<CmChannel> {
        Ok(CmChannel {
            queue: EventQueue::new(true)?,
        })
    }

    pub(crate) fn push(&self, e: CmEvent) {
        self.queue.push(e);
    }

    /// Blocks in `read(2)` until an event arrives (unless non-blocking); a
    /// signal handler interrupting the wait ends it with `Interrupted`.
    pub fn get_event(&self) -> io::Result<CmEvent> {
        loop {
            self.queue.efd().read_interruptible()?;
            if let Some(e) = self.queue.pop_counted() {
                return Ok(e);
            }
        }
    }

    /// Makes `get_event` non-blocking (or back).
    pub fn set_nonblocking(&self, on: bool) -> io::Result<()> {
        self.queue.efd().set_nonblocking(on)
    }

    /// Drops queued events of `id` (it is being destroyed).
    pub(crate) fn forget(&self, id: IdHandle) {
        self.queue.retain(|e| e.id != id);
    }
}

impl AsRawFd for CmChannel {
    fn as_raw_fd(&self) -> RawFd {
        self.queue.as_raw_fd()
    }
}

/// The CM's view of the endpoint's QPs.
pub(crate) struct EpQps<'a> {
    pub(crate) ep: &'a mut Endpoint,
    pub(crate) now: Instant,
    /// Whether a connected QP may use peer copy (the same-host path's).
    pub(crate) peer_copy: Option<&'a dyn PeerCopyPolicy>,
}

/// Decides whether an RC QP may use peer copy (`engine/shm/peer_copy.rs`)
/// toward QP `dest_qpn` at an address that is (`local`) or is not this
/// host's. Takes no engine lock.
pub(crate) trait PeerCopyPolicy {
    fn peer_copy(&self, local: bool, dest_qpn: Qpn) -> bool;
}

impl QpOps for EpQps<'_> {
    fn qp_info(&mut self, qpn: Qpn) -> Option<QpInfo> {
        let (_, init) = self.ep.query_qp(qpn).ok()?;
        Some(QpInfo {
            qp_type: init.qp_type,
            srq: init.srq.is_some(),
        })
    }

    fn connect(&mut self, qpn: Qpn, p: &ConnectQp) -> Result<(), VerbsError> {
        let (cur, _) = self.ep.query_qp(qpn)?;
        // The kernel CM grants REMOTE_WRITE always and READ/ATOMIC when the
        // side accepts READ/atomic requests (cm_init_qp_init_attr).
        let mut access = Access::REMOTE_WRITE;
        if p.max_dest_rd_atomic > 0 {
            access = access | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        }
        let mut a = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: access,
            ..QpAttr::default()
        };
        if cur.qp_state == QpState::Reset {
            self.ep.modify_qp(
                self.now,
                qpn,
                &a,
                M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            )?;
        }
        // RC and both XRC halves take RC's full attribute set (each XRC
        // half ignores the other side's, as the transport's rules allow).
        let rc = self
            .ep
            .qp_type(qpn)
            .is_some_and(softrdma_transport::QpType::is_reliable);
        a.qp_state = QpState::Rtr;
        a.ah_attr = p.av;
        a.path_mtu = p.mtu;
        a.dest_qp_num = p.remote_qpn;
        a.rq_psn = p.rq_psn;
        a.max_dest_rd_atomic = p.max_dest_rd_atomic;
        a.min_rnr_timer = p.min_rnr_timer;
        let mut mask = M::STATE | M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN | M::ACCESS_FLAGS;
        if rc {
            mask = mask | M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER;
        }
        self.ep.modify_qp(self.now, qpn, &a, mask)?;
        if let Some(policy) = self.peer_copy {
            let ip = p.av.dest_ip();
            let local = ip.to_canonical().is_loopback() || self.ep.config().gids.contains(&ip);
            let _ = self
                .ep
                .set_peer_copy(qpn, policy.peer_copy(local, p.remote_qpn));
        }
        a.qp_state = QpState::Rts;
        a.sq_psn = p.sq_psn;
        a.timeout = p.timeout;
        a.retry_cnt = p.retry_cnt;
        a.rnr_retry = p.rnr_retry;
        a.max_rd_atomic = p.max_rd_atomic;
        let mut mask = M::STATE | M::SQ_PSN;
        if rc {
            mask = mask | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::MAX_QP_RD_ATOMIC;
        }
        self.ep.modify_qp(self.now, qpn, &a, mask)
    }

    fn set_error(&mut self, qpn: Qpn) {
        let a = QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        };
        let _ = self.ep.modify_qp(self.now, qpn, &a, M::STATE);
    }
}

/// Frames a MAD as a UD SEND_ONLY from QP1 to QP1 (rocev2.md §4.1).
pub(crate) fn gsi_packet(psn: u32, mad: &[u8; 256], out: &mut Vec<u8>) {
    let mut h = Headers::new(Bth::new(Opcode::UD_SEND_ONLY, GSI_QPN, Psn::new(psn)));
    h.deth = Some(Deth {
        qkey: GSI_QKEY,
        resv8: 0,
        src_qp: GSI_QPN,
    });
    out.clear();
    softrdma_wire::emit(&h, mad, out).expect("UD_SEND_ONLY is a known opcode");
}

/// The MAD inside a packet for QP1, if it is one (ICRC already checked).
pub(crate) fn gsi_mad(payload: &[u8]) -> Option<&[u8]> {
    let p = Packet::parse(payload).ok()?;
    if p.hdr.bth.opcode != Opcode::UD_SEND_ONLY || p.hdr.deth.map(|d| d.qkey) != Some(GSI_QKEY) {
        return None;
    }
    (p.payload.len() == 256).then_some(p.payload)
}

/// The MAD of a datagram that is a CM DREQ (a peer disconnects), parsed
/// once for both the test and the DREQ's reading.
pub(crate) fn dreq_mad(payload: &[u8]) -> Option<&[u8]> {
    gsi_mad(payload).filter(|m| {
        m[1] == softrdma_wire::mad::MGMT_CLASS_CM
            && u16::from_be_bytes([m[16], m[17]]) == softrdma_wire::cm::attr::DREQ
    })
}

/// True if the datagram is addressed to QP1 (BTH DestQP, bytes 5..8).
pub(crate) fn is_gsi(payload: &[u8]) -> bool {
    payload.len() >= 12 && payload[5..8] == [0, 0, 1]
}

/// The route probe: a CM ClassPortInfo Get MAD from QP1 to QP1, ICRC
/// computed for the probe socket's own address and port.
fn probe_packet(from: SocketAddr, to: SocketAddr) -> Vec<u8> {
    use softrdma_wire::cm::{CmMad, CmMessage, PrivateData, attr};
    let mut hdr = softrdma_wire::mad::MadHdr::cm(attr::CLASS_PORT_INFO, u64::from(from.port()));
    hdr.method = softrdma_wire::mad::method::GET;
    let mad = CmMad {
        hdr,
        msg: CmMessage::Other {
            attr_id: attr::CLASS_PORT_INFO,
            body: PrivateData::zeroed(),
        },
    };
    let mut out = Vec::new();
    gsi_packet(0, &mad.to_bytes(), &mut out);
    softrdma_transport::fill_icrc_between(from, to, &mut out);
    out
}

/// Route and reachability check for `rdma_resolve_addr`, like ARP for a NIC:
/// the kernel must route from our address to `dst`, and a unicast `dst` must
/// not answer "port unreachable" on the RoCE port (no device owns it).
pub(crate) fn probe_route(local: IpAddr, dst: IpAddr, roce_port: u16) -> Result<(), i32> {
    if dst.is_multicast() || dst == local {
        return Ok(());
    }
    let dst = SocketAddr::new(dst, roce_port);
    if local.is_loopback() != dst.ip().is_loopback() {
        // A loopback device cannot reach other hosts and vice versa.
        return Err(libc::ENETUNREACH);
    }
    let s =
        softrdma_udp::probe_socket(local).map_err(|e| e.raw_os_error().unwrap_or(libc::ENODEV))?;
    // A well-formed CM packet to QP1 (a ClassPortInfo Get, as the keepalive
    // sends): a softrdma or rxe peer takes it for what it is, an address
    // nobody listens on answers with ICMP port unreachable.
    let from = s
        .local_addr()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::ENODEV))?;
    if s.send_to(&probe_packet(from, dst), dst).is_err() {
        return Err(libc::ENETUNREACH);
    }
    let _ = s.set_read_timeout(Some(Duration::from_millis(10)));
    let mut b = [0u8; 1];
    match s.recv(&mut b) {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Err(libc::EHOSTUNREACH),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_wire::ip;

    /// The route probe is a real RoCEv2 packet (so tshark and rxe see a CM
    /// MAD, not garbage): a 256-byte MAD to QP1 whose ICRC matches the probe
    /// socket's addresses.
    #[test]
    fn probe_is_a_valid_gsi_mad() {
        let from: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let to: SocketAddr = "127.0.0.2:4791".parse().unwrap();
        let pkt = probe_packet(from, to);
        let mad = gsi_mad(&pkt).expect("a MAD for QP1");
        let parsed = softrdma_wire::cm::CmMad::parse(mad).unwrap();
        assert_eq!(parsed.hdr.method, softrdma_wire::mad::method::GET);
        let iph = ip::ipv4_header(
            &ip::Ipv4Fields {
                src: "127.0.0.1".parse().unwrap(),
                dst: "127.0.0.2".parse().unwrap(),
                id: 0,
                tos: 0,
                ttl: 0,
                df: true,
            },
            ip::UDP_HDR_LEN + pkt.len(),
        );
        let udp = ip::udp_header(40000, 4791, pkt.len());
        let icrc = softrdma_wire::icrc::compute(&iph, &udp, &pkt[..pkt.len() - 4]).unwrap();
        assert_eq!(pkt[pkt.len() - 4..], icrc.to_le_bytes());
    }
}
