//! Registered memory shared at registration (issue 17, step 3): the whole
//! pages inside a memory region move into a memfd mapped at the same
//! addresses, so a peer process of the host device copies out of them with
//! `memcpy` through its own mapping of that memfd instead of with
//! `process_vm_readv` (`peer.rs`).
//!
//! - **Owner.** [`share`] copies the pages into a new memfd and puts the
//!   memfd's shared mapping in their place with one `mremap` (the pages'
//!   addresses and contents stay; only private anonymous read-write memory
//!   qualifies, checked in `/proc/self/maps`). [`unshare`] does the reverse
//!   at deregistration: a private anonymous copy goes back in place, then the
//!   memfd's pages are punched out. A peer's mapping made before that sees
//!   zeros afterwards, never memory its owner uses after deregistration.
//! - **fork.** A child must not share a registered page with its parent
//!   (the kernel's rule since 5.13: a pinned page is copied for the child).
//!   A `pthread_atfork` child handler gives the child a private copy of every
//!   shared range before the child runs.
//! - **Peer.** [`PeerMap`] maps a peer's memfd read-only through
//!   `/proc/<pid>/fd/<fd>` (the kernel allows that only to processes that may
//!   read the peer's memory, the rule the lanes rely on) after checking the
//!   file is the memfd named: its inode, its size and its name.

use std::io;
use std::os::fd::RawFd;
use std::sync::{Mutex, MutexGuard, Once};

use crate::vm;

/// What the registry of shared regions remembers of one.
#[derive(Debug, Clone, Copy)]
struct Entry {
    id: u64,
    addr: u64,
    len: u64,
    fd: RawFd,
    ino: u64,
}

struct Regions {
    list: Vec<Entry>,
    next_id: u64,
}

static REGIONS: Mutex<Regions> = Mutex::new(Regions {
    list: Vec::new(),
    next_id: 1,
});

thread_local! {
    /// The registry's lock, held by the forking thread from `prepare` to the
    /// `parent`/`child` handler.
    static FORK_GUARD: std::cell::RefCell<Option<MutexGuard<'static, Regions>>> =
        const { std::cell::RefCell::new(None) };
}

/// Most regions shared at once: each holds a descriptor, and an
/// application's descriptor limit is often 1024. Not a tuning constant:
/// beyond it regions keep private memory (peer copies use
/// `process_vm_readv`).
pub const MAX_SHARED: usize = 256;

/// The name memfds of shared regions carry (`/proc/<pid>/fd` shows
/// `/memfd:softrdma-mr (deleted)`).
const NAME: &str = "softrdma-mr";

/// One region's shared pages, as the owner publishes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shared {
    /// Handle for [`unshare`].
    pub id: u64,
    /// First byte of the shared pages (page aligned), the memfd's offset 0.
    pub addr: u64,
    /// Bytes shared (whole pages), the memfd's size.
    pub len: u64,
    /// The memfd's descriptor in this process.
    pub fd: RawFd,
    /// The memfd's inode number.
    pub ino: u64,
}

/// Why a region was not shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Fewer whole pages inside it than the caller's minimum.
    TooSmall,
    /// More than the caller's maximum.
    TooLarge,
    /// [`MAX_SHARED`] regions are shared already.
    TooMany,
    /// Some of its pages are not private anonymous read-write memory (a
    /// file, a shared mapping, hugetlb, the stack, ...): the mapping found.
    NotPrivate(String),
    /// A system call failed (its errno).
    Sys(i32),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::TooSmall => write!(f, "too few whole pages"),
            Refused::TooLarge => write!(f, "larger than the cap"),
            Refused::TooMany => write!(f, "{MAX_SHARED} regions shared already"),
            Refused::NotPrivate(m) => write!(f, "not private anonymous memory ({m})"),
            Refused::Sys(e) => write!(f, "{}", io::Error::from_raw_os_error(*e)),
        }
    }
}

/// The system's page size.
pub fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u64 } else { 4096 }
}

/// The whole pages inside `[addr, addr + len)`: (first, bytes), bytes 0 if none.
pub fn interior(addr: u64, len: u64) -> (u64, u64) {
    let p = page_size();
    let Some(end) = addr.checked_add(len) else {
        return (addr, 0);
    };
    let Some(first) = addr.checked_next_multiple_of(p) else {
        return (addr, 0);
    };
    let last = end - end % p;
    (first, last.saturating_sub(first))
}

fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// A failed system call's refusal.
fn sys(e: io::Error) -> Refused {
    Refused::Sys(e.raw_os_error().unwrap_or(0))
}

/// A fresh read-write mapping of `size` bytes wherever the kernel puts it:
/// of `fd` shared (`Some`), or private anonymous memory (`None`).
fn map_fresh(size: usize, fd: Option<RawFd>) -> Option<*mut libc::c_void> {
    let (flags, fd) = match fd {
        Some(fd) => (libc::MAP_SHARED, fd),
        None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
    };
    vm::map(size, libc::PROT_READ | libc::PROT_WRITE, flags, fd, 0).map(|p| p.cast())
}

/// Moves the mapping `tmp` (`size` bytes, ours) over the pages at `dest`
/// in one step; on failure `tmp` is still ours, at its place.
///
/// # Safety
/// The pages at `dest` must be the caller's to replace (a region it
/// registered).
unsafe fn move_over(tmp: *mut libc::c_void, size: usize, dest: u64) -> bool {
    // SAFETY: per the contract.
    unsafe { vm::move_over(tmp.cast(), size, dest) }
}

/// Unmaps `tmp`, a mapping of ours of `size` bytes.
///
/// # Safety
/// Nothing may refer to `tmp` any more.
unsafe fn unmap(tmp: *mut libc::c_void, size: usize) {
    // SAFETY: per the contract.
    unsafe { vm::unmap(tmp.cast(), size) };
}

/// What [`walk_range`] shows of one line of `/proc/self/maps`: its
/// permissions, inode, path, and the whole line (for the memfd's name and
/// for messages).
struct MapLine<'a> {
    perms: &'a str,
    inode: &'a str,
    path: String,
    line: &'a str,
}

/// Calls `each` for every mapping in `maps` (`/proc/self/maps`) that
/// overlaps `[addr, addr + len)`, in address order. `Ok` if they cover the
/// range without a gap and `each` accepted them all; the first unmapped
/// address ends the walk with `gap(address)`, and a mapping `each` refuses
/// with its error.
fn walk_range<E>(
    maps: &str,
    addr: u64,
    len: u64,
    mut each: impl FnMut(&MapLine<'_>) -> Result<(), E>,
    gap: impl FnOnce(u64) -> E,
) -> Result<(), E> {
    let (end, mut at) = (addr + len, addr);
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms), _, _, Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((s, e)) = range.split_once('-') else {
            continue;
        };
        let (Ok(s), Ok(e)) = (u64::from_str_radix(s, 16), u64::from_str_radix(e, 16)) else {
            continue;
        };
        if e <= at || s >= end {
            continue;
        }
        if s > at {
            return Err(gap(at));
        }
        let path = f.collect::<Vec<_>>().join(" ");
        each(&MapLine {
            perms,
            inode,
            path,
            line,
        })?;
        at = e;
        if at >= end {
            return Ok(());
        }
    }
    Err(gap(at))
}

/// The line of `/proc/self/maps` of the mapping that holds `addr`, if one
/// does (diagnostics and tests: whether a region's pages are shared).
pub fn mapping_of(addr: u64) -> Option<String> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let mut found = None;
    walk_range(
        &maps,
        addr,
        1,
        |m| {
            found = Some(m.line.to_owned());
            Ok(())
        },
        |_| (),
    )
    .ok()?;
    found
}

/// Whether `/proc/self/maps` shows `[addr, addr + len)` covered by private
/// anonymous read-write mappings only (the heap and named anonymous memory
/// included; the stack, files, shared and hugetlb mappings not).
fn private_anonymous(addr: u64, len: u64) -> Result<(), Refused> {
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(sys)?;
    walk_range(
        &maps,
        addr,
        len,
        |m| {
            let anon = m.inode == "0"
                && (m.path.is_empty() || m.path == "[heap]" || m.path.starts_with("[anon:"));
            if m.perms.starts_with("rw") && m.perms.ends_with('p') && anon {
                Ok(())
            } else {
                Err(Refused::NotPrivate(m.line.to_owned()))
            }
        },
        |at| Refused::NotPrivate(format!("unmapped at {at:#x}")),
    )
}

