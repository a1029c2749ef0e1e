//! Tag matching on shared receive queues (`IBV_SRQT_TM`), as rdma-core
//! defines it (`ibv_create_srq_ex`, `ibv_post_srq_ops`, the tag-matching
//! completions of `ibv_create_cq_ex`): the state of a TM SRQ and the
//! matching of an incoming SEND's tag-matching header (TMH) against the
//! posted tags. Sans-IO; the responder applies the outcome.
//!
//! Every SEND to a TM SRQ starts with a 16-byte TMH (`struct ibv_tmh`:
//! opcode, 3 reserved bytes, a 32-bit application context, a 64-bit tag,
//! big-endian); a rendezvous one is followed by a 16-byte RVH
//! (`struct ibv_rvh`: the sender's address, rkey and length).
//!
//! - `NO_TAG`: the whole message goes to an ordinary SRQ receive
//!   (`IBV_WC_TM_NO_TAG`).
//! - `EAGER`: if the list is in sync (below) and a posted tag matches
//!   (`tmh.tag & mask == tag & mask`, oldest first), the tag is consumed
//!   and the data after the TMH lands in its buffer (`IBV_WC_TM_RECV`,
//!   `TM_MATCH | TM_DATA_VALID`, the tag's `recv_wr_id`). Otherwise the
//!   message is *unexpected*: all of it goes to an ordinary receive
//!   (`IBV_WC_TM_RECV` without flags) and the unexpected count grows.
//! - `RNDV`: matched, the device READs `rvh.len` bytes from the sender into
//!   the tag's buffer: a first completion `TM_RECV` + `TM_MATCH` when the
//!   header arrives, a second with `TM_DATA_VALID` when the data is in, and
//!   a FIN (a SEND of a TMH with opcode `FIN`) tells the sender it may reuse
//!   its buffer. Unmatched, it is unexpected like an eager message.
//!
//! Phase synchronisation (`ibv_post_srq_ops(3)`): after an unexpected
//! message, matching stays off until an operation flagged
//! `IBV_OPS_TM_SYNC` reports as many unexpected messages handled by
//! software as the device counted.

use crate::cq::CqHandle;
use crate::wr::{RecvWr, Sgl};

/// TMH opcodes (`enum ibv_tmh_op`).
pub mod tmh_op {
    /// No tag: an ordinary message.
    pub const NO_TAG: u8 = 0;
    /// Rendezvous: the data stays with the sender until the receiver READs it.
    pub const RNDV: u8 = 1;
    /// End of a rendezvous, sent back to the sender.
    pub const FIN: u8 = 2;
    /// Eager: the data follows the header.
    pub const EAGER: u8 = 3;
}

/// Length of the TMH (`struct ibv_tmh`).
pub const TMH_LEN: usize = 16;
/// Length of the TMH plus the RVH (`struct ibv_rvh`).
pub const RNDV_HDR_LEN: usize = 32;

/// A parsed tag-matching header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tmh {
    /// One of [`tmh_op`].
    pub opcode: u8,
    /// Application context (`ibv_wc_tm_info.priv`).
    pub app_ctx: u32,
    /// The message's tag.
    pub tag: u64,
}

impl Tmh {
    /// Parses the first [`TMH_LEN`] bytes of a message.
    pub fn parse(b: &[u8]) -> Option<Tmh> {
        let b: &[u8; TMH_LEN] = b.get(..TMH_LEN)?.try_into().ok()?;
        Some(Tmh {
            opcode: b[0],
            app_ctx: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
            tag: u64::from_be_bytes(b[8..16].try_into().ok()?),
        })
    }

    /// The 16 bytes of this header.
    pub fn to_bytes(self) -> [u8; TMH_LEN] {
        let mut b = [0u8; TMH_LEN];
        b[0] = self.opcode;
        b[4..8].copy_from_slice(&self.app_ctx.to_be_bytes());
        b[8..16].copy_from_slice(&self.tag.to_be_bytes());
        b
    }
}

/// A parsed rendezvous header (`struct ibv_rvh`), after the TMH.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rvh {
    /// The sender's buffer.
    pub va: u64,
    /// Its rkey.
    pub rkey: u32,
    /// Its length.
    pub len: u32,
}

impl Rvh {
    /// Parses the RVH of a message (bytes 16..32).
    pub fn parse(msg: &[u8]) -> Option<Rvh> {
        let b = msg.get(TMH_LEN..RNDV_HDR_LEN)?;
        Some(Rvh {
            va: u64::from_be_bytes(b[0..8].try_into().ok()?),
            rkey: u32::from_be_bytes(b[8..12].try_into().ok()?),
            len: u32::from_be_bytes(b[12..16].try_into().ok()?),
        })
    }
}

