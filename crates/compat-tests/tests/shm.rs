//! Issue 17, the same-host path: unmodified programs on this host exchange
//! their packets through shared memory (the default; the tests say
//! `SOFTRDMA_SHM=1` so a CI pass with `SOFTRDMA_SHM=0` keeps them on it), and
//! over UDP with `SOFTRDMA_SHM=0`, with the same results; a peer killed in the middle of
//! RDMA WRITEs, READs or atomics on the shared-memory path leaves its
//! survivor with an error completion, never a hang.
//!
//! Large SENDs, RDMA WRITEs and READs on the path are peer copies (one
//! copy by the destination's owner, or for a READ into shared pages by the
//! responder under the requester's ticket); with the path off, perftest
//! keeps to UDP.
//!
//! Which path ran is read from the counters each process writes at exit
//! (`SOFTRDMA_STATS`): `shm_tx`/`shm_rx` count datagrams through lanes,
//! `shm_peer_copies` the copies a process made from its peer's memory.
//!
//! Needs `cargo xtask compat`, ibverbs-utils and perftest; fails (never
//! skips) without.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use softrdma_compat_tests::pair::{PairOutput, is_listening};
use softrdma_compat_tests::*;

/// `127.49.x.y`: this file's loopback addresses.
const NET: u8 = 49;
const TIMEOUT: Duration = Duration::from_secs(60);
/// How long the survivor of a kill may take to fail its work requests and
/// exit: RC gives up after 7 retries of perftest's ~67 ms timeout (about
/// 0.5 s); the rest is a hang bound for a busy machine.
const SURVIVOR_BOUND: Duration = Duration::from_secs(15);

