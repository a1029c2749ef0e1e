//! The IPv4/IPv6 and UDP envelope of a RoCEv2 packet (RFC 791, 8200, 768).
//!
//! Only what RoCEv2 needs: parsing captured frames, building the headers the
//! ICRC covers, and the 40-byte GRH area a UD receive reports.

use crate::error::{Error, Result, need};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The RoCEv2 UDP destination port.
pub const ROCEV2_PORT: u16 = 4791;
/// IPv4 header length without options (rxe sends none).
pub const IPV4_HDR_LEN: usize = 20;
/// IPv6 fixed header length.
pub const IPV6_HDR_LEN: usize = 40;
/// UDP header length.
pub const UDP_HDR_LEN: usize = 8;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// A parsed IP + UDP envelope around a RoCEv2 payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpEnvelope<'a> {
    /// The IP header bytes exactly as captured (20 or 40 bytes).
    pub ip_header: &'a [u8],
    /// The UDP header bytes exactly as captured.
    pub udp_header: &'a [u8],
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// UDP source port.
    pub src_port: u16,
    /// UDP destination port.
    pub dst_port: u16,
    /// UDP payload (BTH through ICRC), cut to the UDP length.
    pub payload: &'a [u8],
}

/// Parses an IP packet (starting at the IP header) carrying UDP.
pub fn parse_ip_udp(pkt: &[u8]) -> Result<UdpEnvelope<'_>> {
    need(pkt, 1)?;
    let (ip_len, src, dst, proto, ip_total) = match pkt[0] >> 4 {
        4 => {
            need(pkt, IPV4_HDR_LEN)?;
            let ihl = usize::from(pkt[0] & 0x0F) * 4;
            if ihl != IPV4_HDR_LEN {
                // rxe assumes a 20-byte header; options would shift the ICRC coverage.
                return Err(Error::BadField("IPv4 header with options"));
            }
            let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
            let s = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
            let d = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
            (ihl, IpAddr::V4(s), IpAddr::V4(d), pkt[9], total)
        }
        6 => {
            need(pkt, IPV6_HDR_LEN)?;
            let plen = usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&pkt[8..24]);
            d.copy_from_slice(&pkt[24..40]);
            (
                IPV6_HDR_LEN,
                IpAddr::V6(Ipv6Addr::from(s)),
                IpAddr::V6(Ipv6Addr::from(d)),
                pkt[6],
                IPV6_HDR_LEN + plen,
            )
        }
        _ => return Err(Error::BadField("IP version")),
    };
    if proto != IPPROTO_UDP {
        return Err(Error::BadField("IP protocol is not UDP"));
    }
    if ip_total > pkt.len() || ip_total < ip_len + UDP_HDR_LEN {
        return Err(Error::BadLength("IP total length"));
    }
    let udp = &pkt[ip_len..ip_total];
    let udp_len = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    if udp_len < UDP_HDR_LEN || udp_len > udp.len() {
        return Err(Error::BadLength("UDP length"));
    }
    Ok(UdpEnvelope {
        ip_header: &pkt[..ip_len],
        udp_header: &udp[..UDP_HDR_LEN],
        src,
        dst,
        src_port: u16::from_be_bytes([udp[0], udp[1]]),
        dst_port: u16::from_be_bytes([udp[2], udp[3]]),
        payload: &udp[UDP_HDR_LEN..udp_len],
    })
}

/// The Internet checksum (RFC 1071) of `data`.
pub fn inet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from_be_bytes([c[0], 0])
        };
        sum += u32::from(w);
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

/// Fields of an IPv4 header as a RoCEv2 sender fills them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Fields {
    /// Source.
    pub src: Ipv4Addr,
    /// Destination.
    pub dst: Ipv4Addr,
    /// Identification (0 for Linux DF datagrams on unconnected sockets).
    pub id: u16,
    /// Type of service / DSCP+ECN.
    pub tos: u8,
    /// Time to live.
    pub ttl: u8,
    /// Don't-fragment flag.
    pub df: bool,
}

