//! The one error type of the wire layer.

/// Why a byte string is not a well-formed RoCEv2 (or CM MAD, or pcap) item.
///
/// Parsing untrusted input returns one of these; it never panics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The buffer ends before a header or field that must be there.
    #[error("truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes required.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// BTH transport header version is not 0.
    #[error("unsupported BTH TVer {0}")]
    BadTver(u8),
    /// Opcode is reserved or belongs to a transport we do not implement (RD, XRC).
    #[error("unknown or unsupported opcode 0x{0:02x}")]
    UnknownOpcode(u8),
    /// The pad count exceeds the bytes available after the headers.
    #[error("pad count {pad} exceeds payload area {avail}")]
    BadPad {
        /// PadCnt from the BTH.
        pad: u8,
        /// Bytes between the headers and the ICRC.
        avail: usize,
    },
    /// A packet that must not carry payload does, or a length field is inconsistent.
    #[error("bad length: {0}")]
    BadLength(&'static str),
    /// A field holds a value the format forbids.
    #[error("bad field: {0}")]
    BadField(&'static str),
    /// A capture file that is not classic pcap (or whose header is unusable).
    #[error("bad capture file: {0}")]
    BadFile(&'static str),
    /// A pcap link-layer type the reader (or writer) does not handle.
    #[error("unsupported pcap link type {0}")]
    UnsupportedLinkType(u32),
    /// The ICRC does not match the packet.
    #[error("bad ICRC: carried 0x{carried:08x}, computed 0x{computed:08x}")]
    BadIcrc {
        /// ICRC read from the packet.
        carried: u32,
        /// ICRC computed over the packet.
        computed: u32,
    },
}

/// Result alias of the wire layer.
pub type Result<T> = core::result::Result<T, Error>;

/// Returns `Err(Truncated)` unless `buf` holds at least `need` bytes.
pub(crate) fn need(buf: &[u8], need: usize) -> Result<()> {
    if buf.len() < need {
        Err(Error::Truncated {
            need,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}
