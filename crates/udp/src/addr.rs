//! Which local address a process's device binds: `SOFTRDMA_ADDR`, `SOFTRDMA_PORT`, and the
//! loopback default (DESIGN §3–§4).
//!
//! * `SOFTRDMA_ADDR` unset (or empty): the device takes the first of `127.0.0.1:PORT`,
//!   `127.0.0.2:PORT`, … that it can bind **exclusively** (no `SO_REUSEADDR`/`SO_REUSEPORT`),
//!   so successive processes on one host get distinct addresses and hence distinct GIDs.
//!   The scan stops after [`AddrConfig::max_loopback`] candidates (default 254, i.e.
//!   `127.0.0.254`) with [`BindError::LoopbackExhausted`].
//! * `SOFTRDMA_ADDR=<IPv4 or IPv6 literal>`: exactly that address is bound; failure is an
//!   error naming the address ([`BindError::InUse`], [`BindError::NotAvailable`]).
//!   Accepted forms: `10.0.0.1`, `::1`, `[::1]`, `fe80::1%eth0` / `fe80::1%2` (an IPv6 zone,
//!   required for link-local addresses), and IPv4-mapped IPv6 (`::ffff:10.0.0.1`, which is
//!   treated as the IPv4 address, matching how a GID encodes IPv4). The unspecified address,
//!   multicast and broadcast are rejected: a device address is also GID 0 and must be a
//!   unicast address peers can send to.
//! * `SOFTRDMA_PORT=<1..=65535>`: the UDP port (default [`DEFAULT_PORT`], the RoCEv2 port).
//!
//! Parsing takes a lookup closure ([`AddrConfig::from_lookup`]) so tests never touch the
//! process environment. Binding is also injected ([`AddrConfig::bind_with`]): this module makes
//! no system calls itself; `RoceSocket::open` supplies the real `bind`.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// The RoCEv2 UDP destination port (IANA), used unless `SOFTRDMA_PORT` says otherwise.
pub const DEFAULT_PORT: u16 = 4791;
/// Environment variable naming the device address.
pub const ENV_ADDR: &str = "SOFTRDMA_ADDR";
/// Environment variable overriding the UDP port.
pub const ENV_PORT: &str = "SOFTRDMA_PORT";
/// Default bound of the loopback scan: `127.0.0.1` … `127.0.0.254`.
pub const DEFAULT_MAX_LOOPBACK: u8 = 254;

/// A malformed `SOFTRDMA_ADDR` / `SOFTRDMA_PORT`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AddrError {
    /// Not an IPv4 or IPv6 literal.
    #[error(
        "{var}={value:?} is not an IPv4 or IPv6 address (examples: 10.0.0.1, ::1, fe80::1%eth0)"
    )]
    InvalidAddr {
        /// The variable's name.
        var: &'static str,
        /// Its value.
        value: String,
    },
    /// A syntactically valid address that cannot be a device address.
    #[error("{var}={value:?} cannot be a device address: {reason}")]
    UnusableAddr {
        /// The variable's name.
        var: &'static str,
        /// Its value.
        value: String,
        /// Why (unspecified, multicast, broadcast, link-local without zone, ...).
        reason: &'static str,
    },
    /// An IPv6 zone (`%eth0`) naming no interface.
    #[error("{var}={value:?}: no network interface named {zone:?}")]
    UnknownZone {
        /// The variable's name.
        var: &'static str,
        /// Its value.
        value: String,
        /// The zone after `%`.
        zone: String,
    },
    /// Not a port number in 1..=65535.
    #[error("{var}={value:?} is not a UDP port number (1-65535)")]
    InvalidPort {
        /// The variable's name.
        var: &'static str,
        /// Its value.
        value: String,
    },
}