/// Whether `/proc/self/maps` shows `[addr, addr + len)` still mapped from
/// the region's memfd (inode `ino`) and nothing else: the application may
/// have unmapped it (freed without deregistering), and something else may
/// sit there now, which must be left alone.
fn still_shared(addr: u64, len: u64, ino: u64) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    let ino = ino.to_string();
    walk_range(
        &maps,
        addr,
        len,
        |m| {
            if m.inode == ino && m.line.contains(NAME) {
                Ok(())
            } else {
                Err(())
            }
        },
        |_| (),
    )
    .is_ok()
}

fn install_fork_handlers() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the three handlers are `extern "C"` functions that live for
        // the whole program.
        unsafe { libc::pthread_atfork(Some(fork_prepare), Some(fork_parent), Some(fork_child)) };
    });
}

extern "C" fn fork_prepare() {
    let g = REGIONS.lock().unwrap_or_else(|p| p.into_inner());
    FORK_GUARD.with(|c| *c.borrow_mut() = Some(g));
}

extern "C" fn fork_parent() {
    FORK_GUARD.with(|c| drop(c.borrow_mut().take()));
}

/// In the child (one thread): every shared range gets a private copy in
/// place, and the child forgets the memfds (glibc's malloc works in a
/// child's fork handlers, so reading the maps may allocate).
extern "C" fn fork_child() {
    FORK_GUARD.with(|c| {
        if let Some(mut g) = c.borrow_mut().take() {
            for e in &g.list {
                if still_shared(e.addr, e.len, e.ino) {
                    restore_private(e.addr, e.len, e.fd);
                }
                // SAFETY: the child's copy of the memfd's descriptor is its own.
                unsafe { libc::close(e.fd) };
            }
            g.list.clear();
        }
    });
}

/// Moves the whole pages of `[addr, addr + len)` into a new memfd mapped
/// shared at the same addresses, if they are private anonymous memory and
/// between `min` and `max` bytes. The contents stay; so do the pages'
/// addresses. Writes other threads make to those pages while this runs may
/// be lost (registering memory is not expected to race with writing it).
pub fn share(addr: u64, len: u64, min: u64, max: u64) -> Result<Shared, Refused> {
    let (first, n) = interior(addr, len);
    if n == 0 || n < min {
        return Err(Refused::TooSmall);
    }
    if n > max {
        return Err(Refused::TooLarge);
    }
    let size = usize::try_from(n).map_err(|_| Refused::TooLarge)?;
    if REGIONS.lock().unwrap_or_else(|p| p.into_inner()).list.len() >= MAX_SHARED {
        return Err(Refused::TooMany);
    }
    private_anonymous(first, n)?;
    install_fork_handlers();
    let file = vm::memfd(c"softrdma-mr", n).map_err(sys)?;
    let ino = std::os::unix::fs::MetadataExt::ino(&file.metadata().map_err(sys)?);
    // Kept open (and closed) by its region's entry from here on.
    let fd = std::os::fd::IntoRawFd::into_raw_fd(file);
    let fail = |e: i32| {
        // SAFETY: `fd` is ours and used nowhere else.
        unsafe { libc::close(fd) };
        Err(Refused::Sys(e))
    };
    let Some(tmp) = map_fresh(size, Some(fd)) else {
        return fail(errno());
    };
    // Pages that read as zeros (never touched: the kernel's zero page) are
    // not copied, so the memfd allocates only what the region holds.
    let page = page_size() as usize;
    for off in (0..size).step_by(page) {
        // SAFETY: `[first, first + n)` is mapped read-write (checked in the
        // maps just now) and `n` is a multiple of the page size.
        let src = unsafe { std::slice::from_raw_parts((first as usize + off) as *const u8, page) };
        if src.iter().all(|&b| b == 0) {
            continue;
        }
        // SAFETY: `tmp` is a fresh mapping of `n` bytes, distinct from the
        // region; `off + page <= n`.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), tmp.cast::<u8>().add(off), page) };
    }
    // SAFETY: the region's pages, which the caller registers (it owns them).
    if !unsafe { move_over(tmp, size, first) } {
        let e = errno();
        // SAFETY: `tmp` is still our mapping (mremap failed).
        unsafe { unmap(tmp, size) };
        return fail(e);
    }
    let mut g = REGIONS.lock().unwrap_or_else(|p| p.into_inner());
    let id = g.next_id;
    g.next_id += 1;
    g.list.push(Entry {
        id,
        addr: first,
        len: n,
        fd,
        ino,
    });
    Ok(Shared {
        id,
        addr: first,
        len: n,
        fd,
        ino,
    })
}

