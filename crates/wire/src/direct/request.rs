//! A direct record's one-packet RC SEND or RDMA WRITE read in place: the
//! few fields a responder's express path needs, without the [`Packet`]
//! (`Headers` and `OpcodeInfo`) that [`read`](super::read) builds. A
//! same-host ping-pong's every message is such a record, and building the
//! `Packet` was ~260 instructions of its receive (callgrind of
//! `ib_send_lat`, BENCHMARKS.md "The record read in place").
//!
//! [`read_request`] takes only what [`write_header`](super::write_header)
//! writes for those four opcodes and returns `None` for anything else,
//! well-formed or not; [`read`](super::read) then reads it or refuses it.
//! Whatever it returns, `read` returns too for the same bytes.

use super::{F_ACK, F_IMM, F_RETH, F_SE, FIXED, be32};
use crate::headers::{Aeth, Reth, Syndrome};
use crate::opcode::Opcode;
use crate::packet::LaneAck;
use crate::psn::Psn;

/// A one-packet RC SEND or RDMA WRITE (± immediate data) of a direct
/// record, as [`read_request`] finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectRequest<'a> {
    /// The RoCE opcode the record stands for.
    pub opcode: Opcode,
    /// An RDMA WRITE (else a SEND).
    pub write: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// The request's PSN.
    pub psn: Psn,
    /// Solicited event.
    pub se: bool,
    /// The ACK it carries for the other direction (a plain ACK).
    pub ack: Option<LaneAck>,
    /// Immediate data.
    pub imm: Option<u32>,
    /// A WRITE's RETH (its DMA length is the payload's).
    pub reth: Option<Reth>,
    /// The payload.
    pub payload: &'a [u8],
}

/// Reads `buf` if it is a direct record of a one-packet RC SEND or RDMA
/// WRITE (± immediate data, no invalidate); `None` otherwise.
pub fn read_request(buf: &[u8]) -> Option<DirectRequest<'_>> {
    if buf.len() < FIXED || buf[0] != super::DIRECT_OPCODE {
        return None;
    }
    let (flags, opcode, len) = (buf[1], Opcode(buf[2]), usize::from(buf[3]));
    let (write, imm) = match opcode {
        Opcode::RC_SEND_ONLY => (false, false),
        Opcode::RC_SEND_ONLY_WITH_IMMEDIATE => (false, true),
        Opcode::RC_RDMA_WRITE_ONLY => (true, false),
        Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE => (true, true),
        _ => return None,
    };
    // Exactly the headers the opcode has, and no others but ACK and SE.
    let want = if write { F_RETH } else { 0 } | if imm { F_IMM } else { 0 };
    if flags & !(F_ACK | F_SE) != want {
        return None;
    }
    let (dest_qp, psn) = (be32(buf, 4), be32(buf, 8));
    if dest_qp > 0x00FF_FFFF || psn > Psn::MASK {
        return None;
    }
    let mut at = FIXED;
    let ack_at = (flags & F_ACK != 0).then(|| {
        at += LaneAck::LEN;
        at - LaneAck::LEN
    });
    let imm_at = imm.then(|| {
        at += 4;
        at - 4
    });
    let reth_at = write.then(|| {
        at += 12;
        at - 12
    });
    // One length check for every field read below.
    if buf.len() != at + len {
        return None;
    }
    let ack = match ack_at {
        None => None,
        Some(a) => {
            let aeth = Aeth::read(&buf[a + 4..a + 8]);
            let psn = be32(buf, a);
            if psn > Psn::MASK || !matches!(aeth.syndrome, Syndrome::Ack { .. }) {
                return None;
            }
            Some(LaneAck {
                psn: Psn::new(psn),
                aeth,
            })
        }
    };
    Some(DirectRequest {
        opcode,
        write,
        dest_qp,
        psn: Psn::new(psn),
        se: flags & F_SE != 0,
        ack,
        imm: imm_at.map(|a| be32(buf, a)),
        reth: reth_at.map(|a| Reth {
            va: u64::from(be32(buf, a)) << 32 | u64::from(be32(buf, a + 4)),
            rkey: be32(buf, a + 8),
            dma_len: len as u32,
        }),
        payload: &buf[at..],
    })
}

#[cfg(test)]
mod tests {
    use super::super::{DIRECT_MAX_LEN, F_AETH, F_IETH, read, write_header};
    use super::*;
    use crate::headers::Bth;
    use crate::packet::Headers;

