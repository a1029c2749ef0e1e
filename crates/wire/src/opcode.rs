//! BTH opcodes (IBTA 9.2.2, rxe_opcode.c) as an open enum plus a property table.

use core::fmt;

/// Transport service encoded in opcode bits 7:5.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected (0x00).
    Rc,
    /// Unreliable Connected (0x20).
    Uc,
    /// Unreliable Datagram (0x60).
    Ud,
    /// Congestion notification packet (0x80).
    Cnp,
    /// Extended Reliable Connected (0xA0, IBTA annex A14): RC with an
    /// XRCETH naming the target SRQ in every request packet.
    Xrc,
}

/// The operation an opcode belongs to, independent of transport and position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// SEND (optionally with immediate or invalidate).
    Send,
    /// RDMA WRITE (optionally with immediate).
    Write,
    /// RDMA READ request.
    ReadRequest,
    /// RDMA READ response.
    ReadResponse,
    /// ACKNOWLEDGE (ACK or NAK, per AETH syndrome).
    Acknowledge,
    /// ATOMIC ACKNOWLEDGE.
    AtomicAcknowledge,
    /// CmpSwap atomic.
    CompareSwap,
    /// FetchAdd atomic.
    FetchAdd,
    /// FLUSH (IBA 1.5).
    Flush,
    /// ATOMIC WRITE (IBA 1.5).
    AtomicWrite,
    /// Congestion notification.
    Cnp,
}

/// Where a packet sits inside a multi-packet message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// First packet of several.
    First,
    /// Neither first nor last.
    Middle,
    /// Last packet of several.
    Last,
    /// The whole message in one packet.
    Only,
}

impl Position {
    /// True for FIRST and ONLY packets (the ones that start a message).
    pub const fn starts(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }
    /// True for LAST and ONLY packets (the ones that end a message).
    pub const fn ends(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// Bit set of extension headers following the BTH, in wire order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HeaderSet(u16);

impl HeaderSet {
    /// Datagram extended transport header (8 bytes).
    pub const DETH: HeaderSet = HeaderSet(1 << 0);
    /// RDMA extended transport header (16 bytes).
    pub const RETH: HeaderSet = HeaderSet(1 << 1);
    /// Atomic extended transport header (28 bytes).
    pub const ATOMIC_ETH: HeaderSet = HeaderSet(1 << 2);
    /// ACK extended transport header (4 bytes).
    pub const AETH: HeaderSet = HeaderSet(1 << 3);
    /// Atomic ACK extended transport header (8 bytes).
    pub const ATOMIC_ACK_ETH: HeaderSet = HeaderSet(1 << 4);
    /// Immediate data (4 bytes).
    pub const IMM: HeaderSet = HeaderSet(1 << 5);
    /// Invalidate extended transport header (4 bytes).
    pub const IETH: HeaderSet = HeaderSet(1 << 6);
    /// Flush extended transport header (4 bytes).
    pub const FETH: HeaderSet = HeaderSet(1 << 7);
    /// XRC extended transport header (4 bytes: 8 reserved bits, 24-bit XRC
    /// SRQ number), right after the BTH in every XRC request packet.
    pub const XRCETH: HeaderSet = HeaderSet(1 << 8);
    /// No extension headers.
    pub const NONE: HeaderSet = HeaderSet(0);

    /// Union of two sets.
    pub const fn with(self, other: HeaderSet) -> HeaderSet {
        HeaderSet(self.0 | other.0)
    }
    /// True if every header of `other` is in `self`.
    pub const fn contains(self, other: HeaderSet) -> bool {
        self.0 & other.0 == other.0
    }
    /// Total length in bytes of the extension headers in this set.
    pub const fn len(self) -> usize {
        let mut n = 0;
        if self.contains(Self::DETH) {
            n += 8;
        }
        if self.contains(Self::XRCETH) {
            n += 4;
        }
        if self.contains(Self::FETH) {
            n += 4;
        }
        if self.contains(Self::RETH) {
            n += 16;
        }
        if self.contains(Self::ATOMIC_ETH) {
            n += 28;
        }
        if self.contains(Self::AETH) {
            n += 4;
        }
        if self.contains(Self::ATOMIC_ACK_ETH) {
            n += 8;
        }
        if self.contains(Self::IMM) {
            n += 4;
        }
        if self.contains(Self::IETH) {
            n += 4;
        }
        n
    }
    /// True when the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl fmt::Debug for HeaderSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = [
            (Self::DETH, "DETH"),
            (Self::XRCETH, "XRCETH"),
            (Self::FETH, "FETH"),
            (Self::RETH, "RETH"),
            (Self::ATOMIC_ETH, "AtomicETH"),
            (Self::AETH, "AETH"),
            (Self::ATOMIC_ACK_ETH, "AtomicAckETH"),
            (Self::IMM, "ImmDt"),
            (Self::IETH, "IETH"),
        ];
        let mut l = f.debug_set();
        for (h, n) in names {
            if self.contains(h) {
                l.entry(&format_args!("{n}"));
            }
        }
        l.finish()
    }
}

