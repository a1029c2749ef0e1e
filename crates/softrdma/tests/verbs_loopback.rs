//! The safe API between two devices in one process, over real UDP on loopback.

mod common;

use common::loopback::{ALL, connect_pair, two_devices_at, ud_qp};
use softrdma::verbs::*;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

/// Two devices, at 127.0.0.11 and 127.0.0.12.
fn two_contexts() -> (Context, Context) {
    let at = |d| IpAddr::V4(Ipv4Addr::new(127, 0, 0, d));
    two_devices_at(at(11), at(12))
}

const T: Duration = Duration::from_secs(10);

#[test]
fn rc_all_operations() {
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (ma, mb) = (
        pa.alloc_mr(1 << 20, ALL).unwrap(),
        pb.alloc_mr(1 << 20, ALL).unwrap(),
    );
    let (qa_cq, qb_cq) = (
        ca.create_cq(256, None).unwrap(),
        cb.create_cq(256, None).unwrap(),
    );
    let qa = pa
        .create_qp(&QpInit::new(QpType::Rc, &qa_cq, &qa_cq))
        .unwrap();
    let qb = pb
        .create_qp(&QpInit::new(QpType::Rc, &qb_cq, &qb_cq))
        .unwrap();
    for q in [&qa, &qb] {
        q.to_init(
            Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            0,
        )
        .unwrap();
    }
    connect_pair((&ca, &qa), (&cb, &qb), (0x000010, 0xFFFFFE));

    let data: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 24) as u8)
        .collect();
    ma.write(0, &data).unwrap();
    qb.post_recv(RecvWr {
        wr_id: 1,
        sgl: [mb.sge(0, 100_000).unwrap()].into(),
    })
    .unwrap();
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let (clock_before, wall_before) = (ca.device_clock().unwrap(), wall());
    let mut s = SendWr::new(10, WrOpcode::SendWithImm);
    s.imm_data = 0x01020304;
    s.flags = SendFlags::SIGNALED;
    s.sgl = [ma.sge(0, 70_000).unwrap()].into();
    qa.post_send(s).unwrap();
    let mut w = SendWr::new(11, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [ma.sge(0, 200_000).unwrap()].into();
    w.remote_addr = mb.addr() + 300_000;
    w.rkey = mb.rkey();
    qa.post_send(w).unwrap();
    let mut r = SendWr::new(12, WrOpcode::RdmaRead);
    r.flags = SendFlags::SIGNALED;
    r.sgl = [ma.sge(500_000, 200_000).unwrap()].into();
    r.remote_addr = mb.addr() + 300_000;
    r.rkey = mb.rkey();
    qa.post_send(r).unwrap();
    let mut f = SendWr::new(13, WrOpcode::AtomicFetchAndAdd);
    f.flags = SendFlags::SIGNALED;
    f.sgl = [ma.sge(800_000, 8).unwrap()].into();
    f.remote_addr = mb.addr() + 900_000;
    f.rkey = mb.rkey();
    f.compare_add = 41;
    qa.post_send(f).unwrap();
    let wcs = qa_cq.poll_blocking(4, T).unwrap();
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        vec![
            (10, WcStatus::Success, WcOpcode::Send),
            (11, WcStatus::Success, WcOpcode::RdmaWrite),
            (12, WcStatus::Success, WcOpcode::RdmaRead),
            (13, WcStatus::Success, WcOpcode::FetchAdd),
        ]
    );
    let rx = qb_cq.poll_blocking(1, T).unwrap();
    // Completion times: on the device clock (one for both devices, as for
    // every process of the host device), in completion order, within the
    // readings around the exchange; the wall clock likewise (1 ms slack).
    let (clock_after, wall_after) = (cb.device_clock().unwrap(), wall());
    let times: Vec<(u64, u64)> = wcs.iter().map(|w| ca.completion_time(w).unwrap()).collect();
    let (recv_clock, recv_wall) = cb.completion_time(&rx[0]).unwrap();
    assert!(clock_before <= recv_clock && recv_clock <= times[0].0);
    assert!(times.windows(2).all(|p| p[0].0 <= p[1].0), "{times:?}");
    assert!(times[3].0 <= clock_after, "{times:?} after {clock_after}");
    for (_, w) in times.iter().chain([&(recv_clock, recv_wall)]) {
        assert!(*w + 1_000_000 >= wall_before && *w <= wall_after + 1_000_000);
    }
    assert_eq!(rx[0].byte_len, 70_000);
    assert_eq!(rx[0].imm_data, 0x01020304);
    assert!(rx[0].wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(mb.to_vec(0, 70_000).unwrap(), data[..70_000]);
    assert_eq!(mb.to_vec(300_000, 200_000).unwrap(), data[..]);
    assert_eq!(ma.to_vec(500_000, 200_000).unwrap(), data[..]);
    assert_eq!(mb.to_vec(900_000, 8).unwrap(), 41u64.to_ne_bytes());
    assert_eq!(ma.to_vec(800_000, 8).unwrap(), 0u64.to_ne_bytes());
}

