//! Communication manager MADs (IBTA vol. 1 ch. 12) as rdma_cm uses them over RoCEv2.
//!
//! A CM MAD is the 24-byte [`MadHdr`] followed by a 232-byte message whose type is
//! the header's AttributeID. Each message is a plain `Repr` struct in [`msgs`]
//! with `parse(&[u8])` over the 232-byte body and `write(&mut [u8; 232])`;
//! [`CmMad`] ties header and message together and produces exactly 256 bytes.
//! Field offsets follow `include/rdma/ibta_vol1_c12.h` (see rocev2.md §4.3).
//! Reserved bits are written as zero and ignored on parse.

use core::fmt;

use crate::error::{Error, Result, need};
use crate::mad::{MAD_LEN, MGMT_CLASS_CM, MadHdr};

pub mod msgs;
pub mod rdma_cm;
#[cfg(test)]
mod tests;

pub use msgs::{CmPath, Drep, Dreq, Mra, Rej, Rep, Req, Rtu, SidrRep, SidrReq};
pub use rdma_cm::{CmaHdr, port_space, service_id, service_id_parts};

/// Length of the CM message that follows the MAD header.
pub const CM_MSG_LEN: usize = MAD_LEN - MadHdr::LEN;

/// A 128-bit GID as carried in CM paths (IPv4 peers use `::ffff:a.b.c.d`).
pub type Gid = [u8; 16];

/// CM AttributeIDs (IBTA table 103).
pub mod attr {
    /// ClassPortInfo.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// ConnectRequest.
    pub const REQ: u16 = 0x0010;
    /// MessageReceiptAcknowledgement.
    pub const MRA: u16 = 0x0011;
    /// ConnectReject.
    pub const REJ: u16 = 0x0012;
    /// ConnectReply.
    pub const REP: u16 = 0x0013;
    /// ReadyToUse.
    pub const RTU: u16 = 0x0014;
    /// DisconnectRequest.
    pub const DREQ: u16 = 0x0015;
    /// DisconnectReply.
    pub const DREP: u16 = 0x0016;
    /// ServiceIDResolutionRequest.
    pub const SIDR_REQ: u16 = 0x0017;
    /// ServiceIDResolutionResponse.
    pub const SIDR_REP: u16 = 0x0018;
    /// LoadAlternatePath.
    pub const LAP: u16 = 0x0019;
    /// AlternatePathResponse.
    pub const APR: u16 = 0x001A;
}

