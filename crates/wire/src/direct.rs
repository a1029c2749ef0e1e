//! Direct records: the compact form a same-host lane gives a one-packet RC
//! SEND or RDMA WRITE (with or without immediate data), with the ACK it may
//! carry for the other direction.
//!
//! A direct record stands for exactly one RoCE packet (and a carried
//! [`LaneAck`]): same opcode, destination QP, PSN, headers and payload. It
//! leaves out what a lane does not need (the BTH's constant fields, the
//! RETH's DMA length, which is the payload's length for a one-packet WRITE,
//! and the ICRC), so an 8-byte WRITE with an ACK is 40 bytes and shares the
//! lane slot's first cache line with its header. It never goes on a wire:
//! its first byte is a manufacturer-specific opcode (0xE8), so a socket
//! that received one would drop it as an unknown packet.
//!
//! ```text
//! 0   0xE8
//! 1   flags: 1 carried ACK, 2 immediate data, 4 IETH, 8 RETH, 16 solicited event
//! 2   the RoCE opcode it stands for
//! 3   payload length (bytes)
//! 4   destination QP, big-endian, in the low 24 bits (as in a BTH)
//! 8   PSN, big-endian, in the low 24 bits
//! 12  [carried ACK: PSN u32 BE, AETH 4 bytes]
//!     [immediate data or IETH: u32 as on the wire]
//!     [RETH: va u64 BE, rkey u32 BE]
//!     payload
//! ```

use crate::error::{Error, Result};
use crate::headers::{Aeth, Bth, Reth};
use crate::opcode::{Opcode, Operation, Position, Transport};
use crate::packet::{Headers, LaneAck, Packet};
use crate::psn::Psn;

/// First byte of a direct record.
pub const DIRECT_OPCODE: u8 = 0xE8;
/// The largest payload a direct record carries (its length is one byte).
pub const DIRECT_MAX_PAYLOAD: usize = 255;
/// The fixed part of a record.
const FIXED: usize = 12;
/// The longest record: fixed part, ACK, immediate data, RETH, payload.
pub const DIRECT_MAX_LEN: usize = FIXED + 8 + 4 + 12 + DIRECT_MAX_PAYLOAD;

const F_ACK: u8 = 1;
const F_IMM: u8 = 2;
const F_IETH: u8 = 4;
const F_RETH: u8 = 8;
const F_SE: u8 = 16;

/// Whether a lane datagram is a direct record (its first byte).
pub fn is_direct(datagram: &[u8]) -> bool {
    datagram.first() == Some(&DIRECT_OPCODE)
}

/// Whether a packet with these headers may go as a direct record: a
/// one-packet ("only") RC SEND or WRITE whose payload fits.
pub fn fits(hdr: &Headers, payload_len: usize) -> bool {
    hdr.bth.opcode.info().is_some_and(|i| recordable(&i))
        && payload_len <= DIRECT_MAX_PAYLOAD
        && hdr.reth.is_none_or(|r| r.dma_len as usize == payload_len)
}

/// Writes the record for a packet with headers `hdr` (see [`fits`]) into
/// `out`, except its payload, which the caller writes into the returned
/// range. Returns the record's length and where its payload goes.
pub fn write_header(
    hdr: &Headers,
    payload_len: usize,
    out: &mut [u8; DIRECT_MAX_LEN],
) -> (usize, core::ops::Range<usize>) {
    debug_assert!(fits(hdr, payload_len));
    let mut flags = 0;
    let mut at = FIXED;
    if let Some(a) = hdr.lane_ack {
        flags |= F_ACK;
        out[at..at + 4].copy_from_slice(&a.psn.get().to_be_bytes());
        a.aeth.write(&mut out[at + 4..at + 8]);
        at += 8;
    }
    if let Some(imm) = hdr.imm {
        flags |= F_IMM;
        out[at..at + 4].copy_from_slice(&imm.to_be_bytes());
        at += 4;
    } else if let Some(ieth) = hdr.ieth {
        flags |= F_IETH;
        out[at..at + 4].copy_from_slice(&ieth.to_be_bytes());
        at += 4;
    }
    if let Some(r) = hdr.reth {
        flags |= F_RETH;
        out[at..at + 8].copy_from_slice(&r.va.to_be_bytes());
        out[at + 8..at + 12].copy_from_slice(&r.rkey.to_be_bytes());
        at += 12;
    }
    if hdr.bth.se {
        flags |= F_SE;
    }
    out[0] = DIRECT_OPCODE;
    out[1] = flags;
    out[2] = hdr.bth.opcode.0;
    out[3] = payload_len as u8;
    out[4..8].copy_from_slice(&(hdr.bth.dest_qp & 0x00FF_FFFF).to_be_bytes());
    out[8..12].copy_from_slice(&hdr.bth.psn.get().to_be_bytes());
    (at + payload_len, at..at + payload_len)
}

