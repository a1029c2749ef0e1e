//! Reading the reports of perftest, qperf, `ucx_perftest`, the `bench`
//! example and `SOFTRDMA_STATS` counter files.

use std::collections::BTreeMap;

/// perftest's bandwidth report: `BW average[MB/sec]` (MB = 2^20 bytes) in bytes/s.
pub(crate) fn perftest_bw(out: &str) -> Option<f64> {
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.contains("#bytes") && l.contains("BW average") {
            let cols: Vec<&str> = lines.next()?.split_whitespace().collect();
            return cols.get(3)?.parse::<f64>().ok().map(|v| v * 1048576.0);
        }
    }
    None
}

/// perftest's latency report: (typical = median, p99) in µs.
pub(crate) fn perftest_lat(out: &str) -> Option<(f64, f64)> {
    let mut lines = out.lines();
    while let Some(l) = lines.next() {
        if l.contains("#bytes") && l.contains("t_typical") {
            let head: Vec<&str> = l.split_whitespace().collect();
            let typ = head.iter().position(|c| c.starts_with("t_typical"))?;
            let cols: Vec<f64> = lines
                .next()?
                .split_whitespace()
                .map_while(|c| c.parse().ok())
                .collect();
            // "99% percentile[usec]" is two words in the header, one value.
            let p99 = head.iter().position(|c| *c == "99%")?;
            return Some((*cols.get(typ)?, *cols.get(p99)?));
        }
    }
    None
}

/// A qperf result `name = value unit` in base units (bytes/s, or µs for times).
pub(crate) fn qperf(out: &str, name: &str) -> Option<f64> {
    let l = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name))?;
    let rhs = l.split_once('=')?.1;
    let mut it = rhs.split_whitespace();
    let v: f64 = it.next()?.parse().ok()?;
    let scale = match it.next()? {
        "bytes/sec" => 1.0,
        "KB/sec" => 1e3,
        "MB/sec" => 1e6,
        "GB/sec" => 1e9,
        "ns" => 1e-3,
        "us" => 1.0,
        "ms" => 1e3,
        "sec" => 1e6,
        _ => return None,
    };
    Some(v * scale)
}

/// A `key=value` of the `RESULT` line of the `bench` example.
pub(crate) fn result_field(out: &str, key: &str) -> Option<f64> {
    let l = out.lines().rev().find(|l| l.starts_with("RESULT "))?;
    l.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)?
        .1
        .parse()
        .ok()
}

/// `ucx_perftest`'s `Final:` line (the client prints it):
/// `Final: iterations, latency (µs) 50th percentile, average, overall,
/// bandwidth (MB/s, 2^20 bytes) average, overall, message rate average, overall`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct UcxFinal {
    pub(crate) iters: u64,
    /// Median latency in µs (one-way for the ping-pong tests, as UCX reports them).
    pub(crate) lat_median_us: f64,
    pub(crate) lat_avg_us: f64,
    /// Overall bandwidth in bytes/s.
    pub(crate) bw: f64,
}

/// The last `Final:` line of `ucx_perftest`'s output.
pub(crate) fn ucx_final(out: &str) -> Option<UcxFinal> {
    let l = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with("Final:"))?;
    let cols: Vec<f64> = l
        .split_whitespace()
        .skip(1)
        .map(|c| c.parse().ok())
        .collect::<Option<_>>()?;
    if cols.len() != 8 {
        return None;
    }
    Some(UcxFinal {
        iters: cols[0] as u64,
        lat_median_us: cols[1],
        lat_avg_us: cols[2],
        bw: cols[5] * 1048576.0,
    })
}

