//! One member of an all-to-all mesh (tests/mesh.rs): every process connects
//! to every other through the connection manager and, round after round,
//! RDMA WRITEs a pattern into each peer's buffer, notifies it, checks what
//! the peer wrote into its own buffer byte for byte, and meets the peer at a
//! message barrier before the next round.
//!
//! ```text
//! rdmalib_mesh --me I --peers ADDR:PORT,ADDR:PORT,... [--rounds N] [--size BYTES]
//! ```
//!
//! Process `I` listens on the `I`th address and connects to every later one
//! (an earlier one connects to it). It prints `CONNECTED n` once all its
//! connections are up and `SLOT s` (its host-device member slot), then one
//! line per peer, `PAIR i-j OK rounds=N` or
//! `PAIR i-j DOWN round=r error=...` (a peer that died), and exits 0 unless
//! a check failed (`PAIR i-j BAD ...`, exit 1).

use rdmalib::{Client, Config, Connection, Mode, NotifyKind, Server};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Each side's bytes per round (written into the peer at offset `SIZE`).
const DEFAULT_SIZE: usize = 16 << 10;
/// Pause between rounds, so a kill lands in the middle of the run.
const PACE: Duration = Duration::from_millis(5);

fn main() -> ExitCode {
    match run() {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("mesh: {e}");
            ExitCode::from(2)
        }
    }
}

struct Args {
    me: usize,
    peers: Vec<SocketAddr>,
    rounds: u32,
    size: usize,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        me: usize::MAX,
        peers: Vec::new(),
        rounds: 100,
        size: DEFAULT_SIZE,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for kv in v.chunks(2) {
        let (k, val) = match kv {
            [k, val] => (k.as_str(), val.as_str()),
            _ => return Err(format!("{kv:?}: expected --key value pairs")),
        };
        let bad = |e: &dyn std::fmt::Display| format!("{k} {val}: {e}");
        match k {
            "--me" => a.me = val.parse().map_err(|e| bad(&e))?,
            "--rounds" => a.rounds = val.parse().map_err(|e| bad(&e))?,
            "--size" => a.size = val.parse().map_err(|e| bad(&e))?,
            "--peers" => {
                a.peers = val
                    .split(',')
                    .map(|p| p.parse().map_err(|e| bad(&e)))
                    .collect::<Result<_, _>>()?
            }
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if a.me >= a.peers.len() {
        return Err("--me must index --peers".into());
    }
    Ok(a)
}

fn config(size: usize) -> Config {
    Config {
        buffer_size: 2 * size,
        max_message: 64,
        recv_depth: 8,
        mode: Mode::Event,
        timeout: Some(Duration::from_secs(30)),
    }
}

/// The bytes process `from` writes to process `to` in round `r`.
fn pattern(from: usize, to: usize, r: u32, len: usize) -> Vec<u8> {
    let mut s = ((from as u64) << 40 | (to as u64) << 32 | u64::from(r)) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect()
}

enum Outcome {
    Ok,
    Down(u32, String),
    Bad(String),
}

fn run() -> Result<bool, String> {
    let a = args()?;
    let (me, n) = (a.me, a.peers.len());
    let mut server = Server::bind(a.peers[me], config(a.size)).map_err(|e| format!("bind: {e}"))?;
    let (tx, rx) = mpsc::channel::<(usize, Connection)>();
    let accepts = {
        let tx = tx.clone();
        std::thread::spawn(move || -> Result<(), String> {
            for _ in 0..me {
                let mut c = server.accept().map_err(|e| format!("accept: {e}"))?;
                let hello = c.recv().map_err(|e| format!("hello: {e}"))?;
                let j = String::from_utf8_lossy(&hello)
                    .strip_prefix("HELLO ")
                    .and_then(|s| s.parse().ok())
                    .ok_or("bad hello")?;
                tx.send((j, c)).map_err(|e| e.to_string())?;
            }
            Ok(())
        })
    };
    for j in me + 1..n {
        let t0 = Instant::now();
        let mut c = loop {
            match Client::new(a.peers[j], config(a.size)).and_then(Client::connect) {
                Ok(c) => break c,
                Err(e) if t0.elapsed() > Duration::from_secs(30) => {
                    return Err(format!("connect to {j}: {e}"));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        c.send(format!("HELLO {me}").as_bytes())
            .map_err(|e| format!("hello to {j}: {e}"))?;
        tx.send((j, c)).map_err(|e| e.to_string())?;
    }
    drop(tx);
    accepts.join().map_err(|_| "accept thread panicked")??;
    let conns: Vec<(usize, Connection)> = rx.iter().collect();
    println!("CONNECTED {}", conns.len());
    // The host-device member slot: bits 23..16 of this process's QPNs.
    if let Some(q) = conns
        .first()
        .and_then(|(_, c)| c.link())
        .and_then(|(id, ..)| id.qp())
    {
        println!("SLOT {}", q.qpn() >> 16);
    }
    let workers: Vec<_> = conns
        .into_iter()
        .map(|(j, c)| {
            let (rounds, size) = (a.rounds, a.size);
            std::thread::spawn(move || (j, exchange(c, me, j, rounds, size)))
        })
        .collect();
    let mut ok = true;
    for w in workers {
        let (j, o) = w.join().map_err(|_| "worker panicked")?;
        match o {
            Outcome::Ok => println!("PAIR {me}-{j} OK rounds={}", a.rounds),
            Outcome::Down(r, e) => println!("PAIR {me}-{j} DOWN round={r} error={e}"),
            Outcome::Bad(e) => {
                println!("PAIR {me}-{j} BAD {e}");
                ok = false;
            }
        }
    }
    Ok(ok)
}

/// `rounds` rounds with peer `j`: WRITE + notify each way, check, barrier.
fn exchange(mut c: Connection, me: usize, j: usize, rounds: u32, size: usize) -> Outcome {
    for r in 0..rounds {
        let mut at = "write";
        let step = (|| -> rdmalib::Result<Option<String>> {
            c.buffer().write(0, &pattern(me, j, r, size))?;
            c.write(0, size as u64, size)?;
            at = "notify";
            c.notify_write(size as u64, size as u64)?;
            at = "wait_notification";
            let note = c.wait_notification()?;
            if note.kind != NotifyKind::Write || note.offset != size as u64 {
                return Ok(Some(format!("round {r}: unexpected notification")));
            }
            if c.buffer().to_vec(size, size)? != pattern(j, me, r, size) {
                return Ok(Some(format!("round {r}: bytes from {j} differ")));
            }
            at = "send";
            c.send(format!("DONE {r}").as_bytes())?;
            at = "recv";
            if c.recv()? != format!("DONE {r}").as_bytes() {
                return Ok(Some(format!("round {r}: barrier out of step")));
            }
            Ok(None)
        })();
        match step {
            Ok(None) => std::thread::sleep(PACE),
            Ok(Some(bad)) => return Outcome::Bad(bad),
            Err(e) => return Outcome::Down(r, format!("{at}:{}", e.to_string().replace(' ', "_"))),
        }
    }
    // One more exchange, not judged: a peer that closes right after its
    // last barrier can have its DREQ overtake the ACK of this side's last
    // message (then this side's send is flushed), so the judged rounds all
    // end before anyone closes or exits.
    if let Err(e) = c.send(b"END").and_then(|()| c.recv()) {
        eprintln!("pair {me}-{j}: after the last round: {e}");
    }
    Outcome::Ok
}
