//! Devices and contexts.

use super::cq::{CompChannel, Cq};
use super::pd::Pd;
use crate::backend::{Backend, BackendInfo, rdma_core};
use crate::{Error, Result};
use softrdma_engine::{DeviceAttr, Engine, EngineConfig, PortAttr};
use softrdma_transport::{VerbsError, Wc};
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;

/// A 128-bit GID. On RoCEv2 it is an IPv6 address (IPv4 as `::ffff:a.b.c.d`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The GID of an IP address.
    pub fn from_ip(ip: IpAddr) -> Gid {
        Gid(softrdma_wire::ip::to_v6(ip).octets())
    }
    /// The IP address of this GID.
    pub fn to_ip(self) -> IpAddr {
        softrdma_wire::ip::from_gid(self.0)
    }
    /// True for the all-zero GID.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({})", std::net::Ipv6Addr::from(self.0))
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&std::net::Ipv6Addr::from(self.0), f)
    }
}

/// Names of the RDMA devices of the selected backend ([`Backend::selected`]):
/// softrdma's software device has exactly one per process (`softrdma0`);
/// rdma-core lists the system's (`mlx5_0`, `rxe0`, ...). Empty if the
/// backend cannot list any.
pub fn devices() -> Vec<&'static str> {
    match Backend::selected() {
        Ok(Backend::RdmaCore) => rdma_core::device_names(None)
            .map(|v| v.iter().map(|n| rdma_core::intern(n)).collect())
            .unwrap_or_default(),
        _ => vec![softrdma_engine::device::DEVICE_NAME],
    }
}

/// The device behind a context.
#[derive(Clone)]
pub(crate) enum Dev {
    /// softrdma's engine.
    Native(Arc<Engine>),
    /// A device of the system's rdma-core.
    RdmaCore(Arc<rdma_core::Dev>),
}

/// An open device (`struct ibv_context`). Cheap to clone.
///
/// It runs on one of two [backends](Backend): softrdma's software device,
/// or the system's rdma-core (real RDMA NICs). [`Context::open`] picks one
/// ([`Backend::selected`]: `SOFTRDMA_BACKEND`, else automatic);
/// [`Context::open_with_backend`] and [`Context::builder`] name it.
#[derive(Clone)]
pub struct Context {
    pub(crate) dev: Dev,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("backend", &self.backend())
            .field("name", &self.name())
            .field("addr", &self.local_addr())
            .finish()
    }
}

/// How to open a device: backend, device name, address, library location.
///
/// ```no_run
/// use softrdma::verbs::{Backend, Context};
/// # fn main() -> softrdma::Result<()> {
/// let ctx = Context::builder().backend(Backend::RdmaCore).device("mlx5_0").open()?;
/// println!("backend: {}", ctx.backend_info());
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct DeviceBuilder {
    backend: Option<Backend>,
    device: Option<String>,
    addr: Option<IpAddr>,
    library_dir: Option<PathBuf>,
}

impl DeviceBuilder {
    /// The backend (default: [`Backend::selected`]).
    pub fn backend(mut self, backend: Backend) -> Self {
        self.backend = Some(backend);
        self
    }

    /// The device by name (default: the first one; the native backend has
    /// only `softrdma0`).
    pub fn device(mut self, name: impl Into<String>) -> Self {
        self.device = Some(name.into());
        self
    }

    /// The device's address: for the native backend, the address it starts
    /// on if it is not running yet and `SOFTRDMA_ADDR` is unset (see
    /// [`Context::open_at`]); for rdma-core, the device with this address in
    /// its GID table (default: the first device).
    pub fn addr(mut self, ip: IpAddr) -> Self {
        self.addr = Some(ip);
        self
    }

    /// Loads `libibverbs.so.1` and `librdmacm.so.1` from `dir` instead of
    /// the dynamic linker's search path (implies [`Backend::RdmaCore`] unless
    /// a backend is named). A process loads rdma-core once: once loaded (also
    /// by [`Backend::detect`] or [`devices`]), a different directory is an
    /// error.
    pub fn library_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.library_dir = Some(dir.into());
        self
    }

    /// Opens the device.
    pub fn open(self) -> Result<Context> {
        let backend = match (self.backend, &self.library_dir) {
            (Some(b), _) => b,
            (None, Some(_)) => Backend::RdmaCore,
            (None, None) => Backend::selected()?,
        };
        match backend {
            Backend::Native => {
                if let Some(d) = self
                    .device
                    .as_deref()
                    .filter(|d| *d != softrdma_engine::device::DEVICE_NAME)
                {
                    return Err(Error::NoDevice(format!(
                        "the native backend has device {}, not {d:?}",
                        softrdma_engine::device::DEVICE_NAME
                    )));
                }
                Ok(Context {
                    dev: Dev::Native(Engine::global_at(self.addr)?),
                })
            }
            Backend::RdmaCore => Ok(Context {
                dev: Dev::RdmaCore(rdma_core::Dev::open(
                    self.library_dir.as_deref(),
                    self.device.as_deref(),
                    self.addr,
                )?),
            }),
        }
    }
}

