//! rsockets' wire protocol, as rdma-core's librdmacm speaks it (so a peer
//! running rdma-core's rsockets interoperates): the private data of the
//! connection request/reply, and the 32-bit immediate that tags every
//! RDMA WRITE WITH IMMEDIATE.
//!
//! Immediate: bits 31..29 are the operation, bits 28..0 its argument (bytes
//! written for data, the receive sequence the sender may reach for SGL
//! updates, the control code for control messages).

/// Data was written into the receive buffer; argument: its length.
pub const OP_DATA: u32 = 0;
/// An RDMA WRITE to a peer's iomap (never on the wire as an immediate).
pub const OP_WRITE: u32 = 2;
/// A receive-buffer SGL update was written; argument: new sequence limit.
pub const OP_SGL: u32 = 4;
/// An iomap entry was written; argument: its index.
pub const OP_IOMAP_SGL: u32 = 6;
/// A control message; argument: [`CTRL_DISCONNECT`], ...
pub const OP_CTRL: u32 = 7;

/// Control: the sender closes the connection (both directions).
pub const CTRL_DISCONNECT: u32 = 0;
/// Control: a keepalive probe, ignored by the receiver.
pub const CTRL_KEEPALIVE: u32 = 1;
/// Control: the sender stops sending (`shutdown(SHUT_WR)`).
pub const CTRL_SHUTDOWN: u32 = 2;

/// Largest single transfer; the first ones start at [`OLAP_START`] and double.
/// rdma-core starts at 2048 to overlap the first write with the copy of the
/// next on a NIC; here every write costs a packet train and a completion, so
/// transfers start at the largest size (the peer sees only lengths).
pub const MAX_TRANSFER: u32 = 65536;
pub const OLAP_START: u32 = 65536;
/// Send low-water mark: a send needs this much free send buffer.
pub const SNDLOWAT: u32 = 2048;
/// Smallest queue size a socket option may set.
pub const QP_MIN_SIZE: u32 = 16;
/// Largest queue size a socket option may set.
pub const QP_MAX_SIZE: u32 = 0xFFFE;
/// Control messages in flight at most (a power of two).
pub const QP_CTRL_SIZE: u32 = 4;
/// Entries in the target SGL the peer writes buffer grants into.
pub const SGL_SIZE: usize = 2;
/// Size of one `struct rs_sge` (addr u64, key u32, length u32).
pub const SGE_SIZE: usize = 16;
/// Size of one `struct rs_iomap` (offset u64 + rs_sge).
pub const IOMAP_SIZE: usize = 24;

/// rdma-core's default inline size (`def_inline`).
pub const DEF_INLINE: u32 = 64;
/// rdma-core's default send queue size (`def_sqsize`).
pub const DEF_SQSIZE: u32 = 384;
/// rdma-core's default receive queue size (`def_rqsize`).
pub const DEF_RQSIZE: u32 = 384;
/// rdma-core's default receive buffer size (`def_mem`).
pub const DEF_MEM: u32 = 1 << 17;
/// rdma-core's default send buffer size (`def_wmem`).
pub const DEF_WMEM: u32 = 1 << 17;

/// `wr_id` bit marking a receive.
pub const WR_RECV: u64 = 1 << 63;

/// An immediate: operation `op` with argument `data`.
pub const fn msg(op: u32, data: u32) -> u32 {
    (op << 29) | (data & 0x1FFF_FFFF)
}
/// The operation of immediate `m`.
pub const fn msg_op(m: u32) -> u32 {
    m >> 29
}
/// The argument of immediate `m`.
pub const fn msg_data(m: u32) -> u32 {
    m & 0x1FFF_FFFF
}

/// rdma-core's 8-bit "scale" encoding of sizes above 128.
pub fn value_to_scale(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (1 << (bits - 1)) | (value >> bits)
    }
}
/// The inverse of [`value_to_scale`].
pub fn scale_to_value(value: u32, bits: u32) -> u32 {
    if value <= 1 << (bits - 1) {
        value
    } else {
        (value & !(1 << (bits - 1))) << bits
    }
}

/// `struct rs_sge`, host order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sge {
    /// Address in the owner's memory.
    pub addr: u64,
    /// Remote key.
    pub key: u32,
    /// Bytes (entries, for an SGL).
    pub length: u32,
}

