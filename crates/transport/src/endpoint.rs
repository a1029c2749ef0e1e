//! The endpoint: every object of one software RDMA device and its I/O surface.
//!
//! Inputs are `handle_*` calls and verbs (`post_send`, `modify_qp`, ...);
//! outputs are `poll_*` calls. The driver (the engine, or a simulator) must
//! after any input call [`Endpoint::poll_transmit`] until it returns `None`,
//! then [`Endpoint::poll_event`] until `None`, and arm a timer for
//! [`Endpoint::poll_timeout`], calling [`Endpoint::handle_timeout`] when it fires.

use crate::attr::{QpAttr, QpCap, QpInitAttr, check_modify};
use crate::config::Config;
use crate::cq::{Cq, CqHandle, CqRing, Srq, SrqHandle};
use crate::error::{VerbsError, inval};
use crate::mr::{Memory, Mr, MrTable, PdHandle};
use crate::mw::MwTable;
use crate::qp::{Ctx, Express, Qp, SendWqe, ip_header_for_icrc};
use crate::rng::Rng;
use crate::stats::Stats;
use crate::table::Table;
use crate::time::Instant;
use crate::types::{Access, AsyncEventType, QpAttrMask, QpState, QpType, Qpn, SendFlags, WrOpcode};
use crate::types::{WcFlags, WcOpcode, WcStatus};
use crate::wr::{RecvWr, SendWr, Wc};
use rustc_hash::FxHashMap as HashMap;
use softrdma_wire::{Packet, Psn, Transport, ip};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

/// A datagram received from the network.
#[derive(Debug, Clone, Copy)]
pub struct Datagram<'a> {
    /// Sender address and UDP port.
    pub src: SocketAddr,
    /// Local address it was sent to.
    pub dst_ip: IpAddr,
    /// UDP payload: BTH through ICRC.
    pub payload: &'a [u8],
}

/// A datagram to send: the first `len` bytes of the buffer given to `poll_transmit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Local address to send from.
    pub src_ip: IpAddr,
    /// Destination address and UDP port.
    pub dst: SocketAddr,
    /// Bytes in the buffer.
    pub len: usize,
}

/// Something the driver must act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// An armed CQ received a completion: signal its completion channel.
    CompletionNotify(CqHandle),
    /// An asynchronous event on a QP.
    QpAsync(Qpn, AsyncEventType),
    /// An asynchronous event on a CQ (overflow).
    CqAsync(CqHandle, AsyncEventType),
    /// An asynchronous event on an SRQ (limit reached).
    SrqAsync(SrqHandle, AsyncEventType),
}

#[derive(Debug, Default)]
struct Pd {
    /// Objects created in this PD (MRs, QPs, SRQs, AHs): dealloc is EBUSY while non-zero.
    users: u32,
}

/// Everything a software RDMA device holds, driven sans-IO.
#[derive(Debug)]
pub struct Endpoint {
    config: Config,
    pub(crate) rng: Rng,
    pds: Table<Pd>,
    pub(crate) mrs: MrTable,
    /// Memory windows (`mw.rs`).
    pub(crate) mws: MwTable,
    cqs: Table<Cq>,
    srqs: Table<Srq>,
    qps: HashMap<Qpn, Qp>,
    next_qpn: Qpn,
    /// Each QP's earliest armed timer (`timers.rs`).
    timers: crate::timers::TimerHeap,
    ready: VecDeque<Qpn>,
    events: VecDeque<Event>,
    stats: Stats,
    /// Multicast group (its IP address) → attached UD QPs, with "block self loopback".
    mcast: HashMap<IpAddr, Vec<(Qpn, bool)>>,
}

macro_rules! split {
    ($self:ident, $now:expr) => {
        (
            &mut $self.qps,
            Ctx {
                now: $now,
                cqs: &mut $self.cqs,
                srqs: &mut $self.srqs,
                mrs: &$self.mrs,
                mws: &mut $self.mws,
                events: &mut $self.events,
                stats: &mut $self.stats,
                config: &$self.config,
            },
        )
    };
}

impl Endpoint {
    /// Creates an empty device.
    pub fn new(config: Config) -> Endpoint {
        let mut rng = Rng::new(config.seed);
        // Start QPNs at a random point so numbers differ between processes
        // (and between successive holders of one member slot).
        let (lo, hi) = qpn_range(config.member_slot);
        let next_qpn = lo + rng.next_u32() % (hi - lo + 1);
        let mrs = MrTable::new(config.seed);
        Endpoint {
            config,
            rng,
            pds: Table::default(),
            mrs,
            mws: MwTable::default(),
            cqs: Table::default(),
            srqs: Table::default(),
            qps: HashMap::default(),
            next_qpn,
            timers: Default::default(),
            ready: VecDeque::new(),
            events: VecDeque::new(),
            stats: Stats::default(),
            mcast: HashMap::default(),
        }
    }

    /// Whether `qpn`'s send queue holds no work request (all completed or
    /// flushed; true for an unknown QP).
    pub fn send_queue_empty(&self, qpn: Qpn) -> bool {
        self.qps
            .get(&qpn)
            .is_none_or(|q| q.sq.is_empty() && !q.has_lent_message())
    }

