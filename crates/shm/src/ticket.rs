//! Placement tickets: how a peer may write into this process's memory for
//! a READ it asked for, and never after the READ stopped waiting for it.
//!
//! A same-host READ is copied by whoever runs the copy. With the
//! requester's CPU copying, its engine work and the copy add up (a 64 KiB
//! READ: ~0.47 µs each, BENCHMARKS.md); the responder's CPU is free, so the
//! requester may offer the responder to place the data itself into the
//! requester's shared region ([`crate::share`]). The offer names a ticket:
//! one word of a page this process shares (a memfd, like the regions), that
//! the placer must win before it writes a byte and mark done after its last:
//!
//! ```text
//!   owner                      placer (the responder)
//!   arm: FREE → ARMED(seq)
//!   (offer travels)            take: ARMED(seq) → BUSY(seq, pid)  (CAS)
//!                              copy into the owner's region
//!                              finish: BUSY(seq, pid) → DONE(seq)
//!   settle: DONE → FREE (placed) or ARMED → FREE (not placed);
//!           BUSY: wait until DONE, or the placer is dead
//! ```
//!
//! The owner settles a ticket when the READ's response arrives, and revokes
//! it (dropping [`Ticket`]) when the READ leaves its queue any other way
//! (flushed, QP reset or destroyed, context closed). Either way, once that
//! returns no placer holds the ticket and none can take it again (the next
//! arming of the word uses a new `seq`), so no late or duplicate request
//! writes into memory the application got back. A placer that died while
//! busy is waited for only until `/proc` says it is gone; one stopped
//! mid-copy (`SIGSTOP`, a debugger) holds the revoking thread until it runs
//! again (a copy is a few µs of its time; a flush that coincides with one
//! is rare).
//!
//! Word: state in bits 56..64, the busy placer's pid in 32..56, `seq` in
//! 0..32.

use crate::CopyError;
use crate::vm::Map;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Tickets per process: READs that may be waiting for placement at once
/// (one 4 KiB page of words). A READ finding none is copied by its
/// requester, as without placement.
pub const TICKETS: usize = 512;
const BYTES: usize = TICKETS * 8;
const NAME: &str = "softrdma-tickets";

const FREE: u64 = 0;
const ARMED: u64 = 1;
const BUSY: u64 = 2;
const DONE: u64 = 3;

fn word(state: u64, pid: u32, seq: u32) -> u64 {
    (state << 56) | (u64::from(pid & 0xFF_FFFF) << 32) | u64::from(seq)
}

fn state(w: u64) -> u64 {
    w >> 56
}

fn seq_of(w: u64) -> u32 {
    w as u32
}

fn pid_of(w: u64) -> u32 {
    ((w >> 32) & 0xFF_FFFF) as u32
}

/// Word `i` of a ticket page; `None` past the page (an index from a
/// peer's packet).
fn word_at(page: &Map, i: u32) -> Option<&AtomicU64> {
    let i = usize::try_from(i).ok().filter(|&i| i < TICKETS)?;
    Some(page.u64_at(i * 8))
}

#[derive(Debug)]
struct Book {
    file: File,
    ino: u64,
    page: Map,
    free: Mutex<Vec<u32>>,
}

/// This process's ticket page (the owner's side).
#[derive(Debug, Clone)]
pub struct TicketBook {
    book: Arc<Book>,
}

impl TicketBook {
    /// A new page, every ticket free (a memfd, closed on exec).
    pub fn create() -> io::Result<TicketBook> {
        let file = crate::vm::memfd(c"softrdma-tickets", BYTES as u64)?;
        let ino = file.metadata()?.ino();
        let page = Map::new(&file, 0, BYTES)?;
        let free = (0..TICKETS as u32).rev().collect();
        Ok(TicketBook {
            book: Arc::new(Book {
                file,
                ino,
                page,
                free: Mutex::new(free),
            }),
        })
    }

    /// The descriptor peers open the page through (`/proc/<pid>/fd/<fd>`).
    pub fn fd(&self) -> u32 {
        self.book.file.as_raw_fd() as u32
    }

    /// The page's inode, which a peer checks after opening it.
    pub fn ino(&self) -> u64 {
        self.book.ino
    }

