//! The CM message bodies (IBTA tables 106-121), offsets relative to the message
//! start (MAD byte 24). `B[b]:n` in the comments is IBTA notation: n bits of
//! byte B starting b bits below its MSB.

use super::{CM_MSG_LEN, CmMessage, CmMsg, Gid, PrivateData, attr, body_of, get_bits, put24};
use super::{rdma_cm::CmaHdr, set_bits};
use crate::error::Result;
use crate::mad::{be16, be24, be32, be64};
use crate::psn::Psn;

fn gid_at(b: &[u8; CM_MSG_LEN], off: usize) -> Gid {
    let mut g = [0u8; 16];
    g.copy_from_slice(&b[off..off + 16]);
    g
}

fn put_bool(b: &mut [u8; CM_MSG_LEN], byte: usize, bit: u32, v: bool) {
    set_bits(b, byte, bit, 1, u8::from(v));
}

/// Implements [`CmMsg`] and the conversion into [`CmMessage`] for a message struct
/// with inherent `parse`/`write`.
macro_rules! cm_msg {
    ($ty:ident, $variant:ident, $attr:expr, $name:expr) => {
        impl CmMsg for $ty {
            const ATTR_ID: u16 = $attr;
            const NAME: &'static str = $name;
            fn parse_body(body: &[u8]) -> Result<Self> {
                $ty::parse(body)
            }
            fn write_body(&self, body: &mut [u8; CM_MSG_LEN]) {
                self.write(body)
            }
        }
        impl From<$ty> for CmMessage {
            fn from(m: $ty) -> CmMessage {
                CmMessage::$variant(m)
            }
        }
    };
}

/// A path description inside a REQ (44 bytes: primary at 52, alternate at 96).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmPath {
    /// Local port LID (0xFFFF, permissive, for routed RoCEv2).
    pub local_lid: u16,
    /// Remote port LID.
    pub remote_lid: u16,
    /// Local port GID.
    pub local_gid: Gid,
    /// Remote port GID.
    pub remote_gid: Gid,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Packet rate (6 bits, `enum ib_rate`).
    pub packet_rate: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Subnet local.
    pub subnet_local: bool,
    /// Local ACK timeout (5 bits): the QP retransmit timeout.
    pub local_ack_timeout: u8,
}

impl CmPath {
    /// Length of a path in the REQ.
    pub const LEN: usize = 44;

    fn read(b: &[u8; CM_MSG_LEN], o: usize) -> CmPath {
        CmPath {
            local_lid: be16(&b[o..]),                     // o+0:16
            remote_lid: be16(&b[o + 2..]),                // o+2:16
            local_gid: gid_at(b, o + 4),                  // o+4:128
            remote_gid: gid_at(b, o + 20),                // o+20:128
            flow_label: be32(&b[o + 36..]) >> 12,         // o+36:20
            packet_rate: get_bits(b, o + 39, 2, 6),       // o+39[2]:6
            traffic_class: b[o + 40],                     // o+40:8
            hop_limit: b[o + 41],                         // o+41:8
            sl: get_bits(b, o + 42, 0, 4),                // o+42[0]:4
            subnet_local: get_bits(b, o + 42, 4, 1) != 0, // o+42[4]:1
            local_ack_timeout: get_bits(b, o + 43, 0, 5), // o+43[0]:5
        }
    }

    fn write(&self, b: &mut [u8; CM_MSG_LEN], o: usize) {
        b[o..o + 2].copy_from_slice(&self.local_lid.to_be_bytes());
        b[o + 2..o + 4].copy_from_slice(&self.remote_lid.to_be_bytes());
        b[o + 4..o + 20].copy_from_slice(&self.local_gid);
        b[o + 20..o + 36].copy_from_slice(&self.remote_gid);
        // Flow label takes the top 20 bits of the word at o+36; bits 20..26 are reserved.
        put24(b, o + 36, (self.flow_label & 0xF_FFFF) << 4);
        set_bits(b, o + 39, 2, 6, self.packet_rate);
        b[o + 40] = self.traffic_class;
        b[o + 41] = self.hop_limit;
        set_bits(b, o + 42, 0, 4, self.sl);
        put_bool(b, o + 42, 4, self.subnet_local);
        set_bits(b, o + 43, 0, 5, self.local_ack_timeout);
    }
}

