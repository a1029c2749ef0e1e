//! The same-host group (`--only same-host`, issue 17): softrdma between two
//! processes of one host, over its shared-memory lanes and over UDP, next
//! to what a user would otherwise pick there, in one run.
//!
//! Per repetition, each row runs its baseline and then softrdma twice, right
//! after one another:
//! - UCX's shared-memory transport (`ucx_perftest`, `UCX_TLS=sm,self`, two
//!   processes on 127.0.0.1): `ucp_put_bw` and `ucp_get` at 64 KiB and
//!   1 MiB, `tag_lat` and `ucp_put_lat` at 8 bytes; skipped, with a note, if
//!   `ucx_perftest` is missing;
//! - perftest over target/compat with both processes on the host device's
//!   default address, the same-host path on (the default) and then off
//!   (`SOFTRDMA_SHM=0`: UDP over loopback): `ib_write_bw` and `ib_read_bw`
//!   at 64 KiB and 1 MiB, 8-byte `ib_send_lat`, `ib_write_lat`,
//!   `ib_read_lat`, `ib_send_lat -e` and `ib_read_lat -e`. Each run's
//!   `SOFTRDMA_STATS` counters say which path it took: a run whose path is
//!   not the one asked for is a failed measurement;
//! - memcpy at 64 KiB and 1 MiB and qperf `tcp_lat` (for the `-e` rows),
//!   unless the `memcpy` and `lat` groups measure them in the same repetition.
//!
//! Bandwidth rows run a third time between the two, with peer copy off
//! (`SOFTRDMA_PEER_COPY=0`: the lanes carry every byte in packets).
//!
//! Keys: `sh:<perftest>@shm`, `sh:<perftest>@pkt`, `sh:<perftest>@udp` (and `...@shm#lanes`, the
//! share of datagrams sent through lanes), `ucx:<test>`, and `pair:<perftest>/tag_lat`
//! ([`pair_key`]).
//!
//! The latency targets compare with UCX's `tag_lat` measured right before
//! each busy-poll SEND and WRITE run, as a ratio per repetition: on these
//! VMs `tag_lat` moved between 0.18 and 0.68 µs from one minute to the next
//! (2026-11-28, as the two vCPUs went from separate cores to one core's
//! two threads and back), so the medians of runs minutes apart could pair
//! one speed of the machine with the other.

use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use super::baselines::{Qperf, cacheline_us, memcpy_bw};
use super::procs::{free_tcp_port, run_pair, tail};
use super::{Ctx, Sample, Setup, parse};
use crate::Result;

/// UCX transports of the baseline: shared memory (and loopback to self).
pub(crate) const UCX_TLS: &str = "sm,self";

/// Bytes a UCX bandwidth test moves per second of `--secs` (≈ 0.2 s at the
/// 40–50 GB/s it reaches here, a few seconds if it is slowed down 10×).
const UCX_BYTES_PER_SEC: u64 = 8 << 30;

/// Bandwidth rows: perftest tool, message size, size tag, UCX test.
pub(crate) const BW_ROWS: [(&str, usize, &str, &str); 4] = [
    ("ib_write_bw", 65536, "64K", "ucp_put_bw"),
    ("ib_write_bw", 1 << 20, "1M", "ucp_put_bw"),
    ("ib_read_bw", 65536, "64K", "ucp_get"),
    ("ib_read_bw", 1 << 20, "1M", "ucp_get"),
];

/// Latency rows (8 bytes): perftest tool, completion events (`-e`), the UCX
/// test run right before it (the busy-poll SEND and WRITE rows also run
/// `tag_lat` right before, for their paired ratio, [`pair_key`]).
pub(crate) const LAT_ROWS: [(&str, bool, Option<&str>); 5] = [
    ("ib_send_lat", false, Some("tag_lat")),
    ("ib_write_lat", false, Some("ucp_put_lat")),
    ("ib_read_lat", false, None),
    ("ib_send_lat", true, None),
    ("ib_read_lat", true, None),
];

