//! The same-host path (DESIGN §6): datagrams for the QPs of this host
//! device's member processes — this one included — go through shared-memory
//! lanes (`softrdma_shm`) instead of UDP. They are the same RoCEv2 packets
//! but for the ICRC, which they go without (`Config::fill_icrc`): the
//! receiving transport checks everything else as it checks the wire's, and
//! a capture records them as whole packets (`Shared::deliver`).
//!
//! Sending (under the transmit lock): a datagram whose destination is one of
//! the device's addresses and whose destination QPN names a member slot goes
//! to that member's inbox, through a link attached on first use (found in the
//! registry; re-checked every `LINK_CHECK_NS`). A datagram with no link
//! (another user's process, a member that cannot be attached, one too large
//! for a slot) takes UDP, as does everything when `SOFTRDMA_SHM=0`.
//!
//! Waking: a receiver about to sleep raises its inbox's doorbell flag; a
//! sender that sees it after pushing sends one small datagram to the
//! receiver's socket (steered to it by slot like any packet): that wakes its
//! progress thread, which then reads the inbox.

mod lent;
mod peer_copy;
mod place;

use super::{ACK_CHUNK_SHM, Core, Shared};
use crate::memory::HostMemory;
pub(super) use peer_copy::LaneMemory;
pub(super) use peer_copy::MrShares;
use peer_copy::{PeerCopyStats, is_peer_packet};
use place::Placements;
use softrdma_host::Registry;
use softrdma_shm::{Inbox, Outlet, PushError};
use softrdma_transport::{Datagram, GSI_QPN, MULTICAST_QPN};
use softrdma_udp::Transmit;
use softrdma_udp::steer::{dest_qpn, member_slot};
use std::cell::Cell;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// How often a link checks that its member still holds the slot (a file
/// read): a dead member's inbox is let go, a new holder's attached.
const LINK_CHECK_NS: u64 = 100_000_000;
/// After a failed attach, how long the member's traffic keeps to UDP before
/// the next try.
const RETRY_NS: u64 = 1_000_000_000;
/// How long a sender waits for room in a full lane before it drops the
/// datagram (RC retransmits it). The receiver empties a lane in tens of µs
/// when it runs; longer means it is stopped or gone.
const FULL_WAIT_NS: u64 = 5_000_000;
/// `via` of a datagram that went into a lane (not to a socket).
pub(super) const VIA_SHM: usize = usize::MAX;

/// A doorbell: a BTH with a manufacturer-specific opcode (0xC0..=0xFF are
/// never a transport's) whose destination QPN names the receiver's slot, so
/// steering delivers it like the receiver's packets; then a magic.
const DOORBELL_OPCODE: u8 = 0xC0;
const DOORBELL_MAGIC: &[u8; 8] = b"SRDMADBL";