/// REJ reason codes (IBTA table 109, `enum ib_cm_rej_reason`).
pub mod rej_reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No EEC available.
    pub const NO_EEC: u16 = 2;
    /// No resources available.
    pub const NO_RESOURCES: u16 = 3;
    /// Timeout.
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// Invalid service ID: no listener (sent by the CM itself).
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// Stale connection.
    pub const STALE_CONN: u16 = 10;
    /// RDC does not exist.
    pub const RDC_NOT_EXIST: u16 = 11;
    /// Primary remote port GID rejected.
    pub const INVALID_GID: u16 = 12;
    /// Primary remote port LID rejected.
    pub const INVALID_LID: u16 = 13;
    /// Primary SL rejected.
    pub const INVALID_SL: u16 = 14;
    /// Primary traffic class rejected.
    pub const INVALID_TRAFFIC_CLASS: u16 = 15;
    /// Primary hop limit rejected.
    pub const INVALID_HOP_LIMIT: u16 = 16;
    /// Primary packet rate rejected.
    pub const INVALID_PACKET_RATE: u16 = 17;
    /// Alternate remote port GID rejected.
    pub const INVALID_ALT_GID: u16 = 18;
    /// Alternate remote port LID rejected.
    pub const INVALID_ALT_LID: u16 = 19;
    /// Alternate SL rejected.
    pub const INVALID_ALT_SL: u16 = 20;
    /// Alternate traffic class rejected.
    pub const INVALID_ALT_TRAFFIC_CLASS: u16 = 21;
    /// Alternate hop limit rejected.
    pub const INVALID_ALT_HOP_LIMIT: u16 = 22;
    /// Alternate packet rate rejected.
    pub const INVALID_ALT_PACKET_RATE: u16 = 23;
    /// Port CM redirection.
    pub const PORT_CM_REDIRECT: u16 = 24;
    /// Port redirection.
    pub const PORT_REDIRECT: u16 = 25;
    /// Invalid path MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// Consumer reject (`rdma_reject`).
    pub const CONSUMER_DEFINED: u16 = 28;
    /// Invalid RNR retry count.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// Duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// Unsupported class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
    /// Invalid primary flow label.
    pub const INVALID_FLOW_LABEL: u16 = 32;
    /// Invalid alternate flow label.
    pub const INVALID_ALT_FLOW_LABEL: u16 = 33;
    /// Vendor option (ECE) not supported.
    pub const VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;

    /// A short name for a reason code, or `"unknown"`.
    pub const fn name(reason: u16) -> &'static str {
        match reason {
            NO_QP => "no QP",
            NO_EEC => "no EEC",
            NO_RESOURCES => "no resources",
            TIMEOUT => "timeout",
            UNSUPPORTED => "unsupported",
            INVALID_COMM_ID => "invalid comm ID",
            INVALID_COMM_INSTANCE => "invalid comm instance",
            INVALID_SERVICE_ID => "invalid service ID",
            INVALID_TRANSPORT_TYPE => "invalid transport type",
            STALE_CONN => "stale connection",
            RDC_NOT_EXIST => "RDC does not exist",
            INVALID_GID => "invalid GID",
            INVALID_LID => "invalid LID",
            INVALID_SL => "invalid SL",
            INVALID_TRAFFIC_CLASS => "invalid traffic class",
            INVALID_HOP_LIMIT => "invalid hop limit",
            INVALID_PACKET_RATE => "invalid packet rate",
            INVALID_ALT_GID => "invalid alt GID",
            INVALID_ALT_LID => "invalid alt LID",
            INVALID_ALT_SL => "invalid alt SL",
            INVALID_ALT_TRAFFIC_CLASS => "invalid alt traffic class",
            INVALID_ALT_HOP_LIMIT => "invalid alt hop limit",
            INVALID_ALT_PACKET_RATE => "invalid alt packet rate",
            PORT_CM_REDIRECT => "port CM redirect",
            PORT_REDIRECT => "port redirect",
            INVALID_MTU => "invalid MTU",
            INSUFFICIENT_RESP_RESOURCES => "insufficient responder resources",
            CONSUMER_DEFINED => "consumer defined",
            INVALID_RNR_RETRY => "invalid RNR retry",
            DUPLICATE_LOCAL_COMM_ID => "duplicate local comm ID",
            INVALID_CLASS_VERSION => "invalid class version",
            INVALID_FLOW_LABEL => "invalid flow label",
            INVALID_ALT_FLOW_LABEL => "invalid alt flow label",
            VENDOR_OPTION_NOT_SUPPORTED => "vendor option not supported",
            _ => "unknown",
        }
    }
}

/// SIDR_REP status values (IBTA table 121).
pub mod sidr_status {
    /// The QPN and Q_Key are valid.
    pub const OK: u8 = 0;
    /// No such service.
    pub const UNSUPPORTED: u8 = 1;
    /// Rejected by the consumer.
    pub const REJECT: u8 = 2;
    /// No QP available.
    pub const NO_QP: u8 = 3;
    /// Redirected (ClassPortInfo in the additional information).
    pub const REDIRECT: u8 = 4;
    /// Unsupported class version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// Values of REJ "Message Rejected" and MRA "Message MRAed".
pub mod msg_kind {
    /// The REQ.
    pub const REQ: u8 = 0;
    /// The REP.
    pub const REP: u8 = 1;
    /// Another message (REJ), or a LAP (MRA).
    pub const OTHER: u8 = 2;
}

/// REQ "Transport Service Type" values.
pub mod transport_type {
    /// Reliable connected.
    pub const RC: u8 = 0;
    /// Unreliable connected.
    pub const UC: u8 = 1;
    /// Reliable datagram.
    pub const RD: u8 = 2;
    /// Extended: see the Extended Transport Type field (XRC).
    pub const EXTENDED: u8 = 3;
}

/// A fixed-size opaque field of a CM message: private data, REJ ARI, SIDR
/// additional information. Receivers always see all `N` bytes, zero padded.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PrivateData<const N: usize>(pub [u8; N]);

impl<const N: usize> PrivateData<N> {
    /// Size of the field.
    pub const LEN: usize = N;

    /// All zeros.
    pub const fn zeroed() -> Self {
        PrivateData([0; N])
    }

    /// `data` followed by zeros; an error if `data` is longer than the field.
    pub fn from_slice(data: &[u8]) -> Result<Self> {
        if data.len() > N {
            return Err(Error::BadLength("private data longer than its CM field"));
        }
        let mut a = [0u8; N];
        a[..data.len()].copy_from_slice(data);
        Ok(PrivateData(a))
    }

    /// The whole field.
    pub const fn as_bytes(&self) -> &[u8; N] {
        &self.0
    }

    /// The field without trailing zero bytes (what a sender most likely put there).
    pub fn trimmed(&self) -> &[u8] {
        let end = self.0.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        &self.0[..end]
    }

