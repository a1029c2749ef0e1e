//! The table of `cargo xtask bench` and its section of BENCHMARKS.md.

use std::fmt::Write as _;
use std::path::Path;

use super::same_host::{self, BW_ROWS, LAT_ROWS, Via};
use super::{Results, SIZES, Sample};
use crate::Result;

pub(crate) const TITLE: &str = "Same-run suite: `cargo xtask bench`";
const BEGIN: &str = "<!-- BEGIN xtask bench (generated; edit xtask/src/bench) -->";
const END: &str = "<!-- END xtask bench -->";

/// How the run went, for the header of the section.
#[derive(Debug)]
pub(crate) struct Meta {
    pub(crate) command: String,
    pub(crate) reps: usize,
    pub(crate) secs: u32,
    pub(crate) iters: u32,
    pub(crate) idle_secs: u64,
    pub(crate) load_before: String,
    pub(crate) load_after: String,
    pub(crate) minutes: f64,
    pub(crate) failures: Vec<String>,
    /// The other build of `--compare`.
    pub(crate) compare: Option<std::path::PathBuf>,
    /// Whether groups of the wire-path table ran (all but same-host).
    pub(crate) wire: bool,
    /// Whether the same-host group ran.
    pub(crate) same_host: bool,
    /// What was skipped and why.
    pub(crate) notes: Vec<String>,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// (median value, median aux, min, max) of a key; NaNs if it was not measured.
fn stat(r: &Results, key: &str) -> (f64, f64, f64, f64) {
    let s: &[Sample] = r.get(key).map_or(&[], Vec::as_slice);
    let mut v: Vec<f64> = s.iter().map(|x| x.v).collect();
    let mut a: Vec<f64> = s.iter().map(|x| x.aux).filter(|x| x.is_finite()).collect();
    let min = v.iter().copied().fold(f64::NAN, f64::min);
    let max = v.iter().copied().fold(f64::NAN, f64::max);
    (median(&mut v), median(&mut a), min, max)
}

fn gbs(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{:.2} GB/s", x / 1e9)
    }
}

fn us(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{x:.1} µs")
    }
}

fn num(x: f64, digits: usize) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{x:.digits$}")
    }
}

fn kib(tag: &str) -> &'static str {
    match tag {
        "4K" => "4 KiB",
        "64K" => "64 KiB",
        _ => "1 MiB",
    }
}

fn spread(min: f64, max: f64, f: fn(f64) -> String) -> String {
    if min.is_nan() || min == max {
        String::new()
    } else {
        format!("{}–{}", f(min), f(max))
    }
}

fn gb_plain(x: f64) -> String {
    format!("{:.2}", x / 1e9)
}

fn us_plain(x: f64) -> String {
    format!("{x:.1}")
}

/// The markdown section (without markers).
pub(crate) fn render(r: &Results, m: &Meta) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "## {TITLE}\n");
    let _ = writeln!(s, "```text\n{}\n```\n", m.command);
    let _ = write!(
        s,
        "{} repetition(s), medians (range over repetitions in the last column); {} s per \
         bandwidth test, {} round trips per latency test; {:.1} min in all. Load average \
         (1/5/15 min) before: {}, after: {}.",
        m.reps, m.secs, m.iters, m.minutes, m.load_before, m.load_after
    );
    if m.wire {
        wire_tables(&mut s, r, m);
    } else {
        let _ = writeln!(s);
    }
    if m.same_host {
        same_host_table(&mut s, r, m);
    }
    if !m.notes.is_empty() {
        let _ = writeln!(s, "\nSkipped:\n");
        for n in &m.notes {
            let _ = writeln!(s, "- {n}");
        }
    }
    if !m.failures.is_empty() {
        let _ = writeln!(s, "\nFailed measurements:\n");
        for f in &m.failures {
            let _ = writeln!(s, "- {f}");
        }
    }
    s
}

