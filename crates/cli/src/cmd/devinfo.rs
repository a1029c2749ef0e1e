//! `softrdma devinfo [-v]`: the device, its port and GID table, as
//! `ibv_devinfo` shows them, plus the UDP address the device uses.
//!
//! softrdma has one device per process; this shows the one this process
//! gets: the address in `SOFTRDMA_ADDR`, or else the first free
//! `127.0.0.N`, on UDP `SOFTRDMA_PORT` (default 4791).

use std::fmt::Write as _;
use std::process::ExitCode;

use softrdma::verbs::Mtu;

use super::{CliError, OrErr, print_out};

/// Arguments of `softrdma devinfo`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Also print the device limits and every port attribute (ibv_devinfo -v).
    #[arg(short, long)]
    verbose: bool,
}

/// `0x0200_7fff_fe00_0001` → "02007ffffe000001" (ibv_devices).
pub(crate) fn guid_hex(g: u64) -> String {
    format!("{g:016x}")
}

/// `0x0200_7fff_fe00_0001` → "0200:7fff:fe00:0001" (ibv_devinfo).
fn guid_groups(g: u64) -> String {
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xFFFF,
        (g >> 16) & 0xFFFF,
        g & 0xFFFF
    )
}

/// Where the device address came from, for people reading the output.
pub(crate) fn addr_origin() -> String {
    match std::env::var("SOFTRDMA_ADDR") {
        Ok(a) if !a.trim().is_empty() => format!("address from SOFTRDMA_ADDR={}", a.trim()),
        _ => "address: the first free 127.0.0.N; set SOFTRDMA_ADDR to choose".to_string(),
    }
}

/// Tabs from column `col` to column `target` (tab stops every 8), at least one.
fn tabs_to(col: usize, target: usize) -> String {
    "\t".repeat((target.saturating_sub(col / 8 * 8)).div_ceil(8).max(1))
}

fn mtu_str(v: u32) -> String {
    match Mtu::from_u32(v) {
        Some(m) => format!("{} ({v})", m.bytes()),
        None => format!("unknown ({v})"),
    }
}