/// Binding the device address failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BindError {
    /// `EADDRINUSE` on an exactly requested address.
    #[error(
        "cannot bind UDP {addr}: address already in use (another softrdma process, or the \
         kernel's rdma_rxe, may hold it); choose another {ENV_ADDR} or {ENV_PORT}"
    )]
    InUse {
        /// The requested address.
        addr: SocketAddr,
    },
    /// `EADDRNOTAVAIL`: the address is not configured on this host (or network namespace).
    #[error(
        "cannot bind UDP {addr}: address not available on this host (EADDRNOTAVAIL); \
         {ENV_ADDR} must be one of this host's (namespace's) addresses, and the interface \
         must be up (a new network namespace starts with `lo` down)"
    )]
    NotAvailable {
        /// The requested address.
        addr: SocketAddr,
    },
    /// Every loopback candidate was in use.
    #[error(
        "no free loopback address for softrdma: UDP port {port} is in use on every address \
         127.0.0.1..=127.0.0.{last} (something bound to 0.0.0.0:{port}, such as the kernel's \
         rdma_rxe, blocks them all); set {ENV_ADDR} or {ENV_PORT}"
    )]
    LoopbackExhausted {
        /// The port scanned.
        port: u16,
        /// The last candidate tried (`127.0.0.last`).
        last: u8,
    },
    /// Any other error from `bind`.
    #[error("cannot bind UDP {addr}: {source}")]
    Io {
        /// The address being bound.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Creating or configuring the socket failed before any bind.
    #[error("cannot create the UDP socket: {0}")]
    Setup(#[source] io::Error),
}

impl From<BindError> for io::Error {
    fn from(e: BindError) -> io::Error {
        let kind = match &e {
            BindError::InUse { .. } | BindError::LoopbackExhausted { .. } => {
                io::ErrorKind::AddrInUse
            }
            BindError::NotAvailable { .. } => io::ErrorKind::AddrNotAvailable,
            BindError::Io { source, .. } | BindError::Setup(source) => source.kind(),
        };
        io::Error::new(kind, e)
    }
}

/// Where a device binds. Build it with [`AddrConfig::from_env`] (or
/// [`AddrConfig::from_lookup`]), or directly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrConfig {
    /// The exact address to bind (`SOFTRDMA_ADDR`); `None` scans `127.0.0.N`.
    pub addr: Option<IpAddr>,
    /// IPv6 zone (interface index) for link-local addresses; 0 otherwise.
    pub scope_id: u32,
    /// UDP port (`SOFTRDMA_PORT`, default 4791). Port 0 (kernel-chosen) is allowed here for
    /// tests, but not from the environment.
    pub port: u16,
    /// Highest `N` the loopback scan tries (`127.0.0.N`), at least 1.
    pub max_loopback: u8,
}

impl Default for AddrConfig {
    fn default() -> Self {
        AddrConfig {
            addr: None,
            scope_id: 0,
            port: DEFAULT_PORT,
            max_loopback: DEFAULT_MAX_LOOPBACK,
        }
    }
}

impl AddrConfig {
    /// Reads `SOFTRDMA_ADDR` and `SOFTRDMA_PORT` from the process environment.
    pub fn from_env() -> Result<Self, AddrError> {
        Self::from_lookup(|k| std::env::var_os(k).map(|v| v.to_string_lossy().into_owned()))
    }

