//! A process's inbox (one lane per possible sender) and the outlets its
//! peers attach to it.
//!
//! The inbox is a memfd the receiving process creates. A peer attaches by
//! opening `/proc/<pid>/fd/<fd>` (the kernel allows it to processes that may
//! read the receiver's memory: same user, not made undumpable) and maps the
//! header page and its own lane only: lane `s` belongs to the process holding
//! member slot `s`, so every lane has one producer.
//!
//! Header page:
//!
//! ```text
//! 0    magic "SRDMAINB", 8 bytes
//! 8    version u32, 12 lanes u32, 16 slots u32, 20 slot bytes u32, 24 lane stride u64
//! 32   owner pid u32
//! 40   owner's address of this mapping u64 (where peers probe that they
//!      can copy from the owner's memory; 0 from older builds)
//! 64   active: [u64; 4]   bit s: lane s has had a producer
//! 128  doorbell: u32      1: the receiver may be asleep; ring after a push
//! ```

use crate::ring::{DATA_CAP, Entry, LANE_BYTES, PushError, Ring, SLOT_BYTES, SLOTS};
use crate::vm::Map;
use std::fs::File;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{Ordering, fence};

const MAGIC: [u8; 8] = *b"SRDMAINB";
/// 2: lanes publish each slot by its own seq word (`ring.rs`); a process of
/// another version takes the UDP path to this one.
const VERSION: u32 = 2;
const PAGE: usize = 4096;
/// Lanes 0..=255, one per member slot (0 is never a slot; it stays unused).
const LANES: usize = 256;
/// Lane stride: a lane rounded up to whole pages, so a peer can map its own.
const STRIDE: usize = LANE_BYTES.div_ceil(PAGE) * PAGE;
/// The inbox's size. Virtual only: a memfd's pages exist once touched, so an
/// inbox costs the lanes its peers use (2.2 MiB each at most).
pub const INBOX_BYTES: usize = PAGE + LANES * STRIDE;
const ACTIVE: usize = 64;
/// A lane's owner while [`Inbox::reclaim`] clears it.
const RESETTING: u64 = u64::MAX;
const DOORBELL: usize = 128;

/// This process's inbox: where its peers' datagrams arrive.
#[derive(Debug)]
pub struct Inbox {
    file: File,
    map: Map,
    lanes: Vec<Ring>,
}

impl Inbox {
    /// Creates an empty inbox (a memfd, closed on exec).
    pub fn create() -> io::Result<Inbox> {
        let file = crate::vm::memfd(c"softrdma-inbox", INBOX_BYTES as u64)?;
        let map = Map::new(&file, 0, INBOX_BYTES)?;
        // SAFETY: the header page is ours alone until the fd is published.
        unsafe {
            let h = std::slice::from_raw_parts_mut(map.ptr, 40);
            h[..8].copy_from_slice(&MAGIC);
            h[8..12].copy_from_slice(&VERSION.to_ne_bytes());
            h[12..16].copy_from_slice(&(LANES as u32).to_ne_bytes());
            h[16..20].copy_from_slice(&(SLOTS as u32).to_ne_bytes());
            h[20..24].copy_from_slice(&(SLOT_BYTES as u32).to_ne_bytes());
            h[24..32].copy_from_slice(&(STRIDE as u64).to_ne_bytes());
            h[32..36].copy_from_slice(&std::process::id().to_ne_bytes());
        }
        // SAFETY: as above; bytes 40..48 of the header, ours alone still.
        unsafe {
            let h = std::slice::from_raw_parts_mut(map.ptr.add(40), 8);
            h.copy_from_slice(&(map.ptr as u64).to_ne_bytes());
        }
        let lanes = (0..LANES)
            // SAFETY: lane `s` lies inside the mapping, page (so 64-byte)
            // aligned; the rings live in `self` next to the mapping they view;
            // this inbox is the only consumer of each.
            .map(|s| unsafe { Ring::new(map.ptr.add(PAGE + s * STRIDE)) })
            .collect();
        Ok(Inbox { file, map, lanes })
    }

    /// The descriptor peers attach through (`/proc/<pid>/fd/<fd>`).
    pub fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// Bytes of memory the inbox holds now (pages its lanes have touched).
    pub fn resident_bytes(&self) -> u64 {
        use std::os::unix::fs::MetadataExt;
        self.file.metadata().map_or(0, |m| m.blocks() * 512)
    }