    fn read(b: &[u8]) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(&b[..N]);
        PrivateData(a)
    }
}

impl<const N: usize> Default for PrivateData<N> {
    fn default() -> Self {
        Self::zeroed()
    }
}

impl<const N: usize> fmt::Debug for PrivateData<N> {
    // Hex of the non-zero prefix: 200 zero bytes would drown every Debug print.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PrivateData<{N}>(")?;
        for b in self.trimmed() {
            write!(f, "{b:02x}")?;
        }
        f.write_str(")")
    }
}

/// Common interface of the CM message structs.
pub trait CmMsg: Sized + Into<CmMessage> {
    /// The AttributeID of this message.
    const ATTR_ID: u16;
    /// Short name (`"REQ"`, `"SIDR_REP"`, ...).
    const NAME: &'static str;
    /// Parses the 232-byte message body (the MAD after its header).
    fn parse_body(body: &[u8]) -> Result<Self>;
    /// Writes the 232-byte message body, reserved bits zero.
    fn write_body(&self, body: &mut [u8; CM_MSG_LEN]);
    /// A complete 256-byte CM MAD carrying this message with transaction ID `tid`.
    fn to_mad(self, tid: u64) -> [u8; MAD_LEN] {
        CmMad::new(tid, self).to_bytes()
    }
}

/// Checks that `body` is exactly one CM message long.
pub(crate) fn body_of(body: &[u8]) -> Result<&[u8; CM_MSG_LEN]> {
    need(body, CM_MSG_LEN)?;
    body.try_into()
        .map_err(|_| Error::BadLength("CM message longer than 232 bytes"))
}

/// Any CM message, selected by AttributeID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmMessage {
    /// ConnectRequest.
    Req(Req),
    /// MessageReceiptAcknowledgement.
    Mra(Mra),
    /// ConnectReject.
    Rej(Rej),
    /// ConnectReply.
    Rep(Rep),
    /// ReadyToUse.
    Rtu(Rtu),
    /// DisconnectRequest.
    Dreq(Dreq),
    /// DisconnectReply.
    Drep(Drep),
    /// ServiceIDResolutionRequest.
    SidrReq(SidrReq),
    /// ServiceIDResolutionResponse.
    SidrRep(SidrRep),
    /// A message this crate does not decode (ClassPortInfo, LAP, APR, unknown), kept raw.
    Other {
        /// AttributeID.
        attr_id: u16,
        /// The raw 232-byte body.
        body: PrivateData<CM_MSG_LEN>,
    },
}

impl CmMessage {
    /// Parses the body of a message with the given AttributeID.
    pub fn parse(attr_id: u16, body: &[u8]) -> Result<CmMessage> {
        let b = body_of(body)?;
        Ok(match attr_id {
            attr::REQ => CmMessage::Req(Req::parse(b)?),
            attr::MRA => CmMessage::Mra(Mra::parse(b)?),
            attr::REJ => CmMessage::Rej(Rej::parse(b)?),
            attr::REP => CmMessage::Rep(Rep::parse(b)?),
            attr::RTU => CmMessage::Rtu(Rtu::parse(b)?),
            attr::DREQ => CmMessage::Dreq(Dreq::parse(b)?),
            attr::DREP => CmMessage::Drep(Drep::parse(b)?),
            attr::SIDR_REQ => CmMessage::SidrReq(SidrReq::parse(b)?),
            attr::SIDR_REP => CmMessage::SidrRep(SidrRep::parse(b)?),
            _ => CmMessage::Other {
                attr_id,
                body: PrivateData(*b),
            },
        })
    }

    /// The AttributeID of this message.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMessage::Req(_) => attr::REQ,
            CmMessage::Mra(_) => attr::MRA,
            CmMessage::Rej(_) => attr::REJ,
            CmMessage::Rep(_) => attr::REP,
            CmMessage::Rtu(_) => attr::RTU,
            CmMessage::Dreq(_) => attr::DREQ,
            CmMessage::Drep(_) => attr::DREP,
            CmMessage::SidrReq(_) => attr::SIDR_REQ,
            CmMessage::SidrRep(_) => attr::SIDR_REP,
            CmMessage::Other { attr_id, .. } => *attr_id,
        }
    }

    /// Short name of the message type.
    pub fn name(&self) -> &'static str {
        attr_name(self.attr_id())
    }

    /// Writes the 232-byte body.
    pub fn write_body(&self, b: &mut [u8; CM_MSG_LEN]) {
        match self {
            CmMessage::Req(m) => m.write(b),
            CmMessage::Mra(m) => m.write(b),
            CmMessage::Rej(m) => m.write(b),
            CmMessage::Rep(m) => m.write(b),
            CmMessage::Rtu(m) => m.write(b),
            CmMessage::Dreq(m) => m.write(b),
            CmMessage::Drep(m) => m.write(b),
            CmMessage::SidrReq(m) => m.write(b),
            CmMessage::SidrRep(m) => m.write(b),
            CmMessage::Other { body, .. } => *b = body.0,
        }
    }
}

