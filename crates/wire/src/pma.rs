//! Performance Management MADs (IBTA 16.1.3, class 0x04): the attributes
//! softrdma's device answers (ClassPortInfo, PortCounters,
//! PortCountersExtended) and their layouts.
//!
//! A PMA MAD is the 24-byte common header ([`crate::MadHdr`]), 40 reserved
//! bytes, then 192 bytes of attribute data at [`DATA_OFFSET`]. Counters are
//! big-endian; PortCounters' are narrow and saturate at their maximum
//! (IBTA 16.1.3.5), PortCountersExtended's are 64-bit. Data counters count
//! 4-octet words, as IBTA defines them.

use crate::error::{Result, need};
use crate::mad::{be16, be32, be64};

/// Management class of the Performance Management agent.
pub const MGMT_CLASS_PERF: u8 = 0x04;
/// PMA class version.
pub const PERF_CLASS_VERSION: u8 = 1;
/// Where the attribute data of a PMA MAD starts.
pub const DATA_OFFSET: usize = 64;

/// PMA attribute IDs (IBTA 16.1.3, table 225).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// PortCounters.
    pub const PORT_COUNTERS: u16 = 0x0012;
    /// PortCountersExtended.
    pub const PORT_COUNTERS_EXT: u16 = 0x001D;
}

/// ClassPortInfo.CapabilityMask bits of the PMA (IBTA 16.1.2, A13.6.1).
pub mod cap {
    /// PortCountersExtended is supported.
    pub const EXT_WIDTH: u16 = 1 << 9;
    /// ... including PortCountersExtended without its IETF counters.
    pub const EXT_WIDTH_NOIETF: u16 = 1 << 10;
}

/// MAD status values (IBTA 13.4.7, the "invalid field" code in bits 2-4).
pub mod status {
    /// The class version is not supported.
    pub const BAD_VERSION: u16 = 1 << 2;
    /// The method is not supported.
    pub const BAD_METHOD: u16 = 2 << 2;
    /// The method/attribute combination is not supported.
    pub const BAD_METHOD_ATTR: u16 = 3 << 2;
    /// An attribute field (here: PortSelect) has an invalid value.
    pub const BAD_ATTR_VALUE: u16 = 7 << 2;
}

/// The port counters the device reports, in the units the transport keeps
/// (octets, packets); the encoders convert to IBTA's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Octets sent (UDP payload).
    pub xmit_bytes: u64,
    /// Octets received.
    pub rcv_bytes: u64,
    /// Packets sent.
    pub xmit_pkts: u64,
    /// Packets received.
    pub rcv_pkts: u64,
    /// Packets received with errors (bad ICRC, malformed headers).
    pub rcv_errors: u64,
    /// Packets dropped for a constraint (P_Key, Q_Key, address) violation.
    pub rcv_constraint_errors: u64,
}

fn sat16(v: u64) -> [u8; 2] {
    (v.min(u64::from(u16::MAX)) as u16).to_be_bytes()
}

fn sat32(v: u64) -> [u8; 4] {
    (v.min(u64::from(u32::MAX)) as u32).to_be_bytes()
}

/// Writes PortCounters (attribute 0x0012) for `port` into `data`
/// (192 bytes from [`DATA_OFFSET`]).
pub fn write_port_counters(c: &Counters, port: u8, data: &mut [u8]) -> Result<()> {
    need(data, 44)?;
    data[1] = port;
    data[8..10].copy_from_slice(&sat16(c.rcv_errors));
    data[17] = c.rcv_constraint_errors.min(0xFF) as u8;
    data[24..28].copy_from_slice(&sat32(c.xmit_bytes / 4));
    data[28..32].copy_from_slice(&sat32(c.rcv_bytes / 4));
    data[32..36].copy_from_slice(&sat32(c.xmit_pkts));
    data[36..40].copy_from_slice(&sat32(c.rcv_pkts));
    Ok(())
}

/// Writes PortCountersExtended (attribute 0x001D) for `port` into `data`.
/// Every packet counts as unicast (multicast ones are not counted apart).
pub fn write_port_counters_ext(c: &Counters, port: u8, data: &mut [u8]) -> Result<()> {
    need(data, 72)?;
    data[1] = port;
    let fields = [
        c.xmit_bytes / 4,
        c.rcv_bytes / 4,
        c.xmit_pkts,
        c.rcv_pkts,
        c.xmit_pkts,
        c.rcv_pkts,
        0,
        0,
    ];
    for (i, v) in fields.iter().enumerate() {
        data[8 + 8 * i..16 + 8 * i].copy_from_slice(&v.to_be_bytes());
    }
    Ok(())
}

