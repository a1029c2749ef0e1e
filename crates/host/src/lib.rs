//! The per-host registry through which the processes of one softrdma host device
//! coordinate (DESIGN §4). Linux only.
//!
//! All processes of one user in one network namespace form one device. They share an IP
//! address and UDP 4791 through a `SO_REUSEPORT` group; each owns a **member slot**
//! `1..=255` (its QPNs are `slot << 16 | n`, its CM comm IDs carry the slot in their top
//! byte). This crate is the small shared state they agree through: a directory of files,
//! no daemon.
//!
//! # Contract
//!
//! * **Location and privacy.** [`Registry::open`] uses `$XDG_RUNTIME_DIR/softrdma` when
//!   `XDG_RUNTIME_DIR` is an existing absolute directory owned by our effective uid, else
//!   `/tmp/softrdma-<uid>`; inside it one directory per network namespace,
//!   `net-<inode of /proc/self/ns/net>` (`net-default` when that cannot be read). Both are
//!   created with mode **0700**, and an existing one is refused (`PermissionDenied`, with
//!   the reason in the message) if it is a symlink, not a directory, **not owned by our
//!   uid**, or has any group/other permission bit. Files are created 0600 and opened with
//!   `O_NOFOLLOW`.
//! * **Liveness is `flock(2)`.** A slot or port lease is held by keeping `LOCK_EX` on its
//!   file. The kernel drops the lock when the holder's last descriptor closes — including
//!   when the process is SIGKILLed — so a crashed process's slots and leases become free
//!   with no cleanup by anyone. Anyone can tell whether a holder exists by a non-blocking
//!   shared-lock probe. Locks belong to open file descriptions, so a process's own slots
//!   and leases also count as alive when it probes them.
//! * **Mutual exclusion.** Multi-step updates (taking a slot, reserving a port, editing a
//!   group) run under the registry lock ([`Registry::lock`]), so two processes racing for
//!   the same slot or port cannot both win.
//! * **Stale state is cleaned up.** Whenever the registry scans under its lock (in
//!   [`Registry::open`], [`Registry::join`], [`Registry::reserve_port`], [`Registry::gc`],
//!   and opportunistically in the read-only queries when the lock is free), it removes
//!   lease files nobody holds, reports of dead or replaced members, abandoned temporary
//!   files, and empties group records whose members are all dead. Dead slot files are
//!   **kept**: they carry the slot's generation counter and the time its holder was last
//!   seen, which slot allocation uses to keep recently dead slots in quarantine. A record
//!   with garbage contents is treated as absent; nothing here panics on what it reads.
//! * **Errors** are [`io::Error`]s whose messages name the file or rule involved, except
//!   a taken port, which is exactly `EADDRINUSE` ([`io::ErrorKind::AddrInUse`], raw OS
//!   error `libc::EADDRINUSE`) so callers can hand it to C as errno.
//!
//! Works on tmpfs and on ordinary local file systems (anything with working `flock` and
//! atomic `rename`).
//!
//! # On-disk layout
//!
//! ```text
//! <base>/                       0700 ($XDG_RUNTIME_DIR/softrdma or /tmp/softrdma-<uid>)
//!   net-<netns inode>/          0700, one per network namespace
//!     lock                      registry lock (flock LOCK_EX)
//!     slot-<n>                  member slot n (1..=255), LOCK_EX by its holder;
//!                               generation, pid, taken_ms, freed_ms
//!     port-<space hex4>-<port>-<addr>   rdma_cm port lease, LOCK_EX by its holder;
//!                               slot, generation, listening
//!     group-<addr>              SO_REUSEPORT group state: epoch, slot per index
//!     report-<addr>-<slot>-<generation> a member's probe report: epoch, index
//!     inbox-<slot>-<generation>  a member's shared-memory inbox: its descriptor
//!     fwd-<slot>                unix datagram socket of slot n's holder: datagrams other
//!                               members forward to it (bound by each new holder)
//!     .tmp-<pid>-<n>            being written; renamed into place when complete
//! ```
//!
//! `<addr>` is the address in text form with `:` replaced by `_` (`10.0.0.1`, `fe80__1`).
//! Records are text: a magic line (`softrdma-slot 1`, …), `key=value` lines, `end`.

use std::collections::HashSet;
use std::fs;
use std::fs::File;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::net::IpAddr;
use std::ops::RangeInclusive;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

mod addr;
mod format;
mod fsutil;

pub use addr::addrs_overlap;

use format::{LeaseRecord, SlotRecord};
use fsutil::{Probe, context, now_ms};

/// rdma_cm port space `RDMA_PS_IPOIB`.
pub const PS_IPOIB: u16 = 0x0002;
/// rdma_cm port space `RDMA_PS_TCP` (reliable connections; what `rdma_listen` users mostly use).
pub const PS_TCP: u16 = 0x0106;
/// rdma_cm port space `RDMA_PS_UDP`.
pub const PS_UDP: u16 = 0x0111;
/// rdma_cm port space `RDMA_PS_IB`.
pub const PS_IB: u16 = 0x013F;

