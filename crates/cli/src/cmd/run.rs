//! `softrdma run [--] CMD [ARGS...]`: runs an unmodified program over
//! softrdma, with no root.
//!
//! The program gets softrdma's `libibverbs.so.1`/`librdmacm.so.1` (and `libibumad.so.3`,
//! from the same directory) first on `LD_LIBRARY_PATH`, and (through `softrdma-devview`) a private mount
//! namespace in which `/dev/infiniband/uverbs0` and
//! `/sys/class/infiniband/softrdma0/...` exist as middleware (UCX, Open MPI,
//! NCCL, pyverbs) expects them, filled from the device this command opens.
//! The namespace setup needs a single thread, so it happens first; then the
//! device is opened, its files written, and this process *becomes* CMD
//! (`exec`): signals and the exit status are CMD's own, and every process CMD
//! starts (`mpirun`'s ranks) inherits the view. Without user namespaces the
//! program still runs, with only the library path and a warning.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use softrdma::verbs::{Backend, Context};
use softrdma_devview::{DeviceView, GidEntry, interface_of, ns};

use super::{CliError, OrErr};

/// Arguments of `softrdma run`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Only set the library path: no /dev and /sys view (no namespace).
    #[arg(long)]
    no_namespace: bool,

    /// Write the view's /sys and /dev directories under DIR and exit, for
    /// root to put at the real paths (docs/RUN.md); no CMD.
    #[arg(long, value_name = "DIR", conflicts_with = "no_namespace")]
    write_view: Option<PathBuf>,

    /// The program and its arguments.
    #[arg(
        required_unless_present = "write_view",
        conflicts_with = "write_view",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

/// Overrides where the libraries are looked for.
const COMPAT_ENV: &str = "SOFTRDMA_COMPAT_DIR";
/// Set for CMD: `namespace` (the view is there) or `libraries`.
const RUN_ENV: &str = "SOFTRDMA_RUN";

/// The directory holding softrdma's `libibverbs.so.1`: `$SOFTRDMA_COMPAT_DIR`,
/// else next to this binary as cargo lays it out (`target/<profile>/softrdma`
/// → `target/compat`), else an installed `<prefix>/lib/softrdma`.
fn compat_dir() -> Result<PathBuf, CliError> {
    let has_libs =
        |d: &Path| d.join("libibverbs.so.1").is_file() && d.join("librdmacm.so.1").is_file();
    if let Some(d) = std::env::var_os(COMPAT_ENV).filter(|d| !d.is_empty()) {
        let d = PathBuf::from(d);
        return if has_libs(&d) {
            Ok(d.canonicalize().unwrap_or(d))
        } else {
            Err(CliError::new(format!(
                "{COMPAT_ENV}={} holds no libibverbs.so.1 and librdmacm.so.1",
                d.display()
            )))
        };
    }
    let exe = std::env::current_exe()
        .and_then(|e| e.canonicalize())
        .or_err("cannot tell where the softrdma binary is")?;
    let bin_dir = exe.parent().unwrap_or(Path::new("/"));
    let candidates = [
        bin_dir.join("../compat"),
        bin_dir.join("compat"),
        bin_dir.join("../lib/softrdma"),
    ];
    for c in &candidates {
        if has_libs(c) {
            return Ok(c.canonicalize().unwrap_or_else(|_| c.clone()));
        }
    }
    let looked: Vec<String> = candidates.iter().map(|c| c.display().to_string()).collect();
    Err(CliError::new(format!(
        "softrdma's libibverbs.so.1 was not found (looked in {}): run `cargo xtask compat` \
         in the softrdma workspace, or set {COMPAT_ENV} to the directory holding it",
        looked.join(", ")
    )))
}

/// The online CPUs (`/sys/devices/system/cpu/online`, e.g. `0-3,6`).
fn online_cpus() -> Vec<usize> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
            cpus.extend(a..=b);
        }
    }
    if cpus.is_empty() {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        cpus.extend(0..n);
    }
    cpus
}