/// Short name of a CM AttributeID (`"REQ"`, `"ClassPortInfo"`, ...; `"unknown"`
/// for IDs the CM class does not define).
pub const fn attr_name(attr_id: u16) -> &'static str {
    match attr_id {
        attr::CLASS_PORT_INFO => "ClassPortInfo",
        attr::REQ => "REQ",
        attr::MRA => "MRA",
        attr::REJ => "REJ",
        attr::REP => "REP",
        attr::RTU => "RTU",
        attr::DREQ => "DREQ",
        attr::DREP => "DREP",
        attr::SIDR_REQ => "SIDR_REQ",
        attr::SIDR_REP => "SIDR_REP",
        attr::LAP => "LAP",
        attr::APR => "APR",
        _ => "unknown",
    }
}

/// A whole CM MAD: common header plus message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmMad {
    /// The MAD header. Its `attr_id` is overridden by the message's when written.
    pub hdr: MadHdr,
    /// The CM message.
    pub msg: CmMessage,
}

impl CmMad {
    /// A MAD carrying `msg` with a standard CM header and transaction ID `tid`.
    pub fn new(tid: u64, msg: impl Into<CmMessage>) -> CmMad {
        let msg = msg.into();
        CmMad {
            hdr: MadHdr::cm(msg.attr_id(), tid),
            msg,
        }
    }

    /// Parses a 256-byte MAD of the CM class.
    ///
    /// Checks the length, base version 1 and management class 0x07; the class
    /// version and method are left for the CM to judge (it answers a wrong class
    /// version with a REJ).
    pub fn parse(mad: &[u8]) -> Result<CmMad> {
        need(mad, MAD_LEN)?;
        if mad.len() != MAD_LEN {
            return Err(Error::BadLength("a MAD is exactly 256 bytes"));
        }
        let hdr = MadHdr::parse(mad)?;
        if hdr.base_version != crate::mad::BASE_VERSION {
            return Err(Error::BadField("MAD base version"));
        }
        if hdr.mgmt_class != MGMT_CLASS_CM {
            return Err(Error::BadField("MAD class is not CM"));
        }
        let msg = CmMessage::parse(hdr.attr_id, &mad[MadHdr::LEN..])?;
        Ok(CmMad { hdr, msg })
    }

    /// Writes the 256-byte MAD into `out`, returning 256.
    pub fn write(&self, out: &mut [u8]) -> Result<usize> {
        if out.len() < MAD_LEN {
            return Err(Error::Truncated {
                need: MAD_LEN,
                have: out.len(),
            });
        }
        let bytes = self.to_bytes();
        out[..MAD_LEN].copy_from_slice(&bytes);
        Ok(MAD_LEN)
    }

    /// The 256-byte MAD.
    pub fn to_bytes(&self) -> [u8; MAD_LEN] {
        let mut out = [0u8; MAD_LEN];
        let mut hdr = self.hdr;
        hdr.attr_id = self.msg.attr_id();
        let (h, rest) = out.split_at_mut(MadHdr::LEN);
        // Both writes target buffers of exactly the right length.
        let _ = hdr.write(h);
        let mut body = [0u8; CM_MSG_LEN];
        self.msg.write_body(&mut body);
        rest.copy_from_slice(&body);
        out
    }
}

// ---- bit-field helpers in IBTA notation, over a checked 232-byte body ----

/// `B[bit]:width` of IBTA notation: `width` bits of byte `byte` starting `bit`
/// bits below its MSB.
pub(crate) fn get_bits(b: &[u8; CM_MSG_LEN], byte: usize, bit: u32, width: u32) -> u8 {
    let shift = 8 - bit - width;
    let mask = ((1u16 << width) - 1) as u8;
    (b[byte] >> shift) & mask
}

/// Stores `v` (masked to `width` bits) into `B[bit]:width`, leaving other bits.
pub(crate) fn set_bits(b: &mut [u8; CM_MSG_LEN], byte: usize, bit: u32, width: u32, v: u8) {
    let shift = 8 - bit - width;
    let mask = ((1u16 << width) - 1) as u8;
    b[byte] = (b[byte] & !(mask << shift)) | ((v & mask) << shift);
}

/// Stores the low 24 bits of `v` at `off..off + 3`.
pub(crate) fn put24(b: &mut [u8; CM_MSG_LEN], off: usize, v: u32) {
    b[off..off + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}
