//! Two "hosts" for the tests that need a real network between their peers:
//! network namespaces joined by a veth pair, with nftables rules inside them
//! (`ip` from iproute2, `nft` from nftables). Needs root; not root, a test
//! says so loudly with [`skip_unless_root`] and passes.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

/// Unless this process runs as root, prints a loud SKIPPED line for `test`
/// (`file::name`) and returns true.
pub(crate) fn skip_unless_root(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return false;
    }
    // Written to the real stderr: the test harness captures print! output of
    // passing tests, and this line must show in every run.
    use std::io::Write;
    let _ = writeln!(
        std::io::stderr(),
        "\n!!!!!!!! SKIPPED (needs root): {test} creates network namespaces; \
         run as root (CI does) !!!!!!!!\n"
    );
    true
}

/// Runs a setup command; panics with its output on failure. Returns its
/// standard output.
pub(crate) fn sh(args: &[&str]) -> String {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("run {args:?}: {e} (install iproute2 / nftables)"));
    assert!(
        out.status.success(),
        "{args:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Two namespaces joined by a veth pair; both removed when dropped, panics
/// included.
pub(crate) struct Netns {
    pub(crate) ns: [String; 2],
    veth: [String; 2],
    /// IPv4 addresses of the veth ends (TCP side channels use them).
    pub(crate) addr: [String; 2],
    /// The devices' addresses (`SOFTRDMA_ADDR`): `addr`, or IPv6 ones.
    pub(crate) roce: [String; 2],
}

impl Netns {
    /// The namespaces, on `10.<subnet>.x.1` and `.2`. `name` (at most four
    /// characters) and `subnet` keep the test binaries apart, the process id
    /// and a counter the namespaces of one binary. With `ipv6`, each veth end
    /// also gets a unique local IPv6 address, and the devices use those.
    pub(crate) fn create(name: &str, subnet: u8, ipv6: bool) -> Netns {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let id = std::process::id();
        let tag = format!("{name}{:05x}{n}", id % 0x10_0000);
        let addr = [1, 2].map(|h| format!("10.{subnet}.{}.{h}", (id + n) % 250));
        let roce = if ipv6 {
            [1, 2].map(|h| format!("fd00:5d:{:x}::{h}", id % 0x10000))
        } else {
            addr.clone()
        };
        let net = Netns {
            ns: [format!("sr{tag}a"), format!("sr{tag}b")],
            veth: [format!("v{tag}a"), format!("v{tag}b")],
            addr,
            roce,
        };
        // From here on Drop removes whatever exists, also after a failed step.
        let veth = &net.veth;
        for ns in &net.ns {
            sh(&["ip", "netns", "add", ns]);
        }
        sh(&[
            "ip", "link", "add", &veth[0], "type", "veth", "peer", "name", &veth[1],
        ]);
        for ((ns, dev), addr) in net.ns.iter().zip(veth).zip(&net.addr) {
            sh(&["ip", "link", "set", dev, "netns", ns]);
            let cidr = format!("{addr}/24");
            sh(&["ip", "-n", ns, "addr", "add", &cidr, "dev", dev]);
            sh(&["ip", "-n", ns, "link", "set", dev, "up"]);
            sh(&["ip", "-n", ns, "link", "set", "lo", "up"]);
        }
        if ipv6 {
            for ((ns, dev), addr) in net.ns.iter().zip(veth).zip(&net.roce) {
                // `nodad`: usable at once, not tentative for a second or two.
                let cidr = format!("{addr}/64");
                sh(&["ip", "-n", ns, "addr", "add", &cidr, "dev", dev, "nodad"]);
            }
        }
        net
    }

    /// Loads the nftables `rules` (`nft -f -`) in namespace `i`.
    pub(crate) fn nft(&self, i: usize, rules: &str) {
        use std::io::Write;
        let ns = &self.ns[i];
        let mut c = Command::new("ip")
            .args(["netns", "exec", ns, "nft", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run nft (apt-get install nftables)");
        c.stdin
            .take()
            .expect("stdin")
            .write_all(rules.as_bytes())
            .expect("write nft rules");
        let out = c.wait_with_output().expect("wait for nft");
        assert!(
            out.status.success(),
            "nft -f in {ns} failed: {}\n(the kernel needs nf_tables with numgen)",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The packet counters of the rules of chain `input` of table `inet
    /// <table>` in namespace `i`, in the order of the rules; panics unless
    /// there are `N`.
    pub(crate) fn packets<const N: usize>(&self, i: usize, table: &str) -> [u64; N] {
        let out = sh(&[
            "ip",
            "netns",
            "exec",
            &self.ns[i],
            "nft",
            "list",
            "chain",
            "inet",
            table,
            "input",
        ]);
        let words: Vec<&str> = out.split_whitespace().collect();
        let counts: Vec<u64> = words
            .windows(2)
            .filter(|w| w[0] == "packets")
            .filter_map(|w| w[1].parse().ok())
            .collect();
        counts
            .try_into()
            .unwrap_or_else(|_| panic!("not {N} packet counters in:\n{out}"))
    }

    /// `program args` inside namespace `i`, its device on the namespace's
    /// address and otherwise unconfigured (no port, capture or faults from
    /// the test's environment).
    pub(crate) fn cmd(
        &self,
        i: usize,
        program: &Path,
        args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    ) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns[i], "env"])
            .arg(format!("SOFTRDMA_ADDR={}", self.roce[i]))
            .arg(program)
            .args(args)
            .env_remove("SOFTRDMA_PORT")
            .env_remove("SOFTRDMA_PCAP")
            .env_remove("SOFTRDMA_FAULTS");
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        // Deleting a namespace deletes its veth end, and with it the peer end;
        // a veth that never made it into a namespace is deleted by name.
        for ns in &self.ns {
            let _ = Command::new("ip")
                .args(["netns", "del", ns])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth[0]])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}
