//! The peer programs of the fault tests (`tests/faults.rs`,
//! `tests/faults_kill.rs`, `tests/soak.rs`, `scripts/soak.sh`), built as the
//! example `fault_peer`. Four modes:
//!
//! ```text
//! fault_peer exchange server --port P [--size BYTES] [--rounds N] [--timeout T]
//! fault_peer exchange client HOST --port P [...]
//! fault_peer serve ADDR:PORT --rounds N [--bound-ms MS]
//! fault_peer stream ADDR:PORT
//! fault_peer soak --secs S [--conns N] [--addr-base 127.0.9]
//! ```
//!
//! * `exchange`: an RC QP pair set up over a TCP side channel (which a loss
//!   rule on UDP 4791 leaves alone). Each round one side is active and posts
//!   a two-SGE SEND, an RDMA WRITE, a WRITE with immediate, an RDMA READ, a
//!   compare-and-swap and a fetch-and-add, all `--size` bytes where it
//!   applies; both sides then check every byte (the passive side its
//!   receive buffer, written range and atomic words, the active side the
//!   READ data and the atomics' original values). Rounds alternate the
//!   roles. A TCP barrier after each round (every work request of both
//!   sides has completed) lets both exit without leaving a retransmission
//!   to a dead peer. Last lines: `STATS ...` and `PASS`.
//! * `serve`: a long-lived survivor. For each of `--rounds` connections
//!   (rdma_cm, from `stream`): accept, stream WRITEs and SENDs to the peer
//!   until a completion fails (the test kills the peer), then check that
//!   every posted work request completed (the first failure RETRY_EXC_ERR
//!   or a flush, the rest flushed), wait for the CM's DISCONNECTED, free
//!   everything and print `ROUND i status=... completions=N errors=N
//!   disconnected_ms=T fds=N rss_kb=N`. Exits 0 after the last round, or 1
//!   if anything took longer than `--bound-ms`.
//! * `stream`: connects to `serve`, streams SENDs and WRITEs back, prints
//!   `STREAMING` once traffic flows both ways, and runs until killed.
//! * `soak`: two devices in this process churn connections for `--secs`:
//!   each cycle opens `--conns` connections, runs the mixed operations on each
//!   (checked byte for byte), registers and deregisters regions of assorted
//!   sizes (no key reused within 1024 registrations), disconnects and frees
//!   everything. Prints `CYCLE n fds=N rss_kb=N` and at the end checks that
//!   open file descriptors returned exactly to their level after warm-up and
//!   memory stayed within a bound; `PASS`.

mod peer;

