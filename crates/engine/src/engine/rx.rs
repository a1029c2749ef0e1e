//! The receive path: bursts off the device socket and the multicast group
//! sockets, QP1 (CM) packets and ICMP "port unreachable" reports, kept apart
//! from the transmit path and the public API.

use super::forward::{ForwardTo, Pending};
use super::membership::{Noticed, Verdict};
use super::{BATCH, Core, Shared, policy};
use crate::cm::EpQps;
use crate::memory::HostMemory;
use softrdma_transport::{Datagram, Instant};
use softrdma_udp::{RecvBatch, RoceSocket};
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// One datagram's context for [`Shared::rx_one`].
pub(super) struct RxOne<'a> {
    pub(super) noticed: &'a mut Noticed,
    /// Request packets handled (`Shared::rx_requests`).
    pub(super) requests: &'a mut u64,
    /// Where datagrams for other members go; None for datagrams another
    /// member forwarded here (never forwarded twice).
    pub(super) forwards: Option<&'a mut Vec<Pending>>,
}

/// Received datagrams processed between two sends of their answers.
const ACK_CHUNK: usize = 32;

/// Who runs a receive burst.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Rx {
    /// The progress thread: sends the answers at once.
    Progress,
    /// An application thread busy-polling its CQ: leaves the last answers to
    /// its caller, which hands completions over first.
    Poller,
    /// The progress thread spinning after traffic (`progress::linger`):
    /// answers at once, but reads the sockets only as often as a poller
    /// does while the lanes carry the traffic (`policy::poller_reads_socket`):
    /// an empty `recvmmsg` was most of a lingering responder's loop
    /// (`perf record` of the `ib_read_bw` server, 64 KiB over the lanes).
    Linger,
    /// The progress thread while an application that handed the socket
    /// back is expected to post (`policy::holds_answers`): leaves the
    /// answers for that post, as a poller does.
    Held,
}

impl Rx {
    /// Whether the burst sends the answers of what it processed at once
    /// (a busy poller, or the progress thread holding them, leaves them
    /// to a post).
    pub(super) fn sends_answers(self) -> bool {
        !matches!(self, Rx::Poller | Rx::Held)
    }

    /// Whether the progress thread (or a waiter standing in for it) runs
    /// the burst.
    pub(super) fn is_progress(self) -> bool {
        self != Rx::Poller
    }

    /// Whether the burst reads the sockets only every
    /// `policy::SOCKET_GAP_NS` while the lanes carry the traffic.
    fn throttles_sockets(self) -> bool {
        matches!(self, Rx::Poller | Rx::Linger)
    }
}

impl Shared {
    /// Receives what is waiting on the socket and processes it; returns
    /// datagrams handled. The answers are sent after each full batch, and
    /// after the last one too unless a busy poller runs it ([`Rx::Poller`]:
    /// then they are left to the caller, `tx_pending`).
    ///
    /// A busy poller reads the device socket only (GID 0, where its traffic
    /// is): every other socket would cost it an empty `recvmmsg` per poll.
    /// The progress thread reads them all. `now`: when the caller last read
    /// the clock (one read per poll: at ~20 ns each, the reads were a fifth
    /// of a busy poller's time, `perf record` of `ib_send_lat`).
    pub(super) fn rx_burst(&self, mode: Rx, now: u64) -> usize {
        self.rx_burst_then(mode, now, true, None)
    }

    /// [`Shared::rx_burst`], running `then` under the engine lock the
    /// inbox's last datagrams were delivered under, if any were; `inbox`:
    /// false if the caller just found the inbox empty (it is not read).
    pub(super) fn rx_burst_then(
        &self,
        mode: Rx,
        now: u64,
        inbox: bool,
        then: Option<&mut dyn FnMut(&mut Core)>,
    ) -> usize {
        let sockets = match mode {
            Rx::Poller => 1,
            Rx::Progress | Rx::Linger | Rx::Held => usize::MAX,
        };
        let shm = match inbox {
            true => self.rx_inbox_then(mode, now, then),
            false => 0,
        };
        if !mode.throttles_sockets() {
            return shm + self.rx_sockets(mode, 0, sockets);
        }
        let (socket_at, shm_at, misses) = (
            self.socket_read_at.load(Ordering::Relaxed),
            self.shm_rx_at.load(Ordering::Relaxed),
            self.socket_misses.load(Ordering::Relaxed),
        );
        if !policy::poller_reads_socket(now, socket_at, shm_at, misses) {
            return shm;
        }
        self.socket_read_at.store(now, Ordering::Relaxed);
        let got = self.rx_sockets(mode, 0, sockets);
        self.socket_misses
            .store(policy::socket_misses_after(misses, got), Ordering::Relaxed);
        shm + got
    }

    /// The same-host inbox's part of [`Shared::rx_burst`] (under the
    /// engine lock, as every reader of the inbox: `Shared::rx_shm`).
    pub(super) fn rx_inbox(&self, mode: Rx, now: u64) -> usize {
        self.rx_inbox_then(mode, now, None)
    }