/// ConnectRequest (table 106).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Req {
    /// 0:32 local communication ID.
    pub local_comm_id: u32,
    /// 5:24 ECE vendor ID (newer kernels; 0 otherwise).
    pub vendor_id: u32,
    /// 8:64 service ID (rdma_cm: see [`super::service_id`]).
    pub service_id: u64,
    /// 16:64 local CA GUID.
    pub local_ca_guid: u64,
    /// 28:32 local Q_Key (0 for RC).
    pub local_qkey: u32,
    /// 32:24 local QPN.
    pub local_qpn: u32,
    /// 35:8 responder resources.
    pub responder_resources: u8,
    /// 36:24 local EECN.
    pub local_eecn: u32,
    /// 39:8 initiator depth.
    pub initiator_depth: u8,
    /// 40:24 remote EECN.
    pub remote_eecn: u32,
    /// `43[0]:5` remote CM response timeout.
    pub remote_cm_response_timeout: u8,
    /// `43[5]:2` transport service type (see [`super::transport_type`]).
    pub transport_type: u8,
    /// `43[7]:1` end-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// 44:24 starting PSN: the passive side's receive PSN.
    pub starting_psn: Psn,
    /// `47[0]:5` local CM response timeout.
    pub local_cm_response_timeout: u8,
    /// `47[5]:3` retry count.
    pub retry_count: u8,
    /// 48:16 P_Key.
    pub pkey: u16,
    /// `50[0]:4` path MTU enum (1=256 .. 5=4096).
    pub path_mtu: u8,
    /// `50[4]:1` RDC exists.
    pub rdc_exists: bool,
    /// `50[5]:3` RNR retry count.
    pub rnr_retry_count: u8,
    /// `51[0]:4` max CM retries.
    pub max_cm_retries: u8,
    /// `51[4]:1` the QP has an SRQ.
    pub srq: bool,
    /// `51[5]:3` extended transport type.
    pub extended_transport_type: u8,
    /// 52..96 primary path.
    pub primary_path: CmPath,
    /// 96..140 alternate path (all zero when unused).
    pub alternate_path: CmPath,
    /// `139[5]:1` SAP supported.
    pub sap_supported: bool,
    /// 140: 92 bytes of private data (rdma_cm puts a [`CmaHdr`] first).
    pub private_data: PrivateData<92>,
}

impl Req {
    /// Parses the 232-byte message body.
    pub fn parse(body: &[u8]) -> Result<Req> {
        let b = body_of(body)?;
        Ok(Req {
            local_comm_id: be32(b),
            vendor_id: be24(&b[5..]),
            service_id: be64(&b[8..]),
            local_ca_guid: be64(&b[16..]),
            local_qkey: be32(&b[28..]),
            local_qpn: be24(&b[32..]),
            responder_resources: b[35],
            local_eecn: be24(&b[36..]),
            initiator_depth: b[39],
            remote_eecn: be24(&b[40..]),
            remote_cm_response_timeout: get_bits(b, 43, 0, 5),
            transport_type: get_bits(b, 43, 5, 2),
            end_to_end_flow_control: get_bits(b, 43, 7, 1) != 0,
            starting_psn: Psn::new(be24(&b[44..])),
            local_cm_response_timeout: get_bits(b, 47, 0, 5),
            retry_count: get_bits(b, 47, 5, 3),
            pkey: be16(&b[48..]),
            path_mtu: get_bits(b, 50, 0, 4),
            rdc_exists: get_bits(b, 50, 4, 1) != 0,
            rnr_retry_count: get_bits(b, 50, 5, 3),
            max_cm_retries: get_bits(b, 51, 0, 4),
            srq: get_bits(b, 51, 4, 1) != 0,
            extended_transport_type: get_bits(b, 51, 5, 3),
            primary_path: CmPath::read(b, 52),
            alternate_path: CmPath::read(b, 96),
            sap_supported: get_bits(b, 139, 5, 1) != 0,
            private_data: PrivateData::read(&b[140..]),
        })
    }

