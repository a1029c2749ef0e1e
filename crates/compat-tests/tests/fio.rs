//! Issue 18: fio's rdma engine (Debian `fio`, `--ioengine=rdma`), unmodified,
//! over softrdma's librdmacm/libibverbs: a server job (`--rw=read`) and a
//! client job (`--rw=write`) in two processes on this host's device.
//!
//! - `--verb=send`: every block is a SEND into a receive the server posted
//!   for it; the client fills blocks with fio's crc32c verify headers and the
//!   server checks each one it receives (`--verify=crc32c --verify_fatal=1`),
//!   so the bytes are checked end to end. At iodepth 1 (one receive posted at
//!   a time, and fio connects with `rnr_retry_count` 0) and at iodepth 8.
//! - `--verb=write` and `--verb=read`: RDMA WRITE into / READ from the
//!   buffers the server advertised; fio checks no data for these (the server
//!   does no I/O of its own), so the test checks every block completed.
//!
//! fio exits 0 even when its job failed (a refused connection, an error
//! completion), so the checks read its report: `err= 0` and the issued
//! block counts. Needs `cargo xtask compat` and fio; fails without.

use std::process::Command;
use std::sync::Mutex;
use std::time::Duration;

use softrdma_compat_tests::middleware::{require_tool, run_pair_after_stdout, turned_away};
use softrdma_compat_tests::*;

const TIMEOUT: Duration = Duration::from_secs(60);

/// One pair at a time: each fio job is a few threads, and ten of them on a
/// 2-vCPU runner measure the scheduler more than softrdma.
static SERIAL: Mutex<()> = Mutex::new(());
const BS: u32 = 4096;

/// fio line-buffered (so the server's "waiting for connection" is seen at
/// once) against target/compat, one job in a thread (no fork).
fn fio(args: &[String]) -> Command {
    let fio = require_tool("fio", "fio");
    let mut c = compat_command("stdbuf");
    // fio writes a verify state file into its working directory: none.
    c.arg("-oL")
        .arg(fio)
        .args(["--thread", "--ioengine=rdma", "--verify_state_save=0"])
        .current_dir(std::env::temp_dir());
    c.args(args);
    c
}

/// Runs a server and a client job; returns both reports after checking that
/// both exited 0, reported `err= 0` and no error line, and that the client
/// issued `size / BS` writes.
fn run(verb: &str, size: u32, iodepth: u32, server: &[&str], client: &[&str]) -> PairOutput {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let port = unique_tcp_port();
    let common = |extra: &[&str]| -> Vec<String> {
        let mut v = vec![
            format!("--port={port}"),
            format!("--verb={verb}"),
            format!("--bs={BS}"),
            format!("--size={size}"),
            format!("--iodepth={iodepth}"),
        ];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let mut s_args = vec!["--name=server".to_owned(), "--rw=read".to_owned()];
    s_args.extend(common(server));
    let mut c_args = vec![
        "--name=client".to_owned(),
        "--rw=write".to_owned(),
        "--hostname=127.0.0.1".to_owned(),
    ];
    c_args.extend(common(client));
    let out = run_pair_after_stdout(
        &mut fio(&s_args),
        "waiting for connection",
        || fio(&c_args),
        turned_away,
        TIMEOUT,
    );
    assert!(out.both_succeeded(), "fio --verb={verb} failed:\n{out}");
    let blocks = size / BS;
    let c = out.client.as_ref().expect("client ran");
    for (who, o) in [("server", &out.server), ("client", c)] {
        let text = o.combined();
        assert!(
            text.contains("err= 0") && !text.contains("fio: cq completion status"),
            "{who} reported an error:\n{out}"
        );
        assert!(!text.contains("verify:"), "{who}: verify failed:\n{out}");
    }
    assert!(
        c.stdout
            .contains(&format!("issued rwts: total=0,{blocks},0,0")),
        "the client did not issue {blocks} writes:\n{out}"
    );
    out
}

/// SEND/RECV with the server verifying every block's crc32c header.
fn send(iodepth: u32) {
    let size = 512 * BS;
    let out = run(
        "send",
        size,
        iodepth,
        &["--verify=crc32c", "--verify_fatal=1"],
        &["--verify=crc32c", "--do_verify=0"],
    );
    let blocks = size / BS;
    assert!(
        out.server
            .stdout
            .contains(&format!("issued rwts: total={blocks},0,0,0")),
        "the server did not receive {blocks} blocks:\n{out}"
    );
}

#[test]
fn fio_send_recv_iodepth_1_verified() {
    send(1);
}

#[test]
fn fio_send_recv_iodepth_8_verified() {
    send(8);
}

/// The verify headers are really checked: blocks sent without them fail
/// the server's verification (so the tests above would notice bad bytes).
#[test]
fn fio_send_recv_verification_catches_foreign_bytes() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let port = unique_tcp_port();
    let args = |name: &str, rw: &str, extra: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            format!("--name={name}"),
            format!("--rw={rw}"),
            format!("--port={port}"),
            "--verb=send".into(),
            format!("--bs={BS}"),
            format!("--size={}", 16 * BS),
            "--iodepth=1".into(),
        ]
        .into();
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let out = run_pair_after_stdout(
        &mut fio(&args(
            "server",
            "read",
            &["--verify=crc32c", "--verify_fatal=1"],
        )),
        "waiting for connection",
        || fio(&args("client", "write", &["--hostname=127.0.0.1"])),
        turned_away,
        Duration::from_secs(60),
    );
    assert!(
        out.server.combined().contains("verify: bad magic header"),
        "the server accepted blocks without verify headers:\n{out}"
    );
}

#[test]
fn fio_rdma_write() {
    run("write", 256 * BS, 4, &[], &[]);
}

#[test]
fn fio_rdma_read() {
    run("read", 256 * BS, 4, &[], &[]);
}
