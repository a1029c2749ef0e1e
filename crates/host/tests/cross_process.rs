//! Liveness across processes: a child process holds a member slot and a listening port
//! lease; after it is SIGKILLed (no chance to clean up), the parent sees the slot dead and
//! takes the port.
//!
//! The child is this test binary re-executed to run only [`child_holder`], told so by an
//! environment variable; without it, [`child_holder`] does nothing.

use std::io::{self, BufRead, BufReader};
use std::net::IpAddr;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use softrdma_host::{PS_TCP, Registry};

const CHILD_ENV: &str = "SOFTRDMA_HOST_TEST_CHILD_BASE";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Child side: holds a slot and a listening lease, reports them, then waits until its
/// stdin closes (so it cannot outlive a parent that failed before killing it) or 20 s pass.
#[test]
fn child_holder() {
    let Some(base) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let reg = Registry::open_in(Path::new(&base)).unwrap();
    let member = reg.join().unwrap();
    let lease = reg
        .reserve_port(&member, PS_TCP, ip("127.0.0.1"), 0)
        .unwrap();
    lease.set_listening(true).unwrap();
    println!(
        "READY {} {} {}",
        member.slot(),
        member.generation(),
        lease.port()
    );
    // Never outlive a hung parent either.
    std::thread::spawn(|| {
        std::thread::sleep(std::time::Duration::from_secs(20));
        std::process::exit(1);
    });
    let mut sink = String::new();
    let _ = io::stdin().read_line(&mut sink);
}

/// Kills the child if the test fails before doing so itself.
struct Reaper(Child);

impl Drop for Reaper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

struct TestDir(PathBuf);

impl Drop for TestDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn sigkilled_holder_frees_its_slot_and_port() {
    let base =
        TestDir(std::env::temp_dir().join(format!("softrdma-host-xproc-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&base.0);
    let reg = Registry::open_in(&base.0).unwrap();
    let me = reg.join().unwrap();

    let child = Command::new(std::env::current_exe().unwrap())
        .args(["child_holder", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &base.0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = Reaper(child);
    let stdout = child.0.stdout.take().unwrap();
    // libtest prints around the child's line ("test child_holder ... READY 2 1 40000").
    let ready = BufReader::new(stdout)
        .lines()
        .map(Result::unwrap)
        .find_map(|l| l.split_once("READY ").map(|(_, rest)| rest.to_owned()))
        .expect("child exited without reporting READY");
    let f: Vec<u64> = ready
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();
    let (slot, generation, port) = (f[0] as u8, f[1], f[2] as u16);

    // While the child lives: its slot is alive, its lease blocks the port and
    // shows up as a listener.
    assert_ne!(slot, me.slot());
    assert!(reg.is_alive(slot));
    assert_eq!(reg.generation(slot), Some(generation));
    let members = reg.members().unwrap();
    let theirs = members.iter().find(|m| m.slot == slot).unwrap();
    assert_eq!(theirs.pid, child.0.id());
    assert_eq!(
        reg.listeners(ip("127.0.0.1")).unwrap(),
        [(PS_TCP, port, slot)]
    );
    for addr in ["127.0.0.1", "0.0.0.0", "::", "::ffff:127.0.0.1"] {
        let e = reg.reserve_port(&me, PS_TCP, ip(addr), port).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRINUSE), "{addr}: {e}");
    }

    // SIGKILL: the child gets no chance to release anything.
    child.0.kill().unwrap();
    let status = child.0.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGKILL));

    assert!(!reg.is_alive(slot));
    assert_eq!(
        reg.generation(slot),
        Some(generation),
        "slot file and generation remain"
    );
    assert!(reg.listeners(ip("127.0.0.1")).unwrap().is_empty());
    assert!(reg.members().unwrap().iter().all(|m| m.slot != slot));
    let lease = reg
        .reserve_port(&me, PS_TCP, ip("127.0.0.1"), port)
        .unwrap();
    assert_eq!(lease.port(), port);
    lease.set_listening(true).unwrap();
    assert_eq!(
        reg.listeners(ip("127.0.0.1")).unwrap(),
        [(PS_TCP, port, me.slot())]
    );
    // The dead child's slot is in quarantine: a never-used slot is taken first.
    let next = reg.join().unwrap();
    assert_ne!(next.slot(), slot);
    assert!(next.slot() > slot.max(me.slot()));
}
