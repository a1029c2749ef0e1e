//! On-demand paging (issue 20): regions registered with `Access::ON_DEMAND`
//! over memory that is mapped, unmapped and mapped again after registration,
//! between two engines of this process, over UDP and over the same-host
//! lanes with peer copy (`shm = true`; WRITEs of `PEER_COPY_MIN` bytes and
//! more go as one peer-copy packet). Mapped memory is reached byte for byte;
//! unmapped memory gives the completions hardware gives — the requester's
//! `REM_ACCESS_ERR` for a remote region, `LOC_PROT_ERR` for a local SGE, a
//! receive buffer's `LOC_PROT_ERR` on the responder — and the process lives.

mod common;

use softrdma_engine::transport::{
    Access, CqHandle, Mtu, PEER_COPY_MIN, PdHandle, QpType, RecvWr, SendFlags, SendWr, Sge, Wc,
    WcStatus, WrOpcode,
};
use softrdma_engine::{Engine, EngineConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

const PAGE: usize = 4096;
/// Pages of each side's on-demand arena: the first half mapped, the second
/// unmapped after registration.
const PAGES: usize = 8;
const HALF: u64 = (PAGES * PAGE / 2) as u64;
const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

struct Side {
    e: Engine,
    pd: PdHandle,
    qpn: u32,
    cq: CqHandle,
    /// Ordinary memory, registered as usual (key `key`).
    buf: Vec<u8>,
    key: u32,
    /// `PAGES` pages registered on demand (key `odp`), the second half
    /// unmapped.
    arena: u64,
    odp: u32,
}

impl Side {
    fn buf_addr(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    /// Address and key of byte `off` of the ordinary buffer.
    fn sge(&self, off: u64) -> (u64, u32) {
        (self.buf_addr() + off, self.key)
    }

    /// Address and key of byte `off` of the on-demand arena.
    fn odp_sge(&self, off: u64) -> (u64, u32) {
        (self.arena + off, self.odp)
    }
}

impl Drop for Side {
    /// Unmaps the arena's first half only: the hole is not ours (another
    /// mapping of the process may have landed there), unless a test mapped
    /// it again, and then that test unmaps it.
    fn drop(&mut self) {
        // SAFETY: the first half is this side's own mapping, which the
        // engine reaches only through the kernel.
        unsafe { libc::munmap(self.arena as *mut _, HALF as usize) };
    }
}

/// `len` bytes of fresh memory at `at` (0: anywhere), filled with `fill`.
/// At an address, only where nothing is mapped (`MAP_FIXED_NOREPLACE`):
/// a hole of an arena that something else of the process took meanwhile
/// fails the test instead of being overwritten.
fn map(at: u64, len: usize, fill: u8) -> u64 {
    let fixed = if at == 0 {
        0
    } else {
        libc::MAP_FIXED_NOREPLACE
    };
    // SAFETY: a private anonymous mapping that replaces nothing.
    let p = unsafe {
        libc::mmap(
            at as *mut _,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | fixed,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    assert!(at == 0 || p as u64 == at, "the hole at {at:#x} was taken");
    // SAFETY: the fresh mapping, ours.
    unsafe { std::ptr::write_bytes(p.cast::<u8>(), fill, len) };
    p as u64
}

/// The bytes at `[addr, addr + len)` of a mapped part of an arena.
fn bytes(addr: u64, len: usize) -> Vec<u8> {
    // SAFETY: the callers name mapped arena memory; the engine is idle
    // (every work request completed), so nothing writes it meanwhile.
    unsafe { std::slice::from_raw_parts(addr as *const u8, len) }.to_vec()
}

fn side(ip: [u8; 4], port: u16, shm: bool, fill: u8) -> Side {
    let mut cfg = EngineConfig::bound_to(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port));
    cfg.shm = shm;
    let e = Engine::start(cfg).unwrap();
    let pd = e.alloc_pd().unwrap();
    let (cq, _) = e.create_cq(64).unwrap();
    let qpn = common::create_qp(&e, QpType::Rc, pd, cq, 16, 2);
    let mut buf: Vec<u8> = (0..4 * PEER_COPY_MIN as usize)
        .map(|i| (i % 253) as u8 ^ fill)
        .collect();
    let ptr = buf.as_mut_ptr() as u64;
    let key = e.reg_mr(pd, ptr, buf.len() as u64, ptr, ALL).unwrap().lkey;
    let arena = map(0, PAGES * PAGE, fill);
    let odp = ALL | Access::ON_DEMAND;
    let len = (PAGES * PAGE) as u64;
    let odp = e.reg_mr(pd, arena, len, arena, odp).unwrap().lkey;
    Side {
        e,
        pd,
        qpn,
        cq,
        buf,
        key,
        arena,
        odp,
    }
}

/// Two connected sides; `shm`: over the same-host lanes (peer copy on).
/// Each pair on addresses of its own (`127.0.<k>.x`), so pairs of tests
/// running at once never meet on a port.
///
/// The arenas' second halves are unmapped (after registration, as an
/// application may) only once one message each way has gone: the engines
/// map a page of each other's inbox when their lanes first carry
/// something, and that page must not land in a hole a test expects empty
/// (it did, in 1 of 3 runs of this file, once each engine also mapped its
/// ticket page).
fn pair(shm: bool) -> (Side, Side) {
    static NEXT: AtomicU8 = AtomicU8::new(0);
    let k = NEXT.fetch_add(1, Ordering::Relaxed) % 250 + 1;
    let port = common::free_udp_port();
    let a = side([127, 0, k, 1], port, shm, 0);
    let b = side([127, 0, k, if shm { 1 } else { 2 }], port, shm, 0x5A);
    common::connect_rc(&a.e, a.qpn, &b.e, b.qpn, Mtu::M4096, 7);
    common::connect_rc(&b.e, b.qpn, &a.e, a.qpn, Mtu::M4096, 7);
    for (from, to) in [(&a, &b), (&b, &a)] {
        post(
            from,
            WrOpcode::RdmaWrite,
            from.sge(0),
            0,
            to.buf_addr(),
            to.key,
        );
        assert_eq!(wc(from).status, WcStatus::Success);
    }
    for s in [&a, &b] {
        // SAFETY: the second half of the side's own arena.
        let r = unsafe { libc::munmap((s.arena + HALF) as *mut _, HALF as usize) };
        assert_eq!(r, 0);
    }
    (a, b)
}

/// Posts a signaled `op` of `len` bytes from `(local, lkey)` to `remote`.
fn post(s: &Side, op: WrOpcode, (local, lkey): (u64, u32), len: u32, remote: u64, rkey: u32) {
    let mut w = SendWr::new(1, op);
    w.flags = SendFlags::SIGNALED;
    w.sgl = [Sge {
        addr: local,
        length: len,
        lkey,
    }]
    .into();
    w.remote_addr = remote;
    w.rkey = rkey;
    w.compare_add = 5;
    s.e.post_send(s.qpn, w).unwrap();
}

fn wc(s: &Side) -> Wc {
    common::wait_wc(&s.e, s.cq, 1)[0]
}

const N: u32 = PEER_COPY_MIN;

/// Held by each test for its whole run: the tests of this file run one at
/// a time, so no other test's engines map their own small pages into an
/// arena's hole between its munmap and the access that must find it empty.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Peer copies `s` did (none without the lanes), and those that failed.
fn peer_copies(s: &Side) -> (u64, u64) {
    let c = s.e.shm_counters();
    let get = |name| c.iter().find(|(k, _)| *k == name).map_or(0, |(_, v)| *v);
    (get("shm_peer_copies"), get("shm_peer_copy_failed"))
}

/// RDMA WRITE into the responder's on-demand region: mapped memory takes
/// the bytes, unmapped memory is `REM_ACCESS_ERR` (also for a WRITE that
/// only ends in the hole), memory mapped there after registration takes
/// them.
#[test]
fn remote_write_reaches_mapped_and_refuses_unmapped() {
    let _serial = one_at_a_time();
    for shm in [false, true] {
        let (a, b) = pair(shm);
        post(&a, WrOpcode::RdmaWrite, a.sge(0), N, b.arena, b.odp);
        assert_eq!(wc(&a).status, WcStatus::Success, "shm {shm}");
        assert!(
            bytes(b.arena, N as usize) == a.buf[..N as usize],
            "shm {shm}"
        );
        // On the lanes, b copied from a (into its on-demand memory, by
        // `process_vm_readv`), as for any region.
        assert_eq!(peer_copies(&b), (u64::from(shm), 0));

        drop((a, b)); // One pair at a time: each has its progress threads.
        for off in [HALF, HALF - 100] {
            let (a, b) = pair(shm);
            post(&a, WrOpcode::RdmaWrite, a.sge(0), N, b.arena + off, b.odp);
            assert_eq!(wc(&a).status, WcStatus::RemAccessErr, "shm {shm} at {off}");
            // Nothing before the packet that met the hole was written (that
            // packet may have been, up to the hole, as a NIC's DMA may).
            let kept = (HALF - PAGE as u64) as usize;
            assert!(
                bytes(b.arena, kept) == vec![0x5A; kept],
                "shm {shm} at {off}"
            );
        }

        let (a, b) = pair(shm);
        map(b.arena + HALF, HALF as usize, 0);
        post(&a, WrOpcode::RdmaWrite, a.sge(0), N, b.arena + HALF, b.odp);
        assert_eq!(wc(&a).status, WcStatus::Success, "shm {shm}");
        assert!(
            bytes(b.arena + HALF, N as usize) == a.buf[..N as usize],
            "shm {shm}"
        );
        // SAFETY: the mapping made above, idle now.
        unsafe { libc::munmap((b.arena + HALF) as *mut _, HALF as usize) };
    }
}

/// RDMA READ and atomics on the responder's on-demand region: mapped
/// memory answers, unmapped memory is `REM_ACCESS_ERR` with the requester's
/// buffer untouched.
#[test]
fn remote_read_and_atomics_on_demand() {
    let _serial = one_at_a_time();
    for shm in [false, true] {
        let (a, b) = pair(shm);
        post(&a, WrOpcode::RdmaRead, a.sge(0), N, b.arena, b.odp);
        assert_eq!(wc(&a).status, WcStatus::Success, "shm {shm}");
        assert!(a.buf[..N as usize] == vec![0x5A; N as usize], "shm {shm}");

        drop((a, b)); // One pair at a time: each has its progress threads.
        let (a, b) = pair(shm);
        post(
            &a,
            WrOpcode::AtomicFetchAndAdd,
            a.sge(0),
            8,
            b.arena + 8,
            b.odp,
        );
        assert_eq!(wc(&a).status, WcStatus::Success, "shm {shm}");
        let orig = u64::from_ne_bytes([0x5A; 8]);
        assert_eq!(a.buf[..8], orig.to_ne_bytes());
        assert_eq!(bytes(b.arena + 8, 8), (orig + 5).to_ne_bytes());

        drop((a, b)); // One pair at a time: each has its progress threads.
        for op in [WrOpcode::RdmaRead, WrOpcode::AtomicFetchAndAdd] {
            let (a, b) = pair(shm);
            let before = a.buf.clone();
            let len = if op == WrOpcode::RdmaRead { N } else { 8 };
            post(&a, op, a.sge(0), len, b.arena + HALF, b.odp);
            assert_eq!(wc(&a).status, WcStatus::RemAccessErr, "shm {shm} {op:?}");
            assert!(a.buf == before, "{op:?} wrote the requester's buffer");
        }
    }
}

/// On-demand SGEs of the requester: a WRITE from mapped memory sends its
/// bytes, from unmapped memory it is `LOC_PROT_ERR`; a READ into
/// unmapped memory is `LOC_PROT_ERR` too.
#[test]
fn local_sges_on_demand() {
    let _serial = one_at_a_time();
    for shm in [false, true] {
        let (a, b) = pair(shm);
        post(
            &a,
            WrOpcode::RdmaWrite,
            a.odp_sge(0),
            N,
            b.buf_addr(),
            b.key,
        );
        assert_eq!(wc(&a).status, WcStatus::Success, "shm {shm}");
        assert!(b.buf[..N as usize] == vec![0; N as usize], "shm {shm}");

        drop((a, b)); // One pair at a time: each has its progress threads.
        for op in [WrOpcode::RdmaWrite, WrOpcode::RdmaRead] {
            let (a, b) = pair(shm);
            let before = b.buf.clone();
            post(&a, op, a.odp_sge(HALF), N, b.buf_addr(), b.key);
            assert_eq!(wc(&a).status, WcStatus::LocProtErr, "shm {shm} {op:?}");
            assert!(b.buf == before, "{op:?} changed the responder's memory");
        }
    }
}

/// SENDs into on-demand receive buffers: mapped memory takes the message
/// (by peer copy on the lanes), unmapped memory completes the receive with
/// `LOC_PROT_ERR` and the send with `REM_OP_ERR`.
#[test]
fn sends_into_on_demand_receive_buffers() {
    let _serial = one_at_a_time();
    for shm in [false, true] {
        for (off, recv, send) in [
            (0, WcStatus::Success, WcStatus::Success),
            (HALF, WcStatus::LocProtErr, WcStatus::RemOpErr),
        ] {
            let (a, b) = pair(shm);
            let (addr, lkey) = b.odp_sge(off);
            let sgl = vec![Sge {
                addr,
                length: N,
                lkey,
            }];
            b.e.post_recv(
                b.qpn,
                RecvWr {
                    wr_id: 9,
                    sgl: sgl.into(),
                },
            )
            .unwrap();
            post(&a, WrOpcode::Send, a.sge(0), N, 0, 0);
            assert_eq!(wc(&a).status, send, "shm {shm} at {off}");
            let r = wc(&b);
            assert_eq!((r.wr_id, r.status), (9, recv), "shm {shm} at {off}");
            if off == 0 {
                assert!(
                    bytes(b.arena, N as usize) == a.buf[..N as usize],
                    "shm {shm}"
                );
            }
            let copied = if off == 0 { (1, 0) } else { (0, 1) };
            assert_eq!(peer_copies(&b), if shm { copied } else { (0, 0) });
        }
    }
}

/// An implicit on-demand region (the whole address space, addressed as
/// itself) reaches any mapped memory and refuses holes.
#[test]
fn implicit_region_covers_the_address_space() {
    let _serial = one_at_a_time();
    for shm in [false, true] {
        let (a, b) = pair(shm);
        let all = ALL | Access::ON_DEMAND;
        let implicit = b.e.reg_mr(b.pd, 0, u64::MAX, 0, all).unwrap().rkey;
        // Memory mapped after the registration (larger than the arenas'
        // holes, so it cannot land in one).
        let target = map(0, 2 * N as usize, 1);
        post(&a, WrOpcode::RdmaWrite, a.sge(0), N, target, implicit);
        assert_eq!(wc(&a).status, WcStatus::Success, "shm {shm}");
        assert!(
            bytes(target, N as usize) == a.buf[..N as usize],
            "shm {shm}"
        );
        // SAFETY: our mapping, idle.
        unsafe { libc::munmap(target as *mut _, 2 * N as usize) };
        // The ordinary region's memory, through the implicit key.
        post(
            &a,
            WrOpcode::RdmaRead,
            a.sge(u64::from(N)),
            64,
            b.buf_addr(),
            implicit,
        );
        assert_eq!(wc(&a).status, WcStatus::Success, "shm {shm}");
        assert_eq!(a.buf[N as usize..N as usize + 64], b.buf[..64]);
        post(
            &a,
            WrOpcode::RdmaWrite,
            a.sge(0),
            64,
            b.arena + HALF,
            implicit,
        );
        assert_eq!(wc(&a).status, WcStatus::RemAccessErr, "shm {shm}");
    }
}
