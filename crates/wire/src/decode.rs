//! One-call decoding of a captured RoCEv2 IP packet, for tools and logs.
//!
//! [`decode_ip_packet`] parses IP/UDP, the RoCEv2 headers, verifies the ICRC and,
//! for datagrams to QP1, the CM MAD inside. [`Decoded`]'s `Display` is a
//! one-line summary in the spirit of tcpdump:
//!
//! ```text
//! 10.77.0.3:55410 > 10.77.0.2:4791 UD_SEND_ONLY qp=0x000001 psn=0 A DETH[qkey=0x80010000 srcqp=0x000001] len=256 CM REQ[...] icrc ok
//! ```

use core::fmt;
use std::net::SocketAddr;

use crate::cm::{self, CmMad, CmMessage, rej_reason, service_id_parts};
use crate::error::{Error, Result};
use crate::headers::{NakCode, Syndrome, rnr_timer_ns};
use crate::icrc;
use crate::ip::{IPPROTO_UDP, UdpEnvelope, parse_ip_udp};
use crate::mad::{GSI_QPN, MGMT_CLASS_CM, MadHdr};
use crate::opcode::{Operation, Transport};
use crate::packet::Packet;

/// The ICRC check of a decoded packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcrcStatus {
    /// The carried ICRC matches.
    Ok,
    /// It does not.
    Bad {
        /// ICRC carried by the packet.
        carried: u32,
        /// ICRC computed from the packet.
        computed: u32,
    },
}

/// What a datagram to QP1 carried.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GsiMad {
    /// A CM MAD (boxed: it is ten times the size of the other variants).
    Cm(Box<CmMad>),
    /// A MAD of another management class (header only).
    Other(MadHdr),
    /// Not a well-formed MAD.
    Malformed(Error),
}

/// A decoded RoCEv2 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decoded<'a> {
    /// The IP/UDP envelope.
    pub env: UdpEnvelope<'a>,
    /// The RoCEv2 packet (BTH through ICRC).
    pub packet: Packet<'a>,
    /// The ICRC verdict.
    pub icrc: IcrcStatus,
    /// For UD sends to QP1: the MAD.
    pub mad: Option<GsiMad>,
}

impl Decoded<'_> {
    /// True when the ICRC is right and any MAD is well formed.
    pub fn is_ok(&self) -> bool {
        self.icrc == IcrcStatus::Ok && !matches!(self.mad, Some(GsiMad::Malformed(_)))
    }
}

/// Decodes an IP packet (starting at the IPv4/IPv6 header) carrying RoCEv2.
///
/// Errors if the IP/UDP envelope or the RoCEv2 headers are malformed; a wrong
/// ICRC or a malformed MAD is reported inside [`Decoded`] instead, so the
/// caller can still show the packet. The UDP port is not checked.
pub fn decode_ip_packet(ip: &[u8]) -> Result<Decoded<'_>> {
    let env = parse_ip_udp(ip)?;
    let packet = Packet::parse(env.payload)?;
    let icrc = match icrc::verify(&env) {
        Ok(()) => IcrcStatus::Ok,
        Err(Error::BadIcrc { carried, computed }) => IcrcStatus::Bad { carried, computed },
        Err(e) => return Err(e),
    };
    let is_gsi = packet.hdr.bth.dest_qp == GSI_QPN
        && packet.info.transport == Transport::Ud
        && packet.info.operation == Operation::Send;
    let mad = is_gsi.then(|| match MadHdr::parse(packet.payload) {
        Err(e) => GsiMad::Malformed(e),
        Ok(h) if h.mgmt_class != MGMT_CLASS_CM => GsiMad::Other(h),
        Ok(_) => match CmMad::parse(packet.payload) {
            Ok(m) => GsiMad::Cm(Box::new(m)),
            Err(e) => GsiMad::Malformed(e),
        },
    });
    Ok(Decoded {
        env,
        packet,
        icrc,
        mad,
    })
}

