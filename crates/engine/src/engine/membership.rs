//! The engine's side of the host device (`crate::host`): probes and
//! misrouted packets seen on the receive path, reconciliations on their own
//! thread, re-steering after a listener appeared, leaving at exit, and
//! connections to member processes that died.

use super::{Core, Shared};
use crate::cm::EpQps;
use crate::host::HostMember;
use softrdma_transport::{GSI_QPN, MULTICAST_QPN};
use softrdma_udp::RecvBatch;
use softrdma_udp::steer::{dest_qpn, member_slot, parse_probe, qp1_answer_slot};
use std::sync::Arc;

/// What [`Shared::notice`] decided for one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The host device's own (a probe, a doorbell for this member).
    Take,
    /// For the member holding this slot.
    Forward(u8),
    /// For this process's transport or CM.
    Deliver,
}

/// What the receive path noticed about the host device in one burst.
#[derive(Debug, Default)]
pub(super) struct Noticed {
    /// A packet for another member's QP, a CM answer or a connection
    /// request for another member arrived: the group's table is stale.
    pub(super) misrouted: bool,
}

impl Shared {
    /// What to do with `pkt`, just received: take it (a probe, a doorbell,
    /// both the host device's business), hand it to another member (a
    /// stale table delivered it here: see `forward.rs`), or deliver it
    /// here. A datagram already forwarded (`forwarded`) is never forwarded
    /// again: if it is not ours either, the transport drops and counts it.
    pub(super) fn notice(&self, pkt: &[u8], n: &mut Noticed, forwarded: bool) -> Verdict {
        let Some(h) = &self.host else {
            return Verdict::Deliver;
        };
        let me = h.slot();
        let elsewhere = |slot: u8| {
            if forwarded || self.forward.is_none() {
                None
            } else {
                Some(Verdict::Forward(slot))
            }
        };
        if super::shm::ShmPath::is_doorbell(pkt) {
            // Steered by the receiver's slot like its packets: one for
            // another member means the table is stale (with the lanes on,
            // doorbells and CM MADs are all a pair sends over UDP, so no
            // misrouted data packet would tell), and lost here it would
            // leave its receiver asleep over a lane with datagrams in it.
            let slot = dest_qpn(pkt)
                .map(member_slot)
                .filter(|&s| s != me && s != 0);
            if slot.is_some() {
                n.misrouted = true;
            }
            return slot.and_then(elsewhere).unwrap_or(Verdict::Take);
        }
        if parse_probe(pkt).is_some() {
            return Verdict::Take;
        }
        if let Some(qpn) = dest_qpn(pkt)
            && qpn != GSI_QPN
            && qpn != MULTICAST_QPN
            && member_slot(qpn) != me
        {
            n.misrouted = true;
            return elsewhere(member_slot(qpn)).unwrap_or(Verdict::Deliver);
        }
        // A CM answer (REP, REJ, DREQ, ...) for another member: the CM here
        // would ignore it.
        if let Some(s) = qp1_answer_slot(pkt).filter(|&s| s != 0 && s != me) {
            n.misrouted = true;
            return elsewhere(s).unwrap_or(Verdict::Deliver);
        }
        Verdict::Deliver
    }

    /// Answers the probes of a received batch before anything takes the
    /// engine lock: a reconciler (maybe this process's own, holding the
    /// registry lock an application thread under the engine lock waits for)
    /// waits for the answer.
    pub(super) fn report_probes(&self, rx: &RecvBatch, host: Option<&Arc<HostMember>>) {
        let Some(h) = host else { return };
        for d in rx.datagrams() {
            if let Some((epoch, index)) = parse_probe(d.data) {
                h.on_probe(epoch, index);
            }
        }
    }

    /// Acts on what [`Shared::notice`] saw on the socket at `index` of
    /// [`Shared::sockets`] (outside the engine lock): a misrouted packet
    /// there reconciles that socket's group.
    pub(super) fn after_notice(&self, n: Noticed, index: usize) {
        if n.misrouted {
            self.reconcile_soon(index);
        }
    }

    /// Starts a reconciliation of the table of the group at `index` of
    /// [`Shared::sockets`] on its own thread (it waits for this process's
    /// progress thread to report its probe).
    pub(super) fn reconcile_soon(&self, index: usize) {
        let Some(me) = self.me.upgrade() else { return };
        let Some(h) = self
            .sockets()
            .iter()
            .nth(index)
            .and_then(|(_, h)| h.cloned())
        else {
            return;
        };
        if !h.should_reconcile() {
            return;
        }
        let group = Arc::clone(&h);
        let spawned = std::thread::Builder::new()
            .name("softrdma-reconcile".into())
            .spawn(move || {
                let _ = group.reconcile(me.sockets().at(index));
            });
        if spawned.is_err() {
            // Leave it to the next misrouted packet.
            h.reconcile_done();
        }
    }

    /// Reconciles the group at `index` of [`Shared::sockets`] in this
    /// thread: a new member that found dead ones in the table, before its
    /// first packet (it listed itself after them, so until the round its own
    /// index is wrong and a datagram to itself, UD included, goes astray).
    /// Needs the progress thread running: it reports this member's probe.
    pub(super) fn reconcile_now(&self, index: usize) {
        let Some(h) = self
            .sockets()
            .iter()
            .nth(index)
            .and_then(|(_, h)| h.cloned())
        else {
            return;
        };
        if h.should_reconcile() {
            let _ = h.reconcile(self.sockets().at(index));
        }
    }

    /// Re-attaches every group's program if a listener appeared (a
    /// listener on `0.0.0.0`/`::` is steered to in every group).
    pub(super) fn refresh_steering(&self) {
        if let Some(h) = &self.host
            && h.take_listeners_changed()
        {
            for (socket, h) in self.sockets().iter() {
                if let Some(h) = h {
                    let _ = h.refresh(socket);
                }
            }
        }
    }

    /// Leaves the host device's groups (at exit: the sockets close next).
    pub(super) fn leave_host(&self) {
        for (socket, h) in self.sockets().iter() {
            if let Some(h) = h {
                h.leave(socket);
            }
        }
    }

    /// The member processes of this host device with CM connections here
    /// that died: (group address, slot). Their connections end with
    /// [`Shared::members_gone`], as ICMP "port unreachable" ends them for a
    /// peer elsewhere (no ICMP comes while other members still hold the
    /// address).
    pub(super) fn dead_members(&self, core: &Core) -> Vec<(std::net::IpAddr, u8)> {
        let mut dead = Vec::new();
        for (_, h) in self.sockets().iter() {
            let Some(h) = h else { continue };
            let ip = h.ip();
            for slot in core.cm.member_peers(ip) {
                if slot != 0 && !h.registry().is_alive(slot) {
                    dead.push((ip, slot));
                }
            }
        }
        dead
    }

    /// Ends the CM connections to the members `dead` ([`Shared::dead_members`]).
    pub(super) fn members_gone(&self, core: &mut Core, dead: &[(std::net::IpAddr, u8)]) {
        let now = self.now();
        for &(ip, slot) in dead {
            let Core { ep, cm, .. } = &mut *core;
            cm.member_gone(
                now,
                ip,
                slot,
                &mut EpQps {
                    ep,
                    now,
                    peer_copy: self.peer_copy_policy(),
                },
            );
        }
    }
}
