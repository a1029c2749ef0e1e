//! `softrdma run`: the /dev and /sys view it gives an unmodified program
//! (consistent with what the libraries report), that children inherit it,
//! that it needs no root, and that programs inside and outside it share the
//! host device.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const TIMEOUT: Duration = Duration::from_secs(60);
/// `127.81.x.y`: this file's device addresses.
const NET: u8 = 81;

fn ok(out: &RunOutput) {
    assert_eq!(out.code(), Some(0), "{out}");
}

/// `name=value` lines printed by a probe script.
fn value<'a>(out: &'a RunOutput, name: &str) -> &'a str {
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name}= line: {out}"))
}

/// The shell probe: what UCX, NCCL and pyverbs read, one `name=value` each.
const PROBE: &str = r#"
d=/sys/class/infiniband/softrdma0; p=$d/ports/1
echo "node=$(stat -c %F /dev/infiniband/uverbs0)"
test -r /dev/infiniband/uverbs0 -a -w /dev/infiniband/uverbs0 && echo "access=rw"
echo "guid=$(cat $d/node_guid)"
echo "gid0=$(cat $p/gids/0)"
echo "type0=$(cat $p/gid_attrs/types/0)"
echo "ndev0=$(cat $p/gid_attrs/ndevs/0)"
echo "state=$(cat $p/state)"
echo "link=$(cat $p/link_layer)"
echo "net=$(ls $d/device/net | tr '\n' ' ')"
echo "cpus=$(cat $d/device/local_cpus)"
echo "ibdev=$(cat /sys/class/infiniband_verbs/uverbs0/ibdev)"
echo "null=$(echo x > /dev/null && echo ok)"
echo "netclass=$(test -d /sys/class/net/lo && echo ok)"
echo "run=$SOFTRDMA_RUN"
"#;

#[test]
fn view_matches_the_device() {
    let addr = unique_loopback_addr(NET);
    let out = run_with_timeout(&mut softrdma_run(addr, &["sh", "-c", PROBE]), TIMEOUT);
    ok(&out);
    assert_eq!(value(&out, "node"), "character special file", "{out}");
    assert_eq!(value(&out, "access"), "rw");
    let o = addr.octets();
    assert_eq!(
        value(&out, "gid0"),
        format!(
            "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
            o[0], o[1], o[2], o[3]
        )
    );
    assert_eq!(value(&out, "type0"), "RoCE v2");
    assert_eq!(value(&out, "ndev0"), "lo");
    assert_eq!(value(&out, "state"), "4: ACTIVE");
    assert_eq!(value(&out, "link"), "Ethernet");
    assert!(value(&out, "net").split(' ').any(|n| n == "lo"), "{out}");
    assert!(!value(&out, "cpus").is_empty());
    assert_eq!(value(&out, "ibdev"), "softrdma0");
    assert_eq!(value(&out, "null"), "ok", "the real /dev entries are there");
    assert_eq!(
        value(&out, "netclass"),
        "ok",
        "the real /sys/class entries are there"
    );
    assert_eq!(value(&out, "run"), "namespace");

    // The same as the C library reports, in the same view.
    let devinfo = run_with_timeout(&mut softrdma_run(addr, &["ibv_devinfo"]), TIMEOUT);
    ok(&devinfo);
    let guid = devinfo
        .stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("node_guid:"))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no node_guid: {devinfo}"));
    assert_eq!(value(&out, "guid"), guid);
    // Nothing leaked into this (the caller's) namespace.
    if !Path::new("/sys/class/infiniband").exists() {
        assert!(!Path::new("/dev/infiniband/uverbs0").exists());
    }
}

/// infiniband-diags in the view: `ibstatus` (a shell script reading the
/// /sys files) and `ibstat` (through `libibumad.so.3`, found next to the
/// other libraries) both describe the device.
#[test]
fn infiniband_diags_see_the_device() {
    let addr = unique_loopback_addr(NET);
    let out = run_with_timeout(&mut softrdma_run(addr, &["/usr/sbin/ibstatus"]), TIMEOUT);
    ok(&out);
    let o = addr.octets();
    let gid = format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        o[0], o[1], o[2], o[3]
    );
    let field = |key: &str| {
        out.stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix(key)?.strip_prefix(':'))
            .map(str::trim)
            .unwrap_or_else(|| panic!("no {key}: {out}"))
    };
    assert!(
        out.stdout
            .starts_with("Infiniband device 'softrdma0' port 1 status:"),
        "{out}"
    );
    assert_eq!(field("default gid"), gid);
    assert_eq!(field("state"), "4: ACTIVE");
    assert_eq!(field("link_layer"), "Ethernet");
    let ibstat = run_with_timeout(
        &mut softrdma_run(addr, &["/usr/sbin/ibstat", "-l"]),
        TIMEOUT,
    );
    ok(&ibstat);
    assert_eq!(ibstat.stdout, "softrdma0\n");
}

