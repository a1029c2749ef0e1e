//! Completion timestamps: each completion carries the transport time of the
//! call that queued it (the basis of `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`).

use crate::{Pair, rdma, sge, wr};
use softrdma_sim::setup::PairOpts;
use softrdma_transport::{Instant, WcOpcode, WrOpcode};

/// A SEND posted at t=0 reaches the responder at t=5 (its receive completes
/// then) and the ACK the requester at t=10 (its send completes then); a
/// READ posted at t=100 completes when its response lands, at t=110.
#[test]
fn completions_carry_the_time_they_were_queued() {
    let mut p = Pair::new(PairOpts::default());
    p.recv(1, 1, 0, 64);
    p.post(0, wr(1, WrOpcode::Send, vec![sge(&p.a, 0, 8)]));
    p.idle();
    let (scq, rcq) = (p.a.scq, p.b.rcq);
    let s = p.wcs_raw(0, scq);
    let r = p.wcs_raw(1, rcq);
    assert_eq!((s.len(), r.len()), (1, 1));
    assert_eq!(r[0].opcode, WcOpcode::Recv);
    assert_eq!(r[0].timestamp, Instant::from_micros(5));
    assert_eq!(s[0].opcode, WcOpcode::Send);
    assert_eq!(s[0].timestamp, Instant::from_micros(10));

    p.net.run_to(Instant::from_micros(100));
    let b = p.b;
    p.post(
        0,
        rdma(2, WrOpcode::RdmaRead, vec![sge(&p.a, 0x100, 16)], &b, 0),
    );
    p.idle();
    let s = p.wcs_raw(0, scq);
    assert_eq!(s.len(), 1);
    assert_eq!(s[0].opcode, WcOpcode::RdmaRead);
    assert_eq!(s[0].timestamp, Instant::from_micros(110));
}