/// The wire-path table (every group but same-host), its targets and the
/// before/after table of `--compare`.
fn wire_tables(s: &mut String, r: &Results, m: &Meta) {
    let _ = writeln!(
        s,
        " perftest runs unmodified over \
         `LD_LIBRARY_PATH=target/compat` with `-d softrdma0 -x 0 -F`, server and client on \
         their own `SOFTRDMA_ADDR` (127.86.x.y), client connecting to 127.0.0.1; the wire \
         path: `SOFTRDMA_SHM=0` for perftest and the `bench` example (UDP over loopback); \
         bandwidth tests with `-D {}`, latency tests with `-s 8 -n {}`. TCP is qperf on 127.0.0.1 \
         (`qperf 127.0.0.1 -t {} -m 64K tcp_bw`, `-m 8 tcp_lat`). CPU s/GB is the CPU time \
         of both processes (all threads, from /proc; for perftest their whole life, setup \
         included) per GB moved. perftest MB are 2^20 bytes, GB/s here are 10^9.\n",
        m.secs, m.iters, m.secs
    );
    let _ = writeln!(
        s,
        "| measurement | softrdma | same-run baseline | ratio | CPU s/GB softrdma / TCP | range |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|");
    for (_, tag) in SIZES {
        let (tcp, tcp_cpu, ..) = stat(r, &format!("tcp_bw/{tag}"));
        let (mc, ..) = stat(r, &format!("memcpy/{tag}"));
        let rows = [
            (
                format!("ib_write_bw/{tag}"),
                format!("RDMA WRITE {}, `ib_write_bw`", kib(tag)),
            ),
            (
                format!("rust_write/{tag}"),
                format!("RDMA WRITE {}, Rust API (`bench` example)", kib(tag)),
            ),
        ];
        for (key, label) in rows {
            bw_row(s, r, &key, &label, tag, tcp, tcp_cpu, mc);
        }
    }
    let (tcp64, tcp64_cpu, ..) = stat(r, "tcp_bw/64K");
    let (mc64, ..) = stat(r, "memcpy/64K");
    bw_row(
        s,
        r,
        "ib_read_bw/64K",
        "RDMA READ 64 KiB, `ib_read_bw`",
        "64K",
        tcp64,
        tcp64_cpu,
        mc64,
    );
    bw_row(
        s,
        r,
        "ib_send_bw/64K",
        "SEND 64 KiB, `ib_send_bw`",
        "64K",
        tcp64,
        tcp64_cpu,
        mc64,
    );
    for (_, tag) in SIZES {
        let (v, cpu, lo, hi) = stat(r, &format!("tcp_bw/{tag}"));
        let (mc, _, mlo, mhi) = stat(r, &format!("memcpy/{tag}"));
        let _ = writeln!(
            s,
            "| TCP {k} (qperf `tcp_bw -m {tag}`) / memcpy {k} (one thread) | | {} / {} | | {} (TCP) | {} / {} |",
            gbs(v),
            gbs(mc),
            num(cpu, 2),
            spread(lo, hi, gb_plain),
            spread(mlo, mhi, gb_plain),
            k = kib(tag),
        );
    }
    let (tl, ..) = stat(r, "tcp_lat");
    for (key, label, rtt) in [
        (
            "ib_send_lat",
            "8 B SEND latency, busy-poll, `ib_send_lat` (one-way)",
            false,
        ),
        (
            "ib_write_lat",
            "8 B RDMA WRITE latency, `ib_write_lat` (one-way)",
            false,
        ),
        (
            "ib_read_lat",
            "8 B RDMA READ latency, busy-poll, `ib_read_lat` (round trip)",
            true,
        ),
        (
            "ib_send_lat -e",
            "8 B SEND latency, events, `ib_send_lat -e` (one-way)",
            false,
        ),
        (
            "ib_read_lat -e",
            "8 B RDMA READ latency, events, `ib_read_lat -e` (round trip)",
            true,
        ),
    ] {
        let (v, p99, lo, hi) = stat(r, key);
        let base = if rtt { 2.0 * tl } else { tl };
        let _ = writeln!(
            s,
            "| {label}: median, p99 | {}, p99 {} | TCP {} {} | {}× TCP | | {} |",
            us(v),
            us(p99),
            if rtt { "round trip" } else { "one-way" },
            us(base),
            num(v / base, 2),
            spread(lo, hi, us_plain)
        );
    }
    let (tl, _, lo, hi) = stat(r, "tcp_lat");
    let _ = writeln!(
        s,
        "| TCP 8 B latency, qperf `tcp_lat -m 8` (one-way) | | {} | | | {} |",
        us(tl),
        spread(lo, hi, us_plain)
    );
    let (idle, wakes, ..) = stat(r, "idle");
    let _ = writeln!(
        s,
        "| process blocked on a completion channel ({} s; `bench --idle`) | {} % CPU, {} wake-ups/s | | | | |",
        m.idle_secs,
        num(idle, 2),
        num(wakes, 1)
    );
    targets(s, r);
    if let Some(d) = &m.compare {
        compare_table(s, r, d);
    }
}

