//! Base and extended transport headers (IBTA 9.2-9.5), big-endian on the wire.
//!
//! Each header is a plain `Repr` struct with a fixed `LEN`, a `read` from a slice
//! at least `LEN` long and an `write` into one. Length checks happen once, in
//! [`crate::packet::Packet::parse`], so these helpers index freely.

use crate::opcode::Opcode;
use crate::psn::Psn;

fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}
fn be24(b: &[u8]) -> u32 {
    u32::from_be_bytes([0, b[0], b[1], b[2]])
}
fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}
fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}
fn put24(b: &mut [u8], v: u32) {
    b[..3].copy_from_slice(&v.to_be_bytes()[1..]);
}

/// Base transport header (12 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bth {
    /// Opcode.
    pub opcode: Opcode,
    /// Solicited event.
    pub se: bool,
    /// Migration request (rxe sends 0; ignored on receive).
    pub mig: bool,
    /// Pad count (0..=3).
    pub pad: u8,
    /// Transport header version (must be 0).
    pub tver: u8,
    /// Partition key.
    pub pkey: u16,
    /// FECN bit (masked out of the ICRC).
    pub fecn: bool,
    /// BECN bit (masked out of the ICRC).
    pub becn: bool,
    /// Reserved six bits after FECN/BECN (masked out of the ICRC).
    pub resv6: u8,
    /// Destination QP number (24 bits).
    pub dest_qp: u32,
    /// Acknowledge request.
    pub ack_req: bool,
    /// Reserved seven bits before the PSN.
    pub resv7: u8,
    /// Packet sequence number.
    pub psn: Psn,
}

impl Bth {
    /// Header length.
    pub const LEN: usize = 12;

    /// A BTH with the given opcode, QP and PSN; P_Key 0xFFFF; everything else zero.
    pub const fn new(opcode: Opcode, dest_qp: u32, psn: Psn) -> Bth {
        Bth {
            opcode,
            se: false,
            mig: false,
            pad: 0,
            tver: 0,
            pkey: 0xFFFF,
            fecn: false,
            becn: false,
            resv6: 0,
            dest_qp: dest_qp & 0x00FF_FFFF,
            ack_req: false,
            resv7: 0,
            psn,
        }
    }

    /// Reads a BTH from the first 12 bytes of `b`.
    pub fn read(b: &[u8]) -> Bth {
        Bth {
            opcode: Opcode(b[0]),
            se: b[1] & 0x80 != 0,
            mig: b[1] & 0x40 != 0,
            pad: (b[1] >> 4) & 3,
            tver: b[1] & 0x0F,
            pkey: be16(&b[2..]),
            fecn: b[4] & 0x80 != 0,
            becn: b[4] & 0x40 != 0,
            resv6: b[4] & 0x3F,
            dest_qp: be24(&b[5..]),
            ack_req: b[8] & 0x80 != 0,
            resv7: b[8] & 0x7F,
            psn: Psn::new(be24(&b[9..])),
        }
    }

    /// Writes the BTH into the first 12 bytes of `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[0] = self.opcode.0;
        b[1] = (u8::from(self.se) << 7)
            | (u8::from(self.mig) << 6)
            | ((self.pad & 3) << 4)
            | (self.tver & 0x0F);
        b[2..4].copy_from_slice(&self.pkey.to_be_bytes());
        b[4] = (u8::from(self.fecn) << 7) | (u8::from(self.becn) << 6) | (self.resv6 & 0x3F);
        put24(&mut b[5..], self.dest_qp);
        b[8] = (u8::from(self.ack_req) << 7) | (self.resv7 & 0x7F);
        put24(&mut b[9..], self.psn.get());
    }
}

/// RDMA extended transport header (16 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reth {
    /// Remote virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// DMA length: the remaining length of the whole message (rxe).
    pub dma_len: u32,
}

impl Reth {
    /// Header length.
    pub const LEN: usize = 16;
    /// Reads from `b`.
    pub fn read(b: &[u8]) -> Reth {
        Reth {
            va: be64(b),
            rkey: be32(&b[8..]),
            dma_len: be32(&b[12..]),
        }
    }
    /// Writes into `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&self.dma_len.to_be_bytes());
    }
}

/// Datagram extended transport header (8 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deth {
    /// Queue key.
    pub qkey: u32,
    /// Reserved byte.
    pub resv8: u8,
    /// Source QP number (24 bits).
    pub src_qp: u32,
}

impl Deth {
    /// Header length.
    pub const LEN: usize = 8;
    /// Reads from `b`.
    pub fn read(b: &[u8]) -> Deth {
        Deth {
            qkey: be32(b),
            resv8: b[4],
            src_qp: be24(&b[5..]),
        }
    }
    /// Writes into `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[..4].copy_from_slice(&self.qkey.to_be_bytes());
        b[4] = self.resv8;
        put24(&mut b[5..], self.src_qp);
    }
}

/// Atomic extended transport header (28 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicEth {
    /// Remote virtual address (8-byte aligned).
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value (CmpSwap) or addend (FetchAdd).
    pub swap_add: u64,
    /// Compare value (CmpSwap only).
    pub compare: u64,
}

impl AtomicEth {
    /// Header length.
    pub const LEN: usize = 28;
    /// Reads from `b`.
    pub fn read(b: &[u8]) -> AtomicEth {
        AtomicEth {
            va: be64(b),
            rkey: be32(&b[8..]),
            swap_add: be64(&b[12..]),
            compare: be64(&b[20..]),
        }
    }
    /// Writes into `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..20].copy_from_slice(&self.swap_add.to_be_bytes());
        b[20..28].copy_from_slice(&self.compare.to_be_bytes());
    }
}

