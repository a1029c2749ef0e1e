//! Management datagrams (IBTA 13.4): the 24-byte common header every MAD starts with.
//!
//! A MAD is always 256 bytes on QP1 (the GSI QP). The class-specific part of the
//! connection manager (class 0x07) lives in [`crate::cm`]. Fields are big-endian.

use crate::error::{Error, Result, need};

/// Size of every MAD on the wire (IBTA 13.4.2).
pub const MAD_LEN: usize = 256;
/// QPN of the general services interface QP, which carries CM MADs.
pub const GSI_QPN: u32 = 1;
/// The Q_Key of QP1 (IBTA 9.6.1.1): DETH.Q_Key of every GSI datagram.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// MAD base version (the only one IBTA defines for 256-byte MADs).
pub const BASE_VERSION: u8 = 1;
/// Management class of the communication manager.
pub const MGMT_CLASS_CM: u8 = 0x07;
/// CM class version the Linux CM speaks (IBTA 1.2).
pub const CM_CLASS_VERSION: u8 = 2;

/// MAD methods (IBTA 13.4.5); the CM only uses [`method::SEND`].
pub mod method {
    /// Get.
    pub const GET: u8 = 0x01;
    /// Set.
    pub const SET: u8 = 0x02;
    /// Send: every CM message.
    pub const SEND: u8 = 0x03;
    /// Trap.
    pub const TRAP: u8 = 0x05;
    /// Response bit, or'ed into the method of a reply.
    pub const RESP: u8 = 0x80;
}

/// The MAD common header (24 bytes, IBTA 13.4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MadHdr {
    /// BaseVersion (1).
    pub base_version: u8,
    /// Management class (0x07 for CM).
    pub mgmt_class: u8,
    /// Class version (2 for CM).
    pub class_version: u8,
    /// Method (0x03 Send for CM).
    pub method: u8,
    /// Status.
    pub status: u16,
    /// Class specific field.
    pub class_specific: u16,
    /// Transaction ID. The Linux CM sets `(agent hi_tid << 32) | local comm ID`
    /// and replies echo the request's TID.
    pub tid: u64,
    /// Attribute ID: the CM message type (see [`crate::cm::attr`]).
    pub attr_id: u16,
    /// Reserved 16 bits.
    pub resv: u16,
    /// Attribute modifier (newer kernels carry ECE options here).
    pub attr_mod: u32,
}

impl MadHdr {
    /// Header length.
    pub const LEN: usize = 24;

    /// A CM header: base version 1, class 0x07 version 2, method Send.
    pub const fn cm(attr_id: u16, tid: u64) -> MadHdr {
        MadHdr {
            base_version: BASE_VERSION,
            mgmt_class: MGMT_CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: method::SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            resv: 0,
            attr_mod: 0,
        }
    }

    /// Parses the header at the start of `b` (which may be a whole MAD).
    pub fn parse(b: &[u8]) -> Result<MadHdr> {
        need(b, Self::LEN)?;
        Ok(MadHdr {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            method: b[3],
            status: be16(&b[4..]),
            class_specific: be16(&b[6..]),
            tid: be64(&b[8..]),
            attr_id: be16(&b[16..]),
            resv: be16(&b[18..]),
            attr_mod: be32(&b[20..]),
        })
    }

    /// Writes the header into the first 24 bytes of `b`.
    pub fn write(&self, b: &mut [u8]) -> Result<()> {
        if b.len() < Self::LEN {
            return Err(Error::Truncated {
                need: Self::LEN,
                have: b.len(),
            });
        }
        b[0] = self.base_version;
        b[1] = self.mgmt_class;
        b[2] = self.class_version;
        b[3] = self.method;
        b[4..6].copy_from_slice(&self.status.to_be_bytes());
        b[6..8].copy_from_slice(&self.class_specific.to_be_bytes());
        b[8..16].copy_from_slice(&self.tid.to_be_bytes());
        b[16..18].copy_from_slice(&self.attr_id.to_be_bytes());
        b[18..20].copy_from_slice(&self.resv.to_be_bytes());
        b[20..24].copy_from_slice(&self.attr_mod.to_be_bytes());
        Ok(())
    }
}

// Big-endian helpers over slices whose length the caller has checked.
pub(crate) fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
pub(crate) fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}
pub(crate) fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
pub(crate) fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_roundtrip_and_layout() {
        let mut h = MadHdr::cm(0x0010, 0x0000_0002_1791_f49e);
        h.attr_mod = 0x0102_0304;
        let mut b = [0u8; 24];
        h.write(&mut b).unwrap();
        assert_eq!(
            b,
            [
                1, 7, 2, 3, 0, 0, 0, 0, 0, 0, 0, 2, 0x17, 0x91, 0xf4, 0x9e, 0, 0x10, 0, 0, 1, 2, 3,
                4
            ]
        );
        assert_eq!(MadHdr::parse(&b).unwrap(), h);
        assert!(matches!(
            MadHdr::parse(&b[..23]),
            Err(Error::Truncated { need: 24, have: 23 })
        ));
        assert!(h.write(&mut [0u8; 10]).is_err());
    }
}
