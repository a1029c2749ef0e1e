//! Runs the built `softrdma` binary: every subcommand's help, devices and
//! devinfo, perf (JSON validated against its documented shape, the SVG
//! parsed, the table read, client and server as two processes), capture +
//! decode, stats, ping through the CM, and usage errors.
//!
//! Each test uses its own UDP port (and device addresses), so tests run in
//! parallel without meeting each other's devices. Runs are short; nothing
//! here asserts timings.

use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_softrdma");

/// A UDP port nobody uses now.
fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `softrdma ARGS` with these environment variables (and no inherited
/// SOFTRDMA_* configuration).
fn softrdma(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args);
    for v in [
        "SOFTRDMA_ADDR",
        "SOFTRDMA_PORT",
        "SOFTRDMA_PCAP",
        "SOFTRDMA_STATS",
    ] {
        c.env_remove(v);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    softrdma(args, env).output().expect("run softrdma")
}

fn text(b: &[u8]) -> String {
    String::from_utf8(b.to_vec()).expect("utf-8 output")
}

/// Runs and insists on success; returns stdout.
fn ok(args: &[&str], env: &[(&str, &str)]) -> String {
    let out = run(args, env);
    assert!(
        out.status.success(),
        "softrdma {args:?} failed ({:?}):\n{}{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

/// The environment of a device at `addr` on UDP `port`.
fn device_env<'a>(addr: &'a str, port: &'a str) -> [(&'static str, &'a str); 2] {
    [("SOFTRDMA_ADDR", addr), ("SOFTRDMA_PORT", port)]
}

/// Runs `softrdma TOOL_ARGS -- softrdma perf PERF_ARGS` (a subcommand that
/// runs a command, around a perf run) and insists on success; returns stdout.
fn ok_around_perf(tool_args: &[&str], perf_args: &[&str], env: &[(&str, &str)]) -> String {
    let mut args = tool_args.to_vec();
    args.extend(["--", BIN, "perf"]);
    args.extend(perf_args);
    ok(&args, env)
}

/// Starts a server (`softrdma ARGS`) with its output piped; returns it, its
/// stdout and the first line it printed there.
fn spawn_server(args: &[&str], env: &[(&str, &str)]) -> (Child, BufReader<ChildStdout>, String) {
    let mut child = softrdma(args, env)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut r = BufReader::new(child.stdout.take().unwrap());
    let mut banner = String::new();
    r.read_line(&mut banner).unwrap();
    (child, r, banner)
}

fn tmp(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Asserts a usage or runtime error: status 2, nothing on stdout, exactly
/// one line on stderr starting with `softrdma: error: ` and containing `what`.
fn assert_one_line_error(out: &Output, what: &str) {
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "not one line: {err:?}");
    assert!(err.starts_with("softrdma: error: "), "{err}");
    assert!(err.contains(what), "{err:?} does not mention {what:?}");
}

#[test]
fn help_for_every_subcommand() {
    let top = ok(&["--help"], &[]);
    for sub in [
        "perf", "devices", "devinfo", "ping", "capture", "stats", "decode",
    ] {
        assert!(top.contains(sub), "{sub} missing from:\n{top}");
        let h = ok(&[sub, "--help"], &[]);
        assert!(h.contains("Usage: softrdma"), "{sub}: {h}");
        assert!(h.contains("--help"), "{sub}: {h}");
    }
    let perf = ok(&["perf", "--help"], &[]);
    for opt in [
        "--op",
        "--size",
        "--sweep",
        "--iters",
        "--duration",
        "--lat",
        "--bw",
        "--events",
        "--server",
        "--connect",
        "--port",
        "--json",
        "--plot",
        "--stats",
    ] {
        assert!(perf.contains(opt), "perf --help lacks {opt}");
    }
    // The JSON schema is documented in the long help.
    for field in [
        "\"results\"",
        "bw_mbps",
        "msg_rate",
        "lat_us",
        "p999",
        "\"schema\": 1",
    ] {
        assert!(perf.contains(field), "perf --help lacks {field}");
    }
    assert!(ok(&["--version"], &[]).starts_with("softrdma "));
}

#[test]
fn devices_and_devinfo_show_the_configured_address() {
    let port = free_port().to_string();
    let env = device_env("127.0.0.61", &port);

    let out = ok(&["devices"], &env);
    let row = out
        .lines()
        .find(|l| l.trim_start().starts_with("softrdma0"))
        .unwrap_or_else(|| panic!("no device row in:\n{out}"));
    let guid = row.split_whitespace().nth(1).unwrap();
    // EUI-64 of the locally administered MAC 02:00:7f:00:00:3d.
    assert_eq!(guid, "02007ffffe00003d", "{out}");
    assert!(out.contains(&format!("UDP 127.0.0.61:{port}")), "{out}");

    let out = ok(&["devinfo", "-v"], &env);
    let field = |name: &str| -> String {
        let l = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{name}:")))
            .unwrap_or_else(|| panic!("no {name} in:\n{out}"));
        l.split_once(':').unwrap().1.trim().to_string()
    };
    assert_eq!(field("hca_id"), "softrdma0");
    assert_eq!(field("node_guid"), "0200:7fff:fe00:003d");
    assert_eq!(field("state"), "PORT_ACTIVE (4)");
    assert_eq!(field("active_mtu"), "4096 (5)");
    assert_eq!(field("link_layer"), "Ethernet");
    // GID 0 is the configured address; the host's other addresses follow.
    let gids = out
        .lines()
        .filter(|l| l.trim_start().starts_with("GID["))
        .count();
    // rxe's fixed table (engine::device::GID_TBL_LEN); empty entries are not printed.
    assert_eq!(field("gid_tbl_len"), "1024");
    assert!((1..1024).contains(&gids), "{out}");
    assert_eq!(field("max_qp_rd_atom"), "128"); // a -v field (rxe's value)
    let gid = field("GID[  0]");
    assert_eq!(gid, "::ffff:127.0.0.61, RoCE v2");
    let udp = field("softrdma");
    assert!(
        udp.starts_with(&format!("UDP 127.0.0.61:{port} ")) && udp.contains("SOFTRDMA_ADDR"),
        "{udp}"
    );
    // Without -v the limits are left out, the GID table is not.
    let short = ok(&["devinfo"], &env);
    assert!(!short.contains("max_qp_rd_atom"));
    assert!(short.contains("::ffff:127.0.0.61, RoCE v2"));
}

/// Checks a perf JSON document against the schema of `perf --help`.
fn check_perf_json(doc: &Value, ops: &[&str], sizes: &[u64], iters: u64, tests: &[&str]) {
    assert_eq!(doc["tool"], "softrdma perf");
    assert!(doc["version"].is_string());
    assert_eq!(doc["schema"], 1);
    let c = &doc["config"];
    for k in ["mode", "client", "server", "polling"] {
        assert!(c[k].is_string(), "config.{k}: {c}");
    }
    assert!(["busy", "events"].contains(&c["polling"].as_str().unwrap()));
    assert!(c["mtu"].is_u64() && c["depth"].is_u64());
    assert_eq!(c["iters"], iters);
    assert!(c["duration_s"].is_null());
    let want_ops: Vec<Value> = ops.iter().map(|o| Value::from(*o)).collect();
    assert_eq!(c["ops"], Value::from(want_ops));
    assert_eq!(c["sizes"], Value::from(sizes.to_vec()));
    let want_tests: Vec<Value> = tests.iter().map(|t| Value::from(*t)).collect();
    assert_eq!(c["tests"], Value::from(want_tests));

    let rows = doc["results"].as_array().expect("results array");
    let mut expected = Vec::new();
    for op in ops {
        let op_sizes: &[u64] = if *op == "atomic" { &[8] } else { sizes };
        for s in op_sizes {
            expected.push((op.to_string(), *s));
        }
    }
    let got: Vec<(String, u64)> = rows
        .iter()
        .map(|r| {
            (
                r["op"].as_str().unwrap().to_string(),
                r["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, expected);
    let bw = tests.contains(&"bw");
    let lat = tests.contains(&"lat");
    for r in rows {
        let keys: Vec<&String> = r.as_object().unwrap().keys().collect();
        for k in [
            "op",
            "size",
            "iters",
            "seconds",
            "bw_mbps",
            "msg_rate",
            "lat_iters",
            "lat_kind",
            "lat_us",
        ] {
            assert!(keys.iter().any(|x| *x == k), "row lacks {k}: {r}");
        }
        let op = r["op"].as_str().unwrap();
        let kind = if op == "write" || op == "send" {
            "one-way"
        } else {
            "round-trip"
        };
        assert_eq!(r["lat_kind"], kind);
        if bw {
            let n = r["iters"].as_u64().unwrap();
            assert!(n > 0 && n <= iters, "{r}");
            let secs = r["seconds"].as_f64().unwrap();
            let mbps = r["bw_mbps"].as_f64().unwrap();
            let rate = r["msg_rate"].as_f64().unwrap();
            assert!(secs > 0.0 && mbps > 0.0 && rate > 0.0, "{r}");
            // bw = rate * size, in 10^6 bytes per second.
            let size = r["size"].as_f64().unwrap();
            assert!(
                (mbps - rate * size / 1e6).abs() <= 1e-6 * mbps.max(1.0),
                "{r}"
            );
        } else {
            assert_eq!(r["iters"], 0);
            assert!(r["bw_mbps"].is_null() && r["msg_rate"].is_null());
        }
        if lat {
            assert_eq!(r["lat_iters"], iters, "{r}");
            let l = &r["lat_us"];
            let f = |k: &str| l[k].as_f64().unwrap_or_else(|| panic!("lat_us.{k}: {r}"));
            assert!(f("min") > 0.0, "{r}");
            assert!(f("min") <= f("p50") && f("p50") <= f("p99"), "{r}");
            assert!(f("p99") <= f("p999") && f("p999") <= f("max"), "{r}");
            assert!(f("min") <= f("mean") && f("mean") <= f("max"), "{r}");
        } else {
            assert_eq!(r["lat_iters"], 0);
            assert!(r["lat_us"].is_null());
        }
    }
}

#[test]
fn perf_json_validates_and_plot_is_well_formed_svg() {
    let port = free_port().to_string();
    let svg = tmp("perf.svg");
    let out = ok(
        &[
            "perf",
            "--sweep",
            "8..4Kx8",
            "-n",
            "100",
            "--json",
            "--stats",
            "--plot",
            svg.to_str().unwrap(),
        ],
        &[("SOFTRDMA_PORT", port.as_str())],
    );
    let doc: Value = serde_json::from_str(&out).expect("stdout is one JSON document");
    check_perf_json(
        &doc,
        &["write", "read", "send", "atomic"],
        &[8, 64, 512, 4096],
        100,
        &["bw", "lat"],
    );
    assert_eq!(doc["config"]["mode"], "loopback");
    // Two processes, members of one host device: the same address and port.
    let (client, server) = (
        doc["config"]["client"].as_str().unwrap(),
        doc["config"]["server"].as_str().unwrap(),
    );
    assert_eq!(client, server);
    assert!(client.ends_with(&format!(":{port}")) && server.ends_with(&format!(":{port}")));
    for side in ["client", "server"] {
        let s = &doc["stats"][side];
        assert!(s["counters"]["tx_packets"].as_u64().unwrap() > 0, "{s}");
        assert!(s["counters"]["rx_packets"].as_u64().unwrap() > 0, "{s}");
        assert!(s["pid"].as_u64().unwrap() > 0);
    }
    assert_ne!(doc["stats"]["client"]["pid"], doc["stats"]["server"]["pid"]);

    let xml = std::fs::read_to_string(&svg).expect("the SVG was written");
    let tree = roxmltree::Document::parse(&xml).expect("well-formed XML");
    let root = tree.root_element();
    assert_eq!(root.tag_name().name(), "svg");
    let texts: Vec<String> = tree
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or("").trim().to_string())
        .collect();
    for want in ["WRITE", "READ", "SEND", "ATOMIC"] {
        // A legend entry in each panel (ATOMIC: one size, still a series).
        assert_eq!(
            texts.iter().filter(|t| *t == want).count(),
            2,
            "{want}: {texts:?}"
        );
    }
    for want in [
        "message size",
        "bandwidth (MB/s",
        "latency p50 (microseconds)",
        "4 KiB",
    ] {
        assert!(texts.iter().any(|t| t.contains(want)), "{want}: {texts:?}");
    }
    // One line per series: 4 bandwidth + 4 latency.
    let lines = tree
        .descendants()
        .filter(|n| n.has_tag_name("polyline"))
        .count();
    assert!(lines >= 8, "{lines} polylines");
}

#[test]
fn perf_table_lists_rows_with_units() {
    let port = free_port().to_string();
    let out = ok(
        &["perf", "--op", "write,atomic", "--size", "1K", "-n", "50"],
        &[("SOFTRDMA_PORT", port.as_str())],
    );
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("softrdma perf: "), "{out}");
    assert!(lines[0].contains("two processes") && lines[0].contains("busy polling"));
    let head = lines
        .iter()
        .position(|l| l.trim_start().starts_with("op "))
        .unwrap();
    for col in ["size", "bandwidth", "msg rate", "lat p50", "p99", "p99.9"] {
        assert!(lines[head].contains(col), "{}", lines[head]);
    }
    let row = |op: &str| -> Vec<String> {
        let l = lines
            .iter()
            .find(|l| l.trim_start().starts_with(op))
            .unwrap_or_else(|| panic!("no {op} row:\n{out}"));
        // Cells are separated by two or more spaces.
        l.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_string)
            .collect()
    };
    let w = row("WRITE");
    assert_eq!(w.len(), 7, "{w:?}");
    assert_eq!(w[1], "1 KiB");
    assert!(w[2].ends_with("MB/s") || w[2].ends_with("GB/s"), "{w:?}");
    assert!(w[3].ends_with(" Mmsg/s"), "{w:?}");
    for c in &w[4..] {
        let v: f64 = c.strip_suffix(" µs").expect("µs").parse().unwrap();
        assert!(v > 0.0);
    }
    let a = row("ATOMIC");
    assert_eq!(a[1], "8 B", "atomics are 8 bytes: {a:?}");
    assert!(out.contains("one-way"), "the latency footnote: {out}");
}

/// Starts `softrdma perf --server` and returns it with its control port.
fn perf_server(env: &[(&str, &str)]) -> (Child, u16) {
    let (child, mut r, line) = spawn_server(
        &["perf", "--server", "--port", "0", "--listen", "127.0.0.1"],
        env,
    );
    let port = line
        .trim()
        .rsplit_once("control channel on 127.0.0.1:")
        .and_then(|(_, p)| p.split(';').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("server banner: {line:?}"));
    assert!(line.contains("device softrdma0 at 127.0.0."), "{line}");
    // Keep reading its output so it never blocks on a full pipe.
    std::thread::spawn(move || {
        let mut rest = String::new();
        let _ = std::io::Read::read_to_string(&mut r, &mut rest);
        rest
    });
    (child, port)
}

#[test]
fn perf_server_and_client_in_two_processes() {
    let port = free_port().to_string();
    for (n, events) in [(62u8, false), (64, true)] {
        let server_addr = format!("127.0.0.{n}");
        let client_addr = format!("127.0.0.{}", n + 1);
        let (mut server, ctl) = perf_server(&device_env(&server_addr, &port));
        let ctl = ctl.to_string();
        let mut args = vec![
            "perf",
            "--connect",
            "127.0.0.1",
            "--port",
            &ctl,
            "--op",
            "write,read,send,atomic",
            "--sweep",
            "64..4Kx64",
            "-n",
            "60",
            "--json",
        ];
        if events {
            args.push("--events");
        }
        let out = run(&args, &device_env(&client_addr, &port));
        let status = server.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(server.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(
            out.status.success(),
            "client: {}{}\nserver: {err}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(status.success(), "server: {err}");
        let doc: Value = serde_json::from_str(&text(&out.stdout)).unwrap();
        check_perf_json(
            &doc,
            &["write", "read", "send", "atomic"],
            &[64, 4096],
            60,
            &["bw", "lat"],
        );
        let c = &doc["config"];
        assert_eq!(c["mode"], "client");
        assert_eq!(c["polling"], if events { "events" } else { "busy" });
        assert_eq!(c["client"], format!("{client_addr}:{port}"));
        assert_eq!(c["server"], format!("{server_addr}:{port}"));
    }
}

#[test]
fn capture_of_a_perf_run_decodes_clean() {
    let port = free_port().to_string();
    let pcap = tmp("perf.pcap");
    let env = [("SOFTRDMA_PORT", port.as_str())];
    let out = ok_around_perf(
        &["capture", "--out", pcap.to_str().unwrap()],
        &["--op", "write,send", "--size", "64", "-n", "30", "--json"],
        &env,
    );
    // CMD's output first (the JSON), then the capture summary.
    let last = out.lines().last().unwrap();
    let summary = last
        .strip_prefix(&format!("captured {}: ", pcap.display()))
        .unwrap_or_else(|| panic!("summary line: {last:?}"));
    let nums: Vec<u64> = summary
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    assert!(nums[0] > 100, "{summary}");
    assert_eq!((nums[1], nums[2]), (nums[0], 0), "{summary}");
    let json_part = &out[..out.len() - last.len() - 1];
    let doc: Value = serde_json::from_str(json_part).unwrap();
    assert_eq!(doc["results"].as_array().unwrap().len(), 2);

    // `softrdma decode` agrees, and sees both directions.
    let dec = ok(&["decode", "--port", &port, pcap.to_str().unwrap()], &[]);
    assert!(
        dec.ends_with(&format!("{0} packets, {0} ok, 0 bad\n", nums[0])),
        "{dec}"
    );
    assert!(dec.contains("RC_RDMA_WRITE_ONLY") && dec.contains("RC_SEND_ONLY"));
    assert!(dec.contains("RC_ACKNOWLEDGE"));

    // --decode prints every packet too.
    let full = ok_around_perf(
        &["capture", "--decode", "--out", pcap.to_str().unwrap()],
        &["--op", "atomic", "-n", "10", "--lat"],
        &env,
    );
    assert!(
        full.contains("RC_FETCH_ADD") || full.contains("FETCH_ADD"),
        "{full}"
    );
    assert!(full.lines().filter(|l| l.ends_with(" icrc ok")).count() >= 20);

    // A command that opens no device captures nothing: one-line error.
    let none = run(
        &["capture", "--out", pcap.to_str().unwrap(), "--", "true"],
        &env,
    );
    assert_one_line_error(&none, "nothing captured");
}

#[test]
fn stats_self_test_shows_every_kind_of_event() {
    let out = ok(&["stats", "--self-test"], &[]);
    let block = |title: &str| -> String {
        let start = out
            .find(title)
            .unwrap_or_else(|| panic!("{title} in\n{out}"));
        out[start..].split("\n\n").next().unwrap().to_string()
    };
    let line = |b: &str, label: &str| -> String {
        b.lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("{label} in\n{b}"))
            .to_string()
    };
    let a = block("device A (requester)");
    let b = block("device B (responder)");
    let num_before = |l: &str, what: &str| -> u64 {
        let i = l.find(what).unwrap_or_else(|| panic!("{what} in {l}"));
        l[..i].split_whitespace().last().unwrap().parse().unwrap()
    };
    assert!(num_before(&line(&b, "NAKs sent"), " RNR") >= 1, "{b}");
    assert!(
        num_before(&line(&a, "NAKs received"), " RNR NAK") >= 1,
        "{a}"
    );
    let drops = line(&b, "drops");
    assert_eq!(num_before(&drops, " access violation"), 1, "{drops}");
    let stray = num_before(&drops, " bad ICRC") + num_before(&drops, " bad length/header");
    assert_eq!(stray, 1, "{drops}");
    assert!(num_before(&line(&a, "packets"), " sent") > 80, "{a}");

    let js: Value = serde_json::from_str(&ok(&["stats", "--self-test", "--json"], &[])).unwrap();
    let arr = js.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_eq!(arr[1]["counters"]["access_violations"], 1);
    assert!(arr[0]["counters"]["rx_rnr_nak"].as_u64().unwrap() >= 1);
}

#[test]
fn stats_of_a_command_and_of_a_file() {
    let port = free_port().to_string();
    let keep = tmp("stats.txt");
    let out = ok_around_perf(
        &["stats", "--keep", keep.to_str().unwrap()],
        &["--op", "atomic", "-n", "20", "--json"],
        &[("SOFTRDMA_PORT", port.as_str())],
    );
    // The perf JSON, then one block per process: client and server.
    let titles: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("softrdma0 127.0.0."))
        .collect();
    assert_eq!(titles.len(), 2, "{out}");
    assert!(
        titles.iter().all(|t| t.ends_with(", at exit)")),
        "{titles:?}"
    );
    assert!(out.contains("  drops"), "{out}");
    // The kept file has the same blocks; --file prints them again, --json too.
    let again = ok(&["stats", "--file", keep.to_str().unwrap()], &[]);
    assert_eq!(
        again
            .lines()
            .filter(|l| l.starts_with("softrdma0 "))
            .count(),
        2
    );
    let js: Value = serde_json::from_str(&ok(
        &["stats", "--json", "--file", keep.to_str().unwrap()],
        &[],
    ))
    .unwrap();
    let arr = js.as_array().unwrap();
    assert_eq!(arr.len(), 2);
    assert_ne!(arr[0]["pid"], arr[1]["pid"]);
    for s in arr {
        assert_eq!(s["when"], "exit");
        assert!(s["counters"]["tx_packets"].as_u64().unwrap() > 20);
    }
    // A command without a softrdma device writes no counters.
    let none = run(&["stats", "--", "true"], &[]);
    assert_one_line_error(&none, "wrote no counters");
}

#[test]
fn ping_through_the_connection_manager() {
    let port = free_port().to_string();
    let (mut server, mut r, banner) = spawn_server(
        &["ping", "--server", "--once", "--port", "0"],
        &device_env("127.0.0.66", &port),
    );
    let cm_port = banner
        .split("listening on 127.0.0.66:")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .unwrap_or_else(|| panic!("banner {banner:?}"))
        .to_string();
    let out = run(
        &[
            "ping",
            "127.0.0.66",
            "--port",
            &cm_port,
            "-c",
            "5",
            "-i",
            "0",
            "-s",
            "100",
        ],
        &device_env("127.0.0.67", &port),
    );
    let status = server.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut r, &mut rest).unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    assert!(status.success(), "server: {rest}");
    let seqs: Vec<u64> = stdout
        .lines()
        .filter(|l| l.starts_with("100 bytes from 127.0.0.66: seq="))
        .map(|l| {
            let rtt: f64 = l
                .split("rtt=")
                .nth(1)
                .unwrap()
                .strip_suffix(" µs")
                .unwrap()
                .parse()
                .unwrap();
            assert!(rtt > 0.0);
            l.split("seq=")
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4, 5], "{stdout}");
    assert!(stdout.contains("5 sent, 5 received, 0% loss"), "{stdout}");
    assert!(rest.contains("127.0.0.67:"), "{rest}");
    assert!(rest.contains("disconnected after 5 messages"), "{rest}");

    // Nobody listens on that port any more: a one-line error at once.
    let out = run(
        &["ping", "127.0.0.67", "--port", &cm_port, "-c", "1"],
        &device_env("127.0.0.68", &port),
    );
    assert_one_line_error(&out, "no softrdma device answers at 127.0.0.67");
}

#[test]
fn bad_arguments_and_failures_are_one_line_errors() {
    // Usage errors (clap's, folded into one line).
    for (args, what) in [
        (&["perf", "--op", "bogus"][..], "invalid value 'bogus'"),
        (&["perf", "--size", "0"][..], "sizes are 1 B"),
        (&["perf", "--sweep", "64..8"][..], "MIN <= MAX"),
        (
            &["perf", "--iters", "10", "--duration", "1"][..],
            "cannot be used with",
        ),
        (&["perf", "--server", "--json"][..], "cannot be used with"),
        (&["perf", "--mtu", "1500"][..], "--mtu 1500"),
        (&["stats"][..], "required"),
        (&["capture", "--out", "x.pcap"][..], "required"),
        (&["devinfo", "--bogus"][..], "--bogus"),
        (&["ping"][..], "required"),
        (&["nonsense"][..], "nonsense"),
    ] {
        let out = run(args, &[]);
        assert_one_line_error(&out, what);
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    // Runtime errors.
    let port = free_port().to_string();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port().to_string();
    drop(closed);
    let out = run(
        &["perf", "--connect", "127.0.0.1", "--port", &closed_port],
        &[("SOFTRDMA_PORT", port.as_str())],
    );
    assert_one_line_error(&out, "cannot reach a perf server at 127.0.0.1:");
    let out = run(&["devinfo"], &[("SOFTRDMA_ADDR", "not-an-address")]);
    assert_one_line_error(&out, "SOFTRDMA_ADDR");
    let out = run(&["devices"], &device_env("10.255.255.254", &port));
    assert_one_line_error(&out, "not available");
    let out = run(
        &[
            "capture",
            "--out",
            tmp("x.pcap").to_str().unwrap(),
            "--",
            "/nonexistent/cmd",
        ],
        &[],
    );
    assert_one_line_error(&out, "cannot run /nonexistent/cmd");
    let out = run(&["stats", "--file", "/nonexistent/stats.txt"], &[]);
    assert_one_line_error(&out, "/nonexistent/stats.txt");
    let out = run(
        &[
            "perf",
            "--size",
            "64",
            "-n",
            "5",
            "--plot",
            "/nonexistent/dir/p.svg",
        ],
        &[("SOFTRDMA_PORT", port.as_str())],
    );
    assert_one_line_error(&out, "--plot /nonexistent/dir/p.svg");
}

#[test]
fn capture_compat_runs_a_c_program_on_softrdma() {
    // Needs `cargo xtask compat` (CI builds it before the tests) and
    // rdma-core's ibv_devinfo (scripts/install-deps.sh).
    let compat = Path::new(BIN)
        .parent()
        .and_then(Path::parent)
        .map(|t| t.join("compat/libibverbs.so.1"));
    let devinfo = Path::new("/usr/bin/ibv_devinfo");
    if !compat.as_ref().is_some_and(|c| c.is_file()) || !devinfo.is_file() {
        eprintln!("skipped: no target/compat (cargo xtask compat) or no ibv_devinfo");
        return;
    }
    let port = free_port().to_string();
    let pcap = tmp("devinfo.pcap");
    let out = ok(
        &[
            "capture",
            "--compat",
            "--out",
            pcap.to_str().unwrap(),
            "--",
            "ibv_devinfo",
        ],
        &device_env("127.0.0.69", &port),
    );
    // rdma-core's own program lists softrdma's device; it sends nothing.
    assert!(out.starts_with("hca_id:\tsoftrdma0\n"), "{out}");
    assert!(
        out.ends_with(&format!(
            "captured {}: 0 packets, 0 ok, 0 bad\n",
            pcap.display()
        )),
        "{out}"
    );
    let none = run(
        &[
            "capture",
            "--compat",
            "--compat-dir",
            "/nonexistent",
            "--out",
            "x.pcap",
            "--",
            "true",
        ],
        &[],
    );
    assert_one_line_error(&none, "no libibverbs.so.1 in /nonexistent");
}

#[test]
fn devices_counts_the_host_devices_member_processes() {
    let port = free_port().to_string();
    let env = device_env("127.0.0.68", &port);
    let alone = ok(&["devices"], &env);
    assert!(
        alone.contains("the host's device, 1 member process(es) now"),
        "{alone}"
    );
    let (mut server, _r, banner) = spawn_server(&["ping", "--server", "--port", "0"], &env);
    assert!(banner.contains("listening on 127.0.0.68:"), "{banner}");
    let shared = ok(&["devices"], &env);
    let _ = server.kill();
    let _ = server.wait();
    assert!(shared.contains("UDP 127.0.0.68:"), "{shared}");
    assert!(
        shared.contains("the host's device, 2 member process(es) now"),
        "{shared}"
    );
    let own = ok(
        &["devices"],
        &[&env[..], &[("SOFTRDMA_HOST", "0")]].concat(),
    );
    assert!(own.contains("a device of this process's own"), "{own}");
}

#[test]
fn an_unusable_registry_gives_a_device_of_its_own() {
    use std::os::unix::fs::PermissionsExt;
    // A runtime directory whose softrdma registry is open to others (as if
    // someone else had made it): refused, and the process still gets a device.
    let runtime = tmp("runtime-squatted");
    let reg = runtime.join("softrdma");
    std::fs::create_dir_all(&reg).unwrap();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&reg, std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = free_port().to_string();
    let dir = runtime.display().to_string();
    let out = run(
        &["devices"],
        &[
            ("XDG_RUNTIME_DIR", dir.as_str()),
            ("SOFTRDMA_PORT", port.as_str()),
            ("SOFTRDMA_DEBUG", "1"),
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("a device of this process's own"),
        "{stdout}"
    );
    assert!(stderr.contains("no host device"), "{stderr}");
}
