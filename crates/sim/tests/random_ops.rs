//! Randomized mixed operations over a faulty network, every completion,
//! message, atomic and byte checked by the model's oracle (see
//! `softrdma_sim::model`). Each RC run: 3 nodes, 4 connections (8 busy
//! directions, node 1's QPs on one SRQ), PSNs starting just below the 2^24
//! wrap, random MTUs, 10,000 operations.

use softrdma_sim::model::{RcConfig, Report, UcConfig, UdConfig, run_rc, run_uc, run_ud};

fn rc(seed: u64, loss: f64) -> Report {
    let mut c = RcConfig::standard(seed, loss, 10_000);
    c.allow_exhaustion = loss > 0.2;
    let r = run_rc(&c).unwrap_or_else(|e| panic!("{e}"));
    println!("seed {seed}, loss {loss}:\n{r}");
    assert!(r.ops() >= 10_000);
    r
}

#[test]
fn rc_clean_network() {
    for seed in [1, 2, 11] {
        let r = rc(seed, 0.0);
        assert_eq!(r.failed, 0);
        // Late receives made the responders NAK "receiver not ready".
        assert!(r.stats.rx_rnr_nak > 0);
    }
}

#[test]
fn rc_one_percent_loss() {
    for seed in [3, 4, 12] {
        let r = rc(seed, 0.01);
        assert_eq!(r.failed, 0);
        assert!(r.stats.tx_nak_seq > 0 && r.stats.drop_bad_icrc > 0);
    }
}

#[test]
fn rc_ten_percent_loss() {
    // (Seed 6 is one of the rare runs where, with these faults, a READ
    // legitimately exhausts its 7 retries; see the 30 % test.)
    for seed in [5, 10, 13] {
        let r = rc(seed, 0.1);
        assert_eq!(r.failed, 0);
        assert!(r.stats.timeouts > 0 && r.stats.rx_duplicates > 0);
    }
}

/// At 30 % loss (plus duplication, reordering and bit flips) seven retries
/// are sometimes not enough, typically for a multi-packet READ: the oracle
/// accepts exactly a success prefix, one RETRY_EXC_ERR, then WR_FLUSH_ERR for
/// every other WR and receive, with memory consistent for the prefix. The
/// connection is then torn down and a new QP pair continues the run.
#[test]
fn rc_thirty_percent_loss_exhaustion() {
    for seed in [7, 8] {
        let r = rc(seed, 0.3);
        assert!(r.exhausted_dirs > 0 && r.reconnects > 0);
        assert!(r.succeeded > r.failed);
    }
}

/// Deep send queues (up to 120 WRs unconfirmed per QP, against a 128-PSN
/// window) and every receive posted late, on two nodes without an SRQ.
#[test]
fn rc_deep_queues_late_receives() {
    let mut c = RcConfig::standard(9, 0.05, 10_000);
    c.nodes = 2;
    c.conns = vec![(0, 1), (1, 0)];
    c.srq_node = None;
    c.window = 120;
    c.late_recv = 1.0;
    let r = run_rc(&c).unwrap_or_else(|e| panic!("{e}"));
    println!("{r}");
    assert_eq!(r.failed, 0);
    assert!(r.stats.rx_rnr_nak > 20);
}

/// Direct records (`Config::direct`: a lone small SEND, WRITE or READ to an
/// idle QP leaves at the post in the same-host path's compact form, and a
/// small READ's response comes back as one) among the
/// packets, under the same faults: records lost, duplicated, reordered and
/// delayed; every completion, message and byte checked as above. Messages
/// stay below peer copy's size here (the QPs are marked as lane peers).
#[test]
fn rc_direct_records_under_faults() {
    for (seed, loss) in [(21, 0.0), (22, 0.01), (23, 0.1)] {
        let mut c = RcConfig::standard(seed, loss, 10_000);
        c.direct = true;
        // Few unconfirmed operations per direction: most posts find their
        // QP idle and leave as records, some queue behind one.
        c.window = 2;
        let r = run_rc(&c).unwrap_or_else(|e| panic!("{e}"));
        println!("seed {seed}, loss {loss}, direct records:\n{r}");
        println!(
            "direct records: {} sent, {} received",
            r.stats.tx_direct, r.stats.rx_direct
        );
        assert_eq!(r.failed, 0);
        assert!(r.stats.tx_direct > 1000, "{}", r.stats.tx_direct);
        assert!(r.stats.rx_direct > 0);
        if loss > 0.0 {
            assert!(r.stats.retransmits > 0 && r.net.lost > 0);
        }
    }
}

