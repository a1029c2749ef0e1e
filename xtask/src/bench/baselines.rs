//! What softrdma is measured against, and the idle waiter: the qperf TCP
//! server and tests, a one-thread memcpy, a cache line's trip between two
//! CPUs, and the CPU use of a process blocked on a completion channel.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::sleep;
use std::time::{Duration, Instant};

use super::{Ctx, Sample, parse, procs};
use crate::Result;
use procs::{free_addrs, free_tcp_port, run_one};

/// The qperf server all TCP baselines talk to.
pub(crate) struct Qperf {
    child: std::process::Child,
    port: u16,
}

impl Qperf {
    pub(crate) fn start() -> Result<Qperf> {
        let port = free_tcp_port()?;
        let child = Command::new("qperf")
            .args(["-lp", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start qperf (apt-get install qperf): {e}"))?;
        let t0 = Instant::now();
        while !procs::is_listening(port) {
            if t0.elapsed() > Duration::from_secs(10) {
                return Err("qperf server did not listen".into());
            }
            sleep(Duration::from_millis(10));
        }
        Ok(Qperf { child, port })
    }

    /// Runs one qperf test; returns (its value in base units, CPU s of both sides).
    pub(crate) fn test(
        &self,
        ctx: &Ctx,
        args: &[&str],
        name: &str,
        field: &str,
    ) -> Result<(f64, f64)> {
        let srv = self.child.id();
        let s0 = procs::process_cpu(srv);
        let mut c = Command::new("qperf");
        c.args(["127.0.0.1", "-lp", &self.port.to_string()])
            .args(["-t", &ctx.opts.secs.to_string()])
            .args(args);
        let (out, cpu) = run_one(name, &ctx.dir, &mut c, Duration::from_secs(60))?;
        // The server forks a process per test; wait until it was reaped.
        let t0 = Instant::now();
        while procs::has_children(srv) && t0.elapsed() < Duration::from_secs(3) {
            sleep(Duration::from_millis(10));
        }
        let v = parse::qperf(&out, field).ok_or_else(|| format!("no {field} in:\n{out}"))?;
        Ok((v, cpu + procs::process_cpu(srv) - s0))
    }
}

impl Drop for Qperf {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One-thread memcpy bandwidth for `size`-byte copies between hot buffers.
///
/// Both buffers start on a page. Two `Vec`s of 64 KiB sit next to each
/// other on the heap, the destination 16 bytes past a 4 KiB multiple from
/// the source, and there glibc's `rep movsb` (copies of 2112 bytes and
/// more) ran at 1.3–2 GB/s instead of 25–38 on this VM's AMD CPU: a
/// destination 1 to ~31 bytes past the source, modulo 4 KiB, is that
/// slow (BENCHMARKS.md, "The socket's gap on the same-host path").
pub(crate) fn memcpy_bw(size: usize) -> f64 {
    const PAGE: usize = 4096;
    let src_buf = vec![1u8; size + PAGE];
    let mut dst_buf = vec![0u8; size + PAGE];
    let (s0, d0) = (
        src_buf.as_ptr().align_offset(PAGE),
        dst_buf.as_ptr().align_offset(PAGE),
    );
    let src = &src_buf[s0..s0 + size];
    let dst = &mut dst_buf[d0..d0 + size];
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < Duration::from_millis(300) {
        for _ in 0..16 {
            dst.copy_from_slice(std::hint::black_box(src));
            std::hint::black_box(&mut *dst);
        }
        n += 16;
    }
    (n * size as u64) as f64 / t0.elapsed().as_secs_f64()
}

/// One-way time, in µs, for a cache line one thread writes to reach another
/// spinning on it: two threads ping-pong two counters on their own lines,
/// unpinned like the benchmark's processes (two spinners take two CPUs).
/// Every same-host latency, UCX's too, moves with it: on this VM it is
/// ~0.06 µs or ~0.27 µs depending on where the host runs the vCPUs
/// (BENCHMARKS.md, "The machine's two modes"). NaN on one CPU.
pub(crate) fn cacheline_us() -> f64 {
    #[repr(align(128))]
    struct Line(AtomicU64);
    const TRIPS: u64 = 200_000;
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        return f64::NAN;
    }
    let ping = Arc::new(Line(AtomicU64::new(0)));
    let pong = Arc::new(Line(AtomicU64::new(0)));
    let (pi, po) = (ping.clone(), pong.clone());
    let peer = std::thread::spawn(move || {
        for i in 1..=TRIPS {
            while pi.0.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            po.0.store(i, Ordering::Release);
        }
    });
    let t0 = Instant::now();
    for i in 1..=TRIPS {
        ping.0.store(i, Ordering::Release);
        while pong.0.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
    }
    let took = t0.elapsed();
    let _ = peer.join();
    took.as_secs_f64() * 1e6 / (2 * TRIPS) as f64
}

/// CPU use (% of one CPU) and wake-ups per second of a process blocked on a
/// completion channel.
pub(crate) fn idle(ctx: &Ctx) -> Result<Sample> {
    let a = free_addrs(2)?;
    let mut child = Command::new(&ctx.bench_exe)
        .args(["--idle", "--addr", &a.to_string(), "--udp-port", "4791"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start the idle waiter: {e}"))?;
    // Wait for READY (the example may print other lines first).
    let mut line = String::new();
    let ready = child
        .stdout
        .take()
        .map(std::io::BufReader::new)
        .is_some_and(|mut r| {
            while matches!(r.read_line(&mut line), Ok(n) if n > 0) {
                if line.trim() == "READY" {
                    return true;
                }
                line.clear();
            }
            false
        });
    let pid = child.id();
    let r = if ready {
        // Let the exchange's timers run out and the devices count as idle
        // (their progress threads wake every 10 ms for 200 ms after traffic).
        sleep(Duration::from_millis(1000));
        let (c0, w0, t0) = (
            procs::process_cpu(pid),
            procs::context_switches(pid),
            Instant::now(),
        );
        sleep(Duration::from_secs(ctx.opts.idle_secs));
        let secs = t0.elapsed().as_secs_f64();
        let (c1, w1) = (procs::process_cpu(pid), procs::context_switches(pid));
        Ok(Sample {
            v: 100.0 * (c1 - c0) / secs,
            aux: (w1 - w0) as f64 / secs,
        })
    } else {
        Err(format!("idle waiter did not start (printed {line:?})"))
    };
    let _ = child.kill();
    let _ = child.wait();
    r
}
