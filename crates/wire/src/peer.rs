//! The payload of softrdma's peer-copy opcodes (0xE0..=0xE6: RDMA WRITE
//! ONLY [with immediate], RDMA READ request and response ONLY, SEND ONLY
//! [with immediate | invalidate]) ([`crate::OpcodeInfo::peer`]):
//! a list of memory ranges in the sending process, which the receiver copies
//! from (one copy, `process_vm_readv`) instead of taking bytes out of the
//! packet. A softrdma-private extension, used only between softrdma
//! processes of one host over shared-memory lanes, never on a wire.
//!
//! Layout (big-endian, as every RoCE header): a 4-byte count, the sender's
//! 8-byte incarnation (its member slot's generation, which the copier
//! compares with the lane's producer before copying), then per range
//! an 8-byte address, a 4-byte length, and the shared region holding it, if
//! any ([`PeerFile`]): a 4-byte descriptor (`u32::MAX`: none), an 8-byte
//! inode, an 8-byte first address and an 8-byte length.

use crate::error::{Error, Result};

/// One range of the sender's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerSeg {
    /// Address in the sender's process.
    pub addr: u64,
    /// Bytes.
    pub len: u32,
    /// The shared region (memfd) whose pages hold part of the range, if the
    /// sender's region is shared (`softrdma_shm::share`); bytes outside it
    /// are copied from the sender's private memory.
    pub file: Option<PeerFile>,
}

impl PeerSeg {
    /// `len` bytes at `addr` of private memory (no shared region).
    pub const fn private(addr: u64, len: u32) -> PeerSeg {
        PeerSeg {
            addr,
            len,
            file: None,
        }
    }

    /// Whether the whole range lies in its shared region (false without
    /// one): where a READ's data may be placed.
    pub fn in_file(&self) -> bool {
        let end = self.addr.checked_add(u64::from(self.len));
        self.file.is_some_and(|f| {
            self.addr >= f.addr && end.is_some_and(|e| e <= f.addr.saturating_add(f.len))
        })
    }
}

/// A sender's memory region shared through a memfd: its descriptor in the
/// sender, its inode (checked by whoever opens it), and the addresses its
/// pages sit at in the sender (`addr` is the memfd's offset 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerFile {
    /// Descriptor in the sending process.
    pub fd: u32,
    /// Inode number of the memfd.
    pub ino: u64,
    /// Sender's address of the memfd's first byte.
    pub addr: u64,
    /// Bytes of the memfd.
    pub len: u64,
}

/// Most ranges one packet may list (a requester's SGEs after translation;
/// the device's `max_sge` is 32, and a WQE with more goes in packets): 24
/// ranges of 40 bytes, the count and the incarnation fit a 1024-byte MTU after the largest
/// headers (BTH, RETH, immediate).
pub const MAX_PEER_SEGS: usize = 24;

const COUNT_LEN: usize = 4;
const INCARNATION_LEN: usize = 8;
const HEAD_LEN: usize = COUNT_LEN + INCARNATION_LEN;
const SEG_LEN: usize = 40;
const NO_FILE: u32 = u32::MAX;

/// Bytes of a payload listing `n` ranges.
pub const fn peer_payload_len(n: usize) -> usize {
    HEAD_LEN + n * SEG_LEN
}

/// Writes `segs` of the sender's incarnation `from` into `out`, which must
/// be [`peer_payload_len`] long.
pub fn write_peer_segs(from: u64, segs: &[PeerSeg], out: &mut [u8]) {
    debug_assert_eq!(out.len(), peer_payload_len(segs.len()));
    out[..COUNT_LEN].copy_from_slice(&(segs.len() as u32).to_be_bytes());
    out[COUNT_LEN..HEAD_LEN].copy_from_slice(&from.to_be_bytes());
    for (s, o) in segs.iter().zip(out[HEAD_LEN..].chunks_exact_mut(SEG_LEN)) {
        o[..8].copy_from_slice(&s.addr.to_be_bytes());
        o[8..12].copy_from_slice(&s.len.to_be_bytes());
        let f = s.file.unwrap_or(PeerFile {
            fd: NO_FILE,
            ino: 0,
            addr: 0,
            len: 0,
        });
        o[12..16].copy_from_slice(&f.fd.to_be_bytes());
        o[16..24].copy_from_slice(&f.ino.to_be_bytes());
        o[24..32].copy_from_slice(&f.addr.to_be_bytes());
        o[32..40].copy_from_slice(&f.len.to_be_bytes());
    }
}

