//! General Services MADs on QP1 other than the CM's: the agents programs
//! register through libibumad (`umad_register`), the ports they read
//! (`umad_open_port`'s descriptor), and the device's own Performance
//! Management agent (PortCounters, PortCountersExtended).
//!
//! Routing follows the kernel's MAD layer (`ib_mad.c`): a request goes to
//! the agent registered for its class, version and method (for vendor
//! classes 0x30-0x4F also its OUI); a response goes to the agent whose
//! high TID it carries. The high 32 bits of a request's TID are the
//! sender's agent (`slot << 24 | agent id`): the slot lets the host
//! device's steering bring the answer to this process
//! (`softrdma_udp::steer::qp1_answer_slot`), the id to the agent. A request
//! sent with a timeout is sent again until answered or out of retries, then
//! comes back to its agent with status `ETIMEDOUT`, as from `ib_umad`.

use crate::channel::EventQueue;
use softrdma_transport::Instant;
use softrdma_wire::mad::{MAD_LEN, MadHdr, method};
use softrdma_wire::pma;

mod pma_agent;
use pma_agent::pma_answer;
pub(crate) use pma_agent::pma_counters;
use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

/// A MAD as it travels: always 256 bytes on QP1.
pub type Mad = [u8; MAD_LEN];

/// What a port hands its reader (`struct ib_user_mad` without the buffer).
#[derive(Debug, Clone)]
pub struct MadRecv {
    /// The agent it is for.
    pub agent: u32,
    /// 0, or `ETIMEDOUT` for a request of ours that got no answer (then
    /// `mad` is that request and `peer` its destination).
    pub status: u32,
    /// The address it came from (or went to).
    pub peer: IpAddr,
    /// The MAD.
    pub mad: Box<Mad>,
}

/// One `umad_open_port` descriptor: an eventfd that counts queued MADs.
#[derive(Debug)]
pub struct MadPort {
    queue: EventQueue<MadRecv>,
}

impl MadPort {
    /// A new port with nothing queued.
    pub fn new() -> io::Result<MadPort> {
        Ok(MadPort {
            queue: EventQueue::new(false)?,
        })
    }

    fn push(&self, r: MadRecv) {
        self.queue.push(r);
    }

    /// Waits up to `timeout` (`None`: forever) for a MAD to be queued.
    /// `Ok(false)`: none came in time.
    pub fn wait(&self, timeout: Option<Duration>) -> io::Result<bool> {
        self.queue.efd().wait_readable(timeout)
    }

    /// The oldest queued MAD, if `fits` accepts its length (else it stays
    /// queued and `Err(len)` says how long it is).
    pub fn take(&self, fits: impl FnOnce(usize) -> bool) -> Option<Result<MadRecv, usize>> {
        self.queue
            .pop_if(|_| fits(MAD_LEN))
            .map(|r| r.map_err(|()| MAD_LEN))
    }
}

impl AsRawFd for MadPort {
    fn as_raw_fd(&self) -> RawFd {
        self.queue.as_raw_fd()
    }
}

/// What an agent takes (`umad_register`, `umad_register_oui`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MadRegistration {
    /// Management class.
    pub class: u8,
    /// Class version.
    pub version: u8,
    /// The request methods it serves (bit n: method n); 0 for a client
    /// that only sends requests and reads their answers.
    pub methods: u128,
    /// The OUI of a vendor class 0x30-0x4F.
    pub oui: Option<[u8; 3]>,
}

/// Why a MAD operation failed, as an errno.
pub type Errno = i32;

#[derive(Debug)]
struct Agent {
    reg: MadRegistration,
    port: Arc<MadPort>,
}

/// A request of ours awaiting its answer.
#[derive(Debug)]
struct Outstanding {
    agent: u32,
    tid: u64,
    src: IpAddr,
    dst: IpAddr,
    mad: Box<Mad>,
    timeout: Duration,
    retries: u32,
    deadline: Instant,
}

/// Who serves which management class on the other processes of the host
/// device (`host.rs`: leases in the registry).
pub(crate) trait MadServers: Send + std::fmt::Debug {
    /// Records that this process serves `(class, version)`; the record
    /// lasts while the returned value lives. `EINVAL` if another process of
    /// the host serves it.
    fn claim(&self, class: u8, version: u8) -> Result<Claim, Errno>;
    /// The member slot of the other process serving `(class, version)`.
    fn holder(&self, class: u8, version: u8) -> Option<u8>;
}

/// A MAD to frame and send: (source address, destination, MAD).
pub(crate) type MadOut = (IpAddr, IpAddr, Box<Mad>);

/// The agents of this process and its requests in flight (behind the
/// engine lock).
#[derive(Debug)]
pub(crate) struct MadAgents {
    slot: u8,
    next: u32,
    agents: HashMap<u32, Agent>,
    outstanding: Vec<Outstanding>,
    out: VecDeque<MadOut>,
    servers: Option<Box<dyn MadServers>>,
    /// This process's host-wide claims: (class, version) -> (how many
    /// local server agents, the claim).
    claims: HashMap<(u8, u8), (usize, Claim)>,
    /// The member the last request handled belongs to (see `handle`).
    forward: Option<u8>,
}

