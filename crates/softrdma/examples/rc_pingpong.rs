//! `ibv_rc_pingpong` on softrdma: the same command line, TCP exchange, protocol
//! and output as rdma-core's program, so either side can be the C one.
//!
//! ```text
//! SOFTRDMA_ADDR=127.0.0.1 cargo run -p softrdma --example rc_pingpong -- -g 0
//! SOFTRDMA_ADDR=127.0.0.2 cargo run -p softrdma --example rc_pingpong -- -g 0 127.0.0.1
//! ```
//!
//! The server (no host argument) waits for one client on TCP port `-p`; the
//! client connects to it. They swap LID:QPN:PSN:GID, bring an RC QP to RTS and
//! bounce `-n` SEND messages of `-s` bytes: the client sends first, and each side
//! sends again once its previous send completed and a message arrived. The
//! device is the process's own (`Context::open`), so `SOFTRDMA_ADDR` chooses the
//! address; on RoCE both sides need `-g 0` (without a GID there is no route).

#[path = "common/pingpong.rs"]
mod pingpong;

use clap::{ArgAction, Parser};
use pingpong::{Dest, LoopOpts, Pp};
use softrdma::verbs::{Gid, Mtu, Qp, QpAttr, QpAttrMask as M, QpState, QpType};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "rc_pingpong",
    about = "RC SEND ping-pong; without <host> start a server and wait for connection"
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
    #[arg(short = 's', long, default_value = "4096", value_parser = pingpong::c_u32)]
    size: u32,
    /// Path MTU (256, 512, 1024, 2048 or 4096).
    #[arg(short = 'm', long, default_value = "1024", value_parser = parse_mtu)]
    mtu: Mtu,
    /// Number of receives to post at a time.
    #[arg(short = 'r', long = "rx-depth", default_value = "500", value_parser = pingpong::c_u32)]
    rx_depth: u32,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value = "1000", value_parser = pingpong::c_u32)]
    iters: u32,
    /// Service level value.
    #[arg(short = 'l', long, default_value = "0", value_parser = pingpong::c_u32)]
    sl: u32,
    /// Sleep on CQ events (default poll).
    #[arg(short = 'e', long, action = ArgAction::Count)]
    events: u8,
    /// Local port gid index.
    #[arg(short = 'g', long = "gid-idx", default_value = "-1", allow_negative_numbers = true,
          value_parser = pingpong::c_i32)]
    gid_idx: i32,
    /// Use on demand paging (not supported by this device).
    #[arg(short = 'o', long)]
    odp: bool,
    /// Use implicit on demand paging (not supported by this device).
    #[arg(short = 'O', long)]
    iodp: bool,
    /// Prefetch an ODP MR.
    #[arg(short = 'P', long)]
    prefetch: bool,
    /// Get CQE with timestamp (not implemented by this example; Debian's
    /// ibv_rc_pingpong does it over target/compat).
    #[arg(short = 't', long)]
    ts: bool,
    /// Validate received buffer.
    #[arg(short = 'c', long)]
    chk: bool,
    /// Use device memory (not implemented by this example; Debian's
    /// ibv_rc_pingpong does it over target/compat).
    #[arg(short = 'j', long)]
    dm: bool,
    /// Use new post send WR API (the Rust API has one way to post: accepted, no effect).
    #[arg(short = 'N', long = "new_send")]
    new_send: bool,
    /// Allow allocation of unprotected/shared memory on CoCo guests (no effect here).
    #[arg(short = 'U', long = "allow-cc-unprotected")]
    allow_cc_unprotected: bool,
    /// Server to connect to (none: be the server).
    host: Option<String>,
}

fn parse_mtu(s: &str) -> Result<Mtu, String> {
    match pingpong::parse_c_ulong(s)? {
        256 => Ok(Mtu::M256),
        512 => Ok(Mtu::M512),
        1024 => Ok(Mtu::M1024),
        2048 => Ok(Mtu::M2048),
        4096 => Ok(Mtu::M4096),
        _ => Err(format!("{s} is not an IB MTU (256..4096)")),
    }
}

fn main() -> ExitCode {
    pingpong::main_with(run)
}

