//! The same-host inbox has one consumer at a time: the engine lock's
//! holder (`Shared::rx_shm`; the receive lock is not taken for it). Three
//! threads busy-poll one CQ while the progress thread reads too, and
//! every datagram of the lane is handled once: a record read twice would
//! reach the responder as a duplicate (RC counts it and answers it again),
//! one skipped would be retransmitted.

mod common;

use softrdma_engine::transport::{Access, Mtu, QpType, RecvWr, SendWr, Sge, WcStatus, WrOpcode};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const MESSAGES: u32 = 256;
const POLLERS: usize = 3;

#[test]
fn pollers_and_the_progress_thread_read_each_datagram_once() {
    let e = Arc::new(common::own_lane_engine(true));
    let mut buf = vec![0u8; 8 * MESSAGES as usize * 2];
    let ptr = buf.as_mut_ptr() as u64;
    let len = buf.len() as u64;
    let pd = e.alloc_pd().unwrap();
    let (cq_a, _) = e.create_cq(MESSAGES * 2).unwrap();
    let (cq_b, _) = e.create_cq(MESSAGES * 2).unwrap();
    let a = common::create_qp(&e, QpType::Rc, pd, cq_a, MESSAGES, 1);
    let b = common::create_qp(&e, QpType::Rc, pd, cq_b, MESSAGES, 1);
    let mr = e.reg_mr(pd, ptr, len, ptr, Access::LOCAL_WRITE).unwrap();
    common::connect_rc(&e, a, &e, b, Mtu::M1024, 100);
    common::connect_rc(&e, b, &e, a, Mtu::M1024, 100);
    let half = 8 * u64::from(MESSAGES);
    let sge = |at: u64| Sge {
        addr: ptr + at,
        length: 8,
        lkey: mr.lkey,
    };
    for i in 0..MESSAGES {
        buf[8 * i as usize..][..8].copy_from_slice(&u64::from(i).to_le_bytes());
        let wr = RecvWr {
            wr_id: u64::from(i),
            sgl: [sge(half + 8 * u64::from(i))].into(),
        };
        e.post_recv(b, wr).unwrap();
    }
    let got = Arc::new(Mutex::new(Vec::new()));
    let taken = Arc::new(AtomicUsize::new(0));
    let pollers: Vec<_> = (0..POLLERS)
        .map(|_| {
            let (e, got, taken) = (Arc::clone(&e), Arc::clone(&got), Arc::clone(&taken));
            std::thread::spawn(move || {
                let t0 = Instant::now();
                while taken.load(Ordering::Relaxed) < MESSAGES as usize {
                    assert!(t0.elapsed() < Duration::from_secs(20), "messages missing");
                    let mut mine = Vec::new();
                    e.poll_cq(cq_b, 4, |w| mine.push((w.wr_id, w.status)))
                        .unwrap();
                    taken.fetch_add(mine.len(), Ordering::Relaxed);
                    got.lock().unwrap().extend(mine);
                }
            })
        })
        .collect();
    for i in 0..MESSAGES {
        let mut wr = SendWr::new(u64::from(i), WrOpcode::Send);
        wr.sgl = [sge(8 * u64::from(i))].into();
        e.post_send(a, wr).unwrap();
    }
    for p in pollers {
        p.join().unwrap();
    }
    let mut got = got.lock().unwrap().clone();
    got.sort_by_key(|g| g.0);
    let want: Vec<_> = (0..u64::from(MESSAGES))
        .map(|i| (i, WcStatus::Success))
        .collect();
    assert_eq!(got, want, "each message's receive completed once");
    for i in 0..MESSAGES as usize {
        assert_eq!(buf[half as usize + 8 * i..][..8], (i as u64).to_le_bytes());
    }
    assert_eq!(
        common::wait_wc(&e, cq_a, MESSAGES as usize).len(),
        MESSAGES as usize
    );
    let (stats, _) = e.stats();
    assert_eq!(
        (stats.rx_duplicates, stats.retransmits),
        (0, 0),
        "every datagram was read once"
    );
    // Through the lane: each SEND and (at least) the last ACK.
    let shm: std::collections::HashMap<_, _> = e.shm_counters().into_iter().collect();
    assert_eq!(shm["shm_tx"], shm["shm_rx"], "{shm:?}");
    assert!(shm["shm_rx"] > u64::from(MESSAGES), "{shm:?}");
}