/// A host-wide record that this process serves a class; dropped, released.
pub(crate) struct Claim {
    _held: Box<dyn std::any::Any + Send>,
}

impl Claim {
    /// Holds `held` (what keeps the record) until dropped.
    pub(crate) fn new(held: impl std::any::Any + Send) -> Claim {
        Claim {
            _held: Box::new(held),
        }
    }
}

impl std::fmt::Debug for Claim {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Claim")
    }
}

/// Highest agent id: ids live in the low 24 bits of the TID's high half.
const MAX_AGENT: u32 = 0xFF_FFFF;

fn is_vendor_oui_class(class: u8) -> bool {
    (0x30..=0x4F).contains(&class)
}

fn is_response(m: u8) -> bool {
    m & method::RESP != 0
}

impl MadAgents {
    pub(crate) fn new(slot: u8) -> MadAgents {
        MadAgents {
            slot,
            next: 0,
            agents: HashMap::new(),
            outstanding: Vec::new(),
            out: VecDeque::new(),
            servers: None,
            claims: HashMap::new(),
            forward: None,
        }
    }

    /// Where the host records which process serves which class.
    pub(crate) fn set_servers(&mut self, servers: Box<dyn MadServers>) {
        self.servers = Some(servers);
    }

    /// The member to hand the last request handled on to: one this process
    /// does not serve, whose class another process of the host does.
    pub(crate) fn take_forward(&mut self) -> Option<u8> {
        self.forward.take()
    }

    /// Registers an agent on `port`. `EPROTONOSUPPORT` for the subnet
    /// management classes 0x01/0x81: they travel on QP0, which a RoCE port
    /// lacks (the kernel's `ib_register_mad_agent` answers the same on
    /// rxe). `EINVAL`: class 0x07 (the CM's own agent has it), a vendor
    /// class without an OUI or the reverse, or a method another agent
    /// already serves for the same class and version.
    pub(crate) fn register(
        &mut self,
        port: &Arc<MadPort>,
        reg: MadRegistration,
    ) -> Result<u32, Errno> {
        if matches!(reg.class, 0x01 | 0x81) {
            return Err(libc::EPROTONOSUPPORT);
        }
        if reg.class == softrdma_wire::mad::MGMT_CLASS_CM
            || is_vendor_oui_class(reg.class) != reg.oui.is_some()
        {
            return Err(libc::EINVAL);
        }
        let clash = self.agents.values().any(|a| {
            a.reg.class == reg.class
                && a.reg.version == reg.version
                && a.reg.oui == reg.oui
                && a.reg.methods & reg.methods != 0
        });
        if clash || self.next > MAX_AGENT {
            return Err(if clash { libc::EINVAL } else { libc::ENOSPC });
        }
        if reg.methods != 0 {
            self.claim(reg.class, reg.version)?;
        }
        let id = self.next;
        self.next += 1;
        self.agents.insert(
            id,
            Agent {
                reg,
                port: Arc::clone(port),
            },
        );
        Ok(id)
    }

    /// Counts a local server of `(class, version)`; the first one claims
    /// the class on the host.
    fn claim(&mut self, class: u8, version: u8) -> Result<(), Errno> {
        if let Some((n, _)) = self.claims.get_mut(&(class, version)) {
            *n += 1;
            return Ok(());
        }
        let Some(servers) = &self.servers else {
            return Ok(());
        };
        let claim = servers.claim(class, version)?;
        self.claims.insert((class, version), (1, claim));
        Ok(())
    }

    /// Unregisters an agent of `port` (its requests in flight are dropped;
    /// the last local server of a class releases the host's claim).
    pub(crate) fn unregister(&mut self, port: &Arc<MadPort>, id: u32) -> Result<(), Errno> {
        match self.agents.get(&id) {
            Some(a) if Arc::ptr_eq(&a.port, port) => {
                let reg = a.reg;
                self.agents.remove(&id);
                self.outstanding.retain(|o| o.agent != id);
                let key = (reg.class, reg.version);
                if reg.methods != 0
                    && let Some((n, _)) = self.claims.get_mut(&key)
                {
                    *n -= 1;
                    if *n == 0 {
                        self.claims.remove(&key);
                    }
                }
                Ok(())
            }
            _ => Err(libc::EINVAL),
        }
    }

