//! Placement of same-host READ data by the responder (the transport's
//! `qp/peer.rs`; `softrdma_shm::TicketBook` for the protocol).
//!
//! - **Requester.** This process's ticket page ([`Placements::tickets`]);
//!   the same-host path's memory (`LaneMemory`, through [`Placements::arm`])
//!   arms a ticket for each peer-copy READ whose SGE lies in a region
//!   shared at registration.
//! - **Responder.** A READ request offering a ticket is placed after the
//!   transport's rkey check: the requester is the lane's producer (from the
//!   registry, incarnation checked, as for every peer copy), its ticket
//!   page and region are mapped through `/proc/<pid>/fd` (cached per
//!   incarnation), the ticket taken, the bytes copied with `memcpy`, the
//!   ticket marked done.
//! - `SOFTRDMA_PLACE=0` turns offers off (the requester copies every READ,
//!   as before).

use super::peer_copy::{MapKey, Producer, cached};
use rustc_hash::FxHashMap as HashMap;
use softrdma_shm::{PeerMap, PeerTickets, Ticket, TicketBook};
use softrdma_transport::{PlaceOffer, PlacementTicket, TicketRef};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Both sides of placement in this process.
#[derive(Debug)]
pub(crate) struct Placements {
    /// Ours, if we offer placement.
    tickets: Option<TicketBook>,
    /// The fork generation `tickets` belong to.
    forks: u64,
    pages: Mutex<HashMap<MapKey, PeerTickets>>,
    regions: Mutex<HashMap<MapKey, PeerMap>>,
    /// READs this process placed into peers, and their bytes.
    pub(crate) placed: AtomicU64,
    pub(crate) placed_bytes: AtomicU64,
    /// Offers this process could not take (ticket gone, mapping refused).
    pub(crate) refused: AtomicU64,
    /// This process's pid, as of fork generation `pid_of - 1` (0: not yet
    /// known): a busy ticket names it, and `getpid` is a system call each
    /// time (~7 % of a placing responder's samples, `perf`, same-host 64 KiB
    /// `ib_read_bw`).
    pid: AtomicU32,
    pid_of: AtomicU64,
}

impl Placements {
    /// `offer`: whether this process offers placement to its READs'
    /// responders (peer copy on, regions shared, `SOFTRDMA_PLACE` not `0`).
    pub(super) fn new(offer: bool) -> Placements {
        let off = std::env::var("SOFTRDMA_PLACE").is_ok_and(|v| v == "0");
        let tickets = if offer && !off {
            TicketBook::create()
                .inspect_err(|e| {
                    if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                        eprintln!("softrdma: no placement tickets ({e}): READs copied here");
                    }
                })
                .ok()
        } else {
            None
        };
        Placements {
            tickets,
            forks: softrdma_udp::fork_private::fork_generation(),
            pages: Mutex::new(HashMap::default()),
            regions: Mutex::new(HashMap::default()),
            placed: AtomicU64::new(0),
            placed_bytes: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            pid: AtomicU32::new(0),
            pid_of: AtomicU64::new(0),
        }
    }

    /// This process's pid (under the engine lock, as every placement).
    fn my_pid(&self) -> u32 {
        let g = softrdma_udp::fork_private::fork_generation() + 1;
        if self.pid_of.load(Ordering::Relaxed) != g {
            self.pid.store(std::process::id(), Ordering::Relaxed);
            self.pid_of.store(g, Ordering::Relaxed);
        }
        self.pid.load(Ordering::Relaxed)
    }

    /// A ticket for one of our READs' offers, if we offer placement and one
    /// is free.
    pub(super) fn arm(&self) -> Option<Box<dyn PlacementTicket>> {
        let book = self.tickets.as_ref()?;
        let forks = softrdma_udp::fork_private::fork_generation();
        if forks != self.forks {
            // A forked child's READs are copied by the child.
            return None;
        }
        let ticket = book.arm()?;
        Some(Box::new(Armed {
            ticket: Some(ticket),
            fd: book.fd(),
            ino: book.ino(),
            forks,
        }))
    }

    /// Places `offer` from the lane producer `from`: `len` bytes at our
    /// checked address `src`. False: nothing written.
    pub(super) fn place(&self, from: Producer, offer: &PlaceOffer, src: u64) -> bool {
        let placed = self.try_place(from, offer, src);
        if placed {
            super::add_locked(&self.placed, 1);
            super::add_locked(&self.placed_bytes, u64::from(offer.dst.len));
        } else {
            super::add_locked(&self.refused, 1);
        }
        placed
    }

    fn try_place(&self, from: Producer, offer: &PlaceOffer, src: u64) -> bool {
        let Producer {
            slot,
            generation,
            pid,
        } = from;
        let (Some(f), t) = (offer.dst.file, offer.ticket) else {
            return false;
        };
        if !offer.dst.in_file() {
            return false;
        }
        let len = u64::from(offer.dst.len);
        let mut pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        let page = cached(&mut pages, (slot, generation, t.ino, t.fd), || {
            PeerTickets::open(pid, t.fd, t.ino)
        });
        let Ok(page) = page else {
            return false;
        };
        let mut regions = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        let region = cached(&mut regions, (slot, generation, f.ino, f.fd), || {
            PeerMap::open_writable(pid, f.fd, f.ino, f.len)
        });
        let Ok(region) = region else {
            return false;
        };
        let me = self.my_pid();
        if !page.take(t.index, t.seq, me) {
            return false;
        }
        // SAFETY: `src` is `len` bytes of a region of ours the transport
        // checked under an rkey with remote-read rights, under the engine
        // lock deregistration takes; the ticket, taken above and finished
        // below, is the requester's leave to write into its region.
        let ok = unsafe { region.copy_from(src, offer.dst.addr - f.addr, len) };
        page.finish(t.index, t.seq, me);
        ok
    }

    /// Lets go of peers' mappings from incarnations no longer alive
    /// (`live(slot)`: the slot's live incarnation).
    pub(super) fn forget_dead(&self, live: impl Fn(u8) -> Option<u64>) {
        let keep = |&(slot, g, _, _): &MapKey| live(slot) == Some(g);
        let mut pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        pages.retain(|k, _| keep(k));
        drop(pages);
        let mut regions = self.regions.lock().unwrap_or_else(|p| p.into_inner());
        regions.retain(|k, _| keep(k));
    }
}