/// Gives `[addr, addr + len)`, the pages of memfd `fd`, private anonymous
/// pages with the memfd's contents, in place (one `mremap`). Reads the
/// memfd's data extents with `pread` (holes stay untouched zero pages, and
/// nothing faults if the range was unmapped meanwhile). Only system calls.
fn restore_private(addr: u64, len: u64, fd: RawFd) -> bool {
    let size = len as usize;
    let Some(tmp) = map_fresh(size, None) else {
        return false;
    };
    let fail = || {
        // SAFETY: `tmp` is our mapping.
        unsafe { unmap(tmp, size) };
        false
    };
    let mut off: libc::off_t = 0;
    let end = len as libc::off_t;
    while off < end {
        // SAFETY: plain queries of our memfd.
        let data = unsafe { libc::lseek(fd, off, libc::SEEK_DATA) };
        if data < 0 {
            // ENXIO: no data past `off`.
            if errno() == libc::ENXIO {
                break;
            }
            return fail();
        }
        // SAFETY: as above.
        let hole = unsafe { libc::lseek(fd, data, libc::SEEK_HOLE) }.min(end);
        let mut at = data;
        while at < hole {
            // SAFETY: writes `hole - at` bytes at offset `at` of `tmp`, our
            // fresh mapping of `size` bytes (`hole <= len`).
            let n = unsafe {
                libc::pread(
                    fd,
                    tmp.cast::<u8>().add(at as usize).cast(),
                    (hole - at) as usize,
                    at,
                )
            };
            if n <= 0 {
                return fail();
            }
            at += n as libc::off_t;
        }
        off = hole;
    }
    // SAFETY: the shared pages at `addr`, which the caller checked are
    // still the memfd's.
    if !unsafe { move_over(tmp, size, addr) } {
        return fail();
    }
    true
}

/// Undoes [`share`] (at deregistration): the pages become private anonymous
/// memory again with their contents, and the memfd's pages are freed, so a
/// peer still mapping it reads zeros, never this process's memory. Returns
/// whether `id` was shared (false in a forked child, which already has
/// private copies).
pub fn unshare(id: u64) -> bool {
    let e = {
        let mut g = REGIONS.lock().unwrap_or_else(|p| p.into_inner());
        let Some(i) = g.list.iter().position(|e| e.id == id) else {
            return false;
        };
        g.list.swap_remove(i)
    };
    if still_shared(e.addr, e.len, e.ino) {
        restore_private(e.addr, e.len, e.fd);
    }
    // SAFETY: our memfd; punching keeps its size, so peers' mappings stay
    // valid (reading zeros) and never fault.
    unsafe {
        libc::fallocate(
            e.fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            0,
            e.len as libc::off_t,
        );
        libc::close(e.fd);
    }
    true
}

/// How many regions are shared now.
pub fn shared_count() -> usize {
    REGIONS.lock().unwrap_or_else(|p| p.into_inner()).list.len()
}

/// A mapping of a peer's shared region (see [`share`]): read-only to copy
/// from, or writable to place a READ's data the peer asked for
/// ([`crate::TicketBook`]).
#[derive(Debug)]
pub struct PeerMap {
    ptr: *mut u8,
    len: usize,
    writable: bool,
}

// SAFETY: the mapping is plain memory, valid until drop; nothing in it is
// tied to a thread.
unsafe impl Send for PeerMap {}

impl PeerMap {
    /// Maps, read-only, the memfd process `pid` holds at descriptor `fd`, if
    /// it is a shared region's memfd (by name) with inode `ino` and size
    /// `len`.
    pub fn open(pid: u32, fd: u32, ino: u64, len: u64) -> Result<PeerMap, crate::CopyError> {
        Self::open_as(pid, fd, ino, len, false)
    }

    /// As [`PeerMap::open`], writable: only to place data under a ticket
    /// the region's owner armed.
    pub fn open_writable(
        pid: u32,
        fd: u32,
        ino: u64,
        len: u64,
    ) -> Result<PeerMap, crate::CopyError> {
        Self::open_as(pid, fd, ino, len, true)
    }

