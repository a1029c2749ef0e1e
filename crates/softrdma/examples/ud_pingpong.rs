//! `ibv_ud_pingpong` on softrdma: the same command line, TCP exchange, protocol
//! and output as rdma-core's program, so either side can be the C one.
//!
//! ```text
//! SOFTRDMA_ADDR=127.0.0.1 cargo run -p softrdma --example ud_pingpong -- -g 0
//! SOFTRDMA_ADDR=127.0.0.2 cargo run -p softrdma --example ud_pingpong -- -g 0 127.0.0.1
//! ```
//!
//! Like `rc_pingpong`, over an unreliable-datagram QP: sends go through an
//! address handle to the peer's QPN with Q_Key 0x11111111, and every receive
//! buffer is `size + 40` bytes because UD receives start with the 40-byte GRH
//! area. Messages must fit the port MTU (4096).

#[path = "common/pingpong.rs"]
mod pingpong;

use clap::{ArgAction, Parser};
use pingpong::{Dest, LoopOpts, Pp};
use softrdma::verbs::{Gid, QpAttr, QpAttrMask as M, QpState, QpType};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "ud_pingpong",
    about = "UD SEND ping-pong; without <host> start a server and wait for connection"
)]
struct Args {
    /// Listen on/connect to port <port>.
    #[arg(short = 'p', long, default_value = "18515", value_parser = pingpong::c_port)]
    port: u16,
    /// Use IB device <dev> (default first device found).
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Use port <port> of IB device.
    #[arg(short = 'i', long = "ib-port", default_value = "1", value_parser = pingpong::c_i32)]
    ib_port: i32,
    /// Size of message to exchange.
    #[arg(short = 's', long, default_value = "1024", value_parser = pingpong::c_u32)]
    size: u32,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value = "500", value_parser = pingpong::c_u32)]
    rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value = "1000", value_parser = pingpong::c_u32)]
    iters: u32,
    /// Send messages with service level <SL>.
    #[arg(short = 'l', long, default_value = "0", value_parser = pingpong::c_u32)]
    sl: u32,
    /// Sleep on CQ events (default poll).
    #[arg(short = 'e', long, action = ArgAction::Count)]
    events: u8,
    /// Local port gid index.
    #[arg(short = 'g', long = "gid-idx", default_value = "-1", allow_negative_numbers = true,
          value_parser = pingpong::c_i32)]
    gid_idx: i32,
    /// Validate received buffer.
    #[arg(short = 'c', long)]
    chk: bool,
    /// Server to connect to (none: be the server).
    host: Option<String>,
}

fn main() -> ExitCode {
    pingpong::main_with(run)
}

/// `pp_connect_ctx`: RTR, RTS with our PSN, then the address handle to `rem`.
fn connect(
    pp: &mut Pp,
    port: u8,
    my_psn: u32,
    sl: u8,
    rem: &Dest,
    gid_idx: i32,
) -> Result<(), String> {
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    pp.qp
        .modify(&a, M::STATE)
        .map_err(|e| format!("Failed to modify QP to RTR\n  ({e})"))?;
    a.qp_state = QpState::Rts;
    a.sq_psn = my_psn;
    pp.qp
        .modify(&a, M::STATE | M::SQ_PSN)
        .map_err(|e| format!("Failed to modify QP to RTS\n  ({e})"))?;
    let av = rem.av(port, sl, gid_idx, 64);
    let ah = pp
        .pd
        .create_ah(av)
        .map_err(|e| format!("Failed to create AH\n  ({e})"))?;
    pp.ah = Some(ah);
    pp.remote_qpn = rem.qpn;
    Ok(())
}

fn run(args: &Args) -> Result<(), String> {
    if args.ib_port < 1 {
        return Err("invalid --ib-port (must be at least 1)".into());
    }
    let size = args.size;
    let ctx = pingpong::open_device(args.ib_dev.as_deref())?;
    let ib_port = u8::try_from(args.ib_port).unwrap_or(u8::MAX);
    let port_info = ctx
        .query_port(ib_port)
        .map_err(|_| format!("Unable to query port info for port {}", args.ib_port))?;
    let mtu = 1u32 << (port_info.active_mtu + 7);
    if size > mtu {
        return Err(format!("Requested size larger than port MTU ({mtu})"));
    }
    let channel = pingpong::comp_channel(&ctx, args.events > 0)?;
    let mut pp = Pp::new(&ctx, channel.as_ref(), QpType::Ud, size, args.rx_depth)?;
    pp.to_init(ib_port)?;

    let routs = pp.start(channel.as_ref())?;
    let portinfo = ctx
        .query_port(ib_port)
        .map_err(|e| format!("Couldn't get port info ({e})"))?;
    let gid = if args.gid_idx >= 0 {
        ctx.query_gid(ib_port, args.gid_idx as usize)
            .map_err(|_| format!("Could not get local gid for gid index {}", args.gid_idx))?
    } else {
        Gid::default()
    };
    let me = pp.dest(portinfo.lid, gid);
    // Sic: the C program prints a colon before "GID" on this line only.
    pingpong::print_address("local address: ", &me, ":");
    let sl = args.sl as u8;
    pingpong::exchange(args.host.as_deref(), args.port, &me, |rem| {
        connect(&mut pp, ib_port, me.psn, sl, rem, args.gid_idx)
    })?;
    let opts = LoopOpts {
        iters: args.iters,
        client: args.host.is_some(),
        chk: args.chk,
    };
    pp.ping_pong(channel.as_ref(), routs, &opts, |e, _| e)
}