/// The perftest measurements against both builds of `--compare`.
fn compare_table(s: &mut String, r: &Results, base: &Path) {
    let _ = writeln!(
        s,
        "\nBefore/after in the same run: every perftest measurement above also ran \
         against the libraries in `{}` (\"before\"), right after the one against \
         `target/compat` (\"after\"); medians.\n",
        base.display()
    );
    let _ = writeln!(s, "| perftest | before | after | after / before |");
    let _ = writeln!(s, "|---|---|---|---|");
    for (key, _) in r.iter().filter(|(k, _)| k.ends_with("@base")) {
        let name = key.trim_end_matches("@base");
        let (b, ..) = stat(r, key);
        let (a, ..) = stat(r, name);
        let (show, ratio) = if name.contains("_bw") {
            (gbs as fn(f64) -> String, a / b)
        } else {
            (us as fn(f64) -> String, a / b)
        };
        let _ = writeln!(
            s,
            "| `{name}` | {} | {} | {} |",
            show(b),
            show(a),
            num(ratio, 2)
        );
    }
}

#[allow(clippy::too_many_arguments)]
fn bw_row(
    s: &mut String,
    r: &Results,
    key: &str,
    label: &str,
    tag: &str,
    tcp: f64,
    tcp_cpu: f64,
    mc: f64,
) {
    let (v, cpu, lo, hi) = stat(r, key);
    let _ = writeln!(
        s,
        "| {label} | {} | TCP {} (qperf `-m {tag}`) | {}× TCP, {}× memcpy | {} / {} | {} |",
        gbs(v),
        gbs(tcp),
        num(v / tcp, 2),
        num(v / mc, 3),
        num(cpu, 2),
        num(tcp_cpu, 2),
        spread(lo, hi, gb_plain)
    );
}

fn targets(s: &mut String, r: &Results) {
    let verdict = |ok: bool| if ok { "met" } else { "not met" };
    let (w, ..) = stat(r, "ib_write_bw/64K");
    let (t, ..) = stat(r, "tcp_bw/64K");
    let (l, ..) = stat(r, "ib_send_lat");
    let (tl, ..) = stat(r, "tcp_lat");
    let (idle, ..) = stat(r, "idle");
    let bw = w / t;
    let lat = l / tl;
    let _ = writeln!(s, "\nTargets (issue 6):\n");
    let _ = writeln!(
        s,
        "- `ib_write_bw` 64 KiB / TCP 64 KiB = **{}** (target ≥ 1.5: {}; stretch ≥ 2.5: {})",
        num(bw, 2),
        verdict(bw >= 1.5),
        verdict(bw >= 2.5)
    );
    let _ = writeln!(
        s,
        "- `ib_send_lat` 8 B / TCP 8 B = **{}** (target ≤ 0.5: {}; stretch ≤ 0.2: {})",
        num(lat, 2),
        verdict(lat <= 0.5),
        verdict(lat <= 0.2)
    );
    let _ = writeln!(
        s,
        "- idle waiting process: **{} % CPU** (target ≈ 0: {})",
        num(idle, 2),
        verdict(idle < 0.5)
    );
}

/// A ratio: three decimals below 0.1 (two significant digits), two up to 10, one above.
fn ratio(x: f64) -> String {
    match x {
        _ if x.is_nan() => "–".into(),
        _ if x < 0.1 => format!("{x:.3}"),
        _ if x < 10.0 => format!("{x:.2}"),
        _ => format!("{x:.1}"),
    }
}