    /// The lanes a producer ever attached to.
    fn active_lanes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..LANES / 64).flat_map(move |word| {
            let mut bits = self.map.u64_at(ACTIVE + word * 8).load(Ordering::Acquire);
            std::iter::from_fn(move || {
                let b = bits.trailing_zeros() as usize;
                (bits != 0).then(|| {
                    bits &= bits - 1;
                    word * 64 + b
                })
            })
        })
    }

    /// Hands up to `max` waiting datagrams to `f` (with the member slot of the
    /// lane each came through), from the lanes in turn. Only one thread at a
    /// time may poll.
    pub fn poll(&self, max: usize, mut f: impl FnMut(u8, Entry<'_>)) -> usize {
        self.poll_while(max, |s, e| {
            f(s, e);
            true
        })
    }

    /// [`Inbox::poll`], but `f` may leave a datagram in its lane (false):
    /// then the poll stops there, and that datagram is its lane's next.
    pub fn poll_while(&self, max: usize, mut f: impl FnMut(u8, Entry<'_>) -> bool) -> usize {
        let mut n = 0;
        for s in self.active_lanes() {
            if n >= max {
                break;
            }
            let (took, stopped) = self.lanes[s].pop_while(max - n, |e| f(s as u8, e));
            n += took;
            if stopped {
                break;
            }
        }
        n
    }

    /// Whether any lane holds a datagram.
    pub fn has_work(&self) -> bool {
        self.active_lanes().any(|s| !self.lanes[s].is_empty())
    }

    /// Gives back the memory of lanes whose producer is gone: a lane whose
    /// owner is not `live(slot)` (the incarnation holding the slot now) is
    /// emptied, its pages returned to the kernel, and free for the slot's
    /// next holder. Returns the lanes cleared.
    ///
    /// `live` is called after the lane's owner was read and must answer as
    /// of then, not from a list taken before: a holder that attached in
    /// between would see its lane wiped.
    pub fn reclaim(&self, live: impl Fn(u8) -> Option<u64>) -> usize {
        let mut cleared = 0;
        // Only lanes a producer attached to: reading any other would make
        // the kernel allocate its first page (a memfd has no shared zero page).
        for s in self.active_lanes() {
            let owner = self.lanes[s].owner();
            let o = owner.load(Ordering::Acquire);
            if o == 0 || o == RESETTING || live(s as u8) == Some(o) {
                continue;
            }
            // A new holder attaching now swaps its incarnation in first;
            // then the lane is its and stays as it is.
            if owner
                .compare_exchange(o, RESETTING, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                continue;
            }
            let at = PAGE + s * STRIDE;
            // SAFETY: punches the lane's own pages (inside the memfd); they
            // read as zeros afterwards: head, tail and owner 0, a free lane.
            let r = unsafe {
                libc::fallocate(
                    self.file.as_raw_fd(),
                    libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
                    at as libc::off_t,
                    STRIDE as libc::off_t,
                )
            };
            if r != 0 {
                // Could not punch: at least reset it for the next holder.
                self.lanes[s].pop(usize::MAX, |_| {});
                owner.store(0, Ordering::Release);
            }
            cleared += 1;
        }
        cleared
    }

    /// The receiver is about to sleep: from now on producers ring after each
    /// push. Returns whether datagrams arrived meanwhile (then it must not
    /// sleep: a producer may have pushed before it saw the flag).
    pub fn want_doorbell(&self) -> bool {
        self.map.u32_at(DOORBELL).store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.has_work()
    }

    /// The receiver is awake: producers stop ringing.
    pub fn awake(&self) {
        self.map.u32_at(DOORBELL).store(0, Ordering::Relaxed);
    }

    /// The incarnation (slot generation) of lane `slot`'s producer now; 0
    /// if none.
    pub fn lane_owner(&self, slot: u8) -> u64 {
        match self.lanes[usize::from(slot)]
            .owner()
            .load(Ordering::Acquire)
        {
            RESETTING => 0,
            o => o,
        }
    }
}

/// Whether this process may copy from the memory of process `pid`, whose
/// inbox header page is at `owner_addr` there: reads its magic.
fn copy_probe(pid: u32, owner_addr: u64) -> bool {
    let mut got = [0u8; 8];
    let local = [crate::Range {
        addr: got.as_mut_ptr() as u64,
        len: 8,
    }];
    let remote = [crate::Range {
        addr: owner_addr,
        len: 8,
    }];
    // SAFETY: `got` is ours, writable, and not otherwise borrowed during the call.
    let r = unsafe { crate::read_from(pid, &remote, &local) };
    owner_addr != 0 && r.is_ok() && got == MAGIC
}

/// [`Outlet::can_copy_from_owner`] without attaching to a lane: opens the
/// inbox of process `pid` at descriptor `fd` (as [`Outlet::attach`] does),
/// reads where its owner maps it, and probes a copy from there.
pub fn can_copy_from(pid: u32, fd: RawFd) -> bool {
    open_header(pid, fd).is_ok_and(|(_, header, _)| copy_probe(pid, owner_addr(&header)))
}

/// Opens the inbox process `pid` holds at descriptor `fd` and maps its
/// header page, checked to be an inbox of this version that `pid` owns.
/// Returns the file, the header's mapping and the path (for messages).
fn open_header(pid: u32, fd: RawFd) -> io::Result<(File, Map, String)> {
    let path = format!("/proc/{pid}/fd/{fd}");
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| io::Error::new(e.kind(), format!("cannot open {path}: {e}")))?;
    if file.metadata()?.len() != INBOX_BYTES as u64 {
        return Err(invalid(format!("{path} is not a softrdma inbox (size)")));
    }
    let header = Map::new(&file, 0, PAGE)?;
    // SAFETY: the header page is mapped; its first 48 bytes were written
    // before the descriptor was published and never change.
    let h = unsafe { std::slice::from_raw_parts(header.ptr, 48) };
    let word = |at: usize| u32::from_ne_bytes([h[at], h[at + 1], h[at + 2], h[at + 3]]);
    let stride = u64::from_ne_bytes(h[24..32].try_into().unwrap_or_default());
    let layout_ok = h[..8] == MAGIC
        && word(8) == VERSION
        && word(12) == LANES as u32
        && u64::from(word(16)) == SLOTS
        && word(20) == SLOT_BYTES as u32
        && stride == STRIDE as u64
        && word(32) == pid;
    if !layout_ok {
        return Err(invalid(format!(
            "{path} is not a softrdma inbox of this version"
        )));
    }
    Ok((file, header, path))
}

