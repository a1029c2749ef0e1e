//! One side of a two-process RC exchange of every operation type, for the
//! two-process and network-namespace tests (built as the example `verbs_peer`).
//!
//! ```text
//! SOFTRDMA_ADDR=127.0.0.1 verbs_peer server --port 20000 --psn 0xfffff0
//! SOFTRDMA_ADDR=127.0.0.2 verbs_peer client 127.0.0.1 --port 20000 --psn 0xffff00
//! ```
//!
//! The two sides meet over TCP (a side channel, like the pingpong programs), swap
//! QPN, PSN, GID and their memory region, and connect one RC QP pair. Then two
//! phases run, first with the client active, then with the server active:
//!
//! * both fill their 8 MiB region with a seeded pattern; the passive side posts
//!   four receives (one with two SGEs, one without any) and says `POSTED`;
//! * the active side posts SEND (three SGEs, 1.5 MiB), SEND with immediate
//!   (inline), RDMA WRITE (2 MiB), WRITE with immediate, RDMA READ (1 MiB + 3
//!   into two SGEs), two compare-and-swaps (one that matches, one that does
//!   not), fetch-and-add, an inline WRITE and a zero-length SEND; it checks every
//!   completion and, byte for byte, its own region (READ data, atomic results);
//! * the passive side checks its four receive completions and reports a hash of
//!   each MiB of its region; the active side compares them with the image it
//!   computed of what the peer's region must now hold.
//!
//! The initial PSNs (`--psn`, default near 2^24) make the PSNs wrap in both
//! directions. `--timeout` sets the local ACK timeout exponent (default 14,
//! 67 ms, as the pingpong programs use; lossy links recover faster with less);
//! `--read-len` the length of the RDMA READ (default and largest 1 MiB + 3).
//! Every message but the small ones is many path-MTUs long. Exit code 0 and a
//! last line `PASS` mean everything matched; the line before it gives the
//! transport counters (`STATS ...`).

mod peer;

use peer::{Chan, Hello, RcSide, pattern, u64_at, wait_wcs};
use softrdma::verbs::{Mtu, RecvWr, SendFlags, SendWr, Wc, WcFlags, WcOpcode, WcStatus, WrOpcode};
use std::process::ExitCode;
use std::time::Duration;

const MIB: usize = 1 << 20;
/// Size of each side's region.
const REGION: usize = 8 * MIB;
/// How long any single wait may take before the peer gives up.
const WAIT: Duration = Duration::from_secs(60);
/// How long completion waits sleep while nothing arrives.
const IDLE: Duration = Duration::from_micros(100);

/// One 64-bit FNV-1a hash per MiB of a region.
fn chunk_hashes(b: &[u8]) -> Vec<u64> {
    b.chunks(MIB)
        .map(|c| {
            c.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
                (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
            })
        })
        .collect()
}

struct Opts {
    server: Option<String>,
    port: u16,
    psn: u32,
    mtu: Mtu,
    timeout: u8,
    read_len: usize,
}

fn parse_args() -> Result<Opts, String> {
    let mut it = std::env::args().skip(1);
    let role = it.next().ok_or(
        "usage: verbs_peer server|client HOST [--port P] [--psn N] [--mtu M] [--timeout T] [--read-len BYTES]",
    )?;
    let mut o = Opts {
        server: None,
        port: 0,
        psn: 0xFF_FFF0,
        mtu: Mtu::M1024,
        timeout: 14,
        read_len: READ_LEN,
    };
    match role.as_str() {
        "server" => {}
        "client" => o.server = Some(it.next().ok_or("client needs the server's host")?),
        r => return Err(format!("unknown role {r}")),
    }
    while let Some(k) = it.next() {
        let v = it.next().ok_or(format!("{k} needs a value"))?;
        let num = || -> Result<u64, String> {
            match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16),
                None => v.parse(),
            }
            .map_err(|e| format!("{k} {v}: {e}"))
        };
        match k.as_str() {
            "--port" => o.port = num()? as u16,
            "--psn" => o.psn = num()? as u32 & 0xFF_FFFF,
            "--timeout" => o.timeout = num()?.min(31) as u8,
            "--read-len" => o.read_len = (num()? as usize).clamp(2, READ_LEN),
            "--mtu" => {
                o.mtu = match num()? {
                    256 => Mtu::M256,
                    512 => Mtu::M512,
                    1024 => Mtu::M1024,
                    2048 => Mtu::M2048,
                    4096 => Mtu::M4096,
                    m => return Err(format!("bad MTU {m}")),
                }
            }
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if o.port == 0 {
        return Err("--port is required".into());
    }
    Ok(o)
}