/// The path a perftest run is asked to take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// Shared-memory lanes (the default), peer copy on.
    Shm,
    /// Lanes with `SOFTRDMA_PEER_COPY=0`: every byte in 4 KiB packets, as
    /// before peer copy (bandwidth rows only).
    Packets,
    /// `SOFTRDMA_SHM=0`: UDP over loopback.
    Udp,
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Via::Shm => "shm",
            Via::Packets => "pkt",
            Via::Udp => "udp",
        })
    }
}

/// The key of a perftest bandwidth row (`ib_write_bw/64K`) or latency row
/// (`ib_send_lat`, `ib_send_lat -e`), without the path.
pub(crate) fn bw_name(tool: &str, tag: &str) -> String {
    format!("{tool}/{tag}")
}

pub(crate) fn lat_name(tool: &str, events: bool) -> String {
    format!("{tool}{}", if events { " -e" } else { "" })
}

/// `sh:<name>@<via>`.
pub(crate) fn key(name: &str, via: Via) -> String {
    format!("sh:{name}@{via}")
}

/// `pair:<perftest>/<UCX test>`: the ratio of a same-host latency to the
/// UCX latency measured right before it, one sample per repetition.
pub(crate) fn pair_key(tool: &str, test: &str) -> String {
    format!("pair:{tool}/{test}")
}

/// `ucx:<test>/<tag>` for bandwidth, `ucx:<test>` for latency.
pub(crate) fn ucx_key(test: &str, tag: Option<&str>) -> String {
    match tag {
        Some(t) => format!("ucx:{test}/{t}"),
        None => format!("ucx:{test}"),
    }
}

