//! What the two peer programs `verbs_peer` and `fault_peer` share: an RC QP
//! with one region of every right, the TCP side channel on which the two
//! sides meet (newline-terminated text lines), the `HELLO` that connects the
//! QPs, seeded patterns, completion waits that share a small machine, and
//! the closing `STATS` line the tests parse.

use softrdma::verbs::{Access, ConnectParams, Context, Cq, Gid, Mr, Mtu, Qp, QpInit, QpType, Wc};
use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// Every right a region can have.
pub(crate) const ALL: Access = Access(
    Access::LOCAL_WRITE.0
        | Access::REMOTE_WRITE.0
        | Access::REMOTE_READ.0
        | Access::REMOTE_ATOMIC.0,
);

/// A seeded byte pattern (xorshift64*).
pub(crate) fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        v.extend_from_slice(&s.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.truncate(len);
    v
}

/// The native-endian 64-bit word at `off`.
pub(crate) fn u64_at(b: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(b[off..off + 8].try_into().expect("8 bytes"))
}

/// Polls `cq` until `n` completions arrived, for at most `limit`. Unlike
/// `Cq::poll_blocking` it backs off (yield, then sleeps of `idle`) while
/// nothing arrives, so that two peers and their progress threads share a
/// 2-CPU test machine without starving each other.
pub(crate) fn wait_wcs(
    cq: &Cq,
    n: usize,
    limit: Duration,
    idle: Duration,
) -> Result<Vec<Wc>, String> {
    let t0 = Instant::now();
    let mut last = Instant::now();
    let mut v = Vec::with_capacity(n);
    while v.len() < n {
        let k = v.len();
        cq.poll(&mut v, n - k)
            .map_err(|e| format!("poll_cq: {e}"))?;
        if v.len() > k {
            last = Instant::now();
        } else if t0.elapsed() > limit {
            return Err(format!("{} of {n} completions after {limit:?}", v.len()));
        } else if last.elapsed() < Duration::from_micros(200) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(idle);
        }
    }
    Ok(v)
}

/// One side's RC QP on the process's device, in INIT with every remote
/// right, its CQ and its region.
pub(crate) struct RcSide {
    pub(crate) ctx: Context,
    pub(crate) qp: Qp,
    pub(crate) cq: Cq,
    pub(crate) mr: Mr,
}

impl RcSide {
    /// Opens the device and sets up the QP with a region of `len` bytes.
    pub(crate) fn open(len: usize) -> Result<RcSide, String> {
        let e = |what: &'static str| move |err: softrdma::Error| format!("{what}: {err}");
        let ctx = Context::open().map_err(e("open device"))?;
        let pd = ctx.alloc_pd().map_err(e("alloc_pd"))?;
        let mr = pd.alloc_mr(len, ALL).map_err(e("alloc_mr"))?;
        let cq = ctx.create_cq(256, None).map_err(e("create_cq"))?;
        let qp = pd
            .create_qp(&QpInit::new(QpType::Rc, &cq, &cq))
            .map_err(e("create_qp"))?;
        qp.to_init(
            Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC,
            0,
        )
        .map_err(e("to_init"))?;
        Ok(RcSide { ctx, qp, cq, mr })
    }

    /// Swaps `HELLO`s with the peer over `ch` and connects the QP to the
    /// peer's (our first PSN `psn`, path MTU `mtu`, local ACK timeout
    /// exponent `timeout`); both sides then pass the `READY` barrier.
    /// Returns what the peer said.
    pub(crate) fn connect(
        &self,
        ch: &mut Chan,
        psn: u32,
        mtu: Mtu,
        timeout: u8,
    ) -> Result<Hello, String> {
        let (qp, me) = (&self.qp, self.ctx.local_addr().ip());
        ch.send(&format!(
            "HELLO {} {psn} {me} {} {}",
            qp.qpn(),
            self.mr.addr(),
            self.mr.rkey()
        ))?;
        let peer = Hello::parse(&ch.expect("HELLO")?)?;
        let mut cp = ConnectParams::new(peer.qpn, Gid::from_ip(peer.ip), peer.psn, psn);
        cp.mtu = mtu;
        cp.timeout = timeout;
        qp.connect(&cp).map_err(|e| format!("connect: {e}"))?;
        println!(
            "connected: QPN {:#x} PSN {psn:#x} at {me} <-> QPN {:#x} PSN {:#x} at {}",
            qp.qpn(),
            peer.qpn,
            peer.psn,
            peer.ip
        );
        ch.barrier("READY")?;
        Ok(peer)
    }