fn pct(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else {
        format!("{:.0} %", 100.0 * x)
    }
}

/// "met", "not met", or "not measured" when the value is missing.
fn verdict(x: f64, ok: bool) -> &'static str {
    match (x.is_nan(), ok) {
        (true, _) => "not measured",
        (false, true) => "met",
        (false, false) => "not met",
    }
}

/// The range of a shared-memory measurement and of its UDP run.
fn spread2(r: &Results, name: &str, f: fn(f64) -> String) -> String {
    let (.., lo, hi) = stat(r, &same_host::key(name, Via::Shm));
    let (.., ulo, uhi) = stat(r, &same_host::key(name, Via::Udp));
    let (a, b) = (spread(lo, hi, f), spread(ulo, uhi, f));
    if a.is_empty() && b.is_empty() {
        String::new()
    } else {
        format!("{a}; {b}")
    }
}

/// The same-host section: perftest over lanes and over UDP against UCX's
/// shared memory, memcpy and TCP, and the targets of issue 17.
fn same_host_table(s: &mut String, r: &Results, m: &Meta) {
    let _ = writeln!(
        s,
        "\n### Same-host path (issue 17)\n\n\
         perftest runs unmodified over `LD_LIBRARY_PATH=target/compat` with `-d softrdma0 -x 0 \
         -F`, both processes on the host device's default address (no `SOFTRDMA_ADDR`: \
         127.0.0.1, UDP 4791); bandwidth tests with `-D {secs}`, latency tests with `-s 8 -n \
         {iters}`. Each measurement runs with the same-host path (the default: shared-memory \
         lanes, \"shm\", with peer copy for large WRITEs and READs) and right after with \
         `SOFTRDMA_SHM=0` (UDP over loopback); bandwidth tests also in between with \
         `SOFTRDMA_PEER_COPY=0` (lanes, every byte in packets, as before peer copy). Every \
         run's path is checked from its `SOFTRDMA_STATS` counters: both processes of an shm run \
         sent through lanes (`shm_tx` > 0), neither process of a `SOFTRDMA_SHM=0` run did; a \
         run on the wrong path counts as failed (listed below). \"lanes\": the share of the \
         datagrams both processes sent that went through lanes (the rest went to a socket, \
         e.g. doorbells). UCX is `ucx_perftest` with `UCX_TLS={tls}`, two processes on \
         127.0.0.1, run right before the softrdma rows it is compared with: the median latency \
         (one-way, as UCX reports its ping-pong tests) and the overall bandwidth of its `Final:` \
         line (MB = 2^20 bytes), bandwidth tests with `-n` = {secs} × 8 GiB / size, latency \
         tests with `-n {ucx_iters}`. TCP is qperf `tcp_lat -m 8` and memcpy one thread, both \
         from the same repetitions. Ranges: shm; UDP.\n",
        secs = m.secs,
        iters = m.iters,
        tls = same_host::UCX_TLS,
        ucx_iters = u64::from(m.iters) * 10,
    );
    let _ = writeln!(
        s,
        "| measurement | shm | lanes | shm, packets only (`SOFTRDMA_PEER_COPY=0`) | shm / packets | UDP (`SOFTRDMA_SHM=0`) | shm / UDP | same-run baseline | shm / baseline | range |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|");
    for (tool, _, tag, test) in BW_ROWS {
        let name = same_host::bw_name(tool, tag);
        let (v, ..) = stat(r, &same_host::key(&name, Via::Shm));
        let (pk, ..) = stat(r, &same_host::key(&name, Via::Packets));
        let (u, ..) = stat(r, &same_host::key(&name, Via::Udp));
        let (lanes, ..) = stat(r, &format!("{}#lanes", same_host::key(&name, Via::Shm)));
        let (ucx, ..) = stat(r, &same_host::ucx_key(test, Some(tag)));
        let (mc, ..) = stat(r, &format!("memcpy/{tag}"));
        let what = if tool == "ib_write_bw" {
            "RDMA WRITE"
        } else {
            "RDMA READ"
        };
        let _ = writeln!(
            s,
            "| {what} {}, `{tool}` | {} | {} | {} | {} | {} | {} | UCX `{test}` {}; memcpy {} | {}× UCX, {}× memcpy | {} |",
            kib(tag),
            gbs(v),
            pct(lanes),
            gbs(pk),
            ratio(v / pk),
            gbs(u),
            ratio(v / u),
            gbs(ucx),
            gbs(mc),
            ratio(v / ucx),
            num(v / mc, 3),
            spread2(r, &name, gb_plain),
        );
    }
    let (tl, ..) = stat(r, "tcp_lat");
    let (tag_lat, ..) = stat(r, &same_host::ucx_key("tag_lat", None));
    let (put_lat, ..) = stat(r, &same_host::ucx_key("ucp_put_lat", None));
    for (tool, events, _) in LAT_ROWS {
        let name = same_host::lat_name(tool, events);
        let (v, p99, ..) = stat(r, &same_host::key(&name, Via::Shm));
        let (u, up99, ..) = stat(r, &same_host::key(&name, Via::Udp));
        let (lanes, ..) = stat(r, &format!("{}#lanes", same_host::key(&name, Via::Shm)));
        let rtt = tool == "ib_read_lat";
        let label = match (tool, events) {
            ("ib_send_lat", false) => "8 B SEND latency, busy-poll, `ib_send_lat` (one-way)",
            ("ib_write_lat", _) => "8 B RDMA WRITE latency, `ib_write_lat` (one-way)",
            ("ib_read_lat", false) => {
                "8 B RDMA READ latency, busy-poll, `ib_read_lat` (round trip)"
            }
            ("ib_send_lat", true) => "8 B SEND latency, events, `ib_send_lat -e` (one-way)",
            _ => "8 B RDMA READ latency, events, `ib_read_lat -e` (round trip)",
        };
        let (base, vs_base) = match (tool, events) {
            ("ib_send_lat", false) => (
                format!("UCX `tag_lat` {}", us2(tag_lat)),
                format!("{}× `tag_lat`", ratio(tag_lat_ratio(r, tool).0)),
            ),
            ("ib_write_lat", _) => (
                format!(
                    "UCX `ucp_put_lat` {}, `tag_lat` {}",
                    us2(put_lat),
                    us2(tag_lat)
                ),
                format!(
                    "{}× `ucp_put_lat`, {}× `tag_lat`",
                    ratio(v / put_lat),
                    ratio(tag_lat_ratio(r, tool).0)
                ),
            ),
            (_, true) => {
                let t = if rtt { 2.0 * tl } else { tl };
                (
                    format!(
                        "TCP {} {} (qperf `tcp_lat`)",
                        if rtt { "round trip" } else { "one-way" },
                        us(t)
                    ),
                    format!("{}× TCP", ratio(v / t)),
                )
            }
            _ => ("–".to_owned(), "–".to_owned()),
        };
        let _ = writeln!(
            s,
            "| {label}: median, p99 | {}, p99 {} | {} | – | – | {}, p99 {} | {} | {base} | {vs_base} | {} |",
            us2(v),
            us2(p99),
            pct(lanes),
            us2(u),
            us2(up99),
            ratio(v / u),
            spread2(r, &name, us_plain2),
        );
    }
    for (key, label) in [
        ("ucx:ucp_put_bw/64K", "UCX `ucp_put_bw -s 65536`"),
        ("ucx:ucp_put_bw/1M", "UCX `ucp_put_bw -s 1048576`"),
        ("ucx:ucp_get/64K", "UCX `ucp_get -s 65536`"),
        ("ucx:ucp_get/1M", "UCX `ucp_get -s 1048576`"),
        ("memcpy/64K", "memcpy 64 KiB (one thread)"),
        ("memcpy/1M", "memcpy 1 MiB (one thread)"),
    ] {
        let (v, _, lo, hi) = stat(r, key);
        let _ = writeln!(
            s,
            "| {label} | | | | | | | {} | | {} |",
            gbs(v),
            spread(lo, hi, gb_plain)
        );
    }
    for (key, label) in [
        ("ucx:tag_lat", "UCX `tag_lat -s 8` (one-way)"),
        ("ucx:ucp_put_lat", "UCX `ucp_put_lat -s 8` (one-way)"),
        ("tcp_lat", "TCP 8 B latency, qperf `tcp_lat -m 8` (one-way)"),
        (
            "cacheline",
            "A cache line between two spinning threads (one-way; ~0.06 or ~0.27 µs on this VM, \
             see BENCHMARKS.md, \"The machine's two modes\")",
        ),
    ] {
        let (v, _, lo, hi) = stat(r, key);
        let _ = writeln!(
            s,
            "| {label} | | | | | | | {} | | {} |",
            us2(v),
            spread(lo, hi, us_plain2)
        );
    }
    same_host_targets(s, r);
}