    /// Writes the 232-byte message body.
    pub fn write(&self, b: &mut [u8; CM_MSG_LEN]) {
        b.fill(0);
        b[..4].copy_from_slice(&self.local_comm_id.to_be_bytes());
        put24(b, 5, self.vendor_id);
        b[8..16].copy_from_slice(&self.service_id.to_be_bytes());
        b[16..24].copy_from_slice(&self.local_ca_guid.to_be_bytes());
        b[28..32].copy_from_slice(&self.local_qkey.to_be_bytes());
        put24(b, 32, self.local_qpn);
        b[35] = self.responder_resources;
        put24(b, 36, self.local_eecn);
        b[39] = self.initiator_depth;
        put24(b, 40, self.remote_eecn);
        set_bits(b, 43, 0, 5, self.remote_cm_response_timeout);
        set_bits(b, 43, 5, 2, self.transport_type);
        put_bool(b, 43, 7, self.end_to_end_flow_control);
        put24(b, 44, self.starting_psn.get());
        set_bits(b, 47, 0, 5, self.local_cm_response_timeout);
        set_bits(b, 47, 5, 3, self.retry_count);
        b[48..50].copy_from_slice(&self.pkey.to_be_bytes());
        set_bits(b, 50, 0, 4, self.path_mtu);
        put_bool(b, 50, 4, self.rdc_exists);
        set_bits(b, 50, 5, 3, self.rnr_retry_count);
        set_bits(b, 51, 0, 4, self.max_cm_retries);
        put_bool(b, 51, 4, self.srq);
        set_bits(b, 51, 5, 3, self.extended_transport_type);
        self.primary_path.write(b, 52);
        self.alternate_path.write(b, 96);
        put_bool(b, 139, 5, self.sap_supported);
        b[140..].copy_from_slice(&self.private_data.0);
    }

    /// The rdma_cm header at the start of the private data.
    pub fn cma_hdr(&self) -> Result<CmaHdr> {
        CmaHdr::parse(&self.private_data.0)
    }
}
cm_msg!(Req, Req, attr::REQ, "REQ");

/// ConnectReply (table 110).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rep {
    /// 0:32 local communication ID.
    pub local_comm_id: u32,
    /// 4:32 remote communication ID (the REQ's local one).
    pub remote_comm_id: u32,
    /// 8:32 local Q_Key.
    pub local_qkey: u32,
    /// 12:24 local QPN.
    pub local_qpn: u32,
    /// 16:24 local EE context number.
    pub local_eecn: u32,
    /// 20:24 starting PSN: the active side's receive PSN.
    pub starting_psn: Psn,
    /// ECE vendor ID, split over 15:8 (high), 19:8 (middle), 23:8 (low).
    pub vendor_id: u32,
    /// 24:8 responder resources.
    pub responder_resources: u8,
    /// 25:8 initiator depth.
    pub initiator_depth: u8,
    /// `26[0]:5` target ACK delay.
    pub target_ack_delay: u8,
    /// `26[5]:2` failover accepted.
    pub failover_accepted: u8,
    /// `26[7]:1` end-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// `27[0]:3` RNR retry count.
    pub rnr_retry_count: u8,
    /// `27[3]:1` SRQ.
    pub srq: bool,
    /// 28:64 local CA GUID.
    pub local_ca_guid: u64,
    /// 36: 196 bytes of private data.
    pub private_data: PrivateData<196>,
}

