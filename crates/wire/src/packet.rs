//! A whole RoCEv2 UDP payload: BTH, extension headers, payload, pad, ICRC.
//!
//! [`Packet::parse`] is the only entry point for untrusted bytes: it checks every
//! length against the opcode table before reading a field, so it never panics.
//! [`Headers::write`] and [`emit`] build packets; the ICRC is filled in by
//! [`crate::icrc`] because it covers the IP and UDP headers too.

use crate::error::{Error, Result, need};
use crate::headers::{Aeth, AtomicEth, Bth, Deth, Feth, Reth, read_u32, read_u64};
use crate::opcode::{HeaderSet, OpcodeInfo};

/// Length of the invariant CRC trailer.
pub const ICRC_LEN: usize = 4;

/// The headers of one packet (BTH plus the extension headers its opcode calls for).
///
/// Fields for headers the opcode does not carry are ignored by [`Headers::write`];
/// after [`Packet::parse`] they are `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headers {
    /// Base transport header.
    pub bth: Bth,
    /// DETH (UD).
    pub deth: Option<Deth>,
    /// XRCETH (XRC requests), the raw 32-bit word: 8 reserved bits, then the
    /// 24-bit XRC SRQ number at the target ([`xrc_srqn`] reads it). Senders
    /// leave the reserved bits zero; receivers ignore them.
    pub xrceth: Option<u32>,
    /// RETH (write first/only, read request, FLUSH, ATOMIC_WRITE).
    pub reth: Option<Reth>,
    /// FETH (FLUSH).
    pub feth: Option<Feth>,
    /// AtomicETH (CmpSwap, FetchAdd).
    pub atomic_eth: Option<AtomicEth>,
    /// AETH (ACK, read responses first/last/only, atomic ACK).
    pub aeth: Option<Aeth>,
    /// AtomicAckETH: the original remote value.
    pub atomic_ack: Option<u64>,
    /// Immediate data, as the 32-bit big-endian word on the wire.
    pub imm: Option<u32>,
    /// IETH: the R_Key to invalidate.
    pub ieth: Option<u32>,
    /// An acknowledgement this request carries for the other direction of
    /// its connection ([`LaneAck`]): same-host lanes only, never a wire.
    pub lane_ack: Option<LaneAck>,
}

/// An RC acknowledgement carried by a request going the other way on a
/// same-host lane, where it would otherwise be a packet of its own: the
/// PSN it acknowledges and its AETH, 8 bytes after the request's extension
/// headers, announced by [`LANE_ACK`] in the BTH's reserved bits. Between
/// softrdma processes of one host only: [`Packet::parse`] (the wire) keeps
/// the bit reserved and ignores it; [`Packet::parse_lane`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneAck {
    /// The PSN acknowledged (the ACK packet's BTH PSN).
    pub psn: crate::Psn,
    /// The ACK's AETH.
    pub aeth: Aeth,
}

impl LaneAck {
    /// Bytes on the lane.
    pub const LEN: usize = 8;

    /// The headers of the ACK packet this stands for, addressed to QP
    /// `dest_qp` (the carrying request's destination).
    pub fn ack_headers(&self, dest_qp: u32) -> Headers {
        let mut h = Headers::new(Bth::new(crate::Opcode::RC_ACKNOWLEDGE, dest_qp, self.psn));
        h.aeth = Some(self.aeth);
        h
    }

    /// Whether a datagram's BTH announces a carried ACK (the bit alone:
    /// [`Packet::parse_lane`] checks the rest).
    pub fn announced(datagram: &[u8]) -> bool {
        datagram.get(8).is_some_and(|&b| b & LANE_ACK != 0)
    }
}

/// The bit of the BTH's `resv7` that announces a [`LaneAck`].
pub const LANE_ACK: u8 = 0x40;

impl Headers {
    /// Headers with only a BTH set.
    pub const fn new(bth: Bth) -> Headers {
        Headers {
            bth,
            deth: None,
            xrceth: None,
            reth: None,
            feth: None,
            atomic_eth: None,
            aeth: None,
            atomic_ack: None,
            imm: None,
            ieth: None,
            lane_ack: None,
        }
    }