/// NAK codes carried in an AETH with syndrome type 3 (IBTA table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error (0).
    PsnSequence,
    /// Invalid request (1).
    InvalidRequest,
    /// Remote access error (2).
    RemoteAccess,
    /// Remote operational error (3).
    RemoteOperational,
    /// Invalid RD request (4).
    InvalidRdRequest,
    /// A reserved value (kept so it round-trips).
    Reserved(u8),
}

impl NakCode {
    /// The five-bit value.
    pub const fn value(self) -> u8 {
        match self {
            NakCode::PsnSequence => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccess => 2,
            NakCode::RemoteOperational => 3,
            NakCode::InvalidRdRequest => 4,
            NakCode::Reserved(v) => v & 0x1F,
        }
    }
    /// From a five-bit value.
    pub const fn from_value(v: u8) -> NakCode {
        match v & 0x1F {
            0 => NakCode::PsnSequence,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccess,
            3 => NakCode::RemoteOperational,
            4 => NakCode::InvalidRdRequest,
            x => NakCode::Reserved(x),
        }
    }
}

/// Decoded AETH syndrome (IBTA 9.7.5.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Syndrome {
    /// Positive acknowledgement with a credit count (0x1F = unlimited).
    Ack {
        /// End-to-end credit count.
        credits: u8,
    },
    /// Receiver not ready, with the RNR timer code (index into [`rnr_timer_ns`]).
    RnrNak {
        /// Five-bit RNR timer code.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
    /// Type 2, or reserved bit 7 set; the raw syndrome byte is kept.
    Reserved(u8),
}

impl Syndrome {
    /// The syndrome byte (bit 7 always zero).
    pub const fn byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1F,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1F),
            Syndrome::Nak(c) => 0x60 | c.value(),
            Syndrome::Reserved(b) => b,
        }
    }
    /// Decodes a syndrome byte.
    ///
    /// Bit 7 is reserved; a byte with it set is [`Syndrome::Reserved`] (rxe
    /// switches on `syn & 0xE0`, so it matches none of ACK/RNR/NAK there either),
    /// which also keeps `from_byte(b).byte() == b` for every byte.
    pub const fn from_byte(b: u8) -> Syndrome {
        match b >> 5 {
            0 => Syndrome::Ack { credits: b & 0x1F },
            1 => Syndrome::RnrNak { timer: b & 0x1F },
            3 => Syndrome::Nak(NakCode::from_value(b)),
            _ => Syndrome::Reserved(b),
        }
    }
}

/// ACK extended transport header (4 bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Aeth {
    /// Syndrome.
    pub syndrome: Syndrome,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl Aeth {
    /// Header length.
    pub const LEN: usize = 4;
    /// Reads from `b`.
    pub fn read(b: &[u8]) -> Aeth {
        Aeth {
            syndrome: Syndrome::from_byte(b[0]),
            msn: be24(&b[1..]),
        }
    }
    /// Writes into `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[0] = self.syndrome.byte();
        put24(&mut b[1..], self.msn);
    }
}

/// FLUSH extended transport header (4 bytes, IBA 1.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Feth {
    /// Raw 32-bit word: selectivity level in bits 5:4, placement type in bits 3:0.
    pub word: u32,
}

impl Feth {
    /// Header length.
    pub const LEN: usize = 4;
    /// Reads from `b`.
    pub fn read(b: &[u8]) -> Feth {
        Feth { word: be32(b) }
    }
    /// Writes into `b`.
    pub fn write(&self, b: &mut [u8]) {
        b[..4].copy_from_slice(&self.word.to_be_bytes());
    }
}

/// Reads a big-endian u32 (ImmDt, IETH) from `b`.
pub fn read_u32(b: &[u8]) -> u32 {
    be32(b)
}

/// Reads a big-endian u64 (AtomicAckETH) from `b`.
pub fn read_u64(b: &[u8]) -> u64 {
    be64(b)
}

/// RNR NAK timer code to nanoseconds (IBTA table 45; code 0 = 655.36 ms).
pub const fn rnr_timer_ns(code: u8) -> u64 {
    // Units of 10 µs; code 0 is the longest delay, 655.36 ms.
    const TEN_US: [u64; 32] = [
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
        1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    TEN_US[(code & 0x1F) as usize] * 10_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bth_roundtrip() {
        let mut b = Bth::new(Opcode::RC_SEND_ONLY, 0x11, Psn::new(0x100));
        b.pad = 3;
        b.ack_req = true;
        let mut buf = [0u8; 12];
        b.write(&mut buf);
        assert_eq!(
            buf,
            [0x04, 0x30, 0xff, 0xff, 0, 0, 0, 0x11, 0x80, 0, 0x01, 0x00]
        );
        assert_eq!(Bth::read(&buf), b);
    }

    #[test]
    fn syndromes() {
        assert_eq!(Syndrome::from_byte(0x1f), Syndrome::Ack { credits: 31 });
        assert_eq!(Syndrome::from_byte(0x2e), Syndrome::RnrNak { timer: 14 });
        assert_eq!(
            Syndrome::from_byte(0x62),
            Syndrome::Nak(NakCode::RemoteAccess)
        );
        for b in 0..=0xff {
            assert_eq!(Syndrome::from_byte(b).byte(), b);
        }
        assert_eq!(Syndrome::from_byte(0x9f), Syndrome::Reserved(0x9f));
        assert_eq!(Syndrome::from_byte(0xe0), Syndrome::Reserved(0xe0));
    }

    #[test]
    fn rnr_table() {
        assert_eq!(rnr_timer_ns(0), 655_360_000);
        assert_eq!(rnr_timer_ns(1), 10_000);
        assert_eq!(rnr_timer_ns(14), 1_280_000);
        assert_eq!(rnr_timer_ns(25), 61_440_000);
        assert_eq!(rnr_timer_ns(31), 491_520_000);
    }
}