/// Builds a 20-byte IPv4 header (with checksum) for a UDP datagram of `udp_len` bytes.
pub fn ipv4_header(f: &Ipv4Fields, udp_len: usize) -> [u8; IPV4_HDR_LEN] {
    let mut h = [0u8; IPV4_HDR_LEN];
    h[0] = 0x45;
    h[1] = f.tos;
    let total = (IPV4_HDR_LEN + udp_len) as u16;
    h[2..4].copy_from_slice(&total.to_be_bytes());
    h[4..6].copy_from_slice(&f.id.to_be_bytes());
    if f.df {
        h[6] = 0x40;
    }
    h[8] = f.ttl;
    h[9] = IPPROTO_UDP;
    h[12..16].copy_from_slice(&f.src.octets());
    h[16..20].copy_from_slice(&f.dst.octets());
    let c = inet_checksum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// Builds a 40-byte IPv6 header for a UDP datagram of `udp_len` bytes.
pub fn ipv6_header(
    src: Ipv6Addr,
    dst: Ipv6Addr,
    traffic_class: u8,
    flow_label: u32,
    hop_limit: u8,
    udp_len: usize,
) -> [u8; IPV6_HDR_LEN] {
    let mut h = [0u8; IPV6_HDR_LEN];
    let w = (6u32 << 28) | (u32::from(traffic_class) << 20) | (flow_label & 0xF_FFFF);
    h[..4].copy_from_slice(&w.to_be_bytes());
    h[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    h[6] = IPPROTO_UDP;
    h[7] = hop_limit;
    h[8..24].copy_from_slice(&src.octets());
    h[24..40].copy_from_slice(&dst.octets());
    h
}

/// Builds an 8-byte UDP header with checksum 0 (RoCEv2 senders do not fill it).
pub fn udp_header(src_port: u16, dst_port: u16, payload_len: usize) -> [u8; UDP_HDR_LEN] {
    let mut h = [0u8; UDP_HDR_LEN];
    h[..2].copy_from_slice(&src_port.to_be_bytes());
    h[2..4].copy_from_slice(&dst_port.to_be_bytes());
    h[4..6].copy_from_slice(&((UDP_HDR_LEN + payload_len) as u16).to_be_bytes());
    h
}

/// The 40-byte "GRH" area a UD receive reports for an IP-routed RoCEv2 packet
/// (rxe: `union rdma_network_hdr`): 20 zero bytes then the IPv4 header, or the
/// whole IPv6 header.
pub fn grh_area(src: IpAddr, dst: IpAddr, udp_payload_len: usize) -> [u8; 40] {
    let mut g = [0u8; 40];
    let udp_len = UDP_HDR_LEN + udp_payload_len;
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let h = ipv4_header(
                &Ipv4Fields {
                    src: s,
                    dst: d,
                    id: 0,
                    tos: 0,
                    ttl: 64,
                    df: true,
                },
                udp_len,
            );
            g[20..].copy_from_slice(&h);
        }
        (s, d) => {
            g.copy_from_slice(&ipv6_header(to_v6(s), to_v6(d), 0, 0, 64, udp_len));
        }
    }
    g
}

/// An address as a GID: IPv4 becomes the IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
pub fn to_v6(a: IpAddr) -> Ipv6Addr {
    match a {
        IpAddr::V4(v) => v.to_ipv6_mapped(),
        IpAddr::V6(v) => v,
    }
}

/// A GID as an address: IPv4-mapped GIDs become IPv4.
pub fn from_gid(gid: [u8; 16]) -> IpAddr {
    // The ::ffff:a.b.c.d prefix compared as two words: every packet built
    // asks for its destination this way.
    let head = u64::from_be_bytes([
        gid[0], gid[1], gid[2], gid[3], gid[4], gid[5], gid[6], gid[7],
    ]);
    let mid = u32::from_be_bytes([gid[8], gid[9], gid[10], gid[11]]);
    if head == 0 && mid == 0xffff {
        IpAddr::V4(Ipv4Addr::new(gid[12], gid[13], gid[14], gid[15]))
    } else {
        IpAddr::V6(Ipv6Addr::from(gid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_known() {
        // Vector 2 of rocev2.md §2.4: checksum a531.
        let f = Ipv4Fields {
            src: Ipv4Addr::new(192, 168, 1, 1),
            dst: Ipv4Addr::new(192, 168, 1, 2),
            id: 0x1234,
            tos: 0,
            ttl: 64,
            df: true,
        };
        let h = ipv4_header(&f, 0x34 - 20);
        assert_eq!(&h[10..12], &[0xa5, 0x31]);
    }

    #[test]
    fn gid_mapping() {
        let a = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
        assert_eq!(from_gid(to_v6(a).octets()), a);
    }

    proptest::proptest! {
        /// The word comparison agrees with the standard library's reading
        /// of an IPv4-mapped address, for any GID and for mapped ones.
        #[test]
        fn gid_mapping_agrees_with_std(gid: [u8; 16], v4: [u8; 4], mapped: bool) {
            let mut g = gid;
            if mapped {
                g = Ipv4Addr::from(v4).to_ipv6_mapped().octets();
            }
            let v6 = Ipv6Addr::from(g);
            let want = v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4);
            proptest::prop_assert_eq!(from_gid(g), want);
        }
    }
}