    /// The extension headers the opcode requires, or an error for unknown opcodes.
    pub fn header_set(&self) -> Result<HeaderSet> {
        self.bth
            .opcode
            .info()
            .map(|i| i.headers)
            .ok_or(Error::UnknownOpcode(self.bth.opcode.0))
    }

    /// Length of BTH plus extension headers (and a [`LaneAck`]).
    pub fn wire_len(&self) -> Result<usize> {
        Ok(Bth::LEN + self.header_set()?.len() + self.lane_ack_len())
    }

    fn lane_ack_len(&self) -> usize {
        if self.lane_ack.is_some() {
            LaneAck::LEN
        } else {
            0
        }
    }

    /// Writes BTH and extension headers at the start of `b`, returning the bytes written.
    ///
    /// A header the opcode requires but which is `None` is written as zeros.
    pub fn write(&self, b: &mut [u8]) -> Result<usize> {
        let set = self.header_set()?;
        let total = Bth::LEN + set.len() + self.lane_ack_len();
        if b.len() < total {
            return Err(Error::Truncated {
                need: total,
                have: b.len(),
            });
        }
        let mut bth = self.bth;
        if self.lane_ack.is_some() {
            bth.resv7 |= LANE_ACK;
        }
        bth.write(b);
        let mut off = Bth::LEN;
        if set.contains(HeaderSet::DETH) {
            self.deth.unwrap_or_default().write(&mut b[off..]);
            off += Deth::LEN;
        }
        if set.contains(HeaderSet::XRCETH) {
            b[off..off + 4].copy_from_slice(&self.xrceth.unwrap_or(0).to_be_bytes());
            off += 4;
        }
        if set.contains(HeaderSet::FETH) {
            self.feth.unwrap_or_default().write(&mut b[off..]);
            off += Feth::LEN;
        }
        if set.contains(HeaderSet::RETH) {
            self.reth.unwrap_or_default().write(&mut b[off..]);
            off += Reth::LEN;
        }
        if set.contains(HeaderSet::ATOMIC_ETH) {
            self.atomic_eth.unwrap_or_default().write(&mut b[off..]);
            off += AtomicEth::LEN;
        }
        if set.contains(HeaderSet::AETH) {
            let a = self.aeth.unwrap_or(Aeth {
                syndrome: crate::headers::Syndrome::Ack { credits: 0x1F },
                msn: 0,
            });
            a.write(&mut b[off..]);
            off += Aeth::LEN;
        }
        if set.contains(HeaderSet::ATOMIC_ACK_ETH) {
            b[off..off + 8].copy_from_slice(&self.atomic_ack.unwrap_or(0).to_be_bytes());
            off += 8;
        }
        if set.contains(HeaderSet::IMM) {
            b[off..off + 4].copy_from_slice(&self.imm.unwrap_or(0).to_be_bytes());
            off += 4;
        }
        if set.contains(HeaderSet::IETH) {
            b[off..off + 4].copy_from_slice(&self.ieth.unwrap_or(0).to_be_bytes());
            off += 4;
        }
        if let Some(a) = self.lane_ack {
            b[off..off + 4].copy_from_slice(&a.psn.get().to_be_bytes());
            a.aeth.write(&mut b[off + 4..]);
            off += LaneAck::LEN;
        }
        debug_assert_eq!(off, total);
        Ok(total)
    }
}

/// The XRC SRQ number in an XRCETH word (its low 24 bits).
pub const fn xrc_srqn(xrceth: u32) -> u32 {
    xrceth & 0x00FF_FFFF
}

/// Pad bytes needed after a payload of `len` bytes (IBTA 9.2.3: to a 4-byte multiple).
pub const fn pad_for(len: usize) -> u8 {
    (len.wrapping_neg() & 3) as u8
}

