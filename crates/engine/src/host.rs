//! The host device: this process as one member of the host's `softrdma0`.
//!
//! Every process of a user on a host (one network namespace) binds its own
//! UDP socket to the device address and port with `SO_REUSEPORT`; the
//! sockets form one kernel reuseport group, and a classic BPF program
//! (`softrdma_udp::steer`) hands each datagram to the socket of the process
//! owning its destination: QPNs carry the owner's member slot in bits 23..16,
//! CM answers carry it in their comm ID / TID, and REQs go to the process
//! listening on their service ID. Only what a stale table delivers to the
//! wrong member is handed on by it (`engine/forward.rs`).
//!
//! The registry (`softrdma_host`, in the user's runtime directory) gives out
//! member slots and rdma_cm ports and records which slot sits at which index
//! of the group. Binds and table updates happen under its lock, so the index
//! of a new socket is known (the kernel appends it). A member that dies
//! leaves a hole the kernel fills with the last socket, at a moment nobody
//! chose: a member that receives a packet for another slot, or finds a dead
//! member in the table, *reconciles* — it sends one probe datagram per index
//! (the program steers a probe by the index it names), every member reports
//! the index its probe arrived at, and the table is rebuilt from the reports.

use softrdma_cm::{CmError, IdHandle, PortAuthority};
use softrdma_host::{GroupState, Member, PortLease, Registry};
use softrdma_udp::RoceSocket;
use softrdma_udp::fork_private::ForkPrivate;
use softrdma_udp::steer::{SteerProgram, SteerTable, probe_datagram};
use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a reconciler waits for every live member to report its index.
/// Members report from their progress thread as soon as the probe arrives
/// (one epoll wake-up, tens of µs); a stopped process (SIGSTOP) must not
/// hold the others' table hostage for long. Measured by rdmalib's
/// tests/mesh.rs (4 members, 28 connections busy): the table is rebuilt
/// 20–30 ms after a SIGKILL, most of it the first misrouted packet's wait.
const REPORT_WAIT: Duration = Duration::from_millis(300);

/// The least time between two reconciliations started by one member: a burst
/// of misrouted packets (a window in flight toward a dead member) triggers
/// one, not one per packet; longer than a round (a few ms, tests/mesh.rs).
const RECONCILE_GAP: Duration = Duration::from_millis(50);

/// This process's membership of the host device's group at one address
/// (one per host address; all of a process's share its registry and slot).
#[derive(Debug)]
pub(crate) struct HostMember {
    registry: Arc<Registry>,
    /// The slot file's descriptor is not a forked child's to keep (the
    /// slot would live on with it); first, so it is forgotten before the
    /// file closes.
    _fork_private: Arc<ForkPrivate>,
    member: Arc<Member>,
    /// The group's address (the device address and UDP port).
    addr: SocketAddr,
    reconciling: AtomicBool,
    last_reconcile: Mutex<Option<Instant>>,
    listeners_changed: Arc<AtomicBool>,
    /// The round and index of the last probe answered.
    last_probe: Mutex<Option<(u32, u32)>>,
}

impl HostMember {
    /// Joins the host device at `addr`: takes a member slot, binds the
    /// socket with `open` (under the registry lock, so it lands at the end
    /// of the group) and steers the group's traffic to it. Returns whether
    /// the table could not be checked (a member died since the last update):
    /// then [`HostMember::reconcile`] must run once the progress thread is up.
    pub(crate) fn join(
        registry: Registry,
        addr: SocketAddr,
        open: impl FnOnce() -> io::Result<RoceSocket>,
    ) -> io::Result<(HostMember, RoceSocket, bool)> {
        let registry = Arc::new(registry);
        let member = Arc::new(registry.join()?);
        let private = Arc::new(ForkPrivate::new(member.as_raw_fd()));
        let changed = Arc::new(AtomicBool::new(false));
        HostMember::join_group(registry, private, member, changed, addr, open)
    }

