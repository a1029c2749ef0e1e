//! Classic libpcap files: a reader over an in-memory file and a writer into a `Vec`.
//!
//! The reader accepts both byte orders, microsecond and nanosecond magic, and the
//! link types a RoCEv2 capture is likely to have (Ethernet, Linux cooked v1/v2,
//! raw IP). It yields each frame's bytes and, through [`Record::ip_packet`], the
//! IP packet inside. Truncated or garbage files give [`Error`]s, never panics.
//! The writer produces files Wireshark opens: nanosecond magic, host-independent
//! little-endian fields, Ethernet (with a synthetic header) or raw IP link type.

use core::fmt;

use crate::error::{Error, Result, need};

/// Length of the pcap file header.
pub const FILE_HDR_LEN: usize = 24;
/// Length of a per-record header.
pub const RECORD_HDR_LEN: usize = 16;
/// Snapshot length the writer declares (tcpdump's default).
pub const DEFAULT_SNAPLEN: u32 = 262_144;

const MAGIC_USEC: u32 = 0xa1b2_c3d4;
const MAGIC_NSEC: u32 = 0xa1b2_3c4d;
const PCAPNG_SHB: u32 = 0x0a0d_0d0a;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;
const ETHERTYPE_VLAN_OLD: u16 = 0x9100;

/// A pcap link-layer header type (open: unknown values are representable).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkType(pub u32);

impl LinkType {
    /// Ethernet II (DLT_EN10MB).
    pub const ETHERNET: LinkType = LinkType(1);
    /// Raw IP, version from the first nibble.
    pub const RAW: LinkType = LinkType(101);
    /// Linux cooked capture v1 (`tcpdump -i any`, older).
    pub const LINUX_SLL: LinkType = LinkType(113);
    /// Raw IPv4.
    pub const IPV4: LinkType = LinkType(228);
    /// Raw IPv6.
    pub const IPV6: LinkType = LinkType(229);
    /// Linux cooked capture v2 (`tcpdump -i any`, 4.99+).
    pub const LINUX_SLL2: LinkType = LinkType(276);

    /// True for the link types [`Record::ip_packet`] understands.
    pub const fn is_supported(self) -> bool {
        matches!(self.0, 1 | 101 | 113 | 228 | 229 | 276)
    }
}

impl fmt::Debug for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self.0 {
            1 => "ETHERNET",
            101 => "RAW",
            113 => "LINUX_SLL",
            228 => "IPV4",
            229 => "IPV6",
            276 => "LINUX_SLL2",
            _ => return write!(f, "LinkType({})", self.0),
        };
        f.write_str(name)
    }
}

/// The fields of a pcap file header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileHeader {
    /// True if the file's fields are big-endian.
    pub big_endian: bool,
    /// True for the nanosecond-resolution magic.
    pub nanos: bool,
    /// Format version (2.4).
    pub version: (u16, u16),
    /// Snapshot length.
    pub snaplen: u32,
    /// Link type (the low 16 bits of the header's link field).
    pub link: LinkType,
}

/// One captured frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record<'a> {
    /// Timestamp seconds.
    pub ts_sec: u32,
    /// Timestamp fraction in nanoseconds (converted from microseconds if needed).
    pub ts_nsec: u32,
    /// Length of the frame on the wire (may exceed `data.len()` when cut by snaplen).
    pub orig_len: u32,
    /// The captured bytes, starting at the link-layer header.
    pub data: &'a [u8],
    /// Link type of the file.
    pub link: LinkType,
}

impl<'a> Record<'a> {
    /// Timestamp in nanoseconds since the epoch.
    pub fn ts_ns(&self) -> u64 {
        u64::from(self.ts_sec) * 1_000_000_000 + u64::from(self.ts_nsec)
    }