/// A parsed packet borrowing its payload from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The headers.
    pub hdr: Headers,
    /// Properties of the opcode.
    pub info: OpcodeInfo,
    /// Payload without pad.
    pub payload: &'a [u8],
    /// The ICRC as carried (read least-significant byte first, as rxe stores it).
    pub icrc: u32,
}

impl<'a> Packet<'a> {
    /// Parses a UDP payload (BTH through ICRC).
    pub fn parse(buf: &'a [u8]) -> Result<Packet<'a>> {
        Packet::parse_from(buf, false)
    }

    /// [`Packet::parse`] for a datagram from a same-host lane: also reads a
    /// [`LaneAck`] the BTH announces (only an RC request may carry one).
    pub fn parse_lane(buf: &'a [u8]) -> Result<Packet<'a>> {
        Packet::parse_from(buf, true)
    }

    fn parse_from(buf: &'a [u8], lane: bool) -> Result<Packet<'a>> {
        need(buf, Bth::LEN + ICRC_LEN)?;
        let mut bth = Bth::read(buf);
        if bth.tver != 0 {
            return Err(Error::BadTver(bth.tver));
        }
        let info = bth
            .opcode
            .info()
            .ok_or(Error::UnknownOpcode(bth.opcode.0))?;
        let set = info.headers;
        let acked = lane && bth.resv7 & LANE_ACK != 0;
        if acked {
            if info.transport != crate::Transport::Rc || !info.is_request() {
                return Err(Error::BadLength(
                    "an ACK carried by a packet other than an RC request",
                ));
            }
            bth.resv7 &= !LANE_ACK;
        }
        let hdr_len = Bth::LEN + set.len() + if acked { LaneAck::LEN } else { 0 };
        need(buf, hdr_len + ICRC_LEN)?;
        let body_end = buf.len() - ICRC_LEN;
        let avail = body_end - hdr_len;
        if usize::from(bth.pad) > avail {
            return Err(Error::BadPad {
                pad: bth.pad,
                avail,
            });
        }
        let payload = &buf[hdr_len..body_end - usize::from(bth.pad)];
        if !info.has_payload && !payload.is_empty() {
            return Err(Error::BadLength("payload on an opcode that carries none"));
        }
        let mut hdr = Headers::new(bth);
        let mut off = Bth::LEN;
        if set.contains(HeaderSet::DETH) {
            hdr.deth = Some(Deth::read(&buf[off..]));
            off += Deth::LEN;
        }
        if set.contains(HeaderSet::XRCETH) {
            hdr.xrceth = Some(read_u32(&buf[off..]));
            off += 4;
        }
        if set.contains(HeaderSet::FETH) {
            hdr.feth = Some(Feth::read(&buf[off..]));
            off += Feth::LEN;
        }
        if set.contains(HeaderSet::RETH) {
            hdr.reth = Some(Reth::read(&buf[off..]));
            off += Reth::LEN;
        }
        if set.contains(HeaderSet::ATOMIC_ETH) {
            hdr.atomic_eth = Some(AtomicEth::read(&buf[off..]));
            off += AtomicEth::LEN;
        }
        if set.contains(HeaderSet::AETH) {
            hdr.aeth = Some(Aeth::read(&buf[off..]));
            off += Aeth::LEN;
        }
        if set.contains(HeaderSet::ATOMIC_ACK_ETH) {
            hdr.atomic_ack = Some(read_u64(&buf[off..]));
            off += 8;
        }
        if set.contains(HeaderSet::IMM) {
            hdr.imm = Some(read_u32(&buf[off..]));
            off += 4;
        }
        if set.contains(HeaderSet::IETH) {
            hdr.ieth = Some(read_u32(&buf[off..]));
            off += 4;
        }
        if acked {
            hdr.lane_ack = Some(LaneAck {
                psn: crate::Psn::new(read_u32(&buf[off..]) & 0x00FF_FFFF),
                aeth: Aeth::read(&buf[off + 4..]),
            });
            off += LaneAck::LEN;
        }
        debug_assert_eq!(off, hdr_len);
        let t = &buf[body_end..];
        let icrc = u32::from_le_bytes([t[0], t[1], t[2], t[3]]);
        Ok(Packet {
            hdr,
            info,
            payload,
            icrc,
        })
    }

    /// Length of BTH plus extension headers (and a [`LaneAck`]).
    pub fn header_len(&self) -> usize {
        Bth::LEN + self.info.headers.len() + self.hdr.lane_ack_len()
    }
}

/// The packets a lane datagram stands for, as a wire would carry them (each
/// with a zero ICRC for [`crate::icrc::fill`]): a request carrying a
/// [`LaneAck`] is the request without it, then the ACK (addressed to the
/// request's destination QP); a direct record ([`crate::direct`]) is the
/// packet it stands for, and the ACK it carries; any other datagram is
/// itself. For captures.
pub fn lane_packets(datagram: &[u8]) -> Vec<Vec<u8>> {
    let direct = crate::direct::is_direct(datagram);
    let parsed = if direct {
        crate::direct::read(datagram)
    } else {
        Packet::parse_lane(datagram)
    };
    let Ok(p) = parsed else {
        return vec![datagram.to_vec()];
    };
    let Some(ack) = p.hdr.lane_ack else {
        if !direct {
            return vec![datagram.to_vec()];
        }
        let mut r = Vec::new();
        // A direct record's headers are a known set: emit cannot fail.
        let _ = emit(&p.hdr, p.payload, &mut r);
        return vec![r];
    };
    let mut req = p.hdr;
    req.lane_ack = None;
    let a = ack.ack_headers(p.hdr.bth.dest_qp);
    let (mut r, mut k) = (Vec::new(), Vec::new());
    // Both header sets are known (parsed, or an ACK's): emit cannot fail.
    let _ = emit(&req, p.payload, &mut r);
    let _ = emit(&a, &[], &mut k);
    vec![r, k]
}

/// Appends a complete packet to `out`: headers (with PadCnt set from the payload),
/// payload, zero pad, and a zero ICRC for [`crate::icrc::fill`] to replace.
///
/// Returns the packet length.
pub fn emit(hdr: &Headers, payload: &[u8], out: &mut Vec<u8>) -> Result<usize> {
    let mut h = *hdr;
    h.bth.pad = pad_for(payload.len());
    let hl = h.wire_len()?;
    let start = out.len();
    let total = hl + payload.len() + usize::from(h.bth.pad) + ICRC_LEN;
    out.resize(start + total, 0);
    h.write(&mut out[start..])?;
    out[start + hl..start + hl + payload.len()].copy_from_slice(payload);
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::headers::Syndrome;
    use crate::opcode::Opcode;
    use crate::psn::Psn;

    /// A request carrying an ACK: the lane reads it back whole; the wire
    /// keeps the bit reserved and reads the 8 bytes as payload, as any
    /// receiver that knows nothing of it (rxe) would.
    #[test]
    fn a_lane_ack_rides_a_request_on_a_lane_only() {
        let mut h = Headers::new(Bth::new(Opcode::RC_RDMA_WRITE_ONLY, 0x11, Psn::new(0x100)));
        h.reth = Some(Reth {
            va: 0x1000,
            rkey: 7,
            dma_len: 8,
        });
        let ack = LaneAck {
            psn: Psn::new(0xFF_FFFE),
            aeth: Aeth {
                syndrome: Syndrome::Ack { credits: 0x1F },
                msn: 0x12_3456,
            },
        };
        h.lane_ack = Some(ack);
        let mut out = Vec::new();
        let n = emit(&h, b"8 bytes!", &mut out).unwrap();
        assert_eq!(n, 12 + 16 + 8 + 8 + 4);
        assert_eq!(out[8] & 0x7F, LANE_ACK);
        assert!(LaneAck::announced(&out));
        let p = Packet::parse_lane(&out).unwrap();
        assert_eq!(p.hdr.lane_ack, Some(ack));
        assert_eq!(p.hdr.bth.resv7, 0);
        assert_eq!((p.payload, p.header_len()), (&b"8 bytes!"[..], 36));
        let w = Packet::parse(&out).unwrap();
        assert_eq!((w.hdr.lane_ack, w.hdr.bth.resv7), (None, LANE_ACK));
        assert_eq!(w.payload.len(), 16);
        // Only an RC request carries one.
        let mut a = Headers::new(Bth::new(Opcode::RC_ACKNOWLEDGE, 0x11, Psn::new(1)));
        a.aeth = ack.aeth.into();
        a.lane_ack = Some(ack);
        let mut out = Vec::new();
        emit(&a, b"", &mut out).unwrap();
        assert!(Packet::parse_lane(&out).is_err());
        // A capture splits it into the two packets it stands for.
        let mut out = Vec::new();
        emit(&h, b"8 bytes!", &mut out).unwrap();
        let split = lane_packets(&out);
        assert_eq!(split.len(), 2);
        let r = Packet::parse(&split[0]).unwrap();
        assert_eq!(
            (r.hdr.bth.resv7, r.hdr.lane_ack, r.payload),
            (0, None, &b"8 bytes!"[..])
        );
        assert_eq!(r.hdr.reth, h.reth);
        let k = Packet::parse(&split[1]).unwrap();
        assert_eq!(k.hdr.bth.opcode, Opcode::RC_ACKNOWLEDGE);
        assert_eq!(
            (k.hdr.bth.psn, k.hdr.bth.dest_qp, k.hdr.aeth),
            (ack.psn, 0x11, Some(ack.aeth))
        );
        let mut plain = Vec::new();
        emit(
            &Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 3, Psn::new(4))),
            b"x",
            &mut plain,
        )
        .unwrap();
        assert_eq!(lane_packets(&plain), vec![plain.clone()]);
        assert!(!LaneAck::announced(&plain));
        let mut u = Headers::new(Bth::new(Opcode::UC_SEND_ONLY, 0x11, Psn::new(1)));
        u.lane_ack = Some(ack);
        let mut out = Vec::new();
        emit(&u, b"x", &mut out).unwrap();
        assert!(Packet::parse_lane(&out).is_err());
    }

    #[test]
    fn send_only_roundtrip() {
        let mut h = Headers::new(Bth::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(0x100)));
        h.bth.ack_req = true;
        let mut out = Vec::new();
        let n = emit(&h, b"hello", &mut out).unwrap();
        assert_eq!(n, 12 + 5 + 3 + 4);
        let p = Packet::parse(&out).unwrap();
        assert_eq!(p.payload, b"hello");
        assert_eq!(p.hdr.bth.pad, 3);
        assert!(p.hdr.bth.ack_req);
    }

