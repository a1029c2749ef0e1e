//! The control channel between `perf` client and server: text lines over TCP.
//!
//! ```text
//! client → server  HELLO 1 <qpn> <psn> <gid> <addr> <rkey> <len> <mtu> <events 0|1>
//! server → client  HELLO 1 <qpn> <psn> <gid> <addr> <rkey> <len> <mtu> <events>
//! client → server  RUN <op> <bw|lat> <size>
//! server → client  READY                 (receives posted, sentinel cleared)
//!                  ... the test runs over RDMA; the client ends the tests the
//!                  server takes part in with a stop message over RDMA ...
//! server → client  END <messages>        (send tests and WRITE latency only)
//! client → server  STATS                 → STATS key=value ... (counters)
//! client → server  QUIT
//! either side      ERR <message>         (then closes)
//! ```
//!
//! `gid` is the device GID as an IPv6 address, `addr`/`rkey`/`len` the
//! peer's registered buffer (its first half is where peers write and read).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use softrdma::verbs::Gid;

use super::super::counters::Snapshot;
use super::super::{CliError, OrErr};

/// Protocol version in HELLO lines.
const VERSION: &str = "1";

/// One side's connection facts.
#[derive(Debug, Clone)]
pub(crate) struct Hello {
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) gid: Gid,
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
    pub(crate) len: u64,
    pub(crate) mtu: u32,
    pub(crate) events: bool,
}

impl Hello {
    pub(crate) fn to_line(&self) -> String {
        format!(
            "HELLO {VERSION} {} {} {} {} {} {} {} {}",
            self.qpn,
            self.psn,
            self.gid,
            self.addr,
            self.rkey,
            self.len,
            self.mtu,
            u8::from(self.events)
        )
    }

    pub(crate) fn parse(l: &str) -> Result<Hello, CliError> {
        if let Some(e) = l.strip_prefix("ERR ") {
            return Err(CliError::new(format!("peer refused: {e}")));
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        let bad = || {
            CliError::new(format!(
                "the peer does not speak softrdma perf's protocol (got {:?})",
                l.chars().take(60).collect::<String>()
            ))
        };
        if f.len() != 10 || f[0] != "HELLO" {
            return Err(bad());
        }
        if f[1] != VERSION {
            return Err(CliError::new(format!(
                "the peer speaks protocol version {}, this softrdma {VERSION}",
                f[1]
            )));
        }
        let gid: std::net::Ipv6Addr = f[4].parse().map_err(|_| bad())?;
        Ok(Hello {
            qpn: f[2].parse().map_err(|_| bad())?,
            psn: f[3].parse().map_err(|_| bad())?,
            gid: Gid(gid.octets()),
            addr: f[5].parse().map_err(|_| bad())?,
            rkey: f[6].parse().map_err(|_| bad())?,
            len: f[7].parse().map_err(|_| bad())?,
            mtu: f[8].parse().map_err(|_| bad())?,
            events: f[9] == "1",
        })
    }
}

/// Sends our HELLO and reads the peer's.
pub(crate) fn hello(ctl: &mut Ctl, mine: &Hello) -> Result<Hello, CliError> {
    ctl.send(&mine.to_line())?;
    let l = ctl.recv(Some(Duration::from_secs(10)))?;
    Hello::parse(&l)
}

/// A line-oriented TCP connection.
#[derive(Debug)]
pub(crate) struct Ctl {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Ctl {
    pub(crate) fn new(s: TcpStream) -> Result<Ctl, CliError> {
        let _ = s.set_nodelay(true);
        Ok(Ctl {
            r: BufReader::new(s.try_clone().or_err("control connection")?),
            w: s,
        })
    }

    pub(crate) fn send(&mut self, l: &str) -> Result<(), CliError> {
        self.w
            .write_all(format!("{l}\n").as_bytes())
            .or_err("control connection lost")
    }