/// The UDP destination port of an IP packet, read leniently (IPv4 options are
/// skipped; no length is checked beyond what is read). `None` if it is not UDP.
///
/// Lets a tool pick RoCEv2 traffic by port before deciding that a packet which
/// fails [`decode_ip_packet`] is a bad one.
pub fn udp_dst_port(ip: &[u8]) -> Option<u16> {
    let (proto, off) = match ip.first()? >> 4 {
        4 => (*ip.get(9)?, usize::from(ip[0] & 0x0F) * 4),
        6 => (*ip.get(6)?, 40),
        _ => return None,
    };
    if proto != IPPROTO_UDP {
        return None;
    }
    let p = ip.get(off + 2..off + 4)?;
    Some(u16::from_be_bytes([p[0], p[1]]))
}

impl fmt::Display for Decoded<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let e = &self.env;
        let h = &self.packet.hdr;
        let b = &h.bth;
        write!(
            f,
            "{} > {} {} qp=0x{:06x} psn={}",
            SocketAddr::new(e.src, e.src_port),
            SocketAddr::new(e.dst, e.dst_port),
            b.opcode,
            b.dest_qp,
            b.psn.get()
        )?;
        for (set, name) in [
            (b.ack_req, "A"),
            (b.se, "SE"),
            (b.mig, "M"),
            (b.fecn, "FECN"),
            (b.becn, "BECN"),
        ] {
            if set {
                write!(f, " {name}")?;
            }
        }
        if b.pkey != 0xFFFF {
            write!(f, " pkey=0x{:04x}", b.pkey)?;
        }
        if let Some(d) = h.deth {
            write!(f, " DETH[qkey=0x{:08x} srcqp=0x{:06x}]", d.qkey, d.src_qp)?;
        }
        if let Some(x) = h.xrceth {
            write!(f, " XRCETH[srqn=0x{:06x}]", crate::packet::xrc_srqn(x))?;
        }
        if let Some(x) = h.feth {
            write!(f, " FETH[0x{:08x}]", x.word)?;
        }
        if let Some(r) = h.reth {
            write!(
                f,
                " RETH[va=0x{:x} rkey=0x{:08x} dlen={}]",
                r.va, r.rkey, r.dma_len
            )?;
        }
        if let Some(a) = h.atomic_eth {
            write!(f, " AtomicETH[va=0x{:x} rkey=0x{:08x}", a.va, a.rkey)?;
            if self.packet.info.operation == Operation::CompareSwap {
                write!(f, " swap=0x{:x} cmp=0x{:x}]", a.swap_add, a.compare)?;
            } else {
                write!(f, " add=0x{:x}]", a.swap_add)?;
            }
        }
        if let Some(a) = h.aeth {
            write!(f, " AETH[{} msn={}]", SyndromeFmt(a.syndrome), a.msn)?;
        }
        if let Some(v) = h.atomic_ack {
            write!(f, " AtomicAckETH[orig=0x{v:x}]")?;
        }
        if let Some(v) = h.imm {
            write!(f, " imm=0x{v:08x}")?;
        }
        if let Some(v) = h.ieth {
            write!(f, " IETH[rkey=0x{v:08x}]")?;
        }
        write!(f, " len={}", self.packet.payload.len())?;
        match &self.mad {
            None => {}
            Some(GsiMad::Cm(m)) => write!(f, " CM {}", CmFmt(m))?,
            Some(GsiMad::Other(m)) => write!(
                f,
                " MAD[class=0x{:02x} method=0x{:02x} attr=0x{:04x} tid=0x{:x}]",
                m.mgmt_class, m.method, m.attr_id, m.tid
            )?,
            Some(GsiMad::Malformed(err)) => write!(f, " MAD malformed ({err})")?,
        }
        match self.icrc {
            IcrcStatus::Ok => f.write_str(" icrc ok"),
            IcrcStatus::Bad { carried, computed } => write!(
                f,
                " icrc BAD (carried 0x{carried:08x}, computed 0x{computed:08x})"
            ),
        }
    }
}

struct SyndromeFmt(Syndrome);

impl fmt::Display for SyndromeFmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Syndrome::Ack { credits } => write!(f, "ACK credits={credits}"),
            Syndrome::RnrNak { timer } => {
                let us = rnr_timer_ns(timer) / 1000;
                write!(
                    f,
                    "RNR-NAK timer={timer} ({}.{:02}ms)",
                    us / 1000,
                    us % 1000 / 10
                )
            }
            Syndrome::Nak(code) => {
                let what = match code {
                    NakCode::PsnSequence => "PSN-sequence-error",
                    NakCode::InvalidRequest => "invalid-request",
                    NakCode::RemoteAccess => "remote-access-error",
                    NakCode::RemoteOperational => "remote-operational-error",
                    NakCode::InvalidRdRequest => "invalid-RD-request",
                    NakCode::Reserved(_) => "reserved-code",
                };
                write!(f, "NAK {what} (0x{:02x})", self.0.byte())
            }
            Syndrome::Reserved(b) => write!(f, "reserved syndrome 0x{b:02x}"),
        }
    }
}