    /// A free ticket, armed for one placement; `None` if all are in use.
    pub fn arm(&self) -> Option<Ticket> {
        let index = self
            .book
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop()?;
        let w = word_at(&self.book.page, index)?;
        let seq = seq_of(w.load(Ordering::Relaxed)).wrapping_add(1);
        // Release: nothing to publish but the state; the offer reaches the
        // placer through a lane, which orders it after this store.
        w.store(word(ARMED, 0, seq), Ordering::Release);
        Some(Ticket {
            book: Arc::clone(&self.book),
            index,
            seq,
            settled: false,
        })
    }

    /// Tickets not in use now.
    pub fn free_count(&self) -> usize {
        self.book
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

/// An armed ticket, held by the READ that offered it. Dropping it revokes
/// it (see the module documentation); [`Ticket::settle`] does the same and
/// says whether the placer finished.
#[derive(Debug)]
pub struct Ticket {
    book: Arc<Book>,
    index: u32,
    seq: u32,
    settled: bool,
}

impl Ticket {
    /// Its word in the page.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// Which arming of the word this is.
    pub fn seq(&self) -> u32 {
        self.seq
    }

    /// Ends the ticket: true if a placer finished (its bytes are visible to
    /// this thread now), false if none took it; waits for a busy placer.
    pub fn settle(mut self) -> bool {
        self.end()
    }

    fn end(&mut self) -> bool {
        self.settled = true;
        let placed =
            word_at(&self.book.page, self.index).is_some_and(|w| end_word(w, self.seq, &mut gone));
        self.book
            .free
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(self.index);
        placed
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.settled {
            self.end();
        }
    }
}

/// Frees word `w` armed with `seq`: true if its placer finished. While a
/// placer is busy, waits until it finishes or `gone(pid)` says it died.
fn end_word(w: &AtomicU64, seq: u32, gone: &mut dyn FnMut(u32) -> bool) -> bool {
    let free = word(FREE, 0, seq);
    let mut waited = 0u32;
    loop {
        let cur = w.load(Ordering::Acquire);
        match state(cur) {
            ARMED | DONE if seq_of(cur) == seq => {
                // Acquire (with the load above): a placer's bytes, written
                // before its DONE, are visible once this succeeds.
                if w.compare_exchange(cur, free, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return state(cur) == DONE;
                }
            }
            BUSY if seq_of(cur) == seq => {
                if gone(pid_of(cur)) {
                    // Its copy stopped with it; what it wrote is undefined,
                    // as a flushed READ's buffer is.
                    if w.compare_exchange(cur, free, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                    {
                        return false;
                    }
                    continue;
                }
                waited = waited.saturating_add(1);
                if waited < 1000 {
                    std::hint::spin_loop();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
            }
            // A word some peer scribbled over: ours again.
            _ => {
                w.store(free, Ordering::Release);
                return false;
            }
        }
    }
}

/// Whether process `pid` has stopped running (no `/proc` entry, or a
/// zombie): its threads write nothing any more.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name's closing parenthesis.
        Ok(s) => s
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.trim_start().chars().next())
            .is_some_and(|c| c == 'Z' || c == 'X'),
        Err(_) => true,
    }
}

/// A peer's ticket page, mapped to take and finish its tickets.
#[derive(Debug)]
pub struct PeerTickets {
    page: Map,
}

impl PeerTickets {
    /// Maps the ticket page process `pid` holds at descriptor `fd`, if it
    /// is one (by name) with inode `ino`.
    pub fn open(pid: u32, fd: u32, ino: u64) -> Result<PeerTickets, CopyError> {
        let file = crate::share::open_peer_memfd(pid, fd, NAME, ino, BYTES as u64, true)?;
        let page = Map::new(&file, 0, BYTES).map_err(|e| crate::share::map_err(&e))?;
        Ok(PeerTickets { page })
    }