#[test]
fn bad_rkey_is_remote_access_error_and_memory_untouched() {
    let (ca, cb) = two_contexts();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (ma, mb) = (
        pa.alloc_mr(4096, all).unwrap(),
        pb.alloc_mr(4096, all).unwrap(),
    );
    mb.write(0, &[0xAB; 4096]).unwrap();
    let (cqa, cqb) = (
        ca.create_cq(16, None).unwrap(),
        cb.create_cq(16, None).unwrap(),
    );
    let qa = pa.create_qp(&QpInit::new(QpType::Rc, &cqa, &cqa)).unwrap();
    let qb = pb.create_qp(&QpInit::new(QpType::Rc, &cqb, &cqb)).unwrap();
    qa.to_init(Access::REMOTE_WRITE, 0).unwrap();
    qb.to_init(Access::REMOTE_WRITE, 0).unwrap();
    connect_pair((&ca, &qa), (&cb, &qb), (2, 1));
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [ma.sge(0, 64).unwrap()].into();
    w.remote_addr = mb.addr();
    w.rkey = mb.rkey() ^ 0x100;
    qa.post_send(w).unwrap();
    let wc = cqa.poll_blocking(1, T).unwrap();
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert_eq!(mb.to_vec(0, 4096).unwrap(), vec![0xAB; 4096]);
    assert_eq!(qa.query().unwrap().qp_state, QpState::Err);
}