pub(crate) fn run(args: &Args) -> Result<ExitCode, CliError> {
    let ctx = crate::cmd::open_device()?;
    let d = ctx.query_device();
    let p = ctx.query_port(1).or_err("query_port")?;
    let mut s = String::new();
    let _ = writeln!(s, "backend: {}", ctx.backend_info());
    let _ = writeln!(s, "hca_id:\t{}", ctx.name());
    let mut kv = |indent: usize, k: &str, v: String| {
        let _ = writeln!(
            s,
            "{}{k}:{}{v}",
            "\t".repeat(indent),
            tabs_to(indent * 8 + k.len() + 1, 40)
        );
    };
    kv(1, "transport", "InfiniBand (0)".into());
    kv(1, "fw_ver", d.fw_ver.clone());
    kv(1, "node_guid", guid_groups(d.node_guid));
    kv(1, "sys_image_guid", guid_groups(d.sys_image_guid));
    kv(1, "vendor_id", format!("{:#x}", d.vendor_id));
    kv(1, "vendor_part_id", d.vendor_part_id.to_string());
    kv(1, "hw_ver", format!("{:#x}", d.hw_ver));
    kv(1, "phys_port_cnt", d.phys_port_cnt.to_string());
    if args.verbose {
        kv(1, "max_mr_size", format!("{:#x}", d.max_mr_size));
        kv(1, "page_size_cap", format!("{:#x}", d.page_size_cap));
        kv(1, "max_qp", d.max_qp.to_string());
        kv(1, "max_qp_wr", d.max_qp_wr.to_string());
        kv(
            1,
            "device_cap_flags",
            format!("{:#010x}", d.device_cap_flags),
        );
        kv(1, "max_sge", d.max_sge.to_string());
        kv(1, "max_sge_rd", d.max_sge_rd.to_string());
        kv(1, "max_cq", d.max_cq.to_string());
        kv(1, "max_cqe", d.max_cqe.to_string());
        kv(1, "max_mr", d.max_mr.to_string());
        kv(1, "max_pd", d.max_pd.to_string());
        kv(1, "max_qp_rd_atom", d.max_qp_rd_atom.to_string());
        kv(1, "max_res_rd_atom", d.max_res_rd_atom.to_string());
        kv(1, "max_qp_init_rd_atom", d.max_qp_init_rd_atom.to_string());
        kv(
            1,
            "atomic_cap",
            format!(
                "{} ({})",
                if d.atomic_cap == 1 {
                    "ATOMIC_HCA"
                } else {
                    "ATOMIC_NONE"
                },
                d.atomic_cap
            ),
        );
        kv(1, "max_mw", d.max_mw.to_string());
        kv(1, "max_mcast_grp", d.max_mcast_grp.to_string());
        kv(1, "max_mcast_qp_attach", d.max_mcast_qp_attach.to_string());
        kv(
            1,
            "max_total_mcast_qp_attach",
            d.max_total_mcast_qp_attach.to_string(),
        );
        kv(1, "max_ah", d.max_ah.to_string());
        kv(1, "max_srq", d.max_srq.to_string());
        kv(1, "max_srq_wr", d.max_srq_wr.to_string());
        kv(1, "max_srq_sge", d.max_srq_sge.to_string());
        kv(1, "max_pkeys", d.max_pkeys.to_string());
        kv(1, "local_ca_ack_delay", d.local_ca_ack_delay.to_string());
    }
    let _ = writeln!(s, "\t\tport:\t1");
    let mut pkv = |k: &str, v: String| {
        let _ = writeln!(s, "\t\t\t{k}:{}{v}", tabs_to(24 + k.len() + 1, 48));
    };
    let state = if p.state == 4 {
        "PORT_ACTIVE"
    } else {
        "PORT_DOWN"
    };
    pkv("state", format!("{state} ({})", p.state));
    pkv("max_mtu", mtu_str(p.max_mtu));
    pkv("active_mtu", mtu_str(p.active_mtu));
    pkv("sm_lid", p.sm_lid.to_string());
    pkv("port_lid", p.lid.to_string());
    pkv("port_lmc", format!("{:#04x}", p.lmc));
    pkv(
        "link_layer",
        if p.link_layer == 2 {
            "Ethernet"
        } else {
            "InfiniBand"
        }
        .to_string(),
    );
    if args.verbose {
        pkv("max_msg_sz", format!("{:#x}", p.max_msg_sz));
        pkv("port_cap_flags", format!("{:#010x}", p.port_cap_flags));
        pkv("port_cap_flags2", format!("{:#06x}", p.port_cap_flags2));
        pkv("max_vl_num", p.max_vl_num.to_string());
        pkv("bad_pkey_cntr", format!("{:#x}", p.bad_pkey_cntr));
        pkv("qkey_viol_cntr", format!("{:#x}", p.qkey_viol_cntr));
        pkv("sm_sl", p.sm_sl.to_string());
        pkv("pkey_tbl_len", p.pkey_tbl_len.to_string());
        pkv("gid_tbl_len", p.gid_tbl_len.to_string());
        pkv("subnet_timeout", p.subnet_timeout.to_string());
        pkv("init_type_reply", p.init_type_reply.to_string());
        pkv("active_width", format!("4X ({})", p.active_width));
        pkv("active_speed", format!("25.0 Gbps ({})", p.active_speed));
        pkv("phys_state", format!("LINK_UP ({})", p.phys_state));
    }
    for i in 0..usize::try_from(p.gid_tbl_len).unwrap_or(0) {
        if let Ok(g) = ctx.query_gid(1, i) {
            pkv(&format!("GID[{i:>3}]"), format!("{g}, RoCE v2"));
        }
    }
    if ctx.backend() == softrdma::verbs::Backend::Native {
        let _ = writeln!(
            s,
            "\tsoftrdma:{}UDP {} ({})",
            tabs_to(8 + 9, 40),
            ctx.local_addr(),
            addr_origin()
        );
    }
    print_out(&s)?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guid_forms() {
        let g = 0x0200_7fff_fe00_0001;
        assert_eq!(guid_hex(g), "02007ffffe000001");
        assert_eq!(guid_groups(g), "0200:7fff:fe00:0001");
    }
}
