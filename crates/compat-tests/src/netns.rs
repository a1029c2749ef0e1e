//! Two network namespaces joined by a veth pair, for "two hosts" on one
//! machine. Created by the tests (root only), removed on drop, also when the
//! test panics; namespaces a crashed earlier run left behind are removed the
//! first time a pair is created.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::Once;
use std::sync::atomic::{AtomicU32, Ordering};

/// Every namespace of these tests is `srcompat-<pid>-<n>-{a,b}` (the Rust API's
/// netns tests use another prefix).
pub const NETNS_PREFIX: &str = "srcompat-";

static NEXT: AtomicU32 = AtomicU32::new(0);
static STALE: Once = Once::new();

/// Whether this process runs as root (needed for namespaces).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Runs `ip <args>`; `Err` with its output when it fails.
fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .map_err(|e| format!("cannot run `ip` (apt-get install iproute2): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`ip {}` failed ({}): {}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// The names of the existing network namespaces (`ip netns list`).
pub fn list_netns() -> Vec<String> {
    let out = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .expect("cannot run `ip netns list` (apt-get install iproute2)");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Deletes our namespaces whose creating process no longer exists (a
/// crashed earlier run); [`NetnsPair::create`] does it once per process.
pub fn remove_stale() {
    for ns in list_netns() {
        let Some(rest) = ns.strip_prefix(NETNS_PREFIX) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            match ip(&["netns", "del", &ns]) {
                Ok(()) => eprintln!("removed stale network namespace {ns}"),
                Err(e) => eprintln!("could not remove stale network namespace {ns}: {e}"),
            }
        }
    }
}

/// Namespaces `a` and `b`, each with `lo` up and one end of a veth pair
/// addressed `10.<x>.<y>.1/24` (a) and `.2/24` (b).
#[derive(Debug)]
pub struct NetnsPair {
    pub a: String,
    pub b: String,
    pub addr_a: Ipv4Addr,
    pub addr_b: Ipv4Addr,
    /// The veth ends in `a` and `b`.
    pub dev_a: String,
    pub dev_b: String,
}

impl NetnsPair {
    /// Creates the pair; panics with the failing command's output. Only
    /// call it as root ([`is_root`]).
    pub fn create() -> NetnsPair {
        STALE.call_once(remove_stale);
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let base = format!("{NETNS_PREFIX}{pid}-{n}");
        let (x, y) = (100 + (n / 250) as u8 % 100, (n % 250) as u8 + 1);
        let pair = NetnsPair {
            a: format!("{base}-a"),
            b: format!("{base}-b"),
            addr_a: Ipv4Addr::new(10, x, y, 1),
            addr_b: Ipv4Addr::new(10, x, y, 2),
            dev_a: format!("sc{pid:x}-{n}a"),
            dev_b: format!("sc{pid:x}-{n}b"),
        };
        // From here on, Drop removes whatever was created.
        let (va, vb) = (pair.dev_a.clone(), pair.dev_b.clone());
        let steps: Vec<Vec<String>> = vec![
            vec!["netns".into(), "add".into(), pair.a.clone()],
            vec!["netns".into(), "add".into(), pair.b.clone()],
            vec![
                "link".into(),
                "add".into(),
                va.clone(),
                "netns".into(),
                pair.a.clone(),
                "type".into(),
                "veth".into(),
                "peer".into(),
                "name".into(),
                vb.clone(),
                "netns".into(),
                pair.b.clone(),
            ],
        ];
        let mut steps = steps;
        for (ns, dev, addr) in [(&pair.a, &va, pair.addr_a), (&pair.b, &vb, pair.addr_b)] {
            steps.push(vec![
                "-n".into(),
                ns.clone(),
                "addr".into(),
                "add".into(),
                format!("{addr}/24"),
                "dev".into(),
                dev.clone(),
            ]);
            for link in ["lo", dev.as_str()] {
                steps.push(vec![
                    "-n".into(),
                    ns.clone(),
                    "link".into(),
                    "set".into(),
                    link.into(),
                    "up".into(),
                ]);
            }
        }
        for step in &steps {
            let args: Vec<&str> = step.iter().map(String::as_str).collect();
            if let Err(e) = ip(&args) {
                panic!("creating network namespaces {} / {}: {e}", pair.a, pair.b);
            }
        }
        pair
    }
}

impl NetnsPair {
    /// Adds `10.<x>.<y>.<host>/24` to the veth end in `b` (`in_b`) or `a`,
    /// for a second process "on that host"; returns the address.
    pub fn add_addr(&self, in_b: bool, host: u8) -> Ipv4Addr {
        let [_, x, y, _] = self.addr_a.octets();
        let addr = Ipv4Addr::new(10, x, y, host);
        let (ns, dev) = if in_b {
            (&self.b, &self.dev_b)
        } else {
            (&self.a, &self.dev_a)
        };
        let cidr = format!("{addr}/24");
        if let Err(e) = ip(&["-n", ns, "addr", "add", &cidr, "dev", dev]) {
            panic!("adding {cidr} in {ns}: {e}");
        }
        addr
    }

    /// Removes an address [`NetnsPair::add_addr`] added.
    pub fn del_addr(&self, in_b: bool, addr: Ipv4Addr) {
        let (ns, dev) = if in_b {
            (&self.b, &self.dev_b)
        } else {
            (&self.a, &self.dev_a)
        };
        let cidr = format!("{addr}/24");
        if let Err(e) = ip(&["-n", ns, "addr", "del", &cidr, "dev", dev]) {
            panic!("removing {cidr} in {ns}: {e}");
        }
    }
}

impl Drop for NetnsPair {
    fn drop(&mut self) {
        // Deleting a namespace also deletes its end of the veth, and so both.
        for ns in [&self.a, &self.b] {
            if list_netns().iter().any(|n| n == ns)
                && let Err(e) = ip(&["netns", "del", ns])
            {
                eprintln!("could not remove network namespace {ns}: {e}");
            }
        }
    }
}

/// Prints the loud skip notice of the namespace tests when not root and
/// returns whether they may run.
pub fn netns_allowed(test: &str) -> bool {
    if is_root() {
        return true;
    }
    let msg = format!(
        "SKIPPED (needs root): {test} creates network namespaces; run the tests as root (CI does)"
    );
    let bar = "!".repeat(msg.len());
    // Straight to the process's stderr: libtest captures `eprintln!` of
    // passing tests, and this notice must be seen.
    let _ = std::io::Write::write_all(
        &mut std::io::stderr(),
        format!("\n{bar}\n{msg}\n{bar}\n").as_bytes(),
    );
    false
}
