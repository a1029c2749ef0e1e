//! Issue 12: `softrdma::verbs` over the rdma-core backend (the dlopen'ed
//! `target/compat/libibverbs.so.1` as "the system's rdma-core"), in a child
//! process with `SOFTRDMA_BACKEND=rdma-core LD_LIBRARY_PATH=target/compat`:
//! device queries, RC (SEND with immediate, WRITE, READ, both atomics,
//! chains), errors, UD with address handles, SRQ, completion channels,
//! application-owned memory. Backend selection itself: automatic, by
//! environment, by builder (with a library directory, next to a native
//! device in the same process).

mod backend_common;
mod common;

use backend_common::{Side, TIMEOUT, child, compat_dir, role};
use common::loopback::{ALL, connect_pair, ud_qp};
use common::{Proc, free_udp_port};
use softrdma::verbs::*;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

const T: Duration = Duration::from_secs(10);

/// Runs child test `test` on `side` at `addr`; panics unless it passed.
fn run_child(test: &str, side: Side, addr: &str) -> common::Output {
    let c = Proc::spawn(
        &format!("{test} ({})", side.name()),
        child(test, "verbs", side, addr, free_udp_port()),
    );
    let o = c.finish(TIMEOUT);
    o.assert_success();
    assert!(
        o.stdout.contains("1 passed"),
        "the child ran no test (was it renamed?)\n{o}"
    );
    o
}

/// A connected RC pair on one device (both QPs of this process).
fn rc_pair(ctx: &Context, pd: &Pd, cq: &Cq) -> (Qp, Qp) {
    let a = pd.create_qp(&QpInit::new(QpType::Rc, cq, cq)).unwrap();
    let b = pd.create_qp(&QpInit::new(QpType::Rc, cq, cq)).unwrap();
    for q in [&a, &b] {
        q.to_init(
            Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            0,
        )
        .unwrap();
    }
    connect_pair((ctx, &a), (ctx, &b), (0x10, 0xFF_FFF0));
    (a, b)
}

fn sorted(mut v: Vec<Wc>) -> Vec<Wc> {
    v.sort_by_key(|w| w.wr_id);
    v
}

#[test]
fn rdma_core_device_and_rc_operations() {
    run_child("child_device_and_rc", Side::RdmaCore, "127.0.12.61");
}

