//! Issue 16: the host device under an all-to-all mesh. Two "hosts" (network
//! namespaces joined by a veth pair, one address each), four processes on
//! each sharing its address, every process connected to every other through
//! the connection manager (28 RC connections, `rdmalib_mesh`), WRITEs with
//! notifications checked byte for byte each round. One process is SIGKILLed
//! in the middle: every pair of survivors still finishes every round
//! byte-exact, each survivor's connection to the dead one ends with an
//! error instead of hanging, and the registry's table of the dead member's
//! host is rebuilt to what the kernel did (the last socket moved into the
//! dead one's index: the reconciliation of `softrdma-engine`'s `host.rs`).
//! Needs root (namespaces); other users get a loud SKIPPED line.

#[allow(dead_code)]
#[path = "../../softrdma/tests/common/netns.rs"]
mod netns;
#[allow(dead_code)]
#[path = "common/proc.rs"]
mod proc;

use netns::{Netns, skip_unless_root};
use proc::{Proc, example};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const PER_HOST: usize = 4;
const ROUNDS: u32 = 150;
const VICTIM: usize = 5;
const T: Duration = Duration::from_secs(90);

#[test]
fn four_processes_per_host_all_to_all_one_killed() {
    if skip_unless_root("mesh::four_processes_per_host_all_to_all_one_killed") {
        return;
    }
    let net = Netns::create("mesh", 93, false);
    let peers: Vec<String> = (0..2 * PER_HOST)
        .map(|k| format!("{}:{}", net.roce[k / PER_HOST], 7600 + k))
        .collect();
    let list = peers.join(",");
    let bin = example("rdmalib_mesh");
    let mut procs: Vec<Proc> = (0..2 * PER_HOST)
        .map(|k| {
            let me = k.to_string();
            let rounds = ROUNDS.to_string();
            let args = ["--me", &me, "--peers", &list, "--rounds", &rounds];
            Proc::spawn(&format!("member {k}"), net.cmd(k / PER_HOST, &bin, args))
        })
        .collect();
    let slots: Vec<u8> = procs
        .iter_mut()
        .map(|p| {
            let l = p.wait_line("SLOT ", T);
            l.trim_start_matches("SLOT ").trim().parse().unwrap()
        })
        .collect();
    // The victim's host: which slot sits at which index of its group.
    let group = group_file(&net, VICTIM / PER_HOST);
    let before = members(&group);
    let mut sorted = before.clone();
    sorted.sort_unstable();
    let mut want_slots: Vec<u8> = slots[PER_HOST..].to_vec();
    want_slots.sort_unstable();
    assert_eq!(sorted, want_slots, "{}", group.display());
    // Rounds are paced (5 ms apart): the kill lands mid-way.
    std::thread::sleep(Duration::from_millis(250));
    procs[VICTIM].kill();
    let killed = Instant::now();
    // The kernel moved the last socket into the dead one's index.
    let hole = before.iter().position(|&s| s == slots[VICTIM]).unwrap();
    let mut expect = before.clone();
    let last = expect.pop().unwrap();
    if hole < expect.len() {
        expect[hole] = last;
    }
    while members(&group) != expect {
        assert!(
            killed.elapsed() < Duration::from_secs(10),
            "table {:?} never became {expect:?} (was {before:?}, victim slot {})",
            members(&group),
            slots[VICTIM]
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    println!(
        "table {before:?} -> {expect:?} {:?} after the kill",
        killed.elapsed()
    );
    let mut problems = Vec::new();
    for (k, p) in procs.iter_mut().enumerate() {
        if k == VICTIM {
            continue;
        }
        if !p.wait(T).success() {
            problems.push(format!("member {k} failed"));
        }
        let out = p.stdout();
        for j in (0..2 * PER_HOST).filter(|&j| j != k) {
            let prefix = format!("PAIR {k}-{j} ");
            let Some(line) = out.lines().find(|l| l.starts_with(&prefix)) else {
                problems.push(format!("no PAIR {k}-{j}"));
                continue;
            };
            let good = if j == VICTIM {
                line.contains(" DOWN ")
            } else {
                line == format!("PAIR {k}-{j} OK rounds={ROUNDS}")
            };
            if !good {
                problems.push(line.to_string());
            }
        }
    }
    if !problems.is_empty() {
        let reports: Vec<String> = procs.iter().map(Proc::report).collect();
        panic!("{}\n{}", problems.join("\n"), reports.join(""));
    }
    println!("survivors done {:?} after the kill", killed.elapsed());
}

/// The registry's group file of namespace `i`'s address
/// (`softrdma-host`: `<base>/net-<netns inode>/group-<address>`).
fn group_file(net: &Netns, i: usize) -> PathBuf {
    let ino = std::fs::metadata(format!("/run/netns/{}", net.ns[i]))
        .unwrap()
        .ino();
    softrdma_host::Registry::default_base_dir()
        .join(format!("net-{ino}"))
        .join(format!("group-{}", net.roce[i]))
}

/// The member slots a group file lists, in index order (none if unreadable).
fn members(path: &PathBuf) -> Vec<u8> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("members="))
        .map(|m| m.split(',').filter_map(|s| s.parse().ok()).collect())
        .unwrap_or_default()
}