/// Static properties of a supported opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpcodeInfo {
    /// Name as in IBTA / Wireshark (e.g. `RC_SEND_FIRST`).
    pub name: &'static str,
    /// Transport service.
    pub transport: Transport,
    /// Operation.
    pub operation: Operation,
    /// Position inside the message.
    pub position: Position,
    /// Extension headers after the BTH.
    pub headers: HeaderSet,
    /// Whether the packet may carry a payload.
    pub has_payload: bool,
    /// A softrdma peer-copy opcode ([`crate::peer`]): the payload is a list
    /// of memory ranges in the sender's process, not data. Only between
    /// softrdma processes of one host over shared-memory lanes; never valid
    /// on a wire.
    pub peer: bool,
}

impl OpcodeInfo {
    /// True for packets sent by a requester (as opposed to ACKs and read responses).
    pub const fn is_request(&self) -> bool {
        request_op(self.operation)
    }
    /// True if the opcode carries an XRCETH (XRC requests).
    pub const fn has_xrceth(&self) -> bool {
        self.headers.contains(HeaderSet::XRCETH)
    }
    /// True if the opcode carries immediate data.
    pub const fn has_imm(&self) -> bool {
        self.headers.contains(HeaderSet::IMM)
    }
    /// True if the opcode carries an IETH (send with invalidate).
    pub const fn has_ieth(&self) -> bool {
        self.headers.contains(HeaderSet::IETH)
    }
    /// True for the two 8-byte atomics (CmpSwap, FetchAdd).
    pub const fn is_atomic(&self) -> bool {
        matches!(self.operation, Operation::CompareSwap | Operation::FetchAdd)
    }
}

/// A BTH opcode. Unknown values are representable so they round-trip and print in hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(pub u8);

macro_rules! opcodes {
    ($($name:ident = $val:expr;)*) => {
        impl Opcode {
            $(
                #[allow(missing_docs)]
                pub const $name: Opcode = Opcode($val);
            )*
        }
    };
}

