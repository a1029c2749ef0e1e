//! Direct records: the compact form a same-host lane gives a one-packet RC
//! SEND or RDMA WRITE (with or without immediate data), an RC RDMA READ
//! request, or a one-packet READ response, with the ACK a request may carry
//! for the other direction.
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
//! 1   flags: 1 carried ACK, 2 immediate data, 4 IETH, 8 RETH, 16 solicited event,
//!     32 AETH
//! 2   the RoCE opcode it stands for
//! 3   payload length (bytes)
//! 4   destination QP, big-endian, in the low 24 bits (as in a BTH)
//! 8   PSN, big-endian, in the low 24 bits
//! 12  [carried ACK: PSN u32 BE, AETH 4 bytes]
//!     [immediate data or IETH: u32 as on the wire]
//!     [RETH: va u64 BE, rkey u32 BE; a READ request's also its DMA length, u32 BE]
//!     [AETH, a READ response's: 4 bytes as on the wire]
//!     payload (none for a READ request)
//! ```

use crate::error::{Error, Result};
use crate::headers::{Aeth, Bth, Reth};
use crate::opcode::{Opcode, Operation, Position, Transport};
use crate::packet::{Headers, LaneAck, Packet};
use crate::psn::Psn;

mod request;
pub use request::{DirectRequest, read_request};

/// First byte of a direct record.
pub const DIRECT_OPCODE: u8 = 0xE8;
/// The largest payload a direct record carries (its length is one byte).
pub const DIRECT_MAX_PAYLOAD: usize = 255;
/// The fixed part of a record.
const FIXED: usize = 12;
/// The longest record: fixed part, ACK, immediate data, RETH, payload.
pub const DIRECT_MAX_LEN: usize = FIXED + 8 + 4 + 12 + DIRECT_MAX_PAYLOAD;
/// A RETH's bytes in a record: the DMA length is left out but for a READ
/// request, which has no payload to give it.
fn reth_len(read_request: bool) -> usize {
    if read_request { 16 } else { 12 }
}

const F_ACK: u8 = 1;
const F_IMM: u8 = 2;
const F_IETH: u8 = 4;
const F_RETH: u8 = 8;
const F_SE: u8 = 16;
const F_AETH: u8 = 32;

/// Whether a lane datagram is a direct record (its first byte).
pub fn is_direct(datagram: &[u8]) -> bool {
    datagram.first() == Some(&DIRECT_OPCODE)
}

/// The RoCE opcode a direct record stands for (its third byte), without
/// reading the rest; `None` for anything that is not a record.
pub fn opcode(datagram: &[u8]) -> Option<Opcode> {
    if !is_direct(datagram) {
        return None;
    }
    datagram.get(2).copied().map(Opcode)
}

/// Whether a packet with these headers may go as a direct record: a
/// one-packet ("only") RC SEND, WRITE or READ response whose payload fits,
/// or an RC READ request.
pub fn fits(hdr: &Headers, payload_len: usize) -> bool {
    let Some(info) = hdr.bth.opcode.info().filter(recordable) else {
        return false;
    };
    if info.operation == Operation::ReadRequest {
        return payload_len == 0;
    }
    payload_len <= DIRECT_MAX_PAYLOAD && hdr.reth.is_none_or(|r| r.dma_len as usize == payload_len)
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
        let read = hdr.bth.opcode == Opcode::RC_RDMA_READ_REQUEST;
        if read {
            out[at + 12..at + 16].copy_from_slice(&r.dma_len.to_be_bytes());
        }
        at += reth_len(read);
    }
    if let Some(a) = hdr.aeth {
        flags |= F_AETH;
        a.write(&mut out[at..at + 4]);
        at += 4;
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
        && flags & !(F_ACK | F_IMM | F_IETH | F_RETH | F_SE | F_AETH) == 0
        && (info.is_request() || flags & (F_ACK | F_SE) == 0)
        && has(F_AETH) == set.contains(crate::HeaderSet::AETH)
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
    let read_request = info.operation == Operation::ReadRequest;
    let aeth_at = reth_at
        + if has(F_RETH) {
            reth_len(read_request)
        } else {
            0
        };
    let payload_at = aeth_at + if has(F_AETH) { 4 } else { 0 };
    if buf.len() != payload_at + len || (read_request && len != 0) {
        return Err(Error::BadLength("a direct record's length"));
    }
    let word = |at: usize| be32(buf, at);
    let (dest_qp, psn) = (word(4), word(8));
    if dest_qp > 0x00FF_FFFF || psn > Psn::MASK {
        return Err(Error::BadLength("a direct record of no known form"));
    }
    let mut bth = Bth::new(opcode, dest_qp, Psn::new(psn));
    bth.ack_req = info.is_request();
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
            dma_len: if read_request {
                word(reth_at + 12)
            } else {
                len as u32
            },
        });
    }
    if has(F_AETH) {
        hdr.aeth = Some(Aeth::read(&buf[aeth_at..aeth_at + 4]));
    }
    Ok(Packet {
        hdr,
        info,
        payload: &buf[payload_at..],
        icrc: 0,
    })
}