/// A file for one process's counters, of its own even when tests running
/// side by side name the same program.
fn stats_file(name: &str) -> PathBuf {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let p = std::env::temp_dir().join(format!("softrdma-shm-{}-{n}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// The value of counter `key` in a `SOFTRDMA_STATS` file (None: absent).
fn counter(path: &Path, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .rev()
        .filter_map(|l| l.split_once(' '))
        .filter(|(k, _)| *k == key)
        .find_map(|(_, v)| v.parse().ok())
}

fn with_env(mut c: Command, vars: &[(&str, &str)]) -> Command {
    for (k, v) in vars {
        c.env(k, v);
    }
    c
}

/// `ibv_rc_pingpong -c` (every buffer validated) between two processes with
/// `server_env` / `client_env`; returns both stats files.
fn rc_pingpong(
    name: &str,
    server_env: &[(&str, &str)],
    client_env: &[(&str, &str)],
) -> (PathBuf, PathBuf, PairOutput) {
    rc_pingpong_sized(name, 8192, server_env, client_env)
}

/// [`rc_pingpong`] with `size`-byte messages.
fn rc_pingpong_sized(
    name: &str,
    size: u64,
    server_env: &[(&str, &str)],
    client_env: &[(&str, &str)],
) -> (PathBuf, PathBuf, PairOutput) {
    let bin = require_binary("ibv_rc_pingpong");
    let server = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let client = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let (ss, cs) = (
        stats_file(&format!("{name}-s")),
        stats_file(&format!("{name}-c")),
    );
    let port = unique_tcp_port().to_string();
    let sz = size.to_string();
    let args = ["-g", "0", "-c", "-n", "2000", "-s", &sz, "-p", &port];
    let mut s = with_env(server.command(&args), server_env);
    s.env("SOFTRDMA_STATS", &ss);
    let mut cargs = args.to_vec();
    let saddr = server.addr.to_string();
    cargs.push(&saddr);
    let mut c = with_env(client.command(&cargs), client_env);
    c.env("SOFTRDMA_STATS", &cs);
    let out = run_pair(&mut s, port.parse().unwrap(), &mut c, TIMEOUT);
    assert!(out.both_succeeded(), "{name}:\n{out}");
    let bytes = format!("{} bytes in", 2 * 2000 * size);
    for side in [&out.server, out.client.as_ref().unwrap()] {
        assert!(
            side.stdout.contains(&bytes),
            "{name}: 2000 messages each way (counted twice):\n{out}"
        );
    }
    (ss, cs, out)
}

const ON: [(&str, &str); 1] = [("SOFTRDMA_SHM", "1")];

#[test]
fn rc_pingpong_goes_through_shared_memory_when_on() {
    require_compat_dir();
    let (ss, cs, _) = rc_pingpong("on", &ON, &ON);
    for f in [&ss, &cs] {
        // 2000 messages of 8 KiB: 4000 packets each way, plus ACKs.
        let tx = counter(f, "shm_tx").expect("shm counters present");
        let rx = counter(f, "shm_rx").unwrap();
        assert!(tx >= 4000 && rx >= 4000, "{}: tx {tx} rx {rx}", f.display());
        // Every packet the transport built went through a lane.
        assert_eq!(counter(f, "tx_packets"), Some(tx), "{}", f.display());
    }
}

/// Direct records (on by default, `SOFTRDMA_DIRECT=0` turns them off):
/// 64-byte messages, each posted to an idle QP, leave as records, and every
/// buffer is still validated (`-c`); with them off, none does. Most are
/// written by the QP's express cell at the post, most receives posted
/// into its receive cell, and the responder executes them by its express
/// path, most through the cell it is lent to with its requester
/// (`SOFTRDMA_EXPRESS=0` leaves all of it to the engine and the generic
/// responder, with the same result).
#[test]
fn small_messages_go_as_direct_records() {
    require_compat_dir();
    let off = [("SOFTRDMA_SHM", "1"), ("SOFTRDMA_DIRECT", "0")];
    let (ss, cs, out) = rc_pingpong_sized("direct-off", 64, &off, &off);
    for f in [&ss, &cs] {
        assert_eq!(counter(f, "tx_direct"), Some(0), "{}:\n{out}", f.display());
    }
    let on = [("SOFTRDMA_SHM", "1")];
    let (ss, cs, out) = rc_pingpong_sized("direct", 64, &on, &on);
    for f in [&ss, &cs] {
        let sent = counter(f, "tx_direct").expect("counters present");
        let got = counter(f, "rx_direct").unwrap();
        assert!(
            sent >= 1000 && got >= 1000,
            "{}: {sent} records sent, {got} received:\n{out}",
            f.display()
        );
        let express = counter(f, "rx_express").unwrap();
        assert!(
            express >= 1000,
            "{}: {express} by the express path",
            f.display()
        );
        // Most posts go through the QP's express cell, without the engine.
        let posted = counter(f, "tx_express").unwrap();
        assert!(posted >= 500, "{}: {posted} express posts", f.display());
        // And most requests through its lent responder.
        let lent = counter(f, "rx_lent").unwrap();
        assert!(lent >= 500, "{}: {lent} by the lent responder", f.display());
        // And the receives: ibv_rc_pingpong posts each alone.
        let recvs = counter(f, "recv_express").unwrap();
        assert!(recvs >= 500, "{}: {recvs} express receives", f.display());
    }
    let generic = [("SOFTRDMA_SHM", "1"), ("SOFTRDMA_EXPRESS", "0")];
    let (ss, cs, out) = rc_pingpong_sized("express-off", 64, &generic, &generic);
    for f in [&ss, &cs] {
        assert!(counter(f, "rx_direct").unwrap() >= 1000, "{}", f.display());
        assert_eq!(counter(f, "rx_express"), Some(0), "{}:\n{out}", f.display());
        assert_eq!(counter(f, "tx_express"), Some(0), "{}:\n{out}", f.display());
        assert_eq!(counter(f, "rx_lent"), Some(0), "{}:\n{out}", f.display());
        assert_eq!(
            counter(f, "recv_express"),
            Some(0),
            "{}:\n{out}",
            f.display()
        );
    }
}

#[test]
fn rc_pingpong_over_udp_with_shm_off() {
    require_compat_dir();
    let off = [("SOFTRDMA_SHM", "0")];
    let (ss, cs, _) = rc_pingpong("off", &off, &off);
    for f in [&ss, &cs] {
        assert_eq!(counter(f, "shm_tx"), None, "{}", f.display());
        assert!(counter(f, "datagrams_sent").unwrap() >= 4000);
    }
}

/// One side with the path off publishes no inbox: the other finds no lane to
/// it, says so under SOFTRDMA_DEBUG and sends over UDP; it still receives
/// nothing through its own inbox, since the first side sends over UDP.
#[test]
fn a_peer_without_the_path_is_reached_over_udp() {
    require_compat_dir();
    let (ss, cs, out) = rc_pingpong(
        "mixed",
        &[("SOFTRDMA_SHM", "0")],
        &[("SOFTRDMA_SHM", "1"), ("SOFTRDMA_DEBUG", "1")],
    );
    assert_eq!(counter(&ss, "shm_tx"), None);
    assert_eq!(counter(&cs, "shm_tx"), Some(0));
    let client = out.client.as_ref().unwrap();
    assert!(
        client
            .stderr
            .contains("no shared-memory link to member slot"),
        "the fallback is noted:\n{out}"
    );
}

/// `program args` (perftest) between two processes with `env`; returns the
/// server's and the client's stats files after both succeeded.
fn perftest_pair(program: &str, args: &[&str], env: &[(&str, &str)]) -> (PathBuf, PathBuf) {
    let (ss, cs, out) = perftest_pair_with(program, args, env, env);
    assert!(out.both_succeeded(), "{program}:\n{out}");
    (ss, cs)
}

/// [`perftest_pair`] with the server's and the client's env apart; returns
/// the stats files and the pair's output, unchecked.
fn perftest_pair_with(
    program: &str,
    args: &[&str],
    server_env: &[(&str, &str)],
    client_env: &[(&str, &str)],
) -> (PathBuf, PathBuf, PairOutput) {
    let bin = require_binary(program);
    let server = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let client = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let (ss, cs) = (
        stats_file(&format!("{program}-s")),
        stats_file(&format!("{program}-c")),
    );
    let saddr = server.addr.to_string();
    let run = || {
        let port = unique_tcp_port().to_string();
        let mut sargs = vec!["-p", &port];
        sargs.extend_from_slice(args);
        let mut s = with_env(server.command(&sargs), server_env);
        s.env("SOFTRDMA_STATS", &ss);
        let mut cargs = sargs.clone();
        cargs.push(&saddr);
        let client_cmd = || {
            let mut c = with_env(client.command(&cargs), client_env);
            c.env("SOFTRDMA_STATS", &cs);
            c
        };
        if args.contains(&"-R") {
            // rdma_cm: the server listens on the CM port, not on TCP.
            let (turned_away, end) = (perftest::perftest_turned_away, cm::ServerEnd::Exits);
            cm::run_cm_pair(&mut s, server.addr, client_cmd, turned_away, end, TIMEOUT)
        } else {
            run_pair(&mut s, port.parse().unwrap(), &mut client_cmd(), TIMEOUT)
        }
    };
    let out = perftest::retry_clock_fit(run);
    (ss, cs, out)
}

/// Every 1 MiB WRITE and 64 KiB SEND is one copy by the responder (the
/// server), every 64 KiB READ one placement by the responder into the
/// requester's shared pages, or with `SOFTRDMA_PLACE=0` one copy by the
/// requester (the client); nothing fails.
#[test]
fn large_writes_and_reads_are_peer_copies() {
    require_compat_dir();
    let (ss, cs) = perftest_pair("ib_write_bw", &["-s", "1048576", "-n", "200"], &ON);
    assert!(counter(&ss, "shm_peer_copies").is_some_and(|n| n >= 200));
    assert_eq!(counter(&cs, "shm_peer_copies"), Some(0));
    let (ss, cs) = perftest_pair("ib_send_bw", &["-s", "65536", "-n", "1000"], &ON);
    assert!(counter(&ss, "shm_peer_copies").is_some_and(|n| n >= 1000));
    assert_eq!(counter(&cs, "shm_peer_copies"), Some(0));
    let read = ["-s", "65536", "-n", "1000"];
    let (ss, cs) = perftest_pair("ib_read_bw", &read, &ON);
    assert!(counter(&ss, "shm_peer_placed").is_some_and(|n| n >= 1000));
    assert_eq!(counter(&ss, "shm_peer_place_refused"), Some(0));
    assert_eq!(counter(&cs, "shm_peer_copies"), Some(0));
    assert_eq!(counter(&ss, "shm_peer_copies"), Some(0));
    let mut files = vec![ss, cs];
    let (ss, cs) = perftest_pair("ib_read_bw", &read, &[ON[0], ("SOFTRDMA_PLACE", "0")]);
    assert!(counter(&cs, "shm_peer_copies").is_some_and(|n| n >= 1000));
    assert_eq!(counter(&ss, "shm_peer_placed"), Some(0));
    files.extend([ss, cs]);
    for f in &files {
        assert_eq!(counter(f, "shm_peer_copy_failed"), Some(0));
        assert_eq!(counter(f, "shm_peer_dropped"), Some(0));
    }
}

/// QPs connected through rdma_cm (perftest `-R`) use peer copy too.
#[test]
fn rdma_cm_connected_qps_use_peer_copy() {
    require_compat_dir();
    let args = ["-R", "-s", "65536", "-n", "500"];
    let (ss, _) = perftest_pair("ib_write_bw", &args, &ON);
    assert!(counter(&ss, "shm_peer_copies").is_some_and(|n| n >= 500));
}

/// `SOFTRDMA_PEER_COPY=0` keeps the lanes but every byte in packets;
/// `SOFTRDMA_SHM=0` keeps to UDP.
#[test]
fn peer_copy_off_and_shm_off() {
    require_compat_dir();
    let args = ["-s", "65536", "-n", "500"];
    let pk = [("SOFTRDMA_SHM", "1"), ("SOFTRDMA_PEER_COPY", "0")];
    let (ss, cs) = perftest_pair("ib_write_bw", &args, &pk);
    for f in [&ss, &cs] {
        assert_eq!(counter(f, "shm_peer_copies"), Some(0));
        assert!(counter(f, "shm_tx").is_some_and(|n| n > 0));
    }
    // 500 × 16 packets of 4 KiB through the client's lane.
    assert!(counter(&cs, "shm_tx").is_some_and(|n| n >= 8000));
    let (ss, cs) = perftest_pair("ib_write_bw", &args, &[("SOFTRDMA_SHM", "0")]);
    for f in [&ss, &cs] {
        assert_eq!(counter(f, "shm_tx"), None);
        assert_eq!(counter(f, "shm_peer_copies"), None);
    }
    assert!(counter(&cs, "datagrams_sent").is_some_and(|n| n >= 8000));
}

/// Which side of a perftest pair a kill test SIGKILLs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Victim {
    /// The server: the responder of WRITEs and atomics, the memory READs
    /// copy from.
    Responder,
    /// The client: the requester, whose memory the server copies WRITEs
    /// out of.
    Requester,
}

/// `program` between two processes without end (`--run_infinitely`); once
/// it runs, `victim` is killed: the survivor must exit on its own within
/// [`SURVIVOR_BOUND`] (never hang, never die of a signal such as a fault in
/// a copy from the dead peer's memory), having used the lanes. A surviving
/// client must fail with an error completion (its work requests fail);
/// a surviving server learns of it from the control connection.
/// `copier`: the side that makes peer copies (or placements) and the
/// counter that says so, if any, so the test checks they ran; `env`: both
/// sides'.
fn peer_killed_during(
    program: &str,
    extra: &[&str],
    victim: Victim,
    copier: Option<(Victim, &str)>,
    env: &[(&str, &str)],
) {
    require_compat_dir();
    let bin = require_binary(program);
    let server = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let client = Endpoint::compat(&bin, unique_loopback_addr(NET));
    let files = [
        stats_file(&format!("{program}-{victim:?}-killed-s")),
        stats_file(&format!("{program}-{victim:?}-killed-c")),
    ];
    let deadline = Instant::now() + TIMEOUT;
    let saddr = server.addr.to_string();
    let mut retries = 0;
    let (mut s, mut c) = loop {
        let port = unique_tcp_port();
        let ps = port.to_string();
        let mut args = vec!["-p", &ps, "--run_infinitely"];
        args.extend_from_slice(extra);
        let mut scmd = with_env(server.command(&args), env);
        scmd.env("SOFTRDMA_SHM", "1")
            .env("SOFTRDMA_STATS", &files[0]);
        let mut s = spawn(&mut scmd);
        while !is_listening(s.pid(), port) {
            assert!(
                s.poll().is_none() && Instant::now() < deadline,
                "the {program} server did not start:\n{}",
                s.finish(Instant::now())
            );
            thread::sleep(Duration::from_millis(5));
        }
        args.push(&saddr);
        let mut cmd = with_env(client.command(&args), env);
        cmd.env("SOFTRDMA_STATS", &files[1])
            .env("SOFTRDMA_SHM", "1");
        let mut c = spawn(&mut cmd);
        // perftest prints a result line every few seconds when running
        // infinitely; the first one means traffic flows.
        let running = c.wait_for_stdout(deadline, |o| o.contains("#bytes"));
        if running && c.poll().is_none() {
            break (s, c);
        }
        // perftest's own clock fit failed before its first report
        // (`perftest::CLOCK_FIT_FAILED`). Nothing of the test has been
        // measured yet: the pair starts again, as `retry_clock_fit` does
        // for pairs that run to their end.
        if retries < perftest::CLOCK_FIT_RETRIES
            && c.stderr_so_far().contains(perftest::CLOCK_FIT_FAILED)
        {
            retries += 1;
            c.kill();
            s.kill();
            let _ = (c.finish(Instant::now()), s.finish(Instant::now()));
            for f in &files {
                let _ = std::fs::remove_file(f);
            }
            continue;
        }
        panic!(
            "{program} did not get going:\n{}\n{}",
            c.finish(Instant::now()),
            s.finish(Instant::now())
        );
    };
    thread::sleep(Duration::from_millis(300));
    let (out, after, survivor_stats) = match victim {
        Victim::Responder => {
            let (out, after) = c.outlive(&mut s, SURVIVOR_BOUND);
            (out, after, &files[1])
        }
        Victim::Requester => {
            let (out, after) = s.outlive(&mut c, SURVIVOR_BOUND);
            (out, after, &files[0])
        }
    };
    println!("{program}: the survivor exited {after:?} after the {victim:?}'s SIGKILL");
    assert!(
        after.is_some(),
        "{program}: the survivor did not exit within {SURVIVOR_BOUND:?}:\n{out}"
    );
    assert_eq!(
        out.signal(),
        None,
        "{program}: the survivor crashed:\n{out}"
    );
    assert_ne!(
        out.code(),
        Some(0),
        "{program}: the survivor must fail:\n{out}"
    );
    if victim == Victim::Responder {
        assert!(
            out.combined().contains("status"),
            "{program}: an error completion is reported:\n{out}"
        );
    }
    assert!(
        counter(survivor_stats, "shm_rx").is_some_and(|n| n > 100),
        "{program}: traffic went through shared memory: {:?}",
        std::fs::read_to_string(survivor_stats)
    );
    if let Some((_, copies)) = copier.filter(|&(side, _)| side != victim) {
        assert!(
            counter(survivor_stats, copies).is_some_and(|n| n > 100),
            "{program}: the survivor copied from its peer's memory: {:?}",
            std::fs::read_to_string(survivor_stats)
        );
    }
}

#[test]
fn peer_killed_during_rdma_writes() {
    let copier = Some((Victim::Responder, "shm_peer_copies"));
    peer_killed_during(
        "ib_write_bw",
        &["-s", "65536"],
        Victim::Responder,
        copier,
        &[],
    );
}

/// The responder dies while it places READ data into the requester's
/// memory: the requester's flush must not wait for it (a dead placer's
/// ticket is taken back).
#[test]
fn peer_killed_during_rdma_reads() {
    let copier = Some((Victim::Responder, "shm_peer_placed"));
    peer_killed_during(
        "ib_read_bw",
        &["-s", "65536"],
        Victim::Responder,
        copier,
        &[],
    );
}

/// As above, with the requester copying READ data from the responder.
#[test]
fn peer_killed_during_rdma_reads_copied_by_the_requester() {
    let copier = Some((Victim::Requester, "shm_peer_copies"));
    let env = [("SOFTRDMA_PLACE", "0")];
    peer_killed_during(
        "ib_read_bw",
        &["-s", "65536"],
        Victim::Responder,
        copier,
        &env,
    );
}

#[test]
fn peer_killed_during_atomics() {
    peer_killed_during("ib_atomic_bw", &[], Victim::Responder, None, &[]);
}

/// The requester dies while the responder copies its WRITEs out of the
/// requester's memory.
#[test]
fn requester_killed_during_rdma_writes() {
    let copier = Some((Victim::Responder, "shm_peer_copies"));
    peer_killed_during(
        "ib_write_bw",
        &["-s", "65536"],
        Victim::Requester,
        copier,
        &[],
    );
}

/// The requester dies while the responder places READ data into its
/// memory; the responder must not notice anything but the end.
#[test]
fn requester_killed_during_rdma_reads() {
    let copier = Some((Victim::Responder, "shm_peer_placed"));
    peer_killed_during(
        "ib_read_bw",
        &["-s", "65536"],
        Victim::Requester,
        copier,
        &[],
    );
}

#[test]
fn requester_killed_during_atomics() {
    peer_killed_during("ib_atomic_bw", &[], Victim::Requester, None, &[]);
}

/// A capture on the same-host path: the capturing requester keeps its
/// WRITEs in packets (no peer copy), so the capture holds their data; a
/// capturing responder of a peer that uses peer copy says that the data
/// bypassed the wire.
#[test]
fn a_capture_holds_the_data_or_says_it_bypassed_the_wire() {
    require_compat_dir();
    let pcap = stats_file("capture.pcap");
    let pcap_s = pcap.to_str().unwrap();
    let args = ["-s", "65536", "-n", "100"];
    let client_captures = [("SOFTRDMA_SHM", "1"), ("SOFTRDMA_PCAP", pcap_s)];
    let (ss, _, out) = perftest_pair_with("ib_write_bw", &args, &ON, &client_captures);
    assert!(out.both_succeeded(), "{out}");
    assert_eq!(counter(&ss, "shm_peer_copies"), Some(0), "no peer copy");
    assert!(counter(&ss, "shm_rx").is_some_and(|n| n >= 1600), "lanes");
    let len = std::fs::metadata(&pcap).map(|m| m.len()).unwrap_or(0);
    assert!(len > 100 * 65536, "the capture holds the data: {len} bytes");
    assert_icrcs_right(&pcap);

    // The server captures; the client copies nothing itself but sends
    // descriptors the server copies by.
    let _ = std::fs::remove_file(&pcap);
    let (ss, _, out) = perftest_pair_with("ib_write_bw", &args, &client_captures, &ON);
    assert!(out.both_succeeded(), "{out}");
    assert!(counter(&ss, "shm_peer_copies").is_some_and(|n| n >= 100));
    assert!(
        out.server.stderr.contains("bypasses the wire"),
        "the capturing side says so:\n{out}"
    );
    // The client, not capturing, left its lane packets' ICRCs out; the
    // capturing server records them as the wire would carry them.
    assert_icrcs_right(&pcap);
    let _ = std::fs::remove_file(&pcap);
}

/// Every packet of a capture (there are some) has its right ICRC.
fn assert_icrcs_right(pcap: &Path) {
    use softrdma_wire::decode::IcrcStatus;
    let bytes = std::fs::read(pcap).unwrap();
    let (mut n, mut bad) = (0, Vec::new());
    for rec in softrdma_wire::PcapReader::new(&bytes).unwrap() {
        let Some(ip) = rec.unwrap().ip_packet() else {
            continue;
        };
        n += 1;
        match softrdma_wire::decode_ip_packet(ip) {
            Ok(d) if d.icrc == IcrcStatus::Ok => {}
            other => bad.push(format!("packet {n}: {:?}", other.map(|d| d.icrc))),
        }
    }
    assert!(n >= 100, "{n} packets in {}", pcap.display());
    assert!(
        bad.is_empty(),
        "{} of {n} bad: {:?}",
        bad.len(),
        &bad[..bad.len().min(5)]
    );
}