    /// [`Shared::rx_inbox`] with [`Shared::rx_burst_then`]'s `then`.
    fn rx_inbox_then(&self, mode: Rx, now: u64, then: Option<&mut dyn FnMut(&mut Core)>) -> usize {
        let shm = self.rx_shm(mode, now, then);
        if shm > 0 {
            self.shm_rx_at.store(now, Ordering::Relaxed);
        }
        shm
    }

    /// The sockets of the other host addresses and the multicast groups:
    /// the progress thread reads them even while a busy poller owns the
    /// device socket (they stay in its epoll set).
    pub(super) fn rx_others(&self) -> usize {
        self.rx_sockets(Rx::Progress, 1, usize::MAX)
    }

    /// Receives on `count` sockets of [`Shared::sockets`] from `first` on,
    /// then the multicast groups.
    fn rx_sockets(&self, mode: Rx, first: usize, count: usize) -> usize {
        let mut rx = self.rx.lock().unwrap_or_else(|p| p.into_inner());
        let mut total = 0;
        let mut requests = 0;
        // Each address's socket in turn (GID order), each with its own
        // address as the packets' destination and its own group.
        let sockets = self.sockets();
        for (i, (socket, host)) in sockets.iter().enumerate().skip(first).take(count) {
            total += self.rx_socket(mode, &mut rx, i, socket, host, &mut requests);
            self.handle_unreachable(socket);
        }
        if requests > 0 {
            // Under the receive lock.
            super::shm::add_locked(&self.rx_requests_locked, requests);
        }
        total + self.rx_mcast(&mut rx)
    }