#[test]
fn children_inherit_the_view() {
    let addr = unique_loopback_addr(NET);
    let script = "sh -c 'test -c /dev/infiniband/uverbs0 && echo grandchild=ok'; \
                  \"$SOFTRDMA_BIN\" run -- sh -c 'echo nested=$(cat /sys/class/infiniband/softrdma0/ports/1/gid_attrs/types/0)'";
    let mut c = softrdma_run(addr, &["sh", "-c", script]);
    c.env("SOFTRDMA_BIN", BIN);
    let out = run_with_timeout(&mut c, TIMEOUT);
    ok(&out);
    assert_eq!(value(&out, "grandchild"), "ok");
    assert_eq!(
        value(&out, "nested"),
        "RoCE v2",
        "softrdma run inside softrdma run"
    );
}

#[test]
fn exit_status_is_the_programs() {
    let addr = unique_loopback_addr(NET);
    let out = run_with_timeout(&mut softrdma_run(addr, &["sh", "-c", "exit 7"]), TIMEOUT);
    assert_eq!(out.code(), Some(7), "{out}");
    let out = run_with_timeout(&mut softrdma_run(addr, &["/nonexistent/program"]), TIMEOUT);
    assert_eq!(out.code(), Some(127), "{out}");
    assert!(
        out.stderr.contains("cannot run /nonexistent/program"),
        "{out}"
    );
}

#[test]
fn no_namespace_sets_only_the_library_path() {
    let addr = unique_loopback_addr(NET);
    let mut c = softrdma_run_with(
        addr,
        &["--no-namespace"],
        &[
            "sh",
            "-c",
            "echo lib=$LD_LIBRARY_PATH; echo run=$SOFTRDMA_RUN",
        ],
    );
    let out = run_with_timeout(&mut c, TIMEOUT);
    ok(&out);
    let compat = require_compat_dir();
    assert_eq!(value(&out, "lib"), compat.to_str().unwrap());
    assert_eq!(value(&out, "run"), "libraries");
}

#[test]
fn missing_libraries_are_named() {
    let addr = unique_loopback_addr(NET);
    let mut c = softrdma_run(addr, &["true"]);
    c.env("SOFTRDMA_COMPAT_DIR", "/nonexistent/compat");
    let out = run_with_timeout(&mut c, TIMEOUT);
    assert_eq!(out.code(), Some(2), "{out}");
    assert!(
        out.stderr
            .contains("SOFTRDMA_COMPAT_DIR=/nonexistent/compat holds no libibverbs.so.1"),
        "{out}"
    );
}

/// An unprivileged user gets the same view (a user namespace, no root).
/// Run as root here, the test drops to `nobody` with setpriv.
#[test]
fn works_without_root() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let addr = unique_loopback_addr(NET);
    let mut c = softrdma_run(addr, &["sh", "-c", PROBE]);
    if root {
        let setpriv = require_tool("setpriv", "util-linux");
        c = wrapped(
            &c,
            &setpriv,
            &["--reuid=65534", "--regid=65534", "--clear-groups", "--"],
        );
        c.env_remove("XDG_RUNTIME_DIR").current_dir("/");
    }
    let out = run_with_timeout(&mut c, TIMEOUT);
    if out
        .stderr
        .contains("no /dev/infiniband and /sys/class/infiniband view")
    {
        eprintln!(
            "SKIPPED works_without_root: this kernel forbids unprivileged user namespaces: {out}"
        );
        return;
    }
    ok(&out);
    assert_eq!(value(&out, "node"), "character special file", "{out}");
    assert_eq!(value(&out, "access"), "rw");
    assert_eq!(value(&out, "type0"), "RoCE v2");
    assert_eq!(value(&out, "null"), "ok");
}

/// An rc_pingpong server under `softrdma run`, its client outside: one host
/// device, every received buffer checked (`-c`).
#[test]
fn inside_and_outside_share_the_device() {
    let pingpong = require_tool("ibv_rc_pingpong", "ibverbs-utils");
    let addr = unique_loopback_addr(NET);
    let port = unique_tcp_port();
    let args = ["-g", "0", "-c", "-n", "200", "-s", "4096", "-p"];
    let mut server = softrdma_run(addr, &[pingpong.as_os_str()]);
    server.args(args).arg(port.to_string());
    let mut client = std::process::Command::new(&pingpong);
    client
        .env("LD_LIBRARY_PATH", require_compat_dir())
        .env("SOFTRDMA_ADDR", addr.to_string())
        .env_remove("SOFTRDMA_PORT")
        .args(args)
        .arg(port.to_string())
        .arg(addr.to_string());
    let (s, c) = server_client(server, client, port, TIMEOUT);
    ok(&s);
    ok(&c);
    for out in [&s, &c] {
        assert!(
            out.stdout.contains("1638400 bytes in"),
            "200 round trips of 4096 bytes each way: {out}"
        );
    }
}

