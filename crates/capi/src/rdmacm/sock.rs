//! `struct sockaddr` ⇄ `std::net::SocketAddr`.

use libc::{AF_INET, AF_INET6, sockaddr, sockaddr_in, sockaddr_in6, sockaddr_storage};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Reads a C socket address (IPv4 or IPv6).
///
/// # Safety
///
/// `sa` must be NULL or point to a socket address of the size its family implies.
pub(crate) unsafe fn from_c(sa: *const sockaddr) -> Option<SocketAddr> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: non-NULL; the family field is common to all socket addresses.
    match i32::from(unsafe { (*sa).sa_family }) {
        AF_INET => {
            // SAFETY: AF_INET addresses are sockaddr_in.
            let a = unsafe { &*sa.cast::<sockaddr_in>() };
            Some(SocketAddr::new(
                IpAddr::V4(Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr))),
                u16::from_be(a.sin_port),
            ))
        }
        AF_INET6 => {
            // SAFETY: AF_INET6 addresses are sockaddr_in6.
            let a = unsafe { &*sa.cast::<sockaddr_in6>() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            // rdma_cm treats IPv4-mapped IPv6 addresses as IPv4.
            let ip = ip.to_ipv4_mapped().map_or(IpAddr::V6(ip), IpAddr::V4);
            Some(SocketAddr::new(ip, u16::from_be(a.sin6_port)))
        }
        _ => None,
    }
}

/// Writes a socket address into a `sockaddr_storage`.
pub(crate) fn to_storage(a: SocketAddr) -> sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut st: sockaddr_storage = unsafe { core::mem::zeroed() };
    match a {
        SocketAddr::V4(v) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
            let s = unsafe { &mut *(&raw mut st).cast::<sockaddr_in>() };
            s.sin_family = AF_INET as u16;
            s.sin_port = v.port().to_be();
            s.sin_addr.s_addr = u32::from(*v.ip()).to_be();
        }
        SocketAddr::V6(v) => {
            // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
            let s = unsafe { &mut *(&raw mut st).cast::<sockaddr_in6>() };
            s.sin6_family = AF_INET6 as u16;
            s.sin6_port = v.port().to_be();
            s.sin6_addr.s6_addr = v.ip().octets();
            s.sin6_scope_id = v.scope_id();
        }
    }
    st
}

/// The length of the C address for `a`.
pub(crate) fn len_of(a: SocketAddr) -> libc::socklen_t {
    match a {
        SocketAddr::V4(_) => size_of::<sockaddr_in>() as libc::socklen_t,
        SocketAddr::V6(_) => size_of::<sockaddr_in6>() as libc::socklen_t,
    }
}
