//! Peer copy on the same-host path (issue 17, step 2; the transport's
//! `qp/peer.rs`): large SENDs, WRITEs and READs of an RC QP whose peer sits behind
//! a lane travel as one packet naming memory ranges, and the owner of the
//! destination copies them from the other process with `process_vm_readv`.
//!
//! - **Which QPs.** Decided when a QP gets its destination (`ibv_modify_qp`
//!   with the address vector and destination QPN, or the CM connecting it):
//!   its packets would take a lane, and this process can copy from the
//!   peer's memory (`softrdma_shm::can_copy_from`, which opens the peer's
//!   inbox as a link does; the peer's ability to copy from ours is assumed
//!   the same, which holds unless Yama restricts ptrace, and then peer copy
//!   is off). `SOFTRDMA_PEER_COPY=0` turns it off.
//! - **Which process.** A lane datagram's ranges are read from the process
//!   holding the lane's slot in the registry, only while that holder's
//!   incarnation is the one the lane records (`Inbox::lane_owner`), never a
//!   pid the packet names.
//! - **Never on a wire.** A peer-copy packet that cannot take a lane (its
//!   link went down) is dropped, not sent over UDP: RC retransmits it, and
//!   a peer that stays gone ends in `IBV_WC_RETRY_EXC_ERR`.

use super::ShmPath;
use crate::engine::Shared;
use crate::memory::HostMemory;
use softrdma_shm::{CopyError, Range};
use softrdma_transport::{AtomicOp, GSI_QPN, MULTICAST_QPN, Memory, PeerCopyError, PeerSeg};
use softrdma_udp::steer::member_slot;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the peer copies this process did (`SOFTRDMA_STATS`).
#[derive(Debug, Default)]
pub(crate) struct PeerCopyStats {
    pub(crate) copies: AtomicU64,
    pub(crate) bytes: AtomicU64,
    pub(crate) failed: AtomicU64,
    /// Peer-copy packets dropped because no lane could take them.
    pub(crate) dropped: AtomicU64,
}

/// Whether a datagram is a peer-copy packet (`softrdma_wire::peer`).
pub(in crate::engine) fn is_peer_packet(pkt: &[u8]) -> bool {
    pkt.first()
        .and_then(|&op| softrdma_wire::Opcode(op).info())
        .is_some_and(|i| i.peer)
}

/// Whether this process may use peer copy at all: not where Yama limits
/// ptrace (`ptrace_scope` ≥ 1 lets only ancestors copy, so two peers'
/// rights could differ).
pub(super) fn allowed() -> bool {
    let off = std::env::var("SOFTRDMA_PEER_COPY").is_ok_and(|v| v == "0");
    let yama = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim().to_owned())
        .unwrap_or_else(|_| "0".to_owned());
    !off && yama == "0"
}

/// The memory a lane datagram is handled with: this process's, plus copies
/// from the process that pushed it.
pub(in crate::engine) struct LaneMemory<'a> {
    pub(in crate::engine) shm: &'a ShmPath,
    pub(in crate::engine) slot: u8,
}

impl Memory for LaneMemory<'_> {
    fn read(&mut self, addr: u64, dst: &mut [u8]) {
        HostMemory.read(addr, dst);
    }

    fn write(&mut self, addr: u64, src: &[u8]) {
        HostMemory.write(addr, src);
    }

    fn atomic(&mut self, addr: u64, op: AtomicOp) -> u64 {
        HostMemory.atomic(addr, op)
    }

    fn read_peer(&mut self, src: &[PeerSeg], dst: &[PeerSeg]) -> Result<(), PeerCopyError> {
        let stats = &self.shm.peer_stats;
        let Some(pid) = self.shm.producer_pid(self.slot) else {
            stats.failed.fetch_add(1, Ordering::Relaxed);
            return Err(PeerCopyError::Gone);
        };
        let range = |s: &PeerSeg| Range {
            addr: s.addr,
            len: u64::from(s.len),
        };
        let remote: Vec<Range> = src.iter().map(range).collect();
        let local: Vec<Range> = dst.iter().map(range).collect();
        // SAFETY: the transport checked every `dst` range against the MR
        // table (key, PD, rights, bounds) under the endpoint lock, which this
        // call runs under and deregistration takes; registered memory stays
        // allocated until its deregistration (the verbs contract), and the
        // engine holds no Rust reference into it.
        let r = unsafe { softrdma_shm::read_from(pid, &remote, &local) };
        match r {
            Ok(()) => {
                stats.copies.fetch_add(1, Ordering::Relaxed);
                let n: u64 = local.iter().map(|l| l.len).sum();
                stats.bytes.fetch_add(n, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
                if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                    eprintln!("softrdma: peer copy from pid {pid} failed: {e:?}");
                }
                Err(match e {
                    CopyError::Gone => PeerCopyError::Gone,
                    CopyError::Denied => PeerCopyError::Denied,
                    CopyError::Fault | CopyError::Invalid | CopyError::Other(_) => {
                        PeerCopyError::Fault
                    }
                })
            }
        }
    }
}

