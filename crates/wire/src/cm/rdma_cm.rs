//! rdma_cm conventions on top of the IB CM (`drivers/infiniband/core/cma.c`):
//! service IDs built from a port space and a port, and the 36-byte `cma_hdr`
//! at the start of REQ and SIDR_REQ private data.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::{Error, Result, need};

/// rdma_cm port spaces (`enum rdma_ucm_port_space`).
pub mod port_space {
    /// IPoIB.
    pub const IPOIB: u16 = 0x0002;
    /// TCP-like: RC/UC connections (REQ/REP).
    pub const TCP: u16 = 0x0106;
    /// UDP-like: UD services (SIDR).
    pub const UDP: u16 = 0x0111;
    /// Native IB.
    pub const IB: u16 = 0x013F;
}

/// The IB service ID rdma_cm uses for `port` in `port_space`:
/// `0x0000_0000_01pp_pppp` i.e. `(port_space << 16) | port` (`rdma_get_service_id`).
pub const fn service_id(port_space: u16, port: u16) -> u64 {
    ((port_space as u64) << 16) | port as u64
}

/// Splits an rdma_cm service ID into (port space, port), or `None` if its top
/// 32 bits are not zero (then it is not one rdma_cm made).
pub const fn service_id_parts(sid: u64) -> Option<(u16, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    Some(((sid >> 16) as u16, sid as u16))
}

/// `struct cma_hdr`: the first 36 bytes of REQ / SIDR_REQ private data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmaHdr {
    /// `cma_version` (0).
    pub version: u8,
    /// IP version from bits 7:4 of byte 1 (4 or 6).
    pub ip_version: u8,
    /// Source port of the active side (big-endian on the wire).
    pub src_port: u16,
    /// Source address.
    pub src: IpAddr,
    /// Destination address: the listener's address.
    pub dst: IpAddr,
}

impl CmaHdr {
    /// Header length.
    pub const LEN: usize = 36;
    /// The only `cma_version` rdma_cm sends.
    pub const VERSION: u8 = 0;

    /// A header for a connection from `src:src_port` to `dst`. The IP version
    /// comes from `src`; mixing families is the caller's mistake and is written
    /// as given (each address in its own form).
    pub fn new(src: IpAddr, src_port: u16, dst: IpAddr) -> CmaHdr {
        CmaHdr {
            version: Self::VERSION,
            ip_version: if src.is_ipv4() { 4 } else { 6 },
            src_port,
            src,
            dst,
        }
    }

    /// Parses the header from the start of a private-data field.
    pub fn parse(b: &[u8]) -> Result<CmaHdr> {
        need(b, Self::LEN)?;
        let ip_version = b[1] >> 4;
        let (src, dst) = match ip_version {
            // cma_ip_addr.ip4: three zero words, then the address.
            4 => (
                IpAddr::V4(Ipv4Addr::new(b[16], b[17], b[18], b[19])),
                IpAddr::V4(Ipv4Addr::new(b[32], b[33], b[34], b[35])),
            ),
            6 => {
                let mut s = [0u8; 16];
                let mut d = [0u8; 16];
                s.copy_from_slice(&b[4..20]);
                d.copy_from_slice(&b[20..36]);
                (IpAddr::V6(Ipv6Addr::from(s)), IpAddr::V6(Ipv6Addr::from(d)))
            }
            _ => return Err(Error::BadField("cma_hdr IP version")),
        };
        Ok(CmaHdr {
            version: b[0],
            ip_version,
            src_port: u16::from_be_bytes([b[2], b[3]]),
            src,
            dst,
        })
    }

    /// Writes the 36 bytes at the start of `b`.
    pub fn write(&self, b: &mut [u8]) -> Result<()> {
        need(b, Self::LEN)?;
        b[..Self::LEN].fill(0);
        b[0] = self.version;
        b[1] = self.ip_version << 4;
        b[2..4].copy_from_slice(&self.src_port.to_be_bytes());
        put_addr(&mut b[4..20], self.src);
        put_addr(&mut b[20..36], self.dst);
        Ok(())
    }

    /// The 36 bytes.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        // Cannot fail: the buffer has exactly LEN bytes.
        let _ = self.write(&mut b);
        b
    }
}

fn put_addr(b: &mut [u8], a: IpAddr) {
    match a {
        IpAddr::V4(v) => b[12..16].copy_from_slice(&v.octets()),
        IpAddr::V6(v) => b.copy_from_slice(&v.octets()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids() {
        // rocev2.md §4.4: TCP port 7471 -> 0x0000000001061D2F.
        assert_eq!(service_id(port_space::TCP, 7471), 0x0000_0000_0106_1D2F);
        assert_eq!(service_id_parts(0x0106_1D2F), Some((port_space::TCP, 7471)));
        assert_eq!(
            service_id_parts(service_id(port_space::UDP, 7174)),
            Some((0x0111, 7174))
        );
        assert_eq!(service_id_parts(0x1234_0000_0106_1D2F), None);
        assert_eq!(service_id_parts(0x1_0000_0000), None);
        assert_eq!(
            service_id_parts(service_id(port_space::IPOIB, 1)),
            Some((2, 1))
        );
    }

    #[test]
    fn cma_hdr_v4_layout() {
        let h = CmaHdr::new(
            "10.77.0.3".parse().unwrap(),
            0xb573,
            "10.77.0.2".parse().unwrap(),
        );
        let b = h.to_bytes();
        assert_eq!(&b[..4], &[0x00, 0x40, 0xb5, 0x73]);
        assert_eq!(&b[4..16], &[0; 12]);
        assert_eq!(&b[16..20], &[10, 77, 0, 3]);
        assert_eq!(&b[20..32], &[0; 12]);
        assert_eq!(&b[32..36], &[10, 77, 0, 2]);
        assert_eq!(CmaHdr::parse(&b).unwrap(), h);
    }

    #[test]
    fn cma_hdr_v6_and_errors() {
        let h = CmaHdr::new("fe80::1".parse().unwrap(), 1, "fe80::2".parse().unwrap());
        let b = h.to_bytes();
        assert_eq!(b[1], 0x60);
        assert_eq!(b[19], 1);
        assert_eq!(b[35], 2);
        assert_eq!(CmaHdr::parse(&b).unwrap(), h);
        assert!(matches!(
            CmaHdr::parse(&b[..35]),
            Err(Error::Truncated { .. })
        ));
        let mut bad = b;
        bad[1] = 0x50;
        assert_eq!(
            CmaHdr::parse(&bad),
            Err(Error::BadField("cma_hdr IP version"))
        );
    }
}