    /// Unregisters every agent of a port being closed.
    pub(crate) fn close(&mut self, port: &Arc<MadPort>) {
        let ids: Vec<u32> = self
            .agents
            .iter()
            .filter(|(_, a)| Arc::ptr_eq(&a.port, port))
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let _ = self.unregister(port, id);
        }
    }

    /// Sends `mad` from agent `id` of `port` to `dst` (from local address
    /// `src`). A request gets the agent's high TID and, with a timeout, is
    /// tracked until answered: sent again every `timeout` up to `retries`
    /// times.
    pub(crate) fn send(
        &mut self,
        now: Instant,
        port: &Arc<MadPort>,
        id: u32,
        (src, dst): (IpAddr, IpAddr),
        mut mad: Box<Mad>,
        (timeout, retries): (Duration, u32),
    ) -> Result<(), Errno> {
        match self.agents.get(&id) {
            Some(a) if Arc::ptr_eq(&a.port, port) => {}
            _ => return Err(libc::EINVAL),
        }
        let hdr = MadHdr::parse(&mad[..]).map_err(|_| libc::EINVAL)?;
        if hdr.base_version != softrdma_wire::mad::BASE_VERSION {
            return Err(libc::EINVAL);
        }
        if !is_response(hdr.method) {
            let tid = (u64::from(self.hi_tid(id)) << 32) | (hdr.tid & 0xFFFF_FFFF);
            mad[8..16].copy_from_slice(&tid.to_be_bytes());
            if !timeout.is_zero() {
                self.outstanding.push(Outstanding {
                    agent: id,
                    tid,
                    src,
                    dst,
                    mad: mad.clone(),
                    timeout,
                    retries,
                    deadline: now + timeout,
                });
            }
        }
        self.out.push_back((src, dst, mad));
        Ok(())
    }

    fn hi_tid(&self, id: u32) -> u32 {
        (u32::from(self.slot) << 24) | (id & MAX_AGENT)
    }

    /// Handles a MAD of a class other than the CM's that arrived at local
    /// address `dst` from `src`; `counters` are the device's for its PMA.
    /// A request no local agent serves but another process of the host
    /// does is left for the engine to hand on ([`MadAgents::take_forward`]);
    /// else the device's PMA answers it, or it is dropped.
    pub(crate) fn handle(
        &mut self,
        src: IpAddr,
        dst: IpAddr,
        mad: &[u8],
        counters: impl FnOnce() -> pma::Counters,
    ) {
        self.forward = None;
        let Ok(hdr) = MadHdr::parse(mad) else { return };
        let Ok(whole) = <&Mad>::try_from(mad) else {
            return;
        };
        if is_response(hdr.method) {
            let id = ((hdr.tid >> 32) as u32) & MAX_AGENT;
            if (hdr.tid >> 56) as u8 != self.slot {
                return;
            }
            let Some(a) = self.agents.get(&id) else {
                return;
            };
            if a.reg.class != hdr.mgmt_class {
                return;
            }
            self.outstanding.retain(|o| o.tid != hdr.tid);
            a.port.push(MadRecv {
                agent: id,
                status: 0,
                peer: src,
                mad: Box::new(*whole),
            });
            return;
        }
        let oui = [mad.get(37), mad.get(38), mad.get(39)];
        let server = self.agents.iter().find(|(_, a)| {
            a.reg.class == hdr.mgmt_class
                && a.reg.version == hdr.class_version
                && hdr.method < 128
                && a.reg.methods & (1u128 << hdr.method) != 0
                && a.reg
                    .oui
                    .is_none_or(|o| oui == [Some(&o[0]), Some(&o[1]), Some(&o[2])])
        });
        if let Some((&id, a)) = server {
            a.port.push(MadRecv {
                agent: id,
                status: 0,
                peer: src,
                mad: Box::new(*whole),
            });
        } else if let Some(slot) = self
            .servers
            .as_ref()
            .and_then(|s| s.holder(hdr.mgmt_class, hdr.class_version))
        {
            self.forward = Some(slot);
        } else if hdr.mgmt_class == pma::MGMT_CLASS_PERF {
            let reply = pma_answer(&hdr, whole, counters);
            self.out.push_back((dst, src, reply));
        }
    }

    /// The next MAD to frame and send.
    pub(crate) fn poll_transmit(&mut self) -> Option<MadOut> {
        self.out.pop_front()
    }

    /// When the earliest request in flight times out.
    pub(crate) fn poll_timeout(&self) -> Option<Instant> {
        self.outstanding.iter().map(|o| o.deadline).min()
    }

    /// Sends again the requests that timed out with retries left, and hands
    /// the others back to their agents with status `ETIMEDOUT`.
    pub(crate) fn handle_timeout(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.outstanding.len() {
            let o = &mut self.outstanding[i];
            if o.deadline > now {
                i += 1;
            } else if o.retries > 0 {
                o.retries -= 1;
                o.deadline = now + o.timeout;
                self.out.push_back((o.src, o.dst, o.mad.clone()));
                i += 1;
            } else {
                let o = self.outstanding.swap_remove(i);
                if let Some(a) = self.agents.get(&o.agent) {
                    a.port.push(MadRecv {
                        agent: o.agent,
                        status: libc::ETIMEDOUT as u32,
                        peer: o.dst,
                        mad: o.mad,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
