//! Completion queues and shared receive queues: plain bounded queues plus
//! their notification state.

use crate::mr::PdHandle;
use crate::wr::{RecvWr, Wc};
use std::collections::VecDeque;

/// Handle of a completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CqHandle(pub u32);

/// Handle of a shared receive queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SrqHandle(pub u32);

/// What a `req_notify_cq` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arm {
    /// The next completion of any kind.
    Next,
    /// The next solicited (or error) completion.
    Solicited,
}

#[derive(Debug)]
pub(crate) struct Cq {
    pub(crate) entries: VecDeque<Wc>,
    pub(crate) cqe: u32,
    pub(crate) arm: Option<Arm>,
    /// QPs (and SRQs) using this CQ: destroy is EBUSY while non-zero.
    pub(crate) users: u32,
    /// `IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN`: a completion that finds the CQ
    /// full is dropped without an error (no CQ_ERR, the QP carries on).
    pub(crate) ignore_overrun: bool,
}

/// The CQ was full; the completion was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Overflow;

impl Cq {
    pub(crate) fn new(cqe: u32) -> Cq {
        Cq {
            entries: VecDeque::new(),
            cqe,
            arm: None,
            users: 0,
            ignore_overrun: false,
        }
    }

    /// Queues a completion; returns whether an armed notification fired.
    pub(crate) fn push(&mut self, wc: Wc, solicited: bool) -> Result<bool, Overflow> {
        if self.entries.len() >= self.cqe as usize {
            return Err(Overflow);
        }
        self.entries.push_back(wc);
        let fire = match self.arm {
            Some(Arm::Next) => true,
            Some(Arm::Solicited) => solicited || wc.status != crate::WcStatus::Success,
            None => false,
        };
        if fire {
            self.arm = None;
        }
        Ok(fire)
    }
}

#[derive(Debug)]
pub(crate) struct Srq {
    pub(crate) pd: PdHandle,
    pub(crate) wqes: VecDeque<RecvWr>,
    pub(crate) max_wr: u32,
    pub(crate) max_sge: u32,
    /// Async event when the queue drops below this many WRs (0 = disarmed).
    pub(crate) limit: u32,
    pub(crate) users: u32,
    /// An XRC SRQ: its domain and the CQ its receive completions go to.
    pub(crate) xrc: Option<XrcSrq>,
    /// A tag-matching SRQ (`IBV_SRQT_TM`): its tag list and CQ.
    pub(crate) tm: Option<crate::tm::TmSrq>,
}

/// What makes an SRQ an XRC SRQ (`IBV_SRQT_XRC`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct XrcSrq {
    /// The XRC domain (the driver's id for it); only XRC target QPs of the
    /// same domain may deliver to this SRQ.
    pub(crate) xrcd: u32,
    pub(crate) cq: CqHandle,
}