    /// Joins the group at another address of the host with the same member
    /// slot (one process, one slot, one group per address): like
    /// [`HostMember::join`], sharing the registry, the slot and the note
    /// that a listener appeared.
    pub(crate) fn join_more(
        &self,
        addr: SocketAddr,
        open: impl FnOnce() -> io::Result<RoceSocket>,
    ) -> io::Result<(HostMember, RoceSocket, bool)> {
        HostMember::join_group(
            Arc::clone(&self.registry),
            Arc::clone(&self._fork_private),
            Arc::clone(&self.member),
            Arc::clone(&self.listeners_changed),
            addr,
            open,
        )
    }

    fn join_group(
        registry: Arc<Registry>,
        fork_private: Arc<ForkPrivate>,
        member: Arc<Member>,
        listeners_changed: Arc<AtomicBool>,
        addr: SocketAddr,
        open: impl FnOnce() -> io::Result<RoceSocket>,
    ) -> io::Result<(HostMember, RoceSocket, bool)> {
        let me = HostMember {
            registry,
            _fork_private: fork_private,
            member,
            addr,
            reconciling: AtomicBool::new(false),
            last_reconcile: Mutex::new(None),
            listeners_changed,
            last_probe: Mutex::new(None),
        };
        let g = me.registry.lock()?;
        let socket = open()?;
        let mut state = me.registry.read_group(&g, addr.ip())?;
        // Our slot still listed is a dead holder's socket (ours is not
        // bound yet): the kernel moved sockets since, as for any death.
        let stale = state
            .members
            .iter()
            .any(|&s| s == me.slot() || !me.registry.is_alive(s));
        state.members.retain(|&s| s != me.slot());
        state.members.push(me.slot());
        // A new epoch: a reconciliation in flight gives way. If a member died
        // unseen, indices are unknown until the next one; meanwhile the kernel
        // hashes what the program cannot place.
        state.epoch = state.epoch.wrapping_add(1);
        me.registry.write_group(&g, addr.ip(), &state)?;
        me.attach(&socket, &state)?;
        drop(g);
        Ok((me, socket, stale))
    }

    /// This process's member slot (1..=255).
    pub(crate) fn slot(&self) -> u8 {
        self.member.slot()
    }

    /// The group's address.
    pub(crate) fn ip(&self) -> std::net::IpAddr {
        self.addr.ip()
    }

    /// This process's incarnation of its slot.
    pub(crate) fn generation(&self) -> u64 {
        self.member.generation()
    }

    /// Publishes this process's shared-memory inbox (`engine/shm.rs`).
    pub(crate) fn publish_inbox(&self, fd: i32) -> io::Result<()> {
        self.registry.publish_inbox(&self.member, fd)
    }

    /// The registry.
    pub(crate) fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// A port authority for this process's CM (host-wide rdma_cm ports).
    pub(crate) fn port_authority(&self) -> HostPorts {
        HostPorts {
            registry: Arc::clone(&self.registry),
            member: Arc::clone(&self.member),
            leases: HashMap::new(),
            listeners_changed: Arc::clone(&self.listeners_changed),
        }
    }

    /// Which members serve which management classes (libibumad agents),
    /// host-wide.
    pub(crate) fn mad_classes(&self) -> HostMadClasses {
        HostMadClasses {
            registry: Arc::clone(&self.registry),
            member: Arc::clone(&self.member),
        }
    }

    /// Takes the note that a listener appeared since the last call: the
    /// engine then re-attaches the program (outside its own lock: the
    /// registry lock may wait on another member's reconciliation, which
    /// waits for this process's progress thread).
    pub(crate) fn take_listeners_changed(&self) -> bool {
        self.listeners_changed.swap(false, Ordering::AcqRel)
    }

    /// The steering table for `state`: each live member's index, listeners
    /// by service ID, and index 0 for the rest.
    fn table(&self, state: &GroupState) -> io::Result<SteerTable> {
        let members = state
            .members
            .iter()
            .enumerate()
            .map(|(i, &s)| (s, i as u32))
            .collect();
        let listeners = self
            .registry
            .listeners(self.addr.ip())?
            .into_iter()
            .map(|(space, port, slot)| (softrdma_wire::cm::service_id(space, port), slot))
            .collect();
        Ok(SteerTable {
            members,
            listeners,
            fallback: 0,
        })
    }

