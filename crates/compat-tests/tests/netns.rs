//! Issue 4: every ping-pong pair of `tests/pingpong.rs` again, with the
//! server and the client in two network namespaces ("two hosts") joined by a
//! veth pair: `ip netns exec <ns> env LD_LIBRARY_PATH=target/compat
//! SOFTRDMA_ADDR=10.x.y.{1,2} ibv_*_pingpong ...`.
//!
//! Each test creates its own namespaces (`srcompat-<pid>-<n>-{a,b}`) and
//! removes them when it ends, also on failure; namespaces left by a crashed
//! run are removed first. Creating namespaces needs root: other users get a
//! loud `SKIPPED (needs root)` and a passing test (CI runs as root).
//!
//! Needs `cargo xtask compat` and ibverbs-utils; fails (never skips) without.

use softrdma_compat_tests::pingpong::c_program;
use softrdma_compat_tests::*;

fn run_case(name: &str) {
    let case = case(name);
    let test = format!("netns {}", case.name);
    if !netns_allowed(&test) {
        return;
    }
    let bin = c_program(&case);
    require_compat_dir();
    let ns = NetnsPair::create();
    let server = Endpoint::compat(&bin, ns.addr_a).in_netns(&ns.a);
    let client = Endpoint::compat(&bin, ns.addr_b).in_netns(&ns.b);
    run_pingpong_case(&case, server, client, "netns");
}

// One test per ping-pong case, and one that fails if a case has none.
softrdma_compat_tests::pingpong_tests!(run_case);

#[test]
fn namespaces_are_removed_on_drop_even_after_a_panic() {
    if !netns_allowed("netns cleanup") {
        return;
    }
    let names = std::thread::spawn(|| {
        let ns = NetnsPair::create();
        let names = (ns.a.clone(), ns.b.clone());
        assert!(netns::list_netns().contains(&ns.a));
        assert!(netns::list_netns().contains(&ns.b));
        std::panic::panic_any(names);
    })
    .join()
    .expect_err("the thread panics");
    let (a, b) = names
        .downcast::<(String, String)>()
        .unwrap()
        .as_ref()
        .clone();
    let left = netns::list_netns();
    assert!(
        !left.contains(&a) && !left.contains(&b),
        "{a} / {b} still exist: {left:?}"
    );
}

#[test]
fn stale_namespaces_of_dead_processes_are_removed() {
    if !netns_allowed("netns stale cleanup") {
        return;
    }
    // Pid 0 is never a process: this looks like a crashed run's namespace.
    let stale = format!("{}0-{}-a", netns::NETNS_PREFIX, std::process::id());
    let st = std::process::Command::new("ip")
        .args(["netns", "add", &stale])
        .status()
        .unwrap();
    assert!(st.success());
    // One of this process's own namespaces must survive.
    let mine = NetnsPair::create();
    netns::remove_stale();
    let left = netns::list_netns();
    assert!(!left.contains(&stale), "{stale} not removed: {left:?}");
    assert!(left.contains(&mine.a) && left.contains(&mine.b), "{left:?}");
}