fn main() -> ExitCode {
    match parse_args().and_then(|o| run(&o)) {
        Ok(()) => {
            println!("PASS");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("verbs_peer: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

struct Side {
    rc: RcSide,
    peer: Hello,
}

fn run(o: &Opts) -> Result<(), String> {
    let rc = RcSide::open(REGION)?;
    println!("backend: {}", rc.ctx.backend_info());
    let mut ch = Chan::open(o.server.as_deref(), o.port, WAIT)?;
    let peer = rc.connect(&mut ch, o.psn, o.mtu, o.timeout)?;

    let side = Side { rc, peer };
    let client = o.server.is_some();
    for phase in 1..=2u64 {
        let active = (phase == 1) == client;
        let (seed_active, seed_passive) = (0xA0 + phase, 0xB0 + phase);
        if active {
            active_phase(&side, o, &mut ch, phase, seed_active, seed_passive)?;
        } else {
            passive_phase(&side, &mut ch, seed_passive)?;
        }
        println!(
            "phase {phase} ({}) OK",
            if active { "active" } else { "passive" }
        );
    }
    println!("{}", side.rc.stats_line());
    // Keep the QP alive until the peer is done with it too.
    ch.barrier("BYE")?;
    Ok(())
}

// Layout of a region (offsets), shared knowledge of both sides.
const SEND_LEN: usize = 3 * 512 * 1024; // 1.5 MiB from three SGEs
const RECV0_A: (usize, usize) = (2 * MIB, MIB); // first receive SGE
const RECV0_B: usize = 3 * MIB + 100; // second receive SGE start (1 MiB long)
const RECV1: usize = 7 * MIB; // small receive buffer (4 KiB)
const IMM_SEND: u32 = 0xDEAD_BEEF;
const IMM_WRITE: u32 = 0x0102_0304;
const INLINE_SEND_LEN: usize = 60;
const WRITE_OFF: usize = 4 * MIB; // RDMA WRITE target, 2 MiB
const WRITE_LEN: usize = 2 * MIB;
const WIMM_OFF: usize = 6 * MIB + 5; // WRITE with immediate target
const WIMM_LEN: usize = 100_003;
const READ_SRC: usize = 100; // READ source in the passive region
const READ_LEN: usize = MIB + 3; // default and largest READ
const READ_DST_A: usize = 6 * MIB; // READ scatter in the active region: first half
const READ_DST_B: usize = 7 * MIB + 9; // second half
const CAS_OFF: usize = REGION - 64; // atomics targets (8-byte aligned)
const FADD_OFF: usize = REGION - 56;
const INLINE_WRITE_OFF: usize = REGION - 40;
const INLINE_WRITE_LEN: usize = 32;
const ATOMIC_RES: usize = REGION - 4096; // where the active side collects atomic results

fn passive_phase(s: &Side, ch: &mut Chan, seed: u64) -> Result<(), String> {
    let e = |err: softrdma::Error| err.to_string();
    s.rc.mr.write(0, &pattern(seed, REGION)).map_err(e)?;
    let recvs = [
        RecvWr {
            wr_id: 100,
            sgl: vec![
                s.rc.mr.sge(RECV0_A.0, RECV0_A.1).map_err(e)?,
                s.rc.mr.sge(RECV0_B, MIB).map_err(e)?,
            ]
            .into(),
        },
        RecvWr {
            wr_id: 101,
            sgl: [s.rc.mr.sge(RECV1, 4096).map_err(e)?].into(),
        },
        // WRITE with immediate consumes a receive but writes no receive buffer.
        RecvWr {
            wr_id: 102,
            sgl: vec![].into(),
        },
        RecvWr {
            wr_id: 103,
            sgl: [s.rc.mr.sge(RECV1 + 8192, 64).map_err(e)?].into(),
        },
    ];
    for r in recvs {
        s.rc.qp
            .post_recv(r)
            .map_err(|e| format!("post_recv: {e}"))?;
    }
    ch.send("POSTED")?;
    ch.expect("DONE")?;
    let wcs = wait_wcs(&s.rc.cq, 4, WAIT, IDLE).map_err(|e| format!("receive completions: {e}"))?;
    let got: Vec<_> = wcs
        .iter()
        .map(|w| {
            (
                w.wr_id,
                w.status,
                w.opcode,
                w.byte_len,
                w.wc_flags.contains(WcFlags::WITH_IMM).then_some(w.imm_data),
            )
        })
        .collect();
    let want = vec![
        (
            100,
            WcStatus::Success,
            WcOpcode::Recv,
            SEND_LEN as u32,
            None,
        ),
        (
            101,
            WcStatus::Success,
            WcOpcode::Recv,
            INLINE_SEND_LEN as u32,
            Some(IMM_SEND),
        ),
        (
            102,
            WcStatus::Success,
            WcOpcode::RecvRdmaWithImm,
            WIMM_LEN as u32,
            Some(IMM_WRITE),
        ),
        (103, WcStatus::Success, WcOpcode::Recv, 0, None),
    ];
    if got != want {
        return Err(format!(
            "receive completions differ:\n got  {got:?}\n want {want:?}"
        ));
    }
    let image = s.rc.mr.to_vec(0, REGION).map_err(e)?;
    let hashes: Vec<String> = chunk_hashes(&image)
        .iter()
        .map(|h| format!("{h:016x}"))
        .collect();
    ch.send(&format!("REPORT {}", hashes.join(" ")))?;
    let verdict = ch.recv()?;
    if verdict != "MATCH" {
        return Err(format!("the active side says: {verdict}"));
    }
    Ok(())
}

fn active_phase(
    s: &Side,
    o: &Opts,
    ch: &mut Chan,
    phase: u64,
    seed_self: u64,
    seed_peer: u64,
) -> Result<(), String> {
    let e = |err: softrdma::Error| err.to_string();
    let mine = pattern(seed_self, REGION);
    s.rc.mr.write(0, &mine).map_err(e)?;
    // What the peer's region holds now, and must hold after our operations.
    let theirs = pattern(seed_peer, REGION);
    let mut peer = theirs.clone();
    let mut me = mine.clone();
    ch.expect("POSTED")?;

    let raddr = |off: usize| s.peer.addr + off as u64;
    let rkey = s.peer.rkey;
    let mut wrs = Vec::new();

    // 1. SEND from three SGEs (odd offsets) into the peer's two-SGE receive.
    let parts = [
        (0usize, 512 * 1024),
        (700_001, 512 * 1024),
        (1_400_003, 512 * 1024),
    ];
    let mut msg = Vec::new();
    let mut w = SendWr::new(1, WrOpcode::Send);
    for (off, len) in parts {
        w.sgl.push(s.rc.mr.sge(off, len).map_err(e)?);
        msg.extend_from_slice(&mine[off..off + len]);
    }
    peer[RECV0_A.0..RECV0_A.0 + RECV0_A.1].copy_from_slice(&msg[..RECV0_A.1]);
    let rest = &msg[RECV0_A.1..];
    peer[RECV0_B..RECV0_B + rest.len()].copy_from_slice(rest);
    wrs.push((w, WcOpcode::Send));

    // 2. SEND with immediate, inline.
    let mut w = SendWr::new(2, WrOpcode::SendWithImm);
    let data = mine[5000..5000 + INLINE_SEND_LEN].to_vec();
    peer[RECV1..RECV1 + INLINE_SEND_LEN].copy_from_slice(&data);
    w.inline = Some(data);
    w.flags = SendFlags::INLINE;
    w.imm_data = IMM_SEND;
    wrs.push((w, WcOpcode::Send));

    // 3. RDMA WRITE, 2 MiB.
    let mut w = SendWr::new(3, WrOpcode::RdmaWrite);
    w.sgl = [s.rc.mr.sge(0, WRITE_LEN).map_err(e)?].into();
    w.remote_addr = raddr(WRITE_OFF);
    w.rkey = rkey;
    peer[WRITE_OFF..WRITE_OFF + WRITE_LEN].copy_from_slice(&mine[..WRITE_LEN]);
    wrs.push((w, WcOpcode::RdmaWrite));

    // 4. RDMA WRITE with immediate (consumes the peer's empty receive).
    let mut w = SendWr::new(4, WrOpcode::RdmaWriteWithImm);
    w.sgl = [s.rc.mr.sge(3 * MIB, WIMM_LEN).map_err(e)?].into();
    w.remote_addr = raddr(WIMM_OFF);
    w.rkey = rkey;
    w.imm_data = IMM_WRITE;
    peer[WIMM_OFF..WIMM_OFF + WIMM_LEN].copy_from_slice(&mine[3 * MIB..3 * MIB + WIMM_LEN]);
    wrs.push((w, WcOpcode::RdmaWrite));

    // 5. RDMA READ (1 MiB + 3 unless --read-len) into two SGEs.
    let mut w = SendWr::new(5, WrOpcode::RdmaRead);
    let read_len = o.read_len;
    let (a_len, b_len) = (read_len / 2, read_len - read_len / 2);
    w.sgl = vec![
        s.rc.mr.sge(READ_DST_A, a_len).map_err(e)?,
        s.rc.mr.sge(READ_DST_B, b_len).map_err(e)?,
    ]
    .into();
    w.remote_addr = raddr(READ_SRC);
    w.rkey = rkey;
    let src = &theirs[READ_SRC..READ_SRC + read_len];
    me[READ_DST_A..READ_DST_A + a_len].copy_from_slice(&src[..a_len]);
    me[READ_DST_B..READ_DST_B + b_len].copy_from_slice(&src[a_len..]);
    wrs.push((w, WcOpcode::RdmaRead));

    // 6. Compare-and-swap that matches, then one that does not.
    let old = u64_at(&theirs, CAS_OFF);
    let new = 0x1111_2222_3333_4444u64 ^ phase;
    for (id, compare, res_off) in [(6u64, old, ATOMIC_RES), (7, !old, ATOMIC_RES + 8)] {
        let mut w = SendWr::new(id, WrOpcode::AtomicCmpAndSwp);
        w.sgl = [s.rc.mr.sge(res_off, 8).map_err(e)?].into();
        w.remote_addr = raddr(CAS_OFF);
        w.rkey = rkey;
        w.compare_add = compare;
        w.swap = new;
        wrs.push((w, WcOpcode::CompSwap));
    }
    me[ATOMIC_RES..ATOMIC_RES + 8].copy_from_slice(&old.to_ne_bytes());
    me[ATOMIC_RES + 8..ATOMIC_RES + 16].copy_from_slice(&new.to_ne_bytes());
    peer[CAS_OFF..CAS_OFF + 8].copy_from_slice(&new.to_ne_bytes());

    // 7. Fetch-and-add.
    let fold = u64_at(&theirs, FADD_OFF);
    let mut w = SendWr::new(8, WrOpcode::AtomicFetchAndAdd);
    w.sgl = [s.rc.mr.sge(ATOMIC_RES + 16, 8).map_err(e)?].into();
    w.remote_addr = raddr(FADD_OFF);
    w.rkey = rkey;
    w.compare_add = 0x100 + phase;
    me[ATOMIC_RES + 16..ATOMIC_RES + 24].copy_from_slice(&fold.to_ne_bytes());
    peer[FADD_OFF..FADD_OFF + 8].copy_from_slice(&fold.wrapping_add(0x100 + phase).to_ne_bytes());
    wrs.push((w, WcOpcode::FetchAdd));

    // 8. Inline RDMA WRITE.
    let mut w = SendWr::new(9, WrOpcode::RdmaWrite);
    let data = mine[9000..9000 + INLINE_WRITE_LEN].to_vec();
    peer[INLINE_WRITE_OFF..INLINE_WRITE_OFF + INLINE_WRITE_LEN].copy_from_slice(&data);
    w.inline = Some(data);
    w.flags = SendFlags::INLINE;
    w.remote_addr = raddr(INLINE_WRITE_OFF);
    w.rkey = rkey;
    wrs.push((w, WcOpcode::RdmaWrite));

    // 9. Zero-length SEND.
    wrs.push((SendWr::new(10, WrOpcode::Send), WcOpcode::Send));

    let n = wrs.len();
    let mut want = Vec::new();
    for (mut w, op) in wrs {
        w.flags = w.flags | SendFlags::SIGNALED;
        want.push((w.wr_id, WcStatus::Success, op));
        s.rc.qp
            .post_send(w)
            .map_err(|e| format!("post_send: {e}"))?;
    }
    let wcs: Vec<Wc> =
        wait_wcs(&s.rc.cq, n, WAIT, IDLE).map_err(|e| format!("send completions: {e}"))?;
    let got: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.status, w.opcode)).collect();
    if got != want {
        return Err(format!(
            "send completions differ:\n got  {got:?}\n want {want:?}"
        ));
    }
    let local = s.rc.mr.to_vec(0, REGION).map_err(e)?;
    if let Some(i) = (0..REGION).find(|&i| local[i] != me[i]) {
        return Err(format!(
            "local region differs first at offset {i}: {:#04x}, expected {:#04x}",
            local[i], me[i]
        ));
    }
    ch.send("DONE")?;
    let report = ch.expect("REPORT")?;
    let got: Vec<&str> = report.split_whitespace().skip(1).collect();
    let want: Vec<String> = chunk_hashes(&peer)
        .iter()
        .map(|h| format!("{h:016x}"))
        .collect();
    let bad: Vec<usize> = (0..want.len())
        .filter(|&i| got.get(i) != Some(&want[i].as_str()))
        .collect();
    if bad.is_empty() {
        ch.send("MATCH")?;
        Ok(())
    } else {
        let msg = format!("peer region differs in MiB {bad:?}");
        ch.send(&format!("MISMATCH {msg}"))?;
        Err(msg)
    }
}
