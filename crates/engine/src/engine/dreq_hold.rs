//! A peer's DREQ that arrives while completions wait in a CQ is held until
//! the application polls a CQ empty, or for [`DREQ_HOLD`] at most.
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
use softrdma_transport::Instant;
use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
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

    /// Takes what goes now, oldest first: everything once no completion
    /// waits (`waiting` false), else what is due at `now`.
    pub(super) fn take_due(&mut self, now: Instant, waiting: bool) -> Vec<T> {
        let mut out = Vec::new();
        while let Some((t, _)) = self.items.front() {
            if waiting && *t > now {
                break;
            }
            out.extend(self.items.pop_front().map(|(_, x)| x));
        }
        out
    }
}

/// A DREQ datagram kept for later.
#[derive(Debug)]
pub(super) struct HeldMad {
    src: SocketAddr,
    dst_ip: IpAddr,
    payload: Vec<u8>,
}

impl Shared {
    /// Holds `dg` if it is a DREQ and a completion waits in a CQ; true if
    /// it was taken.
    pub(super) fn hold_dreq(&self, core: &mut Core, now: Instant, dg: &Datagram<'_>) -> bool {
        if !core.ep.completions_waiting() || !crate::cm::is_dreq(dg.payload) {
            return false;
        }
        core.held_dreqs.hold(
            now,
            HeldMad {
                src: dg.src,
                dst_ip: dg.dst_ip,
                payload: dg.payload.to_vec(),
            },
        );
        true
    }

    /// Takes up to `max` completions of `cq`; when it finds none, what was
    /// held for that goes to the CM ([`Shared::release_dreqs`]).
    pub(super) fn poll_cq_locked(
        &self,
        cq: softrdma_transport::CqHandle,
        max: usize,
        f: impl FnMut(softrdma_transport::Wc),
        now: Instant,
    ) -> Result<usize, softrdma_transport::VerbsError> {
        let mut core = self.lock();
        let n = core.ep.poll_cq(cq, max, f)?;
        if n == 0 && core.held_dreqs.deadline().is_some() {
            self.release_dreqs(&mut core, now);
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
        let waiting = core.ep.completions_waiting();
        for h in core.held_dreqs.take_due(now, waiting) {
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
        assert!(h.take_due(at(59), true).is_empty());
        assert_eq!(h.take_due(at(11), false), vec!['a', 'b']);
        assert_eq!(h.deadline(), None);
    }

    #[test]
    fn held_at_most_the_hold_in_deadline_order() {
        let mut h = Held::default();
        h.hold(at(10), 'a');
        h.hold(at(20), 'b');
        assert_eq!(h.take_due(at(60), true), vec!['a']);
        assert_eq!(h.deadline(), Some(at(70)));
        assert!(h.take_due(at(69), true).is_empty());
        assert_eq!(h.take_due(at(70), true), vec!['b']);
    }
}
