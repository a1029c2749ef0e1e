//! A direct record's one-packet RC SEND or RDMA WRITE written and read in
//! place: the few fields the express post and the responder's express path
//! need, without the [`Packet`] (`Headers` and `OpcodeInfo`) that
//! [`read`](super::read) builds and [`write_header`](super::write_header)
//! takes. A same-host ping-pong's every message is such a record; building
//! the `Packet` was ~260 instructions of its receive, the `Headers` ~165 of
//! its post (callgrind of `ib_send_lat`, BENCHMARKS.md "The record read in
//! place").
//!
//! [`read_request`] takes only what `write_header` writes for those four
//! opcodes and returns `None` for anything else, well-formed or not; `read`
//! then reads it or refuses it. Whatever it returns, `read` returns too for
//! the same bytes. [`write_request`] writes the bytes `write_header` writes
//! for the same request.

use super::{F_ACK, F_IMM, F_RETH, F_SE, FIXED, be32};
use crate::headers::{Aeth, Reth, Syndrome};
use crate::opcode::Opcode;
use crate::packet::LaneAck;
use crate::psn::Psn;

/// A one-packet RC SEND or RDMA WRITE (± immediate data) of a direct
/// record but its payload: what [`write_request`] writes and
/// [`read_request`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
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
}

/// A record's request as [`read_request`] finds it: its head and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirectRequest<'a> {
    /// Everything but the payload.
    pub head: RequestHead,
    /// The payload.
    pub payload: &'a [u8],
}

/// Writes the record of request `r` with a payload of `len` bytes into
/// `out` but the payload, which the caller writes into the returned range;
/// returns the record's length and that range. `None` if it cannot be a record: a payload over
/// [`DIRECT_MAX_PAYLOAD`](super::DIRECT_MAX_PAYLOAD), a WRITE without its
/// RETH or a SEND with one, a QPN or PSN over 24 bits.
pub fn write_request(
    r: &RequestHead,
    len: usize,
    out: &mut [u8; super::DIRECT_MAX_LEN],
) -> Option<(usize, core::ops::Range<usize>)> {
    let fits = len <= super::DIRECT_MAX_PAYLOAD
        && r.write == r.reth.is_some()
        && r.reth.is_none_or(|h| h.dma_len as usize == len)
        && r.dest_qp <= 0x00FF_FFFF
        && r.psn.get() <= Psn::MASK;
    if !fits {
        return None;
    }
    let opcode = match (r.write, r.imm.is_some()) {
        (false, false) => Opcode::RC_SEND_ONLY,
        (false, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
        (true, false) => Opcode::RC_RDMA_WRITE_ONLY,
        (true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
    };
    let mut flags = if r.se { F_SE } else { 0 };
    let mut at = FIXED;
    if let Some(a) = r.ack {
        flags |= F_ACK;
        out[at..at + 4].copy_from_slice(&a.psn.get().to_be_bytes());
        a.aeth.write(&mut out[at + 4..at + 8]);
        at += LaneAck::LEN;
    }
    if let Some(imm) = r.imm {
        flags |= F_IMM;
        out[at..at + 4].copy_from_slice(&imm.to_be_bytes());
        at += 4;
    }
    if let Some(h) = r.reth {
        flags |= F_RETH;
        out[at..at + 8].copy_from_slice(&h.va.to_be_bytes());
        out[at + 8..at + 12].copy_from_slice(&h.rkey.to_be_bytes());
        at += 12;
    }
    out[0] = super::DIRECT_OPCODE;
    out[1] = flags;
    out[2] = opcode.0;
    out[3] = len as u8;
    out[4..8].copy_from_slice(&r.dest_qp.to_be_bytes());
    out[8..12].copy_from_slice(&r.psn.get().to_be_bytes());
    Some((at + len, at..at + len))
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
    let head = RequestHead {
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
    };
    Some(DirectRequest {
        head,
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
        let head = RequestHead {
            write: h.reth.is_some(),
            dest_qp: h.bth.dest_qp,
            psn: h.bth.psn,
            se: h.bth.se,
            ack: h.lane_ack,
            imm: h.imm,
            reth: h.reth,
        };
        Some(DirectRequest {
            head,
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
        let w = r.head;
        assert!(w.write && w.imm.is_none() && !w.se);
        assert_eq!(
            (w.dest_qp, w.psn, r.payload),
            (0x12_3456, Psn::new(9), &b"abc"[..])
        );
        assert_eq!(w.reth, h.reth);
        assert_eq!(w.ack, h.lane_ack);
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
        let s = r.head;
        assert!(!s.write && s.se && s.ack.is_none() && s.reth.is_none());
        assert_eq!((s.imm, r.payload), (Some(0xDEAD_BEEF), &[][..]));
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

    /// The `Headers` `write_header` takes for request `r`.
    fn headers_of(r: &RequestHead) -> Headers {
        let opcode = match (r.write, r.imm.is_some()) {
            (false, false) => Opcode::RC_SEND_ONLY,
            (false, true) => Opcode::RC_SEND_ONLY_WITH_IMMEDIATE,
            (true, false) => Opcode::RC_RDMA_WRITE_ONLY,
            (true, true) => Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        };
        let mut h = Headers::new(Bth::new(opcode, r.dest_qp, r.psn));
        h.bth.ack_req = true;
        h.bth.se = r.se;
        h.lane_ack = r.ack;
        h.imm = r.imm;
        h.reth = r.reth;
        h
    }

    proptest::proptest! {
        /// A request written in place is the record `write_header` writes
        /// for it, and reads back (in place and as a `Packet`) as itself.
        #[test]
        fn a_request_written_in_place_is_write_headers_record(
            write: bool, imm: Option<u32>, se: bool, dest_qp in 0u32..1 << 24,
            psn in 0u32..1 << 24, ack: Option<(u32, u8, u32)>, va: u64, rkey: u32,
            len in 0usize..=crate::direct::DIRECT_MAX_PAYLOAD,
        ) {
            let payload = vec![0x5A; len];
            let r = RequestHead {
                write,
                dest_qp,
                psn: Psn::new(psn),
                se,
                ack: ack.map(|(p, credits, msn)| LaneAck {
                    psn: Psn::new(p & Psn::MASK),
                    aeth: Aeth { syndrome: Syndrome::Ack { credits: credits & 0x1F }, msn: msn & 0xFF_FFFF },
                }),
                imm,
                reth: write.then_some(Reth { va, rkey, dma_len: len as u32 }),
            };
            let mut out = [0u8; DIRECT_MAX_LEN];
            let (n, range) = write_request(&r, len, &mut out).expect("fits");
            out[range].copy_from_slice(&payload);
            let mut want = [0u8; DIRECT_MAX_LEN];
            let (m, range) = write_header(&headers_of(&r), len, &mut want);
            want[range].copy_from_slice(&payload);
            proptest::prop_assert_eq!(&out[..n], &want[..m]);
            let got = DirectRequest { head: r, payload: &payload };
            proptest::prop_assert_eq!(read_request(&out[..n]), Some(got));
            proptest::prop_assert_eq!(as_read(&out[..n]), Some(got));
        }

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
