//! File transfer with one-sided writes (the C twin is
//! `crates/rdmalib-capi/examples/file_transfer.c`; the protocol is the same,
//! so either side can be either language).
//!
//! ```text
//! SOFTRDMA_ADDR=127.0.0.1 cargo run -p softrdma-rdmalib --example rdmalib_file_transfer -- -o /tmp/copy
//! SOFTRDMA_ADDR=127.0.0.2 cargo run -p softrdma-rdmalib --example rdmalib_file_transfer -- -f FILE 127.0.0.1
//! ```
//!
//! Protocol (messages are rdmalib messages, integers big-endian):
//!
//! 1. client → server message `"RDLF"` + file size (u64);
//! 2. server → client message `"RDLS"` + slot size (u64): its buffer holds
//!    two chunk slots, at offsets 0 and slot size (it may hold more, e.g.
//!    room for messages); the client sends chunks of
//!    `min(slot size, its own buffer)` bytes;
//! 3. for each chunk `k` the client RDMA-WRITEs it into slot `k % 2` and
//!    notifies the write (offset, length); the server appends the slot's
//!    bytes to the output file and answers with an empty message (the
//!    ack): the slot is free again. The client keeps at most two chunks
//!    unacknowledged;
//! 4. client → server message `"RDLE"` + CRC-32 (IEEE, u32) of the file;
//! 5. server → client message `"OK"` if the CRC of what it wrote matches,
//!    `"BAD"` otherwise; the client disconnects.
//!
//! Exit status 0 only if the checksums match.

mod common;

use clap::Parser;
use common::{Endpoint, Side};
use rdmalib::{Client, Config, Connection, Error, NotifyKind};
use std::fs::File;
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

#[derive(Debug, Parser)]
#[command(
    name = "rdmalib_file_transfer",
    about = "rdmalib file transfer: the client RDMA-writes a file into the server's buffer"
)]
struct Args {
    #[command(flatten)]
    at: Endpoint<7472>,
    /// Bytes per chunk (the server's buffer is two chunks).
    #[arg(short = 'c', long, default_value_t = 64 << 10)]
    chunk: usize,
    /// Server: where to write the received file.
    #[arg(short = 'o', long)]
    out: Option<PathBuf>,
    /// Client: the file to send.
    #[arg(short = 'f', long)]
    file: Option<PathBuf>,
    #[command(flatten)]
    side: Side,
}

