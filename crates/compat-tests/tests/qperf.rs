//! Issue 18: qperf (Debian `qperf`), unmodified, with its RDMA tests over
//! rdma_cm (`-cm1`) on softrdma: `rc_bw`, `rc_lat`, `rc_rdma_write_bw`,
//! `rc_rdma_read_bw`, server and client in two processes on this host's
//! device.
//!
//! Two bugs made qperf `-cm1` hang now and then, both fixed: a blocking
//! event call retried `EINTR` (qperf ends each test with `SIGALRM`
//! interrupting `ibv_get_cq_event`; its server then waited forever for a
//! completion), and an exit hook run from qperf's `SIGURG` handler waited
//! for the registry lock its own thread held (every later process of the
//! host then waited too). Debian's qperf 0.4.11 also tells its client the
//! server's port before it listens (fixed upstream in 2018); the CM drops a
//! REQ for a bound port with no listener yet, and the retransmission
//! connects. qperf checks no data; the test checks that every test reports
//! a positive result (qperf prints nothing for a test that failed, and says
//! why on stderr).
//!
//! (Without `-cm1` qperf exchanges LIDs and sends no GRH, which RoCE
//! rejects: the same on Linux rxe; see the middleware notes in docs.)

use std::time::{Duration, Instant};

use softrdma_compat_tests::middleware::require_tool;
use softrdma_compat_tests::*;

const TESTS: [&str; 4] = ["rc_bw", "rc_lat", "rc_rdma_write_bw", "rc_rdma_read_bw"];

/// The value after `<key>  =` in qperf's report of `test`, in bytes/s or
/// seconds (`1.2 GB/sec`, `893 MB/sec`, `63.2 us`).
fn value(report: &str, test: &str) -> Option<f64> {
    let mut lines = report
        .lines()
        .skip_while(|l| l.trim() != format!("{test}:"));
    lines.next()?;
    let line = lines.next()?;
    let rest = line.split_once('=')?.1.trim();
    let (num, unit) = rest.split_once(' ')?;
    let n: f64 = num.parse().ok()?;
    let scale = match unit.trim() {
        "GB/sec" => 1e9,
        "MB/sec" => 1e6,
        "KB/sec" => 1e3,
        "bytes/sec" => 1.0,
        "sec" => 1.0,
        "ms" => 1e-3,
        "us" => 1e-6,
        "ns" => 1e-9,
        _ => return None,
    };
    Some(n * scale)
}

#[test]
fn qperf_report_parser() {
    let r = "rc_bw:\n    bw  =  1.2 GB/sec\nrc_lat:\n    latency  =  63.2 us\n";
    assert_eq!(value(r, "rc_bw"), Some(1.2e9));
    assert!((value(r, "rc_lat").unwrap() - 63.2e-6).abs() < 1e-12);
    assert_eq!(value(r, "rc_rdma_read_bw"), None);
}

#[test]
fn qperf_cm_rc_tests() {
    let qperf = require_tool("qperf", "qperf");
    let port = unique_tcp_port();
    let port_s = port.to_string();
    // The server serves until killed (dropping `Spawned` kills it).
    let mut server = spawn(compat_command(&qperf).args(["-lp", &port_s]));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !is_listening(server.pid(), port) {
        if server.poll().is_some() || Instant::now() >= deadline {
            panic!(
                "the qperf server did not listen on TCP port {port}:\n{}",
                server.finish(Instant::now())
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut client = compat_command(&qperf);
    client.args(["-lp", &port_s, "-cm1", "-t", "1", "127.0.0.1"]);
    client.args(TESTS);
    let out = run_with_timeout(&mut client, Duration::from_secs(60));
    let server = server.finish(Instant::now());
    assert_eq!(out.code(), Some(0), "{out}\n===== server =====\n{server}");
    for t in TESTS {
        let v = value(&out.stdout, t);
        assert!(
            v.is_some_and(|v| v > 0.0),
            "{t}: no result in qperf's report:\n{out}\n===== server =====\n{server}"
        );
    }
    assert!(out.stderr.trim().is_empty(), "qperf complained:\n{out}");
}