    /// Takes ticket `index` armed with `seq` for a placement by process
    /// `pid` (this one): false if it is not armed so (revoked, placed
    /// already, or another arming), and then nothing may be written.
    pub fn take(&self, index: u32, seq: u32, pid: u32) -> bool {
        word_at(&self.page, index).is_some_and(|w| {
            w.compare_exchange(
                word(ARMED, 0, seq),
                word(BUSY, pid, seq),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
        })
    }

    /// Marks a taken ticket done: the placement's bytes are all written.
    pub fn finish(&self, index: u32, seq: u32, pid: u32) {
        if let Some(w) = word_at(&self.page, index) {
            // Release: the bytes before the mark. A CAS, not a store: the
            // owner may have found this process dead and freed the word.
            let _ = w.compare_exchange(
                word(BUSY, pid, seq),
                word(DONE, 0, seq),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn me() -> u32 {
        std::process::id()
    }

    fn peer_of(book: &TicketBook) -> PeerTickets {
        PeerTickets::open(me(), book.fd(), book.ino()).expect("open own page")
    }

    #[test]
    fn a_taken_and_finished_ticket_settles_as_placed() {
        let book = TicketBook::create().unwrap();
        let peer = peer_of(&book);
        let t = book.arm().unwrap();
        assert!(peer.take(t.index(), t.seq(), me()));
        // Taken once only.
        assert!(!peer.take(t.index(), t.seq(), me()));
        peer.finish(t.index(), t.seq(), me());
        assert!(t.settle());
        assert_eq!(book.free_count(), TICKETS);
    }

    #[test]
    fn a_settled_or_revoked_ticket_cannot_be_taken() {
        let book = TicketBook::create().unwrap();
        let peer = peer_of(&book);
        let t = book.arm().unwrap();
        let (i, s) = (t.index(), t.seq());
        assert!(!t.settle(), "nobody took it");
        assert!(!peer.take(i, s, me()), "a late request after the response");
        let t = book.arm().unwrap();
        let (i2, s2) = (t.index(), t.seq());
        assert_eq!(i2, i, "the word is reused");
        assert_ne!(s2, s, "with a new arming");
        assert!(
            !peer.take(i, s, me()),
            "the old offer does not match the new arming"
        );
        drop(t);
        assert!(!peer.take(i2, s2, me()), "dropping revokes");
        // Out of the page: refused, not a fault.
        assert!(!peer.take(TICKETS as u32, 1, me()));
    }

    #[test]
    fn all_tickets_in_use_arms_none() {
        let book = TicketBook::create().unwrap();
        let held: Vec<Ticket> = (0..TICKETS).map(|_| book.arm().unwrap()).collect();
        assert!(book.arm().is_none());
        drop(held);
        assert_eq!(book.free_count(), TICKETS);
        assert!(book.arm().is_some());
    }

    #[test]
    fn revoking_waits_for_a_busy_placer_and_sees_its_bytes() {
        let book = TicketBook::create().unwrap();
        let peer = peer_of(&book);
        let t = book.arm().unwrap();
        let (i, s) = (t.index(), t.seq());
        assert!(peer.take(i, s, me()));
        let data = Arc::new(AtomicU64::new(0));
        let finished = Arc::new(AtomicBool::new(false));
        let th = {
            let (data, finished) = (Arc::clone(&data), Arc::clone(&finished));
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                data.store(42, Ordering::Relaxed);
                finished.store(true, Ordering::Relaxed);
                peer.finish(i, s, me());
            })
        };
        assert!(t.settle(), "the placer finished while we waited");
        assert!(finished.load(Ordering::Relaxed));
        assert_eq!(data.load(Ordering::Relaxed), 42);
        th.join().unwrap();
    }

    #[test]
    fn a_dead_placer_is_not_waited_for() {
        let w = AtomicU64::new(word(BUSY, 77, 5));
        let mut asked = Vec::new();
        let placed = end_word(&w, 5, &mut |pid| {
            asked.push(pid);
            asked.len() >= 3
        });
        assert!(!placed);
        assert_eq!(asked, vec![77, 77, 77]);
        assert_eq!(w.load(Ordering::Relaxed), word(FREE, 0, 5));
        // A scribbled word (another arming's) is taken back at once.
        let w = AtomicU64::new(word(DONE, 0, 9));
        assert!(!end_word(&w, 5, &mut |_| panic!("nobody to wait for")));
    }

    #[test]
    fn a_reaped_or_zombie_process_is_gone_and_this_one_is_not() {
        assert!(!gone(me()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        // A zombie until reaped.
        while !gone(pid) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        child.wait().unwrap();
        assert!(gone(pid));
    }

    #[test]
    fn a_peer_cannot_open_another_memfd_as_a_ticket_page() {
        let inbox = crate::Inbox::create().unwrap();
        let ino = std::fs::metadata(format!("/proc/self/fd/{}", inbox.fd()))
            .unwrap()
            .ino();
        assert!(matches!(
            PeerTickets::open(me(), inbox.fd() as u32, ino),
            Err(CopyError::Fault)
        ));
        let book = TicketBook::create().unwrap();
        assert!(PeerTickets::open(me(), book.fd(), book.ino() + 1).is_err());
    }
}