impl Sge {
    /// Native-endian bytes, as an SGL update is written into the peer.
    pub fn to_ne(self) -> [u8; SGE_SIZE] {
        let mut b = [0; SGE_SIZE];
        b[..8].copy_from_slice(&self.addr.to_ne_bytes());
        b[8..12].copy_from_slice(&self.key.to_ne_bytes());
        b[12..].copy_from_slice(&self.length.to_ne_bytes());
        b
    }
    fn to_be(self, out: &mut [u8]) {
        out[..8].copy_from_slice(&self.addr.to_be_bytes());
        out[8..12].copy_from_slice(&self.key.to_be_bytes());
        out[12..16].copy_from_slice(&self.length.to_be_bytes());
    }
    fn from_be(b: &[u8]) -> Sge {
        Sge {
            addr: u64::from_be_bytes(b[..8].try_into().expect("8")),
            key: u32::from_be_bytes(b[8..12].try_into().expect("4")),
            length: u32::from_be_bytes(b[12..16].try_into().expect("4")),
        }
    }
}

/// `RS_CONN_FLAG_NET`: the sender is big-endian.
pub const CONN_FLAG_NET: u8 = 1;
/// `RS_CONN_FLAG_IOMAP`: the target SGL is followed by an iomap table.
pub const CONN_FLAG_IOMAP: u8 = 2;
/// Length of `struct rs_conn_data`.
pub const CONN_DATA_LEN: usize = 40;

/// `struct rs_conn_data`: what each side tells the other in the CM REQ/REP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnData {
    /// Protocol version (1).
    pub version: u8,
    /// [`CONN_FLAG_NET`], [`CONN_FLAG_IOMAP`].
    pub flags: u8,
    /// Receive credits (the receive queue size).
    pub credits: u16,
    /// Scaled iomap entries following the target SGL.
    pub target_iomap_size: u8,
    /// Where the peer writes buffer grants: address, rkey, entries.
    pub target_sgl: Sge,
    /// The first half of the receive buffer, granted at once.
    pub data_buf: Sge,
}

impl ConnData {
    /// The 40 bytes of the private data.
    pub fn encode(&self) -> [u8; CONN_DATA_LEN] {
        let mut b = [0u8; CONN_DATA_LEN];
        b[0] = self.version;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.credits.to_be_bytes());
        b[7] = self.target_iomap_size;
        self.target_sgl.to_be(&mut b[8..24]);
        self.data_buf.to_be(&mut b[24..40]);
        b
    }
    /// `None` if too short or not version 1.
    pub fn decode(b: &[u8]) -> Option<ConnData> {
        if b.len() < CONN_DATA_LEN || b[0] != 1 {
            return None;
        }
        Some(ConnData {
            version: b[0],
            flags: b[1],
            credits: u16::from_be_bytes([b[2], b[3]]),
            target_iomap_size: b[7],
            target_sgl: Sge::from_be(&b[8..24]),
            data_buf: Sge::from_be(&b[24..40]),
        })
    }
    /// Whether SGL updates from this peer arrive byte-swapped.
    pub fn swapped(&self) -> bool {
        (self.flags & CONN_FLAG_NET != 0) != cfg!(target_endian = "big")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imm_roundtrip() {
        let m = msg(OP_SGL, 0x1234);
        assert_eq!(msg_op(m), OP_SGL);
        assert_eq!(msg_data(m), 0x1234);
        assert_eq!(msg(OP_CTRL, CTRL_DISCONNECT), 0xE000_0000);
        assert_eq!(msg(OP_DATA, 65536), 65536);
    }

    #[test]
    fn conn_data_layout() {
        let c = ConnData {
            version: 1,
            flags: CONN_FLAG_IOMAP,
            credits: 384,
            target_iomap_size: 0,
            target_sgl: Sge {
                addr: 0x1122_3344_5566_7788,
                key: 0xAABB_CCDD,
                length: 2,
            },
            data_buf: Sge {
                addr: 0x10,
                key: 7,
                length: 65536,
            },
        };
        let b = c.encode();
        assert_eq!(&b[..4], &[1, 2, 0x01, 0x80]);
        assert_eq!(&b[8..16], &[0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]);
        assert_eq!(&b[16..24], &[0xAA, 0xBB, 0xCC, 0xDD, 0, 0, 0, 2]);
        assert_eq!(ConnData::decode(&b), Some(c));
        assert!(!c.swapped());
        let mut bad = b;
        bad[0] = 2;
        assert_eq!(ConnData::decode(&bad), None);
    }

    #[test]
    fn scale() {
        assert_eq!(value_to_scale(100, 8), 100);
        assert_eq!(scale_to_value(value_to_scale(1024, 8), 8), 1024);
    }
}