/// The view of the device this process joins, as the libraries report it.
fn device_view() -> Result<DeviceView, CliError> {
    // The software device, whatever the system's rdma-core lists: CMD runs
    // on softrdma's libraries.
    let ctx =
        Context::open_with_backend(Backend::Native).or_err("cannot open the softrdma device")?;
    let d = ctx.query_device();
    let p = ctx.query_port(1).or_err("query_port")?;
    let len = usize::try_from(p.gid_tbl_len).unwrap_or(0);
    // The table up to its last populated entry (the rest is empty).
    let mut gids: Vec<_> = (0..len).map_while(|i| ctx.query_gid(1, i).ok()).collect();
    while gids.last().is_some_and(|g| g.is_zero()) {
        gids.pop();
    }
    let gids = gids
        .into_iter()
        .map(|g| {
            let gid = std::net::Ipv6Addr::from(g.0);
            GidEntry {
                gid,
                ifname: interface_of(gid.into()),
            }
        })
        .collect();
    Ok(DeviceView {
        name: ctx.name().to_string(),
        node_guid: d.node_guid,
        fw_ver: d.fw_ver.clone(),
        port_cap_flags: p.port_cap_flags,
        gid_tbl_len: len,
        gids,
        cpus: online_cpus(),
    })
}

/// Where the runs of this user record their user namespace, to share one:
/// in the host device's private directory (`softrdma-host`), checked and
/// created by opening the registry; `None` if it cannot be used.
fn shared_userns_file() -> Option<PathBuf> {
    softrdma_host::Registry::open().ok()?;
    Some(softrdma_host::Registry::default_base_dir().join("run-userns"))
}

/// Whether this process already runs inside a `softrdma run` view.
fn inside_view() -> bool {
    std::env::var_os(RUN_ENV).is_some_and(|v| v == "namespace")
        && Path::new("/sys/class/infiniband/softrdma0").is_dir()
}

fn debug() -> bool {
    std::env::var_os("SOFTRDMA_DEBUG").is_some_and(|v| !v.is_empty() && v != "0")
}

/// `--write-view DIR`: the files, at DIR, and what is left to do.
fn write_view(dir: &Path) -> Result<ExitCode, CliError> {
    let view = device_view()?;
    ns::write_tree(dir, &view).or_err(format!("writing the view under {}", dir.display()))?;
    super::print_out(&format!(
        "wrote {d}/sys/class/infiniband/{n} and {d}/sys/class/infiniband_verbs \
         (GID 0 {g}); the device node is yours to make: \
         mknod -m 666 /dev/infiniband/uverbs0 c 231 192\n",
        d = dir.display(),
        n = view.name,
        g = view
            .gids
            .first()
            .map_or_else(|| "none".to_string(), |g| g.gid.to_string()),
    ))?;
    Ok(ExitCode::SUCCESS)
}

pub(crate) fn run(args: &Args) -> Result<ExitCode, CliError> {
    if let Some(dir) = &args.write_view {
        return write_view(dir);
    }
    let libs = compat_dir()?;
    let mode = if args.no_namespace {
        "libraries"
    } else if inside_view() {
        "namespace"
    } else {
        // First, while this process has one thread.
        match ns::enter(shared_userns_file().as_deref()) {
            Ok(entered) => {
                if debug() {
                    let how = if entered.joined { ", joined" } else { "" };
                    eprintln!(
                        "softrdma run: the view is in a {:?} namespace{how}",
                        entered.kind
                    );
                    for s in &entered.skipped {
                        eprintln!("softrdma run: not in the view: {s}");
                    }
                }
                let view = device_view()?;
                ns::install(&view).or_err("writing the device view")?;
                "namespace"
            }
            Err(e) => {
                eprintln!(
                    "softrdma run: warning: no /dev/infiniband and /sys/class/infiniband view \
                     ({e}); running with only LD_LIBRARY_PATH={}. Verbs and rdma_cm programs \
                     work; UCX, Open MPI and NCCL will not find the device. Where unprivileged \
                     user namespaces are restricted (Ubuntu: sysctl \
                     kernel.apparmor_restrict_unprivileged_userns), see docs/RUN.md for the \
                     alternatives.",
                    libs.display()
                );
                "libraries"
            }
        }
    };
    let mut path = OsString::from(&libs);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| CliError::new("no command given"))?;
    let err = Command::new(program)
        .args(rest)
        .env("LD_LIBRARY_PATH", path)
        .env(RUN_ENV, mode)
        .exec();
    eprintln!(
        "softrdma run: cannot run {}: {err}",
        Path::new(program).display()
    );
    // As a shell does: 127 for a command not found, 126 for one not runnable.
    let code = if err.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    Ok(ExitCode::from(code))
}