/// Reads a direct record as the packet it stands for (its ICRC 0). Errors
/// for anything [`write_header`] would not have written.
pub fn read(buf: &[u8]) -> Result<Packet<'_>> {
    if buf.len() < FIXED || buf[0] != DIRECT_OPCODE {
        return Err(Error::BadLength("not a direct record"));
    }
    let (flags, opcode, len) = (buf[1], Opcode(buf[2]), usize::from(buf[3]));
    let info = opcode.info().ok_or(Error::UnknownOpcode(opcode.0))?;
    let has = |f: u8| flags & f != 0;
    let set = info.headers;
    let form_ok = recordable(&info)
        && flags & !(F_ACK | F_IMM | F_IETH | F_RETH | F_SE) == 0
        && has(F_RETH) == set.contains(crate::HeaderSet::RETH)
        && has(F_IMM) == set.contains(crate::HeaderSet::IMM)
        && has(F_IETH) == set.contains(crate::HeaderSet::IETH);
    if !form_ok {
        return Err(Error::BadLength("a direct record of no known form"));
    }
    // One length check for every field read below.
    let ack_at = FIXED;
    let imm_at = ack_at + if has(F_ACK) { 8 } else { 0 };
    let reth_at = imm_at + if has(F_IMM | F_IETH) { 4 } else { 0 };
    let payload_at = reth_at + if has(F_RETH) { 12 } else { 0 };
    if buf.len() != payload_at + len {
        return Err(Error::BadLength("a direct record's length"));
    }
    let word = |at: usize| be32(buf, at);
    let (dest_qp, psn) = (word(4), word(8));
    if dest_qp > 0x00FF_FFFF || psn > Psn::MASK {
        return Err(Error::BadLength("a direct record of no known form"));
    }
    let mut bth = Bth::new(opcode, dest_qp, Psn::new(psn));
    bth.ack_req = true;
    bth.se = has(F_SE);
    let mut hdr = Headers::new(bth);
    if has(F_ACK) {
        // Only a plain ACK rides (`LaneAck`), its PSN in 24 bits.
        let aeth = Aeth::read(&buf[ack_at + 4..ack_at + 8]);
        let psn = word(ack_at);
        if psn > Psn::MASK || !matches!(aeth.syndrome, crate::Syndrome::Ack { .. }) {
            return Err(Error::BadLength("a direct record's ACK"));
        }
        hdr.lane_ack = Some(LaneAck {
            psn: Psn::new(psn),
            aeth,
        });
    }
    if has(F_IMM) {
        hdr.imm = Some(word(imm_at));
    } else if has(F_IETH) {
        hdr.ieth = Some(word(imm_at));
    }
    if has(F_RETH) {
        let hi = u64::from(word(reth_at));
        hdr.reth = Some(Reth {
            va: hi << 32 | u64::from(word(reth_at + 4)),
            rkey: word(reth_at + 8),
            dma_len: len as u32,
        });
    }
    Ok(Packet {
        hdr,
        info,
        payload: &buf[payload_at..],
        icrc: 0,
    })
}

/// Whether a record may stand for a packet of this opcode: a one-packet
/// ("only") RC SEND or WRITE.
fn recordable(info: &crate::OpcodeInfo) -> bool {
    info.transport == Transport::Rc
        && info.position == Position::Only
        && matches!(info.operation, Operation::Send | Operation::Write)
}