/// The responder's express path (`Config::express`) against the generic
/// one: the same seeded operations and faults with it on and off end with
/// the same completions, counters, virtual time and packets on the network
/// (`NetStats::digest`: every byte, in order; every byte in memory is
/// checked by the oracle both ways), and it took many records. Any
/// difference in what it checks, completes or ACKs changes the run: a
/// missing ACK a retransmission, a wrong MSN the ACKs' bytes.
#[test]
fn rc_express_responder_runs_as_the_generic_one() {
    for (seed, loss) in [(31, 0.0), (32, 0.01), (33, 0.1)] {
        let run = |express: bool| {
            let mut c = RcConfig::standard(seed, loss, 6_000);
            (c.direct, c.express, c.window) = (true, express, 2);
            run_rc(&c).unwrap_or_else(|e| panic!("seed {seed}, express {express}: {e}"))
        };
        let (on, off) = (run(true), run(false));
        println!(
            "seed {seed}, loss {loss}: {} of {} records by the express path",
            on.stats.rx_express, on.stats.rx_direct
        );
        assert_eq!((off.stats.rx_express, off.stats.rx_in_place), (0, 0));
        // Records are also READ requests and responses, which it leaves.
        assert!(on.stats.rx_express * 3 > on.stats.rx_direct, "{on}");
        // Most of those it took were read in place (`read_request`); the
        // rest came as packets (a lost record's retransmission).
        assert!(on.stats.rx_in_place * 10 > on.stats.rx_express * 9, "{on}");
        assert!(on.stats.rx_in_place <= on.stats.rx_express, "{on}");
        let mut stats = on.stats;
        (stats.rx_express, stats.rx_in_place) = (0, 0);
        assert_eq!(stats, off.stats, "seed {seed}");
        assert_eq!(on.net, off.net, "seed {seed}");
        assert_eq!(
            (on.succeeded, on.failed, on.bytes, on.elapsed),
            (off.succeeded, off.failed, off.bytes, off.elapsed),
            "seed {seed}"
        );
        assert_eq!(on.failed, 0);
    }
}

/// The express post (`Express::post`): posts go through each QP's cell
/// first; a lent requester writes a lone small SEND or WRITE as a record
/// without the endpoint, settled by its plain ACK and taken back for
/// anything else (a post it does not take, a NAK, an RNR NAK, the lease
/// when a record or ACK was lost). Every completion, message and byte is
/// checked by the oracle under the same faults as above; the simulator's
/// debug assertions check that no requester path runs while lent and that
/// every timer reaches the heap.
#[test]
fn rc_express_post_under_faults() {
    for (seed, loss) in [(41, 0.0), (42, 0.01), (43, 0.1)] {
        let mut c = RcConfig::standard(seed, loss, 10_000);
        (c.direct, c.express, c.express_post, c.window) = (true, true, true, 2);
        let r = run_rc(&c).unwrap_or_else(|e| panic!("seed {seed}, loss {loss}: {e}"));
        println!(
            "seed {seed}, loss {loss}: {} express posts, {} records:\n{r}",
            r.stats.tx_express, r.stats.tx_direct
        );
        assert_eq!(r.failed, 0);
        assert!(r.stats.tx_express > 300, "{}", r.stats.tx_express);
        assert!(r.stats.recv_express > 300, "{}", r.stats.recv_express);
        println!(
            "seed {seed}: {} requests through lent responders",
            r.stats.rx_lent
        );
        if loss > 0.0 {
            assert!(r.stats.retransmits > 0 && r.net.lost > 0);
        }
    }
}

