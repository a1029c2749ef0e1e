//! What follows every endpoint call: delivering the endpoint's and the CM's
//! events to their channels, framing outgoing CM MADs, and firing the
//! transport, CM and keepalive timers; in one place since every path
//! (verbs, transmit, receive, progress thread) ends with it.

use super::{Core, Shared};
use crate::channel::AsyncEvent;
use crate::cm::EpQps;
use softrdma_transport::{Event, Instant};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

impl Shared {
    /// After any endpoint call: deliver events, and wake the progress thread if
    /// the earliest timer moved before the deadline it sleeps on.
    pub(super) fn after(&self, core: &mut Core) {
        while let Some(e) = core.ep.poll_event() {
            if let Event::QpAsync(q, t) = e {
                use softrdma_transport::AsyncEventType as A;
                let fatal = matches!(t, A::QpFatal | A::QpReqErr | A::QpAccessErr);
                if matches!(t, A::CommEst) || fatal {
                    // Read here only: `after` follows every call (see `rx_burst`).
                    let now = self.now();
                    let Core { ep, cm, .. } = core;
                    cm.qp_event(
                        now,
                        q,
                        fatal,
                        &mut EpQps {
                            ep,
                            now,
                            peer_copy: self.peer_copy_policy(),
                        },
                    );
                }
            }
            match e {
                Event::CompletionNotify(cq) => {
                    if let Some(c) = core.channels.get(&cq) {
                        c.notify(cq);
                        self.notifies.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Event::QpAsync(q, t) => self.async_events.push(AsyncEvent::Qp(q, t)),
                Event::CqAsync(c, t) => self.async_events.push(AsyncEvent::Cq(c, t)),
                Event::SrqAsync(s, t) => self.async_events.push(AsyncEvent::Srq(s, t)),
            }
        }
        self.dispatch_cm(core);
        self.wake_for_timers(core);
    }

    /// Wakes the progress thread if the earliest timer moved before the
    /// deadline it sleeps on (the end of [`Shared::after`], alone for a
    /// call that raises no event and leaves no CM work: a direct post).
    pub(super) fn wake_for_timers(&self, core: &mut Core) {
        // The transport's cheap bound first: the exact deadline puts its
        // timers in order, which a ping-pong's every message would pay for.
        let sleeping_until = self.sleeping_until.load(Ordering::SeqCst);
        let sooner = |t: Option<Instant>| t.is_some_and(|t| t.as_nanos() < sleeping_until);
        if sooner(earliest_with(core, core.ep.timeout_bound())) && sooner(earliest(core)) {
            let _ = self.waker.wake();
        }
    }

    /// Routes CM events to their channels and frames outgoing MADs (the
    /// CM's and the MAD agents').
    fn dispatch_cm(&self, core: &mut Core) {
        while let Some(e) = core.cm.poll_event() {
            if e.kind == softrdma_cm::EventKind::Established && core.keepalive_at.is_none() {
                core.keepalive_at = Some(self.now() + KEEPALIVE);
            }
            let ch = core.cm_channels.get(&e.id).cloned().or_else(|| {
                // A connection request arrives on its listener's channel, and
                // the new id inherits it.
                let l = e.listen_id?;
                let c = core.cm_channels.get(&l).cloned()?;
                core.cm_channels.insert(e.id, c.clone());
                Some(c)
            });
            if let Some(c) = ch {
                c.push(e);
            }
        }
        let port = core.ep.config().dest_port;
        while let Some(o) = core.cm.poll_transmit() {
            let mut pkt = Vec::with_capacity(300);
            crate::cm::gsi_packet(core.gsi_psn, &o.mad, &mut pkt);
            core.gsi_psn = (core.gsi_psn + 1) & 0xFF_FFFF;
            let dst = SocketAddr::new(o.dst, port);
            core.ep.fill_icrc(o.src, dst, &mut pkt);
            core.gsi_out.push_back((o.src, dst, pkt));
        }
        while let Some((src, dst, mad)) = core.mad.poll_transmit() {
            let mut pkt = Vec::with_capacity(300);
            crate::cm::gsi_packet(core.gsi_psn, &mad, &mut pkt);
            core.gsi_psn = (core.gsi_psn + 1) & 0xFF_FFFF;
            let dst = SocketAddr::new(dst, port);
            core.ep.fill_icrc(src, dst, &mut pkt);
            core.gsi_out.push_back((src, dst, pkt));
        }
    }

    /// Fires the timers that are due and sends what they queued (only then:
    /// the progress thread runs this at every tick, and an idle flush would
    /// take the transmit lock from a busy application thread).
    pub(super) fn handle_timers(&self) {
        // Members that died: their shared-memory lanes go first, with no
        // engine lock held, then their connections (below).
        let dead = {
            let core = self.lock();
            if core.keepalive_at.is_some_and(|t| t <= self.now()) {
                self.dead_members(&core)
            } else {
                Vec::new()
            }
        };
        if !dead.is_empty() {
            self.shm_sweep_now();
        }
        let fired = {
            let mut core = self.lock();
            let now = self.now();
            let mut fired = false;
            if core.ep.poll_timeout().is_some_and(|t| t <= now) {
                core.ep.handle_timeout(now);
                fired = true;
            }
            if core.cm.poll_timeout().is_some_and(|t| t <= now) {
                let Core { ep, cm, .. } = &mut *core;
                cm.handle_timeout(
                    now,
                    &mut EpQps {
                        ep,
                        now,
                        peer_copy: self.peer_copy_policy(),
                    },
                );
                fired = true;
            }
            if core.mad.poll_timeout().is_some_and(|t| t <= now) {
                core.mad.handle_timeout(now);
                fired = true;
            }
            if core.held_dreqs.deadline().is_some_and(|t| t <= now) {
                self.release_dreqs(&mut core, now);
                fired = true;
            }
            if core.keepalive_at.is_some_and(|t| t <= now) {
                // (Found only now if the tick came due meanwhile: the
                // periodic sweep takes their lanes.)
                let dead = if dead.is_empty() {
                    self.dead_members(&core)
                } else {
                    dead
                };
                self.members_gone(&mut core, &dead);
                let probed = core.cm.send_keepalives();
                core.keepalive_at = (probed > 0).then(|| now + KEEPALIVE);
                fired = true;
            }
            self.after(&mut core);
            fired
        };
        if fired {
            self.send_soon();
        }
    }
}

/// How often the peers of live CM connections are probed. With no kernel to
/// send a DREQ for a killed process, a probe to its closed port draws an ICMP
/// "port unreachable", which ends the connection (DISCONNECTED, QP flushed):
/// a waiting peer learns of the death within about this long.
const KEEPALIVE: std::time::Duration = std::time::Duration::from_secs(1);

/// The earliest deadline of the transport, the CM, the MAD agents and the
/// keepalive.
pub(super) fn earliest(core: &mut Core) -> Option<Instant> {
    let ep = core.ep.poll_timeout();
    earliest_with(core, ep)
}

/// [`earliest`] with `ep` for the transport's deadline.
fn earliest_with(core: &Core, ep: Option<Instant>) -> Option<Instant> {
    // Compared as integers with "never" for None: `flatten().min()` over the
    // options compiles (inlined here) to a branch on a None's unset payload,
    // which valgrind's memcheck, run on the C ABI in CI, reports as a use of
    // uninitialised memory.
    const NEVER: u64 = u64::MAX;
    let t = [
        ep,
        core.cm.poll_timeout(),
        core.mad.poll_timeout(),
        core.keepalive_at,
        core.held_dreqs.deadline(),
    ]
    .map(|t| t.map_or(NEVER, Instant::as_nanos))
    .into_iter()
    .min()
    .unwrap_or(NEVER);
    (t != NEVER).then(|| Instant::from_nanos(t))
}