/// Adds `n` to a counter that every writer changes under one lock (readers
/// may be anywhere: the stats dump), with a plain load and store. A locked
/// `fetch_add` waits on x86 until every earlier store reached the cache:
/// after one into a lane slot that the receiver's CPU holds, a cache-line
/// transfer (perf annotate of a same-host 64 KiB `ib_read_bw` client: the
/// instruction after such an add took 35 % of `drain_tx`'s samples).
pub(super) fn add_locked(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// This process's end of the same-host path.
#[derive(Debug)]
pub(crate) struct ShmPath {
    inbox: Inbox,
    registry: Arc<Registry>,
    slot: u8,
    generation: u64,
    port: u16,
    /// When links and lanes were last checked for dead members (ns since
    /// the engine's epoch).
    swept_at: AtomicU64,
    /// Datagrams pushed into lanes / taken from the inbox / that fell back
    /// to UDP with a link up (too large) / dropped because a lane stayed full.
    pub(crate) sent: AtomicU64,
    pub(crate) received: AtomicU64,
    /// Of those, taken by a busy poller through lent responders
    /// (`lent.rs`): written under the consumer lock.
    pub(crate) received_lent: AtomicU64,
    /// The inbox's consumer (`lent.rs`).
    consumer: softrdma_sync::SpinLock<lent::Consumer>,
    pub(crate) too_large: AtomicU64,
    pub(crate) dropped_full: AtomicU64,
    /// Doorbells sent to sleeping receivers (wake-ups caused).
    pub(crate) doorbells: AtomicU64,
    /// Inbox datagrams the progress thread (rather than an application
    /// thread polling its CQ) processed.
    pub(crate) rx_by_progress: AtomicU64,
    /// Whether QPs may use peer copy (`peer_copy.rs`).
    peer_copy: bool,
    /// Per lane: (producer incarnation, its pid), as last looked up; read
    /// and written under the engine lock only (see [`add_locked`]).
    producers: Box<[(AtomicU64, AtomicU32)]>,
    /// Per member slot: (incarnation, whether we can copy from it), as last probed.
    copyable: Mutex<Vec<(u64, bool)>>,
    pub(crate) peer_stats: PeerCopyStats,
    /// Regions shared at registration, ours and peers' (`peer_copy.rs`).
    pub(crate) mr_share: MrShares,
    /// Placement of READ data by responders (`place.rs`).
    pub(crate) place: Placements,
}

/// The transmit path's links, one per member slot (used under the transmit lock).
#[derive(Debug)]
pub(super) struct Links {
    by_slot: Vec<Link>,
}

#[derive(Debug, Default)]
enum Link {
    #[default]
    Unknown,
    Up {
        out: Outlet,
        generation: u64,
        checked_at: u64,
    },
    Down {
        retry_at: u64,
    },
}

impl Links {
    pub(super) fn new() -> Links {
        Links {
            by_slot: (0..=255).map(|_| Link::Unknown).collect(),
        }
    }

    /// The outlet to member `slot`, attached or re-checked as needed.
    fn get(&mut self, shm: &ShmPath, slot: u8, now: u64) -> Option<&Outlet> {
        let link = &mut self.by_slot[usize::from(slot)];
        let stale = match link {
            Link::Up {
                generation,
                checked_at,
                ..
            } if now.saturating_sub(*checked_at) >= LINK_CHECK_NS => {
                let current = shm.registry.inbox(slot).map(|i| i.generation);
                if current == Some(*generation) {
                    *checked_at = now;
                    false
                } else {
                    true
                }
            }
            Link::Up { .. } => false,
            Link::Down { retry_at } => now >= *retry_at,
            Link::Unknown => true,
        };
        if stale {
            *link = shm.attach(slot, now);
        }
        match link {
            Link::Up { out, .. } => Some(out),
            _ => None,
        }
    }
}

impl ShmPath {
    /// Creates this process's inbox and publishes it for the member `host`.
    /// `capturing` (`SOFTRDMA_PCAP`): this process's QPs use no peer copy,
    /// so what they send stays in packets the capture records.
    /// `peer_copy`: `EngineConfig::peer_copy` (`SOFTRDMA_PEER_COPY`).
    pub(crate) fn new(
        host: &crate::host::HostMember,
        port: u16,
        capturing: bool,
        peer_copy: bool,
    ) -> std::io::Result<ShmPath> {
        let allowed = peer_copy::allowed(peer_copy);
        let peer_copy_on = allowed && !capturing;
        let inbox = Inbox::create()?;
        host.publish_inbox(inbox.fd())?;
        // Peers may still copy from this process's memory.
        let mr_share = MrShares::new(allowed);
        let place = Placements::new(peer_copy_on && mr_share.enabled());
        Ok(ShmPath {
            inbox,
            registry: Arc::clone(host.registry()),
            slot: host.slot(),
            generation: host.generation(),
            port,
            swept_at: AtomicU64::new(0),
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            received_lent: AtomicU64::new(0),
            consumer: softrdma_sync::SpinLock::default(),
            too_large: AtomicU64::new(0),
            dropped_full: AtomicU64::new(0),
            doorbells: AtomicU64::new(0),
            rx_by_progress: AtomicU64::new(0),
            peer_copy: peer_copy_on,
            mr_share,
            place,
            producers: (0..256)
                .map(|_| (AtomicU64::new(0), AtomicU32::new(0)))
                .collect(),
            copyable: Mutex::new(vec![(0, false); 256]),
            peer_stats: PeerCopyStats::default(),
        })
    }

    /// The member slot a datagram to `dst` goes to through a lane, if it is
    /// for a QP of this host device (not QP1: CM MADs are steered by their
    /// contents; not multicast).
    fn lane_slot(
        &self,
        dst: &SocketAddr,
        pkt: &[u8],
        sockets: &super::addrs::Sockets<'_>,
    ) -> Option<u8> {
        self.slot_for(dst, dest_qpn(pkt)?, sockets)
    }

    /// The member slot whose lane carries datagrams to QP `qpn` at `dst`.
    fn slot_for(
        &self,
        dst: &SocketAddr,
        qpn: u32,
        sockets: &super::addrs::Sockets<'_>,
    ) -> Option<u8> {
        let slot = member_slot(qpn);
        let member = qpn != GSI_QPN && qpn != MULTICAST_QPN && slot != 0;
        // This host: any loopback address (every member of this registry,
        // whatever address it was given, shares the namespace's loopback),
        // or one of the device's addresses.
        let local = |ip: IpAddr| ip.to_canonical().is_loopback() || sockets.has(ip);
        (member && dst.port() == self.port && local(dst.ip())).then_some(slot)
    }

    fn attach(&self, slot: u8, now: u64) -> Link {
        let r = match self.registry.inbox(slot) {
            Some(i) => Outlet::attach(i.pid, i.fd, self.slot, self.generation)
                .map(|out| (out, i.generation)),
            None => Err(std::io::Error::other("no inbox published")),
        };
        match r {
            Ok((out, generation)) => Link::Up {
                out,
                generation,
                checked_at: now,
            },
            Err(e) => {
                if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                    eprintln!(
                        "softrdma: no shared-memory link to member slot {slot} ({e}); its traffic goes over UDP"
                    );
                }
                Link::Down {
                    retry_at: now + RETRY_NS,
                }
            }
        }
    }

    /// Lets go of the inboxes of members that died (`links`) and gives
    /// back the memory of the lanes they pushed into (this inbox's, if
    /// `inbox`: the caller holds the engine lock, the inbox's consumers'
    /// lock, so no one reads a lane while it is cleared).
    fn sweep(&self, now: u64, links: Option<&mut Links>, inbox: bool) {
        self.swept_at.store(now, Ordering::Relaxed);
        // Only the slots this process deals with are probed, each once:
        // reading all of them (`Registry::members`) cost a sweep up to
        // ~1000 system calls once the host had used every slot (callgrind
        // of an `ib_read_bw` client: 12 % of its instructions).
        let known = [const { Cell::new(None::<Option<u64>>) }; 256];
        let live = |slot: u8| {
            let seen = &known[usize::from(slot)];
            seen.get().unwrap_or_else(|| {
                let g = self.registry.live_generation(slot);
                seen.set(Some(g));
                g
            })
        };
        // Mappings of dead members' shared regions hold their memory.
        self.mr_share.forget_dead(live);
        self.place.forget_dead(live);
        if inbox {
            // The inbox's consumer clears dead lanes (a lent exec holds it
            // for one burst of records at most).
            let _consumer = self.consumer();
            // Asked afresh for each lane, after its owner is read, not from
            // the readings above (`known`): a member that joined since
            // (forked children start together) may own a lane already, and
            // wiping its lane would lose what it pushed.
            self.inbox
                .reclaim(|slot| self.registry.live_generation(slot));
        }
        if let Some(links) = links {
            for (slot, link) in links.by_slot.iter_mut().enumerate() {
                if let Link::Up { generation, .. } = link
                    && live(slot as u8) != Some(*generation)
                {
                    *link = Link::Unknown;
                }
            }
        }
    }

    /// Whether a datagram received on a socket is a doorbell (nothing for
    /// the transport: its arrival woke the receiver, which reads its inbox).
    pub(super) fn is_doorbell(pkt: &[u8]) -> bool {
        pkt.len() == 20 && pkt[0] == DOORBELL_OPCODE && &pkt[12..20] == DOORBELL_MAGIC
    }

    /// Counters for `SOFTRDMA_STATS` and `softrdma perf`.
    pub(crate) fn counters(&self) -> [(&'static str, u64); 17] {
        let p = &self.peer_stats;
        let m = &self.mr_share;
        let pl = &self.place;
        [
            ("shm_peer_placed", pl.placed.load(Ordering::Relaxed)),
            (
                "shm_peer_placed_bytes",
                pl.placed_bytes.load(Ordering::Relaxed),
            ),
            ("shm_peer_place_refused", pl.refused.load(Ordering::Relaxed)),
            ("shm_mr_shared", m.shared.load(Ordering::Relaxed)),
            ("shm_mr_share_refused", m.refused.load(Ordering::Relaxed)),
            (
                "shm_peer_copy_mapped_bytes",
                p.mapped_bytes.load(Ordering::Relaxed),
            ),
            ("shm_peer_copies", p.copies.load(Ordering::Relaxed)),
            ("shm_peer_copy_bytes", p.bytes.load(Ordering::Relaxed)),
            ("shm_peer_copy_failed", p.failed.load(Ordering::Relaxed)),
            ("shm_peer_dropped", p.dropped.load(Ordering::Relaxed)),
            (
                "shm_rx_by_progress",
                self.rx_by_progress.load(Ordering::Relaxed),
            ),
            ("shm_doorbells", self.doorbells.load(Ordering::Relaxed)),
            ("shm_tx", self.sent.load(Ordering::Relaxed)),
            (
                "shm_rx",
                self.received.load(Ordering::Relaxed) + self.received_lent.load(Ordering::Relaxed),
            ),
            ("shm_rx_lent", self.received_lent.load(Ordering::Relaxed)),
            ("shm_too_large", self.too_large.load(Ordering::Relaxed)),
            (
                "shm_dropped_full",
                self.dropped_full.load(Ordering::Relaxed),
            ),
        ]
    }
}

fn doorbell(slot: u8) -> [u8; 20] {
    let mut d = [0u8; 20];
    d[0] = DOORBELL_OPCODE;
    d[2..4].copy_from_slice(&0xFFFFu16.to_be_bytes());
    d[4..8].copy_from_slice(&(u32::from(slot) << 16).to_be_bytes());
    d[12..20].copy_from_slice(DOORBELL_MAGIC);
    d
}

impl Shared {
    /// Pushes the datagrams of the first `n` in `tx` that are for this host's
    /// members into their lanes, marking them `VIA_SHM`; then rings the
    /// receivers that asked for it.
    pub(super) fn shm_send(
        &self,
        tx: &mut super::tx::Tx,
        n: usize,
        sockets: &super::addrs::Sockets<'_>,
        now: u64,
    ) {
        let Some(shm) = &self.shm else { return };
        let super::tx::Tx {
            bufs,
            dst: dsts,
            via: vias,
            links,
            pushed,
            ..
        } = tx;
        pushed.clear();
        // In the socket's order (requests before ACKs), for the same reason.
        for i in super::tx::requests_then_acks(&bufs[..n]) {
            let (dst, pkt) = (dsts[i], &bufs[i]);
            // A peer-copy packet names memory of this host, and a request
            // carrying an ACK (`Config::lane_acks`) or a direct record (a
            // READ response) is no RoCE packet: they take a lane or nothing
            // (RC retransmits them; a peer gone for good ends in
            // RETRY_EXC_ERR), never UDP.
            let no_lane = |via: &mut usize| {
                if is_peer_packet(pkt)
                    || softrdma_wire::LaneAck::announced(pkt)
                    || softrdma_wire::direct::is_direct(pkt)
                {
                    shm.peer_stats.dropped.fetch_add(1, Ordering::Relaxed);
                    *via = VIA_SHM;
                }
            };
            let Some(slot) = shm.lane_slot(&dst, pkt, sockets) else {
                no_lane(&mut vias[i]);
                continue;
            };
            if !Outlet::fits(pkt.len()) {
                shm.too_large.fetch_add(1, Ordering::Relaxed);
                no_lane(&mut vias[i]);
                continue;
            }
            let src = SocketAddr::new(sockets.at(vias[i]).local_addr().ip(), shm.port);
            let Some(out) = links.get(shm, slot, now) else {
                no_lane(&mut vias[i]);
                continue;
            };
            self.stage(shm, out, slot, src, dst, pkt, sockets.at(vias[i]));
            if !pushed.iter().any(|&(s, _, _)| s == slot) {
                pushed.push((slot, dst, vias[i]));
            }
            vias[i] = VIA_SHM;
        }
        // Each lane's datagrams of this batch become visible at once: a
        // receiver polling meanwhile finds a request together with the ACK
        // it polls for, or neither. Seeing the request alone, it would find
        // no completion and send its own deferred ACK before its next
        // request, and a ping-pong pair (`ib_write_lat`) would fall out of
        // the lock step in which each side's poller takes the other's
        // requests (then each needs a wake-up of the peer's progress thread).
        for &(slot, dst, via) in pushed.iter() {
            if let Some(out) = links.get(shm, slot, now) {
                self.publish_lane(shm, out, slot, dst, sockets.at(via));
            }
        }
    }

    /// Makes what `out` (member `slot`'s lane) staged visible at once, and
    /// wakes its receiver if it is about to sleep.
    fn publish_lane(
        &self,
        shm: &ShmPath,
        out: &Outlet,
        slot: u8,
        dst: SocketAddr,
        via: &softrdma_udp::RoceSocket,
    ) {
        out.publish();
        if out.doorbell_wanted() {
            self.ring(shm, slot, dst, via);
        }
    }

    /// Stages `pkt` from `src` to `dst` in `out`, member `slot`'s lane
    /// (under the transmit lock), waiting up to `FULL_WAIT_NS` for room
    /// (ringing the receiver if it sleeps; `via` sends the doorbell), then
    /// dropping it: RC sends it again, as after a UDP drop.
    #[allow(clippy::too_many_arguments)]
    fn stage(
        &self,
        shm: &ShmPath,
        out: &Outlet,
        slot: u8,
        src: SocketAddr,
        dst: SocketAddr,
        pkt: &[u8],
        via: &softrdma_udp::RoceSocket,
    ) {
        let mut waited_since = None;
        loop {
            match out.stage(src, dst.ip(), pkt) {
                Ok(()) => {
                    // Under the transmit lock.
                    add_locked(&shm.sent, 1);
                    return;
                }
                Err(PushError::Full) => {
                    // What is staged must become visible to be taken.
                    out.publish();
                    let t = self.now().as_nanos();
                    let since = *waited_since.get_or_insert(t);
                    if t - since > FULL_WAIT_NS {
                        shm.dropped_full.fetch_add(1, Ordering::Relaxed);
                        return;
                    }
                    // The receiver may be asleep with its lane full.
                    if out.doorbell_wanted() {
                        self.ring(shm, slot, dst, via);
                    }
                    std::thread::yield_now();
                }
                Err(PushError::TooBig) => return,
            }
        }
    }

    /// Pushes a direct record the endpoint started at a post
    /// (`Endpoint::post_send_direct`) into its destination's lane and
    /// publishes it, before anything else of its QP is sent. Its QP's peer
    /// is a member of this host (the endpoint starts records only on QPs
    /// whose peer is on a lane): the destination QPN names its slot. With
    /// no link the record is dropped (counted), and the retransmission
    /// timer sends the message again as a packet.
    pub(super) fn push_direct(
        &self,
        tx: &mut super::tx::Tx,
        rec: &[u8],
        t: &softrdma_transport::Transmit,
        now: u64,
    ) {
        let Some(shm) = &self.shm else { return };
        let Some(qpn) = dest_qpn(rec) else { return };
        let slot = member_slot(qpn);
        let src = SocketAddr::new(t.src_ip, shm.port);
        let Some(out) = tx.links.get(shm, slot, now) else {
            shm.peer_stats.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.stage(shm, out, slot, src, t.dst, rec, &self.socket);
        self.publish_lane(shm, out, slot, t.dst, &self.socket);
    }

    /// After a READ request record was handled (`rec`, under the engine
    /// lock): its response leaves now, pushed into the requester's lane as
    /// a post pushes its record, instead of through the transmit queue at
    /// the burst's end (~1,300 instructions of the engine's a response;
    /// BENCHMARKS.md, "READs as direct records"). The transmit lock is only
    /// tried (its order is transmit, then engine): when another thread
    /// holds it, the response waits for the burst's flush as before; a
    /// thread that finds it taken meanwhile leaves its packets to the
    /// burst's flush too (`rx_shm` ends with one, or with them pending).
    fn answer_read_at_once(&self, core: &mut Core, now: softrdma_transport::Instant, rec: &[u8]) {
        let (Some(shm), Some(qpn)) = (&self.shm, dest_qpn(rec)) else {
            return;
        };
        let Ok(mut tx) = self.tx.try_lock() else {
            return;
        };
        let mut buf = std::mem::take(&mut core.answer_buf);
        let mut mem = LaneMemory { shm, slot: None };
        if let Some(t) = core.ep.take_direct_answer(now, qpn, &mut mem, &mut buf) {
            self.push_direct(&mut tx, &buf[..t.len], &t, now.as_nanos());
        }
        core.answer_buf = buf;
    }

    /// Wakes the receiver of lane `slot`: another process through its
    /// socket; in this one, the thread that reads the inbox
    /// ([`Shared::wake_inbox_reader`]).
    fn ring(&self, shm: &ShmPath, slot: u8, dst: SocketAddr, via: &softrdma_udp::RoceSocket) {
        shm.doorbells.fetch_add(1, Ordering::Relaxed);
        if slot == shm.slot {
            self.wake_inbox_reader();
            return;
        }
        let d = doorbell(slot);
        let _ = via.send_batch(&[Transmit { dst, payload: &d }]);
    }

    /// Reads the inbox: processes what arrived like [`Shared::rx_burst`]
    /// does a socket's datagrams (the same checks, ACKs sent every chunk).
    /// The inbox's one consumer is the engine lock's holder: every read of
    /// it (`shm_poll_locked`) and every clearing of a lane (`sweep`) is
    /// under that lock, which the delivery needs anyway. The receive lock,
    /// taken before it, was a second lock's take and release on each
    /// message's path, and on every empty poll. `now`: see
    /// [`Shared::rx_burst`]. `then` runs under the engine lock of the last
    /// chunk, if anything was delivered (a busy poller polls its CQ there).
    pub(super) fn rx_shm(
        &self,
        mode: super::rx::Rx,
        now: u64,
        mut then: Option<&mut dyn FnMut(&mut Core)>,
    ) -> usize {
        // An empty inbox costs a spinning poller a few loads, not the
        // engine lock and the bookkeeping after it.
        if !self.shm.as_ref().is_some_and(|s| s.inbox.has_work()) {
            return 0;
        }
        let mut now = now;
        let mut total = 0;
        let mut requests = 0;
        loop {
            let got = {
                let (mut core, fresh) = self.lock_fresh(&self.core, now);
                now = fresh;
                let t = softrdma_transport::Instant::from_nanos(now);
                let got = self.shm_poll_locked(&mut core, t, ACK_CHUNK_SHM, &mut requests);
                // Under the engine lock, the inbox's consumers' lock.
                if requests > 0 {
                    add_locked(&self.rx_requests_inbox, std::mem::take(&mut requests));
                }
                if mode.is_progress()
                    && let Some(shm) = &self.shm
                {
                    add_locked(&shm.rx_by_progress, got as u64);
                }
                if got < ACK_CHUNK_SHM
                    && got + total > 0
                    && let Some(then) = then.take()
                {
                    then(&mut core);
                }
                self.after(&mut core);
                got
            };
            total += got;
            if got < ACK_CHUNK_SHM {
                break;
            }
            self.send_soon();
        }
        if total == 0 {
            return 0;
        }
        // A READ answered at once held the transmit lock: what others left
        // it meanwhile (`tx_again`) goes now, as after a post's record.
        self.after_drain();
        if mode.sends_answers() {
            self.send_soon();
        } else {
            self.set_pending(now);
        }
        total
    }

    /// Processes up to `max` inbox datagrams under the engine lock (the
    /// inbox's one consumer: `rx_shm`); counts requests.
    ///
    /// The receive path also calls this before a CM MAD off the socket: a
    /// member's MADs take UDP and its other packets its lane, and what it
    /// pushed before sending a MAD (the ACK before a DREQ) must be processed
    /// before the MAD is, as on one wire.
    pub(super) fn shm_poll_locked(
        &self,
        core: &mut Core,
        now: softrdma_transport::Instant,
        max: usize,
        requests: &mut u64,
    ) -> usize {
        let Some(shm) = &self.shm else { return 0 };
        let _consumer = shm.consumer();
        let got = shm.inbox.poll(max, |slot, e| {
            let dg = Datagram {
                src: e.src,
                dst_ip: e.dst_ip,
                payload: e.data,
            };
            *requests += u64::from(self.deliver(core, now, &dg, Some(slot)));
        });
        // Under the engine lock.
        add_locked(&shm.received, got as u64);
        got
    }

    /// Hands one received datagram to the CM or the transport (after the
    /// capture); returns whether it is a request (see `rx_requests`).
    /// `lane`: the member slot of the lane it came through (its ICRC is
    /// not checked: its sender computed it over the same bytes in this
    /// host's memory; peer copies read from that member); `None`: it came
    /// off a socket.
    pub(super) fn deliver(
        &self,
        core: &mut Core,
        now: softrdma_transport::Instant,
        dg: &Datagram<'_>,
        lane: Option<u8>,
    ) -> bool {
        // Under the engine lock.
        add_locked(&self.delivered, 1);
        if let Some(c) = &self.capture {
            let dst = SocketAddr::new(dg.dst_ip, self.socket.local_addr().port());
            if lane.is_some()
                && (dg.payload.len() >= 16 || softrdma_wire::direct::is_direct(dg.payload))
            {
                // Its sender left the ICRC out (`Config::fill_icrc`), and may
                // have had it carry an ACK (`Config::lane_acks`): the capture
                // gets the packets as the wire would carry them.
                for mut whole in softrdma_wire::lane_packets(dg.payload) {
                    softrdma_transport::fill_icrc_between(dg.src, dst, &mut whole);
                    c.record(dg.src, dst, &whole);
                }
            } else {
                c.record(dg.src, dst, dg.payload);
            }
        }
        if crate::cm::is_gsi(dg.payload) {
            if !self.hold_dreq(core, now, dg) {
                self.handle_gsi(core, now, dg);
            }
        } else if let (Some(slot), Some(shm)) = (lane, &self.shm) {
            let mut mem = LaneMemory {
                shm,
                slot: Some(slot),
            };
            if softrdma_wire::direct::is_direct(dg.payload) {
                core.ep.handle_direct(now, dg, &mut mem);
                let read = Some(softrdma_wire::Opcode::RC_RDMA_READ_REQUEST);
                if softrdma_wire::direct::opcode(dg.payload) == read {
                    self.answer_read_at_once(core, now, dg.payload);
                }
                return !super::rx::is_rc_response(dg.payload);
            }
            core.ep.handle_datagram_unchecked_icrc(now, dg, &mut mem);
        } else {
            core.ep.handle_datagram(now, dg, &mut HostMemory);
        }
        !super::rx::is_rc_response(dg.payload)
    }

    /// The progress thread's housekeeping, every `LINK_CHECK_NS`: see
    /// `ShmPath::sweep` (skipping what a busy thread holds the lock of).
    pub(super) fn shm_sweep(&self) {
        let Some(shm) = &self.shm else { return };
        let now = self.now().as_nanos();
        if now.saturating_sub(shm.swept_at.load(Ordering::Relaxed)) < LINK_CHECK_NS {
            return;
        }
        // Only tried: a sweep skips what a busy thread holds. The engine
        // lock after the transmit lock, as everywhere.
        let mut tx = self.tx.try_lock().ok();
        let core = self.core.try_lock().ok();
        shm.sweep(now, tx.as_mut().map(|t| &mut t.links), core.is_some());
        drop(core);
        let held_tx = tx.is_some();
        drop(tx);
        if held_tx {
            self.after_tx_lock();
        }
    }

    /// Members died (the CM's liveness check found them): their lanes and
    /// links go now, before their peers learn of it (DISCONNECTED), so a
    /// survivor that then counts its memory finds it back. The caller holds
    /// no engine lock (the order is receive, transmit, then engine).
    pub(super) fn shm_sweep_now(&self) {
        let _rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        self.shm_sweep_rx_held();
    }

    /// [`Shared::shm_sweep_now`] for a caller that holds the receive lock
    /// (the receive path, told by ICMP that peers are gone).
    pub(super) fn shm_sweep_rx_held(&self) {
        let Some(shm) = &self.shm else { return };
        let now = self.now().as_nanos();
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        let core = self.core.lock().unwrap_or_else(|p| p.into_inner());
        shm.sweep(now, Some(&mut tx.links), true);
        drop(core);
        drop(tx);
        self.after_tx_lock();
    }

    /// After holding the transmit lock outside `drain_tx`: a thread that
    /// found it taken left its packets to the holder (`send_soon`), us.
    fn after_tx_lock(&self) {
        if self.tx_again.load(Ordering::SeqCst) {
            self.send_soon();
        }
    }

    /// The progress thread is about to sleep in `epoll_wait`: raise the
    /// doorbell flag. Returns false if datagrams arrived meanwhile (do not
    /// sleep).
    pub(super) fn shm_may_sleep(&self) -> bool {
        self.shm.as_ref().is_none_or(|s| !s.inbox.want_doorbell())
    }

    /// A thread blocked for a completion event polls the inbox (it took
    /// the socket, `receiving.rs`): senders stop ringing. It raises the
    /// flag again before it sleeps, and handing the socket back raises it
    /// for the progress thread (`update_watch`).
    pub(super) fn shm_awake(&self) {
        if let Some(s) = &self.shm {
            s.inbox.awake();
        }
    }

    /// The progress thread is awake again: senders stop ringing, unless a
    /// thread waiting for a completion event has the socket (and sleeps on
    /// it, with the flag up: `receiving.rs`). Decided under the lock that
    /// hands the socket over, so the flag never drops under a sleeper.
    pub(super) fn shm_awake_if_watching(&self) {
        if let Some(s) = &self.shm {
            let w = self.watching.lock().unwrap_or_else(|p| p.into_inner());
            if *w {
                s.inbox.awake();
            }
        }
    }
}