    fn attach(&self, socket: &RoceSocket, state: &GroupState) -> io::Result<()> {
        if state.members.len() < 2 {
            // Alone, the socket gets everything anyway: no program to run per
            // packet until a second member joins and attaches one.
            return Ok(());
        }
        let prog = SteerProgram::new(&self.table(state)?)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
        socket.attach_steering(&prog)
    }

    /// Re-attaches the program after the listeners changed.
    pub(crate) fn refresh(&self, socket: &RoceSocket) -> io::Result<()> {
        let g = self.registry.lock()?;
        let state = self.registry.read_group(&g, self.addr.ip())?;
        self.attach(socket, &state)
    }

    /// Leaves the group on the way out: attaches the table that says where
    /// the last socket moves when ours closes, and closes ours at once, both
    /// under the registry lock (the socket is unusable after this).
    pub(crate) fn leave(&self, socket: &RoceSocket) {
        let Ok(g) = self.registry.lock() else { return };
        let Ok(mut state) = self.registry.read_group(&g, self.addr.ip()) else {
            return;
        };
        if let Some(i) = state.members.iter().position(|&s| s == self.slot()) {
            state.remove_index(i);
            state.epoch = state.epoch.wrapping_add(1);
            let _ = self.registry.write_group(&g, self.addr.ip(), &state);
            if !state.members.is_empty() {
                let _ = self.attach(socket, &state);
            }
            let _ = socket.close_now();
        }
        drop(g);
    }

    /// A probe arrived: tell the reconciler which index it reached us at.
    /// A probe for an index past the group's end is hashed to any member,
    /// so of two indices of one round the smaller is this socket's.
    pub(crate) fn on_probe(&self, epoch: u32, index: u32) {
        let mut last = self.last_probe.lock().unwrap_or_else(|p| p.into_inner());
        if !probe_news(*last, epoch, index) {
            return;
        }
        *last = Some((epoch, index));
        let _ = self
            .registry
            .report_index(&self.member, self.addr.ip(), epoch, index);
    }