opcodes! {
    RC_SEND_FIRST = 0x00;
    RC_SEND_MIDDLE = 0x01;
    RC_SEND_LAST = 0x02;
    RC_SEND_LAST_WITH_IMMEDIATE = 0x03;
    RC_SEND_ONLY = 0x04;
    RC_SEND_ONLY_WITH_IMMEDIATE = 0x05;
    RC_RDMA_WRITE_FIRST = 0x06;
    RC_RDMA_WRITE_MIDDLE = 0x07;
    RC_RDMA_WRITE_LAST = 0x08;
    RC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x09;
    RC_RDMA_WRITE_ONLY = 0x0A;
    RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x0B;
    RC_RDMA_READ_REQUEST = 0x0C;
    RC_RDMA_READ_RESPONSE_FIRST = 0x0D;
    RC_RDMA_READ_RESPONSE_MIDDLE = 0x0E;
    RC_RDMA_READ_RESPONSE_LAST = 0x0F;
    RC_RDMA_READ_RESPONSE_ONLY = 0x10;
    RC_ACKNOWLEDGE = 0x11;
    RC_ATOMIC_ACKNOWLEDGE = 0x12;
    RC_COMPARE_SWAP = 0x13;
    RC_FETCH_ADD = 0x14;
    RC_SEND_LAST_WITH_INVALIDATE = 0x16;
    RC_SEND_ONLY_WITH_INVALIDATE = 0x17;
    RC_FLUSH = 0x1C;
    RC_ATOMIC_WRITE = 0x1D;
    UC_SEND_FIRST = 0x20;
    UC_SEND_MIDDLE = 0x21;
    UC_SEND_LAST = 0x22;
    UC_SEND_LAST_WITH_IMMEDIATE = 0x23;
    UC_SEND_ONLY = 0x24;
    UC_SEND_ONLY_WITH_IMMEDIATE = 0x25;
    UC_RDMA_WRITE_FIRST = 0x26;
    UC_RDMA_WRITE_MIDDLE = 0x27;
    UC_RDMA_WRITE_LAST = 0x28;
    UC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0x29;
    UC_RDMA_WRITE_ONLY = 0x2A;
    UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0x2B;
    UD_SEND_ONLY = 0x64;
    UD_SEND_ONLY_WITH_IMMEDIATE = 0x65;
    CNP = 0x81;
    XRC_SEND_FIRST = 0xA0;
    XRC_SEND_MIDDLE = 0xA1;
    XRC_SEND_LAST = 0xA2;
    XRC_SEND_LAST_WITH_IMMEDIATE = 0xA3;
    XRC_SEND_ONLY = 0xA4;
    XRC_SEND_ONLY_WITH_IMMEDIATE = 0xA5;
    XRC_RDMA_WRITE_FIRST = 0xA6;
    XRC_RDMA_WRITE_MIDDLE = 0xA7;
    XRC_RDMA_WRITE_LAST = 0xA8;
    XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE = 0xA9;
    XRC_RDMA_WRITE_ONLY = 0xAA;
    XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE = 0xAB;
    XRC_RDMA_READ_REQUEST = 0xAC;
    XRC_RDMA_READ_RESPONSE_FIRST = 0xAD;
    XRC_RDMA_READ_RESPONSE_MIDDLE = 0xAE;
    XRC_RDMA_READ_RESPONSE_LAST = 0xAF;
    XRC_RDMA_READ_RESPONSE_ONLY = 0xB0;
    XRC_ACKNOWLEDGE = 0xB1;
    XRC_ATOMIC_ACKNOWLEDGE = 0xB2;
    XRC_COMPARE_SWAP = 0xB3;
    XRC_FETCH_ADD = 0xB4;
    XRC_SEND_LAST_WITH_INVALIDATE = 0xB6;
    XRC_SEND_ONLY_WITH_INVALIDATE = 0xB7;
    SOFTRDMA_RC_RDMA_WRITE_ONLY_PEER = 0xE0;
    SOFTRDMA_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE_PEER = 0xE1;
    SOFTRDMA_RC_RDMA_READ_REQUEST_PEER = 0xE2;
    SOFTRDMA_RC_RDMA_READ_RESPONSE_ONLY_PEER = 0xE3;
    SOFTRDMA_RC_SEND_ONLY_PEER = 0xE4;
    SOFTRDMA_RC_SEND_ONLY_WITH_IMMEDIATE_PEER = 0xE5;
    SOFTRDMA_RC_SEND_ONLY_WITH_INVALIDATE_PEER = 0xE6;
}

