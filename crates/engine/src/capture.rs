//! `SOFTRDMA_PCAP`: every packet the engine sends and receives, as a pcap file
//! Wireshark opens (Ethernet link type, real-looking IPv4/IPv6 + UDP headers,
//! IPv4 ID 0 and DF as Linux sends them, so the ICRC verifies in the capture).
//! A received packet whose sender used another IPv4 ID (Linux rxe does) gets
//! the ID its ICRC was computed with, recovered from the ICRC itself.
//!
//! On the same-host path a capture records the lanes' datagrams, which are
//! the RoCE packets the wire would carry, except for peer copies: a process
//! that captures uses none itself (`ShmPath::new`), and a peer's peer-copy
//! descriptor, which is no RoCE packet, is recorded as it is with a note on
//! stderr, once, that its data bypassed the wire.

use softrdma_wire::ip;
use softrdma_wire::pcap::{LinkType, PcapWriter};
use std::fs::File;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug)]
pub(crate) struct Capture {
    file: Mutex<File>,
    writer: PcapWriter,
    /// A peer-copy descriptor was recorded (and noted on stderr).
    bypass_noted: AtomicBool,
}

impl Capture {
    pub(crate) fn create(path: &Path) -> io::Result<Capture> {
        let writer = PcapWriter::new(LinkType::ETHERNET).map_err(io::Error::other)?;
        let mut file = File::create(path)?;
        file.write_all(&writer.file_header())?;
        Ok(Capture {
            file: Mutex::new(file),
            writer,
            bypass_noted: AtomicBool::new(false),
        })
    }

    /// Records one datagram. Write errors are ignored: capture never stops traffic.
    pub(crate) fn record(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
        let peer_copy = payload
            .first()
            .and_then(|&op| softrdma_wire::Opcode(op).info())
            .is_some_and(|i| i.peer);
        if peer_copy && !self.bypass_noted.swap(true, Ordering::Relaxed) {
            eprintln!(
                "softrdma: SOFTRDMA_PCAP: {src} sends large transfers by peer copy, \
                 which bypasses the wire: the capture holds their descriptors, not \
                 their data (SOFTRDMA_PEER_COPY=0 in that process keeps them in packets)"
            );
        }
        let udp = ip::udp_header(src.port(), dst.port(), payload.len());
        let udp_len = udp.len() + payload.len();
        let mut pkt = Vec::with_capacity(40 + udp_len);
        match (src.ip(), dst.ip()) {
            (IpAddr::V4(s), IpAddr::V4(d)) => pkt.extend_from_slice(&ip::ipv4_header(
                &ip::Ipv4Fields {
                    src: s,
                    dst: d,
                    id: 0,
                    tos: 0,
                    ttl: 64,
                    df: true,
                },
                udp_len,
            )),
            (s, d) => pkt.extend_from_slice(&ip::ipv6_header(
                ip::to_v6(s),
                ip::to_v6(d),
                0,
                0,
                64,
                udp_len,
            )),
        }
        pkt.extend_from_slice(&udp);
        pkt.extend_from_slice(payload);
        recover_ipv4_id(&mut pkt);
        let ts = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mut rec = Vec::with_capacity(pkt.len() + 32);
        if self.writer.write_ip_packet(&mut rec, ts, &pkt).is_ok() {
            let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
            let _ = f.write_all(&rec);
        }
    }
}

/// Sets the IPv4 ID and DF flag of `pkt` (IPv4 + UDP + RoCE, built with ID 0)
/// to the ones its ICRC was computed with, if they differ; no change otherwise.
fn recover_ipv4_id(pkt: &mut [u8]) {
    let hl = ip::IPV4_HDR_LEN;
    let ul = ip::UDP_HDR_LEN;
    if pkt.first().map(|b| b >> 4) != Some(4) || pkt.len() < hl + ul + 16 {
        return;
    }
    let (hdr, rest) = pkt.split_at(hl);
    let (udp, roce) = rest.split_at(ul);
    let (body, tail) = roce.split_at(roce.len() - 4);
    let carried = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    let Some((id, df)) = softrdma_wire::icrc::ipv4_id_and_df(hdr, udp, body, carried) else {
        return;
    };
    pkt[4..6].copy_from_slice(&id.to_be_bytes());
    pkt[6] = if df { pkt[6] | 0x40 } else { pkt[6] & !0x40 };
    pkt[10..12].fill(0);
    let c = ip::inet_checksum(&pkt[..hl]);
    pkt[10..12].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// A packet as Linux rxe sends it (IPv4 ID 0x1234) is recorded with that ID,
    /// so its ICRC verifies in the capture.
    #[test]
    fn received_rxe_packet_gets_its_ip_id_back() {
        let (src, dst) = (Ipv4Addr::new(10, 77, 0, 2), Ipv4Addr::new(10, 77, 0, 1));
        // RC SEND_ONLY, 4 bytes of payload, ICRC filled under ID 0x1234.
        let mut roce = vec![
            0x04, 0, 0xFF, 0xFF, 0, 0, 0, 0x11, 0x80, 0, 0, 1, 1, 2, 3, 4,
        ];
        roce.extend_from_slice(&[0; 4]);
        let udp = ip::udp_header(0xC001, 4791, roce.len());
        let real = ip::ipv4_header(
            &ip::Ipv4Fields {
                src,
                dst,
                id: 0x1234,
                tos: 0,
                ttl: 64,
                df: true,
            },
            udp.len() + roce.len(),
        );
        softrdma_wire::icrc::fill(&real, &udp, &mut roce).unwrap();
        let mut pkt = ip::ipv4_header(
            &ip::Ipv4Fields {
                src,
                dst,
                id: 0,
                tos: 0,
                ttl: 64,
                df: true,
            },
            udp.len() + roce.len(),
        )
        .to_vec();
        pkt.extend_from_slice(&udp);
        pkt.extend_from_slice(&roce);
        recover_ipv4_id(&mut pkt);
        assert_eq!(&pkt[..20], &real[..], "ID and header checksum as sent");
        let env = ip::parse_ip_udp(&pkt).unwrap();
        softrdma_wire::icrc::verify(&env).unwrap();
        // A corrupted packet is recorded as it came (ID 0, bad ICRC).
        pkt[4..6].fill(0);
        pkt[10..12].fill(0);
        let c = ip::inet_checksum(&pkt[..20]);
        pkt[10..12].copy_from_slice(&c.to_be_bytes());
        let n = pkt.len();
        pkt[n - 6] ^= 1;
        let corrupted = pkt.clone();
        recover_ipv4_id(&mut pkt);
        assert_eq!(pkt, corrupted);
    }
}
