//! The responder's side of tag matching (`crate::tm`): routing the first
//! packet of a SEND to a TM SRQ, and the rendezvous READ and FIN the device
//! issues on the QP on the receiver's behalf (internal WQEs: no completion
//! on the send CQ, outside the send queue's capacity).

use super::{Ctx, Fail, Qp};
use crate::qp::{SendWqe, TmInternal};
use crate::tm::{Route, Rvh, TMH_LEN, Tmh, tmh_op};
use crate::types::{WcFlags, WcOpcode, WcStatus, WrOpcode};
use crate::wr::{RecvWr, SendWr, Sge, Sgl, Wc};

/// How a receive in progress on a TM SRQ completes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TmMsg {
    /// Bytes of the message still to drop before scattering (the TMH of a
    /// matched eager message; all of a matched rendezvous one).
    pub(crate) skip: u32,
    pub(crate) opcode: WcOpcode,
    pub(crate) flags: WcFlags,
    pub(crate) tag: u64,
    pub(crate) app_ctx: u32,
    /// A matched rendezvous: READ this when the header message ends.
    pub(crate) rndv: Option<Rvh>,
}

impl Qp {
    /// Whether this QP receives through a tag-matching SRQ.
    pub(super) fn tm_srq(&self, ctx: &Ctx<'_>) -> bool {
        self.srq
            .and_then(|h| ctx.srqs.get(h.0))
            .is_some_and(|s| s.tm.is_some())
    }

    /// The receive a starting SEND goes to: a TM SRQ routes it by its TMH
    /// (`first` is the first packet's payload); anything else takes the
    /// next receive WQE. `Fail::Rnr` when an ordinary WQE is needed and
    /// none is posted (then nothing is counted or consumed).
    pub(super) fn start_recv(
        &mut self,
        ctx: &mut Ctx<'_>,
        first: &[u8],
    ) -> Result<(RecvWr, Option<TmMsg>), Fail> {
        let tm = self
            .srq
            .and_then(|h| ctx.srqs.get_mut(h.0))
            .and_then(|s| s.tm.as_mut().map(|t| (t.unexpected, t.route(first))));
        let Some((before, route)) = tm else {
            return Ok((self.take_recv_wqe(ctx).ok_or(Fail::Rnr)?, None));
        };
        let matched = |tmh: Tmh, skip: u32, flags: WcFlags, rndv: Option<Rvh>| TmMsg {
            skip,
            opcode: WcOpcode::TmRecv,
            flags,
            tag: tmh.tag,
            app_ctx: tmh.app_ctx,
            rndv,
        };
        match route {
            Route::Eager(tmh, wqe) => Ok((
                wqe,
                Some(matched(
                    tmh,
                    TMH_LEN as u32,
                    WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID,
                    None,
                )),
            )),
            Route::Rndv(tmh, wqe) => Ok((
                wqe,
                Some(matched(tmh, u32::MAX, WcFlags::TM_MATCH, Rvh::parse(first))),
            )),
            Route::Plain { opcode } => {
                let Some(wqe) = self.take_recv_wqe(ctx) else {
                    // Retried after the RNR NAK: not counted twice.
                    if let Some(t) = self
                        .srq
                        .and_then(|h| ctx.srqs.get_mut(h.0))
                        .and_then(|s| s.tm.as_mut())
                    {
                        t.unexpected = before;
                    }
                    return Err(Fail::Rnr);
                };
                Ok((
                    wqe,
                    Some(TmMsg {
                        skip: 0,
                        opcode,
                        flags: WcFlags::EMPTY,
                        tag: 0,
                        app_ctx: 0,
                        rndv: None,
                    }),
                ))
            }
        }
    }

    /// A matched rendezvous header arrived: READ `rvh` into the tag's
    /// buffer `wqe` (its SGEs cut to `rvh.len`). A buffer too small
    /// completes the tag at once with `IBV_WC_LOC_LEN_ERR`.
    pub(super) fn start_rndv_read(&mut self, ctx: &mut Ctx<'_>, wqe: RecvWr, m: TmMsg, rvh: Rvh) {
        let mut left = rvh.len;
        let mut sgl = Sgl::new();
        for s in &wqe.sgl {
            if left == 0 {
                break;
            }
            let n = s.length.min(left);
            sgl.push(Sge { length: n, ..*s });
            left -= n;
        }
        if left > 0 {
            let wc = Wc::new(wqe.wr_id, WcStatus::LocLenErr, WcOpcode::TmRecv, self.qpn);
            self.complete_recv(ctx, wc, false);
            return;
        }
        let mut wr = SendWr::new(0, WrOpcode::RdmaRead);
        wr.sgl = sgl;
        wr.remote_addr = rvh.va;
        wr.rkey = rvh.rkey;
        self.push_internal(
            ctx,
            wr,
            rvh.len,
            TmInternal::Read {
                wr_id: wqe.wr_id,
                tag: m.tag,
                app_ctx: m.app_ctx,
            },
        );
    }

    /// Queues a WQE the device issues itself (its requester taken back
    /// from the express cell first: `express.rs`).
    pub(crate) fn push_internal(
        &mut self,
        ctx: &mut Ctx<'_>,
        wr: SendWr,
        len: u32,
        tm: TmInternal,
    ) {
        self.reclaim(ctx);
        self.internal_wqes += 1;
        self.sq.push_back(SendWqe {
            wr,
            len,
            signaled: false,
            started: false,
            first_psn: Default::default(),
            last_psn: Default::default(),
            npkts: 0,
            next_pkt: 0,
            error: None,
            peer: false,
            offer: None,
            tm: Some(tm),
        });
    }

    /// An internal WQE completed: the rendezvous READ gives the tag's
    /// second completion (`TM_DATA_VALID`, or the READ's error) and, on
    /// success, sends the FIN; the FIN completes silently.
    pub(crate) fn complete_internal(
        &mut self,
        ctx: &mut Ctx<'_>,
        w: &SendWqe,
        tm: TmInternal,
        status: WcStatus,
    ) {
        let TmInternal::Read {
            wr_id,
            tag,
            app_ctx,
        } = tm
        else {
            return;
        };
        let mut wc = Wc::new(wr_id, status, WcOpcode::TmRecv, self.qpn);
        if status == WcStatus::Success {
            wc.byte_len = w.len;
            wc.wc_flags = WcFlags::TM_DATA_VALID;
        }
        self.complete_recv(ctx, wc, false);
        if status == WcStatus::Success {
            let mut fin = SendWr::new(0, WrOpcode::Send);
            fin.inline = Some(
                Tmh {
                    opcode: tmh_op::FIN,
                    app_ctx,
                    tag,
                }
                .to_bytes()
                .to_vec(),
            );
            self.push_internal(ctx, fin, TMH_LEN as u32, TmInternal::Fin);
        }
    }
}