/// [`Opcode::info`] of every opcode, computed at compile time: the packet
/// path asks several times per packet (parse, header length, opcode choice),
/// and the computation's matches cost ~100 instructions a call (callgrind of
/// `ib_send_lat`, issue 17).
static INFO: [Option<OpcodeInfo>; 256] = {
    let mut t = [None; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = Opcode(i as u8).compute_info();
        i += 1;
    }
    t
};

impl Opcode {
    /// Properties of this opcode, or `None` if it is reserved or unsupported
    /// (RD; XRC's FLUSH and ATOMIC WRITE).
    pub const fn info(self) -> Option<OpcodeInfo> {
        INFO[self.0 as usize]
    }

    /// What [`Opcode::info`] returns, computed (for the table).
    const fn compute_info(self) -> Option<OpcodeInfo> {
        use HeaderSet as H;
        use Operation as O;
        use Position as P;
        if let Some(i) = peer_info(self.0) {
            return Some(i);
        }
        let transport = match self.0 & 0xE0 {
            0x00 => Transport::Rc,
            0x20 => Transport::Uc,
            0x60 => Transport::Ud,
            0x80 => Transport::Cnp,
            0xA0 => Transport::Xrc,
            _ => return None,
        };
        let low = self.0 & 0x1F;
        let (name, op, pos, hdrs, payload): (&str, O, P, H, bool) = match (transport, low) {
            (Transport::Cnp, 0x01) => ("CNP", O::Cnp, P::Only, H::NONE, true),
            (Transport::Ud, 0x04) => ("UD_SEND_ONLY", O::Send, P::Only, H::DETH, true),
            (Transport::Ud, 0x05) => (
                "UD_SEND_ONLY_WITH_IMMEDIATE",
                O::Send,
                P::Only,
                H::DETH.with(H::IMM),
                true,
            ),
            (Transport::Rc | Transport::Uc | Transport::Xrc, l) => {
                let rc = !matches!(transport, Transport::Uc);
                let xrc = matches!(transport, Transport::Xrc);
                let e = match l {
                    0x00 => (O::Send, P::First, H::NONE, true),
                    0x01 => (O::Send, P::Middle, H::NONE, true),
                    0x02 => (O::Send, P::Last, H::NONE, true),
                    0x03 => (O::Send, P::Last, H::IMM, true),
                    0x04 => (O::Send, P::Only, H::NONE, true),
                    0x05 => (O::Send, P::Only, H::IMM, true),
                    0x06 => (O::Write, P::First, H::RETH, true),
                    0x07 => (O::Write, P::Middle, H::NONE, true),
                    0x08 => (O::Write, P::Last, H::NONE, true),
                    0x09 => (O::Write, P::Last, H::IMM, true),
                    0x0A => (O::Write, P::Only, H::RETH, true),
                    0x0B => (O::Write, P::Only, H::RETH.with(H::IMM), true),
                    _ if !rc => return None,
                    0x0C => (O::ReadRequest, P::Only, H::RETH, false),
                    0x0D => (O::ReadResponse, P::First, H::AETH, true),
                    0x0E => (O::ReadResponse, P::Middle, H::NONE, true),
                    0x0F => (O::ReadResponse, P::Last, H::AETH, true),
                    0x10 => (O::ReadResponse, P::Only, H::AETH, true),
                    0x11 => (O::Acknowledge, P::Only, H::AETH, false),
                    0x12 => (
                        O::AtomicAcknowledge,
                        P::Only,
                        H::AETH.with(H::ATOMIC_ACK_ETH),
                        false,
                    ),
                    0x13 => (O::CompareSwap, P::Only, H::ATOMIC_ETH, false),
                    0x14 => (O::FetchAdd, P::Only, H::ATOMIC_ETH, false),
                    0x16 => (O::Send, P::Last, H::IETH, true),
                    0x17 => (O::Send, P::Only, H::IETH, true),
                    0x1C if !xrc => (O::Flush, P::Only, H::FETH.with(H::RETH), false),
                    0x1D if !xrc => (O::AtomicWrite, P::Only, H::RETH, true),
                    _ => return None,
                };
                let (full, hdrs) = match transport {
                    Transport::Uc => (UC_NAMES[l as usize], e.2),
                    // Every XRC request carries the XRCETH; responses do not.
                    Transport::Xrc if request_op(e.0) => {
                        (XRC_NAMES[l as usize], e.2.with(H::XRCETH))
                    }
                    Transport::Xrc => (XRC_NAMES[l as usize], e.2),
                    _ => (RC_NAMES[l as usize], e.2),
                };
                (full, e.0, e.1, hdrs, e.3)
            }
            _ => return None,
        };
        Some(OpcodeInfo {
            name,
            transport,
            operation: op,
            position: pos,
            headers: hdrs,
            has_payload: payload,
            peer: false,
        })
    }

