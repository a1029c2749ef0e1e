//! Devices and contexts.

use super::cq::{CompChannel, Cq};
use super::pd::Pd;
use crate::Result;
use softrdma_engine::{DeviceAttr, Engine, EngineConfig, PortAttr};
use softrdma_transport::VerbsError;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
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

/// Names of the RDMA devices: softrdma has exactly one per process.
pub fn devices() -> Vec<&'static str> {
    vec![softrdma_engine::device::DEVICE_NAME]
}

/// An open device (`struct ibv_context`). Cheap to clone.
#[derive(Clone)]
pub struct Context {
    pub(crate) engine: Arc<Engine>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("addr", &self.local_addr())
            .finish()
    }
}

impl Context {
    /// Opens the process's device, configured from `SOFTRDMA_ADDR`/`SOFTRDMA_PORT`
    /// (default: the first free `127.0.0.N:4791`). Every call returns the same device.
    pub fn open() -> Result<Context> {
        Ok(Context {
            engine: Engine::global()?,
        })
    }

    /// Opens the process's device, naming its address if it is not running
    /// yet: as with `rdma_bind_addr`, a specific `ip` becomes the device's
    /// address unless `SOFTRDMA_ADDR` is set (the unspecified address changes
    /// nothing). A device already running keeps its address.
    pub fn open_at(ip: IpAddr) -> Result<Context> {
        Ok(Context {
            engine: Engine::global_at(Some(ip))?,
        })
    }

    /// Starts a separate device with its own address (e.g. two "hosts" in one test).
    pub fn open_with(cfg: EngineConfig) -> Result<Context> {
        Ok(Context {
            engine: Arc::new(Engine::start(cfg)?),
        })
    }

    /// The device name.
    pub fn name(&self) -> &'static str {
        softrdma_engine::device::DEVICE_NAME
    }

    /// The UDP address the device sends from and listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.engine.local_addr()
    }

    /// Device attributes (`ibv_query_device`).
    pub fn query_device(&self) -> DeviceAttr {
        self.engine.info().attr()
    }

    /// Port attributes (`ibv_query_port`); the device has port 1 only.
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(VerbsError::InvalidArgument(format!("no port {port}")).into());
        }
        Ok(self.engine.info().port_attr(self.engine.gids().len()))
    }

    /// GID `index` of port 1 (`ibv_query_gid`). Index 0 is the device address.
    pub fn query_gid(&self, port: u8, index: usize) -> Result<Gid> {
        if port != 1 {
            return Err(VerbsError::InvalidArgument(format!("no port {port}")).into());
        }
        self.engine
            .gids()
            .get(index)
            .map(|ip| Gid::from_ip(*ip))
            .ok_or_else(|| VerbsError::InvalidArgument(format!("no GID {index}")).into())
    }

    /// P_Key `index` (`ibv_query_pkey`): the table holds the default 0xFFFF.
    pub fn query_pkey(&self, port: u8, index: u16) -> Result<u16> {
        if port != 1 || index != 0 {
            return Err(VerbsError::InvalidArgument(format!("no P_Key {port}/{index}")).into());
        }
        Ok(0xFFFF)
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

    /// Transport and socket counters.
    pub fn stats(&self) -> (softrdma_transport::Stats, softrdma_engine::SocketStats) {
        self.engine.stats()
    }

    /// The engine behind this context (for the C ABI and tools).
    #[doc(hidden)]
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engine
    }
}