    /// Reads the two variables through `lookup` (name → value). Empty or all-blank values
    /// count as unset.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, AddrError> {
        let get = |k: &str| lookup(k).filter(|v| !v.trim().is_empty());
        let mut cfg = AddrConfig::default();
        if let Some(v) = get(ENV_PORT) {
            cfg.port = parse_port(ENV_PORT, &v)?;
        }
        if let Some(v) = get(ENV_ADDR) {
            let (ip, scope) = parse_addr(ENV_ADDR, &v)?;
            cfg.addr = Some(ip);
            cfg.scope_id = scope;
        }
        Ok(cfg)
    }

    /// An exact address (no scan).
    pub fn exact(addr: SocketAddr) -> Self {
        let scope_id = match addr {
            SocketAddr::V6(a) => a.scope_id(),
            SocketAddr::V4(_) => 0,
        };
        AddrConfig {
            addr: Some(addr.ip()),
            scope_id,
            port: addr.port(),
            max_loopback: DEFAULT_MAX_LOOPBACK,
        }
    }

    /// The loopback scan on `port`.
    pub fn loopback(port: u16) -> Self {
        AddrConfig {
            port,
            ..AddrConfig::default()
        }
    }

    /// Whether the device will be IPv6.
    pub fn is_ipv6(&self) -> bool {
        matches!(self.addr, Some(IpAddr::V6(_)))
    }

    /// The addresses tried, in order.
    pub fn candidates(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        let exact = self.addr.map(|ip| match ip {
            IpAddr::V4(v4) => SocketAddr::V4(SocketAddrV4::new(v4, self.port)),
            IpAddr::V6(v6) => SocketAddr::V6(SocketAddrV6::new(v6, self.port, 0, self.scope_id)),
        });
        let scan = self.addr.is_none().then_some(1..=self.max_loopback.max(1));
        exact.into_iter().chain(
            scan.into_iter()
                .flatten()
                .map(|n| SocketAddr::from((Ipv4Addr::new(127, 0, 0, n), self.port))),
        )
    }

    /// Binds with `try_bind`, which is called with each candidate until one succeeds.
    ///
    /// In scan mode `EADDRINUSE` moves on to the next candidate; any other error ends the
    /// scan. Returns what `try_bind` returned and the address it succeeded with.
    pub fn bind_with<T>(
        &self,
        mut try_bind: impl FnMut(SocketAddr) -> io::Result<T>,
    ) -> Result<(T, SocketAddr), BindError> {
        let scanning = self.addr.is_none();
        let mut last = 0u8;
        for addr in self.candidates() {
            match try_bind(addr) {
                Ok(t) => return Ok((t, addr)),
                Err(e) if scanning && e.raw_os_error() == Some(libc::EADDRINUSE) => {
                    if let IpAddr::V4(v4) = addr.ip() {
                        last = v4.octets()[3];
                    }
                }
                Err(e) => return Err(classify(addr, e)),
            }
        }
        Err(BindError::LoopbackExhausted {
            port: self.port,
            last,
        })
    }
}

fn classify(addr: SocketAddr, e: io::Error) -> BindError {
    match e.raw_os_error() {
        Some(libc::EADDRINUSE) => BindError::InUse { addr },
        Some(libc::EADDRNOTAVAIL) => BindError::NotAvailable { addr },
        _ => BindError::Io { addr, source: e },
    }
}

fn parse_port(var: &'static str, value: &str) -> Result<u16, AddrError> {
    match value.trim().parse::<u16>() {
        Ok(p) if p != 0 => Ok(p),
        _ => Err(AddrError::InvalidPort {
            var,
            value: value.to_owned(),
        }),
    }
}

/// Parses an address literal as accepted in `SOFTRDMA_ADDR`; returns the IP and IPv6 zone.
pub fn parse_addr(var: &'static str, value: &str) -> Result<(IpAddr, u32), AddrError> {
    let invalid = || AddrError::InvalidAddr {
        var,
        value: value.to_owned(),
    };
    let unusable = |reason| AddrError::UnusableAddr {
        var,
        value: value.to_owned(),
        reason,
    };
    let mut s = value.trim();
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        s = inner;
    }
    let (host, zone) = match s.split_once('%') {
        Some((h, z)) => (h, Some(z)),
        None => (s, None),
    };
    let ip: IpAddr = host.parse().map_err(|_| invalid())?;
    // IPv4-mapped IPv6 is an IPv4 device (that is how GIDs carry IPv4).
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    };
    let scope = match (zone, ip) {
        (None, _) => 0,
        (Some(_), IpAddr::V4(_)) => return Err(invalid()),
        (Some(z), IpAddr::V6(_)) => match z.parse::<u32>() {
            Ok(n) => n,
            Err(_) => crate::sys::if_nametoindex(z).ok_or_else(|| AddrError::UnknownZone {
                var,
                value: value.to_owned(),
                zone: z.to_owned(),
            })?,
        },
    };
    // The first reason that applies, in this order, makes it unusable.
    let not_unicast = match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => {
            Some("the unspecified address 0.0.0.0 is not a unicast address")
        }
        IpAddr::V6(v6) if v6.is_unspecified() => {
            Some("the unspecified address :: is not a unicast address")
        }
        _ if ip.is_multicast() => Some("multicast address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("broadcast address"),
        IpAddr::V6(v6) if is_v6_link_local(&v6) && scope == 0 => {
            Some("a link-local IPv6 address needs a zone, e.g. fe80::1%eth0")
        }
        _ => None,
    };
    match not_unicast {
        Some(reason) => Err(unusable(reason)),
        None => Ok((ip, scope)),
    }
}

