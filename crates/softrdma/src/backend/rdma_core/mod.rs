//! The rdma-core backend: the system's `libibverbs.so.1` and
//! `librdmacm.so.1`, loaded at run time (`dl`), called only from `sys`, with
//! conversions in `conv`. `dl` and `sys` are the backend's only `unsafe`.
//!
//! What this file adds is safe: opening devices (one context per device and
//! process, like the native engine), caching what never changes, and mapping
//! errnos to softrdma's typed errors.

pub mod conv;
mod dl;
pub(crate) mod sys;

use crate::Error;
use softrdma_engine::DeviceAttr;
use softrdma_engine::cm_proto::CmError;
use softrdma_transport::VerbsError;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

pub(crate) use dl::Cm;

/// The RoCEv2 UDP port (what [`Dev::local_addr`] reports).
const ROCE_PORT: u16 = 4791;

/// Loads the libraries (once per process).
fn libs(dir: Option<&Path>) -> crate::Result<dl::Libs> {
    dl::libs(dir).map_err(Error::NoDevice)
}

/// Whether the system's rdma-core is there with a device of its own (not
/// softrdma's drop-in): what automatic selection checks.
pub(crate) fn has_hardware_device() -> bool {
    match dl::libs(None) {
        Ok(l) if !l.verbs.softrdma_dropin => {
            sys::Device::names(l.verbs).is_ok_and(|n| !n.is_empty())
        }
        _ => false,
    }
}

/// Names of rdma-core's devices.
pub(crate) fn device_names(dir: Option<&Path>) -> crate::Result<Vec<String>> {
    let l = libs(dir)?;
    sys::Device::names(l.verbs).map_err(Error::from)
}

/// A name that lives for the rest of the process (device names are few).
pub(crate) fn intern(name: &str) -> &'static str {
    static NAMES: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut names = NAMES.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(n) = names.iter().find(|n| **n == name) {
        return n;
    }
    let n: &'static str = Box::leak(name.to_owned().into_boxed_str());
    names.push(n);
    n
}

/// A fresh `cq_context` value: what completion channel events name a CQ by.
pub(crate) fn next_cq_tag() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// An open rdma-core device and what softrdma caches about it.
pub(crate) struct Dev {
    pub(crate) sys: Arc<sys::Device>,
    libs: dl::Libs,
    pub(crate) attr: DeviceAttr,
    pub(crate) name: &'static str,
    pub(crate) local_addr: SocketAddr,
}

impl std::fmt::Debug for Dev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "rdma-core {} at {}", self.name, self.local_addr)
    }
}

/// The devices open in this process (one context each, shared).
static OPEN: Mutex<Vec<Weak<Dev>>> = Mutex::new(Vec::new());

impl Dev {
    /// Opens (or finds open) device `name`; without a name, the device that
    /// has `ip` in its GID table, else the first one.
    pub(crate) fn open(
        dir: Option<&Path>,
        name: Option<&str>,
        ip: Option<IpAddr>,
    ) -> crate::Result<Arc<Dev>> {
        let l = libs(dir)?;
        if let Some(n) = name {
            return Dev::open_one(l, Some(n));
        }
        if let Some(ip) = ip.filter(|ip| !ip.is_unspecified()) {
            let want = softrdma_wire::ip::to_v6(ip).octets();
            for n in sys::Device::names(l.verbs).unwrap_or_default() {
                if let Ok(d) = Dev::open_one(l, Some(&n))
                    && d.gids(1).contains(&want)
                {
                    return Ok(d);
                }
            }
        }
        Dev::open_one(l, None)
    }

    fn open_one(l: dl::Libs, name: Option<&str>) -> crate::Result<Arc<Dev>> {
        let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
        open.retain(|w| w.strong_count() > 0);
        if let Some(d) = open
            .iter()
            .filter_map(Weak::upgrade)
            .find(|d| name.is_none_or(|n| n == d.name))
        {
            return Ok(d);
        }
        let sys = sys::Device::open(l, name).map_err(|e| match (e.errno, name) {
            (libc::ENODEV, Some(n)) => {
                Error::NoDevice(format!("{} lists no device {n:?}", l.verbs.path.display()))
            }
            (libc::ENODEV | libc::ENOSYS, None) => Error::NoDevice(format!(
                "{} lists none ({})",
                l.verbs.path.display(),
                io::Error::from_raw_os_error(e.errno)
            )),
            _ => e.into(),
        })?;
        let attr = conv::device_attr(&sys.query_device()?);
        let mut d = Dev {
            name: intern(sys.name()),
            sys: Arc::new(sys),
            libs: l,
            attr,
            local_addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), ROCE_PORT),
        };
        d.local_addr = SocketAddr::new(pick_addr(&d.gids(1)), ROCE_PORT);
        let d = Arc::new(d);
        open.push(Arc::downgrade(&d));
        Ok(d)
    }

    /// The GID table of `port` (entries that cannot be read are left out).
    pub(crate) fn gids(&self, port: u8) -> Vec<[u8; 16]> {
        let len = self
            .sys
            .query_port(port)
            .map_or(0, |p| usize::try_from(p.gid_tbl_len).unwrap_or(0));
        (0..len)
            .filter_map(|i| self.sys.query_gid(port, i).ok())
            .collect()
    }

    /// `ibv_query_port`.
    pub(crate) fn port_attr(&self, port: u8) -> crate::Result<softrdma_engine::PortAttr> {
        Ok(conv::port_attr(&self.sys.query_port(port)?))
    }

    /// The loaded libibverbs.
    pub(crate) fn library(&self) -> PathBuf {
        self.libs.verbs.path.clone()
    }

    /// librdmacm, or why it is not there.
    pub(crate) fn cm(&self) -> crate::Result<&'static Cm> {
        self.libs.cm.map_err(|e| Error::NoDevice(e.to_string()))
    }
}