struct CmFmt<'a>(&'a CmMad);

/// An IB MTU enum as bytes (1 = 256 .. 5 = 4096), or the raw value in brackets.
struct MtuFmt(u8);

impl fmt::Display for MtuFmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            1..=5 => write!(f, "{}", 128u32 << self.0),
            v => write!(f, "[{v}]"),
        }
    }
}

/// Service ID, with its rdma_cm port space and port when it has them.
struct SidFmt(u64);

impl fmt::Display for SidFmt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sid=0x{:016x}", self.0)?;
        match service_id_parts(self.0) {
            Some((cm::port_space::TCP, port)) => write!(f, "(tcp:{port})"),
            Some((cm::port_space::UDP, port)) => write!(f, "(udp:{port})"),
            Some((cm::port_space::IB, port)) => write!(f, "(ib:{port})"),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for CmFmt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(f, "{}[tid=0x{:x}", m.msg.name(), m.hdr.tid)?;
        match &m.msg {
            CmMessage::Req(r) => {
                write!(
                    f,
                    " comm=0x{:08x} {} qpn=0x{:06x} spsn=0x{:06x} mtu={} resp_res={} init_depth={}",
                    r.local_comm_id,
                    SidFmt(r.service_id),
                    r.local_qpn,
                    r.starting_psn.get(),
                    MtuFmt(r.path_mtu),
                    r.responder_resources,
                    r.initiator_depth
                )?;
                if let Ok(c) = r.cma_hdr() {
                    write!(f, " cma={}:{}>{}", c.src, c.src_port, c.dst)?;
                }
            }
            CmMessage::Rep(r) => write!(
                f,
                " comm=0x{:08x} remote=0x{:08x} qpn=0x{:06x} spsn=0x{:06x} resp_res={} init_depth={}",
                r.local_comm_id,
                r.remote_comm_id,
                r.local_qpn,
                r.starting_psn.get(),
                r.responder_resources,
                r.initiator_depth
            )?,
            CmMessage::Rtu(r) => write!(
                f,
                " comm=0x{:08x} remote=0x{:08x}",
                r.local_comm_id, r.remote_comm_id
            )?,
            CmMessage::Drep(r) => write!(
                f,
                " comm=0x{:08x} remote=0x{:08x}",
                r.local_comm_id, r.remote_comm_id
            )?,
            CmMessage::Dreq(r) => write!(
                f,
                " comm=0x{:08x} remote=0x{:08x} qpn=0x{:06x}",
                r.local_comm_id, r.remote_comm_id, r.remote_qpn
            )?,
            CmMessage::Rej(r) => write!(
                f,
                " comm=0x{:08x} remote=0x{:08x} reason={} ({}) msg={}",
                r.local_comm_id,
                r.remote_comm_id,
                r.reason,
                rej_reason::name(r.reason),
                r.message_rejected
            )?,
            CmMessage::Mra(r) => write!(
                f,
                " comm=0x{:08x} remote=0x{:08x} msg={} timeout={}",
                r.local_comm_id, r.remote_comm_id, r.message_mraed, r.service_timeout
            )?,
            CmMessage::SidrReq(r) => {
                write!(f, " req=0x{:08x} {}", r.request_id, SidFmt(r.service_id))?;
                if let Ok(c) = r.cma_hdr() {
                    write!(f, " cma={}:{}>{}", c.src, c.src_port, c.dst)?;
                }
            }
            CmMessage::SidrRep(r) => write!(
                f,
                " req=0x{:08x} status={} qpn=0x{:06x} qkey=0x{:08x} {}",
                r.request_id,
                r.status,
                r.qpn,
                r.qkey,
                SidFmt(r.service_id)
            )?,
            CmMessage::Other { attr_id, .. } => write!(f, " attr=0x{attr_id:04x}")?,
        }
        f.write_str("]")
    }
}

#[cfg(test)]
#[path = "decode_tests.rs"]
mod tests;
