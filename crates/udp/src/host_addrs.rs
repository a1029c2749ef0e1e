//! The host's usable addresses (`getifaddrs`): what the host device's GID
//! table lists and where each member binds a steered socket.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The addresses of the interfaces that are up, in GID-table order:
/// `127.0.0.1` first if present, the other IPv4 addresses, `::1`, the other
/// IPv6 addresses; deduplicated. IPv6 link-local addresses (`fe80::/10`,
/// which need a zone) and multicast addresses are left out. Empty if the
/// interfaces cannot be read.
pub fn host_addrs() -> Vec<IpAddr> {
    let mut found = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: `getifaddrs` fills `head` with a list it allocated; the list is
    // only read while it lives (each node's `ifa_addr` is NULL or points to a
    // sockaddr of the family it names) and `freeifaddrs` frees it once, here.
    unsafe {
        if libc::getifaddrs(&mut head) != 0 {
            return found;
        }
        let mut p = head;
        while let Some(ifa) = p.as_ref() {
            p = ifa.ifa_next;
            if ifa.ifa_flags & libc::IFF_UP as libc::c_uint == 0 || ifa.ifa_addr.is_null() {
                continue;
            }
            match i32::from((*ifa.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*ifa.ifa_addr.cast::<libc::sockaddr_in>();
                    found.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        sin.sin_addr.s_addr,
                    ))));
                }
                libc::AF_INET6 => {
                    let sin6 = &*ifa.ifa_addr.cast::<libc::sockaddr_in6>();
                    found.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                }
                _ => {}
            }
        }
        libc::freeifaddrs(head);
    }
    order(found)
}

/// Filters and orders what the interfaces hold (see [`host_addrs`]).
fn order(found: Vec<IpAddr>) -> Vec<IpAddr> {
    let usable = |ip: &IpAddr| match ip {
        IpAddr::V4(a) => !a.is_unspecified() && !a.is_multicast(),
        IpAddr::V6(a) => {
            !a.is_unspecified() && !a.is_multicast() && (a.segments()[0] & 0xffc0) != 0xfe80
        }
    };
    let rank = |ip: &IpAddr| match ip {
        IpAddr::V4(a) if *a == Ipv4Addr::LOCALHOST => 0,
        IpAddr::V4(_) => 1,
        IpAddr::V6(a) if *a == Ipv6Addr::LOCALHOST => 2,
        IpAddr::V6(_) => 3,
    };
    let mut out: Vec<IpAddr> = Vec::new();
    for ip in found.into_iter().filter(usable) {
        if !out.contains(&ip) {
            out.push(ip);
        }
    }
    // Stable: the interfaces' order within each rank.
    out.sort_by_key(rank);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_address_watch_opens_unprivileged_and_is_quiet_without_changes() {
        let w = AddrWatch::open().unwrap();
        assert!(!w.drain(), "nothing changed since it opened");
    }

    #[test]
    fn loopback_first_and_no_link_local() {
        let a = host_addrs();
        assert_eq!(a.first(), Some(&IpAddr::V4(Ipv4Addr::LOCALHOST)), "{a:?}");
        assert!(
            !a.iter()
                .any(|ip| matches!(ip, IpAddr::V6(v) if (v.segments()[0] & 0xffc0) == 0xfe80)),
            "{a:?}"
        );
    }

    #[test]
    fn orders_and_filters() {
        let ips: Vec<IpAddr> = [
            "fe80::1",
            "2001:db8::1",
            "::1",
            "10.0.0.2",
            "127.0.0.1",
            "10.0.0.2",
            "ff02::1",
        ]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
        let want: Vec<IpAddr> = ["127.0.0.1", "10.0.0.2", "::1", "2001:db8::1"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(order(ips), want);
    }
}

/// A watch on the host's addresses: a `NETLINK_ROUTE` socket subscribed to
/// IPv4 and IPv6 address changes. It becomes readable when an address is
/// added or removed (register it with [`crate::Poller::add_fd`]); then
/// [`AddrWatch::drain`] and read [`host_addrs`] again.
#[derive(Debug)]
pub struct AddrWatch {
    fd: std::os::fd::OwnedFd,
}

impl AddrWatch {
    /// Opens the watch (non-blocking, closed on exec). Needs no privilege.
    pub fn open() -> std::io::Result<AddrWatch> {
        use std::os::fd::FromRawFd;
        // SAFETY: plain socket(2); the result is checked.
        let fd = unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor nobody else owns.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        // SAFETY: a zeroed sockaddr_nl is valid; the fields are set below.
        let mut sa: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        sa.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        sa.nl_groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
        use std::os::fd::AsRawFd;
        // SAFETY: `sa` is a valid sockaddr_nl of the size passed.
        let r = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sa as *const libc::sockaddr_nl).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(AddrWatch { fd })
    }

    /// Reads every pending notification; returns whether there was any (an
    /// overrun counts: addresses changed, how is unknown).
    pub fn drain(&self) -> bool {
        use std::os::fd::AsRawFd;
        let mut any = false;
        let mut buf = [0u8; 8192];
        loop {
            // SAFETY: `buf` is valid for writes of its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n > 0 {
                any = true;
                continue;
            }
            let e = std::io::Error::last_os_error();
            if n < 0 && e.raw_os_error() == Some(libc::ENOBUFS) {
                any = true;
                continue;
            }
            return any;
        }
    }
}

impl std::os::fd::AsFd for AddrWatch {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}