fn us2(x: f64) -> String {
    if x.is_nan() {
        "–".into()
    } else if x < 10.0 {
        format!("{x:.2} µs")
    } else {
        format!("{x:.1} µs")
    }
}

fn us_plain2(x: f64) -> String {
    if x < 10.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.1}")
    }
}

/// A same-host latency over UCX's `tag_lat`: the median of the ratios of
/// each run to the `tag_lat` run right before it (`pair:` keys), with
/// their range, or the ratio of the medians where no pair was measured.
fn tag_lat_ratio(r: &Results, tool: &str) -> (f64, String) {
    let (x, _, lo, hi) = stat(r, &same_host::pair_key(tool, "tag_lat"));
    if x.is_finite() {
        let range = if hi > lo {
            format!(" ({}–{})", num(lo, 2), num(hi, 2))
        } else {
            String::new()
        };
        return (x, format!("{range}, paired"));
    }
    let v = stat(r, &same_host::key(tool, Via::Shm)).0;
    (
        v / stat(r, &same_host::ucx_key("tag_lat", None)).0,
        String::new(),
    )
}

fn same_host_targets(s: &mut String, r: &Results) {
    let shm = |name: &str| stat(r, &same_host::key(name, Via::Shm)).0;
    let ucx = |key: &str| stat(r, key).0;
    let _ = writeln!(s, "\nTargets (issue 17), from the medians above:\n");
    for (tool, _, tag, test) in BW_ROWS {
        let x = shm(&same_host::bw_name(tool, tag)) / ucx(&same_host::ucx_key(test, Some(tag)));
        let stretch = if tool == "ib_write_bw" {
            format!("; stretch ≥ 0.8: {}", verdict(x, x >= 0.8))
        } else {
            String::new()
        };
        let _ = writeln!(
            s,
            "- `{tool}` {k} / UCX `{test}` {k} = **{}** (target ≥ 0.5: {}{stretch})",
            ratio(x),
            verdict(x, x >= 0.5),
            k = kib(tag),
        );
    }
    for tool in ["ib_send_lat", "ib_write_lat"] {
        let v = shm(tool);
        let (x, how) = tag_lat_ratio(r, tool);
        let _ = writeln!(
            s,
            "- `{tool}` 8 B one-way = **{}** (target ≤ 1.0 µs: {}); / UCX `tag_lat` = **{}**{how} \
             (target ≤ 3: {}; stretch ≤ 1.5: {})",
            us2(v),
            verdict(v, v <= 1.0),
            ratio(x),
            verdict(x, x <= 3.0),
            verdict(x, x <= 1.5),
        );
    }
    let (_, _, lo, hi) = stat(r, &same_host::ucx_key("tag_lat", None));
    if hi > 1.5 * lo {
        let _ = writeln!(
            s,
            "- UCX `tag_lat` ranged {}–{} over the run: the machine changed speed \
             between runs, and the ratios to `tag_lat` are those of each run with \
             the `tag_lat` run right before it",
            us_plain2(lo),
            us2(hi),
        );
    }
    let v = shm("ib_read_lat");
    let _ = writeln!(
        s,
        "- `ib_read_lat` 8 B round trip = **{}** (target ≤ 2 µs: {})",
        us2(v),
        verdict(v, v <= 2.0)
    );
    let tl = stat(r, "tcp_lat").0;
    for (tool, base, what) in [
        ("ib_send_lat -e", tl, "qperf `tcp_lat` (one-way)"),
        (
            "ib_read_lat -e",
            2.0 * tl,
            "TCP round trip (2 × qperf `tcp_lat`)",
        ),
    ] {
        let x = shm(tool) / base;
        let _ = writeln!(
            s,
            "- `{tool}` 8 B / {what} = **{}** (target ≤ 1.0: {})",
            ratio(x),
            verdict(x, x <= 1.0)
        );
    }
    let (idle, ..) = stat(r, "idle");
    if !idle.is_nan() {
        let _ = writeln!(
            s,
            "- idle waiting process (group `idle`): **{} % CPU** (target ≈ 0: {})",
            num(idle, 2),
            verdict(idle, idle < 0.5)
        );
    }
}

