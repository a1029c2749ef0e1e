//! `softrdma devinfo [-v]`: the device, its port and GID table, as
//! `ibv_devinfo` shows them, plus the UDP address the device uses.
//!
//! softrdma is one device per host, shared by the user's processes; this
//! process joins it at the address in `SOFTRDMA_ADDR`, or else `127.0.0.1`,
//! on UDP `SOFTRDMA_PORT` (default 4791).

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
    let own = std::env::var("SOFTRDMA_HOST").is_ok_and(|v| v.trim() == "0");
    match std::env::var("SOFTRDMA_ADDR") {
        Ok(a) if !a.trim().is_empty() => format!("address from SOFTRDMA_ADDR={}", a.trim()),
        _ if own => "address: the first free 127.0.0.N; set SOFTRDMA_ADDR to choose".to_string(),
        _ => {
            "address: 127.0.0.1, the host device's default; set SOFTRDMA_ADDR to choose".to_string()
        }
    }
}

/// How many processes share the host device on UDP `port` (this one
/// included), from its registry (`softrdma-host`); `None` without the host
/// device (`SOFTRDMA_HOST=0`) or if unreadable.
pub(crate) fn host_members(port: u16) -> Option<usize> {
    use softrdma_host::Registry;
    if std::env::var("SOFTRDMA_HOST").is_ok_and(|v| v.trim() == "0") {
        return None;
    }
    Registry::open_for_port(port)
        .ok()?
        .members()
        .ok()
        .map(|m| m.len())
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

/// Where `ibv_devinfo` puts a line: its indent in tabs, and the column its
/// value starts at (tab stops every 8).
type Layout = (usize, usize);
/// The device's own lines.
const DEV: Layout = (1, 40);
/// The port's lines.
const PORT: Layout = (3, 48);

/// Writes the line `k: v` laid out as `at` says.
fn kv(s: &mut String, at: Layout, k: &str, v: &str) {
    let (indent, col) = at;
    let _ = writeln!(
        s,
        "{}{k}:{}{v}",
        "\t".repeat(indent),
        tabs_to(indent * 8 + k.len() + 1, col)
    );
}

/// Writes a [`kv`] line for each field of `$src` named after it, its value
/// formatted with the group's format string; in the order given.
macro_rules! fields {
    ($s:expr, $at:expr, $src:expr; $($fmt:literal => $($f:ident),+;)+) => {
        $($( kv($s, $at, stringify!($f), &format!($fmt, $src.$f)); )+)+
    };
}

pub(crate) fn run(args: &Args) -> Result<ExitCode, CliError> {
    let ctx = crate::cmd::open_device()?;
    let d = ctx.query_device();
    let p = ctx.query_port(1).or_err("query_port")?;
    let mut s = String::new();
    let _ = writeln!(s, "backend: {}", ctx.backend_info());
    let _ = writeln!(s, "hca_id:\t{}", ctx.name());
    kv(&mut s, DEV, "transport", "InfiniBand (0)");
    kv(&mut s, DEV, "fw_ver", &d.fw_ver);
    kv(&mut s, DEV, "node_guid", &guid_groups(d.node_guid));
    kv(
        &mut s,
        DEV,
        "sys_image_guid",
        &guid_groups(d.sys_image_guid),
    );
    fields!(&mut s, DEV, d;
        "{:#x}" => vendor_id;
        "{}" => vendor_part_id;
        "{:#x}" => hw_ver;
        "{}" => phys_port_cnt;
    );
    if args.verbose {
        fields!(&mut s, DEV, d;
            "{:#x}" => max_mr_size, page_size_cap;
            "{}" => max_qp, max_qp_wr;
            "{:#010x}" => device_cap_flags;
            "{}" => max_sge, max_sge_rd, max_cq, max_cqe, max_mr, max_pd,
                max_qp_rd_atom, max_res_rd_atom, max_qp_init_rd_atom;
        );
        let atomic = if d.atomic_cap == 1 {
            "ATOMIC_HCA"
        } else {
            "ATOMIC_NONE"
        };
        kv(
            &mut s,
            DEV,
            "atomic_cap",
            &format!("{atomic} ({})", d.atomic_cap),
        );
        fields!(&mut s, DEV, d;
            "{}" => max_mw, max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach,
                max_ah, max_srq, max_srq_wr, max_srq_sge, max_pkeys, local_ca_ack_delay;
        );
    }
    let _ = writeln!(s, "\t\tport:\t1");
    let state = if p.state == 4 {
        "PORT_ACTIVE"
    } else {
        "PORT_DOWN"
    };
    kv(&mut s, PORT, "state", &format!("{state} ({})", p.state));
    kv(&mut s, PORT, "max_mtu", &mtu_str(p.max_mtu));
    kv(&mut s, PORT, "active_mtu", &mtu_str(p.active_mtu));
    fields!(&mut s, PORT, p; "{}" => sm_lid;);
    kv(&mut s, PORT, "port_lid", &p.lid.to_string());
    kv(&mut s, PORT, "port_lmc", &format!("{:#04x}", p.lmc));
    let link = if p.link_layer == 2 {
        "Ethernet"
    } else {
        "InfiniBand"
    };
    kv(&mut s, PORT, "link_layer", link);
    if args.verbose {
        fields!(&mut s, PORT, p;
            "{:#x}" => max_msg_sz;
            "{:#010x}" => port_cap_flags;
            "{:#06x}" => port_cap_flags2;
            "{}" => max_vl_num;
            "{:#x}" => bad_pkey_cntr, qkey_viol_cntr;
            "{}" => sm_sl, pkey_tbl_len, gid_tbl_len, subnet_timeout, init_type_reply;
        );
        kv(
            &mut s,
            PORT,
            "active_width",
            &format!("4X ({})", p.active_width),
        );
        kv(
            &mut s,
            PORT,
            "active_speed",
            &format!("25.0 Gbps ({})", p.active_speed),
        );
        kv(
            &mut s,
            PORT,
            "phys_state",
            &format!("LINK_UP ({})", p.phys_state),
        );
    }
    for i in 0..usize::try_from(p.gid_tbl_len).unwrap_or(0) {
        // Populated entries only, as ibv_devinfo prints them.
        if let Some(g) = ctx.query_gid(1, i).ok().filter(|g| !g.is_zero()) {
            kv(
                &mut s,
                PORT,
                &format!("GID[{i:>3}]"),
                &format!("{g}, RoCE v2"),
            );
        }
    }
    if ctx.backend() == softrdma::verbs::Backend::Native {
        let udp = format!("UDP {} ({})", ctx.local_addr(), addr_origin());
        kv(&mut s, DEV, "softrdma", &udp);
        if let Some(n) = host_members(ctx.local_addr().port()) {
            kv(
                &mut s,
                DEV,
                "host device",
                &format!("{n} member process(es)"),
            );
        }
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
