//! `softrdma devices`: the RDMA devices, as `ibv_devices` lists them.

use std::process::ExitCode;

use super::devinfo::{addr_origin, guid_hex, host_members};
use super::{CliError, print_out};

/// Arguments of `softrdma devices` (none).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {}

pub(crate) fn run(_: &Args) -> Result<ExitCode, CliError> {
    let ctx = crate::cmd::open_device()?;
    let attr = ctx.query_device();
    let mut s = String::new();
    s.push_str(&format!("    {:<16}\t   node GUID\n", "device"));
    s.push_str(&format!("    {:<16}\t----------------\n", "------"));
    s.push_str(&format!(
        "    {:<16}\t{}\n",
        ctx.name(),
        guid_hex(attr.node_guid)
    ));
    let shared = match host_members(ctx.local_addr().port()) {
        Some(n) => format!("the host's device, {n} member process(es) now"),
        None => "a device of this process's own".to_string(),
    };
    s.push_str(&format!(
        "\n{}: UDP {} ({}); {shared}\n",
        ctx.name(),
        ctx.local_addr(),
        addr_origin()
    ));
    print_out(&s)?;
    Ok(ExitCode::SUCCESS)
}