/// Not an rdma_cm port space: leases in it record which member serves a
/// management class on QP1 (port `class << 8 | class version`, address
/// unspecified; libibumad's `umad_register`), so a MAD request the member it
/// reached does not serve goes on to that member.
pub const PS_MAD_CLASS: u16 = 0xFF04;

/// Ports [`Registry::reserve_port`] picks from for port 0 (Linux's default
/// `ip_local_port_range`).
pub const EPHEMERAL_PORTS: RangeInclusive<u16> = 32768..=60999;

/// Highest member slot; slots are `1..=MAX_SLOT` (0 is never a slot).
pub const MAX_SLOT: u8 = 255;

/// A temporary file nobody holds is removed once it is this old. The age guards the
/// instant between a writer creating its temporary file and locking it.
const TEMP_MAX_AGE: Duration = Duration::from_secs(10);

/// The registry of one network namespace: a private directory of lock and record files.
/// Cheap to clone; every method works on the files directly, so several `Registry`
/// values (in one process or many) for the same directory see the same state.
#[derive(Debug, Clone)]
pub struct Registry {
    dir: PathBuf,
}

/// The registry lock, held (exclusively, across all processes and all `Registry` values)
/// until dropped. See [`Registry::lock`].
#[derive(Debug)]
pub struct RegistryGuard<'a> {
    registry: &'a Registry,
    _file: fsutil::LockedFile,
    /// Counted per thread (see [`GUARDS_HERE`]): never moved to another.
    _not_send: std::marker::PhantomData<*const ()>,
}

thread_local! {
    /// The registries (by directory) whose lock this thread holds. flock(2)
    /// locks belong to open file descriptions, so a thread asking again for
    /// a lock it holds would wait for itself forever; it gets `EDEADLK`
    /// instead. That happens when a signal handler calls `exit(3)` while the
    /// thread is inside the registry, and the exit hooks leave the host
    /// device.
    static GUARDS_HERE: std::cell::RefCell<Vec<PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl<'a> RegistryGuard<'a> {
    fn new(registry: &'a Registry, file: fsutil::LockedFile) -> RegistryGuard<'a> {
        let _ = GUARDS_HERE.try_with(|h| h.borrow_mut().push(registry.dir.clone()));
        RegistryGuard {
            registry,
            _file: file,
            _not_send: std::marker::PhantomData,
        }
    }
}

impl Drop for RegistryGuard<'_> {
    fn drop(&mut self) {
        let _ = GUARDS_HERE.try_with(|h| {
            let mut h = h.borrow_mut();
            if let Some(i) = h.iter().rposition(|d| *d == self.registry.dir) {
                h.swap_remove(i);
            }
        });
    }
}

/// Refuses a lock this thread already holds (see [`GUARDS_HERE`]).
fn not_held_here(dir: &Path) -> io::Result<()> {
    // `try_with`: a thread-local being torn down holds nothing.
    if GUARDS_HERE
        .try_with(|h| h.borrow().iter().any(|d| d == dir))
        .unwrap_or(false)
    {
        return Err(io::Error::new(
            io::ErrorKind::Deadlock,
            "this thread holds the softrdma registry lock already",
        ));
    }
    Ok(())
}

/// A member slot held by this process, from [`Registry::join`]. The slot is released when
/// this is dropped or the process dies.
///
/// Drop a member's [`PortLease`]s before the member: a lease outliving its member names a
/// slot that another process may take.
#[derive(Debug)]
pub struct Member {
    dir: PathBuf,
    slot: u8,
    generation: u64,
    pid: u32,
    taken_ms: u64,
    file: fsutil::LockedFile,
}

impl std::os::fd::AsRawFd for Member {
    /// The locked slot file (what keeps the slot alive).
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

/// A live member as seen by [`Registry::members`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemberInfo {
    /// Its member slot.
    pub slot: u8,
    /// Which take of that slot this is (1 for the first holder ever).
    pub generation: u64,
    /// Its process id, as seen in the pid namespace that took the slot.
    pub pid: u32,
}

/// Where a live member's shared-memory inbox is ([`Registry::inbox`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InboxInfo {
    /// The holder's generation of its slot.
    pub generation: u64,
    /// Its process id.
    pub pid: u32,
    /// The inbox's descriptor in that process.
    pub fd: i32,
}

/// An rdma_cm port reserved for a member, from [`Registry::reserve_port`]. Released (its
/// file removed) when dropped; released by the kernel if the process dies.
#[derive(Debug)]
pub struct PortLease {
    path: PathBuf,
    file: fsutil::LockedFile,
    space: u16,
    addr: IpAddr,
    port: u16,
    slot: u8,
    generation: u64,
    listening: AtomicBool,
}

impl std::os::fd::AsRawFd for PortLease {
    /// The locked lease file (what keeps the port taken).
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.file.as_raw_fd()
    }
}

/// Which member slot sits at which index of the `SO_REUSEPORT` group bound to one
/// address, as the members have reconciled it ([`Registry::read_group`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct GroupState {
    /// Bumped by the reconciler each time it starts a new round of probes.
    pub epoch: u32,
    /// The member slot owning the socket at each group index, in index order. A socket
    /// joining the group takes the next index (push at the end).
    pub members: Vec<u8>,
}

