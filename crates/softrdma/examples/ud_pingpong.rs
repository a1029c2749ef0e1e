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
use pingpong::{Counters, Dest, RECV_WRID, SEND_WRID};
use softrdma::verbs::{
    Access, AddressVector, Ah, CompChannel, Context, Cq, Gid, Mr, Pd, Qp, QpAttr, QpAttrMask as M,
    QpCap, QpInit, QpState, QpType, RecvWr, SendFlags, SendWr, WrOpcode, devices,
};
use std::process::ExitCode;
use std::time::Instant;

/// The Q_Key both sides use.
const QKEY: u32 = 0x1111_1111;
/// Bytes of GRH area in front of every UD receive.
const GRH: usize = 40;

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
    pd: Pd,
    qp: Qp,
    mr: Mr,
    cq: Cq,
    size: u32,
    inline: bool,
    ah: Option<Ah>,
    remote_qpn: u32,
}

impl Pp {
    /// Posts up to `n` receives of GRH area + message; returns how many were posted.
    fn post_recv(&self, n: u32) -> u32 {
        let Ok(sge) = self.mr.sge(0, self.size as usize + GRH) else {
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

    /// Posts one signalled SEND of the message (after the GRH area) to the peer.
    fn post_send(&self) -> Result<(), String> {
        let ah = self.ah.as_ref().ok_or("no address handle")?;
        let mut wr = SendWr::new(SEND_WRID, WrOpcode::Send);
        wr.flags = SendFlags::SIGNALED;
        wr.ud = Some(ah.dest(self.remote_qpn, QKEY));
        if self.inline {
            wr.flags = wr.flags | SendFlags::INLINE;
            wr.inline = Some(
                self.mr
                    .to_vec(GRH, self.size as usize)
                    .map_err(|e| e.to_string())?,
            );
        } else {
            wr.sgl = vec![
                self.mr
                    .sge(GRH, self.size as usize)
                    .map_err(|e| e.to_string())?,
            ];
        }
        self.qp.post_send(wr).map_err(|e| e.to_string())
    }

    /// `pp_connect_ctx`: RTR, RTS with our PSN, then the address handle to `rem`.
    fn connect(
        &mut self,
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
        self.qp
            .modify(&a, M::STATE)
            .map_err(|e| format!("Failed to modify QP to RTR\n  ({e})"))?;
        a.qp_state = QpState::Rts;
        a.sq_psn = my_psn;
        self.qp
            .modify(&a, M::STATE | M::SQ_PSN)
            .map_err(|e| format!("Failed to modify QP to RTS\n  ({e})"))?;
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
            av.hop_limit = 64;
            av.dgid = rem.gid.0;
            av.sgid_index = gid_idx as u8;
        }
        let ah = self
            .pd
            .create_ah(av)
            .map_err(|e| format!("Failed to create AH\n  ({e})"))?;
        self.ah = Some(ah);
        self.remote_qpn = rem.qpn;
        Ok(())
    }
}

fn run(args: &Args) -> Result<(), String> {
    if args.ib_port < 1 {
        return Err("invalid --ib-port (must be at least 1)".into());
    }
    let page = pingpong::page_size();
    let size = args.size;
    let client = args.host.is_some();
    if let Some(d) = args.ib_dev.as_deref().filter(|d| !devices().contains(d)) {
        return Err(format!("IB device {d} not found"));
    }
    let ib_port = u8::try_from(args.ib_port).unwrap_or(u8::MAX);
    let mut open = Context::builder();
    if let Some(d) = &args.ib_dev {
        open = open.device(d.as_str());
    }
    let ctx = open
        .open()
        .map_err(|e| format!("Couldn't get context for softrdma0 ({e})"))?;
    println!("backend: {}", ctx.backend_info());
    let port_info = ctx
        .query_port(ib_port)
        .map_err(|_| format!("Unable to query port info for port {}", args.ib_port))?;
    let mtu = 1u32 << (port_info.active_mtu + 7);
    if size > mtu {
        return Err(format!("Requested size larger than port MTU ({mtu})"));
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
        .alloc_mr(size as usize + GRH, Access::LOCAL_WRITE)
        .map_err(|e| format!("Couldn't register MR ({e})"))?;
    mr.write(0, &vec![0x7b; size as usize + GRH])
        .map_err(|e| format!("Couldn't allocate work buf. ({e})"))?;
    let cq = ctx
        .create_cq(args.rx_depth + 1, channel.as_ref())
        .map_err(|e| format!("Couldn't create CQ ({e})"))?;
    let mut init = QpInit::new(QpType::Ud, &cq, &cq);
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
    qp.modify(
        &QpAttr {
            qp_state: QpState::Init,
            pkey_index: 0,
            port_num: ib_port,
            qkey: QKEY,
            ..QpAttr::default()
        },
        M::STATE | M::PKEY_INDEX | M::PORT | M::QKEY,
    )
    .map_err(|e| format!("Failed to modify QP to INIT ({e})"))?;

    let mut pp = Pp {
        pd,
        qp,
        mr,
        cq,
        size,
        inline,
        ah: None,
        remote_qpn: 0,
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
    let gid = if args.gid_idx >= 0 {
        ctx.query_gid(ib_port, args.gid_idx as usize)
            .map_err(|_| format!("Could not get local gid for gid index {}", args.gid_idx))?
    } else {
        Gid::default()
    };
    let me = Dest {
        lid: portinfo.lid,
        qpn: pp.qp.qpn(),
        psn: pingpong::random_psn(),
        gid,
    };
    // Sic: the C program prints a colon before "GID" on this line only.
    println!(
        "  local address:  LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}: GID {}",
        me.lid,
        me.qpn,
        me.psn,
        me.gid_text()
    );
    let sl = args.sl as u8;
    let rem = match &args.host {
        Some(server) => pingpong::client_exchange(server, args.port, &me)?,
        None => pingpong::server_exchange(args.port, &me, |rem| {
            pp.connect(ib_port, me.psn, sl, rem, args.gid_idx)
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
        pp.connect(ib_port, me.psn, sl, &rem, args.gid_idx)?;
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
                    .write(i + GRH, &[pingpong::chk_byte(i / page)])
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
            c.on_wc(wc, |n| pp.post_recv(n), || pp.post_send())?;
        }
    }
    pingpong::report(start, size, args.iters);

    if !client && args.chk {
        for i in (0..size as usize).step_by(page) {
            let mut b = [0u8];
            pp.mr.read(i + GRH, &mut b).map_err(|e| e.to_string())?;
            if b[0] != pingpong::chk_byte(i / page) {
                println!("invalid data in page {}", i / page);
            }
        }
    }
    Ok(())
}