fn no_port(port: u8) -> Error {
    VerbsError::InvalidArgument(format!("no port {port}")).into()
}

impl Context {
    /// Opens this process's device on the selected backend
    /// ([`Backend::selected`]). Native: configured from
    /// `SOFTRDMA_ADDR`/`SOFTRDMA_PORT` (default: the first free
    /// `127.0.0.N:4791`); rdma-core: the first device. Every call returns
    /// the same device.
    pub fn open() -> Result<Context> {
        DeviceBuilder::default().open()
    }

    /// Opens the process's device, naming its address if it is not running
    /// yet: as with `rdma_bind_addr`, a specific `ip` becomes the device's
    /// address unless `SOFTRDMA_ADDR` is set (the unspecified address changes
    /// nothing). A device already running keeps its address. On rdma-core:
    /// the device that has `ip`.
    pub fn open_at(ip: IpAddr) -> Result<Context> {
        DeviceBuilder::default().addr(ip).open()
    }

    /// Starts a separate software device with its own address (e.g. two
    /// "hosts" in one test). Always the native backend.
    pub fn open_with(cfg: EngineConfig) -> Result<Context> {
        Ok(Context {
            dev: Dev::Native(Arc::new(Engine::start(cfg)?)),
        })
    }

    /// Opens the first device of `backend` (see [`Context::builder`]).
    pub fn open_with_backend(backend: Backend) -> Result<Context> {
        DeviceBuilder::default().backend(backend).open()
    }

    /// A builder to choose backend, device and library location.
    pub fn builder() -> DeviceBuilder {
        DeviceBuilder::default()
    }

    /// The backend this context runs on.
    pub fn backend(&self) -> Backend {
        match &self.dev {
            Dev::Native(_) => Backend::Native,
            Dev::RdmaCore(_) => Backend::RdmaCore,
        }
    }

    /// The backend and, for rdma-core, the library loaded: prints as
    /// `native` or `rdma-core (/usr/lib/x86_64-linux-gnu/libibverbs.so.1)`.
    pub fn backend_info(&self) -> BackendInfo {
        BackendInfo {
            backend: self.backend(),
            library: match &self.dev {
                Dev::Native(_) => None,
                Dev::RdmaCore(d) => Some(d.library()),
            },
        }
    }