impl ShmPath {
    /// The pid of the process that pushes into lane `slot`: the registry's
    /// holder of the slot, if its incarnation is the lane's (cached per
    /// incarnation; a file read when it changes).
    fn producer_pid(&self, slot: u8) -> Option<u32> {
        let owner = self.inbox.lane_owner(slot);
        if owner == 0 {
            return None;
        }
        let mut cache = self.producers.lock().unwrap_or_else(|p| p.into_inner());
        let entry = &mut cache[usize::from(slot)];
        if entry.0 != owner {
            let info = self.registry.inbox(slot)?;
            if info.generation != owner {
                return None;
            }
            *entry = (owner, info.pid);
        }
        Some(entry.1)
    }
}

impl ShmPath {
    /// Whether QPs may use peer copy toward QP `dest_qpn` at an address
    /// that is (`local`) or is not this host's: its datagrams take a lane
    /// (a member's QPN at a local address), and this process can copy from
    /// the member's memory (`can_copy_from`, probed once per incarnation of
    /// the slot). Registry file reads; no engine lock.
    pub(in crate::engine) fn peer_copy_to(&self, local: bool, dest_qpn: u32) -> bool {
        let slot = member_slot(dest_qpn);
        let member = dest_qpn != GSI_QPN && dest_qpn != MULTICAST_QPN && slot != 0;
        if !(self.peer_copy && local && member) {
            return false;
        }
        let Some(info) = self.registry.inbox(slot) else {
            return false;
        };
        let mut cache = self.copyable.lock().unwrap_or_else(|p| p.into_inner());
        let entry = &mut cache[usize::from(slot)];
        if entry.0 != info.generation {
            *entry = (
                info.generation,
                softrdma_shm::can_copy_from(info.pid, info.fd),
            );
        }
        entry.1
    }
}

impl crate::cm::PeerCopyPolicy for ShmPath {
    fn peer_copy(&self, local: bool, dest_qpn: u32) -> bool {
        let ok = self.peer_copy_to(local, dest_qpn);
        debug_note(dest_qpn, ok);
        ok
    }
}

fn debug_note(dest_qpn: u32, ok: bool) {
    if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
        let what = if ok {
            "peer copy for large SENDs, WRITEs and READs"
        } else {
            "no peer copy"
        };
        eprintln!("softrdma: QP to QPN {dest_qpn:#x}: {what}");
    }
}

impl Shared {
    /// Whether an RC QP whose destination is QP `dest_qpn` at `dest_ip` may
    /// use peer copy (`ibv_modify_qp`; see [`ShmPath::peer_copy_to`]).
    pub(in crate::engine) fn peer_copy_to(&self, dest_ip: IpAddr, dest_qpn: u32) -> bool {
        let Some(shm) = &self.shm else {
            return false;
        };
        let local = dest_ip.to_canonical().is_loopback() || self.sockets().has(dest_ip);
        crate::cm::PeerCopyPolicy::peer_copy(shm, local, dest_qpn)
    }

    /// What the CM asks when it connects a QP (none without the path).
    pub(in crate::engine) fn peer_copy_policy(&self) -> Option<&dyn crate::cm::PeerCopyPolicy> {
        self.shm
            .as_ref()
            .map(|s| s as &dyn crate::cm::PeerCopyPolicy)
    }
}
