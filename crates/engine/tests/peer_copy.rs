//! Peer copy between two engines of one process over the same-host path
//! (lanes on, `shm = true`): large WRITEs, READs and SENDs land byte for
//! byte, through the mapped memfds of regions shared at registration where
//! the pages are whole and `process_vm_readv` for the rest; a bad rkey or a range out of bounds is
//! `REM_ACCESS_ERR` with the target memory untouched; small messages keep
//! to packets; a READ into the requester's shared pages is placed by the
//! responder. (Between processes: compat-tests `shm.rs` and perftest.)

mod common;

use softrdma_engine::transport::{
    Access, CqHandle, Mtu, QpCap, QpInitAttr, QpType, RecvWr, Rereg, SendFlags, SendWr, Sge, Wc,
    WcStatus, WrOpcode,
};
use softrdma_engine::{Engine, EngineConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

const LEN: usize = 1 << 20;

struct Side {
    e: Engine,
    qpn: u32,
    cq: CqHandle,
    /// The region is `buf[off..off + LEN]`, 16 bytes past a page boundary
    /// (as a large `malloc`'s `mmap`), so its head page is never whole:
    /// a heap block that started on a page (glibc serves large blocks from
    /// the heap once a large one was freed, as the tests running alongside
    /// do) made it whole and shared, and the "no offer" READ below placed
    /// (CI failed it once).
    buf: Vec<u8>,
    off: usize,
    key: u32,
}

impl Side {
    fn addr(&self) -> u64 {
        self.mem().as_ptr() as u64
    }

    fn mem(&self) -> &[u8] {
        &self.buf[self.off..self.off + LEN]
    }
}

fn side(ip: [u8; 4], port: u16, fill: u8) -> Side {
    let mut cfg = EngineConfig::bound_to(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port));
    cfg.shm = true;
    let e = Engine::start(cfg).unwrap();
    let mut buf = vec![0u8; LEN + 4096];
    let off = (4096 + 16 - buf.as_ptr() as usize % 4096) % 4096;
    for (i, b) in buf[off..off + LEN].iter_mut().enumerate() {
        *b = (i % 251) as u8 ^ fill;
    }
    let ptr = buf[off..].as_mut_ptr() as u64;
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(64).unwrap();
    let cap = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 0,
    };
    let init = QpInitAttr {
        qp_type: QpType::Rc,
        pd,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        sq_sig_all: true,
    };
    let (qpn, _) = e.create_qp(&init).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mr = e.reg_mr(pd, ptr, LEN as u64, ptr, all).unwrap();
    Side {
        e,
        qpn,
        cq,
        buf,
        off,
        key: mr.lkey,
    }
}

fn connect(s: &Side, peer: &Side) {
    common::connect_rc(&s.e, s.qpn, &peer.e, peer.qpn, Mtu::M4096, 7);
}

fn pair() -> (Side, Side) {
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = side([127, 0, 0, 1], port, 0);
    let b = side([127, 0, 0, 1], port, 0x5A);
    connect(&a, &b);
    connect(&b, &a);
    (a, b)
}

fn post(s: &Side, op: WrOpcode, local: u64, len: u32, remote: u64, rkey: u32) {
    let mut w = SendWr::new(1, op);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [Sge {
        addr: local,
        length: len,
        lkey: s.key,
    }]
    .into();
    w.remote_addr = remote;
    w.rkey = rkey;
    s.e.post_send(s.qpn, w).unwrap();
}

fn wait_wc(s: &Side) -> Wc {
    let t0 = Instant::now();
    loop {
        let mut v = Vec::new();
        s.e.poll_cq(s.cq, 1, |w| v.push(w)).unwrap();
        if let Some(w) = v.pop() {
            return w;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no completion");
    }
}

fn counter(s: &Side, name: &str) -> u64 {
    let c = s.e.shm_counters();
    c.iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| *v)
}