impl GroupState {
    /// Applies the kernel's rule for a socket leaving a reuseport group
    /// (`reuseport_detach_sock`): the last socket moves into the hole and the group
    /// shrinks by one. An index past the end changes nothing.
    pub fn remove_index(&mut self, index: usize) {
        if index < self.members.len() {
            self.members.swap_remove(index);
        }
    }
}

impl Member {
    /// This member's slot, `1..=255`.
    pub fn slot(&self) -> u8 {
        self.slot
    }

    /// Which take of the slot this is: distinguishes this holder from earlier and later
    /// holders of the same slot.
    pub fn generation(&self) -> u64 {
        self.generation
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        // Record the release time (quarantine: the slot is reused last), then let the
        // lock go (`LockedFile`'s drop).
        let rec = SlotRecord {
            generation: self.generation,
            pid: self.pid,
            taken_ms: self.taken_ms,
            freed_ms: now_ms().max(self.taken_ms),
        };
        let _ = fsutil::rewrite_in_place(&self.file, rec.render().as_bytes());
    }
}

impl PortLease {
    /// The reserved port (the chosen one when 0 was asked for).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The address the port is reserved on, as given to [`Registry::reserve_port`].
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The rdma_cm port space ([`PS_TCP`], …).
    pub fn space(&self) -> u16 {
        self.space
    }

    /// The member slot the port is reserved for.
    pub fn slot(&self) -> u8 {
        self.slot
    }

    /// Whether the lease is marked as listening.
    pub fn is_listening(&self) -> bool {
        self.listening.load(Ordering::Relaxed)
    }