use peer::{ALL, Chan, RcSide, pattern, u64_at, wait_wcs};
use softrdma::cm::{Acceptor, ConnOptions, Connection, Connector};
use softrdma::verbs::{
    Context, Cq, EngineConfig, Mr, Mtu, Qp, RecvWr, SendFlags, SendWr, Wc, WcOpcode, WcStatus,
    WrOpcode,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

type Res<T> = Result<T, String>;

fn e<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> String {
    move |err| format!("{what}: {err}")
}

/// How long any single wait may take.
const WAIT: Duration = Duration::from_secs(90);
/// How long completion waits sleep while nothing arrives.
const IDLE: Duration = Duration::from_micros(200);

/// Posts receive `wr_id` of `len` bytes at `off` of `mr`.
fn post_recv(qp: &Qp, mr: &Mr, wr_id: u64, off: usize, len: usize) -> Res<()> {
    let sge = mr.sge(off, len).map_err(e("sge"))?;
    qp.post_recv(RecvWr {
        wr_id,
        sgl: [sge].into(),
    })
    .map_err(e("post_recv"))
}

fn expect_ok(w: &Wc, wr_id: u64, what: &str) -> Res<()> {
    if w.wr_id != wr_id || w.status != WcStatus::Success {
        return Err(format!(
            "{what}: completion {} {:?} (wanted {wr_id} Success)",
            w.wr_id, w.status
        ));
    }
    Ok(())
}

/// Open file descriptors of this process.
fn fd_count() -> usize {
    // The fewest of a few samples 2 ms apart: the engine's threads open files
    // and sockets for a moment (interface lookups, /proc and /sys reads), and
    // one such fd caught in a sample is not a leak; a leaked fd is in all.
    (0..5)
        .map(|i| {
            if i > 0 {
                std::thread::sleep(Duration::from_millis(2));
            }
            std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
        })
        .min()
        .unwrap_or(0)
}

/// Resident set size in KiB.
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("exchange") => exchange(&args[1..]),
        Some("serve") => serve(&args[1..]),
        Some("stream") => stream(&args[1..]),
        Some("soak") => soak(&args[1..]),
        _ => Err("usage: fault_peer exchange|serve|stream|soak ...".into()),
    };
    match r {
        Ok(()) => {
            println!("PASS");
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("fault_peer: FAILED: {err}");
            println!("FAILED: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `--key value` options after the positional arguments.
fn options(args: &[String]) -> Res<(Vec<String>, HashMap<String, String>)> {
    let mut pos = Vec::new();
    let mut opts = HashMap::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if let Some(k) = a.strip_prefix("--") {
            let v = it.next().ok_or(format!("--{k} needs a value"))?;
            opts.insert(k.to_string(), v.clone());
        } else {
            pos.push(a.clone());
        }
    }
    Ok((pos, opts))
}

/// The first positional argument as `ADDR:PORT` (`usage` if there is none).
fn first_addr(pos: &[String], usage: &'static str) -> Res<SocketAddr> {
    pos.first().ok_or(usage)?.parse().map_err(e("address"))
}

fn num(opts: &HashMap<String, String>, k: &str, default: u64) -> Res<u64> {
    match opts.get(k) {
        None => Ok(default),
        Some(v) => match v.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => v.parse(),
        }
        .map_err(|err| format!("--{k} {v}: {err}")),
    }
}

// ---------------------------------------------------------------------------
// exchange

/// Region layout of the exchange, for message size `s`.
struct Layout {
    s: usize,
}

impl Layout {
    fn send_src(&self) -> usize {
        0
    }
    fn recv_dst(&self) -> usize {
        self.s
    }
    fn write_off(&self) -> usize {
        2 * self.s
    }
    fn read_off(&self) -> usize {
        3 * self.s
    }
    fn atomics(&self) -> usize {
        4 * self.s
    }
    fn atomic_results(&self) -> usize {
        4 * self.s + 64
    }
    fn len(&self) -> usize {
        4 * self.s + 4096
    }
}

fn exchange(args: &[String]) -> Res<()> {
    let (pos, opts) = options(args)?;
    let server = match pos.first().map(String::as_str) {
        Some("server") => None,
        Some("client") => Some(pos.get(1).ok_or("client needs the server's host")?.clone()),
        _ => return Err("exchange server|client".into()),
    };
    let port = num(&opts, "port", 0)? as u16;
    let size = (num(&opts, "size", 256 * 1024)? as usize).max(64) & !7;
    let rounds = num(&opts, "rounds", 2)?;
    let timeout = num(&opts, "timeout", 14)?.min(31) as u8;
    let psn = num(
        &opts,
        "psn",
        u64::from(std::process::id().wrapping_mul(2_654_435_761)),
    )? as u32
        & 0xFF_FFFF;
    let client = server.is_some();
    let lay = Layout { s: size };

    let rc = RcSide::open(lay.len())?;
    let mut ch = Chan::open(server.as_deref(), port, WAIT)?;
    let peer = rc.connect(&mut ch, psn, Mtu::M1024, timeout)?;
    let (qp, cq, mr) = (&rc.qp, &rc.cq, &rc.mr);

    for round in 0..rounds {
        let active = (round % 2 == 0) == client;
        // Both regions hold this round's patterns before anything moves.
        let (me, peer_seed) = if client { (1, 2) } else { (2, 1) };
        mr.write(0, &pattern(round * 16 + me, lay.len()))
            .map_err(e("fill"))?;
        if active {
            ch.barrier("FILLED")?;
            ch.recv()?; // POSTED
            active_round(qp, cq, mr, &lay, (peer.addr, peer.rkey), round, peer_seed)?;
            ch.send("DONE")?;
            ch.barrier("CHECKED")?;
        } else {
            ch.barrier("FILLED")?;
            passive_round(qp, cq, mr, &lay, &mut ch, round, peer_seed)?;
        }
        println!(
            "round {round} ({}) OK",
            if active { "active" } else { "passive" }
        );
    }
    // Every work request of both sides completed: nothing is left to
    // retransmit, so either side may go.
    ch.barrier("BYE")?;
    println!("{}", rc.stats_line());
    Ok(())
}

const CAS_SWAP: u64 = 0x5A5A_0000_1234_5678;
const FADD: u64 = 0x0000_0001_0000_0003;

fn active_round(
    qp: &Qp,
    cq: &Cq,
    mr: &Mr,
    lay: &Layout,
    (paddr, prkey): (u64, u32),
    round: u64,
    peer_seed: u64,
) -> Res<()> {
    let s = lay.s;
    let peer = pattern(round * 16 + peer_seed, lay.len());
    let sig = |id, op| {
        let mut w = SendWr::new(id, op);
        w.flags = SendFlags::SIGNALED;
        w
    };
    let sge = |off, len| mr.sge(off, len).map_err(e("sge"));
    let remote = |w: &mut SendWr, off: usize| {
        w.remote_addr = paddr + off as u64;
        w.rkey = prkey;
    };
    // 1. SEND from two SGEs.
    let mut w = sig(1, WrOpcode::Send);
    w.sgl = vec![
        sge(lay.send_src(), s / 3)?,
        sge(lay.send_src() + s / 3, s - s / 3)?,
    ]
    .into();
    qp.post_send(w).map_err(e("post SEND"))?;
    // 2. RDMA WRITE of our write range into the peer's.
    let mut w = sig(2, WrOpcode::RdmaWrite);
    w.sgl = [sge(lay.write_off(), s)?].into();
    remote(&mut w, lay.write_off());
    qp.post_send(w).map_err(e("post WRITE"))?;
    // 3. WRITE with immediate: the first 100 bytes of our write range
    // (never overwritten here, so a retransmission carries the same bytes)
    // into the peer's atomic-results area, which its atomics leave alone.
    let mut w = sig(3, WrOpcode::RdmaWriteWithImm);
    w.sgl = [sge(lay.write_off(), 100)?].into();
    remote(&mut w, lay.atomic_results() + 64);
    w.imm_data = (round as u32).to_be();
    qp.post_send(w).map_err(e("post WRITE_IMM"))?;
    // 4. RDMA READ of the peer's read range into ours.
    let mut w = sig(4, WrOpcode::RdmaRead);
    w.sgl = [sge(lay.read_off(), s)?].into();
    remote(&mut w, lay.read_off());
    qp.post_send(w).map_err(e("post READ"))?;
    // 5, 6. Atomics on the peer's first two atomic words.
    let cas_old = u64_at(&peer, lay.atomics());
    let mut w = sig(5, WrOpcode::AtomicCmpAndSwp);
    w.sgl = [sge(lay.atomic_results(), 8)?].into();
    remote(&mut w, lay.atomics());
    w.compare_add = cas_old;
    w.swap = CAS_SWAP;
    qp.post_send(w).map_err(e("post CAS"))?;
    let fadd_old = u64_at(&peer, lay.atomics() + 8);
    let mut w = sig(6, WrOpcode::AtomicFetchAndAdd);
    w.sgl = [sge(lay.atomic_results() + 8, 8)?].into();
    remote(&mut w, lay.atomics() + 8);
    w.compare_add = FADD;
    qp.post_send(w).map_err(e("post FADD"))?;
    let wcs = wait_wcs(cq, 6, WAIT, IDLE)?;
    for (i, w) in wcs.iter().enumerate() {
        expect_ok(w, i as u64 + 1, "active round")?;
    }
    let got = mr.to_vec(0, lay.len()).map_err(e("read region"))?;
    if got[lay.read_off()..lay.read_off() + s] != peer[lay.read_off()..lay.read_off() + s] {
        return Err(format!("round {round}: READ data differs"));
    }
    let (c, f) = (
        u64_at(&got, lay.atomic_results()),
        u64_at(&got, lay.atomic_results() + 8),
    );
    if (c, f) != (cas_old, fadd_old) {
        return Err(format!(
            "round {round}: atomics returned {c:#x}, {f:#x}, wanted {cas_old:#x}, {fadd_old:#x}"
        ));
    }
    Ok(())
}

fn passive_round(
    qp: &Qp,
    cq: &Cq,
    mr: &Mr,
    lay: &Layout,
    ch: &mut Chan,
    round: u64,
    peer_seed: u64,
) -> Res<()> {
    let s = lay.s;
    post_recv(qp, mr, 11, lay.recv_dst(), s)?;
    qp.post_recv(RecvWr {
        wr_id: 12,
        sgl: vec![].into(),
    })
    .map_err(e("post_recv"))?;
    let mine = pattern(round * 16 + if peer_seed == 1 { 2 } else { 1 }, lay.len());
    let theirs = pattern(round * 16 + peer_seed, lay.len());
    ch.send("POSTED")?;
    let wcs = wait_wcs(cq, 2, WAIT, IDLE)?;
    expect_ok(&wcs[0], 11, "SEND receive")?;
    expect_ok(&wcs[1], 12, "WRITE_IMM receive")?;
    if wcs[0].byte_len as usize != s
        || wcs[1].opcode != WcOpcode::RecvRdmaWithImm
        || wcs[1].imm_data != (round as u32).to_be()
    {
        return Err(format!("round {round}: receives {wcs:?}"));
    }
    let l = ch.recv()?;
    if l != "DONE" {
        return Err(format!("expected DONE, got {l:?}"));
    }
    // What the region must hold now: ours, with the peer's SEND, WRITE,
    // WRITE_IMM and atomics applied.
    let mut want = mine;
    want[lay.recv_dst()..lay.recv_dst() + s].copy_from_slice(&theirs[..s]);
    let w = lay.write_off();
    want[w..w + s].copy_from_slice(&theirs[w..w + s]);
    let wi = lay.atomic_results() + 64;
    want[wi..wi + 100].copy_from_slice(&theirs[w..w + 100]);
    let a = lay.atomics();
    let fadd = u64_at(&want, a + 8).wrapping_add(FADD);
    want[a..a + 8].copy_from_slice(&CAS_SWAP.to_ne_bytes());
    want[a + 8..a + 16].copy_from_slice(&fadd.to_ne_bytes());
    let got = mr.to_vec(0, lay.len()).map_err(e("read region"))?;
    if got != want {
        let first = got.iter().zip(&want).position(|(x, y)| x != y);
        return Err(format!("round {round}: region differs at byte {first:?}"));
    }
    ch.barrier("CHECKED")?;
    Ok(())
}

// ---------------------------------------------------------------------------
// serve / stream

/// 16 bytes: address and R_Key of a buffer, with its length.
fn desc(mr: &Mr) -> Vec<u8> {
    let mut v = mr.addr().to_be_bytes().to_vec();
    v.extend_from_slice(&mr.rkey().to_be_bytes());
    v.extend_from_slice(&(mr.len() as u32).to_be_bytes());
    v
}

fn parse_desc(b: &[u8]) -> Res<(u64, u32, u32)> {
    if b.len() < 16 {
        return Err("short private data".into());
    }
    Ok((
        u64::from_be_bytes(b[..8].try_into().expect("8")),
        u32::from_be_bytes(b[8..12].try_into().expect("4")),
        u32::from_be_bytes(b[12..16].try_into().expect("4")),
    ))
}

/// Stream buffers: sources and WRITE targets in [0, 32 KiB), a ring of
/// receive buffers in [32, 64 KiB), the peer's descriptor at 64 KiB.
const STREAM_BUF: usize = 68 * 1024;
const DESC_OFF: usize = 64 * 1024;
const DESC_WR: u64 = u64::MAX;
/// Work requests each side keeps outstanding.
const DEPTH: usize = 16;

fn conn_opts() -> ConnOptions {
    ConnOptions {
        cq_size: 256,
        sq_sig_all: true,
        ..ConnOptions::default()
    }
}

/// Posts a SEND or WRITE of 4 KiB (alternating) with id `n`.
fn post_stream_op(c: &Connection, mr: &Mr, (raddr, rkey): (u64, u32), n: u64) -> Res<()> {
    let off = (n as usize % 8) * 4096;
    let mut w = SendWr::new(
        n,
        if n.is_multiple_of(2) {
            WrOpcode::Send
        } else {
            WrOpcode::RdmaWrite
        },
    );
    w.flags = SendFlags::SIGNALED;
    w.sgl = [mr.sge(off, 4096).map_err(e("sge"))?].into();
    w.remote_addr = raddr + off as u64;
    w.rkey = rkey;
    c.qp().post_send(w).map_err(e("post_send"))
}

fn post_stream_recv(c: &Connection, mr: &Mr, n: u64) -> Res<()> {
    let off = 32 * 1024 + (n as usize % 8) * 4096;
    post_recv(c.qp(), mr, n | 1 << 63, off, 4096)
}

fn serve(args: &[String]) -> Res<()> {
    let (pos, opts) = options(args)?;
    let addr = first_addr(&pos, "serve ADDR:PORT")?;
    let rounds = num(&opts, "rounds", 3)?;
    let bound = Duration::from_millis(num(&opts, "bound-ms", 20_000)?);
    let ctx = Context::open_at(addr.ip()).map_err(e("open device"))?;
    let acceptor = Acceptor::bind_with(&ctx, addr, conn_opts()).map_err(e("listen"))?;
    println!(
        "LISTENING {} fds={} rss_kb={}",
        acceptor.local_addr(),
        fd_count(),
        rss_kb()
    );
    let mut late = Vec::new();
    for round in 0..rounds {
        let inc = acceptor.incoming().map_err(e("incoming"))?;
        let peer = parse_desc(inc.private_data())?;
        let c = inc.accept(&[]).map_err(e("accept"))?;
        let mr = c.pd().alloc_mr(STREAM_BUF, ALL).map_err(e("alloc_mr"))?;
        mr.write(0, &pattern(round, STREAM_BUF))
            .map_err(e("fill"))?;
        // Tell the peer where to write (a SEND it has a receive for).
        let mut posted_sends = 0u64;
        let mut posted_recvs = 0u64;
        for _ in 0..DEPTH {
            post_stream_recv(&c, &mr, posted_recvs)?;
            posted_recvs += 1;
        }
        let mut w = SendWr::new(0, WrOpcode::Send);
        w.flags = SendFlags::SIGNALED;
        w.inline = Some(desc(&mr));
        w.flags = w.flags.with(SendFlags::INLINE);
        c.qp().post_send(w).map_err(e("post desc"))?;
        posted_sends += 1;
        println!("ROUND {round} ACCEPTED");
        // Stream until a completion fails.
        let mut done = 0u64;
        let mut completions = 0u64;
        let mut errors = 0u64;
        let mut first_err: Option<(WcStatus, Instant)> = None;
        let t0 = Instant::now();
        let mut v = Vec::new();
        loop {
            while first_err.is_none() && posted_sends - done < DEPTH as u64 {
                if post_stream_op(&c, &mr, (peer.0, peer.1), posted_sends).is_err() {
                    break;
                }
                posted_sends += 1;
            }
            v.clear();
            c.cq().poll(&mut v, 64).map_err(e("poll"))?;
            for w in &v {
                completions += 1;
                let recv = w.wr_id >> 63 == 1;
                if recv {
                    posted_recvs -= 1;
                } else {
                    done += 1;
                }
                if w.status != WcStatus::Success {
                    errors += 1;
                    if first_err.is_none() {
                        first_err = Some((w.status, Instant::now()));
                    }
                } else if recv && first_err.is_none() {
                    post_stream_recv(&c, &mr, w.wr_id & !(1 << 63))?;
                    posted_recvs += 1;
                }
            }
            // After the failure: wait until every outstanding request completed.
            if first_err.is_some() && done == posted_sends && posted_recvs == 0 {
                break;
            }
            if t0.elapsed() > WAIT {
                return Err(format!(
                    "round {round}: sends {done}/{posted_sends} completed, {posted_recvs} \
                     receives outstanding, first error {first_err:?}"
                ));
            }
            if v.is_empty() {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        let (status, err_at) = first_err.expect("loop ends after an error");
        let flushed_ms = err_at.elapsed().as_millis();
        // What an application does after a failed completion: disconnect.
        // When the CM already knows the peer is gone (ICMP port unreachable)
        // this returns at once; otherwise its DREQ goes unanswered and
        // DISCONNECTED follows the CM's retransmissions.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let _ = tx.send(c.disconnect());
            });
            match rx.recv_timeout(bound) {
                Ok(Ok(())) => {}
                Ok(Err(err)) => late.push(format!("round {round}: disconnect: {err}")),
                Err(_) => {
                    // The disconnecting thread is stuck: report and leave.
                    println!("FAILED: round {round}: no DISCONNECTED within {bound:?}");
                    std::process::exit(1);
                }
            }
        });
        let disc_ms = err_at.elapsed().as_millis();
        if !c.wait_disconnected(Some(Duration::ZERO)).unwrap_or(false) {
            late.push(format!(
                "round {round}: not disconnected after disconnect()"
            ));
        }
        drop(mr);
        drop(c);
        println!(
            "ROUND {round} status={status:?} completions={completions} errors={errors} \
             flushed_ms={flushed_ms} disconnected_ms={disc_ms} fds={} rss_kb={}",
            fd_count(),
            rss_kb()
        );
    }
    if !late.is_empty() {
        return Err(late.join("; "));
    }
    Ok(())
}

