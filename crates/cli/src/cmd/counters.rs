//! Device counters: a snapshot of one device's transport and socket counters,
//! the `SOFTRDMA_STATS` dump format, and the human and JSON views of it.
//!
//! # The dump format (`SOFTRDMA_STATS=FILE`)
//!
//! A process appends one block per device to FILE, in one `write(2)` on a
//! file opened with `O_APPEND` (so blocks of several processes do not
//! interleave). A block is UTF-8 text, one `key value` pair per line:
//!
//! ```text
//! # softrdma-stats 1
//! pid 4242
//! device softrdma0
//! addr 127.0.0.1:4791
//! when exit
//! tx_packets 1234
//! ...
//! ```
//!
//! The first line starts a block; `pid`, `device`, `addr` and `when` (`exit`
//! or `signal`) describe it; every other line is a counter (an unsigned
//! integer) named after the field of `softrdma_transport::Stats` or
//! `softrdma_udp::SocketStats` it comes from. Readers ignore unknown keys
//! and blank lines, so counters can be added without a version change.

use std::fmt::Write as _;

use softrdma::verbs::{Context, Stats};
use softrdma_udp::SocketStats;

/// Marker that starts a block, and the variable naming the dump file: the
/// engine's (it writes the dump).
pub(crate) use softrdma_engine::{BLOCK_MARK, ENV_STATS};

/// Counters of one device at one moment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Snapshot {
    /// Process id.
    pub(crate) pid: u32,
    /// Device name.
    pub(crate) device: String,
    /// UDP address of the device.
    pub(crate) addr: String,
    /// When it was taken (`exit`, `signal`, `now`).
    pub(crate) when: String,
    /// Counters in dump order.
    pub(crate) counters: Vec<(String, u64)>,
}

/// The counters of a transport and a socket, named as their fields (the
/// engine writes its dump with the same names).
fn fields(s: &Stats, k: &SocketStats) -> Vec<(&'static str, u64)> {
    s.named().into_iter().chain(k.named()).collect()
}

impl Snapshot {
    /// The counters of `ctx` now, labelled `when`.
    pub(crate) fn of(ctx: &Context, when: &str) -> Snapshot {
        let (s, k) = ctx.stats();
        Snapshot {
            pid: std::process::id(),
            device: ctx.name().to_string(),
            addr: ctx.local_addr().to_string(),
            when: when.to_string(),
            counters: fields(&s, &k)
                .into_iter()
                .chain(ctx.shm_counters())
                .map(|(n, v)| (n.to_string(), v))
                .collect(),
        }
    }

