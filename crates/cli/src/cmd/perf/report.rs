//! Results of a `perf` run: the table, the JSON document (schema in
//! `--help` and crates/cli/README.md) and what the plot draws.

use std::fmt::Write as _;

use serde::Serialize;

use super::rdma::Measure;
use super::{Op, Test};
use crate::cmd::counters::Snapshot;
use crate::cmd::fmt_size;

/// Version of the JSON document's shape.
pub(crate) const SCHEMA: u32 = 1;

/// How the run was set up (the JSON `config` object).
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RunConfig {
    /// `loopback` (this command started the server) or `client` (`--connect`).
    pub(crate) mode: String,
    /// Client device address (`ip:port`).
    pub(crate) client: String,
    /// Server device address.
    pub(crate) server: String,
    /// `busy` or `events`.
    pub(crate) polling: String,
    /// Which path the client's packets took: `shared memory` (the same-host
    /// path), `UDP`, or `UDP (SOFTRDMA_SHM=0)` / `UDP (no shared-memory path)`.
    pub(crate) path: String,
    /// Requested path MTU.
    pub(crate) mtu: u32,
    /// Requests in flight in bandwidth tests.
    pub(crate) depth: u32,
    /// Seconds per test, or null with `--iters`.
    pub(crate) duration_s: Option<f64>,
    /// Operations per test, or null with a duration.
    pub(crate) iters: Option<u64>,
    /// Operations measured.
    pub(crate) ops: Vec<Op>,
    /// Message sizes (atomics use 8 bytes whatever these are).
    pub(crate) sizes: Vec<u64>,
    /// `bw` and/or `lat`.
    pub(crate) tests: Vec<String>,
}

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub(crate) struct Lat {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) mean: f64,
}

impl Lat {
    /// Nearest-rank percentiles of `v` (None if empty).
    pub(crate) fn of(v: &[f64]) -> Option<Lat> {
        if v.is_empty() {
            return None;
        }
        let mut s = v.to_vec();
        s.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            let r = (q * s.len() as f64).ceil() as usize;
            s[r.clamp(1, s.len()) - 1]
        };
        Some(Lat {
            p50: rank(0.50),
            p99: rank(0.99),
            p999: rank(0.999),
            min: s[0],
            max: s[s.len() - 1],
            mean: s.iter().sum::<f64>() / s.len() as f64,
        })
    }
}

/// One (operation, size) row: bandwidth and latency.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) op: Op,
    pub(crate) size: u64,
    /// Operations measured by the bandwidth test (0: not run).
    pub(crate) iters: u64,
    /// Duration of the bandwidth test.
    pub(crate) seconds: f64,
    /// Payload bandwidth, 10^6 bytes per second.
    pub(crate) bw_mbps: Option<f64>,
    /// Operations per second.
    pub(crate) msg_rate: Option<f64>,
    /// Latency samples (0: not run).
    pub(crate) lat_iters: u64,
    /// `one-way` (WRITE, SEND: half a ping-pong) or `round-trip` (READ, atomic).
    pub(crate) lat_kind: &'static str,
    pub(crate) lat_us: Option<Lat>,
}

/// All rows of a run.
#[derive(Debug)]
pub(crate) struct Report {
    pub(crate) config: RunConfig,
    pub(crate) rows: Vec<Row>,
}

impl Report {
    pub(crate) fn new(config: RunConfig) -> Report {
        Report {
            config,
            rows: Vec::new(),
        }
    }

    /// Adds a measurement to the row of (op, size).
    pub(crate) fn add(&mut self, op: Op, size: u64, m: Measure) {
        let size = if op == Op::Atomic { 8 } else { size };
        let i = match self.rows.iter().position(|r| r.op == op && r.size == size) {
            Some(i) => i,
            None => {
                self.rows.push(Row {
                    op,
                    size,
                    iters: 0,
                    seconds: 0.0,
                    bw_mbps: None,
                    msg_rate: None,
                    lat_iters: 0,
                    lat_kind: if op.one_way() {
                        "one-way"
                    } else {
                        "round-trip"
                    },
                    lat_us: None,
                });
                self.rows.len() - 1
            }
        };
        let r = &mut self.rows[i];
        match m {
            Measure::Bw { ops, secs } => {
                r.iters = ops;
                r.seconds = secs;
                if secs > 0.0 {
                    r.bw_mbps = Some((ops * size) as f64 / secs / 1e6);
                    r.msg_rate = Some(ops as f64 / secs);
                }
            }
            Measure::Lat { samples_us } => {
                r.lat_iters = samples_us.len() as u64;
                r.lat_us = Lat::of(&samples_us);
            }
        }
    }

    /// Records which path ran (known once the run is over).
    pub(crate) fn set_path(&mut self, path: String) {
        self.config.path = path;
    }

    /// The JSON document.
    pub(crate) fn to_json(&self, stats: Option<&(Snapshot, Snapshot)>) -> String {
        let mut doc = serde_json::json!({
            "tool": "softrdma perf",
            "version": env!("CARGO_PKG_VERSION"),
            "schema": SCHEMA,
            "config": self.config,
            "results": self.rows,
        });
        if let Some((c, s)) = stats {
            doc["stats"] = serde_json::json!({ "client": c.to_json(), "server": s.to_json() });
        }
        let mut s = serde_json::to_string_pretty(&doc).expect("serializable");
        s.push('\n');
        s
    }