/// The address a device "is": its first IPv4 (RoCE) GID, else its first
/// global IPv6 one, else the first non-zero one.
fn pick_addr(gids: &[[u8; 16]]) -> IpAddr {
    let ip6 = |g: &[u8; 16]| Ipv6Addr::from(*g);
    let nonzero = |g: &&[u8; 16]| **g != [0; 16];
    if let Some(v4) = gids
        .iter()
        .filter(nonzero)
        .find_map(|g| ip6(g).to_ipv4_mapped())
    {
        return IpAddr::V4(v4);
    }
    gids.iter()
        .filter(nonzero)
        .find(|g| g[0] != 0xfe || g[1] & 0xc0 != 0x80)
        .or_else(|| gids.iter().find(nonzero))
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |g| IpAddr::V6(ip6(g)))
}

fn message(f: &sys::Failure) -> String {
    format!("{}: {}", f.call, io::Error::from_raw_os_error(f.errno))
}

/// rdma-core's errno as the typed error the native backend gives for it
/// ([`Error::errno`] returns the same number).
impl From<sys::Failure> for Error {
    fn from(f: sys::Failure) -> Error {
        let msg = message(&f);
        match f.errno {
            libc::EINVAL => Error::Verbs(VerbsError::InvalidArgument(msg)),
            libc::ENOMEM => Error::Verbs(VerbsError::NoMemory(msg)),
            libc::EBUSY => Error::Verbs(VerbsError::Busy(msg)),
            libc::EOPNOTSUPP | libc::ENOSYS => Error::Verbs(VerbsError::NotSupported(msg)),
            libc::ENODEV => Error::NoDevice(msg),
            e => Error::Io(io::Error::from_raw_os_error(e)),
        }
    }
}

/// The same for connection-management calls; `addr` is the address the
/// call was about (for "in use" / "not available").
pub(crate) fn cm_error(f: sys::Failure, addr: Option<SocketAddr>) -> crate::cm::Error {
    use crate::cm::Error as E;
    match (f.errno, addr) {
        (libc::EINVAL, _) => E::Cm(CmError::Invalid(message(&f))),
        (libc::EADDRINUSE, Some(a)) => E::Cm(CmError::AddrInUse(a)),
        (libc::EADDRNOTAVAIL, Some(a)) => E::Cm(CmError::AddrNotAvail(a.ip())),
        (libc::ETIMEDOUT, _) => E::TimedOut(message(&f)),
        _ => E::Verbs(f.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_of_a_device_prefers_ipv4_gids() {
        let g = |s: &str| s.parse::<Ipv6Addr>().unwrap().octets();
        let link = g("fe80::1");
        let v4 = g("::ffff:10.0.0.7");
        let v6 = g("2001:db8::7");
        assert_eq!(
            pick_addr(&[link, v6, v4]),
            "10.0.0.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            pick_addr(&[link, v6]),
            "2001:db8::7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(pick_addr(&[link]), "fe80::1".parse::<IpAddr>().unwrap());
        assert!(pick_addr(&[]).is_unspecified());
    }

    #[test]
    fn errnos_keep_their_number() {
        for e in [
            libc::EINVAL,
            libc::ENOMEM,
            libc::EBUSY,
            libc::EOPNOTSUPP,
            libc::EAGAIN,
            libc::ENODEV,
        ] {
            let err: Error = sys::Failure {
                call: "ibv_x",
                errno: e,
            }
            .into();
            assert_eq!(err.errno(), e, "{err}");
        }
        let a: SocketAddr = "10.0.0.1:7471".parse().unwrap();
        for e in [
            libc::EADDRINUSE,
            libc::EADDRNOTAVAIL,
            libc::EINVAL,
            libc::ETIMEDOUT,
        ] {
            let err = cm_error(
                sys::Failure {
                    call: "rdma_x",
                    errno: e,
                },
                Some(a),
            );
            assert_eq!(err.errno(), e, "{err}");
        }
    }
}