    /// What `read` makes of the same bytes, in `DirectRequest`'s terms.
    fn as_read(buf: &[u8]) -> Option<DirectRequest<'_>> {
        let p = read(buf).ok()?;
        let h = p.hdr;
        Some(DirectRequest {
            opcode: h.bth.opcode,
            write: h.reth.is_some(),
            dest_qp: h.bth.dest_qp,
            psn: h.bth.psn,
            se: h.bth.se,
            ack: h.lane_ack,
            imm: h.imm,
            reth: h.reth,
            payload: p.payload,
        })
    }

    #[test]
    fn a_write_with_an_ack_and_a_send_with_immediate_data_read_in_place() {
        let mut h = Headers::new(Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 0x12_3456, Psn::new(9)));
        h.reth = Some(Reth {
            va: 0x7f00_1234_5678,
            rkey: 0x55,
            dma_len: 3,
        });
        h.lane_ack = Some(LaneAck {
            psn: Psn::new(77),
            aeth: Aeth {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 9,
            },
        });
        let mut out = [0u8; DIRECT_MAX_LEN];
        let (n, range) = write_header(&h, 3, &mut out);
        out[range].copy_from_slice(b"abc");
        let r = read_request(&out[..n]).expect("a WRITE");
        assert!(r.write && r.imm.is_none() && !r.se);
        assert_eq!(
            (r.dest_qp, r.psn, r.payload),
            (0x12_3456, Psn::new(9), &b"abc"[..])
        );
        assert_eq!(r.reth, h.reth);
        assert_eq!(r.ack, h.lane_ack);
        assert_eq!(Some(r), as_read(&out[..n]));

        let mut h = Headers::new(Bth::new(
            Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            7,
            Psn::new(1),
        ));
        h.imm = Some(0xDEAD_BEEF);
        h.bth.se = true;
        let (n, _) = write_header(&h, 0, &mut out);
        let r = read_request(&out[..n]).expect("a SEND");
        assert!(!r.write && r.se && r.ack.is_none() && r.reth.is_none());
        assert_eq!((r.imm, r.payload), (Some(0xDEAD_BEEF), &[][..]));
        assert_eq!(Some(r), as_read(&out[..n]));
    }

    #[test]
    fn other_records_are_left_to_read() {
        let mut out = [0u8; DIRECT_MAX_LEN];
        let mut h = Headers::new(Bth::new(Opcode::RC_RDMA_READ_REQUEST, 9, Psn::new(5)));
        h.reth = Some(Reth {
            va: 0x1000,
            rkey: 1,
            dma_len: 64,
        });
        let (n, _) = write_header(&h, 0, &mut out);
        assert!(read(&out[..n]).is_ok() && read_request(&out[..n]).is_none());
        let mut h = Headers::new(Bth::new(
            Opcode::RC_SEND_ONLY_WITH_INVALIDATE,
            7,
            Psn::new(2),
        ));
        h.ieth = Some(0x1234);
        let (n, _) = write_header(&h, 0, &mut out);
        assert!(read(&out[..n]).is_ok() && read_request(&out[..n]).is_none());
        // A SEND claiming a RETH, cut short, too long: refused by both.
        let h = Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 7, Psn::new(3)));
        let (n, _) = write_header(&h, 4, &mut out);
        assert!(read_request(&out[..n]).is_some());
        assert!(read_request(&out[..n - 1]).is_none());
        assert!(read_request(&out[..n + 1]).is_none());
        let mut bad = out;
        bad[1] = F_RETH;
        assert!(read_request(&bad[..n]).is_none());
    }

    proptest::proptest! {
        /// Untrusted bytes: no panic, and what is read in place is what
        /// `read` reads.
        #[test]
        fn what_is_read_in_place_is_what_read_reads(
            head in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..48),
            flags in 0u8..64,
            op in proptest::sample::select(vec![0x04u8, 0x05, 0x0A, 0x0B, 0x16, 0x17, 0x0C, 0x10]),
        ) {
            let mut buf = head;
            if buf.len() >= FIXED {
                buf[0] = super::super::DIRECT_OPCODE;
                buf[1] = flags;
                buf[2] = op;
                let fields = [(F_ACK, 8), (F_IMM | F_IETH, 4), (F_RETH, 12), (F_AETH, 4)];
                let hdr_len: usize = FIXED
                    + fields.iter().filter(|(f, _)| flags & f != 0).map(|(_, n)| n).sum::<usize>();
                buf[3] = buf.len().saturating_sub(hdr_len) as u8;
                buf[4] = 0;
                buf[8] = 0;
            }
            if let Some(r) = read_request(&buf) {
                proptest::prop_assert_eq!(Some(r), as_read(&buf));
            }
        }
    }
}
