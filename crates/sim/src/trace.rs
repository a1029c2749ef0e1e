//! Packet traces: what went on the wire, as one readable line per packet, so
//! tests can assert exact exchanges with literal times (smoltcp style).
//!
//! A line reads
//! `4.000 0>1 RC_SEND_FIRST psn=100 len=256` or
//! `9.000 1>0 RC_ACKNOWLEDGE psn=103 ACK msn=1` or
//! `0.000 0>1 RC_RDMA_READ_REQUEST psn=5 A va=0x100001000 rkey=mr1 dlen=4096 DROPPED`:
//! send time in µs, sender > receiver, opcode, PSN, `A` (AckReq) and `SE`
//! bits when set, then the extension headers that are present and the
//! payload length, and the packet's fate when it did not arrive.

use softrdma_transport::{Instant, Wc, WcFlags, WcOpcode};
use softrdma_wire::{NakCode, Packet, Syndrome};
use std::fmt::Write as _;

/// What the network did with a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Put on the wire (it may still be duplicated, delayed or corrupted).
    Sent,
    /// Lost by the random loss model.
    Lost,
    /// Removed by a [`crate::DropRule`].
    Dropped,
    /// Delivered with one bit flipped (the receiver's ICRC check drops it).
    Corrupted,
}

/// One packet put on the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// When it was sent.
    pub at: Instant,
    /// Sending node.
    pub from: usize,
    /// Receiving node (`usize::MAX`: no such address).
    pub to: usize,
    /// UDP payload (BTH..ICRC) as sent.
    pub data: Vec<u8>,
    /// What became of it.
    pub fate: Fate,
    /// Extra delay of each copy delivered (two copies: duplicated; a
    /// non-zero delay: reordered).
    pub delays: Vec<std::time::Duration>,
}

impl TraceEntry {
    /// The packet, parsed (the transport only sends well-formed packets).
    pub fn packet(&self) -> Packet<'_> {
        Packet::parse(&self.data).expect("the transport sent a malformed packet")
    }
}

/// Formats a time as microseconds with three decimals (`4194.304`).
pub fn micros(t: Instant) -> String {
    let ns = t.as_nanos();
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

fn syndrome(s: Syndrome) -> String {
    match s {
        Syndrome::Ack { credits: 0x1F } => "ACK".into(),
        Syndrome::Ack { credits } => format!("ACK(credits={credits})"),
        Syndrome::RnrNak { timer } => format!("RNR(timer={timer})"),
        Syndrome::Nak(NakCode::PsnSequence) => "NAK-SEQ".into(),
        Syndrome::Nak(NakCode::InvalidRequest) => "NAK-INV".into(),
        Syndrome::Nak(NakCode::RemoteAccess) => "NAK-ACC".into(),
        Syndrome::Nak(NakCode::RemoteOperational) => "NAK-OP".into(),
        Syndrome::Nak(c) => format!("NAK({})", c.value()),
        Syndrome::Reserved(b) => format!("SYN({b:#x})"),
    }
}

fn key(k: u32, names: &[(u32, String)]) -> String {
    match names.iter().find(|(n, _)| *n == k) {
        Some((_, s)) => s.clone(),
        None => format!("{k:#x}"),
    }
}

/// The packet part of a trace line (no time, no direction, no fate).
pub fn describe(data: &[u8], names: &[(u32, String)]) -> String {
    let p = match Packet::parse(data) {
        Ok(p) => p,
        Err(e) => return format!("MALFORMED({e:?})"),
    };
    let h = &p.hdr;
    let mut s = format!("{} psn={}", h.bth.opcode.name(), h.bth.psn.get());
    if h.bth.ack_req {
        s += " A";
    }
    if h.bth.se {
        s += " SE";
    }
    if let Some(d) = h.deth {
        let _ = write!(s, " qkey={:#x}", d.qkey);
    }
    if let Some(r) = h.reth {
        let _ = write!(
            s,
            " va={:#x} rkey={} dlen={}",
            r.va,
            key(r.rkey, names),
            r.dma_len
        );
    }
    if let Some(a) = h.atomic_eth {
        let _ = write!(
            s,
            " va={:#x} rkey={} swap_add={} cmp={}",
            a.va,
            key(a.rkey, names),
            a.swap_add,
            a.compare
        );
    }
    if let Some(a) = h.aeth {
        let _ = write!(s, " {} msn={}", syndrome(a.syndrome), a.msn);
    }
    if let Some(o) = h.atomic_ack {
        let _ = write!(s, " orig={o}");
    }
    if let Some(i) = h.imm {
        let _ = write!(s, " imm={i:#x}");
    }
    if let Some(i) = h.ieth {
        let _ = write!(s, " inv={}", key(i, names));
    }
    if p.info.has_payload {
        let _ = write!(s, " len={}", p.payload.len());
    }
    s
}

/// One trace line: `time from>to packet [fate]`.
pub fn line(e: &TraceEntry, names: &[(u32, String)]) -> String {
    let mut s = format!(
        "{} {}>{} {}",
        micros(e.at),
        e.from,
        e.to,
        describe(&e.data, names)
    );
    match e.fate {
        Fate::Sent => {}
        Fate::Lost => s += " LOST",
        Fate::Dropped => s += " DROPPED",
        Fate::Corrupted => s += " CORRUPTED",
    }
    if e.delays.len() > 1 {
        s += " DUPLICATED";
    }
    for d in e.delays.iter().filter(|d| !d.is_zero()) {
        let _ = write!(
            s,
            " DELAYED+{}",
            micros(Instant::from_nanos(d.as_nanos() as u64))
        );
    }
    s
}

/// Asserts that `got` equals `want` line by line (leading blanks ignored),
/// printing both traces in full on a mismatch so the difference is obvious.
#[track_caller]
pub fn assert_lines(got: &[String], want: &[&str]) {
    let g: Vec<&str> = got.iter().map(|l| l.trim_start()).collect();
    let w: Vec<&str> = want.iter().map(|l| l.trim_start()).collect();
    if g != w {
        let mut msg = String::from("trace mismatch\n--- expected\n");
        for l in &w {
            msg += l;
            msg.push('\n');
        }
        msg += "--- got\n";
        for (i, l) in g.iter().enumerate() {
            let mark = if w.get(i) == Some(l) { ' ' } else { '!' };
            let _ = writeln!(msg, "{mark} {l}");
        }
        panic!("{msg}");
    }
}

/// A completion as a short line: `wr_id opcode status len=N [imm=..|WITH_IMM] [GRH]`.
pub fn wc_line(w: &Wc) -> String {
    let mut s = format!(
        "{} {:?} {:?} len={}",
        w.wr_id, w.opcode, w.status, w.byte_len
    );
    if w.wc_flags.contains(WcFlags::WITH_IMM) {
        // Receives carry the value; the sender's completion only the flag.
        if matches!(w.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm) {
            let _ = write!(s, " imm={:#x}", w.imm_data);
        } else {
            s += " WITH_IMM";
        }
    }
    if w.wc_flags.contains(WcFlags::WITH_INV) {
        let _ = write!(s, " inv={:#x}", w.imm_data);
    }
    if w.wc_flags.contains(WcFlags::GRH) {
        s += " GRH";
    }
    s
}