/// Whether a record may stand for a packet of this opcode: a one-packet
/// ("only") RC SEND, WRITE or READ response, or an RC READ request (always
/// one packet).
fn recordable(info: &crate::OpcodeInfo) -> bool {
    info.transport == Transport::Rc
        && info.position == Position::Only
        && matches!(
            info.operation,
            Operation::Send | Operation::Write | Operation::ReadRequest | Operation::ReadResponse
        )
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
        want.bth.ack_req = p.info.is_request();
        assert_eq!(p.hdr, want);
        assert_eq!(p.payload, payload);
        assert!(is_direct(&out[..n]));
        assert_eq!(opcode(&out[..n]), Some(hdr.bth.opcode));
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
    fn a_read_request_carries_its_dma_length() {
        let mut h = Headers::new(Bth::new(Opcode::RC_RDMA_READ_REQUEST, 9, Psn::new(5)));
        h.reth = Some(Reth {
            va: 0x7f00_0000_1000,
            rkey: 0x1234,
            dma_len: 1 << 20,
        });
        // Its DMA length is no payload's: 16 bytes of RETH, none after.
        assert_eq!(roundtrip(h, &[]), FIXED + 16);
        h.lane_ack = Some(LaneAck {
            psn: Psn::new(4),
            aeth: Aeth {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 2,
            },
        });
        assert_eq!(roundtrip(h, &[]), FIXED + 8 + 16);
        assert!(!fits(&h, 8), "a READ request has no payload");
        // A capture sees the READ request (and the ACK) it stands for.
        let mut out = [0u8; DIRECT_MAX_LEN];
        let (n, _) = write_header(&h, 0, &mut out);
        let pkts = crate::lane_packets(&out[..n]);
        let req = Packet::parse(&pkts[0]).expect("a RoCE packet");
        assert_eq!(req.hdr.bth.opcode, Opcode::RC_RDMA_READ_REQUEST);
        assert_eq!(req.hdr.reth.map(|r| r.dma_len), Some(1 << 20));
        assert!(req.payload.is_empty());
    }

    #[test]
    fn a_one_packet_read_response_carries_its_aeth() {
        let mut h = Headers::new(Bth::new(Opcode::RC_RDMA_READ_RESPONSE_ONLY, 9, Psn::new(6)));
        h.aeth = Some(Aeth {
            syndrome: Syndrome::Ack { credits: 31 },
            msn: 3,
        });
        assert_eq!(roundtrip(h, &[7; 8]), FIXED + 4 + 8);
        let mut out = [0u8; DIRECT_MAX_LEN];
        let (n, range) = write_header(&h, 8, &mut out);
        out[range].copy_from_slice(&[7; 8]);
        let p = crate::lane_packets(&out[..n]);
        let r = Packet::parse(&p[0]).expect("a RoCE packet");
        assert_eq!(r.hdr.bth.opcode, Opcode::RC_RDMA_READ_RESPONSE_ONLY);
        assert!(!r.hdr.bth.ack_req);
        assert_eq!(r.hdr.aeth.map(|a| a.msn), Some(3));
        assert_eq!(r.payload, &[7; 8]);
        // A response carries no ACK and asks for no event.
        let mut bad = out;
        bad[1] |= F_SE;
        assert!(read(&bad[..n]).is_err());
    }

    #[test]
    fn only_one_packet_rc_sends_and_writes_and_read_requests_fit() {
        let first = Headers::new(Bth::new(Opcode::RC_SEND_FIRST, 7, Psn::new(1)));
        assert!(!fits(&first, 8));
        let middle = Headers::new(Bth::new(
            Opcode::RC_RDMA_READ_RESPONSE_MIDDLE,
            7,
            Psn::new(1),
        ));
        assert!(!fits(&middle, 8));
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
            flags in 0u8..64,
            op in proptest::sample::select(vec![0x04u8, 0x05, 0x0A, 0x0B, 0x16, 0x17, 0x00, 0x0C, 0x10]),
        ) {
            let mut buf = head;
            if buf.len() >= FIXED {
                // Steer the cases toward well-formed records: a length
                // that matches, QPN and PSN in 24 bits.
                buf[0] = DIRECT_OPCODE;
                buf[1] = flags;
                buf[2] = op;
                let reth = if op == Opcode::RC_RDMA_READ_REQUEST.0 { 16 } else { 12 };
                let fields = [(F_ACK, 8), (F_IMM | F_IETH, 4), (F_RETH, reth), (F_AETH, 4)];
                let hdr_len: usize = FIXED
                    + fields.iter().filter(|(f, _)| flags & f != 0).map(|(_, n)| n).sum::<usize>();
                buf[3] = buf.len().saturating_sub(hdr_len) as u8;
                buf[4] = 0;
                buf[8] = 0;
            }
            if let Ok(p) = read(&buf) {
                let mut out = [0u8; DIRECT_MAX_LEN];
                let mut hdr = p.hdr;
                hdr.bth.ack_req = p.info.is_request();
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
        assert!(read(&bad[..n]).is_err(), "a READ without its RETH");
        bad[1] = F_RETH;
        bad[3] = 0;
        assert!(read(&bad[..FIXED + 16]).is_ok(), "a READ request");
        bad[3] = 4;
        assert!(
            read(&bad[..FIXED + 20]).is_err(),
            "a READ request with a payload"
        );
        let mut bad = out;
        bad[1] = 0x80;
        assert!(read(&bad[..n]).is_err(), "unknown flags");
        for cut in 0..n {
            let _ = read(&out[..cut]);
        }
    }
}