impl Rep {
    /// Parses the 232-byte message body.
    pub fn parse(body: &[u8]) -> Result<Rep> {
        let b = body_of(body)?;
        Ok(Rep {
            local_comm_id: be32(b),
            remote_comm_id: be32(&b[4..]),
            local_qkey: be32(&b[8..]),
            local_qpn: be24(&b[12..]),
            local_eecn: be24(&b[16..]),
            starting_psn: Psn::new(be24(&b[20..])),
            vendor_id: u32::from_be_bytes([0, b[15], b[19], b[23]]),
            responder_resources: b[24],
            initiator_depth: b[25],
            target_ack_delay: get_bits(b, 26, 0, 5),
            failover_accepted: get_bits(b, 26, 5, 2),
            end_to_end_flow_control: get_bits(b, 26, 7, 1) != 0,
            rnr_retry_count: get_bits(b, 27, 0, 3),
            srq: get_bits(b, 27, 3, 1) != 0,
            local_ca_guid: be64(&b[28..]),
            private_data: PrivateData::read(&b[36..]),
        })
    }

    /// Writes the 232-byte message body.
    pub fn write(&self, b: &mut [u8; CM_MSG_LEN]) {
        b.fill(0);
        b[..4].copy_from_slice(&self.local_comm_id.to_be_bytes());
        b[4..8].copy_from_slice(&self.remote_comm_id.to_be_bytes());
        b[8..12].copy_from_slice(&self.local_qkey.to_be_bytes());
        put24(b, 12, self.local_qpn);
        put24(b, 16, self.local_eecn);
        put24(b, 20, self.starting_psn.get());
        let v = self.vendor_id.to_be_bytes();
        (b[15], b[19], b[23]) = (v[1], v[2], v[3]);
        b[24] = self.responder_resources;
        b[25] = self.initiator_depth;
        set_bits(b, 26, 0, 5, self.target_ack_delay);
        set_bits(b, 26, 5, 2, self.failover_accepted);
        put_bool(b, 26, 7, self.end_to_end_flow_control);
        set_bits(b, 27, 0, 3, self.rnr_retry_count);
        put_bool(b, 27, 3, self.srq);
        b[28..36].copy_from_slice(&self.local_ca_guid.to_be_bytes());
        b[36..].copy_from_slice(&self.private_data.0);
    }
}
cm_msg!(Rep, Rep, attr::REP, "REP");

/// Defines a message that is two comm IDs followed by private data (RTU, DREP).
macro_rules! two_ids_msg {
    ($(#[$doc:meta])* $ty:ident, $attr:expr, $name:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Default)]
        pub struct $ty {
            /// 0:32 local communication ID.
            pub local_comm_id: u32,
            /// 4:32 remote communication ID.
            pub remote_comm_id: u32,
            /// 8: 224 bytes of private data.
            pub private_data: PrivateData<224>,
        }

        impl $ty {
            /// Parses the 232-byte message body.
            pub fn parse(body: &[u8]) -> Result<$ty> {
                let b = body_of(body)?;
                Ok($ty {
                    local_comm_id: be32(b),
                    remote_comm_id: be32(&b[4..]),
                    private_data: PrivateData::read(&b[8..]),
                })
            }

            /// Writes the 232-byte message body.
            pub fn write(&self, b: &mut [u8; CM_MSG_LEN]) {
                b[..4].copy_from_slice(&self.local_comm_id.to_be_bytes());
                b[4..8].copy_from_slice(&self.remote_comm_id.to_be_bytes());
                b[8..].copy_from_slice(&self.private_data.0);
            }
        }
        cm_msg!($ty, $ty, $attr, $name);
    };
}

two_ids_msg!(
    /// ReadyToUse (table 111).
    Rtu,
    attr::RTU,
    "RTU"
);
two_ids_msg!(
    /// DisconnectReply (table 113).
    Drep,
    attr::DREP,
    "DREP"
);

/// ConnectReject (table 108).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rej {
    /// 0:32 local communication ID.
    pub local_comm_id: u32,
    /// 4:32 remote communication ID (0 if unknown).
    pub remote_comm_id: u32,
    /// `8[0]:2` which message is rejected (see [`super::msg_kind`]).
    pub message_rejected: u8,
    /// `9[0]:7` length of the valid part of `ari`.
    pub ari_length: u8,
    /// 10:16 reason (see [`super::rej_reason`]).
    pub reason: u16,
    /// 12: 72 bytes of additional rejection information.
    pub ari: PrivateData<72>,
    /// 84: 148 bytes of private data.
    pub private_data: PrivateData<148>,
}

