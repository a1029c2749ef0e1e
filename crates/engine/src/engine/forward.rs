//! Datagrams a stale steering table delivered to the wrong member: handed
//! on to their owner (`softrdma_udp::forward`), and taken from others.
//!
//! After a member dies the kernel moves the last socket of the reuseport
//! group into its hole, and until a reconciliation (`host.rs`) rebuilds the
//! table, datagrams for the moved member reach another one. Dropped, UD
//! datagrams and CM answers were lost and RC waited for a retransmission
//! timeout; handed on, they arrive a unix-socket hop late. A handed-on
//! datagram is never handed on again.

use super::membership::Noticed;
use super::rx::RxOne;
use super::{KEY_FORWARD, Shared};
use softrdma_transport::Datagram;
use softrdma_udp::forward::{self, Forwarder};
use std::sync::atomic::Ordering;

/// Whom a datagram is handed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ForwardTo {
    /// The holder of a member slot.
    Slot(u8),
    /// The member listening on this rdma_cm ServiceID (looked up in the
    /// registry once the engine lock is let go).
    Listener(u64),
}

/// A datagram waiting to be handed on, in its envelope.
#[derive(Debug)]
pub(super) struct Pending {
    to: ForwardTo,
    envelope: Vec<u8>,
    /// Delivered here if no live member takes it (not doorbells, and not
    /// what this process's CM saw already).
    here_if_nobody: bool,
}

impl Pending {
    /// `dg` in its envelope for `to` (None if its addresses cannot be put
    /// in one).
    pub(super) fn new(to: ForwardTo, dg: &Datagram<'_>) -> Option<Pending> {
        Some(Pending {
            to,
            envelope: forward::encode(dg.src, dg.dst_ip, dg.payload)?,
            here_if_nobody: matches!(to, ForwardTo::Slot(_))
                && !super::shm::ShmPath::is_doorbell(dg.payload),
        })
    }
}

/// The datagram in an envelope (None for anything else).
fn unwrap(envelope: &[u8]) -> Option<Datagram<'_>> {
    forward::decode(envelope).map(datagram)
}

fn datagram(fw: forward::Forwarded<'_>) -> Datagram<'_> {
    Datagram {
        src: fw.src,
        dst_ip: fw.dst_ip,
        payload: fw.payload,
    }
}

impl Shared {
    /// Binds this member's forwarding socket and watches it.
    pub(super) fn open_forwarder(
        host: Option<&crate::host::HostMember>,
        poller: &softrdma_udp::Poller,
    ) -> Option<Forwarder> {
        let h = host?;
        let f = Forwarder::bind(&h.registry().forward_path(h.slot()))
            .and_then(|f| {
                poller.add_fd(
                    std::os::fd::AsFd::as_fd(&f),
                    KEY_FORWARD,
                    softrdma_udp::Interest::Readable,
                )?;
                Ok(f)
            })
            .inspect_err(|e| {
                if std::env::var_os("SOFTRDMA_DEBUG").is_some() {
                    eprintln!(
                        "softrdma: no forwarding socket ({e}); misrouted datagrams are dropped"
                    );
                }
            });
        f.ok()
    }

    /// Hands `pending` on (outside the engine lock: the registry is read to
    /// find a listener, and a full queue waits briefly). What no live
    /// member takes (its slot is free, or a dead member's: a stale QPN, a
    /// garbage BTH) is delivered here after all, where the transport drops
    /// and counts it as it would have without forwarding.
    pub(super) fn forward_all(&self, pending: Vec<Pending>) {
        let (Some(f), Some(h)) = (&self.forward, &self.host) else {
            return;
        };
        // Each owner's datagrams in their order, in as few bundles as fit.
        let mut by_slot: Vec<(u8, Vec<Pending>)> = Vec::new();
        for p in pending {
            let slot = match p.to {
                ForwardTo::Slot(s) => Some(s),
                ForwardTo::Listener(sid) => {
                    let dst = unwrap(&p.envelope).map(|d| d.dst_ip);
                    dst.and_then(|ip| h.registry().listeners(ip).ok())
                        .and_then(|ls| {
                            ls.into_iter()
                                .find(|&(space, port, _)| {
                                    softrdma_wire::cm::service_id(space, port) == sid
                                })
                                .map(|(_, _, slot)| slot)
                        })
                        .filter(|&s| s != h.slot())
                }
            };
            // No listener yet: the port's holder has not called listen, and
            // the client's retransmission finds it once it has.
            let Some(s) = slot else { continue };
            match by_slot.iter_mut().find(|(t, _)| *t == s) {
                Some((_, v)) => v.push(p),
                None => by_slot.push((s, vec![p])),
            }
        }
        let mut here = Vec::new();
        for (s, ps) in by_slot {
            let envelopes: Vec<&[u8]> = ps.iter().map(|p| &p.envelope[..]).collect();
            let (done, _) = f.forward_all(&h.registry().forward_path(s), &envelopes);
            here.extend(
                ps.into_iter()
                    .skip(done)
                    .filter(|p| p.here_if_nobody)
                    .map(|p| p.envelope),
            );
        }
        if !here.is_empty() {
            self.deliver_here(&here);
        }
    }

    /// Delivers envelopes nobody took to this process's transport.
    fn deliver_here(&self, envelopes: &[Vec<u8>]) {
        let mut core = self.lock();
        let now = self.now();
        let mut requests = 0;
        for e in envelopes {
            if let Some(dg) = unwrap(e) {
                requests += u64::from(self.deliver(&mut core, now, &dg, None));
            }
        }
        self.after(&mut core);
        drop(core);
        self.rx_requests.fetch_add(requests, Ordering::Relaxed);
        self.send_soon();
    }

    /// Takes what other members handed on: each datagram as if it had
    /// arrived on the socket of its group address. Returns datagrams taken.
    pub(super) fn rx_forwarded(&self) -> usize {
        let Some(f) = &self.forward else { return 0 };
        let mut buf = Vec::new();
        let mut total = 0;
        let mut noticed = Noticed::default();
        let mut requests = 0;
        while let Ok(Some(bundle)) = f.recv(&mut buf) {
            let mut core = self.lock();
            let now = self.now();
            for dg in forward::envelopes(bundle).map(datagram) {
                let mut one = RxOne {
                    noticed: &mut noticed,
                    requests: &mut requests,
                    forwards: None,
                };
                self.rx_one(&mut core, now, &dg, &mut one);
                total += 1;
            }
            self.after(&mut core);
        }
        if total > 0 {
            self.rx_requests.fetch_add(requests, Ordering::Relaxed);
            self.send_soon();
        }
        total
    }

    /// The forwarding counters: `host_forwarded` (handed on),
    /// `host_forward_failed` (dropped: no such member, its queue stayed
    /// full), `host_forwarded_in` (taken from others). None without a host
    /// device.
    pub(super) fn forward_counters(&self) -> Vec<(&'static str, u64)> {
        self.forward.as_ref().map_or_else(Vec::new, |f| {
            let s = f.stats();
            vec![
                ("host_forwarded", s.sent.load(Ordering::Relaxed)),
                ("host_forward_failed", s.failed.load(Ordering::Relaxed)),
                ("host_forwarded_in", s.received.load(Ordering::Relaxed)),
            ]
        })
    }
}