    /// The opcode's name, or `"UNKNOWN"`.
    pub const fn name(self) -> &'static str {
        match self.info() {
            Some(i) => i.name,
            None => "UNKNOWN",
        }
    }
}

/// True for operations a requester sends (not ACKs and read responses).
const fn request_op(op: Operation) -> bool {
    !matches!(
        op,
        Operation::ReadResponse | Operation::Acknowledge | Operation::AtomicAcknowledge
    )
}

/// The softrdma peer-copy opcodes, in the manufacturer-specific range
/// (0xC0..=0xFF, IBTA 9.2.2; 0xC0 is the lanes' doorbell): RC operations
/// whose data the receiver copies straight from the sender's memory.
const fn peer_info(op: u8) -> Option<OpcodeInfo> {
    use HeaderSet as H;
    use Operation as O;
    let (name, operation, headers, has_payload) = match op {
        0xE0 => ("SOFTRDMA_RC_RDMA_WRITE_ONLY_PEER", O::Write, H::RETH, true),
        0xE1 => (
            "SOFTRDMA_RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE_PEER",
            O::Write,
            H::RETH.with(H::IMM),
            true,
        ),
        0xE2 => (
            "SOFTRDMA_RC_RDMA_READ_REQUEST_PEER",
            O::ReadRequest,
            H::RETH,
            // Empty, or an offer of placement (`crate::peer::PlaceOffer`).
            true,
        ),
        0xE3 => (
            "SOFTRDMA_RC_RDMA_READ_RESPONSE_ONLY_PEER",
            O::ReadResponse,
            H::AETH,
            true,
        ),
        0xE4 => ("SOFTRDMA_RC_SEND_ONLY_PEER", O::Send, H::NONE, true),
        0xE5 => (
            "SOFTRDMA_RC_SEND_ONLY_WITH_IMMEDIATE_PEER",
            O::Send,
            H::IMM,
            true,
        ),
        0xE6 => (
            "SOFTRDMA_RC_SEND_ONLY_WITH_INVALIDATE_PEER",
            O::Send,
            H::IETH,
            true,
        ),
        _ => return None,
    };
    Some(OpcodeInfo {
        name,
        transport: Transport::Rc,
        operation,
        position: Position::Only,
        headers,
        has_payload,
        peer: true,
    })
}

// Full names with the transport prefix, indexed by the low five bits; entries
// for invalid combinations are never read (info() rejects them first).
const RC_NAMES: [&str; 32] = [
    "RC_SEND_FIRST",
    "RC_SEND_MIDDLE",
    "RC_SEND_LAST",
    "RC_SEND_LAST_WITH_IMMEDIATE",
    "RC_SEND_ONLY",
    "RC_SEND_ONLY_WITH_IMMEDIATE",
    "RC_RDMA_WRITE_FIRST",
    "RC_RDMA_WRITE_MIDDLE",
    "RC_RDMA_WRITE_LAST",
    "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "RC_RDMA_WRITE_ONLY",
    "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    "RC_RDMA_READ_REQUEST",
    "RC_RDMA_READ_RESPONSE_FIRST",
    "RC_RDMA_READ_RESPONSE_MIDDLE",
    "RC_RDMA_READ_RESPONSE_LAST",
    "RC_RDMA_READ_RESPONSE_ONLY",
    "RC_ACKNOWLEDGE",
    "RC_ATOMIC_ACKNOWLEDGE",
    "RC_COMPARE_SWAP",
    "RC_FETCH_ADD",
    "",
    "RC_SEND_LAST_WITH_INVALIDATE",
    "RC_SEND_ONLY_WITH_INVALIDATE",
    "",
    "",
    "",
    "",
    "RC_FLUSH",
    "RC_ATOMIC_WRITE",
    "",
    "",
];

