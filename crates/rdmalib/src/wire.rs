//! What rdmalib adds on top of RDMA: the connection private data (the
//! "hello" each side sends) and the immediate values of its SENDs.
//!
//! # Hello (CM private data, 32 bytes, all integers big-endian)
//!
//! ```text
//! offset size field
//!  0     4    magic "RDLB"
//!  4     1    version (1)
//!  5     1    role: 0 = client (in the REQ), 1 = server (in the REP)
//!  6     2    reserved, zero
//!  8     8    address of the sender's buffer (the peer's remote_addr)
//! 16     4    rkey of the sender's buffer
//! 20     4    largest message the sender receives (its receive slot size)
//! 24     8    size of the sender's buffer in bytes
//! ```
//!
//! The client sends its hello in the connection request (at most 56 bytes of
//! private data), the server its own in the reply (at most 196): after
//! connect/accept each side knows the other's buffer, so RDMA WRITE and READ
//! need no extra round trip. Bytes after the 32 are ignored (the CM pads the
//! field with zeros).
//!
//! # SENDs
//!
//! Every SEND rdmalib posts is a SEND WITH IMMEDIATE; the immediate value
//! says what the payload is:
//!
//! | immediate | payload |
//! |---|---|
//! | [`IMM_MESSAGE`] `0x52444C01` | an application message (0..=max_message bytes) |
//! | [`IMM_NOTIFY_WRITE`] `0x52444C02` | 16 bytes: offset, length (u64 each): "I wrote this range of your buffer" |
//! | [`IMM_NOTIFY_READ`] `0x52444C03` | 16 bytes: offset, length: "I finished reading this range of your buffer" |

use crate::error::{Error, Result};

/// The first bytes of every hello.
pub const MAGIC: [u8; 4] = *b"RDLB";
/// The protocol version this library speaks.
pub const VERSION: u8 = 1;
/// Bytes of a hello.
pub const HELLO_LEN: usize = 32;
/// Immediate value of an application message.
pub const IMM_MESSAGE: u32 = 0x5244_4C01;
/// Immediate value of a write notification.
pub const IMM_NOTIFY_WRITE: u32 = 0x5244_4C02;
/// Immediate value of a read notification.
pub const IMM_NOTIFY_READ: u32 = 0x5244_4C03;
/// Bytes of a notification's payload.
pub const NOTIFY_LEN: usize = 16;

/// Which side sent a hello.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Client = 0,
    Server = 1,
}

/// One side's description of itself, exchanged at connection setup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Hello {
    pub(crate) role: Role,
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
    pub(crate) max_message: u32,
    pub(crate) size: u64,
}

impl Hello {
    pub(crate) fn encode(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        b[5] = self.role as u8;
        b[8..16].copy_from_slice(&self.addr.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[20..24].copy_from_slice(&self.max_message.to_be_bytes());
        b[24..32].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    /// Parses the peer's hello, which must come from `expected`.
    pub(crate) fn decode(b: &[u8], expected: Role) -> Result<Hello> {
        if b.len() < HELLO_LEN || b[0..4] != MAGIC {
            return Err(Error::Protocol(
                "the peer's connection private data is not an rdmalib hello".into(),
            ));
        }
        if b[4] != VERSION {
            return Err(Error::Protocol(format!(
                "the peer speaks rdmalib protocol version {}, this library {VERSION}",
                b[4]
            )));
        }
        let role = match b[5] {
            0 => Role::Client,
            1 => Role::Server,
            r => return Err(Error::Protocol(format!("unknown role {r} in the hello"))),
        };
        if role != expected {
            return Err(Error::Protocol(format!(
                "expected a hello from the {expected:?}, got one from the {role:?}"
            )));
        }
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(Hello {
            role,
            addr: u64_at(8),
            rkey: u32_at(16),
            max_message: u32_at(20),
            size: u64_at(24),
        })
    }
}

/// The payload of a notification.
pub(crate) fn encode_notify(offset: u64, len: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity(NOTIFY_LEN);
    v.extend_from_slice(&offset.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v
}

/// Parses a notification's payload into (offset, length).
pub(crate) fn decode_notify(b: &[u8]) -> Result<(u64, u64)> {
    if b.len() != NOTIFY_LEN {
        return Err(Error::Protocol(format!(
            "a notification carries {NOTIFY_LEN} bytes, got {}",
            b.len()
        )));
    }
    Ok((
        u64::from_be_bytes(b[0..8].try_into().expect("8 bytes")),
        u64::from_be_bytes(b[8..16].try_into().expect("8 bytes")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trips_and_has_the_documented_layout() {
        let h = Hello {
            role: Role::Server,
            addr: 0x0102_0304_0506_0708,
            rkey: 0x1122_3344,
            max_message: 65536,
            size: 1 << 20,
        };
        let b = h.encode();
        assert_eq!(&b[0..6], b"RDLB\x01\x01");
        assert_eq!(&b[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&b[16..20], &[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(&b[20..24], &[0, 1, 0, 0]);
        assert_eq!(&b[24..32], &[0, 0, 0, 0, 0, 0x10, 0, 0]);
        // The CM pads private data with zeros.
        let mut padded = b.to_vec();
        padded.resize(196, 0);
        assert_eq!(Hello::decode(&padded, Role::Server).unwrap(), h);
    }

    #[test]
    fn foreign_private_data_is_a_protocol_error() {
        let good = Hello {
            role: Role::Client,
            addr: 1,
            rkey: 2,
            max_message: 3,
            size: 4,
        }
        .encode();
        assert!(matches!(
            Hello::decode(&[0; 56], Role::Client),
            Err(Error::Protocol(_))
        ));
        assert!(matches!(
            Hello::decode(&good[..20], Role::Client),
            Err(Error::Protocol(_))
        ));
        let mut v2 = good;
        v2[4] = 2;
        let e = Hello::decode(&v2, Role::Client).unwrap_err();
        assert!(e.to_string().contains("version 2"), "{e}");
        assert!(matches!(
            Hello::decode(&good, Role::Server),
            Err(Error::Protocol(_))
        ));
    }

    #[test]
    fn notifications_round_trip() {
        let b = encode_notify(7, 1 << 40);
        assert_eq!(b.len(), NOTIFY_LEN);
        assert_eq!(decode_notify(&b).unwrap(), (7, 1 << 40));
        assert!(decode_notify(&b[..15]).is_err());
    }
}