    /// The IP packet inside the frame, or `None` if the frame does not carry
    /// IPv4/IPv6 (ARP, LLDP, an unsupported link type, a short frame).
    ///
    /// The slice runs to the end of the captured frame; Ethernet padding may
    /// follow the packet, so use the IP length fields (as [`crate::ip::parse_ip_udp`] does).
    pub fn ip_packet(&self) -> Option<&'a [u8]> {
        let d = self.data;
        let (proto, off) = match self.link {
            LinkType::ETHERNET => {
                let mut off = 12;
                let mut et = be16(d.get(off..off + 2)?);
                // Up to two VLAN tags (802.1Q, 802.1ad QinQ).
                for _ in 0..2 {
                    if matches!(et, ETHERTYPE_VLAN | ETHERTYPE_QINQ | ETHERTYPE_VLAN_OLD) {
                        off += 4;
                        et = be16(d.get(off..off + 2)?);
                    }
                }
                (et, off + 2)
            }
            // SLL: packet type, ARPHRD, addr len, 8-byte addr, protocol at 14.
            LinkType::LINUX_SLL => (be16(d.get(14..16)?), 16),
            // SLL2: protocol at 0, then 18 more bytes.
            LinkType::LINUX_SLL2 => (be16(d.get(0..2)?), 20),
            LinkType::RAW => match d.first()? >> 4 {
                4 => (ETHERTYPE_IPV4, 0),
                6 => (ETHERTYPE_IPV6, 0),
                _ => return None,
            },
            LinkType::IPV4 => (ETHERTYPE_IPV4, 0),
            LinkType::IPV6 => (ETHERTYPE_IPV6, 0),
            _ => return None,
        };
        let ip = d.get(off..)?;
        let want = match proto {
            ETHERTYPE_IPV4 => 4,
            ETHERTYPE_IPV6 => 6,
            _ => return None,
        };
        match ip.first() {
            Some(b) if b >> 4 == want => Some(ip),
            _ => None,
        }
    }
}

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// Reads a pcap file held in memory.
#[derive(Debug, Clone)]
pub struct PcapReader<'a> {
    header: FileHeader,
    rest: &'a [u8],
    failed: bool,
}

impl<'a> PcapReader<'a> {
    /// Checks the file header. Errors on a short file, an unknown magic (pcapng
    /// gets its own message) or an unsupported link type.
    pub fn new(file: &'a [u8]) -> Result<PcapReader<'a>> {
        need(file, 4)?;
        let magic_le = u32::from_le_bytes([file[0], file[1], file[2], file[3]]);
        let (big_endian, nanos) = match magic_le {
            MAGIC_USEC => (false, false),
            MAGIC_NSEC => (false, true),
            m if m.swap_bytes() == MAGIC_USEC => (true, false),
            m if m.swap_bytes() == MAGIC_NSEC => (true, true),
            PCAPNG_SHB => {
                return Err(Error::BadFile(
                    "pcapng is not supported; convert it with `editcap -F pcap IN OUT`",
                ));
            }
            _ => return Err(Error::BadFile("not a pcap file (unknown magic number)")),
        };
        need(file, FILE_HDR_LEN)?;
        let r16 = |o: usize| {
            let b = [file[o], file[o + 1]];
            if big_endian {
                u16::from_be_bytes(b)
            } else {
                u16::from_le_bytes(b)
            }
        };
        let r32 = |o: usize| read32(&file[o..], big_endian);
        let link = LinkType(r32(20) & 0xFFFF);
        if !link.is_supported() {
            return Err(Error::UnsupportedLinkType(link.0));
        }
        Ok(PcapReader {
            header: FileHeader {
                big_endian,
                nanos,
                version: (r16(4), r16(6)),
                snaplen: r32(16),
                link,
            },
            rest: &file[FILE_HDR_LEN..],
            failed: false,
        })
    }

    /// The file header.
    pub fn header(&self) -> FileHeader {
        self.header
    }
}

fn read32(b: &[u8], big_endian: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big_endian {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

impl<'a> Iterator for PcapReader<'a> {
    type Item = Result<Record<'a>>;

    /// The next record; after an error (a truncated record) iteration ends.
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let r = self.rest;
        let be = self.header.big_endian;
        if r.len() < RECORD_HDR_LEN {
            self.failed = true;
            return Some(Err(Error::Truncated {
                need: RECORD_HDR_LEN,
                have: r.len(),
            }));
        }
        let ts_sec = read32(r, be);
        let frac = read32(&r[4..], be);
        let incl = read32(&r[8..], be) as usize;
        let orig_len = read32(&r[12..], be);
        let ts_nsec = if self.header.nanos {
            frac
        } else {
            frac.saturating_mul(1000)
        };
        let body = &r[RECORD_HDR_LEN..];
        if incl > body.len() {
            self.failed = true;
            return Some(Err(Error::Truncated {
                need: incl,
                have: body.len(),
            }));
        }
        let (data, rest) = body.split_at(incl);
        self.rest = rest;
        Some(Ok(Record {
            ts_sec,
            ts_nsec,
            orig_len,
            data,
            link: self.header.link,
        }))
    }
}

/// Writes pcap files into a byte vector (the caller decides where bytes go).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PcapWriter {
    link: LinkType,
    snaplen: u32,
}

impl PcapWriter {
    /// A writer for `link`, which must be [`LinkType::ETHERNET`] (a synthetic
    /// Ethernet header is added), [`LinkType::RAW`], [`LinkType::IPV4`] or
    /// [`LinkType::IPV6`].
    pub fn new(link: LinkType) -> Result<PcapWriter> {
        match link {
            LinkType::ETHERNET | LinkType::RAW | LinkType::IPV4 | LinkType::IPV6 => {
                Ok(PcapWriter {
                    link,
                    snaplen: DEFAULT_SNAPLEN,
                })
            }
            _ => Err(Error::UnsupportedLinkType(link.0)),
        }
    }