#[test]
fn ud_send_with_grh() {
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (ma, mb) = (
        pa.alloc_mr(8192, Access::LOCAL_WRITE).unwrap(),
        pb.alloc_mr(8192, Access::LOCAL_WRITE).unwrap(),
    );
    let (cqa, cqb) = (
        ca.create_cq(16, None).unwrap(),
        cb.create_cq(16, None).unwrap(),
    );
    let qa = ud_qp(&pa, &cqa, 0x11111111);
    let qb = ud_qp(&pb, &cqb, 0x11111111);
    ma.write(0, b"hello over UD").unwrap();
    qb.post_recv(RecvWr {
        wr_id: 5,
        sgl: [mb.sge(0, 1024 + 40).unwrap()].into(),
    })
    .unwrap();
    let ah = pa
        .create_ah(AddressVector::to_ip(cb.local_addr().ip()))
        .unwrap();
    let mut s = SendWr::new(6, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [ma.sge(0, 13).unwrap()].into();
    s.ud = Some(ah.dest(qb.qpn(), 0x11111111));
    qa.post_send(s).unwrap();
    assert_eq!(
        cqa.poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    let r = cqb.poll_blocking(1, T).unwrap();
    assert_eq!(r[0].status, WcStatus::Success);
    assert_eq!(r[0].byte_len, 40 + 13);
    assert_eq!(r[0].src_qp, qa.qpn());
    assert!(r[0].wc_flags.contains(WcFlags::GRH));
    let buf = mb.to_vec(0, 53).unwrap();
    assert_eq!(&buf[40..], b"hello over UD");
    // The GRH area holds the IPv4 header after 20 zero bytes: source address at 32..36.
    assert_eq!(buf[20] >> 4, 4);
    assert_eq!(&buf[32..36], &[127, 0, 0, 11]);
}

#[test]
fn completion_channel_wakes_blocked_waiter() {
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let (ma, mb) = (
        pa.alloc_mr(64, Access::LOCAL_WRITE).unwrap(),
        pb.alloc_mr(64, Access::LOCAL_WRITE).unwrap(),
    );
    let ch = cb.create_comp_channel().unwrap();
    let cqb = cb.create_cq(16, Some(&ch)).unwrap();
    let cqa = ca.create_cq(16, None).unwrap();
    let qa = pa.create_qp(&QpInit::new(QpType::Rc, &cqa, &cqa)).unwrap();
    let qb = pb.create_qp(&QpInit::new(QpType::Rc, &cqb, &cqb)).unwrap();
    qa.to_init(Access::EMPTY, 0).unwrap();
    qb.to_init(Access::EMPTY, 0).unwrap();
    connect_pair((&ca, &qa), (&cb, &qb), (9, 7));
    qb.post_recv(RecvWr {
        wr_id: 1,
        sgl: [mb.sge(0, 64).unwrap()].into(),
    })
    .unwrap();
    cqb.req_notify(false).unwrap();
    let waiter = std::thread::spawn(move || ch.wait().unwrap());
    std::thread::sleep(Duration::from_millis(50));
    let mut s = SendWr::new(2, WrOpcode::Send);
    s.sgl = [ma.sge(0, 8).unwrap()].into();
    qa.post_send(s).unwrap();
    let fired = waiter.join().unwrap();
    assert_eq!(fired, cqb.id());
    assert_eq!(cqb.poll_one().unwrap().unwrap().wr_id, 1);
}

/// A batch of WRITEs posted in one call lands byte-exact, each WR completing
/// in order; a bad WR in the middle of a batch leaves the ones before it
/// posted and says how many.
#[test]
fn post_send_many_and_wait_timeout() {
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let access = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let src = pa.alloc_mr(64 * 100, access).unwrap();
    let dst = pb.alloc_mr(64 * 100, access).unwrap();
    let ch = ca.create_comp_channel().unwrap();
    let cq = ca.create_cq(256, Some(&ch)).unwrap();
    let cqb = cb.create_cq(16, None).unwrap();
    let qa = pa.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    let qb = pb.create_qp(&QpInit::new(QpType::Rc, &cqb, &cqb)).unwrap();
    qa.to_init(Access::EMPTY, 0).unwrap();
    qb.to_init(Access::REMOTE_WRITE, 0).unwrap();
    connect_pair((&ca, &qa), (&cb, &qb), (9, 5));

    // Nothing posted: an armed CQ's channel stays quiet.
    cq.req_notify(false).unwrap();
    assert_eq!(ch.wait_timeout(Duration::from_millis(50)).unwrap(), None);

    let data: Vec<u8> = (0..64 * 100).map(|i| (i * 7 % 251) as u8).collect();
    src.write(0, &data).unwrap();
    let wrs = (0..100).map(|i| {
        let mut w = SendWr::new(i, WrOpcode::RdmaWrite);
        w.flags = SendFlags::SIGNALED;
        w.sgl = [src.sge(i as usize * 64, 64).unwrap()].into();
        w.remote_addr = dst.addr() + i * 64;
        w.rkey = dst.rkey();
        w
    });
    qa.post_send_many(wrs).unwrap();
    assert_eq!(ch.wait_timeout(T).unwrap(), Some(cq.id()));
    let wcs = cq.poll_blocking(100, T).unwrap();
    assert_eq!(wcs.len(), 100);
    for (i, w) in wcs.iter().enumerate() {
        assert_eq!((w.wr_id, w.status), (i as u64, WcStatus::Success));
    }
    assert_eq!(dst.to_vec(0, data.len()).unwrap(), data);

    // One more WR than the send queue holds: the queue's worth is posted,
    // the rest refused with ENOMEM, as ibv_post_send's bad_wr reports.
    let cap = qa.cap().max_send_wr as usize;
    let wrs = (0..cap + 1).map(|i| {
        let mut w = SendWr::new(1000 + i as u64, WrOpcode::RdmaWrite);
        w.sgl = [src.sge(0, 8).unwrap()].into();
        w.remote_addr = dst.addr();
        w.rkey = dst.rkey();
        w
    });
    let (posted, e) = qa.post_send_many(wrs).unwrap_err();
    assert_eq!((posted, e.errno()), (cap, libc::ENOMEM), "{e}");
}

/// Device memory: the peer WRITEs into a zero-based region over it and
/// READs it back; the owner copies the bytes out (4-byte words) and SENDs
/// from the region; the memory outlives its handle while a region lives.
#[test]
fn device_memory_regions_local_and_remote() {
    let (ca, cb) = two_contexts();
    let (pa, pb) = (ca.alloc_pd().unwrap(), cb.alloc_pd().unwrap());
    let ma = pa.alloc_mr(8192, ALL).unwrap();
    let (qa_cq, qb_cq) = (
        ca.create_cq(64, None).unwrap(),
        cb.create_cq(64, None).unwrap(),
    );
    let qa = pa
        .create_qp(&QpInit::new(QpType::Rc, &qa_cq, &qa_cq))
        .unwrap();
    let qb = pb
        .create_qp(&QpInit::new(QpType::Rc, &qb_cq, &qb_cq))
        .unwrap();
    for q in [&qa, &qb] {
        q.to_init(Access::REMOTE_WRITE | Access::REMOTE_READ, 0)
            .unwrap();
    }
    connect_pair((&ca, &qa), (&cb, &qb), (0x000100, 0x000200));

    let dm = cb.alloc_dm(4096, 6).unwrap();
    assert_eq!(dm.len(), 4096);
    assert!(dm.write(1, b"abcd").is_err(), "unaligned copy");
    assert!(cb.alloc_dm(1 << 30, 0).is_err(), "beyond max_dm_size");
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let region = pb.reg_dm_mr(&dm, 1024, 2048, rw).unwrap();
    assert_eq!(region.remote().addr, 0, "zero-based");

    let data: Vec<u8> = (0..512u32).map(|i| (i * 7 + 3) as u8).collect();
    ma.write(0, &data).unwrap();
    let target = region.remote();
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [ma.sge(0, 512).unwrap()].into();
    w.remote_addr = target.addr + 256;
    w.rkey = target.rkey;
    qa.post_send(w).unwrap();
    let mut r = SendWr::new(2, WrOpcode::RdmaRead);
    r.flags = SendFlags::SIGNALED;
    r.sgl = [ma.sge(4096, 512).unwrap()].into();
    r.remote_addr = target.addr + 256;
    r.rkey = target.rkey;
    qa.post_send(r).unwrap();
    let wcs = qa_cq.poll_blocking(2, T).unwrap();
    assert!(wcs.iter().all(|w| w.status == WcStatus::Success), "{wcs:?}");
    let mut got = vec![0u8; 512];
    dm.read(1024 + 256, &mut got).unwrap();
    assert_eq!(got, data, "the WRITE landed in device memory");
    assert_eq!(ma.to_vec(4096, 512).unwrap(), data, "the READ came from it");

    qa.post_recv(RecvWr {
        wr_id: 3,
        sgl: [ma.sge(2048, 512).unwrap()].into(),
    })
    .unwrap();
    let mut s = SendWr::new(4, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.sgl = [region.sge(256, 512).unwrap()].into();
    qb.post_send(s).unwrap();
    assert_eq!(
        qb_cq.poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    let rx = qa_cq.poll_blocking(1, T).unwrap();
    assert_eq!((rx[0].wr_id, rx[0].byte_len), (3, 512));
    assert_eq!(
        ma.to_vec(2048, 512).unwrap(),
        data,
        "a SEND gathered from device memory"
    );

    // The region keeps the bytes after the handle is gone.
    drop(dm);
    let mut r = SendWr::new(5, WrOpcode::RdmaRead);
    r.flags = SendFlags::SIGNALED;
    r.sgl = [ma.sge(6144, 512).unwrap()].into();
    r.remote_addr = target.addr + 256;
    r.rkey = target.rkey;
    qa.post_send(r).unwrap();
    assert_eq!(
        qa_cq.poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    assert_eq!(ma.to_vec(6144, 512).unwrap(), data);
}