    fn open_as(
        pid: u32,
        fd: u32,
        ino: u64,
        len: u64,
        writable: bool,
    ) -> Result<PeerMap, crate::CopyError> {
        use crate::CopyError;
        use std::os::fd::AsRawFd;
        let file = open_peer_memfd(pid, fd, NAME, ino, len, writable)?;
        if len == 0 {
            return Err(CopyError::Fault);
        }
        let size = usize::try_from(len).map_err(|_| CopyError::Invalid)?;
        let prot = if writable {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_READ
        };
        // A shared mapping of a file we hold open; its size was just
        // checked, and a region's memfd never shrinks (punched, never
        // truncated), so no access within `len` faults.
        let p = vm::map(size, prot, libc::MAP_SHARED, file.as_raw_fd(), 0)
            .ok_or_else(|| CopyError::Other(errno()))?;
        Ok(PeerMap {
            ptr: p,
            len: size,
            writable,
        })
    }

    /// Bytes mapped.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is mapped (never: `open` refuses empty files).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copies `len` bytes at offset `off` of the region to address `dst` of
    /// this process. False if the range leaves the mapping.
    ///
    /// # Safety
    ///
    /// `[dst, dst + len)` must be memory of this process that may be written
    /// now (allocated, writable, referenced by no live Rust reference).
    pub unsafe fn copy_to(&self, off: u64, dst: u64, len: u64) -> bool {
        let end = off.checked_add(len);
        if end.is_none_or(|e| e > self.len as u64) {
            return false;
        }
        // SAFETY: the source lies inside our read-only mapping (checked
        // above); the caller promised the destination; a mapping of the
        // peer's memfd is a range of its own, distinct from `dst`.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.add(off as usize), dst as *mut u8, len as usize)
        };
        true
    }
    /// Copies `len` bytes at address `src` of this process to offset `off`
    /// of the region. False if the range leaves the mapping or the mapping
    /// is read-only.
    ///
    /// # Safety
    ///
    /// `[src, src + len)` must be memory of this process that may be read
    /// now; the caller must hold the owner's ticket for this placement.
    pub unsafe fn copy_from(&self, src: u64, off: u64, len: u64) -> bool {
        let end = off.checked_add(len);
        if !self.writable || end.is_none_or(|e| e > self.len as u64) {
            return false;
        }
        // SAFETY: the destination lies inside our writable mapping
        // (checked above); the caller promised the source; the mapping is
        // a range of its own, distinct from `src`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                src as *const u8,
                self.ptr.add(off as usize),
                len as usize,
            )
        };
        true
    }
}

impl Drop for PeerMap {
    fn drop(&mut self) {
        // SAFETY: our mapping, unmapped once.
        unsafe { vm::unmap(self.ptr, self.len) };
    }
}