    /// The device name.
    pub fn name(&self) -> &'static str {
        match &self.dev {
            Dev::Native(_) => softrdma_engine::device::DEVICE_NAME,
            Dev::RdmaCore(d) => d.name,
        }
    }

    /// The address the device sends from and listens on. Native: its UDP
    /// socket; rdma-core: its first IPv4 GID (else IPv6 GID) and the RoCEv2
    /// port 4791.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.dev {
            Dev::Native(e) => e.local_addr(),
            Dev::RdmaCore(d) => d.local_addr,
        }
    }

    /// Device attributes (`ibv_query_device`).
    pub fn query_device(&self) -> DeviceAttr {
        match &self.dev {
            Dev::Native(e) => e.info().attr(),
            Dev::RdmaCore(d) => d.attr.clone(),
        }
    }

    /// Port attributes (`ibv_query_port`); the native device has port 1 only.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        match &self.dev {
            Dev::Native(e) => {
                if port != 1 {
                    return Err(no_port(port));
                }
                Ok(e.info().port_attr(e.gids().len()))
            }
            Dev::RdmaCore(d) => d.port_attr(port),
        }
    }

    /// GID `index` of `port` (`ibv_query_gid`). On the native device, index
    /// 0 of port 1 is the device address, the host's other addresses follow
    /// and the rest of the table (`gid_tbl_len`) is empty, all zeros; on a NIC, see `show_gids` for
    /// which index is the RoCEv2 GID of which address.
    pub fn query_gid(&self, port: u8, index: usize) -> Result<Gid> {
        match &self.dev {
            Dev::Native(e) => {
                if port != 1 {
                    return Err(no_port(port));
                }
                let gids = e.gids();
                if index >= gids.len().max(softrdma_engine::device::GID_TBL_LEN) {
                    return Err(VerbsError::InvalidArgument(format!("no GID {index}")).into());
                }
                // Empty entries (past the addresses, or whose address went
                // away) are zeros, as rxe's.
                Ok(match gids.get(index) {
                    Some(ip) if !ip.is_unspecified() => Gid::from_ip(*ip),
                    _ => Gid([0; 16]),
                })
            }
            Dev::RdmaCore(d) => Ok(Gid(d.sys.query_gid(port, index)?)),
        }
    }

    /// P_Key `index` (`ibv_query_pkey`): the native table holds the default 0xFFFF.
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        match &self.dev {
            Dev::Native(_) => {
                if port != 1 || index != 0 {
                    return Err(
                        VerbsError::InvalidArgument(format!("no P_Key {port}/{index}")).into(),
                    );
                }
                Ok(0xFFFF)
            }
            Dev::RdmaCore(d) => Ok(d.sys.query_pkey(port, index)?),
        }
    }

    /// Allocates a protection domain.
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::new(self)
    }

    /// Creates a completion channel.
    pub fn create_comp_channel(&self) -> Result<CompChannel> {
        CompChannel::new(self)
    }

    /// Creates a CQ with at least `cqe` entries, optionally reporting to `channel`.
    pub fn create_cq(&self, cqe: u32, channel: Option<&CompChannel>) -> Result<Cq> {
        Cq::new(self, cqe, channel)
    }

    /// Transport and socket counters of the native device (all zero on rdma-core).
    pub fn stats(&self) -> (softrdma_transport::Stats, softrdma_engine::SocketStats) {
        match &self.dev {
            Dev::Native(e) => e.stats(),
            Dev::RdmaCore(_) => Default::default(),
        }
    }

    /// The same-host path's counters (`shm_tx`, `shm_rx`, ...; see the
    /// engine's `shm_counters`): empty if the path is off.
    pub fn shm_counters(&self) -> Vec<(&'static str, u64)> {
        match &self.dev {
            Dev::Native(e) => e.shm_counters(),
            Dev::RdmaCore(_) => Vec::new(),
        }
    }

    /// Allocates `len` bytes of device memory aligned to `2^log_align`
    /// (`ibv_alloc_dm`; at most `max_dm_size` bytes in use at once, see
    /// [`DeviceMemory`](super::DeviceMemory)). Native backend only (`NotSupported` otherwise).
    pub fn alloc_dm(&self, len: u64, log_align: u32) -> Result<super::DeviceMemory> {
        super::DeviceMemory::alloc(self, len, log_align)
    }

    /// The device clock now, in nanoseconds (`ibv_query_rt_values_ex`'s
    /// `raw_clock`): `CLOCK_MONOTONIC`, one clock for every process of the
    /// host device. `None` on the rdma-core backend.
    pub fn device_clock(&self) -> Option<u64> {
        self.native().map(|e| e.device_clock_now())
    }

    /// When a completion of this device was queued: (device clock, wall
    /// clock), in nanoseconds — what an extended CQ reports with
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` and `..._WALLCLOCK`. `None` on
    /// the rdma-core backend (its completions carry no time).
    pub fn completion_time(&self, wc: &Wc) -> Option<(u64, u64)> {
        self.native()
            .map(|e| (e.device_clock(wc.timestamp), e.wallclock(wc.timestamp)))
    }

    /// The engine behind this context (for the C ABI and tools).
    ///
    /// # Panics
    ///
    /// On a context of the rdma-core backend, which has no engine.
    #[doc(hidden)]
    pub fn engine(&self) -> &Arc<Engine> {
        match &self.dev {
            Dev::Native(e) => e,
            Dev::RdmaCore(d) => panic!("{d:?} is on the rdma-core backend: it has no engine"),
        }
    }

    /// The engine, if the context is native.
    pub(crate) fn native(&self) -> Option<&Arc<Engine>> {
        match &self.dev {
            Dev::Native(e) => Some(e),
            Dev::RdmaCore(_) => None,
        }
    }

    /// Whether both are the same device.
    pub(crate) fn same_device(&self, other: &Context) -> bool {
        match (&self.dev, &other.dev) {
            (Dev::Native(a), Dev::Native(b)) => Arc::ptr_eq(a, b),
            (Dev::RdmaCore(a), Dev::RdmaCore(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// A weak reference to the device (to key per-device state).
    pub(crate) fn downgrade(&self) -> WeakDev {
        match &self.dev {
            Dev::Native(e) => WeakDev::Native(Arc::downgrade(e)),
            Dev::RdmaCore(d) => WeakDev::RdmaCore(Arc::downgrade(d)),
        }
    }

    /// A thread is about to sleep in a channel: the native device's progress
    /// thread must take over receiving.
    pub(crate) fn before_block(&self) {
        if let Dev::Native(e) = &self.dev {
            e.before_block();
        }
    }
}

/// A device, not kept alive.
pub(crate) enum WeakDev {
    Native(std::sync::Weak<Engine>),
    RdmaCore(std::sync::Weak<rdma_core::Dev>),
}

impl WeakDev {
    /// Whether the device still exists.
    pub(crate) fn alive(&self) -> bool {
        match self {
            WeakDev::Native(w) => w.strong_count() > 0,
            WeakDev::RdmaCore(w) => w.strong_count() > 0,
        }
    }

    /// Whether this is `ctx`'s device.
    pub(crate) fn is(&self, ctx: &Context) -> bool {
        match (self, &ctx.dev) {
            (WeakDev::Native(w), Dev::Native(e)) => std::ptr::eq(w.as_ptr(), Arc::as_ptr(e)),
            (WeakDev::RdmaCore(w), Dev::RdmaCore(d)) => std::ptr::eq(w.as_ptr(), Arc::as_ptr(d)),
            _ => false,
        }
    }
}