    /// The link type written.
    pub fn link(&self) -> LinkType {
        self.link
    }

    /// The 24-byte file header (little-endian, nanosecond timestamps).
    pub fn file_header(&self) -> [u8; FILE_HDR_LEN] {
        let mut h = [0u8; FILE_HDR_LEN];
        h[0..4].copy_from_slice(&MAGIC_NSEC.to_le_bytes());
        h[4..6].copy_from_slice(&2u16.to_le_bytes());
        h[6..8].copy_from_slice(&4u16.to_le_bytes());
        // thiszone and sigfigs stay 0.
        h[16..20].copy_from_slice(&self.snaplen.to_le_bytes());
        h[20..24].copy_from_slice(&self.link.0.to_le_bytes());
        h
    }

    /// Appends the file header to `out`.
    pub fn write_header(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.file_header());
    }

    /// Appends one record holding the IP packet `ip` (starting at the IP header)
    /// captured at `ts_ns` nanoseconds since the epoch.
    ///
    /// Errors if `ip` is not IPv4/IPv6 (or not the family a raw IPv4/IPv6 link
    /// type requires), or is longer than the snapshot length.
    pub fn write_ip_packet(&self, out: &mut Vec<u8>, ts_ns: u64, ip: &[u8]) -> Result<()> {
        let version = ip.first().map(|b| b >> 4);
        let ethertype = match version {
            Some(4) => ETHERTYPE_IPV4,
            Some(6) => ETHERTYPE_IPV6,
            _ => return Err(Error::BadField("IP version")),
        };
        match (self.link, version) {
            (LinkType::IPV4, Some(6)) | (LinkType::IPV6, Some(4)) => {
                return Err(Error::BadField("IP version does not match the link type"));
            }
            _ => {}
        }
        let eth = self.link == LinkType::ETHERNET;
        let frame_len = ip.len() + if eth { 14 } else { 0 };
        if frame_len > self.snaplen as usize {
            return Err(Error::BadLength("packet longer than the snapshot length"));
        }
        let secs = u32::try_from(ts_ns / 1_000_000_000)
            .map_err(|_| Error::BadField("timestamp after 2106"))?;
        let nsec = (ts_ns % 1_000_000_000) as u32;
        let len = frame_len as u32;
        out.extend_from_slice(&secs.to_le_bytes());
        out.extend_from_slice(&nsec.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&len.to_le_bytes());
        if eth {
            out.extend_from_slice(&synthetic_mac(ip, false));
            out.extend_from_slice(&synthetic_mac(ip, true));
            out.extend_from_slice(&ethertype.to_be_bytes());
        }
        out.extend_from_slice(ip);
        Ok(())
    }
}

/// A locally administered MAC `02:00:a:b:c:d` from the low 32 bits of the
/// packet's destination (or source) address, so each host keeps one MAC in
/// Wireshark's conversation views.
fn synthetic_mac(ip: &[u8], source: bool) -> [u8; 6] {
    let at = match (ip.first().map(|b| b >> 4), source) {
        (Some(4), false) => 16,
        (Some(4), true) => 12,
        (_, false) => 36,
        (_, true) => 20,
    };
    let mut m = [0x02, 0, 0, 0, 0, 0];
    if let Some(a) = ip.get(at..at + 4) {
        m[2..].copy_from_slice(a);
    }
    m
}

#[cfg(test)]
#[path = "pcap_tests.rs"]
mod tests;