/// Whether `ucx_perftest` can be run.
pub(crate) fn ucx_available() -> bool {
    Command::new("sh")
        .args(["-c", "command -v ucx_perftest"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// What a run's counters say about its path: an error if it is not the one
/// asked for, else the share of datagrams both processes sent through lanes.
pub(crate) fn check_path(stats: &str, want: Via) -> Result<f64> {
    let blocks = parse::stats_blocks(stats);
    if blocks.len() != 2 {
        return Err(format!(
            "SOFTRDMA_STATS has the counters of {} process(es), not 2: cannot tell the path",
            blocks.len()
        ));
    }
    let (mut lanes, mut udp) = (0u64, 0u64);
    for b in &blocks {
        let pid = b.get("pid").copied().unwrap_or(0);
        let tx = b.get("shm_tx").copied();
        let copies = b.get("shm_peer_copies").copied().unwrap_or(0);
        if want == Via::Packets && copies > 0 {
            return Err(format!(
                "process {pid} made {copies} peer copies with SOFTRDMA_PEER_COPY=0"
            ));
        }
        match (want, tx) {
            (Via::Shm | Via::Packets, None) => {
                return Err(format!(
                    "process {pid} ran over UDP: its same-host path was off (no shm_* counters)"
                ));
            }
            (Via::Shm | Via::Packets, Some(0)) => {
                return Err(format!(
                    "process {pid} ran over UDP: its same-host path was on but shm_tx is 0"
                ));
            }
            (Via::Udp, Some(n)) if n > 0 => {
                return Err(format!(
                    "process {pid} sent {n} datagrams through lanes with SOFTRDMA_SHM=0"
                ));
            }
            _ => {}
        }
        lanes += tx.unwrap_or(0);
        udp += b.get("datagrams_sent").copied().unwrap_or(0);
    }
    Ok(lanes as f64 / (lanes + udp).max(1) as f64)
}

impl Ctx {
    fn stats_file(&self, name: &str, via: Via) -> PathBuf {
        let f = format!("sh_{name}_{via}.stats").replace([' ', '/', '-'], "_");
        self.dir.join(f)
    }

    /// One perftest run on `via`, checked against its counters; its value
    /// if it succeeded.
    fn same_host_run(
        &mut self,
        name: &str,
        via: Via,
        run: impl FnOnce(&Ctx, &Setup<'_>) -> Result<Sample>,
    ) -> Option<f64> {
        let stats = self.stats_file(name, via);
        let _ = fs::remove_file(&stats);
        let setup = Setup::SameHost {
            shm: via != Via::Udp,
            peer_copy: via == Via::Shm,
            stats: &stats,
        };
        let r = run(self, &setup).and_then(|s| {
            let text = fs::read_to_string(&stats).unwrap_or_default();
            let lanes = check_path(&text, via).map_err(|e| {
                format!(
                    "{name} with the same-host path {}: {e} ({})",
                    if via == Via::Udp { "off" } else { "on" },
                    stats.display()
                )
            })?;
            Ok((s, lanes))
        });
        let k = key(name, via);
        match r {
            Ok((s, lanes)) => {
                if via == Via::Shm {
                    self.results
                        .entry(format!("{k}#lanes"))
                        .or_default()
                        .push(Sample {
                            v: lanes,
                            aux: f64::NAN,
                        });
                }
                let v = s.v;
                self.record(&k, Ok(s));
                Some(v)
            }
            Err(e) => {
                self.record(&k, Err(e));
                None
            }
        }
    }

    /// One `ucx_perftest` pair; the client's `Final:` line.
    fn ucx(&self, test: &str, size: usize, iters: u64) -> Result<parse::UcxFinal> {
        let port = free_tcp_port()?;
        let warmup = (iters / 10).clamp(100, 10_000);
        let mk = |server: Option<&str>| {
            let mut c = Command::new("ucx_perftest");
            c.env("UCX_TLS", UCX_TLS);
            if let Some(host) = server {
                c.arg(host);
            }
            c.args(["-t", test, "-s", &size.to_string()])
                .args(["-n", &iters.to_string(), "-w", &warmup.to_string()])
                .args(["-p", &port.to_string()]);
            c
        };
        let r = run_pair(
            &format!("ucx_{test}_{size}"),
            &self.dir,
            &mut mk(None),
            port,
            &mut mk(Some("127.0.0.1")),
            Duration::from_secs(90),
        )?;
        parse::ucx_final(&r.client).ok_or_else(|| {
            format!(
                "ucx_perftest {test}: no Final: line in:\n{}",
                tail(&r.client)
            )
        })
    }

    fn ucx_bw(&self, test: &str, size: usize) -> Result<Sample> {
        let iters = (u64::from(self.opts.secs) * UCX_BYTES_PER_SEC / size as u64).max(1000);
        let f = self.ucx(test, size, iters)?;
        Ok(Sample {
            v: f.bw,
            aux: f64::NAN,
        })
    }

    fn ucx_lat(&self, test: &str) -> Result<Sample> {
        let f = self.ucx(test, 8, u64::from(self.opts.iters) * 10)?;
        Ok(Sample {
            v: f.lat_median_us,
            aux: f64::NAN,
        })
    }
}

/// One repetition of the group; `ucx`: whether `ucx_perftest` is there.
pub(crate) fn one_rep(ctx: &mut Ctx, qperf: Option<&Qperf>, ucx: bool) {
    let o = ctx.opts.clone();
    let libs = ctx.compat.clone();
    if !o.runs("memcpy") {
        for (size, tag) in [(65536, "64K"), (1 << 20, "1M")] {
            let s = Sample {
                v: memcpy_bw(size),
                aux: f64::NAN,
            };
            ctx.record(&format!("memcpy/{tag}"), Ok(s));
        }
    }
    for (tool, size, tag, test) in BW_ROWS {
        if ucx {
            let r = ctx.ucx_bw(test, size);
            ctx.record(&ucx_key(test, Some(tag)), r);
        }
        for via in [Via::Shm, Via::Packets, Via::Udp] {
            ctx.same_host_run(&bw_name(tool, tag), via, |c, setup| {
                c.perftest_bw(&libs, tool, size, setup)
            });
        }
    }
    if let (false, Some(q)) = (o.runs("lat"), qperf) {
        let r = q
            .test(ctx, &["-m", "8", "tcp_lat"], "qperf_lat", "latency")
            .map(|(us, _)| Sample {
                v: us,
                aux: f64::NAN,
            });
        ctx.record("tcp_lat", r);
    }
    // The machine's mode, next to the latencies that depend on it.
    let line = Sample {
        v: cacheline_us(),
        aux: f64::NAN,
    };
    ctx.record("cacheline", Ok(line));
    for (tool, events, test) in LAT_ROWS {
        let paired = ucx && !events && tool != "ib_read_lat";
        let mut tag_lat = None;
        if paired {
            let r = ctx.ucx_lat("tag_lat");
            tag_lat = r.as_ref().ok().map(|s| s.v);
            ctx.record(&ucx_key("tag_lat", None), r);
        }
        if let (true, Some(t)) = (ucx, test.filter(|t| *t != "tag_lat")) {
            let r = ctx.ucx_lat(t);
            ctx.record(&ucx_key(t, None), r);
        }
        for via in [Via::Shm, Via::Udp] {
            let v = ctx.same_host_run(&lat_name(tool, events), via, |c, setup| {
                c.perftest_lat(&libs, tool, events, setup)
            });
            if let (Via::Shm, Some(v), Some(u)) = (via, v, tag_lat) {
                let s = Sample {
                    v: v / u,
                    aux: f64::NAN,
                };
                ctx.record(&pair_key(tool, "tag_lat"), Ok(s));
            }
        }
    }
}

/// The note printed (and put in the report) when `ucx_perftest` is missing.
pub(crate) fn ucx_missing_note() -> String {
    "UCX rows skipped: `ucx_perftest` not found (Debian: apt-get install ucx-utils, \
     or ./scripts/install-deps.sh)"
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHM: &str = "# softrdma-stats 1\npid 10\ndevice softrdma0\nwhen exit\n\
                       datagrams_sent 2\nshm_doorbells 0\nshm_tx 98\nshm_rx 50\n\
                       # softrdma-stats 1\npid 11\ndevice softrdma0\nwhen exit\n\
                       datagrams_sent 0\nshm_tx 50\nshm_rx 98\n";
    const UDP: &str = "# softrdma-stats 1\npid 10\nwhen exit\ndatagrams_sent 100\n\
                       # softrdma-stats 1\npid 11\nwhen exit\ndatagrams_sent 50\n";

    #[test]
    fn path_checks_accept_the_path_asked_for() {
        assert_eq!(check_path(SHM, Via::Shm), Ok(148.0 / 150.0));
        assert_eq!(check_path(UDP, Via::Udp), Ok(0.0));
        // Counters present but nothing through lanes: still UDP.
        let zero = UDP.replace("datagrams_sent 50\n", "datagrams_sent 50\nshm_tx 0\n");
        assert_eq!(check_path(&zero, Via::Udp), Ok(0.0));
    }

    #[test]
    fn path_checks_reject_the_other_path() {
        let e = check_path(UDP, Via::Shm).unwrap_err();
        assert!(e.contains("process 10 ran over UDP"), "{e}");
        let e = check_path(SHM, Via::Udp).unwrap_err();
        assert!(e.contains("98 datagrams through lanes"), "{e}");
        let half = SHM.replace("shm_tx 50", "shm_tx 0");
        let e = check_path(&half, Via::Shm).unwrap_err();
        assert!(e.contains("process 11") && e.contains("shm_tx is 0"), "{e}");
        let one = &SHM[..SHM.rfind("# softrdma-stats").unwrap()];
        assert!(
            check_path(one, Via::Shm)
                .unwrap_err()
                .contains("of 1 process")
        );
        assert!(check_path("", Via::Udp).is_err());
    }
}