/// A posted tag (`IBV_WR_TAG_ADD`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagEntry {
    /// Matching value.
    pub tag: u64,
    /// Matching mask.
    pub mask: u64,
    /// The receive's id (`tm.add.recv_wr_id`).
    pub recv_wr_id: u64,
    /// Where the data goes.
    pub sgl: Sgl,
}

/// One `ibv_post_srq_ops` operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TmOp {
    /// Add a tag; the answer is its handle.
    Add(TagEntry),
    /// Remove the tag of this handle.
    Del(u32),
    /// Only report the unexpected count.
    Sync,
}

/// A TM SRQ's capacities (`struct ibv_tm_cap`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TmCap {
    /// Tags the list may hold.
    pub max_num_tags: u32,
    /// Operations outstanding at once (software completes each at once).
    pub max_ops: u32,
}

/// One `ibv_post_srq_ops` operation with its flags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrqOp {
    /// Completion id (`ibv_ops_wr.wr_id`).
    pub wr_id: u64,
    /// The operation.
    pub op: TmOp,
    /// Unexpected messages software handled (`tm.unexpected_cnt`).
    pub unexpected: u32,
    /// `IBV_OPS_TM_SYNC`: report `unexpected`.
    pub sync: bool,
    /// `IBV_OPS_SIGNALED`: complete on the SRQ's CQ.
    pub signaled: bool,
}

/// What the TM part of an SRQ holds.
#[derive(Debug)]
pub(crate) struct TmSrq {
    /// Where operation and receive completions go.
    pub(crate) cq: CqHandle,
    /// Posted tags by handle (index); `None` is a free handle.
    pub(crate) tags: Vec<Option<(u64, TagEntry)>>,
    /// Tag-list capacity (`tm_cap.max_num_tags`).
    pub(crate) max_num_tags: u32,
    /// Unexpected messages the device counted.
    pub(crate) unexpected: u32,
    /// Unexpected messages software last said it handled.
    pub(crate) synced: u32,
    /// Order of adds, so the oldest matching tag wins.
    pub(crate) next_seq: u64,
}

/// Where an incoming message of a TM SRQ goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Route {
    /// An ordinary SRQ receive; the completion's opcode and whether it is
    /// an unexpected tagged message.
    Plain {
        /// `TmNoTag`, `TmRecv` (unexpected) or `Recv` (no TMH).
        opcode: crate::WcOpcode,
    },
    /// Eager, matched: the data after the TMH into this tag's buffer.
    Eager(Tmh, RecvWr),
    /// Rendezvous, matched: READ into this tag's buffer.
    Rndv(Tmh, RecvWr),
}

impl TmSrq {
    pub(crate) fn new(cq: CqHandle, max_num_tags: u32) -> TmSrq {
        TmSrq {
            cq,
            tags: Vec::new(),
            max_num_tags,
            unexpected: 0,
            synced: 0,
            next_seq: 0,
        }
    }

    fn posted(&self) -> usize {
        self.tags.iter().filter(|t| t.is_some()).count()
    }

    /// Applies an operation with the software's unexpected count (when
    /// `sync`); `Ok(handle)` for an add, `Err(())` when a DEL names no
    /// posted tag (`IBV_WC_TM_ERR`).
    pub(crate) fn apply(&mut self, op: TmOp, unexpected: u32, sync: bool) -> Result<u32, ()> {
        if sync {
            self.synced = unexpected;
        }
        match op {
            TmOp::Add(e) => {
                let seq = self.next_seq;
                self.next_seq += 1;
                let slot = match self.tags.iter().position(Option::is_none) {
                    Some(i) => i,
                    None => {
                        self.tags.push(None);
                        self.tags.len() - 1
                    }
                };
                self.tags[slot] = Some((seq, e));
                Ok(slot as u32)
            }
            TmOp::Del(h) => match self.tags.get_mut(h as usize) {
                Some(t @ Some(_)) => {
                    *t = None;
                    Ok(h)
                }
                _ => Err(()),
            },
            TmOp::Sync => Ok(0),
        }
    }

    /// Whether an add would overflow the list.
    pub(crate) fn full(&self) -> bool {
        self.posted() >= self.max_num_tags as usize
    }

    /// Whether software has handled every unexpected message.
    pub(crate) fn in_sync(&self) -> bool {
        self.unexpected == self.synced
    }

