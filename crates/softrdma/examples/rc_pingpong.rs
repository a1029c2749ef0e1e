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
use pingpong::{Counters, Dest, RECV_WRID, SEND_WRID};
use softrdma::verbs::{
    Access, AddressVector, CompChannel, Context, Cq, Gid, Mr, Mtu, Qp, QpAttr, QpAttrMask as M,
    QpCap, QpInit, QpState, QpType, RecvWr, SendFlags, SendWr, WrOpcode, devices,
};
use std::process::ExitCode;
use std::time::Instant;

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
    /// Get CQE with timestamp (not supported by this device).
    #[arg(short = 't', long)]
    ts: bool,
    /// Validate received buffer.
    #[arg(short = 'c', long)]
    chk: bool,
    /// Use device memory (not supported by this device).
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
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            // Bad options exit with 1 like the C program (clap's default is 2).
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(msg) => {
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

/// Everything the ping-pong loop touches.
struct Pp {
    qp: Qp,
    mr: Mr,
    cq: Cq,
    size: u32,
    inline: bool,
}

impl Pp {
    /// Posts up to `n` receives of the whole buffer; returns how many were posted.
    fn post_recv(&self, n: u32) -> u32 {
        let Ok(sge) = self.mr.sge(0, self.size as usize) else {
            return 0;
        };
        for i in 0..n {
            let wr = RecvWr {
                wr_id: RECV_WRID,
                sgl: vec![sge],
            };
            if self.qp.post_recv(wr).is_err() {
                return i;
            }
        }
        n
    }

    /// Posts one signalled SEND of the buffer (inline when the QP allows it).
    fn post_send(&self) -> Result<(), String> {
        let mut wr = SendWr::new(SEND_WRID, WrOpcode::Send);
        wr.flags = SendFlags::SIGNALED;
        if self.inline {
            wr.flags = wr.flags | SendFlags::INLINE;
            wr.inline = Some(
                self.mr
                    .to_vec(0, self.size as usize)
                    .map_err(|e| e.to_string())?,
            );
        } else {
            wr.sgl = vec![
                self.mr
                    .sge(0, self.size as usize)
                    .map_err(|e| e.to_string())?,
            ];
        }
        self.qp.post_send(wr).map_err(|e| e.to_string())
    }
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
    let mut av = AddressVector {
        is_global: false,
        dlid: rem.lid,
        sl,
        src_path_bits: 0,
        port_num: port,
        ..AddressVector::default()
    };
    if rem.has_gid() {
        av.is_global = true;
        av.hop_limit = 1;
        av.dgid = rem.gid.0;
        av.sgid_index = gid_idx as u8;
    }
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
    let page = pingpong::page_size();
    let size = args.size;
    let client = args.host.is_some();
    if let Some(d) = args.ib_dev.as_deref().filter(|d| !devices().contains(d)) {
        return Err(format!("IB device {d} not found"));
    }
    let mut open = Context::builder();
    if let Some(d) = &args.ib_dev {
        open = open.device(d.as_str());
    }
    let ctx = open
        .open()
        .map_err(|e| format!("Couldn't get context for softrdma0 ({e})"))?;
    println!("backend: {}", ctx.backend_info());
    // The device has no ODP, completion timestamps or device memory.
    if args.odp || args.iodp {
        return Err(
            "The device isn't ODP capable or does not support RC send and receive with ODP".into(),
        );
    }
    if args.ts {
        return Err("The device isn't completion timestamp capable".into());
    }
    if args.dm {
        return Err("Device doesn't support dm allocation".into());
    }
    let channel: Option<CompChannel> = if args.events > 0 {
        Some(
            ctx.create_comp_channel()
                .map_err(|e| format!("Couldn't create completion channel ({e})"))?,
        )
    } else {
        None
    };
    let pd = ctx
        .alloc_pd()
        .map_err(|e| format!("Couldn't allocate PD ({e})"))?;
    let mr = pd
        .alloc_mr(size as usize, Access::LOCAL_WRITE)
        .map_err(|e| format!("Couldn't register MR ({e})"))?;
    mr.write(0, &vec![0x7b; size as usize])
        .map_err(|e| format!("Couldn't allocate work buf. ({e})"))?;
    let cq = ctx
        .create_cq(args.rx_depth + 1, channel.as_ref())
        .map_err(|e| format!("Couldn't create CQ ({e})"))?;
    let mut init = QpInit::new(QpType::Rc, &cq, &cq);
    init.cap = QpCap {
        max_send_wr: 1,
        max_recv_wr: args.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&init)
        .map_err(|e| format!("Couldn't create QP ({e})"))?;
    let inline = qp.cap().max_inline_data >= size;
    let ib_port = u8::try_from(args.ib_port).unwrap_or(u8::MAX);
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: ib_port,
            qp_access_flags: Access::EMPTY,
            ..QpAttr::default()
        },
        M::STATE | M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
    )
    .map_err(|e| format!("Failed to modify QP to INIT ({e})"))?;

    let pp = Pp {
        qp,
        mr,
        cq,
        size,
        inline,
    };
    let routs = pp.post_recv(args.rx_depth);
    if routs < args.rx_depth {
        return Err(format!("Couldn't post receive ({routs})"));
    }
    if channel.is_some() {
        pp.cq
            .req_notify(false)
            .map_err(|e| format!("Couldn't request CQ notification ({e})"))?;
    }
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
    let me = Dest {
        lid: portinfo.lid,
        qpn: pp.qp.qpn(),
        psn: pingpong::random_psn(),
        gid,
    };
    println!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        me.lid,
        me.qpn,
        me.psn,
        me.gid_text()
    );
    let sl = args.sl as u8;
    let rem = match &args.host {
        Some(server) => pingpong::client_exchange(server, args.port, &me)?,
        None => pingpong::server_exchange(args.port, &me, |rem| {
            connect(&pp.qp, ib_port, me.psn, args.mtu, sl, rem, args.gid_idx)
        })?,
    };
    println!(
        "  remote address: LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
        rem.lid,
        rem.qpn,
        rem.psn,
        rem.gid_text()
    );
    if client {
        connect(&pp.qp, ib_port, me.psn, args.mtu, sl, &rem, args.gid_idx)?;
    }

    let mut c = Counters {
        iters: args.iters,
        rx_depth: args.rx_depth,
        scnt: 0,
        rcnt: 0,
        routs,
        pending: RECV_WRID,
    };
    if client {
        if args.chk {
            for i in (0..size as usize).step_by(page) {
                pp.mr
                    .write(i, &[pingpong::chk_byte(i / page)])
                    .map_err(|e| e.to_string())?;
            }
        }
        pp.post_send()
            .map_err(|e| format!("Couldn't post send ({e})"))?;
        c.pending |= SEND_WRID;
    }

    let start = Instant::now();
    let mut wcs = Vec::with_capacity(2);
    while !c.done() {
        if let Some(ch) = &channel {
            let id = ch
                .wait()
                .map_err(|e| format!("Failed to get cq_event ({e})"))?;
            if id != pp.cq.id() {
                return Err(format!("CQ event for unknown CQ {id:?}"));
            }
            pp.cq
                .req_notify(false)
                .map_err(|e| format!("Couldn't request CQ notification ({e})"))?;
        }
        wcs.clear();
        loop {
            pp.cq
                .poll(&mut wcs, 2)
                .map_err(|e| format!("poll CQ failed {e}"))?;
            if channel.is_some() || !wcs.is_empty() {
                break;
            }
        }
        for wc in &wcs {
            c.on_wc(wc, |n| pp.post_recv(n), || pp.post_send())
                .map_err(|e| format!("{e}\nparse WC failed {}", wcs.len()))?;
        }
    }
    pingpong::report(start, size, args.iters);

    if !client && args.chk {
        for i in (0..size as usize).step_by(page) {
            let mut b = [0u8];
            pp.mr.read(i, &mut b).map_err(|e| e.to_string())?;
            if b[0] != pingpong::chk_byte(i / page) {
                println!("invalid data in page {}", i / page);
            }
        }
    }
    Ok(())
}