/// `--write-view DIR`: the same files, written for root to put in place.
#[test]
fn write_view_writes_the_tree() {
    let addr = unique_loopback_addr(NET);
    let dir = Scratch::new("write-view");
    let mut c = softrdma(addr);
    c.args(["run", "--write-view"]).arg(&dir.0);
    let out = run_with_timeout(&mut c, TIMEOUT);
    ok(&out);
    let port = dir.path("sys/class/infiniband/softrdma0/ports/1");
    let read =
        |p: &Path| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let o = addr.octets();
    assert_eq!(
        read(&port.join("gids/0")).trim(),
        format!(
            "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
            o[0], o[1], o[2], o[3]
        )
    );
    assert_eq!(read(&port.join("gid_attrs/types/0")), "RoCE v2\n");
    assert_eq!(
        read(&dir.path("sys/class/infiniband_verbs/uverbs0/ibdev")),
        "softrdma0\n"
    );
    assert!(dir.path("dev/infiniband").is_dir());
    assert!(
        out.stdout
            .contains("mknod -m 666 /dev/infiniband/uverbs0 c 231 192"),
        "{out}"
    );
}

/// Where namespaces are forbidden (here: a seccomp filter failing
/// unshare(2), as a container's profile does), `softrdma run` warns, says
/// what is missing, and still runs the program with the libraries.
#[test]
fn without_namespaces_falls_back_to_the_library_path() {
    let dir = Scratch::new("deny-unshare");
    let deny = dir.path("deny_unshare");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/deny_unshare.c");
    compile("cc", &[&src], &deny, &["-Wall"]);
    let addr = unique_loopback_addr(NET);
    let mut c = wrapped(
        &softrdma_run(addr, &["sh", "-c", "echo run=$SOFTRDMA_RUN; ibv_devices"]),
        &deny,
        &[],
    );
    let out = run_with_timeout(&mut c, TIMEOUT);
    ok(&out);
    assert_eq!(value(&out, "run"), "libraries");
    assert!(
        out.stdout.contains("softrdma0"),
        "the libraries still work: {out}"
    );
    assert!(
        out.stderr
            .contains("warning: no /dev/infiniband and /sys/class/infiniband view")
            && out.stderr.contains("Operation not permitted")
            && out
                .stderr
                .contains("UCX, Open MPI and NCCL will not find the device"),
        "{out}"
    );
}

/// Without `SOFTRDMA_COMPAT_DIR`, the libraries are found where `cargo
/// xtask compat` leaves them: `target/compat`, next to `target/debug`.
#[test]
fn finds_the_libraries_next_to_itself() {
    let addr = unique_loopback_addr(NET);
    let mut c = softrdma_run_with(
        addr,
        &["--no-namespace"],
        &["sh", "-c", "echo lib=$LD_LIBRARY_PATH"],
    );
    c.env_remove("SOFTRDMA_COMPAT_DIR");
    let out = run_with_timeout(&mut c, TIMEOUT);
    ok(&out);
    assert_eq!(value(&out, "lib"), require_compat_dir().to_str().unwrap());
}

/// Two separate non-root `softrdma run`s share one user namespace (the
/// second joins the first's), so their packets take the shared-memory path
/// both ways: processes in different user namespaces could not attach to
/// each other's inboxes. Run as root here, both drop to `nobody`.
#[test]
fn separate_runs_share_memory_without_root() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let pingpong = require_tool("ibv_rc_pingpong", "ibverbs-utils");
    let dir = Scratch::new("shared-userns");
    // nobody writes the counters here.
    std::fs::set_permissions(&dir.0, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let stats = dir.path("stats");
    let addr = unique_loopback_addr(NET);
    let port = unique_tcp_port();
    let make = |peer: Option<String>| {
        let mut c = softrdma_run(addr, &[pingpong.as_os_str()]);
        c.args(["-g", "0", "-c", "-n", "100", "-p", &port.to_string()])
            .args(peer)
            .env("SOFTRDMA_STATS", &stats)
            .env("SOFTRDMA_SHM", "1");
        if root {
            let setpriv = require_tool("setpriv", "util-linux");
            c = wrapped(
                &c,
                &setpriv,
                &["--reuid=65534", "--regid=65534", "--clear-groups", "--"],
            );
            c.env_remove("XDG_RUNTIME_DIR").current_dir("/");
        }
        c
    };
    let (s, c) = server_client(make(None), make(Some(addr.to_string())), port, TIMEOUT);
    if s.stderr
        .contains("no /dev/infiniband and /sys/class/infiniband view")
    {
        eprintln!("SKIPPED separate_runs_share_memory_without_root: no user namespaces: {s}");
        return;
    }
    ok(&s);
    ok(&c);
    let shm_tx = stat_per_process(&stats, "shm_tx");
    assert_eq!(shm_tx.len(), 2, "two processes' counters: {shm_tx:?}");
    assert!(
        shm_tx.iter().all(|&n| n > 0),
        "both directions through shared memory, shm_tx per process {shm_tx:?}\nserver: {s}\nclient: {c}"
    );
}