    /// Whether a reconciliation should start now (none running, none lately).
    pub(crate) fn should_reconcile(&self) -> bool {
        let mut last = self
            .last_reconcile
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        if !reconcile_due(*last, now) || self.reconciling.swap(true, Ordering::AcqRel) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Finds which member sits at which index of the group and re-attaches
    /// the program. Runs off the progress thread (it waits for this
    /// process's own report too), after [`HostMember::should_reconcile`].
    pub(crate) fn reconcile(&self, socket: &RoceSocket) -> io::Result<()> {
        let mut r = Ok(Round::Done);
        for _ in 0..MAX_ROUNDS {
            r = self.reconcile_locked(socket);
            if !matches!(r, Ok(Round::Again)) {
                break;
            }
        }
        self.reconcile_done();
        r.map(drop)
    }

    /// A reconciliation ended (or could not start).
    pub(crate) fn reconcile_done(&self) {
        self.reconciling.store(false, Ordering::Release);
    }

    /// One round. Probes go out under the registry lock; the answers are
    /// awaited without it (an application thread of a member may wait for
    /// the lock while its progress thread has yet to answer). A join or
    /// leave meanwhile changes the epoch: this round gives way to it and
    /// asks for another. So does a round a live member did not answer in
    /// time (its table is applied; that member's traffic falls back to
    /// index 0 until the next round).
    fn reconcile_locked(&self, socket: &RoceSocket) -> io::Result<Round> {
        let (epoch, n, expect) = {
            let g = self.registry.lock()?;
            let mut state = self.registry.read_group(&g, self.addr.ip())?;
            let live: Vec<u8> = self
                .registry
                .members()?
                .into_iter()
                .map(|m| m.slot)
                .collect();
            let expect: Vec<u8> = state
                .members
                .iter()
                .copied()
                .filter(|s| live.contains(s))
                .collect();
            state.epoch = state.epoch.wrapping_add(1);
            if expect.iter().all(|&s| s == self.slot()) {
                // Alone in the group: every datagram reaches this socket,
                // whatever the program says.
                state.members = vec![self.slot()];
                self.registry.write_group(&g, self.addr.ip(), &state)?;
                return self.attach(socket, &state).map(|()| Round::Done);
            }
            self.registry.write_group(&g, self.addr.ip(), &state)?;
            // The group holds at most the sockets the table listed (joins
            // are recorded under this lock; deaths only shrink it).
            let n = state.members.len() as u32;
            for i in 0..n {
                let probe = probe_datagram(state.epoch, i);
                let t = softrdma_udp::Transmit {
                    dst: self.addr,
                    payload: &probe,
                };
                socket.send_batch(&[t])?;
            }
            (state.epoch, n, expect)
        };
        let deadline = Instant::now() + REPORT_WAIT;
        let reports = loop {
            let r = self.registry.read_reports(self.addr.ip(), epoch)?;
            if expect.iter().all(|s| r.iter().any(|(rs, _)| rs == s)) || Instant::now() > deadline {
                break r;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let g = self.registry.lock()?;
        let mut state = self.registry.read_group(&g, self.addr.ip())?;
        if state.epoch != epoch {
            return Ok(Round::Again);
        }
        state.members = table_from_reports(n as usize, &reports);
        self.registry.write_group(&g, self.addr.ip(), &state)?;
        self.attach(socket, &state)?;
        let missing = expect
            .iter()
            .any(|s| !reports.iter().any(|(rs, _)| rs == s) && self.registry.is_alive(*s));
        Ok(if missing { Round::Again } else { Round::Done })
    }
}

/// How a reconciliation round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    Done,
    /// It gave way to a join or leave, or a live member did not answer.
    Again,
}

/// Rounds one reconciliation runs at most. In pyverbs' rdmacm tests (two
/// members joining at once next to dead ones) a round gave way to the other
/// joiner's epoch, or missed a member busy starting up, and the one after
/// it completed; a stopped member must not keep the thread going.
const MAX_ROUNDS: usize = 3;

/// Host-wide rdma_cm ports: each bound id holds a lease in the registry.
#[derive(Debug)]
pub(crate) struct HostPorts {
    registry: Arc<Registry>,
    member: Arc<Member>,
    /// Each lease with its registration as fork-private (a child keeping
    /// the lease file would keep the port taken; dropped first).
    leases: HashMap<IdHandle, (ForkPrivate, PortLease)>,
    /// Set when a listener appears: REQs for it must be steered here.
    listeners_changed: Arc<AtomicBool>,
}

impl PortAuthority for HostPorts {
    fn reserve(&mut self, id: IdHandle, ps: u16, addr: SocketAddr) -> Result<u16, CmError> {
        let l = self
            .registry
            .reserve_port(&self.member, ps, addr.ip(), addr.port())
            .map_err(|e| match e.raw_os_error() {
                Some(libc::EADDRINUSE) => CmError::AddrInUse(addr),
                _ => CmError::Invalid(format!("cannot reserve port {addr}: {e}")),
            })?;
        let port = l.port();
        self.leases.insert(id, (ForkPrivate::new(l.as_raw_fd()), l));
        Ok(port)
    }

    fn listen(&mut self, id: IdHandle) -> Result<(), CmError> {
        if let Some((_, l)) = self.leases.get(&id) {
            l.set_listening(true)
                .map_err(|e| CmError::Invalid(format!("cannot listen: {e}")))?;
            self.listeners_changed.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn release(&mut self, id: IdHandle) {
        self.leases.remove(&id);
    }

    fn bound_on_host(&self, ps: u16, port: u16, addr: std::net::IpAddr) -> bool {
        self.registry.is_leased(ps, port, addr).unwrap_or(false)
    }
}

/// Whether a reconciliation may start at `now`, the last one having started
/// at `last`: at most one per [`RECONCILE_GAP`].
fn reconcile_due(last: Option<Instant>, now: Instant) -> bool {
    last.is_none_or(|t| now.saturating_duration_since(t) >= RECONCILE_GAP)
}

/// Whether a probe for (`epoch`, `index`) says more than the last one
/// answered: a new round, or a smaller index of the same round (a probe past
/// the group's end is hashed to any member; a socket's own index is the
/// smallest it sees).
fn probe_news(last: Option<(u32, u32)>, epoch: u32, index: u32) -> bool {
    !last.is_some_and(|(e, i)| e == epoch && i <= index)
}

/// The group's table from one round's reports: the slot at each of the `n`
/// probed indices. Indices nobody answered for have no socket (or a stopped
/// one's): 0, which steers like an unknown slot (to the fallback); trailing
/// ones are gone for sure.
fn table_from_reports(n: usize, reports: &[(u8, u32)]) -> Vec<u8> {
    let mut members = vec![0u8; n];
    for &(slot, index) in reports {
        if let Some(m) = members.get_mut(index as usize) {
            *m = slot;
        }
    }
    while members.last() == Some(&0) {
        members.pop();
    }
    members
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_follows_the_reports() {
        // Four sockets; the one at index 1 died and the last moved there.
        assert_eq!(table_from_reports(4, &[(3, 0), (9, 1), (5, 2)]), [3, 9, 5]);
        // A stopped member did not answer: its index falls back.
        assert_eq!(table_from_reports(3, &[(3, 0), (5, 2)]), [3, 0, 5]);
        // Reports beyond the probed range are ignored.
        assert_eq!(table_from_reports(2, &[(3, 0), (4, 7)]), [3]);
        assert!(table_from_reports(3, &[]).is_empty());
    }

    #[test]
    fn a_member_answers_with_its_smallest_index_of_a_round() {
        assert!(probe_news(None, 1, 3));
        // Index 5 was past the end and hashed here; 2 is ours.
        assert!(probe_news(Some((1, 5)), 1, 2));
        assert!(!probe_news(Some((1, 2)), 1, 5));
        assert!(!probe_news(Some((1, 2)), 1, 2));
        // A new round starts over.
        assert!(probe_news(Some((1, 2)), 2, 7));
    }

    #[test]
    fn reconciliations_are_spaced() {
        let t0 = Instant::now();
        assert!(reconcile_due(None, t0));
        assert!(!reconcile_due(Some(t0), t0 + Duration::from_millis(49)));
        assert!(reconcile_due(Some(t0), t0 + RECONCILE_GAP));
        // A clock read before the last start (another thread) is not due.
        assert!(!reconcile_due(Some(t0 + Duration::from_millis(1)), t0));
    }
}

/// The host's record of MAD class servers: one lease per (class, version)
/// in [`softrdma_host::PS_MAD_CLASS`], held by the member whose agent
/// serves it.
#[derive(Debug)]
pub(crate) struct HostMadClasses {
    registry: Arc<Registry>,
    member: Arc<Member>,
}

fn mad_class_port(class: u8, version: u8) -> u16 {
    u16::from(class) << 8 | u16::from(version)
}

const ANY: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED);

impl crate::mad::MadServers for HostMadClasses {
    fn claim(&self, class: u8, version: u8) -> Result<crate::mad::Claim, i32> {
        let port = mad_class_port(class, version);
        match self
            .registry
            .reserve_port(&self.member, softrdma_host::PS_MAD_CLASS, ANY, port)
        {
            // Fork-private, as the CM's leases: a child must not keep it.
            Ok(l) => Ok(crate::mad::Claim::new((ForkPrivate::new(l.as_raw_fd()), l))),
            Err(e) if e.raw_os_error() == Some(libc::EADDRINUSE) => Err(libc::EINVAL),
            Err(e) => Err(e.raw_os_error().unwrap_or(libc::EIO)),
        }
    }

    fn holder(&self, class: u8, version: u8) -> Option<u8> {
        let port = mad_class_port(class, version);
        self.registry
            .lease_holder(softrdma_host::PS_MAD_CLASS, port, ANY)
            .ok()
            .flatten()
            .filter(|&s| s != self.member.slot())
    }
}