/// `pp_connect_ctx`: INIT → RTR → RTS towards `rem` with the C program's attributes.
fn connect(
    qp: &Qp,
    port: u8,
    my_psn: u32,
    mtu: Mtu,
    sl: u8,
    rem: &Dest,
    gid_idx: i32,
) -> Result<(), String> {
    let av = rem.av(port, sl, gid_idx, 1);
    if !av.is_global {
        // The kernel refuses a RoCE address without a GRH (EINVAL) the same way.
        return Err(
            "Failed to modify QP to RTR\n  (RoCE needs the peer's GID: run both sides with -g 0)"
                .into(),
        );
    }
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: mtu,
        dest_qp_num: rem.qpn,
        rq_psn: rem.psn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: av,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        M::STATE
            | M::AV
            | M::PATH_MTU
            | M::DEST_QPN
            | M::RQ_PSN
            | M::MAX_DEST_RD_ATOMIC
            | M::MIN_RNR_TIMER,
    )
    .map_err(|e| format!("Failed to modify QP to RTR\n  ({e})"))?;
    a.qp_state = QpState::Rts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = my_psn;
    a.max_rd_atomic = 1;
    qp.modify(
        &a,
        M::STATE | M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::SQ_PSN | M::MAX_QP_RD_ATOMIC,
    )
    .map_err(|e| format!("Failed to modify QP to RTS\n  ({e})"))
}

fn run(args: &Args) -> Result<(), String> {
    if args.odp && args.dm {
        return Err("DM memory region can't be on demand".into());
    }
    if args.allow_cc_unprotected && (args.odp || args.iodp) {
        return Err("CoCo unprotected memory cannot be used with ODP".into());
    }
    if args.allow_cc_unprotected && args.dm {
        return Err("CoCo unprotected memory cannot be used with device memory".into());
    }
    if !(args.odp || args.iodp) && args.prefetch {
        return Err("prefetch is valid only with on-demand memory region".into());
    }
    if args.ib_port < 1 {
        return Err("invalid --ib-port (must be at least 1)".into());
    }
    let ctx = pingpong::open_device(args.ib_dev.as_deref())?;
    // The device has no ODP; this example does not implement completion
    // timestamps or device memory (the device has both: Context::
    // completion_time, Context::alloc_dm).
    if args.odp || args.iodp {
        return Err(
            "The device isn't ODP capable or does not support RC send and receive with ODP".into(),
        );
    }
    if args.ts {
        return Err("-t (completion timestamps) is not implemented by this example".into());
    }
    if args.dm {
        return Err("-j (device memory) is not implemented by this example".into());
    }
    let channel = pingpong::comp_channel(&ctx, args.events > 0)?;
    let pp = Pp::new(&ctx, channel.as_ref(), QpType::Rc, args.size, args.rx_depth)?;
    let ib_port = u8::try_from(args.ib_port).unwrap_or(u8::MAX);
    pp.to_init(ib_port)?;

    let routs = pp.start(channel.as_ref())?;
    let portinfo = ctx
        .query_port(ib_port)
        .map_err(|e| format!("Couldn't get port info ({e})"))?;
    const LINK_LAYER_ETHERNET: u8 = 2;
    if portinfo.link_layer != LINK_LAYER_ETHERNET && portinfo.lid == 0 {
        return Err("Couldn't get local LID".into());
    }
    let gid = if args.gid_idx >= 0 {
        ctx.query_gid(ib_port, args.gid_idx as usize)
            .map_err(|_| format!("can't read sgid of index {}", args.gid_idx))?
    } else {
        Gid::default()
    };
    let me = pp.dest(portinfo.lid, gid);
    pingpong::print_address("local address: ", &me, ",");
    let sl = args.sl as u8;
    pingpong::exchange(args.host.as_deref(), args.port, &me, |rem| {
        connect(&pp.qp, ib_port, me.psn, args.mtu, sl, rem, args.gid_idx)
    })?;
    let opts = LoopOpts {
        iters: args.iters,
        client: args.host.is_some(),
        chk: args.chk,
    };
    pp.ping_pong(channel.as_ref(), routs, &opts, |e, n| {
        format!("{e}\nparse WC failed {n}")
    })
}
