//! The transmit path: a post's doorbell, the flushes of what the endpoint
//! and the CM queued, and the batched (GSO) socket sends, kept apart from
//! the receive path and the public API.

use super::shm::VIA_SHM;
use super::{BATCH, Core, Shared, set_flag};
use crate::memory::HostMemory;
use softrdma_transport::Instant;
use softrdma_transport::SendWr;
use softrdma_udp::{RoceSocket, Transmit};
use std::net::SocketAddr;
use std::sync::MutexGuard;
use std::sync::atomic::Ordering;

/// Posted bytes a busy poller's next call may gather before they are sent anyway.
const DEFER_MAX_BYTES: usize = 256 << 10;
/// BTH opcode of an RC ACK/NAK.
const RC_ACKNOWLEDGE: u8 = 0x11;

#[derive(Debug)]
pub(super) struct Tx {
    pub(super) bufs: Vec<Vec<u8>>,
    pub(super) dst: Vec<SocketAddr>,
    /// Each datagram's source address (for its ICRC).
    pub(super) src: Vec<std::net::IpAddr>,
    /// Which socket (index of `Shared::sockets`) sends each datagram: the
    /// one bound to its source address.
    pub(super) via: Vec<usize>,
    /// Links to this host's members (the same-host path).
    pub(super) links: super::shm::Links,
    /// The endpoint builds packets without their ICRC (`Config::fill_icrc`):
    /// it is filled here for those that leave through a socket.
    pub(super) icrc_here: bool,
    /// (slot, destination, socket) of the lanes a batch pushed to (kept to
    /// spare an allocation per batch).
    pub(super) pushed: Vec<(u8, SocketAddr, usize)>,
    /// The device's sockets as of the last batch, with their generation
    /// (`Shared::sockets_cached`).
    pub(super) sockets: Option<(u64, super::addrs::More)>,
    /// Where an express post writes its record (`Engine::post_express`),
    /// kept between posts; made by the first.
    pub(super) record: Option<Box<[u8; softrdma_wire::direct::DIRECT_MAX_LEN]>>,
}

impl Shared {
    /// After a post, still under the engine lock (`core`, read at `now`):
    /// sends what it queued now, or leaves it for a busy poller's next call
    /// (see [`Engine::post_send_many`](super::Engine::post_send_many)).
    /// `idle`: the QP's send queue was empty before the post.
    ///
    /// Sending now builds the packets in the same hold of the engine lock
    /// when the transmit lock is free (the lock order is transmit, then
    /// engine: only a try): one lock, clock read and `after` fewer on every
    /// ping-pong message's path.
    pub(super) fn doorbell(
        &self,
        mut core: MutexGuard<'_, Core>,
        bytes: usize,
        now: Instant,
        idle: bool,
    ) {
        let ns = now.as_nanos();
        // A burst of posts from a spinning application: the previous call
        // was a post a moment ago, or the QP has requests in flight, and
        // the last empty poll was not long before.
        let follows_post = set_flag(&self.posted_since_poll, true, Ordering::Relaxed);
        let burst = super::policy::defers_post(
            self.last_call.load(Ordering::Relaxed),
            self.last_poll.load(Ordering::Relaxed),
            ns,
            follows_post || !idle,
        );
        self.note_busy(ns);
        if self.busy_poll && burst {
            let queued = self.deferred_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
            if queued < DEFER_MAX_BYTES {
                self.after(&mut core);
                drop(core);
                set_flag(&self.posts_deferred, true, Ordering::Relaxed);
                self.set_pending(ns);
                self.ensure_tick(ns);
                return;
            }
        }
        match self.tx.try_lock() {
            Ok(mut tx) => {
                self.drain_tx_from(&mut tx, Some((core, now)));
                drop(tx);
                self.after_drain();
            }
            Err(_) => {
                self.after(&mut core);
                drop(core);
                self.send_soon();
            }
        }
        // Sending a large batch takes a while: that was device work too.
        self.note_busy(self.now().as_nanos());
    }

    /// Sends what a busy poller or a post left for later, if anything (hands
    /// it to a thread already sending, like [`Shared::send_soon`]).
    pub(super) fn flush_pending(&self) {
        if self.tx_pending.load(Ordering::Relaxed) {
            self.send_soon();
        }
    }

    /// Like `flush_pending`, but returns only once it was sent (before a QP
    /// may go away with its queued answers).
    pub(super) fn flush_pending_sync(&self) {
        if self.tx_pending.load(Ordering::Relaxed) {
            self.flush_tx();
        }
    }

    /// Builds and sends everything the endpoint wants to transmit; waits for
    /// a thread that is sending already.
    pub(super) fn flush_tx(&self) {
        let mut tx = self.tx.lock().unwrap_or_else(|p| p.into_inner());
        self.drain_tx(&mut tx);
        drop(tx);
        self.after_drain();
    }

