//! Request/response echo over rdmalib messages (the C twin is
//! `crates/rdmalib-capi/examples/echo.c`; either side can be either language).
//!
//! ```text
//! SOFTRDMA_ADDR=127.0.0.1 cargo run -p softrdma-rdmalib --example rdmalib_echo              # server
//! SOFTRDMA_ADDR=127.0.0.2 cargo run -p softrdma-rdmalib --example rdmalib_echo -- 127.0.0.1 # client
//! ```
//!
//! The server accepts one client and sends every message back until the
//! client disconnects. The client sends `-n` messages of `-s` bytes (a
//! different pattern each), checks each answer and prints the average round
//! trip. `-e` waits on completion channels instead of polling.

use clap::Parser;
use rdmalib::{Client, Config, Error, Mode, Server};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, Parser)]
#[command(
    name = "rdmalib_echo",
    about = "rdmalib request/response echo; without <host> serve one client"
)]
struct Args {
    /// Server: address to listen on.
    #[arg(short = 'a', long, default_value = "0.0.0.0")]
    addr: IpAddr,
    /// Port to listen on / connect to (server: 0 picks a free one).
    #[arg(short = 'p', long, default_value_t = 7471)]
    port: u16,
    /// Client: number of requests.
    #[arg(short = 'n', long, default_value_t = 1000)]
    count: u32,
    /// Client: bytes per request (the server accepts up to 1 MiB).
    #[arg(short = 's', long, default_value_t = 64)]
    size: usize,
    /// Sleep on completion events instead of polling.
    #[arg(short = 'e', long)]
    events: bool,
    /// The server to connect to (no host: be the server).
    host: Option<String>,
}

/// Largest message either side accepts.
const MAX_MESSAGE: usize = 1 << 20;

fn config(a: &Args) -> Config {
    Config {
        max_message: MAX_MESSAGE,
        buffer_size: 4096,
        ..Config::with_mode(if a.events { Mode::Event } else { Mode::Polling })
    }
}

fn request(i: u32, size: usize) -> Vec<u8> {
    (0..size)
        .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) as u8)
        .collect()
}

fn server(a: &Args) -> rdmalib::Result<()> {
    let mut server = Server::bind(SocketAddr::new(a.addr, a.port), config(a))?;
    println!("listening on {}", server.local_addr());
    std::io::stdout().flush()?;
    let mut conn = server.accept()?;
    println!("client {:?} connected", conn.peer_addr());
    let mut n = 0u64;
    loop {
        match conn.recv() {
            Ok(msg) => {
                conn.send(&msg)?;
                n += 1;
            }
            Err(Error::Disconnected) => break,
            Err(e) => return Err(e),
        }
    }
    println!("echoed {n} messages; client disconnected");
    conn.close()
}

fn client(a: &Args, host: &str) -> rdmalib::Result<()> {
    let addr = (host, a.port)
        .to_socket_addrs()?
        .find(|s| s.is_ipv4())
        .ok_or_else(|| Error::InvalidArgument(format!("cannot resolve {host}")))?;
    let mut conn = Client::new(addr, config(a))?.connect()?;
    let t0 = Instant::now();
    for i in 0..a.count {
        let req = request(i, a.size);
        conn.send(&req)?;
        let resp = conn.recv()?;
        if resp != req {
            return Err(Error::Protocol(format!(
                "echo {i} differs from the request"
            )));
        }
    }
    let us = t0.elapsed().as_secs_f64() * 1e6 / f64::from(a.count.max(1));
    println!(
        "{} round trips of {} bytes: {us:.1} us each ({} mode)",
        a.count,
        a.size,
        if a.events { "event" } else { "polling" }
    );
    conn.close()
}

fn main() -> ExitCode {
    let a = Args::parse();
    let r = match &a.host {
        None => server(&a),
        Some(h) => client(&a, h),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdmalib_echo: {e}");
            ExitCode::FAILURE
        }
    }
}
