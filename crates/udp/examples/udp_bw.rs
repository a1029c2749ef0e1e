//! Same-host UDP throughput of 4 KiB datagrams through `softrdma-udp`, to choose the engine's
//! fast path: plain `sendmmsg`/`recvmmsg` versus GSO (`UDP_SEGMENT`) with and without GRO.
//!
//! ```text
//! cargo run --release -p softrdma-udp --example udp_bw -- [--secs 2] [--reps 3] [--size 4096] [--busy]
//! ```
//!
//! One sender thread (this one) and one receiver thread, on 127.0.0.1 with kernel-chosen
//! ports. The receiver blocks in a `Poller` when the socket is empty (the engine's idle path),
//! or spins on `recv_batch` with `--busy`. Goodput counts bytes the receiver got. The modes
//! alternate within each repetition and the medians are reported, so drift on this shared VM
//! hits all modes alike; before each run the benchmark waits (up to 60 s) for the machine to
//! be idle and tags the line QUIET or CONTENDED.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use softrdma_udp::{GsoPolicy, Poller, RecvBatch, RoceSocket, SocketConfig, Transmit};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Plain,
    GsoOnly,
    GsoGro,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain sendmmsg/recvmmsg",
            Mode::GsoOnly => "GSO send, no GRO",
            Mode::GsoGro => "GSO + GRO",
        }
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct Sample {
    gbps: f64,
    mpps: f64,
    loss: f64,
    tx_dgrams_per_call: f64,
    rx_dgrams_per_call: f64,
}

fn run(mode: Mode, size: usize, secs: f64, busy: bool) -> Sample {
    let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let (tx_cfg, rx_cfg) = match mode {
        Mode::Plain => (SocketConfig::plain(), SocketConfig::plain()),
        Mode::GsoOnly => (
            SocketConfig::default().with_gso(GsoPolicy::IcrcSafe),
            SocketConfig::default().with_gro(false),
        ),
        Mode::GsoGro => (SocketConfig::default(), SocketConfig::default()),
    };
    let tx = RoceSocket::bind(any, &tx_cfg).expect("bind tx");
    let rx = Arc::new(RoceSocket::bind(any, &rx_cfg).expect("bind rx"));
    let poller = Arc::new(Poller::new().expect("poller"));
    poller.add_socket(&rx, 0).expect("register");
    let stop = Arc::new(AtomicBool::new(false));

    let receiver = {
        let (rx, poller, stop) = (Arc::clone(&rx), Arc::clone(&poller), Arc::clone(&stop));
        thread::spawn(move || {
            let mut batch = RecvBatch::for_socket(&rx, 64);
            let (mut dgrams, mut bytes) = (0u64, 0u64);
            loop {
                let n = rx.recv_batch(&mut batch).expect("recv");
                if n == 0 {
                    if stop.load(Ordering::Acquire) {
                        break;
                    }
                    if !busy {
                        poller
                            .wait(Some(Instant::now() + Duration::from_millis(20)))
                            .expect("wait");
                    }
                    continue;
                }
                for d in batch.datagrams() {
                    dgrams += 1;
                    bytes += d.data.len() as u64;
                }
            }
            (dgrams, bytes)
        })
    };

    let buf = vec![0x5Au8; size];
    let dst = rx.local_addr();
    // Enough datagrams per call to fill a sendmmsg of 64 messages or 256 GSO segments.
    let per_call = if tx.gso_enabled() { 255 } else { 64 };
    let ts: Vec<Transmit<'_>> = (0..per_call)
        .map(|_| Transmit { dst, payload: &buf })
        .collect();
    let start = Instant::now();
    let until = start + Duration::from_secs_f64(secs);
    while Instant::now() < until {
        let mut sent = 0;
        while sent < ts.len() {
            let n = tx.send_batch(&ts[sent..]).expect("send");
            sent += n;
            if sent < ts.len() {
                thread::yield_now();
            }
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Release);
    poller.waker().wake().expect("wake");
    let (dgrams, bytes) = receiver.join().expect("receiver");

    let (ts, rs) = (tx.stats(), rx.stats());
    let sent = ts.datagrams_sent.max(1);
    Sample {
        gbps: bytes as f64 / elapsed / 1e9,
        mpps: dgrams as f64 / elapsed / 1e6,
        loss: 100.0 * (sent.saturating_sub(dgrams)) as f64 / sent as f64,
        tx_dgrams_per_call: ts.datagrams_sent as f64 / ts.send_syscalls.max(1) as f64,
        rx_dgrams_per_call: rs.datagrams_received as f64 / rs.recv_syscalls.max(1) as f64,
    }
}

/// (busy, total) jiffies from the first line of /proc/stat.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let v: Vec<u64> = s
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some((total - idle, total))
}

