//! The C API as C programs use it: the C examples (echo, file transfer)
//! and `tests/c/misuse.c`, compiled with `cc` against `include/rdmalib.h`
//! and linked with `-L target/compat -lrdmalib`, run as two processes in
//! polling and event mode, against each other and against the Rust
//! examples; peers SIGKILLed mid-transfer; the library's exports.
//!
//! `target/compat/librdmalib.so` is built with `cargo xtask compat` first if
//! it is missing or older than rdmalib's sources. Without a C compiler the
//! tests say so loudly on stderr and pass (skip).

#[path = "../../rdmalib/tests/common/proc.rs"]
mod proc;

use proc::{Proc, device_cmd, example_cmd, newest, tmp, unique_addr};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const NET: u8 = 72;
const T: Duration = Duration::from_secs(60);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn have_cc() -> bool {
    static CC: OnceLock<bool> = OnceLock::new();
    *CC.get_or_init(|| {
        let ok = Command::new("cc")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !ok {
            eprintln!(
                "\n*** SKIPPED: rdmalib's C tests need a C compiler `cc` (apt-get install gcc) ***\n"
            );
        }
        ok
    })
}

macro_rules! require_cc {
    () => {
        if !have_cc() {
            eprintln!("SKIPPED {}: no C compiler", module_path!());
            return;
        }
    };
}

/// `target/compat`, with a `librdmalib.so` no older than the sources of the
/// crates linked into it (running `cargo xtask compat` if needed).
fn compat_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        // target/<profile>/deps/<test>: the target directory is three up.
        let target = exe
            .ancestors()
            .nth(3)
            .expect("target directory")
            .to_path_buf();
        let lib = target.join("compat/librdmalib.so");
        // Everything linked into the library.
        let sources = [
            "wire",
            "transport",
            "udp",
            "cm",
            "engine",
            "softrdma",
            "rdmalib",
            "rdmalib-capi",
        ]
        .iter()
        .map(|c| newest(&root().join("crates").join(c).join("src")))
        .max()
        .unwrap();
        let built = lib.metadata().and_then(|m| m.modified()).ok();
        if built.is_none_or(|b| b < sources) {
            eprintln!(
                "{} is missing or older than its sources: running `cargo xtask compat`",
                lib.display()
            );
            let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args(["xtask", "compat"])
                .current_dir(root())
                .env("CARGO_TARGET_DIR", &target)
                .output()
                .expect("run cargo xtask compat");
            if !out.status.success() {
                let why = format!(
                    "cargo xtask compat failed:\n{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                // A library from before (e.g. while someone's edit does not
                // build yet) still tests the C API; none at all cannot.
                assert!(lib.is_file(), "{why}");
                eprintln!("\n*** WARNING: testing an older {}: {why}\n", lib.display());
            }
        }
        assert!(lib.is_file(), "{} was not built", lib.display());
        target.join("compat")
    })
    .clone()
}

/// Compiles a C program (once per test binary) against `rdmalib.h` and
/// `librdmalib.so`.
fn compile(src: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let compat = compat_dir();
    let mut built = BUILT.get_or_init(Default::default).lock().unwrap();
    if let Some(p) = built.get(src) {
        return p.clone();
    }
    let src_path = root().join(src);
    let stem = src_path.file_stem().unwrap().to_str().unwrap();
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("c_{stem}"));
    let r = Command::new("cc")
        .args(["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-I"])
        .arg(root().join("include"))
        .arg("-o")
        .arg(&out)
        .arg(&src_path)
        .arg("-L")
        .arg(&compat)
        .arg("-lrdmalib")
        .output()
        .expect("run cc");
    assert!(
        r.status.success(),
        "compiling {src} failed:\n{}",
        String::from_utf8_lossy(&r.stderr)
    );
    built.insert(src.into(), out.clone());
    out
}

const ECHO: &str = "crates/rdmalib-capi/examples/echo.c";
const FILE: &str = "crates/rdmalib-capi/examples/file_transfer.c";
const MISUSE: &str = "crates/rdmalib-capi/tests/c/misuse.c";

/// A C program of `src` on a device at `addr`.
fn c_cmd(src: &str, addr: Ipv4Addr, args: &[&str]) -> Command {
    let mut c = device_cmd(compile(src), addr, args);
    c.env("LD_LIBRARY_PATH", compat_dir());
    c
}