/// A ticket of ours, as the transport holds it.
#[derive(Debug)]
struct Armed {
    /// `None` once ended.
    ticket: Option<Ticket>,
    fd: u32,
    ino: u64,
    /// The fork generation that armed it: a forked child shares the page
    /// with its parent (a shared mapping) but not the parent's READs, so it
    /// leaves the words alone.
    forks: u64,
}

impl Armed {
    fn end(&mut self) -> bool {
        let t = self.ticket.take();
        if softrdma_udp::fork_private::fork_generation() != self.forks {
            std::mem::forget(t);
            return false;
        }
        t.is_some_and(Ticket::settle)
    }
}

impl PlacementTicket for Armed {
    fn offer(&self) -> TicketRef {
        let (index, seq) = self
            .ticket
            .as_ref()
            .map_or((0, 0), |t| (t.index(), t.seq()));
        TicketRef {
            fd: self.fd,
            ino: self.ino,
            index,
            seq,
        }
    }

    fn settle(mut self: Box<Self>) -> bool {
        self.end()
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        self.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use softrdma_transport::{PeerFile, PeerSeg};

    /// A page-aligned buffer moved into a shared region.
    fn shared_region(len: usize) -> (Vec<u8>, softrdma_shm::Shared) {
        let page = softrdma_shm::page_size() as usize;
        let mut v = vec![0u8; len + 2 * page];
        let start = (v.as_mut_ptr() as usize).next_multiple_of(page);
        let s = softrdma_shm::share(start as u64, len as u64, 0, u64::MAX).expect("share");
        (v, s)
    }

    #[test]
    fn a_placement_lands_under_a_ticket_once_and_never_after_revocation() {
        let p = Placements::new(true);
        let len = 64 * 1024;
        let (_buf, region) = shared_region(len);
        let file = PeerFile {
            fd: region.fd as u32,
            ino: region.ino,
            addr: region.addr,
            len: region.len,
        };
        let src: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let armed = p.arm().expect("a ticket");
        let offer = PlaceOffer {
            dst: PeerSeg {
                addr: region.addr,
                len: len as u32,
                file: Some(file),
            },
            ticket: armed.offer(),
        };
        let me = Producer {
            slot: 1,
            generation: 9,
            pid: std::process::id(),
        };
        assert!(p.place(me, &offer, src.as_ptr() as u64));
        // SAFETY: the region's first `len` bytes, ours, mapped.
        let got = unsafe { std::slice::from_raw_parts(region.addr as *const u8, len) };
        assert_eq!(got, &src[..]);
        // A duplicate request cannot place again.
        assert!(!p.place(me, &offer, src.as_ptr() as u64));
        assert!(armed.settle(), "the ticket says placed");
        // A revoked ticket takes nothing.
        let armed = p.arm().unwrap();
        let offer = PlaceOffer {
            ticket: armed.offer(),
            ..offer
        };
        drop(armed);
        let zeros = vec![0u8; len];
        assert!(!p.place(me, &offer, zeros.as_ptr() as u64));
        assert_eq!(got, &src[..], "nothing written after revocation");
        // A range outside the named region is refused.
        let armed = p.arm().unwrap();
        let outside = PlaceOffer {
            dst: PeerSeg {
                addr: region.addr + 4096,
                ..offer.dst
            },
            ticket: armed.offer(),
        };
        assert!(!p.place(me, &outside, zeros.as_ptr() as u64));
        assert!(!armed.settle());
        assert_eq!(got, &src[..]);
        assert_eq!(p.placed.load(Ordering::Relaxed), 1);
        assert_eq!(p.refused.load(Ordering::Relaxed), 3);
        assert!(softrdma_shm::unshare(region.id));
    }

    #[test]
    fn without_offers_no_ticket_is_armed() {
        let p = Placements::new(false);
        assert!(p.arm().is_none());
    }
}
