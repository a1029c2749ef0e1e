//! `SOFTRDMA_PCAP`: every packet the engine sends and receives, as a pcap file
//! Wireshark opens (Ethernet link type, real-looking IPv4/IPv6 + UDP headers,
//! IPv4 ID 0 and DF as Linux sends them, so the ICRC verifies in the capture).

use softrdma_wire::ip;
use softrdma_wire::pcap::{LinkType, PcapWriter};
use std::fs::File;
use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;

#[derive(Debug)]
pub(crate) struct Capture {
    file: Mutex<File>,
    writer: PcapWriter,
}

impl Capture {
    pub(crate) fn create(path: &Path) -> io::Result<Capture> {
        let writer = PcapWriter::new(LinkType::ETHERNET).map_err(io::Error::other)?;
        let mut file = File::create(path)?;
        file.write_all(&writer.file_header())?;
        Ok(Capture {
            file: Mutex::new(file),
            writer,
        })
    }

    /// Records one datagram. Write errors are ignored: capture never stops traffic.
    pub(crate) fn record(&self, src: SocketAddr, dst: SocketAddr, payload: &[u8]) {
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