/// Writes the PMA's ClassPortInfo: class version 1, PortCountersExtended
/// supported, response time value `resp_time` (2^v × 4.096 µs).
pub fn write_class_port_info(resp_time: u8, data: &mut [u8]) -> Result<()> {
    need(data, 8)?;
    data[0] = crate::mad::BASE_VERSION;
    data[1] = PERF_CLASS_VERSION;
    data[2..4].copy_from_slice(&(cap::EXT_WIDTH | cap::EXT_WIDTH_NOIETF).to_be_bytes());
    data[4..8].copy_from_slice(&u32::from(resp_time & 0x1F).to_be_bytes());
    Ok(())
}

/// PortCounters as a reader sees them (IBTA units: data in 4-octet words).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// PortSelect.
    pub port: u8,
    /// PortRcvErrors.
    pub rcv_errors: u16,
    /// PortRcvConstraintErrors.
    pub rcv_constraint_errors: u8,
    /// PortXmitData (words).
    pub xmit_data: u32,
    /// PortRcvData (words).
    pub rcv_data: u32,
    /// PortXmitPkts.
    pub xmit_pkts: u32,
    /// PortRcvPkts.
    pub rcv_pkts: u32,
}

impl PortCounters {
    /// Parses PortCounters attribute data.
    pub fn parse(data: &[u8]) -> Result<PortCounters> {
        need(data, 40)?;
        Ok(PortCounters {
            port: data[1],
            rcv_errors: be16(&data[8..]),
            rcv_constraint_errors: data[17],
            xmit_data: be32(&data[24..]),
            rcv_data: be32(&data[28..]),
            xmit_pkts: be32(&data[32..]),
            rcv_pkts: be32(&data[36..]),
        })
    }
}

/// PortCountersExtended's first four counters (IBTA units).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortCountersExt {
    /// PortXmitData (words).
    pub xmit_data: u64,
    /// PortRcvData (words).
    pub rcv_data: u64,
    /// PortXmitPkts.
    pub xmit_pkts: u64,
    /// PortRcvPkts.
    pub rcv_pkts: u64,
}

impl PortCountersExt {
    /// Parses PortCountersExtended attribute data.
    pub fn parse(data: &[u8]) -> Result<PortCountersExt> {
        need(data, 40)?;
        Ok(PortCountersExt {
            xmit_data: be64(&data[8..]),
            rcv_data: be64(&data[16..]),
            xmit_pkts: be64(&data[24..]),
            rcv_pkts: be64(&data[32..]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters() -> Counters {
        Counters {
            xmit_bytes: 4000,
            rcv_bytes: 8 * 0x1_0000_0000,
            xmit_pkts: 10,
            rcv_pkts: 20,
            rcv_errors: 70_000,
            rcv_constraint_errors: 3,
        }
    }

    /// Offsets as libibmad's field table reads them (IB_PC_*: PortXmitData
    /// at bit 192, PortRcvPkts at bit 288), and saturation of the narrow ones.
    #[test]
    fn port_counters_layout_and_saturation() {
        let mut d = [0u8; 192];
        write_port_counters(&counters(), 1, &mut d).unwrap();
        assert_eq!(d[1], 1);
        assert_eq!(d[8..10], [0xFF, 0xFF]);
        assert_eq!(d[17], 3);
        assert_eq!(d[24..28], 1000u32.to_be_bytes());
        assert_eq!(d[28..32], [0xFF; 4]);
        assert_eq!(d[32..36], 10u32.to_be_bytes());
        assert_eq!(d[36..40], 20u32.to_be_bytes());
        let p = PortCounters::parse(&d).unwrap();
        assert_eq!((p.xmit_data, p.rcv_pkts, p.rcv_errors), (1000, 20, 0xFFFF));
        assert!(write_port_counters(&counters(), 1, &mut [0u8; 43]).is_err());
    }

    #[test]
    fn port_counters_ext_layout() {
        let mut d = [0u8; 192];
        write_port_counters_ext(&counters(), 1, &mut d).unwrap();
        assert_eq!(d[8..16], 1000u64.to_be_bytes());
        assert_eq!(d[16..24], (2 * 0x1_0000_0000u64).to_be_bytes());
        assert_eq!(d[40..48], 10u64.to_be_bytes());
        assert_eq!(d[56..72], [0; 16]);
        let p = PortCountersExt::parse(&d).unwrap();
        assert_eq!((p.xmit_pkts, p.rcv_pkts), (10, 20));
    }

    #[test]
    fn class_port_info_announces_extended_counters() {
        let mut d = [0u8; 192];
        write_class_port_info(18, &mut d).unwrap();
        assert_eq!(d[..8], [1, 1, 0x06, 0x00, 0, 0, 0, 18]);
    }
}