/// Opens the memfd process `pid` holds at descriptor `fd` (read-only or
/// read-write), if its name starts with `name` and it has inode `ino` and
/// size `len`: what every mapping of a peer's memfd checks, the descriptor
/// being the peer's word in a packet.
pub(crate) fn open_peer_memfd(
    pid: u32,
    fd: u32,
    name: &str,
    ino: u64,
    len: u64,
    writable: bool,
) -> Result<std::fs::File, crate::CopyError> {
    use std::os::unix::fs::MetadataExt;
    let path = format!("/proc/{pid}/fd/{fd}");
    let link = std::fs::read_link(&path).map_err(|e| map_err(&e))?;
    if !link
        .to_string_lossy()
        .starts_with(&format!("/memfd:{name}"))
    {
        return Err(crate::CopyError::Fault);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(writable)
        .open(&path)
        .map_err(|e| map_err(&e))?;
    let meta = file.metadata().map_err(|e| map_err(&e))?;
    if meta.ino() != ino || meta.len() != len {
        return Err(crate::CopyError::Fault);
    }
    Ok(file)
}

pub(crate) fn map_err(e: &io::Error) -> crate::CopyError {
    use crate::CopyError;
    match e.raw_os_error() {
        // The process is gone (its /proc directory with it).
        Some(libc::ESRCH) => CopyError::Gone,
        Some(libc::EACCES | libc::EPERM) => CopyError::Denied,
        // The descriptor is closed (the region deregistered).
        Some(libc::ENOENT) => CopyError::Fault,
        Some(e) => CopyError::Other(e),
        None => CopyError::Other(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh private anonymous read-write mapping of `len` bytes.
    fn fresh_private(len: usize) -> *mut u8 {
        map_fresh(len, None).expect("mmap").cast()
    }

    /// A private anonymous mapping of `pages` pages, filled with a pattern.
    fn region(pages: usize) -> (u64, usize) {
        let len = pages * page_size() as usize;
        let p = fresh_private(len);
        // SAFETY: the fresh mapping, ours.
        let s = unsafe { std::slice::from_raw_parts_mut(p, len) };
        for (i, b) in s.iter_mut().enumerate() {
            *b = (i * 7 + 3) as u8;
        }
        (p as u64, len)
    }

    fn bytes(addr: u64, len: usize) -> Vec<u8> {
        // SAFETY: callers pass ranges of `region`s still mapped.
        unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
    }

    #[test]
    fn interior_is_whole_pages() {
        let p = page_size();
        assert_eq!(interior(p, 3 * p), (p, 3 * p));
        assert_eq!(interior(p + 1, 3 * p), (2 * p, 2 * p));
        assert_eq!(interior(p + 1, p), (2 * p, 0));
        assert_eq!(interior(u64::MAX - 5, 10).1, 0);
    }

    #[test]
    fn share_keeps_contents_and_addresses_and_unshare_restores_private() {
        let (base, len) = region(8);
        let before = bytes(base, len);
        let p = page_size();
        // An unaligned region: its head and tail pages stay private.
        let s = share(base + 100, len as u64 - 200, 0, u64::MAX).unwrap();
        assert_eq!((s.addr, s.len), (base + p, len as u64 - 2 * p));
        assert_eq!(bytes(base, len), before);
        assert!(
            mapping_of(s.addr).unwrap().contains("/memfd:softrdma-mr"),
            "{}",
            mapping_of(s.addr).unwrap()
        );
        assert!(!mapping_of(base).unwrap().contains("memfd"));
        // Writes through the application's pointers land in the memfd.
        // SAFETY: inside our region.
        unsafe { *((s.addr + 5) as *mut u8) = 0xAB };
        let me = std::process::id();
        let m = PeerMap::open(me, s.fd as u32, s.ino, s.len).unwrap();
        let mut out = [0u8; 8];
        // SAFETY: `out` is ours and not borrowed during the call.
        assert!(unsafe { m.copy_to(3, out.as_mut_ptr() as u64, 8) });
        assert_eq!(out[2], 0xAB);
        assert_eq!(out[0], before[(p + 3) as usize]);
        // SAFETY: as above; past the end is refused.
        assert!(!unsafe { m.copy_to(s.len - 4, out.as_mut_ptr() as u64, 8) });
        // Wrong inode or size: refused.
        assert!(PeerMap::open(me, s.fd as u32, s.ino + 1, s.len).is_err());
        assert!(PeerMap::open(me, s.fd as u32, s.ino, s.len + 1).is_err());

        assert!(unshare(s.id));
        assert!(!unshare(s.id));
        let mut expect = before.clone();
        expect[(p + 5) as usize] = 0xAB;
        assert_eq!(bytes(base, len), expect);
        assert!(
            !mapping_of(s.addr).unwrap().contains("memfd"),
            "{}",
            mapping_of(s.addr).unwrap()
        );
        // A peer's mapping made before deregistration sees neither the
        // owner's later writes nor its old data.
        // SAFETY: inside our region.
        unsafe { *((s.addr + 5) as *mut u8) = 0xCD };
        // SAFETY: as above.
        assert!(unsafe { m.copy_to(0, out.as_mut_ptr() as u64, 8) });
        assert_eq!(out, [0; 8]);
        // SAFETY: our mapping.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }

    #[test]
    fn untouched_pages_take_no_memory_and_come_back_as_zeros() {
        let p = page_size() as usize;
        let len = 64 * p;
        // Never touched but one byte.
        let base = fresh_private(len) as u64;
        // SAFETY: inside the mapping.
        unsafe { *((base + 3 * p as u64 + 7) as *mut u8) = 9 };
        let s = share(base, len as u64, 0, u64::MAX).unwrap();
        let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
        // SAFETY: our memfd and a writable stat.
        assert_eq!(unsafe { libc::fstat(s.fd, st.as_mut_ptr()) }, 0);
        // SAFETY: filled by fstat.
        let blocks = unsafe { st.assume_init() }.st_blocks as usize;
        assert!(
            blocks * 512 <= 2 * p,
            "{blocks} blocks for one touched page"
        );
        // SAFETY: inside the mapping, now the memfd's.
        unsafe { *((base + 40 * p as u64) as *mut u8) = 5 };
        assert!(unshare(s.id));
        let b = bytes(base, len);
        assert_eq!((b[3 * p + 7], b[40 * p]), (9, 5));
        assert_eq!(b.iter().filter(|&&x| x != 0).count(), 2);
        assert!(!mapping_of(base).unwrap().contains("memfd"));
        // SAFETY: our mapping.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }

    #[test]
    fn refuses_what_it_must_not_share() {
        let p = page_size();
        let (base, len) = region(4);
        assert_eq!(
            share(base, len as u64, 8 * p, u64::MAX),
            Err(Refused::TooSmall)
        );
        assert_eq!(share(base, len as u64, 0, p), Err(Refused::TooLarge));
        assert_eq!(share(base + 1, p, 0, u64::MAX), Err(Refused::TooSmall));
        // Already shared.
        let s = share(base, len as u64, 0, u64::MAX).unwrap();
        assert!(matches!(
            share(base, len as u64, 0, u64::MAX),
            Err(Refused::NotPrivate(_))
        ));
        unshare(s.id);
        // A shared anonymous mapping.
        // SAFETY: a fresh shared anonymous mapping.
        let sh = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert!(matches!(
            share(sh as u64, len as u64, 0, u64::MAX),
            Err(Refused::NotPrivate(_))
        ));
        // Read-only memory.
        // SAFETY: our mapping.
        unsafe { libc::mprotect(base as *mut libc::c_void, len, libc::PROT_READ) };
        assert!(matches!(
            share(base, len as u64, 0, u64::MAX),
            Err(Refused::NotPrivate(_))
        ));
        // SAFETY: our mappings.
        unsafe {
            libc::munmap(base as *mut libc::c_void, len);
            libc::munmap(sh, len);
        }
        // Unmapped. Not `base` again: the tests run in parallel threads and
        // another one's mmap may take the freed range at once (CI saw it).
        // The kernel places mappings top-down; nothing here asks for page 2.
        assert!(matches!(
            share(2 * p, 4 * p, 0, u64::MAX),
            Err(Refused::NotPrivate(m)) if m.starts_with("unmapped")
        ));
    }

    #[test]
    fn unshare_after_the_memory_was_unmapped_leaves_its_new_tenant_alone() {
        let (base, len) = region(4);
        let s = share(base, len as u64, 0, u64::MAX).unwrap();
        // The application frees the memory without deregistering, and a
        // shared mapping of its own lands at the same place.
        // SAFETY: our mapping, replaced by another of our own.
        let p = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        assert_eq!(p as u64, base);
        // SAFETY: inside the new mapping.
        unsafe { *(base as *mut u8) = 42 };
        let before = mapping_of(base).unwrap();
        assert!(unshare(s.id));
        assert_eq!(
            mapping_of(base).unwrap(),
            before,
            "the new mapping was replaced"
        );
        assert_eq!(bytes(base, 1), [42]);
        // SAFETY: our mapping.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }

    #[test]
    fn a_forked_child_gets_a_private_copy() {
        let (base, len) = region(4);
        let s = share(base, len as u64, 0, u64::MAX).unwrap();
        let before = bytes(base, len);
        // SAFETY: the child only reads and writes memory and calls
        // async-signal-safe functions before `_exit`.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // Child: same contents, then a write its parent must not see.
            // SAFETY: inside the region, mapped in the child too.
            let ok = unsafe { *((base + 9) as *const u8) } == before[9];
            // SAFETY: as above.
            unsafe { *((base + 9) as *mut u8) = before[9].wrapping_add(1) };
            // SAFETY: ends the child without running the parent's atexit code.
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: our child.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
        assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
        assert_eq!(
            bytes(base, len),
            before,
            "the child's write reached the parent"
        );
        assert!(unshare(s.id));
        // SAFETY: our mapping.
        unsafe { libc::munmap(base as *mut libc::c_void, len) };
    }
}
