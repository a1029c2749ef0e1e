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

mod common;

use clap::Parser;
use common::{Endpoint, Side};
use rdmalib::{Client, Config, Error};
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, Parser)]
#[command(
    name = "rdmalib_echo",
    about = "rdmalib request/response echo; without <host> serve one client"
)]
struct Args {
    #[command(flatten)]
    at: Endpoint<7471>,
    /// Client: number of requests.
    #[arg(short = 'n', long, default_value_t = 1000)]
    count: u32,
    /// Client: bytes per request (the server accepts up to 1 MiB).
    #[arg(short = 's', long, default_value_t = 64)]
    size: usize,
    #[command(flatten)]
    side: Side,
}

/// Largest message either side accepts.
const MAX_MESSAGE: usize = 1 << 20;

fn config(a: &Args) -> Config {
    Config {
        max_message: MAX_MESSAGE,
        buffer_size: 4096,
        ..Config::with_mode(a.side.mode())
    }
}

fn request(i: u32, size: usize) -> Vec<u8> {
    (0..size)
        .map(|k| (k as u32).wrapping_mul(31).wrapping_add(i.wrapping_mul(7)) as u8)
        .collect()
}

fn server(a: &Args) -> rdmalib::Result<()> {
    let mut conn = a.at.accept(config(a))?;
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
    let mut conn = Client::new(a.at.resolve(host)?, config(a))?.connect()?;
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
        if a.side.events { "event" } else { "polling" }
    );
    conn.close()
}

fn main() -> ExitCode {
    let a = Args::parse();
    let r = match &a.side.host {
        None => server(&a),
        Some(h) => client(&a, h),
    };
    common::exit("rdmalib_echo", r.map(|()| true))
}