/// A peer-copy packet's ranges (or the ranges they are copied into):
/// almost always one or two, held without a heap allocation then (the two
/// a peer-copy READ response cost were ~3 % of a same-host 64 KiB
/// `ib_read_bw` client's instructions, callgrind).
pub type PeerSegs = smallvec::SmallVec<[PeerSeg; 2]>;

/// A ticket of the READ requester's page (`softrdma_shm::TicketBook`): the
/// page's descriptor and inode in the requester, the word and its arming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TicketRef {
    /// Descriptor of the ticket page in the requester.
    pub fd: u32,
    /// Its inode.
    pub ino: u64,
    /// The word.
    pub index: u32,
    /// Which arming of the word.
    pub seq: u32,
}

/// What a peer-copy READ request may carry: the requester's offer to have
/// the responder place the data itself into `dst` (one range inside a
/// shared region of the requester's), under `ticket`. A request without it
/// has an empty payload; a READ response listing no range says the data
/// was placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlaceOffer {
    /// Where the data goes, in the requester.
    pub dst: PeerSeg,
    /// The ticket the responder must take before writing.
    pub ticket: TicketRef,
}

const TICKET_LEN: usize = 20;

/// Bytes of a READ request payload carrying an offer.
pub const OFFER_LEN: usize = HEAD_LEN + SEG_LEN + TICKET_LEN;

/// Writes `offer` of the requester's incarnation `from` into `out`, which
/// must be [`OFFER_LEN`] long.
pub fn write_offer(from: u64, offer: &PlaceOffer, out: &mut [u8]) {
    debug_assert_eq!(out.len(), OFFER_LEN);
    let (segs, t) = out.split_at_mut(HEAD_LEN + SEG_LEN);
    write_peer_segs(from, &[offer.dst], segs);
    t[..4].copy_from_slice(&offer.ticket.fd.to_be_bytes());
    t[4..12].copy_from_slice(&offer.ticket.ino.to_be_bytes());
    t[12..16].copy_from_slice(&offer.ticket.index.to_be_bytes());
    t[16..20].copy_from_slice(&offer.ticket.seq.to_be_bytes());
}

/// Reads a READ request's payload: `None` if empty (no offer), else the
/// offer and the requester's incarnation. The range must name a shared
/// region.
pub fn read_offer(payload: &[u8]) -> Result<Option<(PlaceOffer, u64)>> {
    if payload.is_empty() {
        return Ok(None);
    }
    let bad = || Error::BadLength("placement offer");
    if payload.len() != OFFER_LEN {
        return Err(bad());
    }
    let (segs, t) = payload.split_at(HEAD_LEN + SEG_LEN);
    let (segs, _, from) = read_peer_segs(segs)?;
    let dst = match segs.as_slice() {
        [d] if d.file.is_some() => *d,
        _ => return Err(bad()),
    };
    let u32_at = |i: usize| u32::from_be_bytes(t[i..i + 4].try_into().unwrap_or_default());
    let ticket = TicketRef {
        fd: u32_at(0),
        ino: u64::from_be_bytes(t[4..12].try_into().unwrap_or_default()),
        index: u32_at(12),
        seq: u32_at(16),
    };
    Ok(Some((PlaceOffer { dst, ticket }, from)))
}