/// The blocks of a `SOFTRDMA_STATS` file, one per device (process): its
/// `key value` lines with a number as value (`pid`, counters; not `device`
/// or `addr`).
pub(crate) fn stats_blocks(text: &str) -> Vec<BTreeMap<String, u64>> {
    let mut blocks: Vec<BTreeMap<String, u64>> = Vec::new();
    for l in text.lines() {
        if l.starts_with("# softrdma-stats") {
            blocks.push(BTreeMap::new());
            continue;
        }
        let (Some(b), Some((k, v))) = (blocks.last_mut(), l.split_once(' ')) else {
            continue;
        };
        if let Ok(v) = v.trim().parse() {
            b.insert(k.to_owned(), v);
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_perftest_bw() {
        let out = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]\n 65536      32063            0.00               1001.94\t\t   0.016031\n";
        let bw = perftest_bw(out).unwrap();
        assert!((bw - 1001.94 * 1048576.0).abs() < 1.0);
    }

    #[test]
    fn parses_perftest_lat() {
        let out = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] \n 8       1000          10.22          10622.32      11.07    \t       58.65       \t491.04 \t\t860.02  \t\t10622.32\n";
        assert_eq!(perftest_lat(out), Some((11.07, 860.02)));
    }

    #[test]
    fn parses_qperf() {
        let out = "tcp_bw:\n    bw              =   766 MB/sec\n    msg_rate        =  11.7 K/sec\ntcp_lat:\n    latency        =  32.3 us\n";
        assert_eq!(qperf(out, "bw"), Some(766e6));
        assert_eq!(qperf(out, "latency"), Some(32.3));
        assert_eq!(qperf("    bw  =  1.39 GB/sec\n", "bw"), Some(1.39e9));
    }

    #[test]
    fn parses_result_line() {
        let out = "table\nRESULT write_Bps=1500000000 write_cpu_client=98.5 rtt_p50_us=NaN\n";
        assert_eq!(result_field(out, "write_Bps"), Some(1.5e9));
        assert_eq!(result_field(out, "write_cpu_client"), Some(98.5));
        assert!(result_field(out, "rtt_p50_us").unwrap().is_nan());
        assert_eq!(result_field(out, "nope"), None);
    }

    #[test]
    fn parses_ucx_final_line() {
        let out = "Waiting for connection...\n\
+--------------+--------------+------------------------------+---------------------+-----------------------+\n\
|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |\n\
+--------------+--------------+----------+---------+---------+----------+----------+-----------+-----------+\n\
Final:                 20000      1.172     1.211     1.211    51625.51   51625.51      826008      826008\n";
        let f = ucx_final(out).unwrap();
        assert_eq!(f.iters, 20000);
        assert_eq!(f.lat_median_us, 1.172);
        assert_eq!(f.lat_avg_us, 1.211);
        assert!((f.bw - 51625.51 * 1048576.0).abs() < 1.0);
        let lat = "Final:                100000      0.170     4.318     4.318        1.77       1.77      231591      231591\n";
        assert_eq!(ucx_final(lat).unwrap().lat_median_us, 0.170);
    }

    #[test]
    fn rejects_incomplete_ucx_output() {
        assert_eq!(ucx_final("Waiting for connection...\n"), None);
        assert_eq!(ucx_final("Final: 100 0.1 0.2\n"), None);
        assert_eq!(ucx_final("Final: 100 0.1 0.2 0.2 1.0 1.0 n/a 5\n"), None);
    }

    #[test]
    fn parses_stats_blocks() {
        let text = "# softrdma-stats 1\npid 10\ndevice softrdma0\naddr 127.0.0.1:4791\nwhen exit\n\
                    tx_packets 5\nshm_tx 4\nshm_rx 3\n\
                    # softrdma-stats 1\npid 11\ndevice softrdma0\naddr 127.0.0.1:4791\nwhen exit\n\
                    tx_packets 7\ndatagrams_sent 7\n";
        let b = stats_blocks(text);
        assert_eq!(b.len(), 2);
        assert_eq!(b[0].get("shm_tx"), Some(&4));
        assert_eq!(b[0].get("pid"), Some(&10));
        assert!(!b[0].contains_key("device"));
        assert_eq!(b[1].get("shm_tx"), None);
        assert_eq!(b[1].get("datagrams_sent"), Some(&7));
        assert!(stats_blocks("").is_empty());
        assert!(stats_blocks("shm_tx 3\n").is_empty());
    }
}