/// Waits (up to 60 s) until the machine is under 10 % busy over half a second, so runs do not
/// overlap other work on this 2-vCPU VM. Returns whether it got quiet.
fn wait_quiet() -> bool {
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        let Some((b0, t0)) = cpu_jiffies() else {
            return false;
        };
        thread::sleep(Duration::from_millis(500));
        let Some((b1, t1)) = cpu_jiffies() else {
            return false;
        };
        if t1 > t0 && (b1 - b0) * 100 < (t1 - t0) * 10 {
            return true;
        }
    }
    false
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn main() {
    let mut secs = 2.0f64;
    let mut reps = 3usize;
    let mut size = 4096usize;
    let mut busy = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--secs" => secs = val().parse().expect("--secs"),
            "--reps" => reps = val().parse().expect("--reps"),
            "--size" => size = val().parse().expect("--size"),
            "--busy" => busy = true,
            _ => {
                eprintln!("usage: udp_bw [--secs S] [--reps N] [--size BYTES] [--busy]");
                std::process::exit(2);
            }
        }
    }

    let probe =
        RoceSocket::bind("127.0.0.1:0".parse().unwrap(), &SocketConfig::default()).expect("bind");
    println!("kernel capabilities: {:?}", probe.capabilities());
    println!(
        "poller deadline mode: {:?}",
        Poller::new().expect("poller").timer_mode()
    );
    drop(probe);
    println!(
        "{size}-byte datagrams on 127.0.0.1, {secs} s per run, {reps} reps, receiver {}",
        if busy {
            "busy-polls"
        } else {
            "blocks in Poller when idle"
        }
    );

    let modes = [Mode::Plain, Mode::GsoOnly, Mode::GsoGro];
    let mut samples: Vec<Vec<Sample>> = vec![vec![]; modes.len()];
    for rep in 0..reps {
        for (i, &m) in modes.iter().enumerate() {
            let quiet = wait_quiet();
            let s = run(m, size, secs, busy);
            println!(
                "rep {rep} {:<9} {:<24} {:6.2} GB/s {:6.3} Mdgram/s  loss {:5.2}%  dgrams/syscall tx {:6.1} rx {:5.1}",
                if quiet { "QUIET" } else { "CONTENDED" },
                m.name(),
                s.gbps,
                s.mpps,
                s.loss,
                s.tx_dgrams_per_call,
                s.rx_dgrams_per_call
            );
            samples[i].push(s);
        }
    }
    println!("\nmedians over {reps} reps:");
    let med: Vec<f64> = samples
        .iter()
        .map(|v| median(v.iter().map(|s| s.gbps).collect()))
        .collect();
    for (i, m) in modes.iter().enumerate() {
        let loss = median(samples[i].iter().map(|s| s.loss).collect());
        println!("  {:<24} {:6.2} GB/s  (loss {loss:.2}%)", m.name(), med[i]);
    }
    println!(
        "  ratio GSO+GRO / plain:   {:.1}x   (GSO-only / plain: {:.1}x)",
        med[2] / med[0],
        med[1] / med[0]
    );
}
