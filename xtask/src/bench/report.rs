//! The table of `cargo xtask bench` and its section of BENCHMARKS.md.

use std::fmt::Write as _;
use std::path::Path;

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
    let _ = writeln!(
        s,
        "{} repetition(s), medians (range over repetitions in the last column); {} s per \
         bandwidth test, {} round trips per latency test; {:.1} min in all. Load average \
         (1/5/15 min) before: {}, after: {}. perftest runs unmodified over \
         `LD_LIBRARY_PATH=target/compat` with `-d softrdma0 -x 0 -F`, server and client on \
         their own `SOFTRDMA_ADDR` (127.86.x.y), client connecting to 127.0.0.1; bandwidth \
         tests with `-D {}`, latency tests with `-s 8 -n {}`. TCP is qperf on 127.0.0.1 \
         (`qperf 127.0.0.1 -t {} -m 64K tcp_bw`, `-m 8 tcp_lat`). CPU s/GB is the CPU time \
         of both processes (all threads, from /proc; for perftest their whole life, setup \
         included) per GB moved. perftest MB are 2^20 bytes, GB/s here are 10^9.\n",
        m.reps, m.secs, m.iters, m.minutes, m.load_before, m.load_after, m.secs, m.iters, m.secs
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
            bw_row(&mut s, r, &key, &label, tag, tcp, tcp_cpu, mc);
        }
    }
    let (tcp64, tcp64_cpu, ..) = stat(r, "tcp_bw/64K");
    let (mc64, ..) = stat(r, "memcpy/64K");
    bw_row(
        &mut s,
        r,
        "ib_read_bw/64K",
        "RDMA READ 64 KiB, `ib_read_bw`",
        "64K",
        tcp64,
        tcp64_cpu,
        mc64,
    );
    bw_row(
        &mut s,
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
    targets(&mut s, r);
    if let Some(d) = &m.compare {
        compare_table(&mut s, r, d);
    }
    if !m.failures.is_empty() {
        let _ = writeln!(s, "\nFailed measurements:\n");
        for f in &m.failures {
            let _ = writeln!(s, "- {f}");
        }
    }
    s
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
}