/// The big-endian word at `at` (the caller checked the length).
#[inline(always)]
fn be32(buf: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::Syndrome;

    fn roundtrip(hdr: Headers, payload: &[u8]) -> usize {
        let mut out = [0u8; DIRECT_MAX_LEN];
        assert!(fits(&hdr, payload.len()));
        let (n, range) = write_header(&hdr, payload.len(), &mut out);
        out[range].copy_from_slice(payload);
        let p = read(&out[..n]).expect("reads back");
        let mut want = hdr;
        want.bth.ack_req = true;
        assert_eq!(p.hdr, want);
        assert_eq!(p.payload, payload);
        assert!(is_direct(&out[..n]));
        n
    }

    #[test]
    fn an_8_byte_write_with_an_ack_is_40_bytes() {
        let mut h = Headers::new(Bth::new(
            Opcode::RC_RDMA_WRITE_ONLY,
            0x12_3456,
            Psn::new(0xAB_CDEF),
        ));
        h.reth = Some(Reth {
            va: 0x7f00_1234_5678,
            rkey: 0x55,
            dma_len: 8,
        });
        h.lane_ack = Some(LaneAck {
            psn: Psn::new(77),
            aeth: Aeth {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 9,
            },
        });
        assert_eq!(roundtrip(h, &[1, 2, 3, 4, 5, 6, 7, 8]), 40);
    }

    #[test]
    fn sends_with_immediate_data_invalidate_and_solicited_events() {
        let mut h = Headers::new(Bth::new(
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            7,
            Psn::new(1),
        ));
        h.imm = Some(0xDEAD_BEEF);
        h.bth.se = true;
        roundtrip(h, b"hello");
        let mut h = Headers::new(Bth::new(
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            7,
            Psn::new(2),
        ));
        h.ieth = Some(0x1234);
        roundtrip(h, &[]);
        let h = Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 7, Psn::new(3)));
        roundtrip(h, &[9; DIRECT_MAX_PAYLOAD]);
    }

    #[test]
    fn only_one_packet_rc_sends_and_writes_fit() {
        let first = Headers::new(Bth::new(Opcode::RC_SEND_FIRST, 7, Psn::new(1)));
        assert!(!fits(&first, 8));
        let read = Headers::new(Bth::new(Opcode::RC_RDMA_READ_REQUEST, 7, Psn::new(1)));
        assert!(!fits(&read, 0));
        let uc = Headers::new(Bth::new(Opcode::UC_SEND_ONLY, 7, Psn::new(1)));
        assert!(!fits(&uc, 8));
        let send = Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 7, Psn::new(1)));
        assert!(!fits(&send, DIRECT_MAX_PAYLOAD + 1));
    }

    #[test]
    fn a_capture_gets_the_packets_a_record_stands_for() {
        let mut h = Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 7, Psn::new(3)));
        h.lane_ack = Some(LaneAck {
            psn: Psn::new(2),
            aeth: Aeth {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 1,
            },
        });
        let mut out = [0u8; DIRECT_MAX_LEN];
        let (n, range) = write_header(&h, 3, &mut out);
        out[range].copy_from_slice(b"abc");
        let pkts = crate::lane_packets(&out[..n]);
        assert_eq!(pkts.len(), 2);
        let req = Packet::parse(&pkts[0]).expect("a RoCE packet");
        assert_eq!(req.hdr.bth.opcode, Opcode::RC_SEND_ONLY);
        assert_eq!(req.hdr.bth.psn, Psn::new(3));
        assert!(req.hdr.bth.ack_req && req.hdr.lane_ack.is_none());
        assert_eq!(req.payload, b"abc");
        let ack = Packet::parse(&pkts[1]).expect("a RoCE packet");
        assert_eq!(ack.hdr.bth.opcode, Opcode::RC_ACKNOWLEDGE);
        assert_eq!(ack.hdr.bth.psn, Psn::new(2));
        h.lane_ack = None;
        let (n, _) = write_header(&h, 3, &mut out);
        assert_eq!(crate::lane_packets(&out[..n]).len(), 1);
    }

    proptest::proptest! {
        /// Untrusted bytes: no panic, and whatever reads back is exactly
        /// the record `write_header` makes of it.
        #[test]
        fn any_bytes_read_back_or_are_refused(
            head in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
            flags in 0u8..32,
            op in proptest::sample::select(vec![0x04u8, 0x05, 0x0A, 0x0B, 0x16, 0x17, 0x00, 0x0C]),
        ) {
            let mut buf = head;
            if buf.len() >= FIXED {
                // Steer the cases toward well-formed records: a length
                // that matches, QPN and PSN in 24 bits.
                buf[0] = DIRECT_OPCODE;
                buf[1] = flags;
                buf[2] = op;
                let fields = [(F_ACK, 8), (F_IMM | F_IETH, 4), (F_RETH, 12)];
                let hdr_len: usize = FIXED
                    + fields.iter().filter(|(f, _)| flags & f != 0).map(|(_, n)| n).sum::<usize>();
                buf[3] = buf.len().saturating_sub(hdr_len) as u8;
                buf[4] = 0;
                buf[8] = 0;
            }
            if let Ok(p) = read(&buf) {
                let mut out = [0u8; DIRECT_MAX_LEN];
                let mut hdr = p.hdr;
                hdr.bth.ack_req = true;
                let (n, range) = write_header(&hdr, p.payload.len(), &mut out);
                out[range].copy_from_slice(p.payload);
                proptest::prop_assert_eq!(&out[..n], &buf[..]);
            }
        }
    }

    #[test]
    fn malformed_records_are_refused() {
        let h = Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 7, Psn::new(3)));
        let mut out = [0u8; DIRECT_MAX_LEN];
        let (n, _) = write_header(&h, 4, &mut out);
        assert!(read(&out[..n]).is_ok());
        assert!(read(&out[..n - 1]).is_err(), "cut short");
        assert!(read(&out[..n + 1]).is_err(), "too long");
        let mut bad = out;
        bad[1] = F_RETH;
        assert!(read(&bad[..n]).is_err(), "a RETH on a SEND");
        let mut bad = out;
        bad[2] = Opcode::RC_RDMA_READ_REQUEST.0;
        assert!(read(&bad[..n]).is_err(), "a READ");
        let mut bad = out;
        bad[1] = 0x80;
        assert!(read(&bad[..n]).is_err(), "unknown flags");
        for cut in 0..n {
            let _ = read(&out[..cut]);
        }
    }
}
