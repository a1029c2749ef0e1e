//! What one copy between two processes costs here (issue 17, step 2):
//! `process_vm_readv` (peer → me) and `process_vm_writev` (me → peer) next to
//! `memcpy` within one process, at 4 KiB, 64 KiB and 1 MiB, hot buffers.
//!
//! `cargo run --release -p softrdma-shm --example peer_copy`
//!
//! The parent allocates and fills its buffers, then runs itself again as the
//! child (`peer_copy child <pid> <src> <dst>`), which measures and prints.

use std::time::{Duration, Instant};

const SIZES: [usize; 3] = [4 << 10, 64 << 10, 1 << 20];
const RUN: Duration = Duration::from_millis(300);
const REPS: usize = 5;

/// Bytes per second of `f(size)` repeated for `RUN`, median of `REPS`.
fn rate(size: usize, mut f: impl FnMut()) -> f64 {
    let mut v: Vec<f64> = (0..REPS)
        .map(|_| {
            let t = Instant::now();
            let mut n = 0u64;
            while t.elapsed() < RUN {
                for _ in 0..16 {
                    f();
                }
                n += 16;
            }
            (n as f64 * size as f64) / t.elapsed().as_secs_f64()
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[REPS / 2]
}

fn iov(addr: u64, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    }
}

fn child(pid: u32, src: u64, dst: u64) {
    let max = SIZES[SIZES.len() - 1];
    let mine = vec![3u8; max];
    let mut out = vec![0u8; max];
    println!(
        "| size | memcpy (one process) | process_vm_readv (peer → me) | process_vm_writev (me → peer) | readv / memcpy | µs per readv |"
    );
    println!("|---|---|---|---|---|---|");
    for size in SIZES {
        let m = rate(size, || {
            out[..size].copy_from_slice(&mine[..size]);
            std::hint::black_box(&mut out);
        });
        let local = [softrdma_shm::Range {
            addr: out.as_mut_ptr() as u64,
            len: size as u64,
        }];
        let remote = [softrdma_shm::Range {
            addr: src,
            len: size as u64,
        }];
        let r = rate(size, || {
            // SAFETY: `out` is ours, writable and not borrowed meanwhile.
            unsafe { softrdma_shm::read_from(pid, &remote, &local) }.expect("readv");
        });
        let (l, rv) = (iov(mine.as_ptr() as u64, size), iov(dst, size));
        let w = rate(size, || {
            // SAFETY: reads our `mine` and writes the parent's `dst`, which it
            // allocated for this and does not touch while we run.
            let n = unsafe { libc::process_vm_writev(pid as i32, &l, 1, &rv, 1, 0) };
            assert_eq!(n, size as isize, "writev");
        });
        let gb = |x: f64| x / 1e9;
        println!(
            "| {} KiB | {:.1} GB/s | {:.1} GB/s | {:.1} GB/s | {:.2} | {:.2} |",
            size >> 10,
            gb(m),
            gb(r),
            gb(w),
            r / m,
            size as f64 / r * 1e6,
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("child") {
        let num = |i: usize| args[i].parse::<u64>().expect("number");
        child(num(2) as u32, num(3), num(4));
        return;
    }
    let max = SIZES[SIZES.len() - 1];
    let src = vec![7u8; max];
    let dst = vec![0u8; max];
    let status = std::process::Command::new(std::env::current_exe().expect("exe"))
        .args([
            "child".to_owned(),
            std::process::id().to_string(),
            (src.as_ptr() as u64).to_string(),
            (dst.as_ptr() as u64).to_string(),
        ])
        .status()
        .expect("child");
    assert!(status.success());
    assert!(dst.iter().all(|&b| b == 3), "the child wrote our buffer");
    std::hint::black_box((&src, &dst));
}