fn config(a: &Args, buffer_size: usize) -> Config {
    Config {
        buffer_size,
        max_message: 64,
        ..Config::with_mode(a.side.mode())
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::Protocol(msg.into())
}

fn server(a: &Args, out: &PathBuf) -> rdmalib::Result<bool> {
    let mut conn = a.at.accept(config(a, 2 * a.chunk))?;
    let header = conn.recv()?;
    if header.len() != 12 || &header[..4] != b"RDLF" {
        return Err(bad("expected the RDLF header"));
    }
    let size = u64::from_be_bytes(header[4..12].try_into().expect("8 bytes"));
    let mut slots = b"RDLS".to_vec();
    slots.extend_from_slice(&(a.chunk as u64).to_be_bytes());
    conn.send(&slots)?;
    let mut file = File::create(out)?;
    let mut crc = crc32fast::Hasher::new();
    let (mut got, mut chunks) = (0u64, 0u64);
    while got < size {
        let n = conn.wait_notification()?;
        if n.kind != NotifyKind::Write || n.len == 0 || got + n.len > size {
            return Err(bad(format!("unexpected notification {n:?}")));
        }
        let data = conn.buffer().to_vec(n.offset as usize, n.len as usize)?;
        file.write_all(&data)?;
        crc.update(&data);
        got += n.len;
        chunks += 1;
        conn.send(&[])?; // ack: the slot is free
    }
    file.sync_all()?;
    let trailer = conn.recv()?;
    if trailer.len() != 8 || &trailer[..4] != b"RDLE" {
        return Err(bad("expected the RDLE trailer"));
    }
    let theirs = u32::from_be_bytes(trailer[4..8].try_into().expect("4 bytes"));
    let ours = crc.finalize();
    let ok = ours == theirs;
    conn.send(if ok { b"OK" } else { b"BAD" })?;
    println!(
        "received {got} bytes in {chunks} chunks, crc32 {ours:08x}: {}",
        if ok { "OK" } else { "MISMATCH" }
    );
    // The client hangs up after reading the verdict.
    match conn.recv() {
        Err(Error::Disconnected) => {}
        Ok(_) => return Err(bad("message after the verdict")),
        Err(e) => return Err(e),
    }
    conn.close()?;
    Ok(ok)
}

/// Waits for the ack of the oldest chunk in flight.
fn ack(conn: &mut Connection) -> rdmalib::Result<()> {
    let m = conn.recv()?;
    if !m.is_empty() {
        return Err(bad("expected an empty ack"));
    }
    Ok(())
}

fn client(a: &Args, host: &str, path: &PathBuf) -> rdmalib::Result<bool> {
    let addr = a.at.resolve(host)?;
    let mut file = File::open(path)?;
    let size = file.metadata()?.len();
    let mut conn = Client::new(addr, config(a, a.chunk))?.connect()?;
    let mut header = b"RDLF".to_vec();
    header.extend_from_slice(&size.to_be_bytes());
    conn.send(&header)?;
    let slots = conn.recv()?;
    if slots.len() != 12 || &slots[..4] != b"RDLS" {
        return Err(bad("expected the RDLS answer"));
    }
    let slot = u64::from_be_bytes(slots[4..12].try_into().expect("8 bytes"));
    // Two slots in the server's buffer, each at most our own buffer.
    let chunk = (slot as usize).min(conn.buffer().len());
    if chunk == 0 || 2 * slot > conn.remote().len {
        return Err(bad(format!("bad slot size {slot}")));
    }
    let t0 = Instant::now();
    let mut crc = crc32fast::Hasher::new();
    let mut data = vec![0u8; chunk];
    let (mut sent, mut k, mut in_flight) = (0u64, 0u64, 0);
    while sent < size {
        let n = (size - sent).min(chunk as u64) as usize;
        file.read_exact(&mut data[..n])?;
        crc.update(&data[..n]);
        if in_flight == 2 {
            ack(&mut conn)?;
            in_flight -= 1;
        }
        let at = (k % 2) * slot;
        conn.buffer().write(0, &data[..n])?;
        conn.write(0, at, n)?;
        conn.notify_write(at, n as u64)?;
        in_flight += 1;
        sent += n as u64;
        k += 1;
    }
    while in_flight > 0 {
        ack(&mut conn)?;
        in_flight -= 1;
    }
    let sum = crc.finalize();
    let mut trailer = b"RDLE".to_vec();
    trailer.extend_from_slice(&sum.to_be_bytes());
    conn.send(&trailer)?;
    let verdict = conn.recv()?;
    let secs = t0.elapsed().as_secs_f64();
    let ok = verdict == b"OK";
    println!(
        "sent {sent} bytes in {k} chunks, crc32 {sum:08x}: server says {} ({:.1} MB/s)",
        String::from_utf8_lossy(&verdict),
        sent as f64 / secs.max(1e-9) / 1e6
    );
    conn.close()?;
    Ok(ok)
}

fn main() -> ExitCode {
    let a = Args::parse();
    let r = match (&a.side.host, &a.out, &a.file) {
        (None, Some(out), None) => server(&a, out),
        (Some(h), None, Some(f)) => client(&a, h, f),
        _ => {
            eprintln!("usage: rdmalib_file_transfer -o OUT (server) | -f FILE HOST (client)");
            return ExitCode::from(2);
        }
    };
    common::exit("rdmalib_file_transfer", r)
}