#[test]
fn large_writes_and_reads_are_peer_copies_byte_for_byte() {
    let (a, b) = pair();
    let len = 300_000u32;
    post(
        &a,
        WrOpcode::RdmaWrite,
        a.addr() + 10,
        len,
        b.addr() + 4096,
        b.key,
    );
    assert_eq!(wait_wc(&a).status, WcStatus::Success);
    let n = len as usize;
    assert_eq!(&b.mem()[4096..4096 + n], &a.mem()[10..10 + n]);
    assert_eq!(counter(&b, "shm_peer_copies"), 1, "the responder copied");
    // Through the mapping of a's shared region: all but a's head page.
    assert_eq!(counter(&a, "shm_mr_shared"), 1);
    let mapped = counter(&b, "shm_peer_copy_mapped_bytes");
    assert!(mapped + 4096 >= u64::from(len) && mapped > 0, "{mapped}");
    // READ into a's shared pages: the responder places the data under a's
    // ticket.
    post(
        &a,
        WrOpcode::RdmaRead,
        a.addr() + 600_000,
        len,
        b.addr() + 500_000,
        b.key,
    );
    assert_eq!(wait_wc(&a).status, WcStatus::Success);
    assert_eq!(
        &a.mem()[600_000..600_000 + n],
        &b.mem()[500_000..500_000 + n]
    );
    assert_eq!(counter(&b, "shm_peer_placed"), 1, "the responder placed it");
    assert_eq!(counter(&b, "shm_peer_placed_bytes"), u64::from(len));
    assert_eq!(counter(&a, "shm_peer_copies"), 0);
    // READ into a range reaching a's private head page: no offer, the
    // requester copies from the responder's checked range.
    post(
        &a,
        WrOpcode::RdmaRead,
        a.addr() + 10,
        len,
        b.addr() + 200_000,
        b.key,
    );
    assert_eq!(wait_wc(&a).status, WcStatus::Success);
    assert_eq!(&a.mem()[10..10 + n], &b.mem()[200_000..200_000 + n]);
    assert_eq!(counter(&a, "shm_peer_copies"), 1, "the requester copied");
    assert_eq!(counter(&b, "shm_peer_placed"), 1);
    assert_eq!(counter(&b, "shm_peer_place_refused"), 0);
    // Small messages keep to packets.
    post(&a, WrOpcode::RdmaWrite, a.addr(), 4000, b.addr(), b.key);
    assert_eq!(wait_wc(&a).status, WcStatus::Success);
    assert_eq!(&b.mem()[..4000], &a.mem()[..4000]);
    assert_eq!(counter(&b, "shm_peer_copies"), 1);
    assert_eq!(counter(&a, "shm_peer_copy_failed"), 0);
}

#[test]
fn bad_rkey_and_out_of_bounds_touch_nothing() {
    let len = 64 * 1024;
    for (op, bad_key) in [
        (WrOpcode::RdmaWrite, true),
        (WrOpcode::RdmaWrite, false),
        (WrOpcode::RdmaRead, true),
        (WrOpcode::RdmaRead, false),
    ] {
        let (a, b) = pair();
        let (a0, b0) = (a.mem().to_vec(), b.mem().to_vec());
        let (remote, rkey) = if bad_key {
            (b.addr(), b.key ^ 0x100)
        } else {
            (b.addr() + LEN as u64 - 1000, b.key)
        };
        post(&a, op, a.addr(), len, remote, rkey);
        let w = wait_wc(&a);
        assert_eq!(
            w.status,
            WcStatus::RemAccessErr,
            "{op:?}, bad key {bad_key}"
        );
        assert!(a.mem() == a0 && b.mem() == b0, "{op:?}: memory changed");
        assert_eq!(
            counter(&a, "shm_peer_copies") + counter(&b, "shm_peer_copies"),
            0
        );
    }
}

fn wait_wcs(s: &Side, n: usize) -> Vec<Wc> {
    (0..n).map(|_| wait_wc(s)).collect()
}

#[test]
fn page_boundaries_and_unaligned_ranges_copy_byte_for_byte() {
    let (a, b) = pair();
    let page = 4096u64;
    // The buffers' head pages are partial (a Vec's memory starts past a
    // page boundary): offsets around page boundaries take copies that
    // start in private memory and go on in the shared pages, and the like.
    let offs = [0u64, 1, page - 1, page, page + 1, 3 * page - 17];
    let lens = [
        16 * 1024u32,
        16 * 1024 + 1,
        5 * 4096 - 1,
        5 * 4096 + 3,
        100_003,
    ];
    for (i, &len) in lens.iter().enumerate() {
        let lo = offs[i % offs.len()];
        let ro = offs[(i + 2) % offs.len()];
        // WRITE a → b.
        post(
            &a,
            WrOpcode::RdmaWrite,
            a.addr() + lo,
            len,
            b.addr() + ro,
            b.key,
        );
        assert_eq!(wait_wc(&a).status, WcStatus::Success, "write {len}");
        let n = len as usize;
        let (lo, ro) = (lo as usize, ro as usize);
        assert_eq!(
            &b.mem()[ro..ro + n],
            &a.mem()[lo..lo + n],
            "write {len} {lo} {ro}"
        );
        // READ b → a, from elsewhere.
        let (ro2, lo2) = (ro + 400_000, lo + 200_000);
        post(
            &a,
            WrOpcode::RdmaRead,
            a.addr() + lo2 as u64,
            len,
            b.addr() + ro2 as u64,
            b.key,
        );
        assert_eq!(wait_wc(&a).status, WcStatus::Success, "read {len}");
        assert_eq!(&a.mem()[lo2..lo2 + n], &b.mem()[ro2..ro2 + n], "read {len}");
        // SEND b → a into two receive SGEs.
        let (r1, r2) = (700_000 + lo, 900_000 + ro);
        let first = (len / 3) as usize;
        a.e.post_recv(
            a.qpn,
            RecvWr {
                wr_id: 9,
                sgl: vec![
                    Sge {
                        addr: a.addr() + r1 as u64,
                        length: first as u32,
                        lkey: a.key,
                    },
                    Sge {
                        addr: a.addr() + r2 as u64,
                        length: len,
                        lkey: a.key,
                    },
                ]
                .into(),
            },
        )
        .unwrap();
        let src = 100_000 + ro;
        post(&b, WrOpcode::Send, b.addr() + src as u64, len, 0, 0);
        assert_eq!(wait_wc(&b).status, WcStatus::Success, "send {len}");
        let w = wait_wcs(&a, 1).pop().unwrap();
        assert_eq!(
            (w.status, w.byte_len),
            (WcStatus::Success, len),
            "recv {len}"
        );
        assert_eq!(&a.mem()[r1..r1 + first], &b.mem()[src..src + first]);
        assert_eq!(&a.mem()[r2..r2 + n - first], &b.mem()[src + first..src + n]);
    }
    assert!(counter(&a, "shm_peer_copy_mapped_bytes") > 0);
    assert!(counter(&b, "shm_peer_copy_mapped_bytes") > 0);
    assert_eq!(
        counter(&a, "shm_peer_copy_failed") + counter(&b, "shm_peer_copy_failed"),
        0
    );
}