    /// Marks the lease as listening (or not): [`Registry::listeners`] reports only
    /// listening leases.
    pub fn set_listening(&self, on: bool) -> io::Result<()> {
        let rec = LeaseRecord {
            slot: self.slot,
            generation: self.generation,
            listening: on,
        };
        fsutil::rewrite_in_place(&self.file, rec.render().as_bytes())
            .map_err(|e| context(e, format_args!("cannot update {}", self.path.display())))?;
        self.listening.store(on, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for PortLease {
    fn drop(&mut self) {
        // We still hold the lock, so the path still names our file (cleaners remove only
        // unlocked files): remove it, then the lock goes with the descriptor.
        fsutil::remove_if_same(&self.path, &self.file);
    }
}

/// What one scan of the directory found.
#[derive(Debug)]
struct Snapshot {
    /// Indexed by slot; `None` when slot-<n> does not exist.
    slots: Vec<Option<SlotState>>,
    leases: Vec<LiveLease>,
    /// Reports of live members (current generation only): (addr, slot, epoch, index).
    reports: Vec<(IpAddr, u8, u32, u32)>,
}

#[derive(Debug, Clone, Copy)]
struct SlotState {
    alive: bool,
    /// `None`: garbage contents.
    record: Option<SlotRecord>,
}

#[derive(Debug, Clone, Copy)]
struct LiveLease {
    space: u16,
    port: u16,
    addr: IpAddr,
    /// From the record; `None` when the record is garbage (the lease still blocks its port).
    record: Option<LeaseRecord>,
}

impl Snapshot {
    fn alive(&self, slot: u8) -> bool {
        matches!(
            self.slots.get(usize::from(slot)),
            Some(Some(SlotState { alive: true, .. }))
        )
    }

    fn live_generation(&self, slot: u8) -> Option<u64> {
        match self.slots.get(usize::from(slot))? {
            Some(SlotState {
                alive: true,
                record: Some(r),
            }) => Some(r.generation),
            _ => None,
        }
    }
}

impl Registry {
    /// Opens (creating if needed) the registry of this user and network namespace; see the
    /// crate docs for the location and the checks. Removes stale state if the registry
    /// lock is free.
    pub fn open() -> io::Result<Registry> {
        Self::open_in(&Self::default_base_dir())
    }

    /// The registry of the device on UDP `port`: [`Registry::open`]'s for
    /// the RoCEv2 port 4791, a `port-<n>` directory inside its base for any
    /// other (`SOFTRDMA_PORT`: another device). The base is checked first
    /// either way.
    pub fn open_for_port(port: u16) -> io::Result<Registry> {
        let r = Registry::open()?;
        if port == 4791 {
            return Ok(r);
        }
        Registry::open_in(&Self::default_base_dir().join(format!("port-{port}")))
    }

    /// The base directory [`Registry::open`] uses: `$XDG_RUNTIME_DIR/softrdma` when
    /// `XDG_RUNTIME_DIR` is an existing absolute directory owned by us, else
    /// `/tmp/softrdma-<uid>` (fixed, not `$TMPDIR`, so every process of the user agrees).
    pub fn default_base_dir() -> PathBuf {
        let uid = fsutil::euid();
        if let Some(xdg) = std::env::var_os("XDG_RUNTIME_DIR") {
            let xdg = PathBuf::from(xdg);
            if xdg.is_absolute()
                && fs::metadata(&xdg).is_ok_and(|md| md.is_dir() && md.uid() == uid)
            {
                return xdg.join("softrdma");
            }
        }
        PathBuf::from(format!("/tmp/softrdma-{uid}"))
    }

    /// Like [`Registry::open`] with an explicit base directory (whose parent must exist):
    /// `base` gets the same mode-0700 / owner / no-symlink treatment, and the namespace
    /// directory is created inside it.
    pub fn open_in(base: &Path) -> io::Result<Registry> {
        fsutil::ensure_private_dir(base)?;
        let ns = fs::metadata("/proc/self/ns/net").map_or_else(
            |_| "net-default".to_owned(),
            |md| format!("net-{}", md.ino()),
        );
        let dir = base.join(ns);
        fsutil::ensure_private_dir(&dir)?;
        let registry = Registry { dir };
        // Create the lock file up front, and clean what a crashed run left behind.
        if let Some(g) = registry.try_lock()? {
            registry.scan(Some(&g))?;
        }
        sweep_namespaces(base, &registry.dir);
        Ok(registry)
    }

    /// The per-namespace directory holding the registry's files.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes the registry lock (blocking until no other holder — in any process, or in
    /// this one through another guard — has it), for multi-step updates such as
    /// [`Registry::read_group`] + [`Registry::write_group`]. Released on drop.
    ///
    /// [`Registry::join`] and [`Registry::reserve_port`] take this lock themselves: calling
    /// them (or this) while this thread holds a guard fails with `EDEADLK`
    /// (`ErrorKind::Deadlock`) instead of waiting forever.
    pub fn lock(&self) -> io::Result<RegistryGuard<'_>> {
        not_held_here(&self.dir)?;
        let file = self
            .lock_file(libc::LOCK_EX)
            .map_err(|e| context(e, "cannot take the softrdma registry lock"))?
            .ok_or_else(|| io::Error::other("a blocking lock that did not block"))?;
        Ok(RegistryGuard::new(self, fsutil::LockedFile::new(file)))
    }

    /// The registry lock if it is free right now.
    fn try_lock(&self) -> io::Result<Option<RegistryGuard<'_>>> {
        not_held_here(&self.dir)?;
        Ok(self
            .lock_file(libc::LOCK_EX | libc::LOCK_NB)?
            .map(|file| RegistryGuard::new(self, fsutil::LockedFile::new(file))))
    }

    /// Opens the lock file and takes `op` on it (`None`: `LOCK_NB` and
    /// taken). A lock is good only on the file the directory still holds:
    /// another namespace's sweep ([`sweep_namespaces`]) may remove this
    /// directory, lock file and all, while we wait for the lock or between
    /// our open and our `flock` (a namespace's inode number, which names the
    /// directory, is reused after `ip netns del`). Then the directory is made
    /// again and the lock taken there: the sweep removed it only with no
    /// member in it, so nothing of ours was lost.
    fn lock_file(&self, op: libc::c_int) -> io::Result<Option<File>> {
        let path = self.dir.join(format::LOCK_NAME);
        for _ in 0..RELOCK_TRIES {
            let file = match fsutil::open_or_create(&path) {
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fsutil::ensure_private_dir(&self.dir)?;
                    continue;
                }
                r => r?,
            };
            if !fsutil::flock(&file, op)? {
                return Ok(None);
            }
            if fsutil::same_file(&file, &path) {
                return Ok(Some(file));
            }
            drop(file);
            fsutil::ensure_private_dir(&self.dir)?;
        }
        Err(io::Error::other(format!(
            "{} keeps being removed",
            self.dir.display()
        )))
    }