#[test]
#[ignore = "child process of rdma_core_device_and_rc_operations"]
fn child_device_and_rc() {
    if role().is_none() {
        return;
    }
    let ctx = Context::open().unwrap();
    println!("backend: {}", ctx.backend_info());
    assert_eq!(ctx.backend(), Backend::RdmaCore);
    let info = ctx.backend_info();
    assert_eq!(
        info.library.as_deref(),
        Some(compat_dir().join("libibverbs.so.1").as_path())
    );
    assert_eq!(devices(), vec!["softrdma0"]);
    assert_eq!(ctx.name(), "softrdma0");
    let me: IpAddr = "127.0.12.61".parse().unwrap();
    assert_eq!(ctx.local_addr(), SocketAddr::new(me, 4791));
    assert_eq!(ctx.query_gid(1, 0).unwrap(), Gid::from_ip(me));
    assert_eq!(ctx.query_pkey(1, 0).unwrap(), 0xFFFF);
    let port = ctx.query_port(1).unwrap();
    assert_eq!((port.state, port.link_layer), (4, 2));
    let dev = ctx.query_device();
    assert!(dev.max_qp_rd_atom > 0 && dev.phys_port_cnt == 1, "{dev:?}");
    assert!(dev.fw_ver.starts_with("softrdma"), "{dev:?}");
    // The same device again, and its stats are the native device's only.
    assert_eq!(Context::open().unwrap().local_addr(), ctx.local_addr());
    assert_eq!(ctx.stats(), Default::default());

    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256, None).unwrap();
    assert!(cq.cqe() >= 256);
    let (a, b) = rc_pair(&ctx, &pd, &cq);
    let attr = a.query().unwrap();
    assert_eq!((attr.qp_state, attr.dest_qp_num), (QpState::Rts, b.qpn()));
    let (ma, mb) = (
        pd.alloc_mr(1 << 20, ALL).unwrap(),
        pd.alloc_mr(1 << 20, ALL).unwrap(),
    );
    let data: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    ma.write(0, &data).unwrap();
    mb.write(900_000, &7u64.to_ne_bytes()).unwrap();
    b.post_recv(RecvWr {
        wr_id: 1,
        sgl: [mb.sge(0, 100_000).unwrap()].into(),
    })
    .unwrap();
    let target = mb.remote();
    let mut s = SendWr::new(10, WrOpcode::SendWithImm);
    s.imm_data = 0x0102_0304;
    s.flags = SendFlags::SIGNALED;
    s.sgl = [ma.sge(0, 70_000).unwrap()].into();
    let mut w = SendWr::new(11, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [ma.sge(0, 200_000).unwrap()].into();
    w.remote_addr = target.addr + 300_000;
    w.rkey = target.rkey;
    let mut r = SendWr::new(12, WrOpcode::RdmaRead);
    r.flags = SendFlags::SIGNALED;
    r.sgl = [ma.sge(500_000, 200_000).unwrap()].into();
    r.remote_addr = target.addr + 300_000;
    r.rkey = target.rkey;
    let mut f = SendWr::new(13, WrOpcode::AtomicFetchAndAdd);
    f.flags = SendFlags::SIGNALED;
    f.sgl = [ma.sge(800_000, 8).unwrap()].into();
    f.remote_addr = target.addr + 900_000;
    f.rkey = target.rkey;
    f.compare_add = 35;
    let mut c = SendWr::new(14, WrOpcode::AtomicCmpAndSwp);
    c.flags = SendFlags::SIGNALED;
    c.sgl = [ma.sge(808_000, 8).unwrap()].into();
    c.remote_addr = target.addr + 900_000;
    c.rkey = target.rkey;
    c.compare_add = 42;
    c.swap = 1000;
    // One chain (one ibv_post_send through the ops table).
    a.post_send_many([s, w, r, f, c]).unwrap();
    let wcs = sorted(cq.poll_blocking(6, T).unwrap());
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    assert_eq!(
        got,
        vec![
            (1, WcStatus::Success, WcOpcode::Recv),
            (10, WcStatus::Success, WcOpcode::Send),
            (11, WcStatus::Success, WcOpcode::RdmaWrite),
            (12, WcStatus::Success, WcOpcode::RdmaRead),
            (13, WcStatus::Success, WcOpcode::FetchAdd),
            (14, WcStatus::Success, WcOpcode::CompSwap),
        ]
    );
    let rx = &wcs[0];
    assert_eq!(
        (rx.byte_len, rx.imm_data, rx.qp_num),
        (70_000, 0x0102_0304, b.qpn())
    );
    assert!(rx.wc_flags.contains(WcFlags::WITH_IMM));
    assert_eq!(mb.to_vec(0, 70_000).unwrap(), data[..70_000]);
    assert_eq!(mb.to_vec(300_000, 200_000).unwrap(), data[..]);
    assert_eq!(ma.to_vec(500_000, 200_000).unwrap(), data[..]);
    assert_eq!(ma.to_vec(800_000, 8).unwrap(), 7u64.to_ne_bytes());
    assert_eq!(ma.to_vec(808_000, 8).unwrap(), 42u64.to_ne_bytes());
    assert_eq!(mb.to_vec(900_000, 8).unwrap(), 1000u64.to_ne_bytes());

    // Inline data from the request's own buffer; receives posted as a chain.
    b.post_recv_many((0..3).map(|i| RecvWr {
        wr_id: 20 + i,
        sgl: [mb.sge(i as usize * 64, 64).unwrap()].into(),
    }))
    .unwrap();
    let mut s = SendWr::new(30, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED | SendFlags::INLINE;
    s.inline = Some(b"inline!".to_vec());
    a.post_send(s).unwrap();
    let wcs = sorted(cq.poll_blocking(2, T).unwrap());
    assert_eq!((wcs[0].wr_id, wcs[0].byte_len), (20, 7));
    assert_eq!(mb.to_vec(0, 7).unwrap(), b"inline!");

    // Application-owned memory.
    let mut own = vec![0u8; 4096];
    // SAFETY: `own` outlives the registration and is not touched while registered.
    let raw = unsafe { pd.register_raw(own.as_mut_ptr(), own.len(), ALL) }.unwrap();
    let mut w = SendWr::new(40, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [ma.sge(0, 4096).unwrap()].into();
    w.remote_addr = raw.addr();
    w.rkey = raw.rkey();
    a.post_send(w).unwrap();
    assert_eq!(cq.poll_blocking(1, T).unwrap()[0].status, WcStatus::Success);
    drop(raw);
    assert_eq!(own[..], data[..4096]);

    // Errors: a bad rkey is a completion; bad verbs are errors with rdma-core's errno.
    let mut w = SendWr::new(50, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [ma.sge(0, 8).unwrap()].into();
    w.remote_addr = target.addr;
    w.rkey = target.rkey ^ 0x5a00;
    a.post_send(w).unwrap();
    // The responder goes to ERR too, flushing its two receives left.
    let wcs = sorted(cq.poll_blocking(3, T).unwrap());
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status)).collect();
    assert_eq!(
        got,
        vec![
            (21, WcStatus::WrFlushErr),
            (22, WcStatus::WrFlushErr),
            (50, WcStatus::RemAccessErr)
        ]
    );
    let fresh = pd.create_qp(&QpInit::new(QpType::Rc, &cq, &cq)).unwrap();
    let e = fresh
        .modify(
            &QpAttr {
                qp_state: QpState::Rts,
                ..QpAttr::default()
            },
            QpAttrMask::STATE,
        )
        .unwrap_err();
    assert_eq!(e.errno(), 22, "{e}");
    assert!(ctx.query_port(9).is_err());
    let mut big = QpInit::new(QpType::Rc, &cq, &cq);
    big.cap.max_send_wr = u32::MAX;
    assert!(pd.create_qp(&big).is_err());
    // The native device's objects do not mix with rdma-core's.
    let _ = (a, b, fresh);
}

#[test]
fn rdma_core_ud_srq_and_channels() {
    run_child("child_ud_srq_channels", Side::RdmaCore, "127.0.12.63");
}

#[test]
#[ignore = "child process of rdma_core_ud_srq_and_channels"]
fn child_ud_srq_channels() {
    if role().is_none() {
        return;
    }
    let ctx = Context::open().unwrap();
    assert_eq!(ctx.backend(), Backend::RdmaCore);
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(64, Some(&ch)).unwrap();
    let scq = ctx.create_cq(64, None).unwrap();

    // UD through an address handle; the receive buffer starts with the GRH.
    const QKEY: u32 = 0x1111_1111;
    let (tx, rx) = (ud_qp(&pd, &scq, QKEY), ud_qp(&pd, &cq, QKEY));
    let buf = pd.alloc_mr(40 + 256, Access::LOCAL_WRITE).unwrap();
    rx.post_recv(RecvWr {
        wr_id: 1,
        sgl: [buf.sge(0, 40 + 256).unwrap()].into(),
    })
    .unwrap();
    // Nothing yet: the channel stays quiet.
    cq.req_notify(false).unwrap();
    assert_eq!(ch.wait_timeout(Duration::from_millis(50)).unwrap(), None);
    let ah = pd
        .create_ah(AddressVector::to_ip(ctx.local_addr().ip()))
        .unwrap();
    let payload = pd.register(b"a datagram", Access::LOCAL_WRITE).unwrap();
    let mut wr = SendWr::new(2, WrOpcode::SendWithImm);
    wr.flags = SendFlags::SIGNALED;
    wr.imm_data = 77;
    wr.sgl = [payload.sge(0, 10).unwrap()].into();
    wr.ud = Some(ah.dest(rx.qpn(), QKEY));
    tx.post_send(wr).unwrap();
    assert_eq!(
        scq.poll_blocking(1, T).unwrap()[0].status,
        WcStatus::Success
    );
    // The armed CQ fires on the channel (ibv_get_cq_event, acknowledged).
    assert_eq!(ch.wait_timeout(T).unwrap(), Some(cq.id()));
    let wc = cq.poll_one().unwrap().expect("the datagram");
    assert_eq!(
        (wc.status, wc.byte_len, wc.src_qp, wc.imm_data),
        (WcStatus::Success, 40 + 10, tx.qpn(), 77)
    );
    assert!(wc.wc_flags.contains(WcFlags::GRH));
    assert_eq!(buf.to_vec(40, 10).unwrap(), b"a datagram");
    // A second destination through the same AV is the same cached handle;
    // an unused handle can go before the QP.
    drop(ah);

    // An SRQ feeds an RC QP's receives.
    let srq = pd.create_srq(16, 1, 0).unwrap();
    let rcq = ctx.create_cq(16, None).unwrap();
    let mut init = QpInit::new(QpType::Rc, &rcq, &rcq);
    init.srq = Some(&srq);
    let b = pd.create_qp(&init).unwrap();
    let a = pd.create_qp(&QpInit::new(QpType::Rc, &rcq, &rcq)).unwrap();
    for q in [&a, &b] {
        q.to_init(Access::REMOTE_WRITE, 0).unwrap();
    }
    connect_pair((&ctx, &a), (&ctx, &b), (9, 5));
    let sbuf = pd.alloc_mr(64, Access::LOCAL_WRITE).unwrap();
    srq.post_recv(RecvWr {
        wr_id: 7,
        sgl: [sbuf.sge(0, 64).unwrap()].into(),
    })
    .unwrap();
    srq.set_limit(1).unwrap();
    let mut s = SendWr::new(8, WrOpcode::Send);
    s.flags = SendFlags::SIGNALED;
    s.inline = Some(b"via srq".to_vec());
    a.post_send(s).unwrap();
    let wcs = sorted(rcq.poll_blocking(2, T).unwrap());
    assert_eq!(
        (wcs[0].wr_id, wcs[0].qp_num, wcs[0].byte_len),
        (7, b.qpn(), 7)
    );
    assert_eq!(sbuf.to_vec(0, 7).unwrap(), b"via srq");

    // Dropping in "wrong" order is fine: children keep their parents.
    drop(pd);
    drop(cq);
    drop(ch);
    drop((tx, rx, a, b, srq));
}

#[test]
fn rdma_core_selection_and_errors() {
    let lib = compat_dir();
    // Automatic: softrdma's own drop-in is not a hardware device, so a
    // process that finds it gets the native backend.
    let c = Proc::spawn("auto", {
        let mut c = child(
            "child_selection",
            "auto",
            Side::Native,
            "127.0.12.65",
            free_udp_port(),
        );
        // Nothing configures the native device either (that would pick it).
        c.env_remove("SOFTRDMA_BACKEND")
            .env_remove("SOFTRDMA_ADDR")
            .env_remove("SOFTRDMA_PORT")
            .env("LD_LIBRARY_PATH", &lib);
        c
    });
    let o = c.finish(TIMEOUT);
    o.assert_success();
    assert!(o.stdout.contains("1 passed"), "{o}");
    for (role, backend) in [("bogus", "bogus"), ("forced", "rdma-core")] {
        let mut c = child(
            "child_selection",
            role,
            Side::Native,
            "127.0.12.65",
            free_udp_port(),
        );
        // No LD_LIBRARY_PATH: the system's libibverbs (with no device here, or none at all).
        c.env("SOFTRDMA_BACKEND", backend);
        let o = Proc::spawn(role, c).finish(TIMEOUT);
        o.assert_success();
        assert!(o.stdout.contains("1 passed"), "{o}");
    }
}

#[test]
#[ignore = "child process of rdma_core_selection_and_errors"]
fn child_selection() {
    match role().as_deref() {
        Some("auto") => {
            assert_eq!(Backend::from_env().unwrap(), None);
            assert_eq!(Backend::detect(), Backend::Native);
            let ctx = Context::open().unwrap();
            assert_eq!(ctx.backend_info().to_string(), "native");
        }
        Some("bogus") => {
            let e = Context::open().unwrap_err();
            assert_eq!(e.errno(), 22, "{e}");
            assert!(e.to_string().contains("SOFTRDMA_BACKEND"), "{e}");
        }
        Some("forced") => {
            if std::path::Path::new("/sys/class/infiniband").exists() {
                return; // a machine with real devices: nothing to check here
            }
            let e = Context::open().unwrap_err();
            assert_eq!(e.errno(), libc_enodev(), "{e}");
            assert!(matches!(e, softrdma::Error::NoDevice(_)), "{e:?}");
        }
        _ => {}
    }
}

fn libc_enodev() -> i32 {
    19
}

#[test]
fn two_backends_in_one_process() {
    // The builder loads the drop-in from its directory (no LD_LIBRARY_PATH):
    // its own engine takes the first free 127.0.0.N on SOFTRDMA_PORT, the
    // native device here an explicit address, and the two talk.
    let mut c = child(
        "child_two_backends",
        "two",
        Side::Native,
        "unused",
        free_udp_port(),
    );
    c.env_remove("SOFTRDMA_ADDR").env_remove("SOFTRDMA_BACKEND");
    let o = Proc::spawn("two backends", c).finish(TIMEOUT);
    o.assert_success();
    assert!(o.stdout.contains("1 passed"), "{o}");
}

#[test]
#[ignore = "child process of two_backends_in_one_process"]
fn child_two_backends() {
    if role().is_none() {
        return;
    }
    let port: u16 = std::env::var("SOFTRDMA_PORT").unwrap().parse().unwrap();
    let rc = Context::builder().library_dir(compat_dir()).open().unwrap();
    assert_eq!(rc.backend(), Backend::RdmaCore);
    let native = Context::open_with(EngineConfig::bound_to(SocketAddr::new(
        "127.0.12.67".parse().unwrap(),
        port,
    )))
    .unwrap();
    assert_eq!(native.backend(), Backend::Native);
    assert_ne!(rc.local_addr().ip(), native.local_addr().ip());
    // A second library directory is refused: rdma-core is loaded once.
    assert!(
        Context::builder()
            .library_dir("/nonexistent")
            .open()
            .is_err()
    );

    let (pr, pn) = (rc.alloc_pd().unwrap(), native.alloc_pd().unwrap());
    let (cr, cn) = (
        rc.create_cq(16, None).unwrap(),
        native.create_cq(16, None).unwrap(),
    );
    // Objects of one backend do not mix with the other's.
    assert!(pr.create_qp(&QpInit::new(QpType::Rc, &cn, &cn)).is_err());
    assert!(pn.create_qp(&QpInit::new(QpType::Rc, &cr, &cr)).is_err());
    let qr = pr.create_qp(&QpInit::new(QpType::Rc, &cr, &cr)).unwrap();
    let qn = pn.create_qp(&QpInit::new(QpType::Rc, &cn, &cn)).unwrap();
    for q in [&qr, &qn] {
        q.to_init(Access::REMOTE_WRITE, 0).unwrap();
    }
    connect_pair((&rc, &qr), (&native, &qn), (2, 1));
    let src = pr.register(b"across engines", Access::LOCAL_WRITE).unwrap();
    let dst = pn.alloc_mr(64, ALL).unwrap();
    let mut w = SendWr::new(1, WrOpcode::RdmaWrite);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [src.sge(0, 14).unwrap()].into();
    w.remote_addr = dst.addr();
    w.rkey = dst.rkey();
    qr.post_send(w).unwrap();
    assert_eq!(cr.poll_blocking(1, T).unwrap()[0].status, WcStatus::Success);
    assert_eq!(dst.to_vec(0, 14).unwrap(), b"across engines");
}