impl Rej {
    /// Parses the 232-byte message body.
    pub fn parse(body: &[u8]) -> Result<Rej> {
        let b = body_of(body)?;
        Ok(Rej {
            local_comm_id: be32(b),
            remote_comm_id: be32(&b[4..]),
            message_rejected: get_bits(b, 8, 0, 2),
            ari_length: get_bits(b, 9, 0, 7),
            reason: be16(&b[10..]),
            ari: PrivateData::read(&b[12..]),
            private_data: PrivateData::read(&b[84..]),
        })
    }

    /// Writes the 232-byte message body.
    pub fn write(&self, b: &mut [u8; CM_MSG_LEN]) {
        b.fill(0);
        b[..4].copy_from_slice(&self.local_comm_id.to_be_bytes());
        b[4..8].copy_from_slice(&self.remote_comm_id.to_be_bytes());
        set_bits(b, 8, 0, 2, self.message_rejected);
        set_bits(b, 9, 0, 7, self.ari_length);
        b[10..12].copy_from_slice(&self.reason.to_be_bytes());
        b[12..84].copy_from_slice(&self.ari.0);
        b[84..].copy_from_slice(&self.private_data.0);
    }
}
cm_msg!(Rej, Rej, attr::REJ, "REJ");

/// DisconnectRequest (table 112).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Dreq {
    /// 0:32 local communication ID.
    pub local_comm_id: u32,
    /// 4:32 remote communication ID.
    pub remote_comm_id: u32,
    /// 8:24 remote QPN/EECN (the receiver's QPN).
    pub remote_qpn: u32,
    /// 12: 220 bytes of private data.
    pub private_data: PrivateData<220>,
}

impl Dreq {
    /// Parses the 232-byte message body.
    pub fn parse(body: &[u8]) -> Result<Dreq> {
        let b = body_of(body)?;
        Ok(Dreq {
            local_comm_id: be32(b),
            remote_comm_id: be32(&b[4..]),
            remote_qpn: be24(&b[8..]),
            private_data: PrivateData::read(&b[12..]),
        })
    }

    /// Writes the 232-byte message body.
    pub fn write(&self, b: &mut [u8; CM_MSG_LEN]) {
        b.fill(0);
        b[..4].copy_from_slice(&self.local_comm_id.to_be_bytes());
        b[4..8].copy_from_slice(&self.remote_comm_id.to_be_bytes());
        put24(b, 8, self.remote_qpn);
        b[12..].copy_from_slice(&self.private_data.0);
    }
}
cm_msg!(Dreq, Dreq, attr::DREQ, "DREQ");

/// MessageReceiptAcknowledgement (table 107).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mra {
    /// 0:32 local communication ID.
    pub local_comm_id: u32,
    /// 4:32 remote communication ID.
    pub remote_comm_id: u32,
    /// `8[0]:2` which message is acknowledged (see [`super::msg_kind`]).
    pub message_mraed: u8,
    /// `9[0]:5` service timeout (rdma_cm sends 24).
    pub service_timeout: u8,
    /// 10: 222 bytes of private data.
    pub private_data: PrivateData<222>,
}

impl Mra {
    /// Parses the 232-byte message body.
    pub fn parse(body: &[u8]) -> Result<Mra> {
        let b = body_of(body)?;
        Ok(Mra {
            local_comm_id: be32(b),
            remote_comm_id: be32(&b[4..]),
            message_mraed: get_bits(b, 8, 0, 2),
            service_timeout: get_bits(b, 9, 0, 5),
            private_data: PrivateData::read(&b[10..]),
        })
    }

    /// Writes the 232-byte message body.
    pub fn write(&self, b: &mut [u8; CM_MSG_LEN]) {
        b.fill(0);
        b[..4].copy_from_slice(&self.local_comm_id.to_be_bytes());
        b[4..8].copy_from_slice(&self.remote_comm_id.to_be_bytes());
        set_bits(b, 8, 0, 2, self.message_mraed);
        set_bits(b, 9, 0, 5, self.service_timeout);
        b[10..].copy_from_slice(&self.private_data.0);
    }
}
cm_msg!(Mra, Mra, attr::MRA, "MRA");