    #[test]
    fn xrc_send_carries_the_xrceth_after_the_bth() {
        let mut h = Headers::new(Bth::new(
            Opcode::XRC_SEND_ONLY_WITH_IMMEDIATE,
            0x22,
            Psn::new(5),
        ));
        h.xrceth = Some(0x0012_3456);
        h.imm = Some(0xDEAD_BEEF);
        let mut out = Vec::new();
        let n = emit(&h, b"xrc!", &mut out).unwrap();
        assert_eq!(n, 12 + 4 + 4 + 4 + 4);
        assert_eq!(out[0], 0xA5);
        assert_eq!(&out[12..16], &[0x00, 0x12, 0x34, 0x56]);
        assert_eq!(&out[16..20], &[0xDE, 0xAD, 0xBE, 0xEF]);
        assert_eq!(&out[20..24], b"xrc!");
        // A peer's nonzero reserved byte is kept (parsing is lossless) and
        // not part of the SRQ number.
        out[12] = 0xFF;
        let p = Packet::parse(&out).unwrap();
        assert_eq!(p.hdr.xrceth, Some(0xFF12_3456));
        assert_eq!(xrc_srqn(p.hdr.xrceth.unwrap()), 0x12_3456);
        assert_eq!(p.hdr.imm, Some(0xDEAD_BEEF));
        assert_eq!(p.payload, b"xrc!");
        assert_eq!(p.header_len(), 20);
    }