    /// Whether some QP has a packet to send ([`Endpoint::poll_transmit`]
    /// would produce one): e.g. after a receive posted while an RNR NAK was
    /// held ([`Config::rnr_hold_ns`]).
    pub fn wants_transmit(&self) -> bool {
        !self.ready.is_empty()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Sets [`Config::rnr_hold_ns`] for requests that arrive from now on.
    pub fn set_rnr_hold_ns(&mut self, ns: u64) {
        self.config.rnr_hold_ns = ns;
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        let mut s = self.stats;
        for q in self.qps.values() {
            s.recv_express += q.rq.pulled();
            q.lent_counts().fold(&mut s);
        }
        s
    }

    /// Adds a local address to the GID table; returns its index: the
    /// address's entry if it has one, else the first empty entry (one whose
    /// address went away, [`Endpoint::remove_gid`]), else a new one.
    pub fn add_gid(&mut self, addr: IpAddr) -> usize {
        let gids = &mut self.config.gids;
        if let Some(i) = gids.iter().position(|a| *a == addr) {
            return i;
        }
        if let Some(i) = gids.iter().skip(1).position(|a| a.is_unspecified()) {
            gids[i + 1] = addr;
            return i + 1;
        }
        gids.push(addr);
        gids.len() - 1
    }

    /// Empties the GID table's entry of `addr` (the address went away), as
    /// rxe does: the other entries keep their indices; the entry reads as
    /// the unspecified address until an address takes it. GID 0 is never
    /// emptied. Returns the index emptied.
    pub fn remove_gid(&mut self, addr: IpAddr) -> Option<usize> {
        let i = self.config.gids.iter().skip(1).position(|a| *a == addr)? + 1;
        self.config.gids[i] = std::net::Ipv6Addr::UNSPECIFIED.into();
        Some(i)
    }

    // ---- protection domains and memory ----

    /// Allocates a protection domain.
    pub fn alloc_pd(&mut self) -> Result<PdHandle, VerbsError> {
        if self.pds.len() >= self.config.limits.max_pd as usize {
            return Err(VerbsError::NoMemory("too many PDs".into()));
        }
        Ok(PdHandle(self.pds.insert_with(|_| Pd::default())))
    }

    /// Frees a protection domain; EBUSY while objects use it.
    pub fn dealloc_pd(&mut self, pd: PdHandle) -> Result<(), VerbsError> {
        let p = self
            .pds
            .get(pd.0)
            .ok_or_else(|| VerbsError::NotFound(format!("PD {}", pd.0)))?;
        if p.users > 0 {
            return Err(VerbsError::Busy(format!(
                "PD {} still has {} objects",
                pd.0, p.users
            )));
        }
        self.pds.remove(pd.0);
        Ok(())
    }

    /// Counts an object created in `pd` by a higher layer (an AH); fails for a bad PD.
    pub fn pd_acquire(&mut self, pd: PdHandle) -> Result<(), VerbsError> {
        let p = self
            .pds
            .get_mut(pd.0)
            .ok_or_else(|| VerbsError::InvalidArgument(format!("no PD {}", pd.0)))?;
        p.users += 1;
        Ok(())
    }

    /// Releases what [`Endpoint::pd_acquire`] counted.
    pub fn pd_release(&mut self, pd: PdHandle) {
        if let Some(p) = self.pds.get_mut(pd.0) {
            p.users = p.users.saturating_sub(1);
        }
    }

    /// Registers `length` bytes at host address `host`, addressed as `iova`.
    ///
    /// Remote write or atomic rights require local write (IBTA 10.6.3.1).
    pub fn reg_mr(
        &mut self,
        pd: PdHandle,
        host: u64,
        length: u64,
        iova: u64,
        access: Access,
    ) -> Result<Mr, VerbsError> {
        if access.intersects(Access::REMOTE_WRITE | Access::REMOTE_ATOMIC)
            && !access.contains(Access::LOCAL_WRITE)
        {
            return inval("REMOTE_WRITE/REMOTE_ATOMIC need LOCAL_WRITE");
        }
        if iova.checked_add(length).is_none() || host.checked_add(length).is_none() {
            return inval("region wraps around the address space");
        }
        self.pd_acquire(pd)?;
        Ok(self.mrs.insert(pd, iova, length, host, access))
    }

    /// Records (or clears) the memfd a region's whole pages were moved into
    /// (same-host path; peer-copy packets name it). False if no region has
    /// the key.
    pub fn set_mr_share(&mut self, key: u32, share: Option<crate::PeerFile>) -> bool {
        match self.mrs.get_mut(key) {
            Some(mr) => {
                mr.share = share;
                true
            }
            None => false,
        }
    }

    /// Looks up a region by key.
    pub fn query_mr(&self, key: u32) -> Option<Mr> {
        self.mrs.get(key).copied()
    }

    /// Deregisters a region. Later accesses through its keys fail.
    pub fn dereg_mr(&mut self, key: u32) -> Result<(), VerbsError> {
        let mr = self
            .mrs
            .remove(key)
            .ok_or_else(|| VerbsError::NotFound(format!("MR key {key:#x}")))?;
        self.pd_release(mr.pd);
        // Windows bound to it stop granting access (its key may come back).
        self.mws.unbind_mr(key);
        Ok(())
    }

    // ---- completion queues ----

    /// Creates a CQ with at least `cqe` entries; returns it and the actual size.
    pub fn create_cq(&mut self, cqe: u32) -> Result<(CqHandle, u32), VerbsError> {
        let l = &self.config.limits;
        if cqe == 0 || cqe > l.max_cqe {
            return inval(format!("cqe {cqe} not in 1..={}", l.max_cqe));
        }
        if self.cqs.len() >= l.max_cq as usize {
            return Err(VerbsError::NoMemory("too many CQs".into()));
        }
        Ok((CqHandle(self.cqs.insert_with(|_| Cq::new(cqe))), cqe))
    }

    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`: with `on`, a completion that finds
    /// the CQ full is dropped (counted in `cq_overflows`) instead of raising
    /// CQ_ERR and moving its QP to ERR.
    pub fn set_cq_ignore_overrun(&mut self, cq: CqHandle, on: bool) -> Result<(), VerbsError> {
        self.cq_mut(cq)?.ignore_overrun = on;
        Ok(())
    }

    /// Changes a CQ's size; it must still hold what is queued.
    pub fn resize_cq(&mut self, cq: CqHandle, cqe: u32) -> Result<u32, VerbsError> {
        let max = self.config.limits.max_cqe;
        let c = self.cq_mut(cq)?;
        if cqe == 0 || cqe > max || !c.entries.resize(cqe) {
            return inval(format!("cannot resize CQ to {cqe}"));
        }
        Ok(cqe)
    }

    /// Destroys a CQ; EBUSY while a QP or SRQ uses it.
    pub fn destroy_cq(&mut self, cq: CqHandle) -> Result<(), VerbsError> {
        let c = self.cq_mut(cq)?;
        if c.users > 0 {
            return Err(VerbsError::Busy(format!(
                "CQ {} used by {} QPs",
                cq.0, c.users
            )));
        }
        self.cqs.remove(cq.0);
        Ok(())
    }

    fn cq_mut(&mut self, cq: CqHandle) -> Result<&mut Cq, VerbsError> {
        self.cqs
            .get_mut(cq.0)
            .ok_or_else(|| VerbsError::NotFound(format!("CQ {}", cq.0)))
    }

    /// Removes up to `max` completions, oldest first, handing each to `f`.
    pub fn poll_cq(
        &mut self,
        cq: CqHandle,
        max: usize,
        f: impl FnMut(Wc),
    ) -> Result<usize, VerbsError> {
        Ok(self.cq_mut(cq)?.entries.poll(max, f))
    }

    /// The completions of `cq`, for a driver to poll without the endpoint
    /// ([`CqRing::poll`]): the same queue [`Endpoint::poll_cq`] takes from.
    pub fn cq_ring(&self, cq: CqHandle) -> Result<Arc<CqRing>, VerbsError> {
        self.cqs
            .get(cq.0)
            .map(|c| Arc::clone(&c.entries))
            .ok_or_else(|| VerbsError::NotFound(format!("CQ {}", cq.0)))
    }

    /// Whether any CQ holds a completion not yet polled.
    pub fn completions_waiting(&self) -> bool {
        self.cqs.iter().any(|c| !c.entries.is_empty())
    }

    /// Whether a CQ of QP `qpn` (its send or receive CQ) holds a completion
    /// not yet polled; false for a QP that does not exist.
    pub fn qp_completions_waiting(&self, qpn: Qpn) -> bool {
        self.qps
            .get(&qpn)
            .is_some_and(|qp| self.cq_len(qp.send_cq) > 0 || self.cq_len(qp.recv_cq) > 0)
    }

    /// Completions waiting in a CQ.
    pub fn cq_len(&self, cq: CqHandle) -> usize {
        self.cqs.get(cq.0).map_or(0, |c| c.entries.len())
    }

    /// Arms a CQ: the next (solicited) completion raises [`Event::CompletionNotify`].
    pub fn req_notify_cq(&mut self, cq: CqHandle, solicited_only: bool) -> Result<(), VerbsError> {
        self.cq_mut(cq)?.entries.arm(solicited_only);
        Ok(())
    }

    // ---- shared receive queues ----

    /// Creates an SRQ; returns it and the actual (max_wr, max_sge).
    pub fn create_srq(
        &mut self,
        pd: PdHandle,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<(SrqHandle, u32, u32), VerbsError> {
        let l = self.config.limits;
        if max_wr == 0 || max_wr > l.max_srq_wr || max_sge > l.max_srq_sge || limit > max_wr {
            return inval(format!(
                "SRQ max_wr {max_wr} (1..={}), max_sge {max_sge} (<={}), limit {limit}",
                l.max_srq_wr, l.max_srq_sge
            ));
        }
        if self.srqs.len() >= l.max_srq as usize {
            return Err(VerbsError::NoMemory("too many SRQs".into()));
        }
        self.pd_acquire(pd)?;
        let max_sge = max_sge.max(1);
        let h = self.srqs.insert_with(|_| Srq {
            pd,
            wqes: VecDeque::new(),
            max_wr,
            max_sge,
            limit,
            users: 0,
            xrc: None,
            tm: None,
        });
        Ok((SrqHandle(h), max_wr, max_sge))
    }

    /// Creates an XRC SRQ (`IBV_SRQT_XRC`) of XRC domain `xrcd` (the
    /// driver's id for the domain), whose receive completions go to `cq`;
    /// returns it and the actual (max_wr, max_sge). Its number for
    /// [`Endpoint::srq_num`] is what XRC senders put in the XRCETH.
    pub fn create_xrc_srq(
        &mut self,
        pd: PdHandle,
        xrcd: u32,
        cq: CqHandle,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<(SrqHandle, u32, u32), VerbsError> {
        if self.cqs.get(cq.0).is_none() {
            return inval(format!("no CQ {}", cq.0));
        }
        let (h, wr, sge) = self.create_srq(pd, max_wr, max_sge, limit)?;
        if h.0 >= 0x00FF_FFFF {
            self.destroy_srq(h)?;
            return Err(VerbsError::NoMemory("no free 24-bit XRC SRQ number".into()));
        }
        self.srqs.get_mut(h.0).expect("just made").xrc = Some(crate::cq::XrcSrq { xrcd, cq });
        self.cqs.get_mut(cq.0).expect("checked").users += 1;
        Ok((h, wr, sge))
    }

    /// The XRC SRQ number of `srq` (`ibv_get_srq_num`); `None` for an SRQ
    /// that is not an XRC SRQ. Numbers start at 1, so a sender that never
    /// set one (0) is refused instead of reaching the first SRQ.
    pub fn srq_num(&self, srq: SrqHandle) -> Option<u32> {
        self.srqs.get(srq.0)?.xrc.map(|_| srq.0 + 1)
    }

    /// Changes an SRQ's size and/or limit.
    pub fn modify_srq(
        &mut self,
        srq: SrqHandle,
        max_wr: Option<u32>,
        limit: Option<u32>,
    ) -> Result<(), VerbsError> {
        let lim = self.config.limits.max_srq_wr;
        let s = self.srq_mut(srq)?;
        if let Some(m) = max_wr {
            if m == 0 || m > lim || (m as usize) < s.wqes.len() {
                return inval(format!("cannot resize SRQ to {m}"));
            }
            s.max_wr = m;
        }
        if let Some(l) = limit {
            if l > s.max_wr {
                return inval(format!("SRQ limit {l} above max_wr {}", s.max_wr));
            }
            s.limit = l;
        }
        Ok(())
    }

    /// (max_wr, max_sge, limit) of an SRQ.
    pub fn query_srq(&self, srq: SrqHandle) -> Result<(u32, u32, u32), VerbsError> {
        let s = self
            .srqs
            .get(srq.0)
            .ok_or_else(|| VerbsError::NotFound(format!("SRQ {}", srq.0)))?;
        Ok((s.max_wr, s.max_sge, s.limit))
    }

    /// Destroys an SRQ; EBUSY while QPs use it.
    pub fn destroy_srq(&mut self, srq: SrqHandle) -> Result<(), VerbsError> {
        let s = self.srq_mut(srq)?;
        if s.users > 0 {
            return Err(VerbsError::Busy(format!(
                "SRQ {} used by {} QPs",
                srq.0, s.users
            )));
        }
        let (pd, cq) = (s.pd, s.xrc.map(|x| x.cq).or(s.tm.as_ref().map(|t| t.cq)));
        self.srqs.remove(srq.0);
        self.pd_release(pd);
        if let Some(c) = cq.and_then(|cq| self.cqs.get_mut(cq.0)) {
            c.users = c.users.saturating_sub(1);
        }
        Ok(())
    }

    /// Creates a tag-matching SRQ (`IBV_SRQT_TM`, `tm.rs`) whose operation
    /// and receive completions go to `cq`; returns it and the actual
    /// (max_wr, max_sge).
    pub fn create_tm_srq(
        &mut self,
        pd: PdHandle,
        cq: CqHandle,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
        tm: crate::tm::TmCap,
    ) -> Result<(SrqHandle, u32, u32), VerbsError> {
        if self.cqs.get(cq.0).is_none() {
            return inval(format!("no CQ {}", cq.0));
        }
        let l = self.config.limits;
        let crate::tm::TmCap {
            max_num_tags,
            max_ops,
        } = tm;
        if !(1..=l.max_num_tags).contains(&max_num_tags) || !(1..=l.max_tm_ops).contains(&max_ops) {
            return inval(format!(
                "TM SRQ max_num_tags {max_num_tags} (1..={}), max_ops {max_ops} (1..={})",
                l.max_num_tags, l.max_tm_ops
            ));
        }
        let (h, wr, sge) = self.create_srq(pd, max_wr, max_sge, limit)?;
        self.srqs.get_mut(h.0).expect("just made").tm =
            Some(crate::tm::TmSrq::new(cq, max_num_tags));
        self.cqs.get_mut(cq.0).expect("checked").users += 1;
        Ok((h, wr, sge))
    }

    /// One `ibv_post_srq_ops` operation on a TM SRQ (`tm.rs`). A refused
    /// operation (not a TM SRQ, list full, too many SGEs) is an error and
    /// changes nothing; an operation that fails on the list (DEL of a
    /// consumed tag) completes with `IBV_WC_TM_ERR`. With `signaled`, a
    /// completion with `wr_id` goes to the SRQ's CQ. Returns the handle of
    /// an added tag (0 for the others).
    pub fn post_srq_op(
        &mut self,
        now: Instant,
        srq: SrqHandle,
        o: crate::tm::SrqOp,
    ) -> Result<u32, VerbsError> {
        let crate::tm::SrqOp {
            wr_id,
            op,
            unexpected,
            sync,
            signaled,
        } = o;
        let s = self.srq_mut(srq)?;
        let max_sge = s.max_sge;
        let Some(tm) = s.tm.as_mut() else {
            return inval("not a tag-matching SRQ");
        };
        let opcode = match &op {
            crate::tm::TmOp::Add(e) => {
                if e.sgl.len() > max_sge as usize {
                    return inval(format!("{} SGEs > SRQ max_sge {max_sge}", e.sgl.len()));
                }
                if tm.full() {
                    return Err(VerbsError::NoMemory("tag list full".into()));
                }
                WcOpcode::TmAdd
            }
            crate::tm::TmOp::Del(_) => WcOpcode::TmDel,
            crate::tm::TmOp::Sync => WcOpcode::TmSync,
        };
        let res = tm.apply(op, unexpected, sync);
        let cq = tm.cq;
        let sync_req = !tm.in_sync();
        if signaled || res.is_err() {
            let status = if res.is_ok() {
                WcStatus::Success
            } else {
                WcStatus::TmErr
            };
            let mut wc = Wc::new(wr_id, status, opcode, 0);
            if sync_req {
                wc.wc_flags = WcFlags::TM_SYNC_REQ;
            }
            let (_, mut ctx) = split!(self, now);
            Qp::push_wc(&mut ctx, cq, wc, false);
        }
        Ok(res.unwrap_or(0))
    }

    fn srq_mut(&mut self, srq: SrqHandle) -> Result<&mut Srq, VerbsError> {
        self.srqs
            .get_mut(srq.0)
            .ok_or_else(|| VerbsError::NotFound(format!("SRQ {}", srq.0)))
    }

    /// Posts a receive WR to an SRQ.
    pub fn post_srq_recv(&mut self, srq: SrqHandle, wr: RecvWr) -> Result<(), VerbsError> {
        let s = self.srq_mut(srq)?;
        if wr.sgl.len() > s.max_sge as usize {
            return inval(format!("{} SGEs > SRQ max_sge {}", wr.sgl.len(), s.max_sge));
        }
        if s.wqes.len() >= s.max_wr as usize {
            return Err(VerbsError::NoMemory("SRQ full".into()));
        }
        s.wqes.push_back(wr);
        Ok(())
    }

    // ---- queue pairs ----

    /// Creates a QP in RESET; returns its number and actual capacities.
    pub fn create_qp(&mut self, init: &QpInitAttr) -> Result<(Qpn, QpCap), VerbsError> {
        let l = self.config.limits;
        let c = init.cap;
        if c.max_send_wr > l.max_qp_wr
            || c.max_recv_wr > l.max_qp_wr
            || c.max_send_sge > l.max_sge
            || c.max_recv_sge > l.max_sge
            || c.max_inline_data > l.max_inline
        {
            return inval(format!("QP capacities {c:?} exceed the device limits"));
        }
        if self.qps.len() >= l.max_qp as usize {
            return Err(VerbsError::NoMemory("too many QPs".into()));
        }
        match init.qp_type {
            QpType::XrcRecv => {
                return inval("an XRC receive QP belongs to an XRC domain: use create_xrc_recv_qp");
            }
            QpType::XrcSend if init.srq.is_some() => {
                return inval("an XRC send QP has no receive queue");
            }
            _ => {}
        }
        if self.pds.get(init.pd.0).is_none() {
            return inval(format!("no PD {}", init.pd.0));
        }
        for cq in [init.send_cq, init.recv_cq] {
            if self.cqs.get(cq.0).is_none() {
                return inval(format!("no CQ {}", cq.0));
            }
        }
        if let Some(s) = init.srq
            && self.srqs.get(s.0).is_none()
        {
            return inval(format!("no SRQ {}", s.0));
        }
        // Report at least one SGE and the device's inline size, as rxe does.
        let cap = QpCap {
            max_send_wr: c.max_send_wr.max(1),
            max_recv_wr: if init.srq.is_some() {
                0
            } else {
                c.max_recv_wr.max(1)
            },
            max_send_sge: c.max_send_sge.max(1),
            max_recv_sge: if init.srq.is_some() {
                0
            } else {
                c.max_recv_sge.max(1)
            },
            max_inline_data: c.max_inline_data.max(l.max_inline.min(256)),
        };
        let qpn = self.alloc_qpn()?;
        self.pd_acquire(init.pd)?;
        for cq in [init.send_cq, init.recv_cq] {
            self.cqs.get_mut(cq.0).expect("checked").users += 1;
        }
        if let Some(s) = init.srq {
            self.srqs.get_mut(s.0).expect("checked").users += 1;
        }
        let qp = Qp::new(
            qpn,
            init.qp_type,
            init.pd,
            init.send_cq,
            init.recv_cq,
            init.srq,
            cap,
            init.sq_sig_all,
        );
        self.qps.insert(qpn, qp);
        Ok((qpn, cap))
    }

    /// Creates an XRC receive (target) QP of XRC domain `xrcd`, in RESET. It
    /// has no PD, CQs or queues of its own: each request names an XRC SRQ of
    /// the same domain (XRCETH), whose WQEs, PD and CQ it uses.
    pub fn create_xrc_recv_qp(&mut self, xrcd: u32) -> Result<Qpn, VerbsError> {
        if self.qps.len() >= self.config.limits.max_qp as usize {
            return Err(VerbsError::NoMemory("too many QPs".into()));
        }
        let qpn = self.alloc_qpn()?;
        let none = CqHandle(u32::MAX);
        let mut qp = Qp::new(
            qpn,
            QpType::XrcRecv,
            PdHandle(u32::MAX),
            none,
            none,
            None,
            QpCap::default(),
            false,
        );
        qp.xrcd = Some(xrcd);
        self.qps.insert(qpn, qp);
        Ok(qpn)
    }

    fn alloc_qpn(&mut self) -> Result<Qpn, VerbsError> {
        let (lo, hi) = qpn_range(self.config.member_slot);
        for _ in lo..=hi {
            let q = self.next_qpn;
            self.next_qpn = if q >= hi { lo } else { q + 1 };
            if !self.qps.contains_key(&q) {
                return Ok(q);
            }
        }
        Err(VerbsError::NoMemory("no free QP number".into()))
    }

    /// Modifies a QP (rdma-core's state machine and attribute checks).
    pub fn modify_qp(
        &mut self,
        now: Instant,
        qpn: Qpn,
        attr: &QpAttr,
        mask: QpAttrMask,
    ) -> Result<(), VerbsError> {
        let limits = self.config.limits;
        let ngids = self.config.gids.len();
        let (qps, mut ctx) = split!(self, now);
        let qp = qps
            .get_mut(&qpn)
            .ok_or_else(|| VerbsError::NotFound(format!("QP {qpn:#x}")))?;
        let to = check_modify(qp.state, qp.qp_type, attr, mask)?;
        validate_values(attr, mask, &limits, ngids)?;
        qp.reclaim(&mut ctx);
        let a = &mut qp.attr;
        // Attributes with no transport state of their own are taken as given.
        macro_rules! take {
            ($($bit:ident => $field:ident,)*) => {
                $(if mask.contains(QpAttrMask::$bit) {
                    a.$field = attr.$field;
                })*
            };
        }
        take! {
            ACCESS_FLAGS => qp_access_flags,
            PKEY_INDEX => pkey_index,
            PORT => port_num,
            QKEY => qkey,
            AV => ah_attr,
            PATH_MTU => path_mtu,
            TIMEOUT => timeout,
            MAX_QP_RD_ATOMIC => max_rd_atomic,
            MAX_DEST_RD_ATOMIC => max_dest_rd_atomic,
            MIN_RNR_TIMER => min_rnr_timer,
            EN_SQD_ASYNC_NOTIFY => en_sqd_async_notify,
        }
        if mask.contains(QpAttrMask::RETRY_CNT) {
            a.retry_cnt = attr.retry_cnt;
            qp.req.retry_left = attr.retry_cnt;
        }
        if mask.contains(QpAttrMask::RNR_RETRY) {
            a.rnr_retry = attr.rnr_retry;
            qp.req.rnr_left = attr.rnr_retry;
        }
        if mask.contains(QpAttrMask::RQ_PSN) {
            a.rq_psn = attr.rq_psn & 0xFF_FFFF;
            qp.resp.psn = Psn::new(attr.rq_psn);
        }
        if mask.contains(QpAttrMask::SQ_PSN) {
            a.sq_psn = attr.sq_psn & 0xFF_FFFF;
            let p = Psn::new(attr.sq_psn);
            qp.req.psn = p;
            qp.req.una = p;
            qp.req.high = p;
        }
        if mask.contains(QpAttrMask::DEST_QPN) {
            a.dest_qp_num = attr.dest_qp_num & 0xFF_FFFF;
        }
        let from = qp.state;
        match to {
            QpState::Reset if from != QpState::Reset => {
                qp.reset();
                // As mlx5 does: the completions of a reset QP leave its CQs,
                // so a QP brought up again does not poll its old flushes.
                for cq in [qp.send_cq, qp.recv_cq] {
                    if let Some(c) = ctx.cqs.get(cq.0) {
                        c.forget_qp(qpn);
                    }
                }
            }
            QpState::Err => qp.enter_error(&mut ctx),
            s => qp.state = s,
        }
        qp.gate_recvs();
        if to == QpState::Sqd && qp.attr.en_sqd_async_notify {
            ctx.events
                .push_back(Event::QpAsync(qpn, AsyncEventType::SqDrained));
        }
        self.schedule(qpn);
        Ok(())
    }

    /// Current attributes, capacities and init attributes of a QP.
    pub fn query_qp(&self, qpn: Qpn) -> Result<(QpAttr, QpInitAttr), VerbsError> {
        let qp = self
            .qps
            .get(&qpn)
            .ok_or_else(|| VerbsError::NotFound(format!("QP {qpn:#x}")))?;
        let mut a = qp.attr;
        a.qp_state = qp.state;
        a.cur_qp_state = qp.state;
        a.cap = qp.cap;
        a.sq_draining = qp.state == QpState::Sqd && qp.req.una != qp.req.psn;
        let init = QpInitAttr {
            qp_type: qp.qp_type,
            pd: qp.pd,
            send_cq: qp.send_cq,
            recv_cq: qp.recv_cq,
            srq: qp.srq,
            cap: qp.cap,
            sq_sig_all: qp.sq_sig_all,
        };
        Ok((a, init))
    }

    /// Attaches a UD QP to a multicast group (`ibv_attach_mcast`); packets to
    /// QPN 0xFFFFFF addressed to `group` reach every attached QP. With
    /// `block_self`, the QP does not receive what it sent itself
    /// (`IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`).
    pub fn attach_mcast(
        &mut self,
        qpn: Qpn,
        group: IpAddr,
        block_self: bool,
    ) -> Result<(), VerbsError> {
        match self.qps.get(&qpn).map(|q| q.qp_type) {
            Some(QpType::Ud) => {}
            Some(_) => return inval("only UD QPs join multicast groups"),
            None => return Err(VerbsError::NotFound(format!("QP {qpn:#x}"))),
        }
        if !group.is_multicast() {
            return inval(format!("{group} is not a multicast address"));
        }
        let v = self.mcast.entry(group).or_default();
        if !v.iter().any(|(q, _)| *q == qpn) {
            v.push((qpn, block_self));
        }
        Ok(())
    }

    /// Detaches a QP from a group (`ibv_detach_mcast`).
    pub fn detach_mcast(&mut self, qpn: Qpn, group: IpAddr) -> Result<(), VerbsError> {
        let v = self
            .mcast
            .get_mut(&group)
            .ok_or_else(|| VerbsError::InvalidArgument(format!("QP {qpn:#x} is not in {group}")))?;
        let before = v.len();
        v.retain(|(q, _)| *q != qpn);
        if v.len() == before {
            return inval(format!("QP {qpn:#x} is not in {group}"));
        }
        if v.is_empty() {
            self.mcast.remove(&group);
        }
        Ok(())
    }

    /// Groups with at least one attached QP.
    pub fn mcast_groups(&self) -> Vec<IpAddr> {
        self.mcast.keys().copied().collect()
    }

    /// Destroys a QP. Outstanding WRs vanish without completions (as in rdma-core).
    pub fn destroy_qp(&mut self, qpn: Qpn) -> Result<(), VerbsError> {
        let mut qp = self
            .qps
            .remove(&qpn)
            .ok_or_else(|| VerbsError::NotFound(format!("QP {qpn:#x}")))?;
        qp.revoke().fold(&mut self.stats);
        self.stats.recv_express += qp.rq.pulled();
        // Type 2 windows bound to it stop granting access (its QPN may come back).
        self.mws.unbind_qp(qpn);
        // An XRC target holds none: its SRQ, PD and CQ are per request.
        if qp.qp_type != QpType::XrcRecv {
            for cq in [qp.send_cq, qp.recv_cq] {
                if let Some(c) = self.cqs.get_mut(cq.0) {
                    c.users = c.users.saturating_sub(1);
                    // As mlx5 does (its destroy cleans both CQs of the QP's
                    // entries): nothing polls a completion of a QP that is
                    // gone, whose wr_id names the application's context for
                    // it. libfabric's rxm reposted the receive buffer of such
                    // a flush to the endpoint it had just closed and crashed
                    // at teardown.
                    c.forget_qp(qpn);
                }
            }
            if let Some(s) = qp.srq.and_then(|s| self.srqs.get_mut(s.0)) {
                s.users = s.users.saturating_sub(1);
            }
            self.pd_release(qp.pd);
        }
        self.timers.set(qpn, None);
        self.ready.retain(|q| *q != qpn);
        self.mcast.retain(|_, v| {
            v.retain(|(q, _)| *q != qpn);
            !v.is_empty()
        });
        Ok(())
    }

    /// Whether the peer of RC QP `qpn` is a process of this host reached
    /// through a shared-memory lane, each able to copy from the other's
    /// memory (the driver checked): its SENDs, WRITEs and READs of
    /// [`crate::PEER_COPY_MIN`] bytes or more then go as one peer-copy
    /// packet each (`qp/peer.rs`). Messages already started keep their form.
    pub fn set_peer_copy(&mut self, qpn: Qpn, on: bool) -> Result<(), VerbsError> {
        // Its time is not read: a reclaim keeps the message's own.
        let (qps, mut ctx) = split!(self, Instant::ZERO);
        let qp = qps
            .get_mut(&qpn)
            .ok_or_else(|| VerbsError::NotFound(format!("QP {qpn:#x}")))?;
        qp.peer_copy = on && qp.qp_type == QpType::Rc;
        if !qp.peer_copy {
            qp.reclaim(&mut ctx);
        }
        self.rearm(qpn);
        Ok(())
    }

    /// The XRC domain of XRC receive QP `qpn` (`None` for other QPs).
    pub fn qp_xrcd(&self, qpn: Qpn) -> Option<u32> {
        self.qps.get(&qpn)?.xrcd
    }

    /// The QP type of `qpn`.
    pub fn qp_type(&self, qpn: Qpn) -> Option<QpType> {
        self.qps.get(&qpn).map(|q| q.qp_type)
    }

    /// The express cell of RC QP `qpn` (`qp/express.rs`), made on the first
    /// call: from then on, whenever the QP is idle, its requester is lent
    /// to the cell and [`Express::post`] writes a lone small SEND or WRITE
    /// as a direct record without the endpoint. A driver asks for it only
    /// if it posts through it; the cell lends only with records on
    /// ([`Config::direct`]) to a peer on a lane.
    pub fn express(&mut self, qpn: Qpn) -> Option<Arc<Express>> {
        let generation = self.mrs.generation().clone();
        let qp = self.qps.get_mut(&qpn).filter(|q| q.qp_type == QpType::Rc)?;
        if qp.express.is_none() {
            let recv = qp.express_recv();
            qp.express = Some(Arc::new(Express::new(generation, recv)));
        }
        qp.express.clone()
    }

    /// After an express post of QP `qpn` ([`Express::post`]), which may
    /// have carried the ACK its responder owed: a QP that owes nothing
    /// more leaves the transmit queue, as after a direct record
    /// ([`Endpoint::post_send_direct`]), so `wants_transmit` tells the
    /// driver that no flush is due.
    pub fn express_posted(&mut self, qpn: Qpn) {
        self.leave_ready_if_done(qpn);
    }

    /// After QP `qpn`'s lent responder executed requests without the
    /// endpoint ([`Express::exec`]): if its cell still owes the ACK of the
    /// last (no post carried it), the QP joins the transmit queue, whose
    /// next poll sends it.
    pub fn schedule_owed(&mut self, qpn: Qpn) {
        if let Some(qp) = self.qps.get_mut(&qpn)
            && qp.owes_lent_ack()
        {
            queue_ready(&mut self.timers, &mut self.ready, qp);
        }
    }

    /// After a record left at once (a direct post's, a READ's answer, an
    /// express post's): if that was all the QP had to send (its WQE's one
    /// packet, the responder's lone ACK if the record carried it), the QP
    /// leaves the transmit queue, so `wants_transmit` tells the driver
    /// that nothing is left to flush. A flush that found nothing cost a
    /// same-host ping-pong both locks and a clock read per message
    /// (BENCHMARKS.md, "A lone post").
    fn leave_ready_if_done(&mut self, qpn: Qpn) {
        if let Some(qp) = self.qps.get_mut(&qpn)
            && qp.scheduled
            && qp.owes_nothing()
        {
            qp.scheduled = false;
            self.ready.retain(|q| *q != qpn);
        }
    }

    /// Posts a send WR. Fails (EINVAL/ENOMEM) without side effects if it cannot be queued.
    pub fn post_send(&mut self, now: Instant, qpn: Qpn, wr: SendWr) -> Result<(), VerbsError> {
        self.enqueue_send(now, qpn, wr)?;
        self.schedule(qpn);
        Ok(())
    }

    /// [`Endpoint::post_send`], starting the WR at once as a direct record
    /// in `out` when it may go as one (an idle RC QP whose peer is on a
    /// same-host lane, a one-packet SEND or WRITE, or a READ request:
    /// [`Config::direct`], [`softrdma_wire::direct`]). Then returns where the record goes; the
    /// driver pushes it into that lane, before the QP's next datagram if
    /// it can (one that passes it is a reordering, which the responder's
    /// sequence NAK repairs), or drops it (the retransmission timer sends
    /// the message again as a packet). Otherwise the WR waits for
    /// [`Endpoint::poll_transmit`].
    pub fn post_send_direct(
        &mut self,
        now: Instant,
        qpn: Qpn,
        wr: SendWr,
        mem: &mut dyn Memory,
        out: &mut [u8; softrdma_wire::direct::DIRECT_MAX_LEN],
    ) -> Result<Option<Transmit>, VerbsError> {
        self.enqueue_send(now, qpn, wr)?;
        let (qps, mut ctx) = split!(self, now);
        let started = qps.get_mut(&qpn).and_then(|qp| {
            // The path first: starting the WQE commits it (PSN, carried ACK).
            let path = crate::qp::Path::for_av(&ctx, &qp.attr.ah_attr)?;
            let len = qp.start_direct(&mut ctx, mem, out)?;
            Some(Transmit {
                src_ip: path.src_ip,
                dst: path.dst,
                len,
            })
        });
        if started.is_some() {
            self.leave_ready_if_done(qpn);
        }
        match started {
            Some(_) => self.rearm(qpn),
            None => self.schedule(qpn),
        }
        Ok(started)
    }

    /// After a READ request was handled (`handle_direct`): its response,
    /// if that is the QP's next datagram and goes as a response record
    /// ([`Config::direct`]), written into `buf` for the driver to push into
    /// the requester's lane at once, as it pushes a post's record (or the
    /// NAK that took its place, a packet, if the region failed its check).
    /// Otherwise nothing is taken, and the response waits for
    /// [`Endpoint::poll_transmit`].
    pub fn take_direct_answer(
        &mut self,
        now: Instant,
        qpn: Qpn,
        mem: &mut dyn Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        let (qps, mut ctx) = split!(self, now);
        let qp = qps.get_mut(&qpn)?;
        // An ACK the QP's cell owes goes first.
        qp.unowe();
        let t = qp.direct_answer(&mut ctx, mem, buf)?;
        // As after a post's record.
        self.leave_ready_if_done(qpn);
        Some(t)
    }

    /// Checks a send WR and appends it to its QP's send queue.
    fn enqueue_send(&mut self, now: Instant, qpn: Qpn, wr: SendWr) -> Result<(), VerbsError> {
        let limits = self.config.limits;
        if wr.opcode == WrOpcode::BindMw {
            self.check_bind_wr(wr.bind.as_ref())?;
        }
        let (qps, mut ctx) = split!(self, now);
        let qp = qps
            .get_mut(&qpn)
            .ok_or_else(|| VerbsError::NotFound(format!("QP {qpn:#x}")))?;
        if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            return inval(format!("post_send on a QP in {:?}", qp.state));
        }
        // A post its express cell did not take: the transport's again.
        qp.reclaim(&mut ctx);
        let op_ok = match qp.qp_type {
            QpType::Rc => true,
            QpType::Uc => matches!(
                wr.opcode,
                WrOpcode::Send
                    | WrOpcode::SendWithImm
                    | WrOpcode::SendWithInv
                    | WrOpcode::RdmaWrite
                    | WrOpcode::RdmaWriteWithImm
                    | WrOpcode::LocalInv
                    | WrOpcode::BindMw
            ),
            QpType::Ud => matches!(wr.opcode, WrOpcode::Send | WrOpcode::SendWithImm),
            // IBTA annex A14 has no XRC FLUSH or ATOMIC WRITE opcodes.
            QpType::XrcSend => wr.opcode != WrOpcode::AtomicWrite,
            QpType::XrcRecv => false,
        };
        if !op_ok {
            return inval(format!(
                "{:?} is not valid on a {:?} QP",
                wr.opcode, qp.qp_type
            ));
        }
        match &wr.inline {
            Some(d) if d.len() > limits.max_inline as usize => {
                return inval(format!("{} inline bytes > {}", d.len(), limits.max_inline));
            }
            Some(_) => {}
            None => {
                if wr.sgl.len() > qp.cap.max_send_sge.max(1) as usize {
                    return inval(format!(
                        "{} SGEs > max_send_sge {}",
                        wr.sgl.len(),
                        qp.cap.max_send_sge
                    ));
                }
            }
        }
        let len = wr.length();
        if len > u64::from(limits.max_msg_sz) {
            return inval(format!("message of {len} bytes > {}", limits.max_msg_sz));
        }
        if wr.opcode.is_atomic() && (len != 8 || !wr.remote_addr.is_multiple_of(8)) {
            return inval("atomics need one 8-byte SGE and an 8-byte aligned remote address");
        }
        if wr.opcode == WrOpcode::AtomicWrite && (len != 8 || !wr.remote_addr.is_multiple_of(8)) {
            return inval("an atomic write carries 8 bytes to an 8-byte aligned address");
        }
        if qp.qp_type == QpType::Ud && wr.ud.is_none() {
            return inval("UD send without an address handle");
        }
        if qp.sq.len() - qp.internal_wqes >= qp.cap.max_send_wr as usize {
            return Err(VerbsError::NoMemory(format!(
                "send queue full ({} WRs)",
                qp.cap.max_send_wr
            )));
        }
        let signaled = wr.flags.contains(SendFlags::SIGNALED);
        qp.sq.push_back(SendWqe {
            wr,
            len: len as u32,
            signaled,
            started: false,
            first_psn: Psn::default(),
            last_psn: Psn::default(),
            npkts: 0,
            next_pkt: 0,
            error: None,
            peer: false,
            offer: None,
            tm: None,
        });
        if qp.state == QpState::Err {
            qp.flush(&mut ctx);
        }
        Ok(())
    }

    /// Posts a receive WR to a QP's own receive queue.
    pub fn post_recv(&mut self, now: Instant, qpn: Qpn, wr: RecvWr) -> Result<(), VerbsError> {
        let (qps, mut ctx) = split!(self, now);
        let qp = qps
            .get_mut(&qpn)
            .ok_or_else(|| VerbsError::NotFound(format!("QP {qpn:#x}")))?;
        if qp.srq.is_some() || qp.qp_type.is_xrc() {
            return inval("the QP uses an SRQ; post to the SRQ");
        }
        if qp.state == QpState::Reset {
            return inval("post_recv on a QP in Reset");
        }
        if wr.sgl.len() > qp.cap.max_recv_sge as usize {
            return inval(format!(
                "{} SGEs > max_recv_sge {}",
                wr.sgl.len(),
                qp.cap.max_recv_sge
            ));
        }
        if qp.rq.len() >= qp.cap.max_recv_wr as usize {
            return Err(VerbsError::NoMemory(format!(
                "receive queue full ({} WRs)",
                qp.cap.max_recv_wr
            )));
        }
        qp.rq.push_back(wr);
        if qp.state == QpState::Err {
            qp.flush(&mut ctx);
        }
        if qp.recv_posted() {
            self.schedule(qpn);
        } else {
            self.rearm(qpn);
        }
        Ok(())
    }

    /// Records `qpn`'s timers after something ran on it.
    fn rearm(&mut self, qpn: Qpn) {
        match self.qps.get_mut(&qpn) {
            Some(qp) => rearm_qp(&mut self.timers, qp),
            None => self.timers.set(qpn, None),
        }
    }

    /// Queues `qpn` to transmit, after something ran on it (its timers may
    /// have moved too).
    fn schedule(&mut self, qpn: Qpn) {
        match self.qps.get_mut(&qpn) {
            Some(qp) => queue_ready(&mut self.timers, &mut self.ready, qp),
            None => self.timers.set(qpn, None),
        }
    }

    // ---- I/O ----

    /// Processes one received datagram. Malformed or unwanted packets are
    /// dropped and counted in [`Stats`]; nothing panics.
    pub fn handle_datagram(&mut self, now: Instant, d: &Datagram<'_>, mem: &mut dyn Memory) {
        self.handle(now, d, mem, true);
    }

    /// Like [`Endpoint::handle_datagram`], for a datagram from a link that
    /// cannot damage it in flight (shared memory between the processes of
    /// one host): the ICRC its sender computed over these very bytes is not
    /// checked again. Everything else (headers, keys, PSNs, bounds) is.
    pub fn handle_datagram_unchecked_icrc(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        mem: &mut dyn Memory,
    ) {
        self.handle(now, d, mem, false);
    }

    /// Handles a direct record off a same-host lane
    /// ([`softrdma_wire::direct`]) as the packet (and carried ACK) it
    /// stands for: through the QP's lent responder if it takes it
    /// ([`Express::exec`], raising the notifications it fired), else by
    /// the transport.
    pub fn handle_direct(&mut self, now: Instant, d: &Datagram<'_>, mem: &mut dyn Memory) {
        // A one-packet SEND or WRITE, read in place: no `Packet` built.
        let r = match self.config.express {
            true => softrdma_wire::direct::read_request(d.payload),
            false => None,
        };
        // Through the lent responder, which counts it.
        if let Some(r) = &r
            && let Some(qp) = self.qps.get_mut(&r.dest_qp)
            && let Some(x) = &qp.express
            && let Some(done) = x.exec(now, d, r, mem, true)
        {
            for cq in done.fired.into_iter().flatten() {
                self.events.push_back(Event::CompletionNotify(cq));
            }
            queue_ready(&mut self.timers, &mut self.ready, qp);
            return;
        }
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += d.payload.len() as u64;
        self.stats.rx_direct += 1;
        if let Some(r) = &r
            && self.direct_request(now, d, r, mem)
        {
            return;
        }
        match softrdma_wire::direct::read(d.payload) {
            Ok(pkt) => self.handle_packet(now, d, &pkt, mem, false),
            Err(_) => self.stats.drop_malformed += 1,
        }
    }

    fn handle(&mut self, now: Instant, d: &Datagram<'_>, mem: &mut dyn Memory, icrc: bool) {
        self.stats.rx_packets += 1;
        self.stats.rx_bytes += d.payload.len() as u64;
        if icrc && !self.icrc_ok(d) {
            self.stats.drop_bad_icrc += 1;
            return;
        }
        // A lane (no ICRC to check) may carry ACKs on requests (`LaneAck`).
        let parsed = if icrc {
            Packet::parse(d.payload)
        } else {
            Packet::parse_lane(d.payload)
        };
        match parsed {
            Ok(pkt) => self.handle_packet(now, d, &pkt, mem, icrc),
            Err(_) => self.stats.drop_malformed += 1,
        }
    }

    /// Handles a parsed packet of datagram `d`; `wire`: it came off a
    /// socket (not a same-host lane).
    fn handle_packet(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        pkt: &Packet<'_>,
        mem: &mut dyn Memory,
        wire: bool,
    ) {
        if wire && pkt.info.peer {
            // Peer-copy packets name memory of a process of this host: only
            // a shared-memory lane (the unchecked-ICRC entry) carries them.
            self.stats.drop_malformed += 1;
            return;
        }
        if pkt.hdr.bth.pkey & 0x7FFF != 0x7FFF {
            self.stats.drop_bad_pkey += 1;
            return;
        }
        let qpn = pkt.hdr.bth.dest_qp;
        if qpn == crate::types::MULTICAST_QPN {
            self.deliver_mcast(now, d, pkt, mem);
            return;
        }
        let (qps, mut ctx) = split!(self, now);
        let Some(qp) = qps.get_mut(&qpn) else {
            ctx.stats.drop_unknown_qpn += 1;
            return;
        };
        let ty_ok = matches!(
            (pkt.info.transport, qp.qp_type),
            (Transport::Rc, QpType::Rc)
                | (Transport::Uc, QpType::Uc)
                | (Transport::Ud, QpType::Ud)
                | (Transport::Xrc, QpType::XrcSend | QpType::XrcRecv)
        );
        if !ty_ok {
            ctx.stats.drop_bad_state += 1;
            return;
        }
        if qp.qp_type != QpType::Ud && !from_peer(qp, ctx.config, d) {
            ctx.stats.drop_bad_addr += 1;
            return;
        }
        if pkt.info.is_request() {
            qp.reclaim_responder(&mut ctx);
            // Off a lane, the common request takes the express path.
            let express = !wire && ctx.config.express && qp.express_request(&mut ctx, mem, pkt);
            if !express {
                let udp_len = d.payload.len();
                qp.handle_request(&mut ctx, mem, pkt, d.src.ip(), d.dst_ip, udp_len);
            }
            // Then the ACK it carries, as the lane's next packet (only an RC
            // request on an RC QP gets here with one: `parse_lane`, `ty_ok`).
            if let Some(a) = pkt.hdr.lane_ack {
                qp.carried_ack(&mut ctx, mem, a);
            }
        } else if matches!(qp.qp_type, QpType::Rc | QpType::XrcSend) {
            if !qp.settle(&mut ctx, pkt) {
                qp.handle_response(&mut ctx, mem, pkt);
            }
        } else {
            ctx.stats.drop_bad_state += 1;
            return;
        }
        qp.lend(&ctx);
        self.schedule(qpn);
    }

    /// Executes record request `r` of datagram `d` by the responder's
    /// express path, with the ACK it carries, if an RC QP of this endpoint
    /// takes it there (true). False leaves everything as it was, for
    /// `handle_packet` to check and answer the same record as a `Packet`
    /// (drops and their counters included).
    fn direct_request(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        r: &softrdma_wire::direct::DirectRequest<'_>,
        mem: &mut dyn Memory,
    ) -> bool {
        let qpn = r.dest_qp;
        let (qps, mut ctx) = split!(self, now);
        let Some(qp) = qps.get_mut(&qpn) else {
            return false;
        };
        if qp.qp_type != QpType::Rc || !from_peer(qp, ctx.config, d) {
            return false;
        }
        // The responder's state is the transport's again.
        qp.reclaim_responder(&mut ctx);
        let req = crate::qp::ExpressReq::of_record(r);
        if !qp.express_exec(&mut ctx, mem, &req) {
            return false;
        }
        // Its carried ACK too (`ExpressReq::carried`).
        ctx.stats.rx_in_place += 1;
        qp.lend(&ctx);
        // `schedule` with the QP in hand: its two lookups were ~40
        // instructions of each record (callgrind of `ib_send_lat`).
        queue_ready(&mut self.timers, &mut self.ready, qp);
        true
    }

    /// A UD packet to a multicast group: every attached QP gets a copy.
    fn deliver_mcast(
        &mut self,
        now: Instant,
        d: &Datagram<'_>,
        pkt: &Packet<'_>,
        mem: &mut dyn Memory,
    ) {
        let members = self.mcast.get(&d.dst_ip).cloned().unwrap_or_default();
        if members.is_empty() || pkt.info.transport != Transport::Ud {
            self.stats.drop_unknown_qpn += 1;
            return;
        }
        let from_self = self.config.gids.contains(&d.src.ip());
        let src_qp = pkt.hdr.deth.map_or(0, |h| h.src_qp);
        for (qpn, block_self) in members {
            if block_self && from_self && src_qp == qpn {
                continue;
            }
            let (qps, mut ctx) = split!(self, now);
            if let Some(qp) = qps.get_mut(&qpn) {
                qp.handle_request(&mut ctx, mem, pkt, d.src.ip(), d.dst_ip, d.payload.len());
            }
        }
    }

    /// Writes the ICRC into the last four bytes of `pkt` (BTH..ICRC), as sent
    /// from `src_ip` to `dst` (for packets the driver frames itself, e.g. CM MADs).
    pub fn fill_icrc(&self, src_ip: IpAddr, dst: SocketAddr, pkt: &mut [u8]) {
        crate::qp::fill_icrc(&self.config, src_ip, dst, pkt);
    }

    /// Whether a received datagram's ICRC is right (always true when the
    /// configuration says not to verify).
    pub fn icrc_ok(&self, d: &Datagram<'_>) -> bool {
        if !self.config.verify_icrc {
            return true;
        }
        self.icrc_matches(d)
    }

    fn icrc_matches(&self, d: &Datagram<'_>) -> bool {
        let p = d.payload;
        if p.len() < 16 {
            return false;
        }
        let (iph, ipl) = ip_header_for_icrc(d.src.ip(), d.dst_ip, p.len());
        let udp = ip::udp_header(d.src.port(), self.config.local_port, p.len());
        let n = p.len() - 4;
        let carried = u32::from_le_bytes([p[n], p[n + 1], p[n + 2], p[n + 3]]);
        if softrdma_wire::icrc::compute(&iph[..ipl], &udp, &p[..n]) == Ok(carried) {
            return true;
        }
        // Linux rxe sends IPv4 with a non-zero, per-packet ID that the ICRC
        // covers and a UDP socket never sees: accept the packet if some ID
        // (with DF set, as rxe always sends) makes its ICRC right.
        self.config.icrc_any_ipv4_id
            && softrdma_wire::icrc::ipv4_id_and_df(&iph[..ipl], &udp, &p[..n], carried)
                .is_some_and(|(_, df)| df)
    }

    /// Writes the next datagram to send into `buf` (replacing its contents).
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        mem: &mut dyn Memory,
        buf: &mut Vec<u8>,
    ) -> Option<Transmit> {
        while let Some(qpn) = self.ready.pop_front() {
            let (qps, mut ctx) = split!(self, now);
            let Some(qp) = qps.get_mut(&qpn) else {
                continue;
            };
            qp.unowe();
            let t = qp.poll_transmit(&mut ctx, mem, buf);
            if t.is_none() {
                qp.scheduled = false;
            }
            // Sending arms the retransmission timer (`rearm`, with the QP
            // in hand rather than looked up again).
            let deadline = qp.next_timeout();
            self.timers.tell(qpn, &mut qp.timer_told, deadline);
            if t.is_some() {
                // More may follow: back of the line, for fairness between QPs.
                self.ready.push_back(qpn);
                return t;
            }
        }
        None
    }

    /// The earliest timer deadline, if any.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        let t = self.timers.earliest();
        // Every path that moves a QP's timers must tell the heap: checked by
        // the simulator's tests, which run with debug assertions.
        debug_assert_eq!(t, self.qps.values().filter_map(Qp::next_timeout).min());
        t
    }

    /// A time no later than [`Endpoint::poll_timeout`] (`None`: no timer is
    /// armed), read without putting the timers in order: `Some(t)` may be an
    /// old deadline since moved or disarmed. For a driver that only asks
    /// whether a timer may be due before it next looks, on every call.
    pub fn timeout_bound(&self) -> Option<Instant> {
        self.timers.bound()
    }

    /// Fires every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for qpn in self.timers.take_due(now) {
            let (qps, mut ctx) = split!(self, now);
            if let Some(qp) = qps.get_mut(&qpn) {
                // The heap let go of it.
                qp.timer_told = None;
                qp.handle_timeout(&mut ctx);
            }
            self.schedule(qpn);
        }
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }
}

/// Range checks on attribute values (rdma-core/kernel `ib_modify_qp` → EINVAL).
fn validate_values(
    a: &QpAttr,
    mask: QpAttrMask,
    l: &crate::config::DeviceLimits,
    ngids: usize,
) -> Result<(), VerbsError> {
    use QpAttrMask as M;
    let bad = |what: &str| inval(format!("invalid {what}"));
    if mask.contains(M::PORT) && a.port_num != 1 {
        return bad("port_num (the device has port 1 only)");
    }
    if mask.contains(M::PKEY_INDEX) && a.pkey_index != 0 {
        return bad("pkey_index (the P_Key table has one entry)");
    }
    if mask.contains(M::PATH_MTU) && a.path_mtu.bytes() > l.port_mtu.bytes() {
        return bad("path_mtu (above the port MTU)");
    }
    if mask.contains(M::TIMEOUT) && a.timeout > 31 {
        return bad("timeout (0..=31)");
    }
    if mask.contains(M::RETRY_CNT) && a.retry_cnt > 7 {
        return bad("retry_cnt (0..=7)");
    }
    if mask.contains(M::RNR_RETRY) && a.rnr_retry > 7 {
        return bad("rnr_retry (0..=7)");
    }
    if mask.contains(M::MIN_RNR_TIMER) && a.min_rnr_timer > 31 {
        return bad("min_rnr_timer (0..=31)");
    }
    if mask.contains(M::MAX_QP_RD_ATOMIC) && u32::from(a.max_rd_atomic) > l.max_qp_rd_atom {
        return bad("max_rd_atomic (above the device's max_qp_init_rd_atom)");
    }
    if mask.contains(M::MAX_DEST_RD_ATOMIC) && u32::from(a.max_dest_rd_atomic) > l.max_qp_rd_atom {
        return bad("max_dest_rd_atomic (above the device's max_qp_rd_atom)");
    }
    if mask.contains(M::AV) && usize::from(a.ah_attr.sgid_index) >= ngids {
        return bad("ah_attr.grh.sgid_index (no such GID)");
    }
    if mask.contains(M::DEST_QPN) && a.dest_qp_num > 0xFF_FFFF {
        return bad("dest_qp_num (24 bits)");
    }
    Ok(())
}

/// The QPNs an endpoint hands out: those of its member slot (bits 23..16), or
/// the whole space; never the special QPNs 0 and 1 nor the multicast QPN.
fn qpn_range(slot: u8) -> (Qpn, Qpn) {
    match slot {
        0 => (0x10, 0x00FF_FFFE),
        s => {
            let base = Qpn::from(s) << 16;
            (base.max(0x10), base | 0xFFFF.min(0x00FF_FFFE - base))
        }
    }
}

/// [`Endpoint::rearm`] of `qp`: its timers told to the heap.
fn rearm_qp(timers: &mut crate::timers::TimerHeap, qp: &mut Qp) {
    let t = qp.next_timeout();
    timers.tell(qp.qpn, &mut qp.timer_told, t);
}

/// [`Endpoint::schedule`] of `qp`: its timers told, and queued to transmit.
fn queue_ready(timers: &mut crate::timers::TimerHeap, ready: &mut VecDeque<Qpn>, qp: &mut Qp) {
    rearm_qp(timers, qp);
    if !qp.scheduled {
        qp.scheduled = true;
        ready.push_back(qp.qpn);
    }
}

/// rxe's `check_addr`: a connected QP takes packets from its peer only, to
/// the address of its own GID.
fn from_peer(qp: &Qp, config: &Config, d: &Datagram<'_>) -> bool {
    let av = &qp.attr.ah_attr;
    let local = config.gids.get(usize::from(av.sgid_index));
    av.dest_ip() == d.src.ip() && local == Some(&d.dst_ip)
}