/// Reads the ranges of a peer-copy payload; checks the count against the
/// length and [`MAX_PEER_SEGS`], and returns the ranges with their total
/// and the sender's incarnation.
pub fn read_peer_segs(payload: &[u8]) -> Result<(PeerSegs, u64, u64)> {
    let bad = || Error::BadLength("peer-copy range list");
    let head: [u8; 4] = payload
        .get(..COUNT_LEN)
        .ok_or_else(bad)?
        .try_into()
        .map_err(|_| bad())?;
    let n = u32::from_be_bytes(head) as usize;
    if n > MAX_PEER_SEGS || payload.len() != peer_payload_len(n) {
        return Err(bad());
    }
    let from = u64::from_be_bytes(payload[COUNT_LEN..HEAD_LEN].try_into().map_err(|_| bad())?);
    let segs: PeerSegs = payload[HEAD_LEN..]
        .chunks_exact(SEG_LEN)
        .map(|c| {
            let u64_at = |i: usize| u64::from_be_bytes(c[i..i + 8].try_into().unwrap_or_default());
            let fd = u32::from_be_bytes(c[12..16].try_into().unwrap_or_default());
            PeerSeg {
                addr: u64_at(0),
                len: u32::from_be_bytes(c[8..12].try_into().unwrap_or_default()),
                file: (fd != NO_FILE).then(|| PeerFile {
                    fd,
                    ino: u64_at(16),
                    addr: u64_at(24),
                    len: u64_at(32),
                }),
            }
        })
        .collect();
    let total = segs.iter().map(|s| u64::from(s.len)).sum();
    Ok((segs, total, from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offers_round_trip_and_name_a_shared_region() {
        let offer = PlaceOffer {
            dst: PeerSeg {
                addr: 0x7f00_0000_2000,
                len: 65536,
                file: Some(PeerFile {
                    fd: 9,
                    ino: 77,
                    addr: 0x7f00_0000_0000,
                    len: 1 << 20,
                }),
            },
            ticket: TicketRef {
                fd: 11,
                ino: 0xabcd,
                index: 511,
                seq: u32::MAX,
            },
        };
        assert!(offer.dst.in_file());
        let past_end = PeerSeg {
            addr: 0x7f00_0010_0000 - 4096,
            len: 8192,
            ..offer.dst
        };
        assert!(!past_end.in_file());
        assert!(!PeerSeg::private(0x7f00_0000_2000, 64).in_file());
        let mut b = vec![0u8; OFFER_LEN];
        write_offer(5, &offer, &mut b);
        assert_eq!(read_offer(&b).unwrap(), Some((offer, 5)));
        assert_eq!(read_offer(&[]).unwrap(), None);
        assert!(read_offer(&b[..OFFER_LEN - 1]).is_err());
        // A private range cannot be placed into.
        let private = PlaceOffer {
            dst: PeerSeg::private(0x1000, 65536),
            ..offer
        };
        write_offer(5, &private, &mut b);
        assert!(read_offer(&b).is_err());
    }

    #[test]
    fn round_trip_and_rejects() {
        let segs = [
            PeerSeg {
                addr: 0x7f00_0000_1000,
                len: 4096,
                file: Some(PeerFile {
                    fd: 7,
                    ino: 0x1234_5678_9abc,
                    addr: 0x7f00_0000_0000,
                    len: 1 << 20,
                }),
            },
            PeerSeg {
                addr: u64::MAX - 7,
                len: 8,
                file: None,
            },
        ];
        let mut b = vec![0u8; peer_payload_len(2)];
        write_peer_segs(0x0102_0304_0506, &segs, &mut b);
        assert_eq!(
            read_peer_segs(&b)
                .map(|(v, n, f)| (v.to_vec(), n, f))
                .unwrap(),
            (segs.to_vec(), 4104, 0x0102_0304_0506)
        );
        // Count and length disagree.
        assert!(read_peer_segs(&b[..b.len() - 1]).is_err());
        assert!(read_peer_segs(&[0, 0]).is_err());
        assert!(read_peer_segs(&[0; 4]).is_err());
        let mut many = vec![0u8; peer_payload_len(MAX_PEER_SEGS + 1)];
        many[..4].copy_from_slice(&((MAX_PEER_SEGS + 1) as u32).to_be_bytes());
        assert!(read_peer_segs(&many).is_err());
        assert_eq!(
            read_peer_segs(&[0; 12])
                .map(|(v, n, f)| (v.to_vec(), n, f))
                .unwrap(),
            (vec![], 0, 0)
        );
    }
}