const XRC_NAMES: [&str; 32] = [
    "XRC_SEND_FIRST",
    "XRC_SEND_MIDDLE",
    "XRC_SEND_LAST",
    "XRC_SEND_LAST_WITH_IMMEDIATE",
    "XRC_SEND_ONLY",
    "XRC_SEND_ONLY_WITH_IMMEDIATE",
    "XRC_RDMA_WRITE_FIRST",
    "XRC_RDMA_WRITE_MIDDLE",
    "XRC_RDMA_WRITE_LAST",
    "XRC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "XRC_RDMA_WRITE_ONLY",
    "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    "XRC_RDMA_READ_REQUEST",
    "XRC_RDMA_READ_RESPONSE_FIRST",
    "XRC_RDMA_READ_RESPONSE_MIDDLE",
    "XRC_RDMA_READ_RESPONSE_LAST",
    "XRC_RDMA_READ_RESPONSE_ONLY",
    "XRC_ACKNOWLEDGE",
    "XRC_ATOMIC_ACKNOWLEDGE",
    "XRC_COMPARE_SWAP",
    "XRC_FETCH_ADD",
    "",
    "XRC_SEND_LAST_WITH_INVALIDATE",
    "XRC_SEND_ONLY_WITH_INVALIDATE",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
];

const UC_NAMES: [&str; 32] = [
    "UC_SEND_FIRST",
    "UC_SEND_MIDDLE",
    "UC_SEND_LAST",
    "UC_SEND_LAST_WITH_IMMEDIATE",
    "UC_SEND_ONLY",
    "UC_SEND_ONLY_WITH_IMMEDIATE",
    "UC_RDMA_WRITE_FIRST",
    "UC_RDMA_WRITE_MIDDLE",
    "UC_RDMA_WRITE_LAST",
    "UC_RDMA_WRITE_LAST_WITH_IMMEDIATE",
    "UC_RDMA_WRITE_ONLY",
    "UC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
    "",
];

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.info() {
            Some(i) => f.write_str(i.name),
            None => write!(f, "Opcode(0x{:02x})", self.0),
        }
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Builds the opcode for an operation, transport and position, if one exists.
pub const fn opcode_for(
    transport: Transport,
    op: Operation,
    pos: Position,
    imm: bool,
    inv: bool,
) -> Option<Opcode> {
    use Operation as O;
    use Position as P;
    let base: u8 = match transport {
        Transport::Rc => 0x00,
        Transport::Uc => 0x20,
        Transport::Ud => 0x60,
        Transport::Xrc => 0xA0,
        Transport::Cnp => return Some(Opcode::CNP),
    };
    let low: u8 = match (op, pos, imm, inv) {
        (O::Send, P::First, false, false) => 0x00,
        (O::Send, P::Middle, false, false) => 0x01,
        (O::Send, P::Last, false, false) => 0x02,
        (O::Send, P::Last, true, false) => 0x03,
        (O::Send, P::Only, false, false) => 0x04,
        (O::Send, P::Only, true, false) => 0x05,
        (O::Send, P::Last, false, true) => 0x16,
        (O::Send, P::Only, false, true) => 0x17,
        (O::Write, P::First, false, false) => 0x06,
        (O::Write, P::Middle, false, false) => 0x07,
        (O::Write, P::Last, false, false) => 0x08,
        (O::Write, P::Last, true, false) => 0x09,
        (O::Write, P::Only, false, false) => 0x0A,
        (O::Write, P::Only, true, false) => 0x0B,
        (O::ReadRequest, _, false, false) => 0x0C,
        (O::ReadResponse, P::First, false, false) => 0x0D,
        (O::ReadResponse, P::Middle, false, false) => 0x0E,
        (O::ReadResponse, P::Last, false, false) => 0x0F,
        (O::ReadResponse, P::Only, false, false) => 0x10,
        (O::Acknowledge, _, false, false) => 0x11,
        (O::AtomicAcknowledge, _, false, false) => 0x12,
        (O::CompareSwap, _, false, false) => 0x13,
        (O::FetchAdd, _, false, false) => 0x14,
        (O::Flush, _, false, false) => 0x1C,
        (O::AtomicWrite, _, false, false) => 0x1D,
        _ => return None,
    };
    let oc = Opcode(base | low);
    match oc.info() {
        Some(_) => Some(oc),
        None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_consistent() {
        let mut known = 0;
        for v in 0..=255u8 {
            let oc = Opcode(v);
            if let Some(i) = oc.info() {
                known += 1;
                if i.peer {
                    // softrdma's private opcodes have no IBTA encoding.
                    assert!(v >= 0xE0, "{oc:?}");
                    continue;
                }
                let imm = i.has_imm();
                let inv = i.has_ieth();
                assert_eq!(
                    opcode_for(i.transport, i.operation, i.position, imm, inv),
                    Some(oc),
                    "{oc:?}"
                );
                assert!(!i.name.is_empty());
            }
        }
        // 25 RC + 12 UC + 2 UD + CNP + 23 XRC + 7 softrdma peer-copy
        assert_eq!(known, 70);
    }

    #[test]
    fn header_lengths() {
        assert_eq!(
            Opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
                .info()
                .unwrap()
                .headers
                .len(),
            20
        );
        assert_eq!(
            Opcode::RC_ATOMIC_ACKNOWLEDGE.info().unwrap().headers.len(),
            12
        );
        assert_eq!(
            Opcode::UD_SEND_ONLY_WITH_IMMEDIATE
                .info()
                .unwrap()
                .headers
                .len(),
            12
        );
        assert_eq!(Opcode::RC_COMPARE_SWAP.info().unwrap().headers.len(), 28);
        assert!(Opcode(0x15).info().is_none());
        assert!(Opcode(0x2C).info().is_none());
        assert!(Opcode(0x40).info().is_none());
        // XRC: the XRCETH sits in requests only, 4 bytes.
        let send = Opcode::XRC_SEND_ONLY.info().unwrap();
        assert_eq!(send.transport, Transport::Xrc);
        assert!(send.has_xrceth());
        assert_eq!(send.headers.len(), 4);
        assert_eq!(
            Opcode::XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE
                .info()
                .unwrap()
                .headers
                .len(),
            24
        );
        assert_eq!(Opcode::XRC_COMPARE_SWAP.info().unwrap().headers.len(), 32);
        assert_eq!(
            Opcode::XRC_RDMA_READ_REQUEST.info().unwrap().headers.len(),
            20
        );
        let ack = Opcode::XRC_ACKNOWLEDGE.info().unwrap();
        assert!(!ack.has_xrceth());
        assert_eq!(ack.headers.len(), 4);
        assert!(
            !Opcode::XRC_RDMA_READ_RESPONSE_ONLY
                .info()
                .unwrap()
                .has_xrceth()
        );
        assert_eq!(Opcode::XRC_SEND_ONLY.name(), "XRC_SEND_ONLY");
        assert!(Opcode(0xB5).info().is_none());
        assert!(Opcode(0xBC).info().is_none());
        assert!(Opcode(0xBD).info().is_none());
        assert_eq!(format!("{:?}", Opcode(0x15)), "Opcode(0x15)");
    }
}