/// The owner's address of the header page (0 from older builds).
fn owner_addr(header: &Map) -> u64 {
    // SAFETY: as in `open_header`: bytes 40..48 of the mapped header page,
    // written before the descriptor was published and never changed.
    let h = unsafe { std::slice::from_raw_parts(header.ptr.add(40), 8) };
    u64::from_ne_bytes(h.try_into().unwrap_or_default())
}

/// A peer's outlet: its lane in another process's (or its own) inbox.
#[derive(Debug)]
pub struct Outlet {
    header: Map,
    /// The inbox owner's pid and its address of the header page.
    pid: u32,
    owner_addr: u64,
    // Declared before `_lane_map`: the view goes before its mapping.
    lane: Ring,
    _lane_map: Map,
}

impl Outlet {
    /// Attaches to the inbox that process `pid` holds at descriptor `fd`,
    /// as the producer of lane `slot` (the caller's member slot: nobody else
    /// may push there).
    /// `generation` is the caller's incarnation of that slot: the owner
    /// reclaims the lane's memory once no live member has it.
    pub fn attach(pid: u32, fd: RawFd, slot: u8, generation: u64) -> io::Result<Outlet> {
        let (file, header, path) = open_header(pid, fd)?;
        let lane_map = Map::new(&file, PAGE + usize::from(slot) * STRIDE, LANE_BYTES)?;
        // SAFETY: the mapping is page aligned and LANE_BYTES long, owned by
        // this outlet next to the view; we are lane `slot`'s only producer
        // (the caller's contract).
        let lane = unsafe { Ring::new(lane_map.ptr) };
        if generation == 0 || generation == RESETTING {
            return Err(invalid(format!(
                "generation {generation} cannot own a lane"
            )));
        }
        // Take the lane; wait out a reclaim in progress (a few µs).
        let mut spins = 0u32;
        loop {
            let o = lane.owner().load(Ordering::Acquire);
            if o != RESETTING
                && lane
                    .owner()
                    .compare_exchange(o, generation, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                break;
            }
            spins += 1;
            if spins > 100_000 {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("lane {slot} of {path} stays in reclaim"),
                ));
            }
            std::thread::yield_now();
        }
        let bit = 1u64 << (slot % 64);
        header
            .u64_at(ACTIVE + usize::from(slot / 64) * 8)
            .fetch_or(bit, Ordering::AcqRel);
        Ok(Outlet {
            pid,
            owner_addr: owner_addr(&header),
            header,
            lane,
            _lane_map: lane_map,
        })
    }

    /// Whether this process may copy from the inbox owner's memory
    /// ([`crate::read_from`]): reads the owner's header page through its
    /// own address and compares the magic. Fails where `process_vm_readv`
    /// would (Yama `ptrace_scope` 1 to a non-descendant, another user's or
    /// an undumpable process) while the lane attached: the kernel checks
    /// ptrace *attach* rights for the copy and *read* rights for `/proc`.
    pub fn can_copy_from_owner(&self) -> bool {
        copy_probe(self.pid, self.owner_addr)
    }

    /// Pushes one datagram (see [`Ring::push`]).
    pub fn push(&self, src: SocketAddr, dst_ip: IpAddr, data: &[u8]) -> Result<(), PushError> {
        self.lane.push(src, dst_ip, data)
    }

    /// Stages one datagram, visible at the next [`Outlet::publish`] (see
    /// [`Ring::stage`]).
    pub fn stage(&self, src: SocketAddr, dst_ip: IpAddr, data: &[u8]) -> Result<(), PushError> {
        self.lane.stage(src, dst_ip, data)
    }

    /// Publishes the staged datagrams together.
    pub fn publish(&self) {
        self.lane.publish();
    }

    /// After pushes: whether the receiver asked to be woken (it may be
    /// asleep, see [`Inbox::want_doorbell`]).
    pub fn doorbell_wanted(&self) -> bool {
        fence(Ordering::SeqCst);
        self.header.u32_at(DOORBELL).load(Ordering::SeqCst) != 0
    }

    /// Datagrams pushed that the receiver has not taken yet.
    pub fn backlog(&self) -> u64 {
        self.lane.len()
    }

    /// Whether a datagram of `len` bytes fits a slot.
    pub fn fits(len: usize) -> bool {
        len <= DATA_CAP
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}
