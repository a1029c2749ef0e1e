//! Reading the reports of perftest, qperf and the `bench` example.

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
}