    /// The terminal table.
    pub(crate) fn to_table(&self) -> String {
        let c = &self.config;
        let mut s = String::new();
        let how = match c.mode.as_str() {
            "loopback" => "two processes on this host".to_string(),
            _ => "over the network".to_string(),
        };
        let per = match (c.duration_s, c.iters) {
            (Some(d), _) => format!("{d} s per test"),
            (None, Some(n)) => format!("{n} operations per test"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "softrdma perf: {} -> {} ({how}), RC, MTU {}, {} polling, {per}, path: {}",
            c.client, c.server, c.mtu, c.polling, c.path
        );
        let _ = writeln!(s);
        let head = [
            "op",
            "size",
            "bandwidth",
            "msg rate",
            "lat p50",
            "p99",
            "p99.9",
        ];
        let mut cells: Vec<[String; 7]> = Vec::new();
        let mut last_op = None;
        for r in &self.rows {
            if last_op.is_some() && last_op != Some(r.op) {
                cells.push(Default::default());
            }
            last_op = Some(r.op);
            let lat = |f: fn(&Lat) -> f64| r.lat_us.as_ref().map_or("-".into(), |l| fmt_us(f(l)));
            cells.push([
                r.op.name().to_uppercase(),
                fmt_size(r.size),
                r.bw_mbps.map_or("-".into(), fmt_bw),
                r.msg_rate.map_or("-".into(), fmt_rate),
                lat(|l| l.p50),
                lat(|l| l.p99),
                lat(|l| l.p999),
            ]);
        }
        let mut w = head.map(str::len);
        for row in &cells {
            for (i, c) in row.iter().enumerate() {
                w[i] = w[i].max(c.chars().count());
            }
        }
        let line = |s: &mut String, row: &[String; 7]| {
            let mut l = format!("  {:<w0$}  {:>w1$}", row[0], row[1], w0 = w[0], w1 = w[1]);
            for i in 2..7 {
                let _ = write!(l, "  {:>wi$}", row[i], wi = w[i]);
            }
            let _ = writeln!(s, "{}", l.trim_end());
        };
        line(&mut s, &head.map(String::from));
        let rule: [String; 7] = std::array::from_fn(|i| "-".repeat(w[i]));
        line(&mut s, &rule);
        for row in &cells {
            line(&mut s, row);
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "bandwidth: payload bytes per second (MB = 10^6 B); msg rate: millions of operations per second"
        );
        let _ = writeln!(
            s,
            "latency: WRITE and SEND one-way (half a ping-pong round trip), READ and ATOMIC post to completion"
        );
        s
    }

    /// (op, [(size, MB/s)]) for every op with bandwidth results.
    pub(crate) fn series(&self, test: Test) -> Vec<(Op, Vec<(f64, f64)>)> {
        let mut out: Vec<(Op, Vec<(f64, f64)>)> = Vec::new();
        for r in &self.rows {
            let v = match test {
                Test::Bw => r.bw_mbps,
                Test::Lat => r.lat_us.map(|l| l.p50),
            };
            let Some(v) = v else { continue };
            match out.iter_mut().find(|(o, _)| *o == r.op) {
                Some((_, pts)) => pts.push((r.size as f64, v)),
                None => out.push((r.op, vec![(r.size as f64, v)])),
            }
        }
        out
    }
}

/// `123.4 MB/s` or `1.23 GB/s`.
pub(crate) fn fmt_bw(mbps: f64) -> String {
    if mbps >= 1000.0 {
        format!("{:.2} GB/s", mbps / 1000.0)
    } else if mbps >= 100.0 {
        format!("{mbps:.0} MB/s")
    } else if mbps >= 1.0 {
        format!("{mbps:.1} MB/s")
    } else {
        format!("{mbps:.3} MB/s")
    }
}

/// Operations per second as `0.123 Mmsg/s`.
pub(crate) fn fmt_rate(per_s: f64) -> String {
    let m = per_s / 1e6;
    if m >= 10.0 {
        format!("{m:.1} Mmsg/s")
    } else if m >= 0.01 {
        format!("{m:.3} Mmsg/s")
    } else {
        format!("{m:.5} Mmsg/s")
    }
}

/// Microseconds with 3 significant digits or so.
pub(crate) fn fmt_us(us: f64) -> String {
    if us >= 1000.0 {
        format!("{us:.0} µs")
    } else if us >= 100.0 {
        format!("{us:.1} µs")
    } else {
        format!("{us:.2} µs")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let v: Vec<f64> = (1..=1000).map(f64::from).collect();
        let l = Lat::of(&v).unwrap();
        assert_eq!(
            (l.p50, l.p99, l.p999, l.min, l.max),
            (500.0, 990.0, 999.0, 1.0, 1000.0)
        );
        assert_eq!(l.mean, 500.5);
        let one = Lat::of(&[7.0]).unwrap();
        assert_eq!((one.p50, one.p999), (7.0, 7.0));
        assert!(Lat::of(&[]).is_none());
    }

    #[test]
    fn units() {
        assert_eq!(fmt_bw(1234.0), "1.23 GB/s");
        assert_eq!(fmt_bw(123.4), "123 MB/s");
        assert_eq!(fmt_bw(12.34), "12.3 MB/s");
        assert_eq!(fmt_rate(1_540_000.0), "1.540 Mmsg/s");
        assert_eq!(fmt_us(5.123), "5.12 µs");
        assert_eq!(fmt_us(1234.0), "1234 µs");
    }
}