fn stream(args: &[String]) -> Res<()> {
    let (pos, _) = options(args)?;
    let addr = first_addr(&pos, "stream ADDR:PORT")?;
    let ctx = Context::open().map_err(e("open device"))?;
    let pd = ctx.alloc_pd().map_err(e("alloc_pd"))?;
    let opts = ConnOptions {
        pd: Some(pd.clone()),
        ..conn_opts()
    };
    let mr = pd.alloc_mr(STREAM_BUF, ALL).map_err(e("alloc_mr"))?;
    let t0 = Instant::now();
    let c = loop {
        match Connector::on(&ctx)
            .options(opts.clone())
            .connect(addr, &desc(&mr))
        {
            Ok(c) => break c,
            Err(err) if t0.elapsed() > Duration::from_secs(20) => {
                return Err(format!("connect: {err}"));
            }
            Err(err) => {
                eprintln!("connect: {err} (retrying)");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    };
    // The server's buffer arrives in its first SEND, into the first receive
    // (a buffer of its own: later SENDs cycle through the ring).
    post_recv(c.qp(), &mr, DESC_WR, DESC_OFF, 64)?;
    for n in 0..DEPTH as u64 {
        post_stream_recv(&c, &mr, n)?;
    }
    let mut v = Vec::new();
    let peer = loop {
        v.clear();
        c.cq().poll(&mut v, 1).map_err(e("poll"))?;
        if let Some(w) = v.first() {
            expect_ok(w, DESC_WR, "descriptor")?;
            let (a, k, _) = parse_desc(&mr.to_vec(DESC_OFF, 16).map_err(e("read"))?)?;
            break (a, k);
        }
        if t0.elapsed() > WAIT {
            return Err("no descriptor from the server".into());
        }
        std::thread::sleep(Duration::from_micros(200));
    };
    let (mut posted, mut done, mut got) = (0u64, 0u64, 0u64);
    let mut announced = false;
    loop {
        while posted - done < DEPTH as u64 {
            post_stream_op(&c, &mr, peer, posted)?;
            posted += 1;
        }
        v.clear();
        c.cq().poll(&mut v, 64).map_err(e("poll"))?;
        for w in &v {
            if w.status != WcStatus::Success {
                return Err(format!("completion {w:?}"));
            }
            if w.wr_id >> 63 == 1 {
                got += 1;
                post_stream_recv(&c, &mr, w.wr_id & !(1 << 63))?;
            } else {
                done += 1;
            }
        }
        if !announced && done > 64 && got > 64 {
            println!("STREAMING after {:.0?}", t0.elapsed());
            std::io::stdout().flush().map_err(e("stdout"))?;
            announced = true;
        }
        if v.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

// ---------------------------------------------------------------------------
// soak

fn soak(args: &[String]) -> Res<()> {
    let (_, opts) = options(args)?;
    let secs = num(&opts, "secs", 20)?;
    let conns = num(&opts, "conns", 4)? as usize;
    let base = opts.get("addr-base").cloned().unwrap_or("127.0.9".into());
    let port = std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map_err(e("free port"))?
        .port();
    let dev = |last: u8| -> Res<Context> {
        let ip: IpAddr = format!("{base}.{last}").parse().map_err(e("addr-base"))?;
        Context::open_with(EngineConfig::bound_to(SocketAddr::new(ip, port))).map_err(e("device"))
    };
    let (ca, cb) = (dev(1)?, dev(2)?);
    let listen = SocketAddr::new(cb.local_addr().ip(), 7471);
    let acceptor = Acceptor::bind_with(&cb, listen, conn_opts()).map_err(e("listen"))?;
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut samples: Vec<(usize, u64)> = Vec::new();
    let mut recent_keys: VecDeque<u32> = VecDeque::new();
    let mut recent_set: HashSet<u32> = HashSet::new();
    let mut cycle = 0u64;
    let mut ops = 0u64;
    let mut psns = HashSet::new();
    while Instant::now() < deadline || cycle < 4 {
        // Server side: accept `conns` connections, then serve them until
        // each is disconnected.
        let server = {
            let acceptor = &acceptor;
            std::thread::scope(|sc| -> Res<u64> {
                let srv = sc.spawn(move || -> Res<()> {
                    let mut cs = Vec::new();
                    for _ in 0..conns {
                        let c = acceptor.accept().map_err(e("accept"))?;
                        let mr = c.pd().alloc_mr(16 * 1024, ALL).map_err(e("alloc_mr"))?;
                        post_recv(c.qp(), &mr, 1, 0, 4096)?;
                        let mut w = SendWr::new(2, WrOpcode::Send);
                        w.flags = SendFlags::SIGNALED | SendFlags::INLINE;
                        w.inline = Some(desc(&mr));
                        c.qp().post_send(w).map_err(e("post desc"))?;
                        cs.push((c, mr));
                    }
                    for (c, mr) in &cs {
                        let wcs = wait_wcs(c.cq(), 2, WAIT, IDLE)?;
                        for w in &wcs {
                            // The descriptor SEND (2) may be flushed: its ACK
                            // can be lost (SOFTRDMA_FAULTS) after the client
                            // received it, and the client disconnects once its
                            // own work is done, before our retransmission.
                            let flushed_desc = w.wr_id == 2 && w.status == WcStatus::WrFlushErr;
                            if w.status != WcStatus::Success && !flushed_desc {
                                return Err(format!("server completion {w:?}"));
                            }
                        }
                        // The client's SEND carried the pattern of its cycle.
                        let n = wcs.iter().find(|w| w.wr_id == 1).map_or(0, |w| w.byte_len);
                        let got = mr.to_vec(0, n as usize).map_err(e("read"))?;
                        if got != pattern(u64::from(c.peer_param().qp_num), n as usize) {
                            return Err("SEND data differs".into());
                        }
                        if !c.wait_disconnected(Some(WAIT)).map_err(e("wait_disc"))? {
                            return Err("no disconnect".into());
                        }
                    }
                    Ok(())
                });
                let r = soak_client(&ca, listen, conns, &mut psns);
                let s = srv
                    .join()
                    .map_err(|_| "server thread panicked".to_string())?;
                s?;
                r
            })
        };
        ops += server?;
        // Registration churn: assorted sizes, keys never reused soon.
        let pd = ca.alloc_pd().map_err(e("alloc_pd"))?;
        for i in 0..64usize {
            let len = 1 + (i * 7919 + cycle as usize * 31) % (256 * 1024);
            let mr = pd.alloc_mr(len, ALL).map_err(e("alloc_mr"))?;
            let k = mr.rkey();
            if !recent_set.insert(k) {
                return Err(format!("key {k:#x} reused within 1024 registrations"));
            }
            recent_keys.push_back(k);
            if recent_keys.len() > 1024 {
                recent_set.remove(&recent_keys.pop_front().expect("non-empty"));
            }
        }
        drop(pd);
        cycle += 1;
        let (fds, rss) = (fd_count(), rss_kb());
        samples.push((fds, rss));
        println!("CYCLE {cycle} fds={fds} rss_kb={rss} ops={ops}");
    }
    // Warm-up: the first quarter of the cycles (at least two).
    let warm = (samples.len() / 4).max(2);
    let (fd0, rss0) = samples[warm - 1];
    let (fd_end, rss_end) = *samples.last().expect("cycles ran");
    let rss_max = samples[warm..].iter().map(|s| s.1).max().unwrap_or(rss0);
    println!(
        "SOAK cycles={cycle} ops={ops} fds {fd0} -> {fd_end} rss_kb {rss0} -> {rss_end} (max {rss_max}) \
         distinct_psns={}",
        psns.len()
    );
    if samples[warm..].iter().any(|s| s.0 != fd0) {
        return Err(format!(
            "open file descriptors moved after warm-up: {:?}",
            samples.iter().map(|s| s.0).collect::<Vec<_>>()
        ));
    }
    // Flat memory: at most 8 MiB + 10 % above the post-warm-up level.
    if rss_max > rss0 + 8 * 1024 + rss0 / 10 {
        return Err(format!("memory grew from {rss0} KiB to {rss_max} KiB"));
    }
    if psns.len() < (cycle as usize * conns) / 2 {
        return Err(format!(
            "initial PSNs repeat: {} distinct in {} connections",
            psns.len(),
            cycle as usize * conns
        ));
    }
    Ok(())
}

/// One soak cycle's client side: `conns` connections, mixed operations on
/// each, checked, then disconnected. Returns operations done.
fn soak_client(
    ctx: &Context,
    server: SocketAddr,
    conns: usize,
    psns: &mut HashSet<u32>,
) -> Res<u64> {
    let mut cs = Vec::new();
    for _ in 0..conns {
        let c = Connector::on(ctx)
            .options(conn_opts())
            .connect(server, &[])
            .map_err(e("connect"))?;
        let mr = c.pd().alloc_mr(16 * 1024, ALL).map_err(e("alloc_mr"))?;
        post_recv(c.qp(), &mr, 100, 8192, 4096)?;
        let attr = c.qp().query().map_err(e("query_qp"))?;
        psns.insert(attr.sq_psn);
        cs.push((c, mr));
    }
    let mut ops = 0;
    for (c, mr) in &cs {
        let d = wait_wcs(c.cq(), 1, WAIT, IDLE)?;
        expect_ok(&d[0], 100, "descriptor")?;
        let (raddr, rkey, _) = parse_desc(&mr.to_vec(8192, 16).map_err(e("read"))?)?;
        let qpn = c.qp().qpn();
        let data = pattern(u64::from(qpn), 3000);
        mr.write(0, &data).map_err(e("fill"))?;
        // A signalled request from `len` bytes at `off` of ours, to `roff` of
        // the server's region.
        let to_server = |id, op, off, len, roff: u64| -> Res<SendWr> {
            let mut w = SendWr::new(id, op);
            w.flags = SendFlags::SIGNALED;
            w.sgl = [mr.sge(off, len).map_err(e("sge"))?].into();
            w.remote_addr = raddr + roff;
            w.rkey = rkey;
            Ok(w)
        };
        let post = |w, what| c.qp().post_send(w).map_err(e(what));
        // WRITE 3000 bytes to the server's [4096..), READ them back to
        // [4096..) of ours, atomics on [12288..), then the SEND.
        post(to_server(1, WrOpcode::RdmaWrite, 0, 3000, 4096)?, "WRITE")?;
        post(to_server(2, WrOpcode::RdmaRead, 4096, 3000, 4096)?, "READ")?;
        let mut w = to_server(3, WrOpcode::AtomicFetchAndAdd, 12288, 8, 12288)?;
        w.compare_add = 5;
        post(w, "FADD")?;
        let mut w = to_server(4, WrOpcode::AtomicCmpAndSwp, 12296, 8, 12288)?;
        w.compare_add = 5;
        w.swap = 77;
        post(w, "CAS")?;
        let mut w = SendWr::new(5, WrOpcode::Send);
        w.flags = SendFlags::SIGNALED;
        w.sgl = [mr.sge(0, 3000).map_err(e("sge"))?].into();
        post(w, "SEND")?;
        let wcs = wait_wcs(c.cq(), 5, WAIT, IDLE)?;
        for (i, w) in wcs.iter().enumerate() {
            expect_ok(w, i as u64 + 1, "soak op")?;
        }
        let back = mr.to_vec(4096, 3000).map_err(e("read"))?;
        if back != data {
            return Err("READ back differs from what was written".into());
        }
        let got = mr.to_vec(12288, 16).map_err(e("read"))?;
        // The server's region starts zeroed: FADD saw 0, then CAS saw 5.
        if u64_at(&got, 0) != 0 || u64_at(&got, 8) != 5 {
            return Err(format!("atomics returned {got:?}"));
        }
        ops += 5;
    }
    for (c, _) in &cs {
        c.disconnect().map_err(e("disconnect"))?;
    }
    Ok(ops)
}