    #[test]
    fn xrc_write_and_atomic_put_the_xrceth_before_reth_and_atomiceth() {
        let mut h = Headers::new(Bth::new(Opcode::XRC_RDMA_WRITE_FIRST, 1, Psn::new(0)));
        h.xrceth = Some(7);
        h.reth = Some(Reth {
            va: 0x1122_3344_5566_7788,
            rkey: 0x99,
            dma_len: 4096,
        });
        let mut out = Vec::new();
        emit(&h, &[0u8; 8], &mut out).unwrap();
        assert_eq!(&out[12..16], &[0, 0, 0, 7]);
        assert_eq!(&out[16..24], &0x1122_3344_5566_7788u64.to_be_bytes());
        let p = Packet::parse(&out).unwrap();
        assert_eq!(p.hdr.reth, h.reth);
        assert_eq!(p.hdr.xrceth, Some(7));

        let mut a = Headers::new(Bth::new(Opcode::XRC_FETCH_ADD, 1, Psn::new(0)));
        a.xrceth = Some(0xFF_FFFF);
        a.atomic_eth = Some(AtomicEth {
            va: 8,
            rkey: 3,
            swap_add: 1,
            compare: 0,
        });
        let mut out = Vec::new();
        emit(&a, &[], &mut out).unwrap();
        assert_eq!(out.len(), 12 + 4 + 28 + 4);
        let p = Packet::parse(&out).unwrap();
        assert_eq!(p.hdr.xrceth, Some(0xFF_FFFF));
        assert_eq!(p.hdr.atomic_eth, a.atomic_eth);
        // A truncated XRCETH is an error, not a panic.
        assert!(Packet::parse(&out[..12 + 4 + 2]).is_err());
    }