/// The express post against the transport's: the same seeded operations
/// with posts through the cells and without send the same packets in the
/// same order (`NetStats::content`) and count the same, but for the
/// records the cells wrote. (Not the same times: a run waits for quiet,
/// and a lease is a timer. Loss is kept low: a retransmission after a
/// lost packet moves the later faults' draws with those times.)
#[test]
fn rc_express_post_sends_what_the_transport_would() {
    for (seed, loss) in [(45, 0.0), (47, 0.01), (50, 0.01)] {
        let run = |express_post: bool| {
            let mut c = RcConfig::standard(seed, loss, 6_000);
            (c.direct, c.express, c.window) = (true, true, 2);
            c.express_post = express_post;
            run_rc(&c).unwrap_or_else(|e| panic!("seed {seed}: {e}"))
        };
        let (on, off) = (run(true), run(false));
        assert!(on.stats.tx_express > 150, "{}", on.stats.tx_express);
        assert!(on.stats.recv_express > 150, "{}", on.stats.recv_express);
        let mut stats = on.stats;
        (stats.tx_express, stats.recv_express, stats.rx_lent) = (0, 0, 0);
        assert_eq!(stats, off.stats, "seed {seed}");
        assert_eq!(on.net.content, off.net.content, "seed {seed}");
        assert_eq!((on.succeeded, on.failed), (off.succeeded, 0), "seed {seed}");
    }
}

/// The responder lent with its requester (`qp/express/exec.rs`) against
/// the transport's: SENDs and WRITEs, each QP posting and receiving, so
/// that idle QPs lend both. Without loss, posts through the cells and without
/// send the same packets in the same order and count the same, but for
/// the cells' own counters; with loss (the lease and the reclaims then
/// move the timers, and with them the later faults' draws) every
/// completion, message and byte still passes the oracle.
#[test]
fn rc_lent_responder_runs_as_the_transport() {
    let run = |seed: u64, loss: f64, express_post: bool| {
        let mut c = RcConfig::standard(seed, loss, 6_000);
        (c.direct, c.express, c.window, c.no_reads) = (true, true, 1, true);
        // Packets go as over a lane, where nothing flips a bit.
        (c.lane_acks, c.faults.bitflip) = (true, 0.0);
        c.srq_node = None;
        c.express_post = express_post;
        run_rc(&c).unwrap_or_else(|e| panic!("seed {seed}, loss {loss}: {e}"))
    };
    for seed in [61, 63, 64] {
        let (on, off) = (run(seed, 0.0, true), run(seed, 0.0, false));
        println!("seed {seed}: {} through lent responders", on.stats.rx_lent);
        assert!(on.stats.rx_lent > 300, "{}", on.stats.rx_lent);
        assert_eq!(off.stats.rx_lent, 0);
        let mut stats = on.stats;
        (stats.tx_express, stats.recv_express, stats.rx_lent) = (0, 0, 0);
        assert_eq!(stats, off.stats, "seed {seed}");
        assert_eq!(on.net.content, off.net.content, "seed {seed}");
        assert_eq!((on.succeeded, on.failed), (off.succeeded, 0), "seed {seed}");
    }
    for (seed, loss) in [(62, 0.01), (65, 0.05)] {
        let r = run(seed, loss, true);
        println!(
            "seed {seed}, loss {loss}: {} through lent responders",
            r.stats.rx_lent
        );
        assert!(r.stats.rx_lent > 100, "{}", r.stats.rx_lent);
        assert!(r.stats.retransmits > 0 && r.net.lost > 0);
        assert_eq!(r.failed, 0);
    }
}

/// UC: lost packets lose whole messages, receive WQEs are reused, nothing
/// partial or corrupt is delivered, WRITE targets are never torn inside a packet.
#[test]
fn uc_random() {
    for seed in [1, 2] {
        for loss in [0.0, 0.01, 0.1, 0.3] {
            let r = run_uc(&UcConfig {
                seed,
                loss,
                ops: 3000,
            })
            .unwrap_or_else(|e| panic!("seed {seed} loss {loss}: {e}"));
            println!("UC seed {seed} loss {loss}: {r:?}");
            if loss == 0.0 {
                assert_eq!(r.delivered, r.messages);
            } else {
                assert!(r.delivered < r.messages && r.delivered > 0);
            }
        }
    }
}

/// UD: at most once, byte-exact, GRH with the IPv4 header, src_qp; wrong
/// Q_Keys dropped and counted.
#[test]
fn ud_random() {
    for seed in [1, 2] {
        for loss in [0.0, 0.01, 0.1, 0.3] {
            let r = run_ud(&UdConfig {
                seed,
                loss,
                ops: 3000,
            })
            .unwrap_or_else(|e| panic!("seed {seed} loss {loss}: {e}"));
            println!("UD seed {seed} loss {loss}: {r:?}");
            assert!(r.bad_qkey > 0 && r.qkey_drops > 0);
            assert!(r.qkey_drops <= r.bad_qkey as u64);
        }
    }
}