    /// The transport counters the tests read, as one `STATS` line.
    pub(crate) fn stats_line(&self) -> String {
        let (s, sock) = self.ctx.stats();
        format!(
            "STATS tx_packets={} rx_packets={} retransmits={} timeouts={} tx_nak_seq={} \
             rx_nak={} drop_out_of_seq={} rx_duplicates={} drop_bad_icrc={} \
             drop_malformed={} socket={sock:?}",
            s.tx_packets,
            s.rx_packets,
            s.retransmits,
            s.timeouts,
            s.tx_nak_seq,
            s.rx_nak,
            s.drop_out_of_seq,
            s.rx_duplicates,
            s.drop_bad_icrc,
            s.drop_malformed
        )
    }
}

/// What one side tells the other at the start: its QP, first PSN, address
/// and region.
pub(crate) struct Hello {
    pub(crate) qpn: u32,
    pub(crate) psn: u32,
    pub(crate) ip: IpAddr,
    pub(crate) addr: u64,
    pub(crate) rkey: u32,
}

impl Hello {
    fn parse(l: &str) -> Result<Hello, String> {
        let f: Vec<&str> = l.split_whitespace().collect();
        let bad = || format!("bad HELLO {l:?}");
        if f.len() != 6 {
            return Err(bad());
        }
        Ok(Hello {
            qpn: f[1].parse().map_err(|_| bad())?,
            psn: f[2].parse().map_err(|_| bad())?,
            ip: f[3].parse().map_err(|_| bad())?,
            addr: f[4].parse().map_err(|_| bad())?,
            rkey: f[5].parse().map_err(|_| bad())?,
        })
    }
}

/// The TCP side channel: newline-terminated text lines.
pub(crate) struct Chan {
    r: BufReader<TcpStream>,
    w: TcpStream,
}

impl Chan {
    /// The server (`server` `None`) accepts one connection on `port`; the
    /// client connects to `server`, retrying for a while since the server
    /// may not listen yet. Reads wait at most `wait`.
    pub(crate) fn open(server: Option<&str>, port: u16, wait: Duration) -> Result<Chan, String> {
        let s = match server {
            None => {
                let l = TcpListener::bind(("0.0.0.0", port))
                    .map_err(|e| format!("listen on port {port}: {e}"))?;
                l.accept().map_err(|e| format!("accept: {e}"))?.0
            }
            Some(host) => {
                let t0 = Instant::now();
                loop {
                    match TcpStream::connect((host, port)) {
                        Ok(s) => break s,
                        Err(e) if t0.elapsed() > Duration::from_secs(20) => {
                            return Err(format!("connect to {host}:{port}: {e}"));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            }
        };
        s.set_read_timeout(Some(wait))
            .map_err(|e| format!("side channel timeout: {e}"))?;
        let _ = s.set_nodelay(true);
        Ok(Chan {
            r: BufReader::new(s.try_clone().map_err(|e| format!("side channel: {e}"))?),
            w: s,
        })
    }

    pub(crate) fn send(&mut self, line: &str) -> Result<(), String> {
        self.w
            .write_all(format!("{line}\n").as_bytes())
            .map_err(|e| format!("side channel write: {e}"))
    }

    pub(crate) fn recv(&mut self) -> Result<String, String> {
        let mut s = String::new();
        match self.r.read_line(&mut s) {
            Ok(0) => Err("side channel closed by the peer".into()),
            Ok(_) => Ok(s.trim_end().to_string()),
            Err(e) => Err(format!("side channel read: {e}")),
        }
    }

    /// The peer's next line, which must start with the word `what`.
    pub(crate) fn expect(&mut self, what: &str) -> Result<String, String> {
        let l = self.recv()?;
        if l.split_whitespace().next() == Some(what) {
            Ok(l)
        } else {
            Err(format!("expected {what} from the peer, got {l:?}"))
        }
    }

    /// Both sides say `what` and wait for the other's (the first words must
    /// match); returns the peer's line.
    pub(crate) fn barrier(&mut self, what: &str) -> Result<String, String> {
        self.send(what)?;
        self.expect(what.split_whitespace().next().unwrap_or(what))
    }
}