/// Replaces the generated section of BENCHMARKS.md (or inserts it before the
/// first `## ` section after the introduction).
pub(crate) fn update_benchmarks_md(path: &Path, md: &str) -> Result<()> {
    let old = std::fs::read_to_string(path).unwrap_or_else(|_| "# Benchmarks\n\n".to_owned());
    let block = format!("{BEGIN}\n{md}{END}\n");
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if e > b => format!(
            "{}{block}\n{}",
            &old[..b],
            old[e + END.len()..].trim_start_matches('\n')
        ),
        _ => match old.find("\n## ") {
            Some(i) => format!("{}\n{block}\n{}", &old[..i], &old[i + 1..]),
            None => format!("{}\n{block}", old.trim_end()),
        },
    };
    std::fs::write(path, new).map_err(|e| format!("write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_is_replaced_in_place() {
        let dir = std::env::temp_dir().join(format!("xtask-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("B.md");
        std::fs::write(&p, "# B\n\nintro\n\n## Old\n\ntext\n").unwrap();
        update_benchmarks_md(&p, "## New\n\none\n").unwrap();
        update_benchmarks_md(&p, "## New\n\ntwo\n").unwrap();
        let t = std::fs::read_to_string(&p).unwrap();
        assert_eq!(t.matches(BEGIN).count(), 1);
        assert!(t.contains("two") && !t.contains("one"));
        assert!(t.find("## New").unwrap() < t.find("## Old").unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn renders_with_missing_measurements() {
        let mut r = Results::new();
        r.insert("tcp_bw/64K".into(), vec![Sample { v: 2e9, aux: 1.0 }]);
        r.insert(
            "ib_write_bw/64K".into(),
            vec![Sample { v: 3e9, aux: 0.5 }, Sample { v: 4e9, aux: 0.7 }],
        );
        let m = Meta {
            command: "cargo xtask bench".into(),
            reps: 2,
            secs: 2,
            iters: 10,
            idle_secs: 5,
            load_before: "1".into(),
            load_after: "2".into(),
            minutes: 1.0,
            failures: vec![],
            compare: None,
            wire: true,
            same_host: false,
            notes: vec![],
        };
        let md = render(&r, &m);
        assert!(
            md.contains("| RDMA WRITE 64 KiB, `ib_write_bw` | 3.50 GB/s | TCP 2.00 GB/s"),
            "{md}"
        );
        assert!(
            md.contains("= **1.75** (target ≥ 1.5: met; stretch ≥ 2.5: not met)"),
            "{md}"
        );
    }

    /// A one-repetition `--only same-host` run's facts.
    fn same_host_meta() -> Meta {
        Meta {
            command: "cargo xtask bench --only same-host".into(),
            reps: 1,
            secs: 1,
            iters: 10,
            idle_secs: 2,
            load_before: "1".into(),
            load_after: "2".into(),
            minutes: 1.0,
            failures: vec![],
            compare: None,
            wire: false,
            same_host: true,
            notes: vec![],
        }
    }

    #[test]
    fn renders_same_host_ratios_and_verdicts() {
        let mut r = Results::new();
        let one = |v: f64| vec![Sample { v, aux: 2.0 * v }];
        r.insert("sh:ib_write_bw/64K@shm".into(), one(30e9));
        r.insert("sh:ib_write_bw/64K@shm#lanes".into(), one(0.99));
        r.insert("sh:ib_write_bw/64K@udp".into(), one(3e9));
        r.insert("sh:ib_write_bw/64K@pkt".into(), one(6e9));
        r.insert("ucx:ucp_put_bw/64K".into(), one(40e9));
        r.insert("memcpy/64K".into(), one(80e9));
        r.insert("sh:ib_send_lat@shm".into(), one(0.9));
        r.insert("sh:ib_send_lat@udp".into(), one(9.0));
        r.insert("ucx:tag_lat".into(), one(0.2));
        r.insert("sh:ib_read_lat -e@shm".into(), one(50.0));
        r.insert("tcp_lat".into(), one(30.0));
        let m = Meta {
            failures: vec!["x: failed".into()],
            notes: vec!["UCX rows skipped".into()],
            ..same_host_meta()
        };
        let md = render(&r, &m);
        assert!(!md.contains("Targets (issue 6)"), "{md}");
        assert!(
            md.contains(
                "| RDMA WRITE 64 KiB, `ib_write_bw` | 30.00 GB/s | 99 % | 6.00 GB/s | 5.00 | \
                 3.00 GB/s | 10.0 | UCX `ucp_put_bw` 40.00 GB/s; memcpy 80.00 GB/s | 0.75× UCX, 0.375× memcpy |"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "- `ib_write_bw` 64 KiB / UCX `ucp_put_bw` 64 KiB = **0.75** \
                 (target ≥ 0.5: met; stretch ≥ 0.8: not met)"
            ),
            "{md}"
        );
        assert!(
            md.contains(
                "- `ib_send_lat` 8 B one-way = **0.90 µs** (target ≤ 1.0 µs: met); \
                 / UCX `tag_lat` = **4.50** (target ≤ 3: not met; stretch ≤ 1.5: not met)"
            ),
            "{md}"
        );
        assert!(
            md.contains("- `ib_write_lat` 8 B one-way = **–** (target ≤ 1.0 µs: not measured)"),
            "{md}"
        );
        assert!(
            md.contains("TCP round trip (2 × qperf `tcp_lat`) = **0.83** (target ≤ 1.0: met)"),
            "{md}"
        );
        assert!(md.contains("Skipped:\n\n- UCX rows skipped"), "{md}");
        assert!(md.contains("Failed measurements:\n\n- x: failed"), "{md}");
    }

    #[test]
    fn latency_targets_use_the_ratio_to_the_tag_lat_run_right_before() {
        // Two repetitions: the machine was 3× slower in the second. The
        // medians' ratio (1.2 / 0.4 = 3.0) would pair a fast run with a slow
        // one; each run against its own `tag_lat` gives 5.0 and 2.0.
        let mut r = Results::new();
        let s = |v: &[f64]| {
            v.iter()
                .map(|&v| Sample { v, aux: f64::NAN })
                .collect::<Vec<_>>()
        };
        r.insert("ucx:tag_lat".into(), s(&[0.2, 0.6]));
        r.insert("sh:ib_send_lat@shm".into(), s(&[1.0, 1.2]));
        r.insert("pair:ib_send_lat/tag_lat".into(), s(&[5.0, 2.0]));
        r.insert("sh:ib_write_lat@shm".into(), s(&[0.8]));
        let m = Meta {
            reps: 2,
            ..same_host_meta()
        };
        let md = render(&r, &m);
        assert!(
            md.contains(
                "- `ib_send_lat` 8 B one-way = **1.10 µs** (target ≤ 1.0 µs: not met); \
                 / UCX `tag_lat` = **3.50** (2.00–5.00), paired (target ≤ 3: not met; \
                 stretch ≤ 1.5: not met)"
            ),
            "{md}"
        );
        assert!(md.contains("| 3.50× `tag_lat` |"), "{md}");
        // No pair measured: the ratio of the medians.
        assert!(
            md.contains("/ UCX `tag_lat` = **2.00** (target ≤ 3: met;"),
            "{md}"
        );
        assert!(
            md.contains("- UCX `tag_lat` ranged 0.20–0.60 µs over the run"),
            "{md}"
        );
    }
}