    /// Builds and sends everything the endpoint wants to transmit, or, if
    /// another thread is doing that right now, has it do this too (it looks
    /// at `tx_again` after releasing the transmit lock) instead of waiting for
    /// it: waiting costs a futex sleep and a context switch, and the packets
    /// would leave no sooner.
    pub(super) fn send_soon(&self) {
        let mut tx = match self.tx.try_lock() {
            Ok(tx) => tx,
            Err(_) => {
                self.tx_again.store(true, Ordering::SeqCst);
                // The holder sees `tx_again` after it releases the lock;
                // or it released it already, before the flag went up.
                let Ok(tx) = self.tx.try_lock() else {
                    return;
                };
                tx
            }
        };
        self.drain_tx(&mut tx);
        drop(tx);
        self.after_drain();
    }

    /// After a drain released the transmit lock: sends what threads that
    /// found it taken left to it (`tx_again`).
    pub(super) fn after_drain(&self) {
        while self.tx_again.load(Ordering::SeqCst) {
            let Ok(mut tx) = self.tx.try_lock() else {
                // Its holder looks at the flag after releasing it.
                return;
            };
            self.drain_tx(&mut tx);
        }
    }

    /// The body of every flush, under the transmit lock.
    fn drain_tx(&self, tx: &mut Tx) {
        self.drain_tx_from(tx, None);
    }

