//! A peer's DREQ that arrives while completions wait in a CQ of the QP it
//! disconnects is held until the application polls a CQ and finds those
//! empty, or for [`DREQ_HOLD`] at most.
//!
//! On a NIC the completion of a peer's last message is in the CQ long before
//! the DISCONNECTED its later DREQ raises: the message left first and the
//! DREQ goes through the kernel's CM. Here both can become visible in one
//! pass of a thread that receives: a same-host sender rings no doorbell
//! while the receiver's application polls, and a poller descheduled for a
//! while leaves the message in the lane until the DREQ (off the socket,
//! which wakes the progress thread) drains it. An application that reads
//! its CQ and then its event channel, as libfabric's rxm does, then reads
//! DISCONNECTED with the message unpolled, closes the connection, and the
//! QP's destroy takes the completion out of the CQ with it (as mlx5's
//! does): `fi_pingpong` (rdm over rxm) hung at its end, 3 runs in 100
//! under two CPU burners (`scripts/fi-pingpong-soak.sh 100 --burn` with
//! `SOFTRDMA_DIRECT=1`).

use super::{Core, Shared};
use softrdma_transport::Datagram;
use softrdma_transport::{Endpoint, Instant, Qpn};
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The longest a DREQ waits for the application's poll: an application that
/// never polls gets its DISCONNECTED this much later. Several scheduler
/// slices of a loaded 2-vCPU machine (`scripts/fi-pingpong-soak.sh --burn`);
/// well under the CM's MAD retransmission timeout (250 ms), so the peer does
/// not send its DREQ again meanwhile.
pub(super) const DREQ_HOLD: Duration = Duration::from_millis(50);

/// Held items, oldest first, each with its deadline.
#[derive(Debug)]
pub(super) struct Held<T> {
    items: VecDeque<(Instant, T)>,
}

impl<T> Default for Held<T> {
    fn default() -> Self {
        Held {
            items: VecDeque::new(),
        }
    }
}

impl<T> Held<T> {
    /// Holds `item` from `now` for [`DREQ_HOLD`].
    pub(super) fn hold(&mut self, now: Instant, item: T) {
        self.items.push_back((now + DREQ_HOLD, item));
    }

    /// The earliest deadline.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.items.front().map(|(t, _)| *t)
    }

    /// Takes what goes now, oldest first: each item due at `now`, or for
    /// which no completion waits any more (`waiting` false). The others
    /// stay, in order.
    pub(super) fn take_due(&mut self, now: Instant, waiting: impl Fn(&T) -> bool) -> Vec<T> {
        let mut out = Vec::new();
        let mut kept = VecDeque::new();
        for (t, x) in self.items.drain(..) {
            if t <= now || !waiting(&x) {
                out.push(x);
            } else {
                kept.push_back((t, x));
            }
        }
        self.items = kept;
        out
    }
}

/// A DREQ datagram kept for later.
#[derive(Debug)]
pub(super) struct HeldMad {
    src: SocketAddr,
    dst_ip: IpAddr,
    payload: Vec<u8>,
    /// The QP it disconnects, if its CM id has one: then only that QP's
    /// CQs hold it back. Else any CQ does (the application may have
    /// connected a QP of its own making through the id).
    qpn: Option<Qpn>,
}

/// Whether a completion the application has not polled yet waits where a
/// DREQ for `qpn` must wait for it (see [`HeldMad::qpn`]).
fn completions_before(ep: &Endpoint, qpn: Option<Qpn>) -> bool {
    match qpn {
        Some(q) => ep.qp_completions_waiting(q),
        None => ep.completions_waiting(),
    }
}

impl Shared {
    /// Holds `dg` if it is a DREQ of a known connection and a completion
    /// waits in a CQ of its QP; true if it was taken.
    pub(super) fn hold_dreq(&self, core: &mut Core, now: Instant, dg: &Datagram<'_>) -> bool {
        let Some(mad) = crate::cm::dreq_mad(dg.payload) else {
            return false;
        };
        let Some(qpn) = core.cm.dreq_qpn(mad) else {
            // Not for a connection of ours: the CM answers it at once.
            return false;
        };
        if !completions_before(&core.ep, qpn) {
            return false;
        }
        core.held_dreqs.hold(
            now,
            HeldMad {
                src: dg.src,
                dst_ip: dg.dst_ip,
                payload: dg.payload.to_vec(),
                qpn,
            },
        );
        self.dreqs_held.store(true, Ordering::Relaxed);
        true
    }

    /// Takes up to `max` completions of `cq`; when it finds none, what was
    /// held for that goes to the CM ([`Shared::release_dreqs`]). `now` is
    /// called only then: a poll that finds completions reads no clock.
    pub(super) fn poll_cq_locked(
        &self,
        cq: softrdma_transport::CqHandle,
        max: usize,
        f: impl FnMut(softrdma_transport::Wc),
        now: impl FnOnce() -> Instant,
    ) -> Result<usize, softrdma_transport::VerbsError> {
        let mut core = self.lock();
        let n = core.ep.poll_cq(cq, max, f)?;
        if n == 0 && core.held_dreqs.deadline().is_some() {
            self.release_dreqs(&mut core, now());
            self.after(&mut core);
            drop(core);
            self.send_soon();
        }
        Ok(n)
    }

    /// Hands the CM the held DREQs that go now ([`Held::take_due`]).
    pub(super) fn release_dreqs(&self, core: &mut Core, now: Instant) {
        if core.held_dreqs.deadline().is_none() {
            return;
        }
        let ep = &core.ep;
        let due = core
            .held_dreqs
            .take_due(now, |h| completions_before(ep, h.qpn));
        let held = core.held_dreqs.deadline().is_some();
        self.dreqs_held.store(held, Ordering::Relaxed);
        for h in due {
            let dg = Datagram {
                src: h.src,
                dst_ip: h.dst_ip,
                payload: &h.payload,
            };
            self.handle_gsi(core, now, &dg);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    #[test]
    fn held_until_no_completion_waits() {
        let mut h = Held::default();
        h.hold(at(10), 'a');
        h.hold(at(20), 'b');
        assert_eq!(h.deadline(), Some(at(60)));
        assert!(h.take_due(at(59), |_| true).is_empty());
        assert_eq!(h.take_due(at(11), |_| false), vec!['a', 'b']);
        assert_eq!(h.deadline(), None);
    }

    #[test]
    fn held_at_most_the_hold_in_deadline_order() {
        let mut h = Held::default();
        h.hold(at(10), 'a');
        h.hold(at(20), 'b');
        assert_eq!(h.take_due(at(60), |_| true), vec!['a']);
        assert_eq!(h.deadline(), Some(at(70)));
        assert!(h.take_due(at(69), |_| true).is_empty());
        assert_eq!(h.take_due(at(70), |_| true), vec!['b']);
    }

    #[test]
    fn each_held_item_goes_when_its_own_completions_are_polled() {
        // 'a' and 'c' wait for completions of one QP, 'b' for another's.
        let mut h = Held::default();
        h.hold(at(10), 'a');
        h.hold(at(20), 'b');
        h.hold(at(30), 'c');
        assert_eq!(h.take_due(at(31), |x| *x != 'b'), vec!['b']);
        // The others keep their order and deadlines.
        assert_eq!(h.deadline(), Some(at(60)));
        assert_eq!(h.take_due(at(60), |_| true), vec!['a']);
        assert_eq!(h.take_due(at(61), |_| false), vec!['c']);
        assert_eq!(h.deadline(), None);
    }
}
