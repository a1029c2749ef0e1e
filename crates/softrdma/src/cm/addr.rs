//! Addresses: `rdma_getaddrinfo` and the reachability check behind
//! `rdma_resolve_addr`.

use super::error::{Error, Result};
use super::{PortSpace, qp_type_for};
use softrdma_transport::QpType;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

/// The longest wait for a "port unreachable" answer when resolving.
const PROBE_WAIT: Duration = Duration::from_millis(50);

/// Address families [`getaddrinfo`] may return.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AddrFamily {
    /// Either (IPv4 preferred: devices usually have an IPv4 address).
    #[default]
    Any,
    /// IPv4 only (`AF_INET`).
    V4,
    /// IPv6 only (`AF_INET6`).
    V6,
}

impl AddrFamily {
    fn admits(self, ip: &IpAddr) -> bool {
        match self {
            AddrFamily::Any => true,
            AddrFamily::V4 => ip.is_ipv4(),
            AddrFamily::V6 => ip.is_ipv6(),
        }
    }
}

/// Hints for [`getaddrinfo`] (`struct rdma_addrinfo` as hints).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrInfoHints {
    /// `RAI_PASSIVE`: the result is for listening (a source address; the
    /// wildcard when no node is given).
    pub passive: bool,
    /// `RAI_NUMERICHOST`: the node must be a numeric address.
    pub numeric_host: bool,
    /// Address family.
    pub family: AddrFamily,
    /// Port space (`ai_port_space`).
    pub port_space: PortSpace,
    /// QP type (`ai_qp_type`); `None`: RC for TCP, UD for UDP.
    pub qp_type: Option<QpType>,
    /// Source address for an active result (`ai_src_addr`).
    pub src: Option<SocketAddr>,
}

impl Default for AddrInfoHints {
    /// Active, any family, TCP port space.
    fn default() -> Self {
        AddrInfoHints {
            passive: false,
            numeric_host: false,
            family: AddrFamily::Any,
            port_space: PortSpace::Tcp,
            qp_type: None,
            src: None,
        }
    }
}

/// What [`getaddrinfo`] found (`struct rdma_addrinfo`); the input of
/// [`super::CmId::create_ep`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddrInfo {
    /// For listening.
    pub passive: bool,
    /// Local address (passive results; active ones if hinted).
    pub src: Option<SocketAddr>,
    /// Peer address (active results).
    pub dst: Option<SocketAddr>,
    /// Port space.
    pub port_space: PortSpace,
    /// QP type.
    pub qp_type: QpType,
    /// The node name looked up, if it was a name.
    pub canonname: Option<String>,
}

/// Resolves a node and service to CM addresses (`rdma_getaddrinfo`).
///
/// `node` is a numeric IPv4/IPv6 address or a host name (looked up with the
/// system resolver unless `hints.numeric_host`); `service` a port number or a
/// name from `/etc/services`. Without a node, a passive result gets the
/// wildcard address and an active one the loopback address.
pub fn getaddrinfo(
    node: Option<&str>,
    service: Option<&str>,
    hints: &AddrInfoHints,
) -> Result<AddrInfo> {
    let port = match service {
        None | Some("") => 0,
        Some(s) => service_port(s)?,
    };
    let qp_type = hints.qp_type.unwrap_or(qp_type_for(hints.port_space));
    let v6 = hints.family == AddrFamily::V6;
    let (addr, canonname) = match node {
        None | Some("") => {
            let ip = match (hints.passive, v6) {
                (true, false) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
                (true, true) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
                (false, false) => IpAddr::V4(Ipv4Addr::LOCALHOST),
                (false, true) => IpAddr::V6(Ipv6Addr::LOCALHOST),
            };
            (SocketAddr::new(ip, port), None)
        }
        Some(n) => lookup(n, port, hints)?,
    };
    Ok(AddrInfo {
        passive: hints.passive,
        src: if hints.passive { Some(addr) } else { hints.src },
        dst: (!hints.passive).then_some(addr),
        port_space: hints.port_space,
        qp_type,
        canonname,
    })
}

fn lookup(node: &str, port: u16, hints: &AddrInfoHints) -> Result<(SocketAddr, Option<String>)> {
    let literal = node
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>();
    if let Ok(ip) = literal {
        if !hints.family.admits(&ip) {
            return Err(Error::AddrInfo(format!(
                "{ip} is not of family {:?}",
                hints.family
            )));
        }
        return Ok((SocketAddr::new(ip, port), None));
    }
    if hints.numeric_host {
        return Err(Error::AddrInfo(format!(
            "{node:?} is not a numeric address"
        )));
    }
    let found: Vec<SocketAddr> = (node, port)
        .to_socket_addrs()
        .map_err(|e| Error::AddrInfo(format!("{node}: {e}")))?
        .filter(|a| hints.family.admits(&a.ip()))
        .collect();
    let best = found
        .iter()
        .find(|a| a.is_ipv4())
        .or_else(|| found.first())
        .copied()
        .ok_or_else(|| Error::AddrInfo(format!("{node}: no {:?} address", hints.family)))?;
    Ok((best, Some(node.to_string())))
}

/// A port number, or a service name from `/etc/services`.
fn service_port(s: &str) -> Result<u16> {
    if let Ok(p) = s.parse::<u16>() {
        return Ok(p);
    }
    let text = std::fs::read_to_string("/etc/services").unwrap_or_default();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut f = line.split_whitespace();
        let (Some(name), Some(pp)) = (f.next(), f.next()) else {
            continue;
        };
        if (name == s || f.any(|alias| alias == s))
            && let Some(p) = pp.split('/').next().and_then(|p| p.parse().ok())
        {
            return Ok(p);
        }
    }
    Err(Error::AddrInfo(format!("unknown service {s:?}")))
}

/// The check behind `rdma_resolve_addr`, like ARP for a NIC: the kernel must
/// route from `local` to `dst`, and a unicast `dst` must not answer "port
/// unreachable" on the RoCE port (no device there) within `timeout` (at most
/// 50 ms are spent waiting for that answer). Returns the errno of a failure.
pub(crate) fn probe_route(
    local: IpAddr,
    dst: IpAddr,
    roce_port: u16,
    timeout: Duration,
) -> std::result::Result<(), i32> {
    if dst.is_multicast() || dst == local {
        return Ok(());
    }
    let errno = |e: io::Error, or: i32| e.raw_os_error().unwrap_or(or);
    let s = UdpSocket::bind(SocketAddr::new(local, 0)).map_err(|e| errno(e, libc::ENODEV))?;
    s.connect(SocketAddr::new(dst, roce_port))
        .map_err(|e| errno(e, libc::ENETUNREACH))?;
    if local.is_loopback() != dst.is_loopback() {
        // A loopback device cannot reach other hosts, nor the other way round.
        return Err(libc::ENETUNREACH);
    }
    // One byte: a softrdma or rxe device drops it as malformed; an address
    // nobody listens on answers with ICMP port unreachable.
    s.send(&[0]).map_err(|e| errno(e, libc::ENETUNREACH))?;
    let wait = timeout.min(PROBE_WAIT);
    if wait.is_zero() {
        return Ok(());
    }
    s.set_read_timeout(Some(wait))
        .map_err(|e| errno(e, libc::EINVAL))?;
    let mut b = [0u8; 1];
    match s.recv(&mut b) {
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => Err(libc::EHOSTUNREACH),
        _ => Ok(()),
    }
}