/// ServiceIDResolutionRequest (table 119).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SidrReq {
    /// 0:32 request ID.
    pub request_id: u32,
    /// 4:16 P_Key.
    pub pkey: u16,
    /// 8:64 service ID.
    pub service_id: u64,
    /// 16: 216 bytes of private data (rdma_cm puts a [`CmaHdr`] first).
    pub private_data: PrivateData<216>,
}

impl SidrReq {
    /// Parses the 232-byte message body.
    pub fn parse(body: &[u8]) -> Result<SidrReq> {
        let b = body_of(body)?;
        Ok(SidrReq {
            request_id: be32(b),
            pkey: be16(&b[4..]),
            service_id: be64(&b[8..]),
            private_data: PrivateData::read(&b[16..]),
        })
    }

    /// Writes the 232-byte message body.
    pub fn write(&self, b: &mut [u8; CM_MSG_LEN]) {
        b.fill(0);
        b[..4].copy_from_slice(&self.request_id.to_be_bytes());
        b[4..6].copy_from_slice(&self.pkey.to_be_bytes());
        b[8..16].copy_from_slice(&self.service_id.to_be_bytes());
        b[16..].copy_from_slice(&self.private_data.0);
    }

    /// The rdma_cm header at the start of the private data.
    pub fn cma_hdr(&self) -> Result<CmaHdr> {
        CmaHdr::parse(&self.private_data.0)
    }
}
cm_msg!(SidrReq, SidrReq, attr::SIDR_REQ, "SIDR_REQ");

/// ServiceIDResolutionResponse (table 120).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SidrRep {
    /// 0:32 request ID (echoes the SIDR_REQ).
    pub request_id: u32,
    /// 4:8 status (see [`super::sidr_status`]).
    pub status: u8,
    /// 5:8 length of the valid part of `additional_info`.
    pub additional_info_length: u8,
    /// ECE vendor ID: 6:16 high bits, 11:8 low bits.
    pub vendor_id: u32,
    /// 8:24 QPN of the UD service.
    pub qpn: u32,
    /// 12:64 service ID.
    pub service_id: u64,
    /// 20:32 Q_Key of the UD service.
    pub qkey: u32,
    /// 24: 72 bytes of additional information.
    pub additional_info: PrivateData<72>,
    /// 96: 136 bytes of private data.
    pub private_data: PrivateData<136>,
}

impl SidrRep {
    /// Parses the 232-byte message body.
    pub fn parse(body: &[u8]) -> Result<SidrRep> {
        let b = body_of(body)?;
        Ok(SidrRep {
            request_id: be32(b),
            status: b[4],
            additional_info_length: b[5],
            vendor_id: u32::from_be_bytes([0, b[6], b[7], b[11]]),
            qpn: be24(&b[8..]),
            service_id: be64(&b[12..]),
            qkey: be32(&b[20..]),
            additional_info: PrivateData::read(&b[24..]),
            private_data: PrivateData::read(&b[96..]),
        })
    }

    /// Writes the 232-byte message body.
    pub fn write(&self, b: &mut [u8; CM_MSG_LEN]) {
        b.fill(0);
        b[..4].copy_from_slice(&self.request_id.to_be_bytes());
        b[4] = self.status;
        b[5] = self.additional_info_length;
        let v = self.vendor_id.to_be_bytes();
        (b[6], b[7], b[11]) = (v[1], v[2], v[3]);
        put24(b, 8, self.qpn);
        b[12..20].copy_from_slice(&self.service_id.to_be_bytes());
        b[20..24].copy_from_slice(&self.qkey.to_be_bytes());
        b[24..96].copy_from_slice(&self.additional_info.0);
        b[96..].copy_from_slice(&self.private_data.0);
    }
}
cm_msg!(SidrRep, SidrRep, attr::SIDR_REP, "SIDR_REP");