    /// [`Shared::drain_tx`], its first batch built under `held` (the engine
    /// lock, taken at the time given) if the caller holds it already.
    fn drain_tx_from(&self, tx: &mut Tx, held: Option<(MutexGuard<'_, Core>, Instant)>) {
        // Everything queued so far is sent below (whoever set these flags
        // queued its packets before setting them). Each is written only if
        // set (`set_flag`).
        set_flag(&self.tx_again, false, Ordering::SeqCst);
        set_flag(&self.tx_pending, false, Ordering::Relaxed);
        set_flag(&self.posts_deferred, false, Ordering::Relaxed);
        if self.deferred_bytes.load(Ordering::Relaxed) != 0 {
            self.deferred_bytes.store(0, Ordering::Relaxed);
        }
        let mut cached = tx.sockets.take();
        self.drain_batches(tx, held, &mut cached);
        tx.sockets = cached;
    }

    /// [`Shared::drain_tx_from`]'s batches.
    fn drain_batches(
        &self,
        tx: &mut Tx,
        mut held: Option<(MutexGuard<'_, Core>, Instant)>,
        cached: &mut Option<(u64, super::addrs::More)>,
    ) {
        let sockets = self.sockets_cached(cached);
        loop {
            tx.dst.clear();
            tx.src.clear();
            tx.via.clear();
            let now = {
                let (mut core, now) = match held.take() {
                    Some(h) => h,
                    None => {
                        let core = self.lock();
                        // Read under the lock: what this queues is stamped
                        // with it, and a CQ's stamps follow the lock's order.
                        let now = self.now();
                        (core, now)
                    }
                };
                // ACKs lent responders owe, if no post carried them.
                self.schedule_lent_owed(&mut core);
                // With the same-host path, READs can offer placement.
                let mut host = HostMemory;
                let mut lane;
                let mem: &mut dyn softrdma_transport::Memory = match &self.shm {
                    Some(shm) => {
                        lane = super::shm::LaneMemory { shm, slot: None };
                        &mut lane
                    }
                    None => &mut host,
                };
                while tx.dst.len() < BATCH {
                    let Some((src, dst, pkt)) = core.gsi_out.pop_front() else {
                        break;
                    };
                    let i = tx.dst.len();
                    tx.bufs[i].clear();
                    tx.bufs[i].extend_from_slice(&pkt);
                    tx.dst.push(dst);
                    tx.src.push(src);
                    tx.via.push(sockets.index_of(src));
                }
                while tx.dst.len() < BATCH {
                    let i = tx.dst.len();
                    match core.ep.poll_transmit(now, mem, &mut tx.bufs[i]) {
                        Some(t) => {
                            tx.bufs[i].truncate(t.len);
                            tx.dst.push(t.dst);
                            tx.src.push(t.src_ip);
                            tx.via.push(sockets.index_of(t.src_ip));
                        }
                        None => break,
                    }
                }
                self.after(&mut core);
                now
            };
            let n = tx.dst.len();
            if n == 0 {
                return;
            }
            if let Some(c) = &self.capture {
                for i in 0..n {
                    c.record(sockets.at(tx.via[i]).local_addr(), tx.dst[i], &tx.bufs[i]);
                }
            }
            // This host's members' datagrams through their lanes.
            self.shm_send(tx, n, &sockets, now.as_nanos());
            if tx.icrc_here {
                let port = self.socket.local_addr().port();
                for i in (0..n).filter(|&i| tx.via[i] != VIA_SHM) {
                    let src = SocketAddr::new(tx.src[i], port);
                    softrdma_transport::fill_icrc_between(src, tx.dst[i], &mut tx.bufs[i]);
                }
            }
            // Each socket's datagrams in their order, the device socket's
            // first (most datagrams have no other source).
            let last = tx.via.iter().copied().filter(|&v| v != VIA_SHM).max();
            for via in 0..=last.unwrap_or(0) {
                if last.is_none() {
                    break;
                }
                if tx.via.contains(&via) {
                    self.send_via(tx, n, sockets.at(via), via);
                }
            }
            if n < BATCH {
                return;
            }
        }
    }

    /// Sends the datagrams of the first `n` in `tx` that leave through the
    /// socket at `via` (index of `Shared::sockets`).
    fn send_via(&self, tx: &Tx, n: usize, socket: &RoceSocket, via: usize) {
        let mine = |i: &usize| tx.via[*i] == via;
        let batch: Vec<Transmit<'_>> = requests_then_acks(&tx.bufs[..n])
            .filter(mine)
            .map(|i| Transmit {
                dst: tx.dst[i],
                payload: &tx.bufs[i],
            })
            .collect();
        // The fault injector sends what it holds back through a copy
        // of the device socket: only that socket's datagrams pass it.
        let batch = match &self.faults {
            Some(f) if via == 0 => f.apply(batch),
            _ => batch,
        };
        let mut sent = 0;
        let mut stalls = 0;
        while sent < batch.len() {
            match socket.send_batch(&batch[sent..]) {
                Ok(0) => {
                    // Socket buffer full: wait briefly for room; after that,
                    // drop (RC retransmits; UD is unreliable by contract).
                    stalls += 1;
                    if stalls > 100 {
                        break;
                    }
                    wait_writable(socket, 10);
                }
                Ok(k) => sent += k,
                Err(_) => break,
            }
        }
    }
}

/// The indices of `bufs` (datagrams built for one batch), requests and
/// responses first, plain ACKs after them, each group in its order. On
/// loopback every datagram is delivered inside the send call (and a lane's
/// batch is read in order), so an ACK put first would delay the request a
/// ping-pong peer waits for: its poller would return the ACK's completion
/// and leave before the request came. (An ACK only ever moves later, so it
/// never overtakes the READ response it follows.)
pub(super) fn requests_then_acks(bufs: &[Vec<u8>]) -> impl Iterator<Item = usize> + '_ {
    let is_ack = |b: &Vec<u8>| b.first() == Some(&RC_ACKNOWLEDGE);
    let pick = move |acks: bool| {
        bufs.iter()
            .enumerate()
            .filter(move |(_, b)| is_ack(b) == acks)
            .map(|(i, _)| i)
    };
    pick(false).chain(pick(true))
}

/// Payload bytes a send WR's request packets carry: none for a READ or an
/// atomic, however much they fetch (a READ's length would fill
/// `DEFER_MAX_BYTES` in four 64 KiB posts and send each few alone).
pub(super) fn wr_bytes(wr: &SendWr) -> usize {
    if wr.opcode.is_read_or_atomic() {
        return 0;
    }
    match &wr.inline {
        Some(d) => d.len(),
        None => wr.sgl.iter().map(|s| s.length as usize).sum(),
    }
}

fn wait_writable(sock: &RoceSocket, ms: i32) {
    use std::os::fd::AsRawFd;
    let mut p = libc::pollfd {
        fd: sock.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    // SAFETY: `p` is one valid pollfd for the duration of the call.
    unsafe {
        libc::poll(&mut p, 1, ms);
    }
}

#[cfg(test)]
mod tests {
    use super::wr_bytes;
    use softrdma_transport::{SendWr, Sge, WrOpcode};

    #[test]
    fn a_post_counts_the_bytes_its_requests_carry() {
        let sge = |length| Sge {
            addr: 0x1000,
            length,
            lkey: 1,
        };
        let with = |op, sgl: Vec<Sge>| {
            let mut wr = SendWr::new(0, op);
            wr.sgl = sgl.into();
            wr
        };
        assert_eq!(
            wr_bytes(&with(WrOpcode::RdmaWrite, vec![sge(65536), sge(10)])),
            65546
        );
        assert_eq!(wr_bytes(&with(WrOpcode::Send, vec![sge(8)])), 8);
        // A READ's request carries nothing, however much it fetches; an
        // atomic's only its operands.
        assert_eq!(wr_bytes(&with(WrOpcode::RdmaRead, vec![sge(65536)])), 0);
        assert_eq!(
            wr_bytes(&with(WrOpcode::AtomicFetchAndAdd, vec![sge(8)])),
            0
        );
        let mut inline = SendWr::new(0, WrOpcode::Send);
        inline.inline = Some(vec![0; 12]);
        assert_eq!(wr_bytes(&inline), 12);
    }
}