    /// [`Shared::rx_burst`] for the socket at `index` of
    /// [`Shared::sockets`].
    pub(super) fn rx_socket(
        &self,
        mode: Rx,
        rx: &mut RecvBatch,
        index: usize,
        socket: &RoceSocket,
        host: Option<&Arc<crate::host::HostMember>>,
        requests: &mut u64,
    ) -> usize {
        let mut total = 0;
        let mut noticed = Noticed::default();
        let mut forwards = Vec::new();
        let local = socket.local_addr();
        loop {
            match socket.recv_batch(rx) {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
            self.report_probes(rx, host);
            let local_ip = local.ip();
            // A GRO batch can hold a whole send window: answer (ACK) every
            // `ACK_CHUNK` datagrams rather than after all of them, so the
            // sender never waits for the batch's end to go on.
            let mut it = rx.datagrams().peekable();
            while it.peek().is_some() {
                {
                    let mut core = self.lock();
                    let now = self.now();
                    for d in it.by_ref().take(ACK_CHUNK) {
                        let dg = Datagram {
                            src: d.src,
                            dst_ip: d.dst_ip.unwrap_or(local_ip),
                            payload: d.data,
                        };
                        total += 1;
                        let mut one = RxOne {
                            noticed: &mut noticed,
                            requests,
                            forwards: Some(&mut forwards),
                        };
                        self.rx_one(&mut core, now, &dg, &mut one);
                    }
                    self.after(&mut core);
                }
                if it.peek().is_some() {
                    self.send_soon();
                }
            }
            let more = rx.messages().len() >= BATCH;
            if more || mode.sends_answers() {
                self.send_soon();
            } else {
                self.set_pending(self.now().as_nanos());
            }
            if !more {
                break;
            }
        }
        self.forward_all(forwards);
        self.after_notice(noticed, index);
        total
    }

    /// Handles one datagram off a socket (or handed on by another member,
    /// `one.forwards` None): the host device's business, another member's
    /// (queued in `one.forwards`, sent once the lock is let go), or this
    /// process's.
    pub(super) fn rx_one(
        &self,
        core: &mut Core,
        now: Instant,
        dg: &Datagram<'_>,
        one: &mut RxOne<'_>,
    ) {
        let forwarded = one.forwards.is_none();
        match self.notice(dg.payload, one.noticed, forwarded) {
            Verdict::Take => return,
            Verdict::Forward(slot) => {
                if let Some(f) = one.forwards.as_deref_mut() {
                    f.extend(Pending::new(ForwardTo::Slot(slot), dg));
                }
                return;
            }
            Verdict::Deliver => {}
        }
        let gsi = crate::cm::is_gsi(dg.payload);
        if gsi {
            self.shm_poll_locked(core, now, usize::MAX, one.requests);
            core.mad.take_forward();
        }
        *one.requests += u64::from(self.deliver(core, now, dg, None));
        // A MAD request for a class another member serves: to it.
        if gsi
            && let Some(slot) = core.mad.take_forward()
            && let Some(f) = one.forwards.as_deref_mut()
        {
            f.extend(Pending::new(ForwardTo::Slot(slot), dg));
        }
        if gsi && core.cm.take_misrouted() {
            one.noticed.misrouted = true;
            // A REQ for a port another member holds: to its listener, if
            // it has one yet (else the client's retransmission finds it).
            if let (Some(f), Some(sid)) = (
                one.forwards.as_deref_mut(),
                softrdma_udp::steer::qp1_request_service(dg.payload),
            ) {
                f.extend(Pending::new(ForwardTo::Listener(sid), dg));
            }
        }
    }

    /// Receives what arrived on multicast group sockets.
    pub(super) fn rx_mcast(&self, rx: &mut RecvBatch) -> usize {
        let socks: Vec<Arc<RoceSocket>> = {
            let m = self.mcast.lock().unwrap_or_else(|p| p.into_inner());
            if m.is_empty() {
                return 0;
            }
            m.values().map(|(s, _)| Arc::clone(s)).collect()
        };
        let mut total = 0;
        for sock in socks {
            while let Ok(n) = sock.recv_batch(rx) {
                if n == 0 {
                    break;
                }
                let mut core = self.lock();
                let now = self.now();
                let mut mem = HostMemory;
                for d in rx.datagrams() {
                    let Some(group) = d.dst_ip else { continue };
                    let dg = Datagram {
                        src: d.src,
                        dst_ip: group,
                        payload: d.data,
                    };
                    core.ep.handle_datagram(now, &dg, &mut mem);
                    total += 1;
                }
                self.after(&mut core);
            }
        }
        total
    }

    /// Feeds a packet for QP1 to the CM, or to the MAD agents if it is not a
    /// CM MAD (after the same ICRC check as any packet).
    pub(super) fn handle_gsi(&self, core: &mut Core, now: Instant, d: &Datagram<'_>) {
        if !core.ep.icrc_ok(d) {
            return;
        }
        if let Some(mad) = crate::cm::gsi_mad(d.payload) {
            if mad[1] != softrdma_wire::mad::MGMT_CLASS_CM {
                let Core {
                    ep, mad: agents, ..
                } = core;
                agents.handle(d.src.ip(), d.dst_ip, mad, || {
                    crate::mad::pma_counters(&ep.stats())
                });
                return;
            }
            let Core { ep, cm, .. } = core;
            cm.handle_mad(
                now,
                d.src.ip(),
                d.dst_ip,
                mad,
                &mut EpQps {
                    ep,
                    now,
                    peer_copy: self.peer_copy_policy(),
                },
            );
        }
    }

    /// ICMP said nothing listens at some peers any more: their processes are
    /// gone. Connections to them end now (the CM's liveness rule).
    fn handle_unreachable(&self, socket: &RoceSocket) {
        let gone = socket.take_unreachable();
        if gone.is_empty() {
            return;
        }
        // A peer process on this host may be among them: its lanes go
        // before its connections end (see `shm_sweep_now`).
        self.shm_sweep_rx_held();
        {
            let mut core = self.lock();
            let now = self.now();
            for a in gone {
                let Core { ep, cm, .. } = &mut *core;
                cm.peer_unreachable(
                    now,
                    a.ip(),
                    &mut EpQps {
                        ep,
                        now,
                        peer_copy: self.peer_copy_policy(),
                    },
                );
            }
            self.after(&mut core);
        }
        self.flush_tx();
    }
}

/// Whether a RoCE packet is an RC response (ACK, READ response, atomic ACK),
/// which only its requester waits for, rather than a request a responder serves.
pub(super) fn is_rc_response(pkt: &[u8]) -> bool {
    // 0xE3: softrdma's peer-copy READ response (`softrdma_wire::peer`); a
    // direct record, by the opcode it stands for.
    let op = match softrdma_wire::direct::opcode(pkt) {
        Some(op) => Some(op.0),
        None => pkt.first().copied(),
    };
    op.is_some_and(|op| (0x0D..=0x12).contains(&op) || op == 0xE3)
}

#[cfg(test)]
mod tests {
    use super::is_rc_response;
    use softrdma_wire::direct::{DIRECT_MAX_LEN, write_header};
    use softrdma_wire::{Aeth, Bth, Headers, Opcode, Psn, Reth, Syndrome};

    fn record(op: Opcode) -> Vec<u8> {
        let mut h = Headers::new(Bth::new(op, 7, Psn::new(1)));
        if op == Opcode::RC_RDMA_READ_REQUEST {
            h.reth = Some(Reth {
                va: 0,
                rkey: 1,
                dma_len: 8,
            });
        } else {
            h.aeth = Some(Aeth {
                syndrome: Syndrome::Ack { credits: 31 },
                msn: 1,
            });
        }
        let len = if op == Opcode::RC_RDMA_READ_REQUEST {
            0
        } else {
            8
        };
        let mut out = [0u8; DIRECT_MAX_LEN];
        let (n, _) = write_header(&h, len, &mut out);
        out[..n].to_vec()
    }

    #[test]
    fn responses_are_told_from_requests_in_records_too() {
        assert!(is_rc_response(&[Opcode::RC_ACKNOWLEDGE.0, 0, 0, 0]));
        assert!(!is_rc_response(&[Opcode::RC_SEND_ONLY.0, 0, 0, 0]));
        assert!(is_rc_response(&record(Opcode::RC_RDMA_READ_RESPONSE_ONLY)));
        assert!(!is_rc_response(&record(Opcode::RC_RDMA_READ_REQUEST)));
    }
}