    /// Routes a message whose first bytes are `head` (at least the first
    /// packet's payload).
    pub(crate) fn route(&mut self, head: &[u8]) -> Route {
        let Some(tmh) = Tmh::parse(head) else {
            return Route::Plain {
                opcode: crate::WcOpcode::Recv,
            };
        };
        match tmh.opcode {
            tmh_op::NO_TAG => Route::Plain {
                opcode: crate::WcOpcode::TmNoTag,
            },
            tmh_op::EAGER | tmh_op::RNDV => {
                let rndv = tmh.opcode == tmh_op::RNDV;
                let hit = if self.in_sync() && (!rndv || head.len() >= RNDV_HDR_LEN) {
                    self.take_match(tmh.tag)
                } else {
                    None
                };
                match hit {
                    Some(e) => {
                        let wqe = RecvWr {
                            wr_id: e.recv_wr_id,
                            sgl: e.sgl,
                        };
                        if rndv {
                            Route::Rndv(tmh, wqe)
                        } else {
                            Route::Eager(tmh, wqe)
                        }
                    }
                    None => {
                        self.unexpected = self.unexpected.wrapping_add(1);
                        Route::Plain {
                            opcode: crate::WcOpcode::TmRecv,
                        }
                    }
                }
            }
            _ => Route::Plain {
                opcode: crate::WcOpcode::Recv,
            },
        }
    }

    /// Removes and returns the oldest posted tag matching `tag`.
    fn take_match(&mut self, tag: u64) -> Option<TagEntry> {
        let i = self
            .tags
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.as_ref().map(|(seq, e)| (i, *seq, e)))
            .filter(|(_, _, e)| tag & e.mask == e.tag & e.mask)
            .min_by_key(|(_, seq, _)| *seq)?
            .0;
        self.tags[i].take().map(|(_, e)| e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eager(tag: u64) -> Vec<u8> {
        let mut m = Tmh {
            opcode: tmh_op::EAGER,
            app_ctx: 7,
            tag,
        }
        .to_bytes()
        .to_vec();
        m.extend_from_slice(b"data");
        m
    }

    fn add(t: &mut TmSrq, tag: u64, id: u64) -> u32 {
        t.apply(
            TmOp::Add(TagEntry {
                tag,
                mask: 0xffff,
                recv_wr_id: id,
                sgl: Sgl::new(),
            }),
            0,
            false,
        )
        .unwrap()
    }

    #[test]
    fn the_oldest_matching_tag_wins_and_is_consumed() {
        let mut t = TmSrq::new(CqHandle(0), 4);
        add(&mut t, 5, 50);
        add(&mut t, 0x1_0005, 51); // same under the mask, newer
        let Route::Eager(h, w) = t.route(&eager(5)) else {
            panic!("no match")
        };
        assert_eq!((h.tag, h.app_ctx, w.wr_id), (5, 7, 50));
        let Route::Eager(_, w) = t.route(&eager(5)) else {
            panic!("no match")
        };
        assert_eq!(w.wr_id, 51);
        assert_eq!(
            t.route(&eager(5)),
            Route::Plain {
                opcode: crate::WcOpcode::TmRecv
            }
        );
        assert_eq!(t.unexpected, 1);
    }

    #[test]
    fn matching_stops_after_an_unexpected_message_until_synced() {
        let mut t = TmSrq::new(CqHandle(0), 4);
        add(&mut t, 1, 10);
        assert!(matches!(t.route(&eager(2)), Route::Plain { .. }));
        // Out of sync: even a matching tag is unexpected now.
        assert!(matches!(t.route(&eager(1)), Route::Plain { .. }));
        assert_eq!(t.unexpected, 2);
        t.apply(TmOp::Sync, 2, true).unwrap();
        assert!(matches!(t.route(&eager(1)), Route::Eager(..)));
    }

    #[test]
    fn no_tag_and_short_messages_use_ordinary_receives_and_count_nothing() {
        let mut t = TmSrq::new(CqHandle(0), 4);
        let mut m = eager(1);
        m[0] = tmh_op::NO_TAG;
        assert_eq!(
            t.route(&m),
            Route::Plain {
                opcode: crate::WcOpcode::TmNoTag
            }
        );
        assert_eq!(
            t.route(b"short"),
            Route::Plain {
                opcode: crate::WcOpcode::Recv
            }
        );
        assert_eq!(t.unexpected, 0);
    }

    #[test]
    fn del_frees_a_handle_once_and_headers_round_trip() {
        let mut t = TmSrq::new(CqHandle(0), 1);
        let h = add(&mut t, 3, 30);
        assert!(t.full());
        assert_eq!(t.apply(TmOp::Del(h), 0, false), Ok(h));
        assert_eq!(t.apply(TmOp::Del(h), 0, false), Err(()));
        assert!(!t.full());
        let mut m = Tmh {
            opcode: tmh_op::RNDV,
            app_ctx: 1,
            tag: 9,
        }
        .to_bytes()
        .to_vec();
        m.extend_from_slice(&0x1000u64.to_be_bytes());
        m.extend_from_slice(&0xabcdu32.to_be_bytes());
        m.extend_from_slice(&64u32.to_be_bytes());
        assert_eq!(
            Rvh::parse(&m),
            Some(Rvh {
                va: 0x1000,
                rkey: 0xabcd,
                len: 64
            })
        );
        assert_eq!(Tmh::parse(&m).unwrap().tag, 9);
    }
}