    #[test]
    fn xrc_ack_has_no_xrceth() {
        let mut h = Headers::new(Bth::new(Opcode::XRC_ACKNOWLEDGE, 1, Psn::new(0)));
        h.xrceth = Some(5); // ignored: responses carry none
        let mut out = Vec::new();
        assert_eq!(emit(&h, &[], &mut out).unwrap(), 12 + 4 + 4);
        assert_eq!(Packet::parse(&out).unwrap().hdr.xrceth, None);
    }

    #[test]
    fn atomic_ack_roundtrip() {
        let mut h = Headers::new(Bth::new(Opcode::RC_ATOMIC_ACKNOWLEDGE, 7, Psn::new(9)));
        h.aeth = Some(Aeth {
            syndrome: Syndrome::Ack { credits: 0x1f },
            msn: 3,
        });
        h.atomic_ack = Some(0x0102_0304_0506_0708);
        let mut out = Vec::new();
        emit(&h, &[], &mut out).unwrap();
        assert_eq!(out.len(), 12 + 4 + 8 + 4);
        let p = Packet::parse(&out).unwrap();
        assert_eq!(p.hdr, h);
    }

    #[test]
    fn rejects_garbage() {
        assert!(matches!(
            Packet::parse(&[0; 10]),
            Err(Error::Truncated { .. })
        ));
        let mut b = [0u8; 20];
        b[1] = 1; // tver
        assert_eq!(Packet::parse(&b), Err(Error::BadTver(1)));
        b[1] = 0;
        b[0] = 0x15;
        assert_eq!(Packet::parse(&b), Err(Error::UnknownOpcode(0x15)));
        b[0] = 0x0A; // write only needs RETH
        assert!(matches!(Packet::parse(&b), Err(Error::Truncated { .. })));
        let mut a = [0u8; 24];
        a[0] = 0x11; // ACK with 4 bytes of payload
        assert!(matches!(Packet::parse(&a), Err(Error::BadLength(_))));
        let mut c = [0u8; 16];
        c[1] = 0x30; // pad 3 with nothing to pad
        assert!(matches!(Packet::parse(&c), Err(Error::BadPad { .. })));
    }
}