fn is_v6_link_local(v6: &Ipv6Addr) -> bool {
    (v6.segments()[0] & 0xffc0) == 0xfe80
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn unset_means_loopback_scan_on_4791() {
        let c = AddrConfig::from_lookup(env(&[])).unwrap();
        assert_eq!(c, AddrConfig::default());
        assert_eq!(c.port, 4791);
        let v: Vec<_> = c.candidates().take(3).collect();
        assert_eq!(
            v,
            ["127.0.0.1:4791", "127.0.0.2:4791", "127.0.0.3:4791"].map(|s| s.parse().unwrap())
        );
        assert_eq!(c.candidates().count(), 254);
        // Empty / blank values count as unset.
        let c = AddrConfig::from_lookup(env(&[(ENV_ADDR, ""), (ENV_PORT, "  ")])).unwrap();
        assert_eq!(c, AddrConfig::default());
    }

    #[test]
    fn parses_addresses() {
        let get = |v: &str| AddrConfig::from_lookup(env(&[(ENV_ADDR, v)]));
        let c = get("10.77.0.1").unwrap();
        assert_eq!(c.addr, Some("10.77.0.1".parse().unwrap()));
        assert_eq!(
            c.candidates().collect::<Vec<_>>(),
            ["10.77.0.1:4791".parse().unwrap()]
        );
        let c = get("::1").unwrap();
        assert_eq!(c.addr, Some(IpAddr::V6(Ipv6Addr::LOCALHOST)));
        assert!(c.is_ipv6());
        assert_eq!(
            c.candidates().next().unwrap(),
            "[::1]:4791".parse().unwrap()
        );
        assert_eq!(get("[::1]").unwrap().addr, c.addr);
        assert_eq!(
            get(" 127.0.0.5 ").unwrap().addr,
            Some("127.0.0.5".parse().unwrap())
        );
        // IPv4-mapped IPv6 (GID form) means IPv4.
        assert_eq!(
            get("::ffff:10.77.0.1").unwrap().addr,
            Some("10.77.0.1".parse().unwrap())
        );
        let c = get("fe80::5054:ff:fe77:1%7").unwrap();
        assert_eq!(c.scope_id, 7);
        let SocketAddr::V6(a) = c.candidates().next().unwrap() else {
            panic!()
        };
        assert_eq!(a.scope_id(), 7);
        assert_eq!(
            get("fe80::1%lo").unwrap().scope_id,
            crate::sys::if_nametoindex("lo").unwrap()
        );
    }

    #[test]
    fn rejects_bad_addresses_with_clear_errors() {
        let get = |v: &str| AddrConfig::from_lookup(env(&[(ENV_ADDR, v)])).unwrap_err();
        for bad in [
            "localhost",
            "10.0.0",
            "1.2.3.4.5",
            "::1::2",
            "10.0.0.1:4791",
            "10.0.0.1%2",
        ] {
            let e = get(bad);
            assert!(matches!(e, AddrError::InvalidAddr { .. }), "{bad}: {e:?}");
            let msg = e.to_string();
            assert!(msg.contains("SOFTRDMA_ADDR") && msg.contains(bad), "{msg}");
        }
        for bad in [
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "ff02::1",
            "255.255.255.255",
            "fe80::1",
        ] {
            let e = get(bad);
            assert!(matches!(e, AddrError::UnusableAddr { .. }), "{bad}: {e:?}");
        }
        assert!(matches!(
            get("fe80::1%nosuchif0"),
            AddrError::UnknownZone { .. }
        ));
    }

    #[test]
    fn parses_ports() {
        let get = |v: &str| AddrConfig::from_lookup(env(&[(ENV_PORT, v)]));
        assert_eq!(get("5000").unwrap().port, 5000);
        assert_eq!(get("65535").unwrap().port, 65535);
        for bad in ["0", "65536", "-1", "abc", "4791x"] {
            let e = get(bad).unwrap_err();
            assert!(matches!(e, AddrError::InvalidPort { .. }), "{bad}");
            assert!(e.to_string().contains("SOFTRDMA_PORT"));
        }
        // The port applies to the exact address too.
        let c = AddrConfig::from_lookup(env(&[(ENV_ADDR, "::1"), (ENV_PORT, "6000")])).unwrap();
        assert_eq!(
            c.candidates().next().unwrap(),
            "[::1]:6000".parse().unwrap()
        );
    }

    fn in_use() -> io::Error {
        io::Error::from_raw_os_error(libc::EADDRINUSE)
    }

    #[test]
    fn scan_skips_addresses_in_use() {
        let c = AddrConfig::loopback(40000);
        let mut tried = vec![];
        let (t, a) = c
            .bind_with(|a| {
                tried.push(a);
                if tried.len() < 3 {
                    Err(in_use())
                } else {
                    Ok(42)
                }
            })
            .unwrap();
        assert_eq!(t, 42);
        assert_eq!(a, "127.0.0.3:40000".parse().unwrap());
        assert_eq!(tried.len(), 3);
    }

    #[test]
    fn scan_stops_at_bound_and_on_other_errors() {
        let c = AddrConfig {
            max_loopback: 5,
            ..AddrConfig::loopback(40001)
        };
        let mut n = 0;
        let e = c
            .bind_with::<()>(|_| {
                n += 1;
                Err(in_use())
            })
            .unwrap_err();
        assert_eq!(n, 5);
        assert!(matches!(
            e,
            BindError::LoopbackExhausted {
                port: 40001,
                last: 5
            }
        ));
        let msg = e.to_string();
        assert!(msg.contains("127.0.0.5") && msg.contains("40001"), "{msg}");
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::AddrInUse);

        let mut n = 0;
        let e = c
            .bind_with::<()>(|_| {
                n += 1;
                Err(io::Error::from_raw_os_error(libc::EADDRNOTAVAIL))
            })
            .unwrap_err();
        assert_eq!(n, 1);
        assert!(matches!(e, BindError::NotAvailable { .. }));
        assert!(e.to_string().contains("127.0.0.1:40001"));
    }

    #[test]
    fn exact_address_errors_name_the_address() {
        let c = AddrConfig::exact("10.77.0.1:4791".parse().unwrap());
        let mut n = 0;
        let e = c
            .bind_with::<()>(|_| {
                n += 1;
                Err(in_use())
            })
            .unwrap_err();
        assert_eq!(n, 1, "an exact address is never scanned");
        assert!(matches!(e, BindError::InUse { .. }));
        assert!(e.to_string().contains("10.77.0.1:4791"));
        let e = c
            .bind_with::<()>(|_| Err(io::Error::from_raw_os_error(libc::EACCES)))
            .unwrap_err();
        assert!(matches!(e, BindError::Io { .. }));
        assert!(e.to_string().contains("10.77.0.1:4791"));
    }
}