    fn check_guard(&self, g: &RegistryGuard<'_>) -> io::Result<()> {
        if g.registry.dir == self.dir {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "registry guard of {} used with registry {}",
                    g.registry.dir.display(),
                    self.dir.display()
                ),
            ))
        }
    }

    fn check_member(&self, m: &Member) -> io::Result<()> {
        if m.dir == self.dir {
            Ok(())
        } else {
            Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "member slot {} of {} used with registry {}",
                    m.slot,
                    m.dir.display(),
                    self.dir.display()
                ),
            ))
        }
    }

    /// Removes stale state now (see the crate docs) under a held registry lock.
    pub fn gc(&self, g: &RegistryGuard<'_>) -> io::Result<()> {
        self.check_guard(g)?;
        self.scan(Some(g)).map(drop)
    }

    /// Takes a free member slot and holds it for the life of the returned [`Member`].
    ///
    /// Choice among free slots: a slot never used before (lowest number first), else the
    /// one whose holder left longest ago. A slot whose holder died recently is thus reused
    /// last: peers may still be sending to the dead member's QPNs. (A death nobody had
    /// noticed is dated when a scan first sees it.) The new holder writes its
    /// generation (previous + 1), pid and start time into the slot file while holding it.
    ///
    /// Fails with [`io::ErrorKind::ResourceBusy`] when all 255 slots are held.
    pub fn join(&self) -> io::Result<Member> {
        let g = self.lock()?;
        let snap = self.scan(Some(&g))?;
        // (rank, freed_ms, slot): rank 0 = never used (or unreadable), 1 = used before.
        let mut candidates: Vec<(u8, u64, u8)> = (1..=MAX_SLOT)
            .filter_map(|n| match snap.slots[usize::from(n)] {
                None
                | Some(SlotState {
                    alive: false,
                    record: None,
                }) => Some((0, 0, n)),
                Some(SlotState { alive: true, .. }) => None,
                Some(SlotState {
                    alive: false,
                    record: Some(r),
                }) => Some((1, r.freed_ms, n)),
            })
            .collect();
        candidates.sort_unstable();
        for (_, _, n) in candidates {
            if let Some(member) = self.take_slot(&g, n)? {
                return Ok(member);
            }
        }
        Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!(
                "all {MAX_SLOT} member slots of the softrdma registry {} are held by live processes",
                self.dir.display()
            ),
        ))
    }

    /// Takes slot `n`, which the last scan found free. `Ok(None)`: unusable after all.
    fn take_slot(&self, _g: &RegistryGuard<'_>, n: u8) -> io::Result<Option<Member>> {
        let path = self.dir.join(format::slot_name(n));
        let mut rec = SlotRecord {
            generation: 1,
            pid: std::process::id(),
            taken_ms: now_ms(),
            freed_ms: 0,
        };
        let file = match fsutil::open_existing(&path, true) {
            Ok(file) => {
                // Free, but a prober may hold LOCK_SH for an instant.
                if !fsutil::lock_ex_patiently(&file)? {
                    return Ok(None);
                }
                let file = fsutil::LockedFile::new(file);
                if let Some(prev) = fsutil::read_record(&file).and_then(|t| SlotRecord::parse(&t)) {
                    rec.generation = prev.generation.saturating_add(1);
                }
                fsutil::rewrite_in_place(&file, rec.render().as_bytes())
                    .map_err(|e| context(e, format_args!("cannot write {}", path.display())))?;
                file
            }
            // First use: the file appears complete and already locked.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fsutil::write_atomically(&self.dir, &path, rec.render().as_bytes())?
            }
            // Not a regular file or unreadable: leave it alone, use another slot.
            Err(_) => return Ok(None),
        };
        Ok(Some(Member {
            dir: self.dir.clone(),
            slot: n,
            generation: rec.generation,
            pid: rec.pid,
            taken_ms: rec.taken_ms,
            file,
        }))
    }

    /// Whether slot `slot` is held by a live process, this one included (a probe with a
    /// non-blocking shared `flock` on the slot file; locks of separate open file
    /// descriptions conflict even within one process). Slot 0 is never alive.
    pub fn is_alive(&self, slot: u8) -> bool {
        slot != 0
            && matches!(
                fsutil::probe(&self.dir.join(format::slot_name(slot)), false),
                Probe::Alive(_)
            )
    }

    /// The generation recorded in slot `slot`'s file — the current holder's if the slot is
    /// alive, else the last holder's. `None` if never used or unreadable.
    pub fn generation(&self, slot: u8) -> Option<u64> {
        if slot == 0 {
            return None;
        }
        let file = fsutil::open_existing(&self.dir.join(format::slot_name(slot)), false).ok()?;
        let rec = SlotRecord::parse(&fsutil::read_record(&file)?)?;
        Some(rec.generation)
    }

    /// The generation of slot `slot`'s holder while the slot is held; `None` if it is free,
    /// never used, or its record cannot be read. One probe and, only for a held slot, one
    /// record read: for a caller that asks about the few slots it deals with, where
    /// [`Registry::members`] reads every slot file (up to [`MAX_SLOT`] of them, most
    /// free after a while, at four system calls each).
    pub fn live_generation(&self, slot: u8) -> Option<u64> {
        if slot == 0 {
            return None;
        }
        match fsutil::probe(&self.dir.join(format::slot_name(slot)), false) {
            Probe::Alive(file) => Some(SlotRecord::parse(&fsutil::read_record(&file)?)?.generation),
            Probe::Dead(_) | Probe::Missing => None,
        }
    }

    /// Live members, by slot. A live slot whose record cannot be read is left out.
    pub fn members(&self) -> io::Result<Vec<MemberInfo>> {
        let snap = self.snapshot()?;
        Ok((1..=MAX_SLOT)
            .filter_map(|n| match snap.slots[usize::from(n)] {
                Some(SlotState {
                    alive: true,
                    record: Some(r),
                }) => Some(MemberInfo {
                    slot: n,
                    generation: r.generation,
                    pid: r.pid,
                }),
                _ => None,
            })
            .collect())
    }

    /// Reserves rdma_cm port `port` in port space `space` (rdma_cm numbering: [`PS_TCP`],
    /// [`PS_UDP`], [`PS_IB`], [`PS_IPOIB`]) on `addr` for `member`, with `bind(2)`
    /// semantics: fails with `EADDRINUSE` if a live lease in the same space has the same
    /// port and an overlapping address ([`addrs_overlap`]: equal, or either one
    /// unspecified, across IPv4/IPv6).
    ///
    /// Port 0 picks an ephemeral port in [`EPHEMERAL_PORTS`] that no live lease of the
    /// space uses on any address (random start, then sequential); `EADDRNOTAVAIL` if none
    /// is left.
    ///
    /// The lease lives while the returned [`PortLease`] does (or until the process
    /// dies); it starts not listening.
    pub fn reserve_port(
        &self,
        member: &Member,
        space: u16,
        addr: IpAddr,
        port: u16,
    ) -> io::Result<PortLease> {
        self.check_member(member)?;
        let g = self.lock()?;
        let snap = self.scan(Some(&g))?;
        let same_space = snap.leases.iter().filter(|l| l.space == space);
        let port = if port == 0 {
            let used: HashSet<u16> = same_space.map(|l| l.port).collect();
            let (lo, hi) = (*EPHEMERAL_PORTS.start(), *EPHEMERAL_PORTS.end());
            let span = u32::from(hi - lo) + 1;
            let start = random_u64() % u64::from(span);
            (0..span)
                .map(|i| lo + ((start + u64::from(i)) % u64::from(span)) as u16)
                .find(|p| !used.contains(p))
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EADDRNOTAVAIL))?
        } else {
            let mut same_space = same_space;
            if same_space.any(|l| l.port == port && addrs_overlap(l.addr, addr)) {
                return Err(io::Error::from_raw_os_error(libc::EADDRINUSE));
            }
            port
        };
        let rec = LeaseRecord {
            slot: member.slot,
            generation: member.generation,
            listening: false,
        };
        let path = self.dir.join(format::lease_name(space, port, addr));
        // Renamed into place already locked: no instant where the lease looks dead.
        let file = fsutil::write_atomically(&self.dir, &path, rec.render().as_bytes())?;
        Ok(PortLease {
            path,
            file,
            space,
            addr,
            port,
            slot: member.slot,
            generation: member.generation,
            listening: AtomicBool::new(false),
        })
    }

    /// Live listening leases whose address overlaps `addr` (equal or either side
    /// unspecified, across families, as in [`addrs_overlap`]): `(space, port, slot)`,
    /// sorted. A CM REQ for service ID `(space << 16) | port` arriving on `addr` belongs
    /// to that slot.
    pub fn listeners(&self, addr: IpAddr) -> io::Result<Vec<(u16, u16, u8)>> {
        let snap = self.snapshot()?;
        let mut out: Vec<(u16, u16, u8)> = snap
            .leases
            .iter()
            .filter(|l| addrs_overlap(l.addr, addr))
            .filter_map(|l| {
                let r = l.record?;
                r.listening.then_some((l.space, l.port, r.slot))
            })
            .collect();
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// The slot of the member holding a live lease on `port` of port space
    /// `space` at an address overlapping `addr`, listening or not.
    pub fn lease_holder(&self, space: u16, port: u16, addr: IpAddr) -> io::Result<Option<u8>> {
        Ok(self
            .snapshot()?
            .leases
            .iter()
            .filter(|l| l.space == space && l.port == port && addrs_overlap(l.addr, addr))
            .find_map(|l| l.record.map(|r| r.slot)))
    }

    /// Whether a live lease holds `port` of port space `space` at an address
    /// overlapping `addr` (bound by some process of the host, listening or not).
    pub fn is_leased(&self, space: u16, port: u16, addr: IpAddr) -> io::Result<bool> {
        Ok(self
            .snapshot()?
            .leases
            .iter()
            .any(|l| l.space == space && l.port == port && addrs_overlap(l.addr, addr)))
    }

    /// The recorded state of the reuseport group bound to `addr` (exactly this address:
    /// `10.0.0.1` and `::ffff:10.0.0.1` are different sockets, hence different groups).
    /// Absent or unreadable: the empty state with epoch 0.
    pub fn read_group(&self, g: &RegistryGuard<'_>, addr: IpAddr) -> io::Result<GroupState> {
        self.check_guard(g)?;
        let path = self.dir.join(format::group_name(addr));
        match fsutil::open_existing(&path, false) {
            Ok(file) => Ok(fsutil::read_record(&file)
                .and_then(|t| format::parse_group(&t))
                .unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(GroupState::default()),
            Err(e) => Err(context(e, format_args!("cannot read {}", path.display()))),
        }
    }

    /// Records the state of the reuseport group bound to `addr` (atomically replaced).
    /// Slot 0 is rejected (`InvalidInput`).
    pub fn write_group(
        &self,
        g: &RegistryGuard<'_>,
        addr: IpAddr,
        s: &GroupState,
    ) -> io::Result<()> {
        self.check_guard(g)?;
        if s.members.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "group state names slot 0, which is never a member slot",
            ));
        }
        let path = self.dir.join(format::group_name(addr));
        fsutil::write_atomically(&self.dir, &path, format::render_group(s).as_bytes()).map(drop)
    }

    /// `member` reports that, probing for epoch `epoch`, it found its socket at group index
    /// `index` of the group bound to `addr`. Needs no registry lock: the report replaces
    /// this member's previous one for `addr` atomically.
    pub fn report_index(
        &self,
        member: &Member,
        addr: IpAddr,
        epoch: u32,
        index: u32,
    ) -> io::Result<()> {
        self.check_member(member)?;
        let path = self
            .dir
            .join(format::report_name(addr, member.slot, member.generation));
        let text = format::render_report(epoch, index);
        fsutil::write_atomically(&self.dir, &path, text.as_bytes()).map(drop)
    }

    /// Reports for `addr` and epoch `epoch` from live members (current holders of their
    /// slots only): `(slot, index)`, by slot.
    pub fn read_reports(&self, addr: IpAddr, epoch: u32) -> io::Result<Vec<(u8, u32)>> {
        let snap = self.snapshot()?;
        let mut out: Vec<(u8, u32)> = snap
            .reports
            .iter()
            .filter(|&&(a, _, e, _)| a == addr && e == epoch)
            .map(|&(_, slot, _, index)| (slot, index))
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Publishes `member`'s shared-memory inbox: peers attach to it through
    /// `/proc/<pid>/fd/<fd>`. Needs no registry lock (like a report).
    pub fn publish_inbox(&self, member: &Member, fd: i32) -> io::Result<()> {
        self.check_member(member)?;
        let path = self
            .dir
            .join(format::inbox_name(member.slot, member.generation));
        fsutil::write_atomically(&self.dir, &path, format::render_inbox(fd).as_bytes()).map(drop)
    }

    /// Where the holder of `slot` binds the socket other members forward
    /// datagrams to (`softrdma_udp::forward`). Each new holder replaces the
    /// name; it needs no registry lock.
    pub fn forward_path(&self, slot: u8) -> PathBuf {
        self.dir.join(format!("fwd-{slot}"))
    }

    /// The inbox the live holder of `slot` published, if any.
    pub fn inbox(&self, slot: u8) -> Option<InboxInfo> {
        if slot == 0 {
            return None;
        }
        let Probe::Alive(file) = fsutil::probe(&self.dir.join(format::slot_name(slot)), false)
        else {
            return None;
        };
        let rec = SlotRecord::parse(&fsutil::read_record(&file)?)?;
        let name = format::inbox_name(slot, rec.generation);
        let f = fsutil::open_existing(&self.dir.join(name), false).ok()?;
        let fd = format::parse_inbox(&fsutil::read_record(&f)?)?;
        Some(InboxInfo {
            generation: rec.generation,
            pid: rec.pid,
            fd,
        })
    }

    /// A scan that also cleans up if the registry lock happens to be free.
    fn snapshot(&self) -> io::Result<Snapshot> {
        match self.try_lock() {
            Ok(Some(g)) => self.scan(Some(&g)),
            _ => match self.scan(None) {
                // A sweep held the lock and removed the directory (it had no
                // member): read the new one, as `lock_file` would make it.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    fsutil::ensure_private_dir(&self.dir)?;
                    self.scan(None)
                }
                r => r,
            },
        }
    }

    /// Reads the directory: slot states, live leases, current reports. With the registry
    /// lock (`clean`), also dates unnoticed deaths of slot holders and removes stale
    /// files — safe because every file is created only under that lock (reports and
    /// group records: by names no cleaner would remove).
    fn scan(&self, clean: Option<&RegistryGuard<'_>>) -> io::Result<Snapshot> {
        let clean = clean.is_some();
        let mut names = Vec::new();
        let entries = fs::read_dir(&self.dir)
            .map_err(|e| context(e, format_args!("cannot list {}", self.dir.display())))?;
        for entry in entries.flatten() {
            if let Ok(name) = entry.file_name().into_string() {
                names.push(name);
            }
        }

        let mut slots: Vec<Option<SlotState>> = vec![None; usize::from(MAX_SLOT) + 1];
        let now = now_ms();
        for name in &names {
            let Some(n) = format::parse_slot_name(name) else {
                continue;
            };
            let probe = fsutil::probe(&self.dir.join(name), clean);
            let (alive, file): (bool, &File) = match &probe {
                Probe::Missing => continue,
                Probe::Alive(f) => (true, f),
                Probe::Dead(f) => (false, f),
            };
            let mut record = fsutil::read_record(file).and_then(|t| SlotRecord::parse(&t));
            if let Some(r) = record
                .as_mut()
                .filter(|r| clean && !alive && r.death_unrecorded())
            {
                // Its holder died without releasing it: date the death now, so the
                // slot is reused last. Nobody else writes a dead slot's file: takers
                // need the registry lock, which we hold.
                r.freed_ms = now.max(r.taken_ms);
                let _ = fsutil::rewrite_in_place(file, r.render().as_bytes());
            }
            slots[usize::from(n)] = Some(SlotState { alive, record });
        }
        let snap_slots = Snapshot {
            slots,
            leases: Vec::new(),
            reports: Vec::new(),
        };
        let mut leases = Vec::new();
        let mut reports = Vec::new();

        for name in &names {
            let path = self.dir.join(name);
            if name.starts_with(format::LEASE_PREFIX) {
                let key = format::parse_lease_name(name);
                match (fsutil::probe(&path, false), key) {
                    (Probe::Alive(file), Some((space, port, addr))) => leases.push(LiveLease {
                        space,
                        port,
                        addr,
                        record: fsutil::read_record(&file).and_then(|t| LeaseRecord::parse(&t)),
                    }),
                    // Dead lease, or a name we would never create.
                    (Probe::Dead(file), _) if clean => fsutil::remove_if_same(&path, &file),
                    _ => {}
                }
            } else if name.starts_with(format::REPORT_PREFIX) {
                let current = format::parse_report_name(name).filter(|&(_, slot, generation)| {
                    snap_slots.live_generation(slot) == Some(generation)
                });
                match current {
                    Some((addr, slot, _)) => {
                        let report = fsutil::open_existing(&path, false)
                            .ok()
                            .and_then(|f| fsutil::read_record(&f))
                            .and_then(|t| format::parse_report(&t));
                        if let Some((epoch, index)) = report {
                            reports.push((addr, slot, epoch, index));
                        }
                    }
                    // Its member is dead or was replaced: no one writes this name again
                    // (a new take bumps the generation, under the lock we hold).
                    None if clean => {
                        let _ = fs::remove_file(&path);
                    }
                    None => {}
                }
            } else if clean && name.starts_with(format::INBOX_PREFIX) {
                let current = format::parse_inbox_name(name).is_some_and(|(slot, generation)| {
                    snap_slots.live_generation(slot) == Some(generation)
                });
                // Dead or replaced members' inboxes are gone with them.
                if !current {
                    let _ = fs::remove_file(&path);
                }
            } else if clean && name.starts_with(format::GROUP_PREFIX) {
                self.clean_group(name, &path, &snap_slots);
            } else if clean && name.starts_with(fsutil::TEMP_PREFIX) {
                clean_temp(&path);
            }
        }
        Ok(Snapshot {
            leases,
            reports,
            ..snap_slots
        })
    }

    /// Under the registry lock: removes an unreadable group record, and empties one whose
    /// members are all dead (their sockets are closed, so the kernel group holds none of
    /// them). The epoch is kept so it keeps increasing.
    fn clean_group(&self, name: &str, path: &Path, snap: &Snapshot) {
        let state = fsutil::open_existing(path, false)
            .ok()
            .and_then(|f| fsutil::read_record(&f))
            .and_then(|t| format::parse_group(&t));
        match (format::parse_group_name(name), state) {
            (Some(_), Some(s)) => {
                // A group nobody is in any more is gone: its next member
                // starts a new one (epoch 0; the old members' reports died
                // with them).
                if s.members.iter().all(|&slot| !snap.alive(slot)) {
                    let _ = fs::remove_file(path);
                }
            }
            _ => {
                let _ = fs::remove_file(path);
            }
        }
    }
}