#[test]
fn deregistration_keeps_contents_and_ends_remote_access() {
    let (a, b) = pair();
    let before = b.mem().to_vec();
    post(
        &a,
        WrOpcode::RdmaWrite,
        a.addr(),
        64 * 1024,
        b.addr() + 8192,
        b.key,
    );
    assert_eq!(wait_wc(&a).status, WcStatus::Success);
    let mut expect = before.clone();
    expect[8192..8192 + 65536].copy_from_slice(&a.mem()[..65536]);
    assert_eq!(b.mem(), &expect[..]);
    b.e.dereg_mr(b.key).unwrap();
    // The region's memory is the application's again, contents kept.
    assert_eq!(b.mem(), &expect[..]);
    let line = mapping_line(b.addr() + 8192);
    assert!(!line.contains("memfd"), "{line}");
    // A READ through the old rkey is refused and copies nothing.
    let a0 = a.mem().to_vec();
    post(&a, WrOpcode::RdmaRead, a.addr(), 64 * 1024, b.addr(), b.key);
    assert_eq!(wait_wc(&a).status, WcStatus::RemAccessErr);
    assert!(a.mem() == a0);
}

fn mapping_line(addr: u64) -> String {
    softrdma_shm::mapping_of(addr).unwrap()
}

#[test]
fn rereg_to_new_memory_gives_the_old_back_and_copies_into_the_new() {
    let (a, b) = pair();
    let old = b.addr() + 3 * 4096;
    assert!(
        mapping_line(old).contains("memfd:softrdma-mr"),
        "{}",
        mapping_line(old)
    );
    // b's region moves to a new buffer of its own.
    let mut fresh = vec![0u8; LEN];
    let host = fresh.as_mut_ptr() as u64;
    let r = Rereg {
        pd: None,
        translation: Some((host, LEN as u64, b.addr())),
        access: None,
    };
    b.e.rereg_mr(b.key, r).unwrap();
    assert!(
        !mapping_line(old).contains("memfd"),
        "{}",
        mapping_line(old)
    );
    let before = b.mem().to_vec();
    // A WRITE through the same rkey and iova lands in the new buffer,
    // copied from a's shared pages.
    write_70k(&a, &b);
    assert_eq!(&fresh[9..9 + 70_000], &a.mem()[5..5 + 70_000]);
    assert!(b.mem() == before, "the old buffer changed");
    assert_eq!(counter(&b, "shm_peer_copy_failed"), 0);
    drop(b);
    drop(fresh);
}

/// A successful 70000-byte WRITE from byte 5 of a's region to byte 9 of b's.
fn write_70k(a: &Side, b: &Side) {
    post(
        a,
        WrOpcode::RdmaWrite,
        a.addr() + 5,
        70_000,
        b.addr() + 9,
        b.key,
    );
    assert_eq!(wait_wc(a).status, WcStatus::Success);
}

/// Issue 20: a region re-registered for on-demand paging gives its shared
/// pages back (the application may unmap them now) and still takes peer
/// copies, all by `process_vm_readv`.
#[test]
fn rereg_to_on_demand_gives_the_shared_pages_back() {
    let (a, b) = pair();
    let page = b.addr() + 3 * 4096;
    assert!(mapping_line(page).contains("memfd:softrdma-mr"));
    let odp = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::ON_DEMAND;
    let r = Rereg {
        access: Some(odp),
        ..Rereg::default()
    };
    b.e.rereg_mr(b.key, r).unwrap();
    assert!(
        !mapping_line(page).contains("memfd"),
        "{}",
        mapping_line(page)
    );
    write_70k(&a, &b);
    assert_eq!(&b.mem()[9..9 + 70_000], &a.mem()[5..5 + 70_000]);
    assert_eq!(counter(&b, "shm_peer_copies"), 1);
    // Not through the mapping of a's shared pages: that would `memcpy`
    // into b's on-demand memory.
    assert_eq!(counter(&b, "shm_peer_copy_mapped_bytes"), 0);
}
