//! ACKs carried by requests on a same-host lane ([`softrdma_wire::LaneAck`]).
//!
//! In a ping-pong each side's reply follows the ACK its responder owes
//! the other side's request; on a lane both would be published together
//! anyway (the engine's batch). So a request may carry that ACK, when it is
//! the responder's only output: a plain ACK (not a NAK, an RNR NAK, an
//! atomic ACK or a READ response, which must keep their order), on an RC
//! QP whose peer is on a lane (`peer_copy`), with
//! [`crate::Config::lane_acks`] on. The receiver handles the request, then
//! the ACK, as it would the two packets in the lane's order (requests
//! before ACKs).

use super::{Qp, RespOut};
use crate::config::Config;
use crate::types::{QpType, Qpn};
use softrdma_wire::{Aeth, LaneAck, Opcode, Packet, Syndrome};

impl Qp {
    /// The ACK a request of this QP may carry now, if any.
    pub(super) fn lone_lane_ack(&self, config: &Config) -> Option<LaneAck> {
        if !(config.lane_acks
            && self.peer_copy
            && self.qp_type == QpType::Rc
            && self.resp.out.len() == 1)
        {
            return None;
        }
        match *self.resp.out.front()? {
            RespOut::Ack {
                psn,
                syndrome: syndrome @ Syndrome::Ack { .. },
                msn,
            } => Some(LaneAck {
                psn,
                aeth: Aeth { syndrome, msn },
            }),
            _ => None,
        }
    }

    /// The ACK `a` a request of this QP's peer carried, handled as the
    /// lane's next packet: the plain ACK of a lent QP's outstanding
    /// message settles it (`Qp::settle`), anything else goes to the
    /// completer. No `Packet` is built for the settlement.
    pub(crate) fn carried_ack(
        &mut self,
        ctx: &mut super::Ctx<'_>,
        mem: &mut dyn crate::Memory,
        a: LaneAck,
    ) {
        let plain = matches!(a.aeth.syndrome, Syndrome::Ack { .. });
        if !self.settle_at(ctx, plain.then_some(a.psn))
            && let Some(ack) = ack_packet(self.qpn, a)
        {
            self.handle_response(ctx, mem, &ack);
        }
    }

    /// [`Qp::poll_request`] with the responder's lone ACK `ack` riding the
    /// request it builds. The ACK leaves the responder's queue for the
    /// call; if no request carried it (none to send, or one that failed and
    /// took the QP to ERR, which drops queued ACKs) it goes back, to be sent
    /// alone as it would have been before the request.
    pub(super) fn poll_request_carrying(
        &mut self,
        ctx: &mut super::Ctx<'_>,
        mem: &mut dyn crate::Memory,
        buf: &mut Vec<u8>,
        ack: LaneAck,
    ) -> Option<crate::endpoint::Transmit> {
        self.resp.out.pop_front();
        self.riding = Some(ack);
        let t = self.poll_request(ctx, mem, buf);
        if let Some(ack) = self.riding.take() {
            self.resp.out.push_front(RespOut::Ack {
                psn: ack.psn,
                syndrome: ack.aeth.syndrome,
                msn: ack.aeth.msn,
            });
        }
        t
    }
}

/// The ACK packet `ack` stands for, addressed to QP `qpn`, as the
/// completer takes it.
fn ack_packet(qpn: Qpn, ack: LaneAck) -> Option<Packet<'static>> {
    Some(Packet {
        hdr: ack.ack_headers(qpn),
        info: Opcode::RC_ACKNOWLEDGE.info()?,
        payload: &[],
        icrc: 0,
    })
}