fn data(n: usize) -> Vec<u8> {
    (0..n as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect()
}

/// Runs a server, then the client `client` makes for the server's port;
/// both must succeed. Returns both outputs.
fn run_pair(mut server: Proc, client: impl FnOnce(&str) -> Proc) -> (String, String) {
    let port = server.listening_port().to_string();
    let mut c = client(&port);
    assert!(c.wait(T).success(), "{}\n{}", c.report(), server.report());
    assert!(
        server.wait(T).success(),
        "{}\n{}",
        server.report(),
        c.report()
    );
    (server.stdout(), c.stdout())
}

#[test]
fn c_echo_in_both_modes() {
    require_cc!();
    for mode in [&[][..], &["-e"][..]] {
        let (a, b) = (unique_addr(NET), unique_addr(NET));
        let server = Proc::spawn(
            "C echo server",
            c_cmd(ECHO, a, &[&["-p", "0"], mode].concat()),
        );
        let (s, c) = run_pair(server, |port| {
            let a = a.to_string();
            let args = [
                &["-p", port, "-n", "300", "-s", "10000"],
                mode,
                &[a.as_str()],
            ]
            .concat();
            Proc::spawn("C echo client", c_cmd(ECHO, b, &args))
        });
        assert!(c.contains("300 round trips of 10000 bytes"), "{c}");
        assert!(
            s.contains("echoed 300 messages; client disconnected"),
            "{s}"
        );
    }
}

#[test]
fn c_file_transfer_in_both_modes() {
    require_cc!();
    let input = tmp("c-in");
    let bytes = data(2_000_003);
    std::fs::write(&input, &bytes).unwrap();
    for mode in [&[][..], &["-e"][..]] {
        let output = tmp("c-out");
        let _ = std::fs::remove_file(&output);
        let (a, b) = (unique_addr(NET), unique_addr(NET));
        let out = output.to_str().unwrap();
        let server = Proc::spawn(
            "C file server",
            c_cmd(
                FILE,
                a,
                &[&["-p", "0", "-c", "200000", "-o", out], mode].concat(),
            ),
        );
        let (s, c) = run_pair(server, |port| {
            let (a, inp) = (a.to_string(), input.to_str().unwrap().to_string());
            let args = [
                &["-p", port, "-c", "200000", "-f", &inp],
                mode,
                &[a.as_str()],
            ]
            .concat();
            Proc::spawn("C file client", c_cmd(FILE, b, &args))
        });
        assert!(
            s.contains("received 2000003 bytes in 11 chunks") && s.contains(": OK"),
            "{s}"
        );
        assert!(c.contains("server says OK"), "{c}");
        assert_eq!(std::fs::read(&output).unwrap(), bytes, "the copy differs");
    }
}

#[test]
fn c_and_rust_examples_interoperate() {
    require_cc!();
    // C echo server, Rust echo client (event mode).
    let (a, b) = (unique_addr(NET), unique_addr(NET));
    let server = Proc::spawn("C echo server", c_cmd(ECHO, a, &["-p", "0", "-e"]));
    let (s, c) = run_pair(server, |port| {
        let a = a.to_string();
        let args = ["-p", port, "-n", "100", "-s", "5000", "-e", &a];
        Proc::spawn("Rust echo client", example_cmd("rdmalib_echo", b, &args))
    });
    assert!(c.contains("100 round trips of 5000 bytes"), "{c}");
    assert!(s.contains("echoed 100 messages"), "{s}");

    // Rust file server, C file client (polling).
    let input = tmp("x-in");
    let bytes = data(777_777);
    std::fs::write(&input, &bytes).unwrap();
    let output = tmp("x-out");
    let _ = std::fs::remove_file(&output);
    let (a, b) = (unique_addr(NET), unique_addr(NET));
    let server = Proc::spawn(
        "Rust file server",
        example_cmd(
            "rdmalib_file_transfer",
            a,
            &["-p", "0", "-c", "65536", "-o", output.to_str().unwrap()],
        ),
    );
    let (s, c) = run_pair(server, |port| {
        let (a, inp) = (a.to_string(), input.to_str().unwrap().to_string());
        let args = ["-p", port, "-c", "65536", "-f", &inp, &a];
        Proc::spawn("C file client", c_cmd(FILE, b, &args))
    });
    assert!(
        s.contains("received 777777 bytes in 12 chunks") && s.contains(": OK"),
        "{s}"
    );
    assert!(c.contains("server says OK"), "{c}");
    assert_eq!(std::fs::read(&output).unwrap(), bytes);
}

#[test]
fn c_misuse_gets_clear_errors() {
    require_cc!();
    let (a, b) = (unique_addr(NET), unique_addr(NET));
    let server = Proc::spawn("misuse server", c_cmd(MISUSE, a, &["server"]));
    let (s, c) = run_pair(server, |port| {
        let a = a.to_string();
        Proc::spawn("misuse client", c_cmd(MISUSE, b, &["client", &a, port]))
    });
    assert!(c.contains("client ok"), "{c}");
    assert!(s.contains("server ok"), "{s}");
    // The messages are readable, not just numbers.
    assert!(
        c.contains(
            "rdma_write beyond the peer: range 4086+20 is outside the peer's 4096-byte buffer"
        ),
        "{c}"
    );
    assert!(
        c.contains("rdma_close twice: the context is closed already, or was never set up"),
        "{c}"
    );
    assert!(
        c.contains("rdma_write before connect: not connected"),
        "{c}"
    );
    assert!(
        s.contains("rdma_recv after the client left: the peer disconnected"),
        "{s}"
    );
}

/// Waits until `path` holds at least `n` bytes.
fn wait_size(path: &Path, n: u64, who: &Proc) {
    let t0 = Instant::now();
    while std::fs::metadata(path).map(|m| m.len()).unwrap_or(0) < n {
        assert!(
            t0.elapsed() < T,
            "{} never reached {n} bytes\n{}",
            path.display(),
            who.report()
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn c_peers_killed_mid_transfer_fail_fast() {
    require_cc!();
    let input = tmp("kill-in");
    std::fs::write(&input, data(64 << 20)).unwrap();
    for kill_client in [true, false] {
        let output = tmp(&format!("kill-out-{kill_client}"));
        let _ = std::fs::remove_file(&output);
        let (a, b) = (unique_addr(NET), unique_addr(NET));
        let out = output.to_str().unwrap();
        let mut server = Proc::spawn(
            "C file server",
            c_cmd(FILE, a, &["-p", "0", "-c", "4096", "-e", "-o", out]),
        );
        let port = server.listening_port().to_string();
        let (a_s, inp) = (a.to_string(), input.to_str().unwrap());
        let client = Proc::spawn(
            "C file client",
            c_cmd(FILE, b, &["-p", &port, "-c", "4096", "-f", inp, &a_s]),
        );
        wait_size(&output, 256 << 10, &server);
        let (mut killed, mut survivor) = if kill_client {
            (client, server)
        } else {
            (server, client)
        };
        killed.kill();
        let t0 = Instant::now();
        let st = survivor.wait(T);
        let took = t0.elapsed();
        assert!(
            !st.success(),
            "the survivor claims success\n{}",
            survivor.report()
        );
        assert!(
            took < Duration::from_secs(5),
            "noticed after {took:?}\n{}",
            survivor.report()
        );
        let report = survivor.report();
        assert!(
            report.contains("disconnected") || report.contains("failed: completion status"),
            "{report}"
        );
    }
}

#[test]
fn the_library_exports_the_seed_names_and_nothing_of_rdma_cores() {
    require_cc!();
    let lib = compat_dir().join("librdmalib.so");
    let Ok(out) = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(&lib)
        .output()
    else {
        eprintln!("SKIPPED: no `nm` (binutils)");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let mut names: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .collect();
    names.sort_unstable();
    let mut want = vec![
        "rdma_close",
        "rdma_connect_server",
        "rdma_notify_read",
        "rdma_notify_write",
        "rdma_read",
        "rdma_recv",
        "rdma_send",
        "rdma_setup_client",
        "rdma_setup_server",
        "rdma_wait_for_client",
        "rdma_write",
        "rdmalib_last_error",
        "rdmalib_wait_notify",
    ];
    want.sort_unstable();
    assert_eq!(names, want);
    // None is a symbol of libibverbs or librdmacm (rdma-core 44's version scripts).
    for map in [
        "crates/capi/maps/libibverbs.map",
        "crates/capi-rdmacm/maps/librdmacm.map",
    ] {
        let text = std::fs::read_to_string(root().join(map)).unwrap();
        let theirs: Vec<&str> = text
            .lines()
            .map(|l| l.trim().trim_end_matches(';'))
            .collect();
        assert!(theirs.contains(&"rdma_connect") || theirs.contains(&"ibv_open_device"));
        for n in &names {
            assert!(!theirs.contains(n), "{n} collides with {map}");
        }
    }
    // And it needs neither of them.
    let Ok(out) = Command::new("readelf").args(["-d"]).arg(&lib).output() else {
        return;
    };
    let dynamic = String::from_utf8_lossy(&out.stdout);
    assert!(
        dynamic.contains("Library soname: [librdmalib.so]"),
        "{dynamic}"
    );
    assert!(
        !dynamic.contains("libibverbs") && !dynamic.contains("librdmacm"),
        "{dynamic}"
    );
}