/// How many times [`Registry::lock_file`] makes a removed registry
/// directory again before it gives up: a sweep removes it once; removals
/// over and over are something else's doing.
const RELOCK_TRIES: usize = 8;

/// How long a namespace's registry must have been untouched before another
/// namespace's process may remove it (with no member alive): a process just
/// opening it creates files within milliseconds, which updates the time.
const IDLE_NAMESPACE: Duration = Duration::from_secs(60);

/// Removes the registries of other network namespaces (and of other UDP
/// ports' devices, `port-<n>/net-*`) that have no live member and were
/// untouched for [`IDLE_NAMESPACE`] (namespaces come and go: `ip netns del`
/// leaves nothing behind to tell, and a registry without members holds
/// nothing anyone still needs).
fn sweep_namespaces(base: &Path, own: &Path) {
    let Ok(entries) = fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let dir = e.path();
        let name = e.file_name();
        let name = name.to_str().unwrap_or("");
        let is_ns = name.starts_with("net-");
        // The devices of other UDP ports (`SOFTRDMA_PORT`) keep theirs one
        // level down.
        let is_port = name.starts_with("port-");
        let idle = e
            .metadata()
            .ok()
            .filter(|m| m.is_dir() && !m.file_type().is_symlink())
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age >= IDLE_NAMESPACE);
        if !idle || dir == own {
            continue;
        }
        if is_port {
            sweep_namespaces(&dir, own);
            // Fails unless it is empty now.
            let _ = fs::remove_dir(&dir);
            continue;
        }
        if !is_ns {
            continue;
        }
        let other = Registry { dir: dir.clone() };
        let Ok(Some(g)) = other.try_lock() else {
            continue;
        };
        if other.members().is_ok_and(|m| m.is_empty()) {
            let _ = fs::remove_dir_all(&dir);
        }
        drop(g);
    }
}

/// Under the registry lock: removes a temporary file nobody holds once it is old enough
/// that its writer cannot be between creating and locking it.
fn clean_temp(path: &Path) {
    let Probe::Dead(file) = fsutil::probe(path, false) else {
        return;
    };
    let old = file
        .metadata()
        .and_then(|md| md.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age > TEMP_MAX_AGE);
    if old {
        fsutil::remove_if_same(path, &file);
    }
}

/// A random number without a dependency: std's `RandomState` is seeded from the OS.
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ms());
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests;