    /// The next line, or `None` at a clean end of the connection.
    pub(crate) fn recv_or_eof(&mut self) -> Result<Option<String>, CliError> {
        self.r.get_ref().set_read_timeout(None).ok();
        let mut s = String::new();
        match self.r.read_line(&mut s) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(s.trim_end().to_string())),
            Err(e) => Err(CliError::new(format!("control connection: {e}"))),
        }
    }

    /// The next line, waiting at most `timeout` (`None`: no limit).
    pub(crate) fn recv(&mut self, timeout: Option<Duration>) -> Result<String, CliError> {
        self.r.get_ref().set_read_timeout(timeout).ok();
        let mut s = String::new();
        let r = match self.r.read_line(&mut s) {
            Ok(0) => Err(CliError::new("the peer closed the control connection")),
            Ok(_) => {
                let l = s.trim_end().to_string();
                match l.strip_prefix("ERR ") {
                    Some(e) => Err(CliError::new(format!("peer: {e}"))),
                    None => Ok(l),
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(CliError::new("the peer stopped answering"))
            }
            Err(e) => Err(CliError::new(format!("control connection: {e}"))),
        };
        self.r.get_ref().set_read_timeout(None).ok();
        r
    }

    /// Sends a line and returns the answer (10 s at most).
    pub(crate) fn ask(&mut self, l: &str) -> Result<String, CliError> {
        self.send(l)?;
        self.recv(Some(Duration::from_secs(10)))
    }

    /// Waits for a line starting with `word` and returns the rest.
    pub(crate) fn expect(&mut self, word: &str, timeout: Duration) -> Result<String, CliError> {
        let l = self.recv(Some(timeout))?;
        match l.strip_prefix(word) {
            Some(rest) => Ok(rest.trim().to_string()),
            None => Err(CliError::new(format!(
                "expected {word} from the peer, got {l:?}"
            ))),
        }
    }
}

/// `STATS pid=.. device=.. addr=.. k=v ...`.
pub(crate) fn stats_line(s: &Snapshot) -> String {
    let mut l = format!("STATS pid={} device={} addr={}", s.pid, s.device, s.addr);
    for (k, v) in &s.counters {
        l.push_str(&format!(" {k}={v}"));
    }
    l
}

pub(crate) fn parse_stats(l: &str) -> Result<Snapshot, CliError> {
    let rest = l
        .strip_prefix("STATS")
        .ok_or_else(|| CliError::new(format!("expected STATS, got {l:?}")))?;
    let mut s = Snapshot {
        when: "now".into(),
        ..Snapshot::default()
    };
    for kv in rest.split_whitespace() {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        match k {
            "pid" => s.pid = v.parse().unwrap_or(0),
            "device" => s.device = v.to_string(),
            "addr" => s.addr = v.to_string(),
            _ => {
                if let Ok(n) = v.parse() {
                    s.counters.push((k.to_string(), n));
                }
            }
        }
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_round_trip() {
        let h = Hello {
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from_ip("127.0.0.9".parse().unwrap()),
            addr: 0x7f00_1234_5000,
            rkey: 0xdead_beef,
            len: 1 << 20,
            mtu: 4096,
            events: true,
        };
        let l = h.to_line();
        assert!(l.contains("::ffff:127.0.0.9"), "{l}");
        let p = Hello::parse(&l).unwrap();
        assert_eq!(
            (p.qpn, p.psn, p.gid, p.addr, p.rkey),
            (h.qpn, h.psn, h.gid, h.addr, h.rkey)
        );
        assert_eq!((p.len, p.mtu, p.events), (h.len, h.mtu, h.events));
        assert!(Hello::parse("GET / HTTP/1.1").is_err());
        assert!(Hello::parse(&l.replacen(" 1 ", " 2 ", 1)).is_err());
    }

    #[test]
    fn stats_round_trip() {
        let s = Snapshot {
            pid: 3,
            device: "softrdma0".into(),
            addr: "127.0.0.2:4791".into(),
            when: "now".into(),
            counters: vec![("rx_packets".into(), 12), ("retransmits".into(), 0)],
        };
        assert_eq!(parse_stats(&stats_line(&s)).unwrap(), s);
    }
}