    /// A counter by name (0 if absent).
    pub(crate) fn get(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, v)| *v)
    }

    /// The block in the dump format (the engine writes the same).
    #[cfg(test)]
    pub(crate) fn to_dump(&self) -> String {
        let mut s = format!(
            "{BLOCK_MARK} 1\npid {}\ndevice {}\naddr {}\nwhen {}\n",
            self.pid, self.device, self.addr, self.when
        );
        for (n, v) in &self.counters {
            let _ = writeln!(s, "{n} {v}");
        }
        s
    }

    /// Parses every block of a dump file.
    pub(crate) fn parse_dump(text: &str) -> Result<Vec<Snapshot>, String> {
        let mut out: Vec<Snapshot> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            if let Some(v) = line.strip_prefix(BLOCK_MARK) {
                if v.trim() != "1" {
                    return Err(format!("line {}: unknown format version {:?}", i + 1, v));
                }
                out.push(Snapshot::default());
                continue;
            }
            let Some(cur) = out.last_mut() else {
                return Err(format!(
                    "line {}: expected {BLOCK_MARK:?} before counters",
                    i + 1
                ));
            };
            let (k, v) = line.split_once(' ').unwrap_or((line, ""));
            let v = v.trim();
            match k {
                "pid" => cur.pid = v.parse().map_err(|_| format!("line {}: bad pid", i + 1))?,
                "device" => cur.device = v.to_string(),
                "addr" => cur.addr = v.to_string(),
                "when" => cur.when = v.to_string(),
                _ => match v.parse() {
                    Ok(n) => cur.counters.push((k.to_string(), n)),
                    // Unknown non-numeric keys are for newer readers.
                    Err(_) => continue,
                },
            }
        }
        Ok(out)
    }

    /// The counters as a JSON object (`{"pid":..,"device":..,"addr":..,"when":..,"counters":{..}}`).
    pub(crate) fn to_json(&self) -> serde_json::Value {
        let counters: serde_json::Map<String, serde_json::Value> = self
            .counters
            .iter()
            .map(|(n, v)| (n.clone(), serde_json::Value::from(*v)))
            .collect();
        serde_json::json!({
            "pid": self.pid,
            "device": self.device,
            "addr": self.addr,
            "when": self.when,
            "counters": counters,
        })
    }

    /// The human view: a title line and one line per topic.
    pub(crate) fn render(&self, title: &str) -> String {
        let g = |n: &str| self.get(n);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{title}{}{} {} (pid {}, {})",
            if title.is_empty() { "" } else { ": " },
            self.device,
            self.addr,
            self.pid,
            match self.when.as_str() {
                "exit" => "at exit",
                "signal" => "on signal",
                other => other,
            }
        );
        let mut line = |label: &str, text: String| {
            let _ = writeln!(s, "  {label:<18}{text}");
        };
        line(
            "packets",
            format!(
                "{} sent ({}), {} received ({})",
                g("tx_packets"),
                human_bytes(g("tx_bytes")),
                g("rx_packets"),
                human_bytes(g("rx_bytes"))
            ),
        );
        line(
            "retransmits",
            format!(
                "{} ({} retransmit timeouts)",
                g("retransmits"),
                g("timeouts")
            ),
        );
        line(
            "NAKs sent",
            format!(
                "{} sequence, {} other, {} RNR",
                g("tx_nak_seq"),
                g("tx_nak_other"),
                g("tx_rnr_nak")
            ),
        );
        line(
            "NAKs received",
            format!("{} NAK, {} RNR NAK", g("rx_nak"), g("rx_rnr_nak")),
        );
        line("duplicates", g("rx_duplicates").to_string());
        line(
            "drops",
            format!(
                "{} bad ICRC, {} bad length/header, {} unknown QPN, {} access violation, \
                 {} bad QP state, {} bad P_Key, {} bad Q_Key, {} wrong source, \
                 {} out of sequence, {} no receive WQE",
                g("drop_bad_icrc"),
                g("drop_malformed"),
                g("drop_unknown_qpn"),
                g("access_violations"),
                g("drop_bad_state"),
                g("drop_bad_pkey"),
                g("drop_bad_qkey"),
                g("drop_bad_addr"),
                g("drop_out_of_seq"),
                g("drop_no_wqe")
            ),
        );
        line("CQ overflows", g("cq_overflows").to_string());
        line(
            "socket send",
            format!(
                "{} datagrams in {} calls ({} GSO batches), {} would-block, {} errors",
                g("datagrams_sent"),
                g("send_syscalls"),
                g("gso_batches"),
                g("send_would_block"),
                g("send_errors")
            ),
        );
        line(
            "socket receive",
            format!(
                "{} datagrams in {} calls ({} GRO batches), {} truncated, {} errors, {} ICMP unreachable",
                g("datagrams_received"),
                g("recv_syscalls"),
                g("gro_batches"),
                g("recv_truncated"),
                g("recv_errors"),
                g("unreachable")
            ),
        );
        s
    }
}

/// `1234567` → "1.2 MB" (decimal units, as bandwidths are given).
pub(crate) fn human_bytes(n: u64) -> String {
    let f = n as f64;
    if f >= 1e9 {
        format!("{:.1} GB", f / 1e9)
    } else if f >= 1e6 {
        format!("{:.1} MB", f / 1e6)
    } else if f >= 1e3 {
        format!("{:.1} kB", f / 1e3)
    } else {
        format!("{n} B")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_round_trip_and_unknown_keys() {
        let a = Snapshot {
            pid: 7,
            device: "softrdma0".into(),
            addr: "127.0.0.3:4791".into(),
            when: "exit".into(),
            counters: vec![("tx_packets".into(), 5), ("drop_bad_icrc".into(), 1)],
        };
        let mut text = a.to_dump();
        text.push_str("future_counter 9\nfuture_label text\n\n");
        text.push_str(&a.to_dump());
        let v = Snapshot::parse_dump(&text).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[1], a);
        assert_eq!(v[0].get("future_counter"), 9);
        assert_eq!(v[0].get("tx_packets"), 5);
        assert!(Snapshot::parse_dump("tx_packets 1\n").is_err());
        assert!(Snapshot::parse_dump("# softrdma-stats 2\n").is_err());
        let r = a.render("client");
        assert!(r.starts_with("client: softrdma0 127.0.0.3:4791 (pid 7, at exit)"));
        assert!(r.contains("1 bad ICRC"), "{r}");
    }
}
